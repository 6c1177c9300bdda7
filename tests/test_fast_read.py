"""The database store's fast search (scaling.tracking.database) finds what MLflow's search_runs finds: the
same runs in the same order with the same params, tags and metrics, on a real SQLite store holding a deleted
run, a failed run, twin runs of one cell, runs without a name, a NaN metric, runs of one start time and a
second experiment."""

import math
import subprocess
import sys

import pandas as pd
import pytest

from scaling.tracking import BARE, Columns, TrackingError, adaptive_waves
from scaling.tracking.backends import existing_store, open_store
from scaling.tracking.database import TABLES, DatabaseTracker
from scaling.tracking.table import TABLE_READS
from scaling.tracking.tracker import Tracker


def cell_run(client, experiment, key, params, status="complete", start=None, name=None, losses=()):
    tags = {"kind": "cell", "sweep": "s", "cell_key": key, "status": status}
    run = client.create_run(experiment, run_name=name, tags=tags, start_time=start)
    run_id = run.info.run_id
    for k, v in params.items():
        client.log_param(run_id, k, v)
    for step, value in enumerate(losses):
        client.log_metric(run_id, "train/loss", value, step=step)
    client.log_metric(run_id, "eval/err", 0.5)
    return run_id


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """A store of two experiments: in the first a sweep's parent run and its cell runs, one of each kind
    a real sweep leaves behind."""
    uri = f"sqlite:///{tmp_path_factory.mktemp('fast') / 'mlflow.db'}"
    tracker = Tracker(uri)
    client = tracker.client
    first = tracker.experiment_id("s", create=True)
    other = tracker.experiment_id("t", create=True)
    client.create_run(first, run_name="sweep s", tags={"kind": "sweep", "sweep": "s"})
    for seed in range(3):
        cell_run(
            client,
            first,
            f"k{seed}",
            {"T": "16", "N": "4", "seed": str(seed), "model.arch": "mlp"},
            losses=(1.0, 0.5 + seed),
        )
    failed = cell_run(client, first, "kf", {"T": "inf", "N": "4", "seed": "0"}, status="failed")
    client.set_tag(failed, "error", "Traceback ...\nValueError: boom")
    client.set_terminated(failed, "FAILED")
    cell_run(client, first, "twin", {"T": "16", "N": "8", "seed": "0"}, status="running", start=1000)
    cell_run(client, first, "twin", {"T": "16", "N": "8", "seed": "0"}, start=1000)  # one start time
    cell_run(client, first, "nameless", {"T": "2", "N": "4", "seed": "0"}, name="")
    deleted = cell_run(client, first, "gone", {"T": "16", "N": "4", "seed": "9"})
    client.delete_run(deleted)
    nan = cell_run(client, first, "nan", {"T": "4", "N": "4", "seed": "1", "model.name": "it's"})
    client.log_metric(nan, "eval/err", math.nan)
    cell_run(client, other, "k0", {"T": "16", "N": "4", "seed": "0"})
    return uri, first, other


QUERIES = [  # (search, how many runs of the first experiment it finds)
    ({}, 9),
    ({"tags": {"kind": "cell"}}, 8),
    ({"tags": {"kind": "cell", "status": "complete"}}, 6),
    ({"tags": {"kind": "cell"}, "params": {"T": "16"}}, 5),
    ({"tags": {"kind": "cell"}, "params": {"T": "16", "N": "4"}, "columns": BARE}, 3),
    ({"tags": {"kind": "cell"}, "params": {"model.arch": "mlp"}}, 3),
    ({"tags": {"cell_key": "twin", "kind": "cell"}}, 2),
    ({"tags": {"kind": "sweep", "sweep": "s"}, "columns": BARE, "limit": 1}, 1),
    ({"tags": {"kind": "cell"}, "limit": 2}, 2),
    ({"tags": {"kind": "cell"}, "columns": TABLE_READS}, 8),
    ({"tags": {"kind": "cell"}, "columns": Columns(params=("job", "T"), metrics=("eval/err",), tags=())}, 8),
    ({"tags": {"kind": "nothing"}}, 0),
    ({"params": {"seed": "9"}}, 0),  # only the deleted run has it
]


@pytest.mark.parametrize("query,count", QUERIES, ids=[str(q) for q, _ in QUERIES])
def test_the_fast_search_finds_what_mlflow_finds(store, query, count):
    uri, first, other = store
    fast, mlflow = DatabaseTracker.existing(uri), Tracker.existing(uri)
    for experiment in (first, other):
        expected = mlflow.find_runs(experiment, **query)
        found = fast.find_runs(experiment, **query)
        assert [comparable(r) for r in found] == [comparable(r) for r in expected]
        if experiment == first:
            assert len(found) == count


