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
