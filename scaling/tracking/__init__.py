"""The MLflow contract: this package alone speaks MLflow (the sweeps, the trials and analysis alike).

This module holds the contract below (Tracker, CellLog, the retries, the run layout); beside it,
store_template.py (new SQLite stores start as a copy of an empty one), adaptive_waves.py (the adaptive
driver's wave records on the sweep's parent run) and analysis_runs.py (analysis's outputs as a run).

One experiment per sweep (named by the sweep), one parent run per sweep (tag ``kind=sweep``) and one
child run per cell (tag ``kind=cell``), found again by its ``cell_key`` tag so a resumed or retried
cell reuses its run instead of creating another. A cell run carries:

- run name: the cell's label, given by its experiment kind (``<model> T=<T> N=<N> seed=<seed>`` for
  training); tags ``cell_key``, ``sweep``, ``kind``, ``status`` (``running`` -> ``complete`` only once
  everything below is logged; ``failed`` with ``error``);
- params: the settings that apply to the cell's kind, model and task (scaling.cells.Cell.params:
  ``task.d``, ``model.n_layer`` for a GPT-2 but not for an MLP, ``T``, ``N``, ``seed``, ``job``, ...);
- metrics: ``train/loss`` (step = training step) and one metric per curve of ``curves.parquet``, named
  by the kind (``Kind.metric_key``): training logs ``eval/err`` (the model; step = context length n)
  and ``baseline/<name>``; the temperature kinds (scaling.kinds.temperature) log ``temperature/<name>``
  (e.g. ``temperature/tau_1.5``: MLflow names allow no ``=``; step = the curves' ``step`` column, else
  n) and their summary (``tau_best``, ``tau_heuristic``, ``tau_opt``) as metrics and tags;
- artifacts: ``cell.yaml``, ``curves.parquet`` (one row per predictor and n: err, err_lo, err_hi,
  prompts), ``model.pt`` (final weights; temperature jobs log it only for a model they trained) and, for
  the temperature scans, ``units.parquet`` (a score per question or prompt, which the analysis
  resamples: scaling.kinds.temperature.JobResult.units; cells logged before it have none).

Every call retries with exponential backoff, so a tracking server that blinks neither kills a trial nor
loses metrics. Training losses are buffered and flushed at checkpoints (at most every LOSS_FLUSH_SECONDS),
skipping steps already logged; a flush that fails keeps its points (the trial stores them in its
checkpoint) and tries again at the next checkpoint, and the final flush before ``finish`` must succeed,
or the cell fails and Tune retries it.
"""

from __future__ import annotations

import contextlib
import logging
import os
import random
import re
import shlex
import shutil
import sqlite3
import tempfile
import time
import urllib.parse
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable, Iterator, TypeVar

import pandas as pd
import yaml

from ..cluster import ray_up_head
from ..redact import redact
from .store_template import seed_sqlite_store

log = logging.getLogger(__name__)
T = TypeVar("T")

# Ending a run on a server makes MLflow write "View run ... at: <tracking URI>/#/..." to stdout, with the
# URI's credentials and outside any logger (so log redaction never sees it); a trial's stdout reaches the
# driver's terminal through Ray. The project prints its own, redacted, links: MLflow's are turned off in
# every process that imports this module (drivers and trials alike).
os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"

STATUS_COMPLETE, STATUS_RUNNING, STATUS_FAILED = "complete", "running", "failed"
# Trials flush training losses to the store at most this often (and at the end): a fast cell would
# otherwise spend more time on round trips than on training. Unflushed points ride in every checkpoint.
# SCALING_LOSS_FLUSH_S sets another (0: at every checkpoint; the head-loss tests use it).
LOSS_FLUSH_SECONDS = float(os.environ.get("SCALING_LOSS_FLUSH_S", "30"))
# MLflow's log_batch limits (metrics + params + tags; tags; params)
MAX_BATCH_ENTITIES, MAX_BATCH_TAGS, MAX_BATCH_PARAMS = 1000, 100, 100
# MLflow 3's experiment kind: "custom_model_development" is a model-training experiment (runs, params,
# metrics), not a GenAI one (traces). MLflow 3.17's own UI decides its view by the sidebar's GenAI / Model
# training switch instead (a URL's ``workflowType``, else the browser's last choice): experiment_ui_link.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = (EXPERIMENT_KIND_TAG, "custom_model_development")


