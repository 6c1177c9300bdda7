"""Whole sweeps with ``--storage s3://...`` on a real S3 API server on loopback (moto's, behind a relay the
test stops: tests/s3_server.py), the credentials in the URI (slow):

- the driver killed with SIGKILL mid-sweep and rerun: every cell complete once, its whole loss history once,
  the finished cells not retrained, the checkpoints and Tune's state in the bucket;
- the endpoint stopped for 45 s mid-sweep: the trials wait and retry, the sweep ends with exit 0 and no
  trial failed or restarted, the driver says so once, nothing is lost;
- in both, the secret key is in no log line, no object of the bucket, no MLflow param or tag.

    python -m pytest -m slow tests/test_s3_sweep.py
"""

import re
import signal
import time

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient
from s3_server import SECRET_KEY, s3_server

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

STEPS, EVERY = 1200, 100


def write_sweep(tmp_path, tiny_sweep, name, seeds):
    tiny_sweep["name"] = name
    tiny_sweep["defaults"]["train"].update(steps=STEPS, checkpoint_every=EVERY, log_every=EVERY)
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [4], "seed": seeds}
    tiny_sweep["run"] = {"pack": "off"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    return path, f"sqlite:///{tmp_path}/mlflow.db"


def cells(uri, name):
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name).experiment_id
    return client, client.search_runs([experiment], "tags.kind = 'cell'")


def check_complete_once(client, runs, count):
    assert len(runs) == count and len({r.data.tags["cell_key"] for r in runs}) == count
    for run in runs:
        assert run.data.tags["status"] == "complete", run.data.tags
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(EVERY, STEPS + 1, EVERY))  # whole history, every point once


def check_secret_nowhere(s3, client, runs, logs):
    for log in logs:
        assert SECRET_KEY not in log.read_text(), f"the secret key is in {log.name}"
    assert not [key for key, blob in s3.objects().items() if SECRET_KEY.encode() in blob]
    experiment = runs[0].info.experiment_id
    for run in client.search_runs([experiment]):  # the cells and the sweep's parent run
        values = [*run.data.params.values(), *run.data.tags.values()]
        assert not [v for v in values if SECRET_KEY in v], run.info.run_name


def wait_for(condition, log, driver, timeout=300):
    deadline = time.monotonic() + timeout
    while not condition():
        assert driver.poll() is None and time.monotonic() < deadline, log.read_text()
        time.sleep(0.3)


def test_s3_sweep_killed_then_rerun_loses_and_repeats_nothing(tmp_path, tiny_sweep):
    path, uri = write_sweep(tmp_path, tiny_sweep, "s3crash", [0, 1, 2])
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with s3_server(tmp_path / "moto.log") as s3:
        storage = s3.uri()
        with open(first_log, "w") as log:
            first = start_driver(path, uri, storage, log, "--num-cpus", "1")
            try:
                wait_for(lambda: " 1/3 cells done" in first_log.read_text(), first_log, first)
            finally:
                first.send_signal(signal.SIGKILL)
                first.wait()
        client, before = cells(uri, "s3crash")
        done_before = {
            r.data.tags["cell_key"]: r.info.end_time for r in before if r.data.tags["status"] == "complete"
        }
        assert 1 <= len(done_before) < 3
        assert any(k.endswith("/state.pt") for k in s3.objects("runs/s3crash/checkpoints"))

        with open(second_log, "w") as log:
            assert start_driver(path, uri, storage, log).wait(timeout=300) == 0, second_log.read_text()
        header = re.search(r"(\d+) of 3 cells to run \((\d+) already complete\)", second_log.read_text())
        assert header and int(header[2]) >= len(done_before), second_log.read_text()
        client, after = cells(uri, "s3crash")
        check_complete_once(client, after, 3)
        for run in after:  # finished cells were not retrained
            key = run.data.tags["cell_key"]
            assert key not in done_before or run.info.end_time == done_before[key]
        assert any("/runs/s3crash/tune/" in key for key in s3.objects("runs/s3crash/tune"))
        check_secret_nowhere(s3, client, after, [first_log, second_log])


def test_s3_endpoint_down_45_s_mid_sweep_is_ridden_through(tmp_path, tiny_sweep):
    path, uri = write_sweep(tmp_path, tiny_sweep, "s3outage", [0, 1, 2, 3])
    log_path = tmp_path / "sweep.log"
    with s3_server(tmp_path / "moto.log") as s3:
        with open(log_path, "w") as log:
            driver = start_driver(path, uri, s3.uri(), log)
            try:
                # mid-sweep: a cell has checkpointed, none is complete yet
                wait_for(lambda: s3.objects("runs/s3outage/checkpoints"), log_path, driver)
                s3.relay.stop()
                stopped = time.monotonic()
                time.sleep(45)
                s3.relay.start()
                code = driver.wait(timeout=600)
            finally:
                if driver.poll() is None:
                    driver.kill()
        text = log_path.read_text()
        assert code == 0, text
        assert time.monotonic() - stopped > 45
        said = [line for line in text.splitlines() if "does not answer" in line]
        assert len(said) == 1 and "the trials waited for it and went on" in said[0], text
        assert "FAILED" not in text and "retrying" not in text.replace(said[0], ""), text
        client, runs = cells(uri, "s3outage")
        check_complete_once(client, runs, 4)
        for run in runs:  # no trial restarted: each cell trained in one go
            assert not client.get_metric_history(run.info.run_id, "trial/resumed_from")
        check_secret_nowhere(s3, client, runs, [log_path])
