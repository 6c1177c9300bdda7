"""Storage that cannot be written: read-only storage is refused before anything is written (exit 2); a
storage that fills up mid-sweep (a small tmpfs) ends the sweep with exit 1, a summary, no RUNNING sweep
run and no temp files, and the rerun on good storage completes without retraining complete cells.

Both mount a real tmpfs, which needs root (or CAP_SYS_ADMIN); elsewhere they are skipped, saying why.
"""

import contextlib
import os
import subprocess

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.sweep.__main__ import main


@contextlib.contextmanager
def tmpfs(path, size, read_only=False):
    path.mkdir()
    options = f"size={size}" + (",ro" if read_only else "")
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", options, "tmpfs", str(path)], capture_output=True, text=True
    )
    if done.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.strip()}")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)
        path.rmdir()


def test_read_only_storage_exits_2_before_anything_is_written(tmp_path, tiny_sweep, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    with tmpfs(tmp_path / "ro", "1m", read_only=True) as storage:
        code = main(
            [str(path), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--storage", str(storage)]
        )
        err = capsys.readouterr().err
        assert code == 2
        assert err.splitlines()[0].startswith(f"error: cannot write to the storage {storage}/tiny:"), err
        assert "Read-only file system" in err and "Traceback" not in err
        assert list(storage.iterdir()) == []
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]


@pytest.mark.e2e
@pytest.mark.slow
def test_storage_filling_up_ends_with_a_summary_and_the_rerun_completes(tmp_path, tiny_sweep):
    tiny_sweep["name"] = "full"
    tiny_sweep["models"]["mlp"]["width"] = 1024  # checkpoints of ~68 KB: a few fit, then the disk is full
    tiny_sweep["grid"] = {"model": ["mlp"], "T": [2, 4, 8], "seed": [0]}
    tiny_sweep["run"] = {"pack": "off", "max_failures": 0}
    path = tmp_path / "full.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with tmpfs(tmp_path / "small", "200k") as storage:
        with open(tmp_path / "full.log", "w") as log:
            code = start_driver(path, uri, str(storage), log).wait(timeout=300)
        text = (tmp_path / "full.log").read_text()
        assert code == 1, text
        assert "Traceback" not in text.split("cells failed")[-1]
        assert "FAILED" in text or "the sweep stopped" in text, text
        assert not [p for p in storage.rglob("*") if p.name.endswith(".tmp")]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("full").experiment_id
    (parent,) = client.search_runs([experiment], "tags.kind = 'sweep'")
    assert parent.info.status == "FAILED"
    cells = client.search_runs([experiment], "tags.kind = 'cell'")
    assert all(r.info.status != "RUNNING" for r in cells)
    complete = {
        r.data.tags["cell_key"]: r.info.end_time for r in cells if r.data.tags["status"] == "complete"
    }

    with open(tmp_path / "rerun.log", "w") as log:
        assert start_driver(path, uri, str(tmp_path / "good"), log).wait(timeout=300) == 0, (
            tmp_path / "rerun.log"
        ).read_text()
    after = client.search_runs([experiment], "tags.kind = 'cell'")
    assert len(after) == 3 and all(r.data.tags["status"] == "complete" for r in after)
    for run in after:
        if run.data.tags["cell_key"] in complete:
            assert run.info.end_time == complete[run.data.tags["cell_key"]]  # not retrained
