"""Outages played for real against a subprocess driver: a real `mlflow server` on loopback stopped and
restarted mid-sweep, and Ctrl-C (SIGINT) to the driver followed by a rerun.

Both end with every cell complete exactly once, with its whole train/loss history (each step once).
"""

import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.planning.plan import load_plan
from scaling.trial.checkpoints import CheckpointStore

pytestmark = pytest.mark.e2e

STEPS, EVERY = 1200, 40


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def write_sweep(tmp_path, tiny_sweep, name):
    tiny_sweep["name"] = name
    tiny_sweep["defaults"]["train"].update(steps=STEPS, checkpoint_every=EVERY, log_every=EVERY)
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [4, "inf"]}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    return path


def wait_for_checkpoint(path, storage, driver, log_path, timeout=240):
    """Block until some cell of the sweep has a checkpoint (training is under way)."""
    plan = load_plan(path)
    store = CheckpointStore(f"{storage}/{plan.name}")
    deadline = time.monotonic() + timeout
    while not any(store.step(p.cell.key) for p in plan.cells):
        assert driver.poll() is None and time.monotonic() < deadline, log_path.read_text()[-5000:]
        time.sleep(0.1)
    return max(store.step(p.cell.key) or 0 for p in plan.cells)


def assert_every_cell_complete_once(uri, experiment, cells):
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], "tags.kind = 'cell'")
    assert sorted(r.data.tags["cell_key"] for r in runs) == sorted(cells)  # one run per cell
    for run in runs:
        assert run.data.tags["status"] == "complete" and run.info.status == "FINISHED"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(EVERY, STEPS + 1, EVERY)), run.info.run_name
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/err")) == [1, 2, 3, 4]
    return client, runs


class MlflowServer:
    """`mlflow server` on 127.0.0.1 with a SQLite store and proxied artifacts, all under ``root``."""

    def __init__(self, root):
        self.root, self.port = root, free_port()
        self.uri = f"http://127.0.0.1:{self.port}"
        self.process = None

    def start(self, timeout=120):
        command = [
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(self.port),
            "--backend-store-uri",
            f"sqlite:///{self.root}/server.db",
            "--serve-artifacts",
            "--artifacts-destination",
            str(self.root / "artifacts"),
        ]
        log = open(self.root / "server.log", "a")
        self.process = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.uri}/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                time.sleep(0.3)
        raise AssertionError(
            "mlflow server did not start:\n" + (self.root / "server.log").read_text()[-3000:]
        )

    def stop(self):
        if self.process and self.process.poll() is None:
            os.killpg(self.process.pid, signal.SIGTERM)  # the server and its uvicorn workers
            self.process.wait(timeout=60)


# a minute of a sweep through a real server stopped and restarted (slow); tests/test_s3_storage.py rides an
# outage in the default run
@pytest.mark.slow
def test_tracking_server_restarted_mid_sweep_loses_no_metric(tmp_path, tiny_sweep):
    path = write_sweep(tmp_path, tiny_sweep, "blink")
    storage = str(tmp_path / "storage")
    server = MlflowServer(tmp_path)
    server.start()
    log_path = tmp_path / "driver.log"
    try:
        with open(log_path, "w") as log:
            # No HTTP retries inside MLflow: the outage reaches our own retries and the loss buffer.
            driver = start_driver(
                path,
                server.uri,
                storage,
                log,
                MLFLOW_HTTP_REQUEST_MAX_RETRIES="0",
                MLFLOW_HTTP_REQUEST_TIMEOUT="5",
            )
            try:
                wait_for_checkpoint(path, storage, driver, log_path)
                server.stop()  # mid-training
                time.sleep(5)
                assert driver.poll() is None, log_path.read_text()[-5000:]
                server.start()
                code = driver.wait(timeout=400)
            finally:
                if driver.poll() is None:
                    driver.kill()
        assert code == 0, log_path.read_text()[-5000:]
        assert_every_cell_complete_once(server.uri, "blink", [p.cell.key for p in load_plan(path).cells])
    finally:
        server.stop()


# 26 s (slow); tests/test_cluster_driver.py interrupts a driver with SIGINT in the default run
@pytest.mark.slow
def test_ctrl_c_stops_cleanly_and_the_same_command_resumes(tmp_path, tiny_sweep):
    path = write_sweep(tmp_path, tiny_sweep, "sigint")
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    with open(tmp_path / "first.log", "w") as log:
        first = start_driver(path, uri, storage, log)
        try:
            wait_for_checkpoint(path, storage, first, tmp_path / "first.log")
            first.send_signal(signal.SIGINT)
            code = first.wait(timeout=180)
        finally:
            if first.poll() is None:
                first.kill()
    text = (tmp_path / "first.log").read_text()
    assert code == 130, text[-5000:]
    assert "interrupted; resume with the same command: python -m scaling.sweep" in text

    with open(tmp_path / "second.log", "w") as log:
        second = start_driver(path, uri, storage, log)
        assert second.wait(timeout=400) == 0, (tmp_path / "second.log").read_text()[-5000:]
    client, runs = assert_every_cell_complete_once(uri, "sigint", [p.cell.key for p in load_plan(path).cells])
    resumed = [m.value for r in runs for m in client.get_metric_history(r.info.run_id, "trial/resumed_from")]
    assert resumed and all(0 < step < STEPS for step in resumed)  # continued from checkpoints, not step 0
