"""The tracking store's interface: what the product asks of a store (TrackingStore, CellRunLog), the records
it reads back (RunRecord), and the layout of its runs; this package alone speaks MLflow, which implements it.

This module imports none of its package's modules (they import it): backends.py (which backend a URI
opens), tracker.py (Tracker: MLflow's TrackingStore), cell_log.py (CellLog: MLflow's CellRunLog), uri.py
(which store a URI names, and checks that it exists), retry.py (backoff), names.py (metric names),
store_template.py (new SQLite stores start as a copy of an empty one), adaptive_waves.py (the adaptive
driver's wave records on the sweep's parent run) and analysis_runs.py (analysis's outputs as a run). No
MLflow object and no filter string leaves the package: callers ask in the product's terms (a sweep's cell
runs, of a status, with these params) and get RunRecords back.

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
  and ``baseline/<name>``; the temperature kinds (papers.temperature.kind) log ``temperature/<name>``
  (e.g. ``temperature/tau_1.5``: MLflow names allow no ``=``; step = the curves' ``step`` column, else
  n) and their summary (``tau_best``, ``tau_heuristic``, ``tau_opt``) as metrics and tags;
- artifacts: ``cell.yaml``, ``curves.parquet`` (one row per predictor and n: err, err_lo, err_hi,
  prompts), ``model.pt`` (final weights; temperature jobs log it only for a model they trained) and, for
  the temperature scans, ``units.parquet`` (a score per question or prompt, which the analysis
  resamples: papers.temperature.kind.JobResult.units; cells logged before it have none).

Every call retries with exponential backoff, so a tracking server that blinks neither kills a trial nor
loses metrics. Training losses are buffered and flushed at checkpoints (at most every LOSS_FLUSH_SECONDS),
skipping steps already logged; a flush that fails keeps its points (the trial stores them in its
checkpoint) and tries again at the next checkpoint, and the final flush before ``finish`` must succeed,
or the cell fails and Tune retries it.
"""

from __future__ import annotations

import abc
import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterable, Mapping

from ..redact import redact

if TYPE_CHECKING:
    import pandas as pd

# Ending a run on a server makes MLflow write "View run ... at: <tracking URI>/#/..." to stdout, with the
# URI's credentials and outside any logger (so log redaction never sees it); a trial's stdout reaches the
# driver's terminal through Ray. The project prints its own, redacted, links: MLflow's are turned off in
# every process that imports this package, any of its modules (drivers and trials alike).
os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"

STATUS_COMPLETE, STATUS_RUNNING, STATUS_FAILED = "complete", "running", "failed"


class TrackingError(RuntimeError):
    """The tracking store cannot be used (unreachable, or holds something it should not)."""


ALL = None  # Columns: every name


@dataclass(frozen=True)
class Columns:
    """Which of each run's params, metrics and tags a search reads back: ALL (None) or a tuple of names
    (empty: none). A reader names what it uses, so a store that can read less for fewer does; a RunRecord's
    own fields come back whatever is named."""

    params: tuple[str, ...] | None = ALL
    metrics: tuple[str, ...] | None = ALL
    tags: tuple[str, ...] | None = ALL


EVERYTHING = Columns()
BARE = Columns(params=(), metrics=(), tags=())  # a RunRecord's own fields only


@dataclass(frozen=True)
class RunRecord:
    """One run as the product reads it back (a cell's, the sweep's parent's), never the store's own object:
    ``tags``, ``params`` and ``metrics`` (each metric's latest value) hold what the search's Columns named."""

    run_id: str
    name: str
    experiment_id: str
    cell_key: str | None  # the tag that finds a cell's run again (None: not a cell's run)
    status: str  # the product's status tag: running, complete or failed ('' when none)
    state: str  # the store's lifecycle of the run: RUNNING, FINISHED, FAILED or KILLED
    artifact_uri: str | None  # where its artifacts lie (scaling.tracking.table reads a local one in place)
    start_time: int | None  # ms since the epoch
    end_time: int | None
    tags: Mapping[str, str]
    params: Mapping[str, str]
    metrics: Mapping[str, float]


