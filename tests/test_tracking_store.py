"""New SQLite stores start as a copy of a cached empty store at MLflow's schema (scaling.tracking)."""

import os
import sqlite3

import pytest

from scaling.tracking.store_template import empty_store_template, seed_sqlite_store
from scaling.tracking.tracker import Tracker


@pytest.fixture
def templates(tmp_path, monkeypatch):
    folder = tmp_path / "templates"
    monkeypatch.setenv("SCALING_MLFLOW_TEMPLATES", str(folder))
    return folder


def rows(db, table):
    with sqlite3.connect(db) as connection:
        return connection.execute(f"SELECT * FROM {table}").fetchall()


def test_a_seeded_store_is_what_mlflow_builds(tmp_path, templates, monkeypatch):
    built = tmp_path / "built.db"
    monkeypatch.setenv("SCALING_MLFLOW_TEMPLATES", str(tmp_path / "a file"))
    (tmp_path / "a file").write_text("")  # no cache can live here: MLflow builds the store
    Tracker(f"sqlite:///{built}").experiment_id("x", create=True)
    assert not list(tmp_path.glob(".built.db.*"))
    monkeypatch.setenv("SCALING_MLFLOW_TEMPLATES", str(templates))

    template = empty_store_template()
    assert template.parent == templates and rows(template, "experiments") == []
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    seeded = tmp_path / "seeded.db"
    tracker = Tracker(f"sqlite:///{seeded}")
    experiment = tracker.experiment_id("x", create=True)
    run = tracker.client.create_run(experiment, tags={"kind": "cell"})
    tracker.client.log_metric(run.info.run_id, "train/loss", 0.5, step=3)
    assert [m.value for m in tracker.client.get_metric_history(run.info.run_id, "train/loss")] == [0.5]
    for table in ("alembic_version", "workspaces"):
        assert rows(seeded, table) == rows(built, table)
    default = tracker.client.get_experiment("0")  # MLflow adds it on first open, from here
    assert default.name == "Default" and str(work) in default.artifact_location
    assert not list(tmp_path.glob(".seeded.db.*"))  # no partial copy left behind


def test_seeding_never_replaces_an_existing_store(tmp_path, templates):
    db = tmp_path / "mlflow.db"
    Tracker(f"sqlite:///{db}").experiment_id("kept", create=True)
    before = db.read_bytes()
    seed_sqlite_store(f"sqlite:///{db}")
    assert db.read_bytes() == before
    seed_sqlite_store(f"sqlite:///{tmp_path}/missing/dir/mlflow.db")  # no folder: nothing created
    assert not (tmp_path / "missing").exists()
    seed_sqlite_store("http://127.0.0.1:1")  # servers are not files
    assert sorted(os.listdir(tmp_path)) == ["mlflow.db", "templates"]
