"""Which backend serves a tracking URI, and the store or cell log it opens there: MLflow serves every URI
today (``sqlite:///``, ``file:``, ``http(s)://``, ``postgresql://``, ...), its searches of a store in a
database (``sqlite:///``, ``postgresql://``, ``mysql://``, ...) read from its tables directly
(database.DatabaseTracker); a second backend claims its URIs here
(docs/design.md, "The tracking store is an interface")."""

from __future__ import annotations

from . import CellRunLog, TrackingStore
from .cell_log import CellLog
from .database import DatabaseTracker
from .tracker import Tracker
from .uri import is_database


def tracker_class(uri: str) -> type[Tracker]:
    """MLflow's store with searches read from its tables for a store in a database, else MLflow's own."""
    return DatabaseTracker if uri.startswith("sqlite:") or is_database(uri) else Tracker


def open_store(uri: str) -> TrackingStore:
    """The writers' store (the sweep, its trials, a benchmark): a SQLite store not there yet is created."""
    return tracker_class(uri)(uri)


def existing_store(uri: str) -> TrackingStore:
    """A store that exists already, checked to answer within seconds, never created (every reading command:
    analysis, the adaptive replay, a sweep's --dry-run, a model read from another sweep); TrackingError,
    naming the path or URI, otherwise."""
    return tracker_class(uri).existing(uri)


def open_cell_log(
    uri: str, experiment_id: str, cell, sweep: str, parent_run_id: str | None = None, name: str | None = None
) -> CellRunLog:
    """A trial's log of ``cell`` into its run (named ``name``), reused when the cell ran before (a complete
    run: untouched)."""
    return CellLog.open(uri, experiment_id, cell, sweep, parent_run_id, name)