def comparable(record):
    """A record's fields and the order of its keys (a table's columns follow them), NaN made comparable."""
    metrics = [(k, "nan" if math.isnan(v) else v) for k, v in record.metrics.items()]
    return (
        *(getattr(record, f) for f in ("run_id", "name", "experiment_id", "cell_key", "status", "state")),
        *(getattr(record, f) for f in ("artifact_uri", "start_time", "end_time")),
        list(record.tags.items()),
        list(record.params.items()),
        metrics,
    )


def test_the_fast_search_reads_what_the_store_holds(store):
    uri, first, _ = store
    runs = DatabaseTracker.existing(uri).find_runs(first, tags={"kind": "cell"})
    keys = [r.cell_key for r in runs]
    assert "gone" not in keys and keys.count("twin") == 2 and len(runs) == 8
    by_key = {r.cell_key: r for r in runs if r.cell_key != "twin"}
    assert by_key["kf"].state == "FAILED" and by_key["kf"].tags["error"].endswith("boom")
    assert math.isnan(by_key["nan"].metrics["eval/err"]) and by_key["nan"].params["model.name"] == "it's"
    assert by_key["k2"].metrics["train/loss"] == 2.5  # the latest value
    assert by_key["nameless"].name  # MLflow names a run created without one


def test_database_stores_get_the_fast_search(store):
    uri = store[0]
    assert type(existing_store(uri)) is DatabaseTracker and type(open_store(uri)) is DatabaseTracker
    assert type(open_store("http://127.0.0.1:1")) is Tracker  # a server: MLflow's paged search


def test_the_tables_read_are_mlflows_own():
    """database.TABLES names MLflow's tables and columns, with the types its models give them."""
    import sqlalchemy
    from mlflow.store.tracking.dbmodels import models

    tables = (models.SqlRun, models.SqlTag, models.SqlParam, models.SqlLatestMetric, models.SqlExperiment)
    for model in (*tables, models.SqlExperimentTag):
        table = model.__table__
        for column, type_ in TABLES[table.name].items():
            assert isinstance(table.c[column].type, getattr(sqlalchemy, type_)), (table.name, column)
    assert set(TABLES) == {"runs", "tags", "params", "latest_metrics", "experiments", "experiment_tags"}


def test_experiments_are_looked_up_as_mlflow_looks_them_up(store):
    uri, first, other = store
    fast, mlflow = DatabaseTracker.existing(uri), Tracker.existing(uri)
    for name in ("s", "t", "nothing", "S"):
        assert fast.experiment_id(name) == mlflow.experiment_id(name)
    mlflow.client.set_experiment_tag(first, "sweep_file", "s.yaml")
    for experiment in (first, other):
        assert fast.experiment_tags(experiment) == mlflow.experiment_tags(experiment)
    assert fast.experiment_tags(first)["sweep_file"] == "s.yaml"
    assert fast.experiment_id("s") == first and fast.experiment_id("S") is None  # case counts
    mlflow.client.delete_experiment(mlflow.experiment_id("doomed", create=True))
    with pytest.raises(TrackingError, match="'doomed' is deleted"):
        fast.experiment_id("doomed")


def test_waves_on_a_parent_run_are_read_in_place_as_mlflow_reads_them(store):
    uri, first, _ = store
    writer = Tracker(uri)
    parent = writer.sweep_run(first, "s", {"name": "s"})
    for wave in (2, 1, 10):
        record = {"wave": wave, "cells": [f"c{wave}"], "settled": 1, "open": 2, "spent": 0.5}
        writer.log_wave(parent, record, pd.DataFrame({"a": [wave]}))
    fast = DatabaseTracker.existing(uri)
    via_mlflow = adaptive_waves.read_waves(writer.client, parent, writer.download)
    assert fast.read_waves(first, "s") == via_mlflow
    assert [w["wave"] for w in via_mlflow] == [1, 2, 10]


def test_a_reading_command_asks_the_database_without_importing_mlflow(store, tmp_path):
    """Opening the store, finding the experiment, its tags, runs and waves, copying an artifact of a run whose
    artifacts are on this disk: MLflow's imports (~2.5 s) are left to what writes (in a new interpreter: this
    one has imported MLflow)."""
    uri, tmp = store[0], tmp_path
    Tracker(uri).sweep_run(store[1], "s", {"name": "s"})  # the parent run, with its sweep.yaml
    script = f"""
import sys
from scaling.tracking.backends import existing_store
tracker = existing_store({uri!r})
experiment = tracker.experiment_id("s")
runs = tracker.runs_of_sweep("s", params={{"T": "16"}})
waves = tracker.read_waves(experiment, "s")
tags = tracker.experiment_tags(experiment)
parent = tracker.sweep_parent_run(experiment, "s")
copied = tracker.download(parent.run_id, "sweep.yaml", {str(tmp)!r}, parent.artifact_uri)
assert len(runs) == 5, runs
assert open(copied).read().startswith("name: s"), copied
loaded = sorted(m for m in sys.modules if m.split(".")[0] == "mlflow")
assert not loaded, loaded
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