class TrackingError(RuntimeError):
    """The tracking store cannot be used (unreachable, or holds something it should not)."""


def resolve_tracking_uri(uri: str | None = None, cwd: str | Path | None = None) -> str:
    """The tracking URI to use: the argument, else MLFLOW_TRACKING_URI, else the MLflow server of the `ray up`
    cluster this machine is the head of (scaling.cluster), else ./mlflow.db (SQLite).

    Relative SQLite paths are made absolute: Tune runs each trial in its own working directory.
    """
    if not uri and not os.environ.get("MLFLOW_TRACKING_URI"):
        head = ray_up_head()
        uri = head.tracking_uri if head else None
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    cwd = Path(cwd or os.getcwd())
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(cwd / uri[len('sqlite:///') :]).resolve()}"
    if "://" not in uri:  # a bare path: a SQLite file
        return f"sqlite:///{(cwd / uri).resolve()}"
    return uri


def artifact_root(uri: str) -> str | None:
    """Where a local store keeps artifacts (beside the SQLite file); None lets a server decide."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


_JITTER = random.Random()  # spreads retries of many trials apart; never the science's generators
_retries = {"count": 0, "said": False}  # this process's retries (a trial is one process)


def retry_count() -> int:
    """How many calls this process has retried so far (scaling.tracking.retrying)."""
    return _retries["count"]


def retrying(call: Callable[[], T], what: str, attempts: int = 8, first_wait: float = 0.5) -> T:
    """Run ``call``, retrying transient failures with exponential backoff and jitter (about a minute in all).

    Transient: the store cannot be reached, or answers that it is overloaded (an exhausted database pool's
    400, 429, 503) or failed (5xx); a request it refuses as wrong (a bad value, a run that exists or does
    not) is raised at once. Each wait is drawn from [wait/2, wait], so trials that an overloaded server
    turned away together do not come back together. The first retry of the process is logged as a warning,
    once (a trial's log says that the server was overloaded, not each request it repeated); later ones are
    counted (retry_count) and logged at debug level.
    """
    from mlflow.exceptions import MlflowException

    wait = first_wait
    for attempt in range(attempts):
        try:
            return call()
        except (MlflowException, OSError, ConnectionError) as err:
            code = getattr(err, "error_code", "")
            if code in ("INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
                raise
            if attempt == attempts - 1:
                raise TrackingError(f"{what} failed after {attempts} attempts: {redact(str(err))}") from None
            _retries["count"] += 1
            level = logging.DEBUG if _retries["said"] else logging.WARNING
            log.log(
                level,
                "%s failed (%s); retrying with backoff%s",
                what,
                redact(str(err))[:500],
                "" if _retries["said"] else " (said once: later retries of this process are not logged)",
            )
            _retries["said"] = True
            time.sleep(wait * _JITTER.uniform(0.5, 1.0))
            wait = min(wait * 2, 15.0)
    raise AssertionError("unreachable")


@contextlib.contextmanager
def _mlflow_http(**settings: str):
    """MLflow's REST client under ``settings`` (MLflow's ``MLFLOW_HTTP_REQUEST_*`` environment variables, read
    at each request) inside the block; the process's own values back after it."""
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _quick_http():
    """MLflow's REST client without its own retries (urllib3 backoff of up to minutes) and a short timeout."""
    return _mlflow_http(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT="10")


