"""The project's Python packages for a GPU machine without internet access (docs/gpu.md): downloaded here as
wheels for that machine's Python, carried over, installed there with no package index.

    python cluster/device_wheels.py download wheels/ --python 3.12   # here: the project's dependencies
    python -m pip install --no-index --find-links wheels/ -r wheels/requirements.txt   # there

``download`` resolves the dependencies of pyproject.toml (all but torch: a GPU machine brings the CUDA
build of torch it was set up with) for CPython ``--python`` on x86-64 Linux and writes them, with the
``requirements.txt`` that names them, into the folder. ``--image`` downloads instead only what the lent GPU
machine's image lacks (``IMAGE_LACKS``: Ray with Tune, MLflow with its SQL store and what they need, pinned
to the project's tested versions, no dependencies resolved), and ``bundle`` makes of those wheels one
compressed file under a device call's 64 MiB (benchmarks/README.md, "The lent GPU machine"): installed into
one folder here, the parts no sweep uses left out (``UNUSED``), packed with xz. ``unpack`` (standard library
only: it runs there before anything is installed) puts the folder back:

    python cluster/device_wheels.py download /tmp/device-wheels --image
    python cluster/device_wheels.py bundle /tmp/device-wheels .dw/site.tar.xz
    python3 cluster/device_wheels.py unpack .dw/site.tar.xz /tmp/site   # there; then PYTHONPATH=/tmp/site
"""

from __future__ import annotations

import argparse
import lzma
import shutil
import subprocess
import sys
import tarfile
import tempfile
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
LIMIT = 58 * 2**20  # a bundle: the 64 MiB a device call carries, less the checkout (~3.3 MiB) and a margin
# What the sweep needs beyond the lent device image's packages (its list: /work/.library/device/KINDS.md),
# pinned to the versions of the project's tested environment: Ray with Tune, MLflow with its SQL store, and
# their needs.
IMAGE_LACKS = (
    "ray==2.60.0",
    "tensorboardx==2.6.5",
    "jsonschema==4.26.0",
    "jsonschema-specifications==2025.9.1",
    "referencing==0.37.0",
    "rpds-py==2026.9.1",
    "mlflow==3.17.2",
    "mlflow-skinny==3.17.2",
    "mlflow-tracing==3.17.2",
    "alembic==1.20.1",
    "sqlalchemy==2.1.9",
    "mako==1.4.3",
    "sqlparse==0.6.1",
    "graphene==3.4.3",
    "graphql-core==3.2.14",
    "graphql-relay==3.2.0",
    "flask==3.1.3",
    "flask-cors==6.0.5",
    "blinker==1.9.0",
    "itsdangerous==2.2.0",
    "gunicorn==26.2.0",
    "huey==3.5.4",
    "fastapi==0.165.0",
    "starlette==1.10.0",
    "uvicorn==0.54.0",
    "pydantic==2.14.4",
    "pydantic-core==2.50.5",
    "annotated-types==0.8.0",
    "typing-inspection==0.4.5",
    "cachetools==7.3.3",
    "cryptography==50.0.2",
    "cffi==2.1.1",
    "pycparser==3.12",
    "databricks-sdk==0.162.0",
    "google-auth==2.63.0",
    "pyasn1==0.6.5",
    "pyasn1-modules==0.4.2",
    "docker==7.2.0",
    "gitpython==3.2.1",
    "gitdb==4.0.12",
    "smmap==5.0.3",
    "importlib-metadata==9.1.0",
    "opentelemetry-api==1.45.2",
    "opentelemetry-proto==1.45.2",
    "opentelemetry-sdk==1.45.2",
    "opentelemetry-semantic-conventions==0.66b2",
    "prettytable==3.18.0",
    "wcwidth==0.9.4",
    "python-dotenv==1.2.4",
    "skops==0.16.0",
)
PLATFORMS = ("manylinux_2_28_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64", "manylinux1_x86_64")
# Left out of a bundle: what a sweep never imports (checked: a sweep through Ray Tune and MLflow runs with
# them gone, tests/test_device_wheels.py), ~150 MB of the 323 MB installed: Ray's Java workers, RLlib,
# Serve, its LLM library and the dashboard's web pages, MLflow's web UI.
UNUSED = (
    "ray/jars",
    "ray/rllib",
    "ray/serve",
    "ray/llm",
    "ray/dashboard/client/build",
    "mlflow/server/js/build",
)


def pip_target(python: str) -> list[str]:
    """pip's options for wheels of CPython ``python`` (e.g. 3.12) on x86-64 Linux, binaries only."""
    platforms = [arg for platform in PLATFORMS for arg in ("--platform", platform)]
    return ["--only-binary=:all:", "--python-version", python, "--implementation", "cp", *platforms]


