"""New SQLite tracking stores, started as a copy of an empty store at MLflow's schema (scaling.tracking).

A new SQLite file would otherwise run MLflow's ~50 schema migrations (~2.6 s here) on first open: every new
sweep database and every test store. The empty store is built once per MLflow version under
``$SCALING_MLFLOW_TEMPLATES`` (default ``~/.cache/icl-scaling/mlflow``) and copied into place.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import sqlite3
import tempfile
from pathlib import Path

log = logging.getLogger(__name__)


def template_dir() -> Path:
    """Where empty stores at MLflow's current schema are cached (``$SCALING_MLFLOW_TEMPLATES``)."""
    return Path(os.environ.get("SCALING_MLFLOW_TEMPLATES", "~/.cache/icl-scaling/mlflow")).expanduser()


def empty_store_template() -> Path:
    """An empty SQLite store at the installed MLflow's schema head, built once per MLflow version.

    It is what MLflow itself builds for a new file (its migrations run on a new database), less the
    Default experiment, which MLflow adds on first open with the opening process's artifact location.
    """
    import mlflow
    from mlflow.tracking import MlflowClient

    template = template_dir() / f"empty-mlflow-{mlflow.__version__}.db"
    if template.exists():
        return template
    template.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=template.parent) as tmp:
        db = Path(tmp) / "store.db"
        MlflowClient(tracking_uri=f"sqlite:///{db}").search_experiments(max_results=1)
        with contextlib.closing(sqlite3.connect(db)) as connection, connection:
            connection.execute("DELETE FROM experiments WHERE experiment_id = 0")
        os.replace(db, template)  # atomic: a concurrent builder's copy is as good
    return template


def seed_sqlite_store(uri: str) -> None:
    """Start a new SQLite store as a copy of the cached empty one: MLflow's ~50 schema migrations cost
    ~2.6 s per new store here (every new sweep database, every test store), a copy milliseconds.

    Only a file that does not exist is created (hard-linked into place, never over another process's
    store); where the cache cannot be written or linking is not supported, MLflow builds the file itself.
    """
    if not uri.startswith("sqlite:///"):
        return
    target = Path(uri[len("sqlite:///") :])
    if target.exists() or not target.parent.is_dir():
        return
    try:
        template = empty_store_template()
        handle, partial = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
        os.close(handle)
        try:
            shutil.copyfile(template, partial)
            with contextlib.suppress(FileExistsError):  # the store appeared meanwhile: that one is kept
                os.link(partial, target)
        finally:
            os.unlink(partial)
    except (OSError, sqlite3.Error) as err:
        log.debug("MLflow builds %s itself (no template: %s)", target, err)


def preload() -> None:
    """Import what a Tracker on a SQLite store needs (~2 s of CPU here) and build the empty-store template;
    the sweep runs it in a thread while ray.init waits on the processes it starts. Creates no store."""
    from mlflow.store.tracking import sqlalchemy_store  # noqa: F401 - the import is the work
    from mlflow.tracking import MlflowClient  # noqa: F401

    empty_store_template()
