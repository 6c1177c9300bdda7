"""MLflow's store on a database (SQLite, PostgreSQL, MySQL) read the fast way (DatabaseTracker): a search of
runs as one SQL query per table, for only the params, metrics and tags asked for, with search_runs' semantics;
a reading command's other questions (is the store there, an experiment's id and tags, the waves on a parent
run whose artifacts are on this machine) answered by SQL too, without MLflow.

MLflow's ``search_runs`` builds an ORM object, then an MLflow object, for every param, tag and metric of
every run it finds, in pages of 1,000: ~490,000 objects and 25 s for a sweep of 10,000 cells, most of
which the analysis never reads (it asks for the params and two tags). Here the same search reads plain rows
of MLflow's own tables (``TABLES``: the columns read, by MLflow's names, checked against its SQLAlchemy
models by tests/test_fast_read.py): the runs of the experiment in the ``active`` lifecycle stage whose tags
and params equal those given (compared as MLflow compares them on the database's dialect), newest first
(start time, then run id, as search_runs orders them), then the named tags, params and latest metrics of
those runs, one query each. The queries run on an engine of the tracker's own: a reading command imports
neither MLflow nor its store (~2.5 s of imports) unless it asks what only MLflow answers. Writes, and
everything else, stay MLflow's (tracker.Tracker, whose client is then made).
"""

from __future__ import annotations

import math
import operator
from functools import cached_property
from typing import Mapping

from . import EVERYTHING, Columns, RunRecord
from .retry import retrying
from .tracker import Tracker, picked

# the tags a RunRecord's own fields are read from: cell_key, status, and the run's name where the runs
# table holds none (MLflow's own fallback)
RECORD_TAGS = ("cell_key", "status", "mlflow.runName")

# MLflow's tables and the columns read of them (its dbmodels: SqlRun, SqlTag, SqlParam, SqlLatestMetric,
# SqlExperiment, SqlExperimentTag), each column's type one of sqlalchemy.types
TABLES = {
    "runs": {
        "run_uuid": "String",
        "name": "String",
        "experiment_id": "Integer",
        "status": "String",
        "start_time": "BigInteger",
        "end_time": "BigInteger",
        "artifact_uri": "String",
        "lifecycle_stage": "String",
    },
    "tags": {"key": "String", "value": "String", "run_uuid": "String"},
    "params": {"key": "String", "value": "String", "run_uuid": "String"},
    "latest_metrics": {"key": "String", "value": "Float", "is_nan": "Boolean", "run_uuid": "String"},
    "experiments": {"experiment_id": "Integer", "name": "String", "lifecycle_stage": "String"},
    "experiment_tags": {"key": "String", "value": "String", "experiment_id": "Integer"},
}


class DatabaseTracker(Tracker):
    """Tracker whose reads are SQL on MLflow's tables (module docstring); the rest is MLflow's."""

    reads_without_client = True

    @cached_property
    def engine(self):
        """An SQLAlchemy engine of the store's database, for reading (a server's connection waits 10 s)."""
        import sqlalchemy

        wait = {"connect_timeout": 10} if self.uri.startswith("postgresql") else {}
        return sqlalchemy.create_engine(self.uri, connect_args=wait)

    @cached_property
    def tables(self):
        """``TABLES`` as SQLAlchemy Table objects: name -> table."""
        import sqlalchemy

        meta = sqlalchemy.MetaData()
        return {
            name: sqlalchemy.Table(
                name,
                meta,
                *(sqlalchemy.Column(c, getattr(sqlalchemy, kind)()) for c, kind in columns.items()),
            )
            for name, columns in TABLES.items()
        }

    def probe(self) -> None:
        """One quick read of the store (Tracker.check_reachable tries it): an experiment's id, by SQL."""
        from sqlalchemy import select

        self.rows(select(self.tables["experiments"].c.experiment_id).limit(1))

    def rows(self, query) -> list:
        """The rows of one query, in a connection of its own."""
        with self.engine.connect() as connection:
            return connection.execute(query).all()

    def experiment_id(
        self, name: str, create: bool = False, tags: dict[str, str] | None = None
    ) -> str | None:
        """As Tracker.experiment_id; looked up by SQL (MLflow's get_experiment_by_name: the experiment of
        that name, whatever its stage), by MLflow where it may create or tag one."""
        if create:
            return super().experiment_id(name, create, tags)
        from sqlalchemy import select

        experiments = self.tables["experiments"]
        query = select(experiments.c.experiment_id, experiments.c.lifecycle_stage).where(
            experiments.c.name == name
        )
        found = retrying(lambda: self.rows(query), f"looking up experiment {name}")
        if not found:
            return None
        if found[0].lifecycle_stage == "deleted":
            raise self.deleted(name)
        return str(found[0].experiment_id)

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        from sqlalchemy import select

        tags = self.tables["experiment_tags"]
        query = select(tags.c.key, tags.c.value).where(tags.c.experiment_id == int(experiment_id))
        return dict(retrying(lambda: self.rows(query), "reading experiment"))

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
        return retrying(
            lambda: read_runs(self, experiment_id, tags or {}, params or {}, columns, limit),
            "searching runs",
        )


