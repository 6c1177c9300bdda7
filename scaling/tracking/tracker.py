"""The driver's and analysis' side of a tracking store (Tracker): experiments, the sweep's parent run, and
the search and download of a sweep's cell runs."""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

import yaml

from ..redact import redact
from . import STATUS_COMPLETE, TrackingError
from .retry import quick_http, retrying
from .store_template import seed_sqlite_store
from .uri import artifact_root, check_store_exists

# MLflow 3's experiment kind: "custom_model_development" is a model-training experiment (runs, params,
# metrics), not a GenAI one (traces). MLflow 3.17's own UI decides its view by the sidebar's GenAI / Model
# training switch instead (a URL's ``workflowType``, else the browser's last choice): experiment_ui_link.
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = (EXPERIMENT_KIND_TAG, "custom_model_development")


@dataclass(frozen=True)
class CellRecord:
    run_id: str
    status: str
    name: str


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
            with quick_http():
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
