"""MLflow's store on a database (SQLite, PostgreSQL, MySQL) read the fast way (DatabaseTracker): a search of
runs as one SQL query per table, for only the params, metrics and tags asked for, with search_runs' semantics.

MLflow's ``search_runs`` builds an ORM object, then an MLflow object, for every param, tag and metric of
every run it finds, in pages of 1,000: ~490,000 objects and 25 s for a sweep of 10,000 cells, most of
which the analysis never reads (it asks for the params and two tags). Here the same search reads plain rows
of MLflow's own tables (its SQLAlchemy models name them): the runs of the experiment in the ``active``
lifecycle stage whose tags and params equal those given (compared as MLflow compares them on the
database's dialect), newest first (start time, then run id, as search_runs orders them), then the named
tags, params and latest metrics of those runs, one query each. Writes, and everything else, stay
MLflow's (tracker.Tracker); a store MLflow does not keep in SQL is searched by MLflow.
"""

from __future__ import annotations

import math
from typing import Mapping

from . import EVERYTHING, Columns, RunRecord
from .retry import retrying
from .tracker import Tracker, picked

# the tags a RunRecord's own fields are read from: cell_key, status, and the run's name where the runs
# table holds none (MLflow's own fallback)
RECORD_TAGS = ("cell_key", "status", "mlflow.runName")


class DatabaseTracker(Tracker):
    """Tracker whose run searches read MLflow's tables directly (module docstring); the rest is MLflow's."""

    def find_runs(
        self,
        experiment_id: str,
        *,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        columns: Columns = EVERYTHING,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """The experiment's active runs whose tags and params equal those given, newest first, each with
        the ``columns`` asked for; at most ``limit`` (None: all, in one read)."""
        store = sql_store(self.client)
        if store is None:  # not a SQL store after all: MLflow's paged search
            return super().find_runs(experiment_id, tags=tags, params=params, columns=columns, limit=limit)
        return retrying(
            lambda: read_runs(store, experiment_id, tags or {}, params or {}, columns, limit),
            "searching runs",
        )


def sql_store(client):
    """The client's MLflow SqlAlchemyStore, or None when its store is another kind (a server's REST store)."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    store = getattr(getattr(client, "_tracking_client", None), "store", None)
    return store if isinstance(store, SqlAlchemyStore) else None


def read_runs(
    store,
    experiment_id: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    columns: Columns,
    limit: int | None,
) -> list[RunRecord]:
    """The runs (search_runs' selection and order) with their tags, params and latest metrics, each of
    the three one query over the runs found, all in one session."""
    from mlflow.store.tracking.dbmodels.models import SqlLatestMetric, SqlParam, SqlTag

    with store.ManagedSessionMaker() as session:
        selected = matching_runs(store, experiment_id, tags, params)
        runs = session.execute(ordered(selected, limit)).all()
        if not runs:
            return []
        found = selected if limit is None else [run.run_uuid for run in runs]
        tag_names = None if columns.tags is None else (*RECORD_TAGS, *columns.tags)
        run_tags = values_of(session, SqlTag, found, tag_names)
        run_params = values_of(session, SqlParam, found, columns.params)
        run_metrics = values_of(session, SqlLatestMetric, found, columns.metrics)
    return [record(run, run_tags.get(run.run_uuid, {}), run_params, run_metrics, columns) for run in runs]


def matching_runs(store, experiment_id: str, tags: Mapping[str, str], params: Mapping[str, str]):
    """The SELECT of the run ids search_runs finds: the experiment's active runs whose tags and params
    equal these values (each compared by MLflow's comparison for the store's dialect)."""
    from mlflow.entities import LifecycleStage
    from mlflow.store.tracking.dbmodels.models import SqlParam, SqlRun, SqlTag
    from mlflow.utils.search_utils import SearchUtils
    from sqlalchemy import select

    equal = SearchUtils.get_sql_comparison_func("=", store.engine.dialect.name)
    query = select(SqlRun.run_uuid).where(
        SqlRun.experiment_id == int(experiment_id), SqlRun.lifecycle_stage == LifecycleStage.ACTIVE
    )
    for model, wanted in ((SqlTag, tags), (SqlParam, params)):
        for key, value in wanted.items():
            having = select(model.run_uuid).where(equal(model.key, key), equal(model.value, value))
            query = query.where(SqlRun.run_uuid.in_(having))
    return query


def ordered(selected, limit: int | None):
    """The runs' own columns, in search_runs' order (newest start first, then run id), ``limit`` of them."""
    from mlflow.store.tracking.dbmodels.models import SqlRun
    from sqlalchemy import select

    query = (
        select(
            SqlRun.run_uuid,
            SqlRun.name,
            SqlRun.experiment_id,
            SqlRun.status,
            SqlRun.start_time,
            SqlRun.end_time,
            SqlRun.artifact_uri,
        )
        .where(SqlRun.run_uuid.in_(selected))
        .order_by(SqlRun.start_time.desc(), SqlRun.run_uuid)
    )
    return query if limit is None else query.limit(limit)


def values_of(session, model, runs, names: tuple[str, ...] | None) -> dict[str, dict]:
    """run id -> {key: value} of one of MLflow's key-value tables (tags, params, latest metrics) for the
    runs (a SELECT of run ids, or a list of them), of the keys ``names`` (None: every key; empty: none)."""
    if names is not None and not names:
        return {}
    from sqlalchemy import select

    metric = hasattr(model, "is_nan")
    fields = [model.run_uuid, model.key, model.value] + ([model.is_nan] if metric else [])
    query = select(*fields).where(model.run_uuid.in_(runs))
    if names is not None:
        query = query.where(model.key.in_(sorted(set(names))))
    out: dict[str, dict] = {}
    for row in session.execute(query):
        out.setdefault(row[0], {})[row[1]] = math.nan if metric and row[3] else row[2]
    return out


def record(run, tags: dict, params: dict[str, dict], metrics: dict[str, dict], columns: Columns) -> RunRecord:
    """One row of the runs table and its values as a RunRecord, as tracker.run_record makes one of an
    MLflow Run."""
    return RunRecord(
        run_id=run.run_uuid,
        name=run.name or tags.get("mlflow.runName") or run.name,
        experiment_id=str(run.experiment_id),
        cell_key=tags.get("cell_key"),
        status=tags.get("status", ""),
        state=run.status,
        artifact_uri=run.artifact_uri,
        start_time=run.start_time,
        end_time=run.end_time,
        tags=picked(tags, columns.tags),
        params=picked(params.get(run.run_uuid, {}), columns.params),
        metrics=picked(metrics.get(run.run_uuid, {}), columns.metrics),
    )