def equality(dialect: str):
    """MLflow's comparison of a string column with a value for ``=`` on the dialect: plain equality on SQLite
    and PostgreSQL (case-sensitive there), else MLflow's own (MySQL, SQL Server: case-sensitive by binary
    comparison or collation)."""
    if dialect in ("sqlite", "postgresql"):
        return operator.eq
    from mlflow.utils.search_utils import SearchUtils

    return SearchUtils.get_sql_comparison_func("=", dialect)


def read_runs(
    tracker: DatabaseTracker,
    experiment_id: str,
    tags: Mapping[str, str],
    params: Mapping[str, str],
    columns: Columns,
    limit: int | None,
) -> list[RunRecord]:
    """The runs (search_runs' selection and order) with their tags, params and latest metrics, each of
    the three one query over the runs found, all in one connection."""
    t = tracker.tables
    with tracker.engine.connect() as connection:
        selected = matching_runs(t, equality(tracker.engine.dialect.name), experiment_id, tags, params)
        runs = connection.execute(ordered(t["runs"], selected, limit)).all()
        if not runs:
            return []
        found = selected if limit is None else [run.run_uuid for run in runs]
        tag_names = None if columns.tags is None else (*RECORD_TAGS, *columns.tags)
        run_tags = values_of(connection, t["tags"], found, tag_names)
        run_params = values_of(connection, t["params"], found, columns.params)
        run_metrics = values_of(connection, t["latest_metrics"], found, columns.metrics)
    return [record(run, run_tags.get(run.run_uuid, {}), run_params, run_metrics, columns) for run in runs]


def matching_runs(t: dict, equal, experiment_id: str, tags: Mapping[str, str], params: Mapping[str, str]):
    """The SELECT of the run ids search_runs finds: the experiment's active runs whose tags and params
    equal these values (each compared by ``equal``, MLflow's comparison for the store's dialect)."""
    from sqlalchemy import select

    runs = t["runs"].c
    query = select(runs.run_uuid).where(
        runs.experiment_id == int(experiment_id), runs.lifecycle_stage == "active"
    )
    for table, wanted in ((t["tags"], tags), (t["params"], params)):
        for key, value in wanted.items():
            having = select(table.c.run_uuid).where(equal(table.c.key, key), equal(table.c.value, value))
            query = query.where(runs.run_uuid.in_(having))
    return query


def ordered(runs, selected, limit: int | None):
    """The runs' own columns, in search_runs' order (newest start first, then run id), ``limit`` of them."""
    from sqlalchemy import select

    c = runs.c
    query = (
        select(c.run_uuid, c.name, c.experiment_id, c.status, c.start_time, c.end_time, c.artifact_uri)
        .where(c.run_uuid.in_(selected))
        .order_by(c.start_time.desc(), c.run_uuid)
    )
    return query if limit is None else query.limit(limit)


def values_of(connection, table, runs, names: tuple[str, ...] | None) -> dict[str, dict]:
    """run id -> {key: value} of one of MLflow's key-value tables (tags, params, latest metrics) for the
    runs (a SELECT of run ids, or a list of them), of the keys ``names`` (None: every key; empty: none)."""
    if names is not None and not names:
        return {}
    from sqlalchemy import select

    c = table.c
    metric = "is_nan" in c
    query = select(c.run_uuid, c.key, c.value, *([c.is_nan] if metric else [])).where(c.run_uuid.in_(runs))
    if names is not None:
        query = query.where(c.key.in_(sorted(set(names))))
    out: dict[str, dict] = {}
    for row in connection.execute(query):
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