class TrackingStore(abc.ABC):
    """What the sweep driver, the adaptive driver and analysis ask of a tracking store (MLflow's:
    tracker.Tracker; backends.open_store picks one by URI). A backend implements the abstract methods; the
    others are built on them."""

    uri: str
    backend: str  # its name in messages ("MLflow")

    @abc.abstractmethod
    def experiment_id(
        self, name: str, create: bool = False, tags: dict[str, str] | None = None
    ) -> str | None:
        """The id of the experiment named ``name`` (one per sweep); with ``create``, created (with ``tags``)
        when missing, else None."""

    @abc.abstractmethod
    def experiment_tags(self, experiment_id: str) -> dict[str, str]:
        """The tags the experiment was created with (e.g. ``sweep_file``)."""

    @abc.abstractmethod
    def sweep_run(self, experiment_id: str, sweep: str, document: dict, variant: str = "") -> str:
        """The sweep's parent run (a ``--set`` variant's own, tagged ``variant``: scaling.planning.variants),
        created once and reopened by a rerun, holding the resolved sweep file (``sweep.yaml``); its id."""

    def show_lattice(
        self, experiment_id: str, params: list[str], metrics: list[str], names: list[str]
    ) -> None:
        """Have the store's UI open the experiment on its lattice: the cells (``names``), with ``params``
        and ``metrics`` as columns (MLflow: views.py; a store without a UI: nothing)."""

    @abc.abstractmethod
    def end_sweep_run(self, run_id: str, status: str, seconds: dict[str, float] | None = None) -> None:
        """End the sweep's parent run as FINISHED, FAILED or KILLED, with ``seconds`` (the driver's seconds
        by phase, scaling.trial.timeline) as its metrics."""

    @abc.abstractmethod
    def find_runs(
        self,
        experiment_id: str,
        *,
        tags: Mapping[str, str] | None = None,
        params: Mapping[str, str] | None = None,
        columns: Columns = EVERYTHING,
        limit: int | None = None,
    ) -> list[RunRecord]:
        """The experiment's runs whose tags and params equal those given (every run when none are), each
        with the ``columns`` asked for; at most ``limit`` of them (None: all, read in pages)."""

    @abc.abstractmethod
    def metric_history(self, run_id: str, key: str) -> list[tuple[int, float]]:
        """Every (step, value) of one metric of a run."""

    @abc.abstractmethod
    def download(
        self, run_id: str, artifact: str, directory: str | Path, artifact_uri: str | None = None
    ) -> str:
        """One artifact of a run downloaded into ``directory``; its local path. ``artifact_uri`` (the run's
        RunRecord.artifact_uri) may spare asking the store where the run's artifacts are."""

    @abc.abstractmethod
    def artifact_names(self, run_id: str) -> set[str]:
        """The names of the artifacts at the top of a run (not those in its folders)."""

    @abc.abstractmethod
    def log_outputs_run(
        self,
        experiment: str,
        run_name: str,
        tags: dict[str, str],
        files: list[tuple[str | Path, str | None]],
        late: Callable[[str], list[tuple[str | Path, str | None]]] | None = None,
    ) -> str:
        """A finished run of ``experiment`` (under the sweep's parent run when there is one: its
        ``variant`` tag's, else the sweep's own) holding ``files``, each (path, folder or None), and then
        ``late(run_id)``'s; its id (analysis_runs.py). A report among them is linked from the parent."""

    @abc.abstractmethod
    def log_wave(self, run_id: str, record: dict, answers: pd.DataFrame) -> None:
        """One wave of an adaptive sweep on its parent run: the decision, the answers before it and the
        compute spent (adaptive_waves.py)."""

    @abc.abstractmethod
    def read_waves(self, experiment_id: str, sweep: str) -> list[dict]:
        """The wave records on the sweep's parent run, in order (none for a sweep run in full)."""

    def runs_of_sweep(
        self,
        experiment: str,
        *,
        kind: str = "cell",
        status: str | None = None,
        params: Mapping[str, str] | None = None,
        columns: Columns = EVERYTHING,
    ) -> list[RunRecord]:
        """The runs of one kind (``cell``: the cells'; ``sweep``: the parent run) of the experiment named
        ``experiment``, of one status when given, with these params: one bulk search, no call per run;
        LookupError when there is no such experiment."""
        experiment_id = self.experiment_id(experiment)
        if experiment_id is None:
            raise LookupError(
                f"no {self.backend} experiment named {experiment!r} in {redact(self.uri)};"
                " run the sweep first"
            )
        tags = {"kind": kind, **({"status": status} if status else {})}
        return self.find_runs(experiment_id, tags=tags, params=params, columns=columns)

    def cell_runs(self, experiment_id: str, cell_key: str) -> list[RunRecord]:
        """The runs of one cell (one, but for a create the store kept twice: CellLog.drop_twins)."""
        return self.find_runs(experiment_id, tags={"cell_key": cell_key, "kind": "cell"})

    def sweep_parent(self, experiment_id: str, sweep: str, variant: str = "") -> str | None:
        """The run id of the sweep's parent run (of the ``--set`` variant, when given), if it exists."""
        parent = self.sweep_parent_run(experiment_id, sweep, variant)
        return None if parent is None else parent.run_id

    def sweep_parent_run(self, experiment_id: str, sweep: str, variant: str = "") -> RunRecord | None:
        """The sweep's parent run (of the ``--set`` variant, when given), if it exists: the first started."""
        found = self.find_runs(
            experiment_id, tags={"kind": "sweep", "sweep": sweep}, columns=Columns((), (), ("variant",))
        )
        mine = [r for r in found if r.tags.get("variant", "") == variant]
        return min(mine, key=lambda r: r.start_time or 0) if mine else None

    def cell_records(self, experiment_id: str) -> dict[str, RunRecord]:
        """cell_key -> its run; where a key has several runs, the complete (then oldest) one wins."""
        records: dict[str, RunRecord] = {}
        runs = self.find_runs(experiment_id, tags={"kind": "cell"}, columns=BARE)
        for run in sorted(runs, key=lambda r: r.start_time or 0):
            key = run.cell_key
            if key and (
                key not in records
                or (run.status == STATUS_COMPLETE and records[key].status != STATUS_COMPLETE)
            ):
                records[key] = run
        return records

    def complete_keys(self, experiment_id: str) -> set[str]:
        """The keys of the cells with a complete run."""
        return {k for k, r in self.cell_records(experiment_id).items() if r.status == STATUS_COMPLETE}

    def last_loss_step(self, run_id: str) -> int:
        """The last training step whose loss the run holds (0: none)."""
        return max((step for step, _ in self.metric_history(run_id, "train/loss")), default=0)