def _no_http_retries():
    """MLflow's REST client without its own retries (its timeout unchanged): for a request that must not be
    sent twice unseen (a create: ``retrying`` re-sends it and the caller knows)."""
    return _mlflow_http(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")


@dataclass(frozen=True)
class CellRecord:
    run_id: str
    status: str
    name: str


def local_store_path(uri: str) -> Path | None:
    """The file (``sqlite:///``) or folder (``file:``) a local store lives in; None for a server or a database
    elsewhere."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :].split("?")[0])
    if uri.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
    return None


# what every "no store" message points to: the command that writes a store
WRITES_A_STORE = "a sweep writes one: python -m scaling.sweep SWEEP.yaml --tracking-uri {uri}"
OTHER_STORE = (
    "nothing was read or written; point --tracking-uri at an MLflow store (or, for a sweep, a new file)"
)
MLFLOW_TABLES = {"experiments", "runs", "alembic_version"}
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")


def check_store_exists(uri: str) -> None:
    """Refuse, with a TrackingError naming the path (or URI) and the command that writes a store, a store
    that is not there: a missing SQLite file or ``file:`` folder, a file that is not an MLflow store (not
    SQLite, or without MLflow's tables), a folder without MLflow's layout, a database server without MLflow's
    tables or that does not answer. Only reads: MLflow itself would create the store, or its tables."""
    path = local_store_path(uri)
    if path is None:
        if is_database(uri) and not database_has_store(uri):
            raise TrackingError(f"{redact(uri)} holds no MLflow store: no MLflow tables; {OTHER_STORE}")
        return
    path, writes = path.resolve(), WRITES_A_STORE.format(uri=shlex.quote(uri))
    what = "folder" if uri.startswith("file:") else "file"
    if not path.exists():
        raise TrackingError(
            f"no MLflow store at {path}: no such {what} (nothing was read or written); {writes}"
            f" (or give the --tracking-uri of an existing store, or set MLFLOW_TRACKING_URI)"
        )
    if what == "folder":
        if not (path / ".trash").is_dir() and not any(path.glob("*/meta.yaml")):
            raise TrackingError(
                f"{path} is not an MLflow store: a folder without MLflow's layout; {OTHER_STORE}"
            )
        return
    if not path.is_file():
        raise TrackingError(f"{path} is not an MLflow store: not a file; {OTHER_STORE}")
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as err:  # not SQLite at all; else unreadable (permissions, locked past 5 s)
        if "not a database" in str(err):
            raise TrackingError(f"{path} is not an MLflow store: {err}; {OTHER_STORE}") from None
        raise TrackingError(f"cannot read the MLflow store {path}: {err}") from None
    if not MLFLOW_TABLES <= tables:
        raise TrackingError(
            f"{path} is not an MLflow store: a SQLite file without MLflow's tables; {OTHER_STORE}"
        )


def is_database(uri: str) -> bool:
    """Whether ``uri`` names a database server MLflow opens itself (``postgresql://``, ``mysql+pymysql://``)."""
    return uri.split("://")[0].split("+")[0] in DATABASE_SCHEMES


def database_has_store(uri: str) -> bool:
    """Whether a database server's database holds MLflow's tables (MLflow creates them in one that does not:
    what a sweep does, never a reading command); TrackingError when it does not answer within seconds."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(
            uri, connect_args={"connect_timeout": 10} if uri.startswith("postgresql") else {}
        )
        try:
            tables = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as err:  # noqa: BLE001 - any failure here means unusable
        why = " ".join(str(err).split("(Background on this error")[0].split())  # SQLAlchemy's, on one line
        raise TrackingError(f"cannot use the MLflow tracking store {redact(uri)}: {redact(why)}") from None
    return MLFLOW_TABLES <= tables


class Tracker:
    """Driver- and analysis-side access to a tracking store.

    ``Tracker(uri)`` is the writers' (the sweep, its trials): a SQLite store not there yet is created
    (store_template). Reading commands open ``Tracker.existing(uri)``, which never creates one."""

    def __init__(self, uri: str, create: bool = True):
        from mlflow.exceptions import MlflowException
        from mlflow.tracking import MlflowClient

        self.uri = uri
        if create:
            seed_sqlite_store(uri)
        else:
            check_store_exists(uri)
        try:
            self.client = MlflowClient(tracking_uri=uri)
        except MlflowException as err:  # e.g. MLflow 3 refuses a file: store unless MLFLOW_ALLOW_FILE_STORE
            raise TrackingError(
                f"cannot use the MLflow tracking store {redact(uri)}: {redact(str(err))}"
            ) from None

    @classmethod
    def existing(cls, uri: str) -> "Tracker":
        """A store that exists already, checked to answer within seconds; never creates one (nor MLflow's
        tables in an empty database). TrackingError, naming the path or URI, for a missing file or folder,
        a file that is not an MLflow store, or a server that does not answer: what every reading command
        (analysis, the adaptive replay, a sweep's --dry-run, a model read from another sweep) opens."""
        tracker = cls(uri, create=False)
        tracker.check_reachable()
        return tracker

    def check_reachable(self) -> None:
        """Fail fast (seconds, not MLflow's minutes of HTTP retries), with the URI, when the store is
        unusable."""
        try:
            with _quick_http():
                retrying(
                    lambda: self.client.search_experiments(max_results=1),
                    "reaching the tracking store",
                    attempts=3,
                    first_wait=0.5,
                )
        except Exception as err:  # noqa: BLE001 - any failure here means unusable
            raise TrackingError(
                f"cannot use the MLflow tracking store {redact(self.uri)}: {redact(str(err))}"
            ) from None

    def experiment_id(
        self, name: str, create: bool = False, tags: dict[str, str] | None = None
    ) -> str | None:
        """The experiment's id; with ``create``, created if missing, tagged as a model-training experiment
        (EXPERIMENT_KIND, also added to an older experiment that lacks it)."""
        found = retrying(lambda: self.client.get_experiment_by_name(name), f"looking up experiment {name}")
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise TrackingError(
                    f"experiment {name!r} is deleted in {redact(self.uri)}; restore it"
                    f" (mlflow experiments restore) or rename the sweep"
                )
            if create and found.tags.get(EXPERIMENT_KIND_TAG) is None:
                retrying(
                    lambda: self.client.set_experiment_tag(found.experiment_id, *EXPERIMENT_KIND),
                    "tagging experiment",
                )
            return found.experiment_id
        if not create:
            return None
        from mlflow.exceptions import MlflowException

        try:
            return retrying(
                lambda: self.client.create_experiment(
                    name,
                    artifact_location=artifact_root(self.uri),
                    tags={**(tags or {}), EXPERIMENT_KIND_TAG: EXPERIMENT_KIND[1]},
                ),
                f"creating experiment {name}",
            )
        except MlflowException as err:  # another driver of the same sweep created it meanwhile
            if getattr(err, "error_code", "") != "RESOURCE_ALREADY_EXISTS":
                raise
            return self.experiment_id(name)

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(retrying(lambda: self.client.get_experiment(experiment_id), "reading experiment").tags)

    def sweep_run(self, experiment_id: str, sweep: str, document: dict) -> str:
        """The sweep's parent run (created once), with the resolved sweep file as an artifact."""
        runs = self.search(experiment_id, f"tags.kind = 'sweep' and tags.sweep = '{sweep}'")
        if runs:
            run_id = runs[0].info.run_id
            retrying(lambda: self.client.update_run(run_id, status="RUNNING"), "reopening sweep run")
        else:
            run = retrying(
                lambda: self.client.create_run(
                    experiment_id, run_name=f"sweep {sweep}", tags={"kind": "sweep", "sweep": sweep}
                ),
                "creating sweep run",
            )
            run_id = run.info.run_id
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sweep.yaml"
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            retrying(lambda: self.client.log_artifact(run_id, str(path)), "logging sweep.yaml")
        return run_id

    def end_sweep_run(self, run_id: str, status: str) -> None:
        """FINISHED once every cell is complete, FAILED when cells failed or the sweep broke, KILLED when
        interrupted (a rerun reopens it)."""
        retrying(lambda: self.client.set_terminated(run_id, status), "ending sweep run")

    def search(self, experiment_id: str, filter_string: str) -> list:
        """Every run of the experiment matching the filter (all pages)."""
        runs, token = [], None
        while True:
            page = retrying(
                lambda: self.client.search_runs(
                    [experiment_id], filter_string, max_results=1000, page_token=token
                ),
                "searching runs",
            )
            runs.extend(page)
            token = page.token
            if not token:
                return runs

    def runs(self, experiment: str, filter_string: str) -> list:
        """Every run of the experiment named ``experiment`` matching the filter (all pages of one bulk
        search); LookupError when there is no such experiment."""
        experiment_id = self.experiment_id(experiment)
        if experiment_id is None:
            raise LookupError(
                f"no MLflow experiment named {experiment!r} in {redact(self.uri)}; run the sweep first"
            )
        return self.search(experiment_id, filter_string)

    def download(
        self, run_id: str, artifact: str, directory: str | Path, artifact_uri: str | None = None
    ) -> str:
        """Download one artifact of a run into ``directory``; its local path. With the run's
        ``artifact_uri`` (a searched run's ``info.artifact_uri``) straight from its artifact store, without
        asking the tracking store for the run first (half the requests of a bulk read)."""
        if artifact_uri is None:
            return retrying(
                lambda: self.client.download_artifacts(run_id, artifact, str(directory)),
                f"downloading {artifact}",
            )
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        store = get_artifact_repository(artifact_uri, tracking_uri=self.uri)
        return retrying(lambda: store.download_artifacts(artifact, str(directory)), f"downloading {artifact}")

    def artifact_names(self, run_id: str) -> set[str]:
        """The names of the artifacts at the top of a run (not those in its folders)."""
        listed = retrying(lambda: self.client.list_artifacts(run_id), "listing artifacts")
        return {Path(f.path).name for f in listed if not f.is_dir}

    def sweep_parent(self, experiment_id: str, sweep: str) -> str | None:
        """The run id of the sweep's parent run, if it exists."""
        runs = retrying(
            lambda: self.client.search_runs(
                [experiment_id], f"tags.kind = 'sweep' and tags.sweep = '{sweep}'", max_results=1
            ),
            "searching the sweep run",
        )
        return runs[0].info.run_id if runs else None

    def complete_keys(self, experiment_id: str) -> set[str]:
        """The keys of the cells with a complete run."""
        return {k for k, r in self.cell_records(experiment_id).items() if r.status == STATUS_COMPLETE}

    def last_loss_step(self, run_id: str) -> int:
        """The last training step whose loss the run holds (0: none)."""
        history = retrying(lambda: self.client.get_metric_history(run_id, "train/loss"), "reading history")
        return max((m.step for m in history), default=0)

    def cell_records(self, experiment_id: str) -> dict[str, CellRecord]:
        """cell_key -> its run; where a key has several runs, the complete (then oldest) one wins."""
        records: dict[str, CellRecord] = {}
        runs = sorted(self.search(experiment_id, "tags.kind = 'cell'"), key=lambda r: r.info.start_time or 0)
        for run in runs:
            key, status = run.data.tags.get("cell_key"), run.data.tags.get("status", "")
            if key and (
                key not in records or (status == STATUS_COMPLETE and records[key].status != STATUS_COMPLETE)
            ):
                records[key] = CellRecord(run.info.run_id, status, run.info.run_name)
        return records


OPEN_TOKEN = "open_token"  # tag: the one create_run a cell's run came from (CellLog.drop_twins)


def _most_advanced(tracker: Tracker, found: list) -> tuple:
    """The incomplete run of a cell to reopen and its last logged training step: the one furthest on (a
    create stored twice leaves a twin with nothing logged; the earliest breaks ties, as before)."""
    best, best_last = None, -1
    for run in sorted(found, key=lambda r: r.info.start_time or 0):
        run_id = run.info.run_id
        history = retrying(lambda: tracker.client.get_metric_history(run_id, "train/loss"), "reading history")
        last = max((m.step for m in history), default=0)
        if last > best_last:
            best, best_last = run, last
    return best, best_last


class CellLog:
    """Trial-side logging of one cell into its (reused) run."""

    def __init__(
        self,
        tracker: Tracker,
        run_id: str,
        last_loss_step: int,
        complete: bool = False,
        flush_every: float = 0.0,
        artifact_uri: str | None = None,
        params: dict[str, str] | None = None,
        open_token: str | None = None,
        experiment_id: str | None = None,
    ):
        self.tracker, self.client, self.run_id = tracker, tracker.client, run_id
        # the tag every run made by this cell's one create_run carries (twins of a re-sent create share it)
        self.open_token, self.experiment_id = open_token, experiment_id
        self.flush_every, self.flushed_at = flush_every, time.monotonic()
        self.complete = complete  # the cell's run is complete already (a retried trial skips it)
        self.last_loss_step = last_loss_step
        self.pending: list[tuple[int, float, int]] = []  # (step, loss, time in ms) not yet in the store
        self.artifact_uri = artifact_uri  # known from opening the run: no request to look it up again
        # the cell's params, sent with the first batch this log sends (logging a param again with the same
        # value is allowed, so a reopened run sends them again: one that died before its first batch has none)
        self.unsent_params = sorted((params or {}).items())

    @classmethod
    def open(
        cls, uri: str, experiment_id: str, cell, sweep: str, parent_run_id: str | None = None
    ) -> "CellLog":
        """Reuse the run tagged with the cell's key, or create it; mark it running (a complete run:
        untouched)."""
        tracker = Tracker(uri)
        found = tracker.search(experiment_id, f"tags.cell_key = '{cell.key}' and tags.kind = 'cell'")
        if any(r.data.tags.get("status") == STATUS_COMPLETE for r in found):
            done = next(r for r in found if r.data.tags.get("status") == STATUS_COMPLETE)
            return cls(
                tracker, done.info.run_id, cell.train.steps, complete=True, flush_every=LOSS_FLUSH_SECONDS
            )
        if found:
            reopened, last = _most_advanced(tracker, found)
            run_id = reopened.info.run_id
            retrying(lambda: tracker.client.update_run(run_id, status="RUNNING"), "reopening run")
        else:
            tags = {
                "cell_key": cell.key,
                "sweep": sweep,
                "kind": "cell",
                "status": STATUS_RUNNING,
                "model": cell.model.label,
                OPEN_TOKEN: uuid.uuid4().hex,
            }
            if parent_run_id:
                tags["mlflow.parentRunId"] = parent_run_id
            sent: list[int] = []

            def create():
                sent.append(1)
                with _no_http_retries():  # every re-send is ours, so that we know when one happened
                    return tracker.client.create_run(experiment_id, run_name=cell.name, tags=tags)

            run = retrying(create, "creating cell run")
            # created with status=running; its params go with the first batch
            return cls(
                tracker,
                run.info.run_id,
                0,
                flush_every=LOSS_FLUSH_SECONDS,
                artifact_uri=run.info.artifact_uri,
                params=cell.params(),
                open_token=tags[OPEN_TOKEN] if len(sent) > 1 else None,  # twins only if sent again
                experiment_id=experiment_id,
            )
        retrying(lambda: tracker.client.set_tag(run_id, "status", STATUS_RUNNING), "tagging run")
        return cls(
            tracker,
            run_id,
            last,
            flush_every=LOSS_FLUSH_SECONDS,
            artifact_uri=reopened.info.artifact_uri,
            params=cell.params(),
            open_token=reopened.data.tags.get(OPEN_TOKEN) if len(found) > 1 else None,
            experiment_id=experiment_id,
        )

    def log_metrics(self, key: str, points: Iterable[tuple], attempts: int = 8) -> None:
        """Log (step, value) or (step, value, time in ms) points; identical points sent twice are stored
        once."""
        from mlflow.entities import Metric

        now = int(time.time() * 1000)
        metrics = [Metric(key, float(p[1]), int(p[2]) if len(p) > 2 else now, int(p[0])) for p in points]
        for start in range(0, len(metrics), MAX_BATCH_ENTITIES):
            self._log_batch(metrics[start : start + MAX_BATCH_ENTITIES], [], f"logging {key}", attempts)

    def _log_batch(self, metrics: list, tags: list, what: str, attempts: int = 8) -> None:
        """One log_batch of ``metrics`` and ``tags``, carrying the cell's params too while they are unsent
        and fit MLflow's limits (else they go first, on their own)."""
        from mlflow.entities import Param

        params = [Param(k, v) for k, v in self.unsent_params]
        if params and (
            len(params) > MAX_BATCH_PARAMS or len(params) + len(metrics) + len(tags) > MAX_BATCH_ENTITIES
        ):
            for start in range(0, len(params), MAX_BATCH_PARAMS):
                chunk = params[start : start + MAX_BATCH_PARAMS]
                retrying(lambda: self.client.log_batch(self.run_id, params=chunk), "logging params", attempts)
            self.unsent_params, params = [], []
        retrying(
            lambda: self.client.log_batch(self.run_id, metrics=metrics, params=params, tags=tags),
            what,
            attempts,
        )
        self.unsent_params = []

    def log_losses(self, points: Iterable[tuple], final: bool = False) -> bool:
        """Buffer training losses and flush the buffer, skipping steps this run already holds (after a
        resume).

        Points are only buffered (False) until ``flush_every`` seconds have passed since the last flush.
        A failed flush keeps the points for the next call and returns False (the store blinked: training
        goes on); with ``final`` it retries for about a minute and then raises TrackingError, so a cell never
        completes with part of its loss history missing. True when everything is flushed.
        """
        newest = self.pending[-1][0] if self.pending else self.last_loss_step
        now = int(time.time() * 1000)
        for point in points:
            step = int(point[0])
            if step > newest:
                self.pending.append((step, float(point[1]), int(point[2]) if len(point) > 2 else now))
                newest = step
        if not final and time.monotonic() - self.flushed_at < self.flush_every:
            return not self.pending
        self.flushed_at = time.monotonic()
        while self.pending:
            chunk = self.pending[:1000]
            try:
                if final:
                    self.log_metrics("train/loss", chunk)
                else:
                    with _quick_http():  # a blinking store must not stall training
                        self.log_metrics("train/loss", chunk, attempts=2)
            except TrackingError as err:
                if final:
                    raise
                log.warning("keeping %d training losses for the next checkpoint: %s", len(self.pending), err)
                return False
            self.last_loss_step = chunk[-1][0]
            del self.pending[: len(chunk)]
        return True

    def finish(
        self,
        cell,
        curves: pd.DataFrame,
        weights_path: str | Path | None,
        summary: dict[str, float] | None = None,
        metric_key: Callable[[str], str] | None = None,
        units: pd.DataFrame | None = None,
    ) -> None:
        """Log the artifacts, then the buffered training losses, curves, summary and status=complete, then end
        the run: three round trips for a cell of up to ~1000 points (log_batches).

        status=complete is the last tag of the last batch, and a batch stores its metrics before its tags,
        so a run is never complete with a loss, a curve point or an artifact missing; a failure anywhere
        raises TrackingError (after retries) with the run still incomplete, and the retried trial redoes it.
        ``metric_key`` names each curve's metric (the cell's kind's, scaling.kinds.Kind.metric_key;
        default: curve_metric_key). ``units``, when given, is logged as ``units.parquet``.
        """
        from mlflow.entities import Metric, RunTag

        now = int(time.time() * 1000)
        steps = "step" if "step" in curves.columns else "n"
        rows = curves[curves["err"].notna()]
        if "lam" in rows:  # a lambda scan has many values per n: it lives in curves.parquet only
            rows = rows[rows["lam"].isna()]
        metrics = [Metric("train/loss", value, ms, step) for step, value, ms in self.pending]
        metric_key = metric_key or curve_metric_key
        metrics += [
            Metric(metric_key(predictor), float(err), now, int(step))
            for predictor, step, err in zip(rows["predictor"], rows[steps], rows["err"])
        ]
        metrics += [Metric(name, float(value), now, 0) for name, value in (summary or {}).items()]
        tags = [RunTag(name, f"{value:.6g}") for name, value in (summary or {}).items()]
        skipped = curves.attrs.get("skipped_baselines") or {}
        if skipped:  # baselines of the sweep's list not defined for this cell's task
            tags.append(
                RunTag("skipped_baselines", "; ".join(f"{k}: {v}" for k, v in skipped.items())[:4000])
            )
        with tempfile.TemporaryDirectory() as tmp:  # the artifacts in one call
            (Path(tmp) / "cell.yaml").write_text(yaml.safe_dump(cell.to_dict(), sort_keys=False))
            curves.to_parquet(Path(tmp) / "curves.parquet", index=False)
            if units is not None:
                units.to_parquet(Path(tmp) / "units.parquet", index=False)
            if weights_path is not None:
                shutil.copyfile(weights_path, Path(tmp) / "model.pt")
            retrying(lambda: self._artifact_store().log_artifacts(tmp), "logging artifacts")
        for chunk, tag_chunk in log_batches(metrics, tags + [RunTag("status", STATUS_COMPLETE)]):
            self._log_batch(chunk, tag_chunk, "logging curves")
        if self.pending:
            self.last_loss_step = self.pending[-1][0]
            self.pending.clear()
        retrying(lambda: self.client.set_terminated(self.run_id, "FINISHED"), "ending run")
        self.drop_twins()

    def drop_twins(self) -> list[str]:
        """Delete the other runs of this cell's one create_run (the same open token): a create that an
        overloaded server answered too late is sent again (``retrying``) and the server may store both, and a
        cell must have one run. Only when the create was sent more than once (or a reopened cell found
        several runs); only runs carrying this log's token, never another cell's or another trial's. Asked at
        ``finish``, when every create sent long ago has been stored or dropped; a failure here leaves the
        twins (readers take the complete run) and says so."""
        if not (self.open_token and self.experiment_id):
            return []
        try:
            query = f"tags.{OPEN_TOKEN} = '{self.open_token}'"
            twins = [
                r.info.run_id
                for r in self.tracker.search(self.experiment_id, query)
                if r.info.run_id != self.run_id
            ]
            for run_id in twins:
                retrying(lambda run_id=run_id: self.client.delete_run(run_id), "deleting a twin run")
        except Exception as err:  # noqa: BLE001 - the run is complete: cleanup must not fail the cell
            log.warning(
                "run %s: its twin runs (one create stored twice) were not removed: %s", self.run_id, err
            )
            return []
        if twins:
            log.warning("run %s: removed %d twin run(s) of its create (%s)", self.run_id, len(twins), twins)
        return twins

    def _artifact_store(self):
        """The run's artifact repository, from the artifact URI known since the run was opened (MLflow's
        log_artifacts would ask the server for the run first); one upload per file, as MLflow's."""
        if self.artifact_uri is None:
            self.artifact_uri = retrying(
                lambda: self.client.get_run(self.run_id), "reading run"
            ).info.artifact_uri
        from mlflow.store.artifact.artifact_repository_registry import get_artifact_repository

        return get_artifact_repository(self.artifact_uri, tracking_uri=self.tracker.uri)

    def note(self, tag: str, text: str) -> None:
        """Set a tag on the cell's run (e.g. ``checkpoint_damaged``) and log it as a warning."""
        log.warning("%s: %s", tag, text)
        retrying(lambda: self.client.set_tag(self.run_id, tag, text[:4000]), f"tagging {tag}")

    def fail(self, error: str) -> None:
        """Mark the run failed with its error; best effort (the store may be what failed), never raises."""
        try:
            retrying(lambda: self.client.set_tag(self.run_id, "status", STATUS_FAILED), "tagging failed", 3)
            retrying(lambda: self.client.set_tag(self.run_id, "error", error[-4000:]), "tagging error", 3)
            retrying(lambda: self.client.set_terminated(self.run_id, "FAILED"), "ending run", 3)
        except TrackingError as err:
            log.warning("could not mark run %s failed: %s", self.run_id, err)


def log_batches(metrics: list, tags: list) -> Iterator[tuple[list, list]]:
    """(metrics, tags) chunks within MLflow's log_batch limits (<= 1000 entities, <= 100 tags), in order:
    the metrics fill the first chunks and the tags ride with the last metrics, so the last tag given is
    stored last. Nothing to log: no chunk."""
    room = MAX_BATCH_ENTITIES - min(len(tags), MAX_BATCH_TAGS)  # metrics beside the first tags
    head = max(0, len(metrics) - room)
    for start in range(0, head, MAX_BATCH_ENTITIES):
        yield metrics[start : min(start + MAX_BATCH_ENTITIES, head)], []
    last = metrics[head:]
    for start in range(0, max(len(tags), 1 if last else 0), MAX_BATCH_TAGS):
        yield (last if start == 0 else []), tags[start : start + MAX_BATCH_TAGS]


def experiment_ui_link(uri: str, experiment_id: str, ui: str = "http://127.0.0.1:5000") -> str:
    """The address of an experiment's runs table in the MLflow UI: ``uri`` itself for a tracking server,
    else ``ui`` (where ``mlflow ui`` listens by default). MLflow 3.17 opens an experiment on its GenAI
    overview unless the URL's ``workflowType`` (or the sidebar switch the browser last chose) says model
    training, whatever the experiment's EXPERIMENT_KIND tag."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else ui
    return f"{base}/#/experiments/{experiment_id}/runs?workflowType=machine_learning"


def ui_command(uri: str) -> str | None:
    """The command that serves the MLflow UI for a store (None for a tracking server, which is one)."""
    if uri.startswith(("http://", "https://")):
        return None
    return shlex.join(["mlflow", "ui", "--backend-store-uri", uri])


def curve_metric_key(predictor: str) -> str:
    """The MLflow metric of a training cell's curve: ``model`` -> eval/err, any other predictor (a
    baseline) -> baseline/<name>; rows split by a prompt meta (``<predictor>|<meta>=<value>``) add
    ``/<meta>=<value>``; characters MLflow names do not allow (``=``, ``|``, ...) are written ``_``.
    Kinds with curves of their own name them with their ``metric_key`` (scaling.kinds)."""
    base, _, split = predictor.partition("|")
    key = "eval/err" if base == "model" else f"baseline/{base}"
    return metric_name(f"{key}/{split}" if split else key)


def metric_name(name: str) -> str:
    """``name`` with the characters MLflow metric names do not allow (``=``, ``|``, brackets) written
    ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", name)
