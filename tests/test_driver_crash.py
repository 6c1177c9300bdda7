"""The driver killed with SIGKILL mid-sweep, then rerun: exactly one complete run per cell, no complete
cell retrained, partial cells continued from their checkpoints, and results equal to an uninterrupted run.
"""

import re
import signal
import time

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.e2e


def runs_by_key(uri):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("crash")
    return client, client.search_runs([exp.experiment_id], "tags.kind = 'cell'")


@pytest.mark.slow  # 40 s; tests/test_pack_e2e.py's packed sweep killed and rerun is the default run's check
def test_sigkill_then_rerun_loses_nothing_and_duplicates_nothing(tmp_path, tiny_sweep):
    tiny_sweep["name"] = "crash"
    # cells of ~1.5 s of training: the kill (polling the log every 0.5 s) lands before the third completes
    tiny_sweep["defaults"]["train"].update(steps=1200, checkpoint_every=100, log_every=100)
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [2, 4, 8], "seed": [0]}
    path = tmp_path / "crash.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")

    with open(tmp_path / "first.log", "w") as log:
        first = start_driver(path, uri, storage, log)
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline:  # kill once a cell is complete and another has begun
            text = (tmp_path / "first.log").read_text()
            if " 1/3 cells done" in text or " 2/3 cells done" in text:
                break
            time.sleep(0.5)
        else:
            first.kill()
            pytest.fail("the first driver never completed a cell:\n" + (tmp_path / "first.log").read_text())
        first.send_signal(signal.SIGKILL)
        first.wait()
    client, before = runs_by_key(uri)
    complete_before = {
        r.data.tags["cell_key"]: r.info.end_time for r in before if r.data.tags["status"] == "complete"
    }
    assert 1 <= len(complete_before) < 3

    with open(tmp_path / "second.log", "w") as log:
        second = start_driver(path, uri, storage, log)
        assert second.wait(timeout=300) == 0, (tmp_path / "second.log").read_text()
    text = (tmp_path / "second.log").read_text()
    # The killed driver's trial can still finish the cell it was training before Ray notices the driver is
    # gone, so the rerun may find more complete cells than were counted after the kill, never fewer.
    header = re.search(r"(\d+) of 3 cells to run \((\d+) already complete\)", text)
    assert header, text
    to_run, already = int(header[1]), int(header[2])
    assert to_run + already == 3 and len(complete_before) <= already < 3, text

    client, after = runs_by_key(uri)
    assert len(after) == 3 and len({r.data.tags["cell_key"] for r in after}) == 3
    assert all(r.data.tags["status"] == "complete" and r.info.status == "FINISHED" for r in after)
    for run in after:
        key = run.data.tags["cell_key"]
        if key in complete_before:
            assert run.info.end_time == complete_before[key]  # not retrained, not touched
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(100, 1201, 100))  # whole history, no duplicates

    # Equal to an uninterrupted run of the same cells (same device, same seed).
    tiny_sweep["name"] = "crash-clean"
    clean = tmp_path / "clean.yaml"
    clean.write_text(yaml.safe_dump(tiny_sweep))
    clean_uri = f"sqlite:///{tmp_path}/clean.db"
    with open(tmp_path / "clean.log", "w") as log:
        assert start_driver(clean, clean_uri, str(tmp_path / "storage2"), log).wait(timeout=300) == 0
    clean_client = MlflowClient(clean_uri)
    clean_runs = clean_client.search_runs(
        [clean_client.get_experiment_by_name("crash-clean").experiment_id], "tags.kind = 'cell'"
    )
    resumed = {r.data.tags["cell_key"]: r.data.metrics["eval/err"] for r in after}
    uninterrupted = {r.data.tags["cell_key"]: r.data.metrics["eval/err"] for r in clean_runs}
    assert resumed == uninterrupted