class CellRunLog(abc.ABC):
    """What a trial asks of a store for its cell: the cell's run, opened or reused (backends.open_cell_log;
    MLflow's: cell_log.CellLog), its training losses, curves, artifacts and status. ``complete``: the run was
    complete already (the trial skips the cell); ``pending``: the training losses not yet in the store,
    which the trial keeps in its checkpoint; ``last_loss_step``: the last step whose loss is in the store."""

    run_id: str
    complete: bool
    pending: list[tuple[int, float, int]]
    last_loss_step: int

    @abc.abstractmethod
    def log_metrics(self, key: str, points: Iterable[tuple]) -> None:
        """Log (step, value) or (step, value, time in ms) points of one metric."""

    @abc.abstractmethod
    def log_losses(self, points: Iterable[tuple], final: bool = False) -> bool:
        """Buffer training losses and flush them now and then (always with ``final``); True when every point
        is in the store."""

    @abc.abstractmethod
    def finish(
        self,
        cell,
        curves: pd.DataFrame,
        weights_path: str | Path | None,
        summary: dict[str, float] | None = None,
        metric_key: Callable[[str], str] | None = None,
        units: pd.DataFrame | None = None,
    ) -> None:
        """Log the cell's artifacts, buffered losses, curves (one metric each, named by ``metric_key``) and
        summary, then status=complete last, and end the run."""

    @abc.abstractmethod
    def note(self, tag: str, text: str) -> None:
        """Set a tag on the cell's run (e.g. ``checkpoint_damaged``)."""

    @abc.abstractmethod
    def fail(self, error: str) -> None:
        """Mark the run failed with its error; never raises."""
