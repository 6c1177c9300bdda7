"""The trial's side of a tracking store (CellLog): one cell's run opened or reused, its training losses
buffered and flushed, its curves, artifacts and status logged."""

from __future__ import annotations

import logging
import os
import shutil
import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable, Iterable, Iterator

import pandas as pd
import yaml

from . import BARE, STATUS_COMPLETE, STATUS_FAILED, STATUS_RUNNING, CellRunLog, RunRecord, TrackingError
from .names import curve_metric_key
from .retry import no_http_retries, quick_http, retrying
from .tracker import Tracker

log = logging.getLogger(__name__)

# Trials flush training losses to the store at most this often (and at the end): a fast cell would
# otherwise spend more time on round trips than on training. Unflushed points ride in every checkpoint.
# SCALING_LOSS_FLUSH_S sets another (0: at every checkpoint; the head-loss tests use it).
LOSS_FLUSH_SECONDS = float(os.environ.get("SCALING_LOSS_FLUSH_S", "30"))
# MLflow's log_batch limits (metrics + params + tags; tags; params)
MAX_BATCH_ENTITIES, MAX_BATCH_TAGS, MAX_BATCH_PARAMS = 1000, 100, 100

OPEN_TOKEN = "open_token"  # tag: the one create_run a cell's run came from (CellLog.drop_twins)


def _most_advanced(tracker: Tracker, found: list[RunRecord]) -> tuple[RunRecord, int]:
    """The incomplete run of a cell to reopen and its last logged training step: the one furthest on (a
    create stored twice leaves a twin with nothing logged; the earliest breaks ties, as before)."""
    best, best_last = None, -1
    for run in sorted(found, key=lambda r: r.start_time or 0):
        last = tracker.last_loss_step(run.run_id)
        if last > best_last:
            best, best_last = run, last
    return best, best_last


class CellLog(CellRunLog):
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
        cls,
        uri: str,
        experiment_id: str,
        cell,
        sweep: str,
        parent_run_id: str | None = None,
        name: str | None = None,
    ) -> "CellLog":
        """Reuse the run tagged with the cell's key, or create it, named ``name`` (default: the cell's
        label; a variant's cells carry the variant: scaling.planning.plan.PlannedCell.name); mark it running
        (a complete run: untouched)."""
        tracker = Tracker(uri)
        found = tracker.cell_runs(experiment_id, cell.key)
        if any(r.status == STATUS_COMPLETE for r in found):
            done = next(r for r in found if r.status == STATUS_COMPLETE)
            return cls(tracker, done.run_id, cell.train.steps, complete=True, flush_every=LOSS_FLUSH_SECONDS)
        if found:
            reopened, last = _most_advanced(tracker, found)
            run_id = reopened.run_id
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
                with no_http_retries():  # every re-send is ours, so that we know when one happened
                    return tracker.client.create_run(experiment_id, run_name=name or cell.name, tags=tags)

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
            artifact_uri=reopened.artifact_uri,
            params=cell.params(),
            open_token=reopened.tags.get(OPEN_TOKEN) if len(found) > 1 else None,
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
                    with quick_http():  # a blinking store must not stall training
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
        timings: dict[str, float] | None = None,
    ) -> None:
        """Log the artifacts, then the buffered training losses, curves, summary (metrics and tags),
        ``timings`` (metrics: scaling.trial.timeline) and status=complete, then end the run: three round trips
        for a cell of up to ~1000 points (log_batches).

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
        metrics += [
            Metric(name, float(value), now, 0)
            for name, value in {**(summary or {}), **(timings or {})}.items()
        ]
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
            made = self.tracker.find_runs(
                self.experiment_id, tags={OPEN_TOKEN: self.open_token}, columns=BARE
            )
            twins = [r.run_id for r in made if r.run_id != self.run_id]
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