def project_requirements(pyproject: Path = ROOT / "pyproject.toml") -> list[str]:
    """The project's dependencies (pyproject.toml), torch left out: the GPU machine has its CUDA build."""
    dependencies = tomllib.loads(pyproject.read_text())["project"]["dependencies"]
    return [
        d for d in dependencies if not d.replace(" ", "").lower().startswith(("torch=", "torch>", "torch<"))
    ]


def download(directory: Path, python: str = "3.12", image: bool = False) -> None:
    """pip download of the project's dependencies (resolved) or, with ``image``, of IMAGE_LACKS (pinned, no
    dependencies) for CPython ``python`` on x86-64 Linux; the first also writes requirements.txt."""
    directory.mkdir(parents=True, exist_ok=True)
    wanted = list(IMAGE_LACKS) if image else project_requirements()
    pip = [sys.executable, "-m", "pip", "download", *pip_target(python), "-d", str(directory)]
    subprocess.run([*pip, *(["--no-deps"] if image else []), *wanted], check=True)
    if not image:
        (directory / "requirements.txt").write_text("\n".join(wanted) + "\n")


def bundle(directory: Path, out: Path, python: str = "3.12", limit: int = LIMIT) -> int:
    """The wheels of ``directory`` installed into one folder (pip --target, no dependencies resolved, no
    bytecode), UNUSED left out, packed as ``out`` (tar, xz); its size. Raises SystemExit when it is over
    ``limit`` (nothing written)."""
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        wheels = sorted(str(w) for w in directory.glob("*.whl"))
        if not wheels:
            raise SystemExit(f"bundle: no wheels in {directory}")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-compile", "--no-index"]
        subprocess.run([*pip, "--target", str(site), *pip_target(python), *wheels], check=True)
        for path in UNUSED:
            shutil.rmtree(site / path, ignore_errors=True)
        packed = Path(tmp) / "site.tar.xz"
        with tarfile.open(packed, "w:xz", preset=9 | lzma.PRESET_EXTREME) as tar:
            for entry in sorted(site.iterdir()):
                tar.add(entry, arcname=entry.name)
        size = packed.stat().st_size
        if size > limit:
            raise SystemExit(
                f"bundle: {size / 2**20:.1f} MiB, over the {limit / 2**20:.0f} MiB a call carries"
            )
        out.parent.mkdir(parents=True, exist_ok=True)
        shutil.move(packed, out)
    return size


def unpack(bundled: Path, target: Path) -> None:
    """The bundle's folder into ``target`` (standard library only), refusing, before anything is written, a
    member that would land outside ``target`` or is not a file, a folder or a link within it: tarfile's
    "data" filter where this Python has it (3.11.4 and later), the same checks here on an earlier 3.11
    (``filter=`` raises TypeError there)."""
    target.mkdir(parents=True, exist_ok=True)
    with tarfile.open(bundled, "r:xz") as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(target, filter="data")
        else:
            tar.extractall(target, members=inside(tar, target))


def inside(tar: tarfile.TarFile, target: Path) -> list[tarfile.TarInfo]:
    """The archive's members, each checked to be a file, a folder or a link that stays within ``target``;
    SystemExit naming the first that is not."""
    root = target.resolve()

    def within(path: Path) -> bool:
        return path == root or root in path.parents

    members = tar.getmembers()
    for member in members:
        path = (root / member.name).resolve()
        if member.issym():
            ok = within(path) and within((path.parent / member.linkname).resolve())
        elif member.islnk():
            ok = within(path) and within((root / member.linkname).resolve())
        else:
            ok = within(path) and (member.isfile() or member.isdir())
        if not ok:  # an absolute name too: root / name is that name, outside root
            raise SystemExit(
                f"{tar.name}: {member.name!r} would be written outside {target}, or is not a file, folder"
                f" or link; nothing unpacked"
            )
    return members


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python cluster/device_wheels.py", description=__doc__.split("\n\n")[0]
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    down = verbs.add_parser("download", help="pip download of the wheels")
    down.add_argument("directory", type=Path)
    down.add_argument("--python", default="3.12", help="the GPU machine's Python, e.g. 3.12 (default)")
    down.add_argument("--image", action="store_true", help="only what the lent GPU machine's image lacks")
    packing = verbs.add_parser("bundle", help="the wheels as one file under a device call's 64 MiB")
    packing.add_argument("directory", type=Path)
    packing.add_argument("out", type=Path)
    packing.add_argument("--python", default="3.12", help="the GPU machine's Python (default 3.12)")
    unpacking = verbs.add_parser("unpack", help="there: the bundle's folder (then PYTHONPATH=TARGET)")
    unpacking.add_argument("bundle", type=Path)
    unpacking.add_argument("target", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "download":
        download(args.directory, args.python, args.image)
    elif args.verb == "bundle":
        size = bundle(args.directory, args.out, args.python)
        print(f"{args.out} {size / 2**20:.1f} MiB")
    else:
        unpack(args.bundle, args.target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
