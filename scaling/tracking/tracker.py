"""The driver's and analysis' side of a tracking store (Tracker): experiments, the sweep's parent run, and
the search and download of a sweep's cell runs."""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

import yaml

from ..redact import redact
from . import (
    EVERYTHING,
    Columns,
    RunRecord,
    TrackingError,
    TrackingStore,
    adaptive_waves,
    analysis_runs,
    views,
)
from .retry import brief, quick_http, retrying
from .store_template import seed_sqlite_store
from .uri import artifact_root, check_store_exists, local_artifact_root

if TYPE_CHECKING:
    import pandas as pd

# MLflow 3's experiment kind: "custom_model_development" is a model-training experiment (runs, params,
# metrics), not a GenAI one (traces). MLflow 3.17's own UI decides its view by the sidebar's GenAI / Model
# training switch instead (a URL's ``workflowType``, else the browser's last choice): experiment_ui_link.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = (EXPERIMENT_KIND_TAG, "custom_model_development")


class Tracker(TrackingStore):
    """MLflow's tracking store (the interface: scaling.tracking.TrackingStore).

    ``Tracker(uri)`` is the writers' (the sweep, its trials): a SQLite store not there yet is created
    (store_template). Reading commands open ``Tracker.existing(uri)``, which never creates one."""

    backend = "MLflow"

    # whether a reading command's store (create=False) answers its reads without MLflow's client
    # (database.DatabaseTracker); the client is then made when first needed (~2.5 s of MLflow's imports)
    reads_without_client = False

    def __init__(self, uri: str, create: bool = True):
        self.uri = uri
        if create:
            seed_sqlite_store(uri)
        else:
            check_store_exists(uri)
        self._client = None
        self._client_made = threading.Lock()
        if create or not self.reads_without_client:
            self.open_client()  # MLflow's own refusals, at once

    @property
    def client(self):
        """MLflow's client of the store, made at the first use."""
        return self._client or self.open_client()

    def open_client(self):
        """Make (once, whichever thread asks first) and return MLflow's client of the store; TrackingError
        where MLflow refuses the store."""
        with self._client_made:
            if self._client is None:
                from mlflow.exceptions import MlflowException
                from mlflow.tracking import MlflowClient

                try:
                    self._client = MlflowClient(tracking_uri=self.uri)
                # e.g. MLflow 3 refuses a file: store (MLFLOW_ALLOW_FILE_STORE)
                except MlflowException as err:
                    raise TrackingError(
                        f"cannot use the MLflow tracking store {redact(self.uri)}: {redact(str(err))}"
                    ) from None
            return self._client

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
            retrying(
                self.probe,
                "reaching the tracking store",
                attempts=3,
                first_wait=0.5,
                say=False,  # the error below says it, in one line
            )
        except Exception as err:  # noqa: BLE001 - any failure here means unusable
            raise TrackingError(
                f"cannot use the MLflow tracking store {redact(self.uri)}: {brief(err)}"
            ) from None

    def probe(self) -> None:
        """One quick read of the store (check_reachable tries it): an experiment, by MLflow's REST client
        without its own retries."""
        with quick_http():
            self.client.search_experiments(max_results=1)

    def experiment_id(
        self, name: str, create: bool = False, tags: dict[str, str] | None = None
    ) -> str | None:
        """The experiment's id; with ``create``, created if missing, tagged as a model-training experiment
        (EXPERIMENT_KIND, also added to an older experiment that lacks it)."""
        found = retrying(lambda: self.client.get_experiment_by_name(name), f"looking up experiment {name}")
        if found is not None:
            if found.lifecycle_stage == "deleted":
                raise self.deleted(name)
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

    def deleted(self, name: str) -> TrackingError:
        """The error for an experiment of the sweep's name that is deleted."""
        return TrackingError(
            f"experiment {name!r} is deleted in {redact(self.uri)}; restore it"
            f" (mlflow experiments restore) or rename the sweep"
        )

    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        return dict(retrying(lambda: self.client.get_experiment(experiment_id), "reading experiment").tags)

    def sweep_run(self, experiment_id: str, sweep: str, document: dict, variant: str = "") -> str:
        """The sweep's parent run (a variant's own: named and tagged by it; created once), with the resolved
        sweep file as an artifact."""
        run_id = self.sweep_parent(experiment_id, sweep, variant)
        if run_id is not None:
            retrying(lambda: self.client.update_run(run_id, status="RUNNING"), "reopening sweep run")
        else:
            tags = {"kind": "sweep", "sweep": sweep, **({"variant": variant} if variant else {})}
            name = f"sweep {sweep}" + (f" [{variant}]" if variant else "")
            run = retrying(
                lambda: self.client.create_run(experiment_id, run_name=name, tags=tags), "creating sweep run"
            )
            run_id = run.info.run_id
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "sweep.yaml"
            path.write_text(yaml.safe_dump(document, sort_keys=False))
            retrying(lambda: self.client.log_artifact(run_id, str(path)), "logging sweep.yaml")
        return run_id

    def show_lattice(
        self, experiment_id: str, params: list[str], metrics: list[str], names: list[str]
    ) -> None:
        key, value = views.view_tag(params, metrics, names)
        retrying(lambda: self.client.set_experiment_tag(experiment_id, key, value), "setting the runs view")

    def end_sweep_run(self, run_id: str, status: str, seconds: dict[str, float] | None = None) -> None:
        """FINISHED once every cell is complete, FAILED when cells failed or the sweep broke, KILLED when
        interrupted (a rerun reopens it); ``seconds`` logged first (a rerun's are the latest values)."""
        if seconds:
            from mlflow.entities import Metric

            now = int(time.time() * 1000)
            metrics = [Metric(name, float(value), now, 0) for name, value in seconds.items()]
            retrying(lambda: self.client.log_batch(run_id, metrics=metrics), "logging the sweep's seconds")
        retrying(lambda: self.client.set_terminated(run_id, status), "ending sweep run")

    def find_runs(
        self,
        experiment_id: str,
        *,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        columns: Columns = EVERYTHING,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """The experiment's runs whose tags and params equal those given: one search_runs per 1,000 runs
        (MLflow reads every column; ``columns`` only trims the records), or one of ``limit`` runs."""
        query = filter_string(tags or {}, params or {})
        if limit is not None:
            page = retrying(
                lambda: self.client.search_runs([experiment_id], query, max_results=limit), "searching runs"
            )
            return [run_record(run, columns) for run in page]
        found, token = [], None
        while True:
            page = retrying(
                lambda: self.client.search_runs([experiment_id], query, max_results=1000, page_token=token),
                "searching runs",
            )
            found.extend(run_record(run, columns) for run in page)
            token = page.token
            if not token:
                return found

    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        history = retrying(lambda: self.client.get_metric_history(run_id, key), f"reading {key}")
        return [(m.step, m.value) for m in history]

    def download(
        self, run_id: str, artifact: str, directory: str | Path, artifact_uri: str | None = None
    ) -> str:
        """Download one artifact of a run into ``directory``; its local path. With the run's
        ``artifact_uri`` (RunRecord.artifact_uri) straight from its artifact store, without
        asking the tracking store for the run first (half the requests of a bulk read); copied, without
        MLflow, where that store is this machine's disk (local_artifact_root; a file not there is a
        TrackingError at once, not after a minute of retries)."""
        root = local_artifact_root(artifact_uri)
        if root is not None:
            if not (root / artifact).is_file():
                raise TrackingError(f"downloading {artifact} failed: no such file {root / artifact}")
            target = Path(directory) / artifact
            target.parent.mkdir(parents=True, exist_ok=True)
            return str(shutil.copyfile(root / artifact, target))
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

    def log_outputs_run(
        self,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        files: list[tuple[str | Path, str | None]],
        late: Callable[[str], list[tuple[str | Path, str | None]]] | None = None,
    ) -> str:
        experiment_id = self.experiment_id(experiment)
        if experiment_id is None:
            raise LookupError(f"no MLflow experiment named {experiment!r} in {redact(self.uri)}")
        tags = dict(tags)
        sweep, variant = tags.get("sweep", experiment), tags.get("variant", "")
        # a variant's own parent run, else the sweep's (a variant run before variants had their own)
        parent = self.sweep_parent(experiment_id, sweep, variant) or self.sweep_parent(experiment_id, sweep)
        if parent:
            tags["mlflow.parentRunId"] = parent
        run_id = analysis_runs.log_outputs_run(self.client, experiment_id, run_name, tags, files, late)
        names = [Path(path).name for path, sub in files if sub is None]
        if parent and (late is not None or "report.html" in names):  # the report: one click from the parent
            note = views.report_note(experiment_id, run_id, run_name)
            retrying(lambda: self.client.set_tag(parent, views.DESCRIPTION_TAG, note), "linking the report")
        return run_id

    def log_wave(self, run_id: str, record: dict, answers: pd.DataFrame) -> None:
        adaptive_waves.log_wave(self.client, run_id, record, answers)

    def read_waves(self, experiment_id: str, sweep: str) -> list[dict]:
        parent = self.sweep_parent_run(experiment_id, sweep)
        if parent is None:
            return []
        root = local_artifact_root(parent.artifact_uri)
        if root is not None:  # on this machine: read in place
            return adaptive_waves.waves_in(root)
        return adaptive_waves.read_waves(self.client, parent.run_id, self.download)


def filter_string(tags: Mapping[str, str], params: Mapping[str, str]) -> str:
    """MLflow's search filter for runs whose tags and params equal these values (a name that is not an
    identifier, ``model.name``, in backquotes); empty: every run."""
    clauses = [f"tags.{quoted(k)} = '{v}'" for k, v in tags.items()]
    clauses += [f"params.{quoted(k)} = '{v}'" for k, v in params.items()]
    return " and ".join(clauses)


def quoted(name: str) -> str:
    return name if name.isidentifier() else f"`{name}`"


def run_record(run, columns: Columns = EVERYTHING) -> RunRecord:
    """An MLflow run (a search's, or get_run's) as the product's RunRecord, with the ``columns`` named."""
    info, data = run.info, run.data
    return RunRecord(
        run_id=info.run_id,
        name=info.run_name,
        experiment_id=info.experiment_id,
        cell_key=data.tags.get("cell_key"),
        status=data.tags.get("status", ""),
        state=info.status,
        artifact_uri=info.artifact_uri,
        start_time=info.start_time,
        end_time=info.end_time,
        tags=picked(data.tags, columns.tags),
        params=picked(data.params, columns.params),
        metrics=picked(data.metrics, columns.metrics),
    )


def picked(values: dict, names: tuple[str, ...] | None) -> dict:
    """``values`` itself for every name (no copy), else those of ``names`` it holds."""
    if names is None:
        return values
    return {name: values[name] for name in names if name in values}
