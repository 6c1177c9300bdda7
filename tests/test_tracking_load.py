"""The cluster's tracking server holds a cluster's trials (issue 36): 256 trial processes at once, each a
cell's life through scaling.tracking, against the shipped configuration (cluster/start_mlflow.sh: its own
PostgreSQL, its pool and workers) on loopback. Slow (about 10 minutes on 2 cores); run it with
``python -m pytest -m slow tests/test_tracking_load.py``. The numbers it prints are the load test's
(benchmarks/tracking_load.py, docs/results.md)."""

import json

import pytest

from benchmarks import tracking_load
from tests.test_cluster_yaml import postgres_missing


@pytest.mark.slow
def test_256_trials_at_once_on_the_shipped_postgresql_server_lose_nothing():
    missing = postgres_missing()
    if missing:
        pytest.skip(missing)
    report = tracking_load.run("postgresql", "shipped", trials=256)
    print(json.dumps(report, indent=1))
    assert report["failed_trials"] == 0, report["failures"]
    assert report["run_problems"] == 0, report["problems"]  # every run complete, every point once
    assert report["retried_pct"] < 1.0, report["http_errors"]


@pytest.mark.slow
def test_a_load_test_stopped_by_sigterm_leaves_no_server_trial_or_folder(tmp_path):
    """``timeout`` (SIGTERM to the process and its group) while the trials log: the run says it stopped,
    exits 130, and its server (its own session), its trials and its temporary folder are gone."""
    import os
    import signal
    import subprocess
    import sys
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    command = [sys.executable, "-m", "benchmarks.tracking_load", "--db", "sqlite", "--trials", "32"]
    proc = subprocess.Popen(command, env=env, stderr=subprocess.PIPE, text=True, start_new_session=True)
    deadline = time.monotonic() + 300
    while not list(tmp_path.glob("tracking-load-*/mlflow/server.pid")):  # the server is up
        assert proc.poll() is None and time.monotonic() < deadline, proc.stderr.read()
        time.sleep(0.5)
    time.sleep(5)  # the trials are logging
    os.killpg(proc.pid, signal.SIGTERM)
    _, err = proc.communicate(timeout=180)
    assert proc.returncode == 130, err
    assert "the server and the trials were stopped" in err
    left = subprocess.run(["pgrep", "-f", str(tmp_path)], capture_output=True, text=True).stdout.split()
    assert left == [] and list(tmp_path.iterdir()) == []
