"""cluster/device_wheels.py: the project's packages for a GPU machine without internet. Wheels bundled into
one file (installed by pip into one folder, the parts no sweep uses left out, xz) are unpacked there by the
standard library into an importable folder; a bundle over the limit is refused with nothing written; the
offline requirements are the project's, torch left to the machine."""

import importlib.util
import io
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("device_wheels", ROOT / "cluster" / "device_wheels.py")
device_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_wheels)


def wheel(directory: Path, name: str, files: dict[str, str]) -> Path:
    """A real (pure-Python) wheel of package ``name`` 1.0 holding ``files``."""
    info = f"{name}-1.0.dist-info"
    path = directory / f"{name}-1.0-py3-none-any.whl"
    contents = {
        **files,
        f"{info}/METADATA": f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n",
        f"{info}/WHEEL": "Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n",
    }
    record = "".join(f"{f},,\n" for f in [*contents, f"{info}/RECORD"])
    with zipfile.ZipFile(path, "w") as zipped:
        for name_, text in {**contents, f"{info}/RECORD": record}.items():
            zipped.writestr(name_, text)
    return path


@pytest.fixture
def wheels(tmp_path) -> Path:
    folder = tmp_path / "wheels"
    folder.mkdir()
    wheel(folder, "ray", {"ray/__init__.py": "VERSION = 'r'\n", "ray/jars/big.jar": "x" * 5000})
    wheel(folder, "mlflow", {"mlflow/__init__.py": "", "mlflow/server/js/build/index.html": "<html/>"})
    wheel(folder, "mlflow_skinny", {"mlflow/tracking.py": "URI = 'sqlite'\n"})  # the same package, merged
    return folder


def test_a_bundle_unpacks_there_into_an_importable_folder_without_the_unused_parts(wheels, tmp_path):
    out = tmp_path / "checkout" / ".dw" / "site.tar.xz"
    size = device_wheels.bundle(wheels, out, python="3.12")
    assert out.stat().st_size == size
    target = tmp_path / "there"
    unpacked = subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "device_wheels.py"), "unpack", str(out), str(target)],
        capture_output=True,
        text=True,
    )
    assert unpacked.returncode == 0, unpacked.stderr
    code = "import ray, mlflow.tracking; print(ray.VERSION, mlflow.tracking.URI)"
    found = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(target)},
                           capture_output=True, text=True)  # fmt: skip
    assert found.stdout.split() == ["r", "sqlite"], found.stderr
    assert (
        not (target / "ray" / "jars").exists()
        and not (target / "mlflow" / "server" / "js" / "build").exists()
    )
    assert (target / "ray-1.0.dist-info").is_dir()


def test_on_a_python_without_tarfiles_data_filter_the_bundle_unpacks_the_same(wheels, tmp_path, monkeypatch):
    """Python 3.11.0-3.11.3 (Debian 12's python3 is 3.11.2) have no ``extractall(filter=...)``: the same files
    are unpacked by the module's own checks."""
    out = tmp_path / "site.tar.xz"
    device_wheels.bundle(wheels, out, python="3.12")
    device_wheels.unpack(out, tmp_path / "filtered")
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    device_wheels.unpack(out, tmp_path / "checked")

    def files(root: Path) -> dict[str, bytes]:
        return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}

    assert files(tmp_path / "checked") == files(tmp_path / "filtered") != {}


@pytest.mark.parametrize(
    "member",
    [
        ("../outside.txt", tarfile.REGTYPE, ""),
        ("/tmp/absolute.txt", tarfile.REGTYPE, ""),
        ("pkg/link", tarfile.SYMTYPE, "../../outside.txt"),
        ("pkg/hard", tarfile.LNKTYPE, "../outside.txt"),
        ("pkg/fifo", tarfile.FIFOTYPE, ""),
    ],
    ids=["parent", "absolute", "symlink-out", "hardlink-out", "fifo"],
)
def test_without_the_data_filter_a_member_leaving_the_folder_is_refused_and_nothing_written(
    tmp_path, monkeypatch, member
):
    name, kind, link = member
    bundled = tmp_path / "bad.tar.xz"
    with tarfile.open(bundled, "w:xz") as tar:
        good = tarfile.TarInfo("pkg/__init__.py")
        good.size = 3
        tar.addfile(good, io.BytesIO(b"x=1"))
        bad = tarfile.TarInfo(name)
        bad.type, bad.linkname = kind, link
        tar.addfile(bad, io.BytesIO(b""))
    monkeypatch.delattr(tarfile, "data_filter", raising=False)
    target = tmp_path / "there"
    with pytest.raises(SystemExit, match="nothing unpacked"):
        device_wheels.unpack(bundled, target)
    assert list(target.iterdir()) == [] and not (tmp_path / "outside.txt").exists()


def test_a_bundle_over_the_limit_is_refused_and_nothing_is_written(wheels, tmp_path):
    out = tmp_path / ".dw" / "site.tar.xz"
    with pytest.raises(SystemExit, match="over the 0 MiB a call carries"):
        device_wheels.bundle(wheels, out, limit=100)
    assert not out.exists()


def test_the_offline_requirements_are_the_projects_but_torch():
    wanted = device_wheels.project_requirements()
    assert not [r for r in wanted if r.startswith("torch")]
    assert any(r.startswith("ray[tune]") for r in wanted) and any(r.startswith("mlflow") for r in wanted)
    assert any(r.startswith("transformers") for r in wanted)
    assert set(device_wheels.pip_target("3.12")) >= {"--only-binary=:all:", "--python-version", "3.12"}
