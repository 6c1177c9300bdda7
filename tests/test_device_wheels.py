"""cluster/device_wheels.py: wheels split into carry folders under the device call's limit are put back
together byte for byte on the other side."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
spec = importlib.util.spec_from_file_location("device_wheels", ROOT / "cluster" / "device_wheels.py")
device_wheels = importlib.util.module_from_spec(spec)
spec.loader.exec_module(device_wheels)


def test_wheels_split_under_the_limit_join_to_the_same_bytes(tmp_path):
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    sizes = {"ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl": 2500, "mlflow-3.17.2-py3-none-any.whl": 900}
    sizes.update({f"small{i}-1.0-py3-none-any.whl": 120 + i for i in range(5)})
    for name, size in sizes.items():
        (wheels / name).write_bytes(bytes((i * 7 + len(name)) % 251 for i in range(size)))
    folders = device_wheels.split(wheels, tmp_path / "checkout", limit=1000)
    assert [f.name for f in folders] == [f".dw-{i}" for i in range(1, len(folders) + 1)]
    assert all(sum(f.stat().st_size for f in folder.iterdir()) <= 1000 for folder in folders)
    assert len(folders) == -(-sum(sizes.values()) // 1000)  # folders filled, parts where a wheel spills
    joined = device_wheels.join(tmp_path / "there", folders)
    assert sorted(w.name for w in joined) == sorted(sizes)
    for wheel in joined:
        assert wheel.read_bytes() == (wheels / wheel.name).read_bytes()
