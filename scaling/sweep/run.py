"""One run of a sweep from its plan to its summary: the state scaling.sweep.phases fills in, phase by phase.

``run_sweep`` goes through named phases: plan the run (the sweep file, the stores and the
Ray it uses, all checked), read the store (which cells are complete), describe it (``--dry-run``) or start
it (Ray, the MLflow experiment and the sweep's parent run), train (Tune experiments, or the waves of
scaling.sweep.waves), report. Each phase reads and fills in one SweepRun instead of passing the plan,
tracker, experiment, outcome, stores, shared trial settings and output from function to function; the
flags a user gives beyond the file, the stores and the output are grouped in RunOptions, as Ray Tune's
``Tuner`` groups its options in config objects.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, TextIO

from scaling.budget.cards import Cards
from scaling.cluster import Head
from scaling.planning.plan import Plan, PlannedCell
from scaling.sweep.progress import Summary
from scaling.trial.timeline import DRIVER_PREFIX, Timeline

from ..redact import redact
from ..tracking import TrackingStore


@dataclass
class SweepOutcome:
    total: int
    skipped: int  # complete before this run
    completed: list[str] = field(default_factory=list)  # cell keys completed by this run
    failed: dict[str, str] = field(default_factory=dict)  # cell key -> error
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


@dataclass(frozen=True)
class RunOptions:
    """How ``python -m scaling.sweep`` runs a sweep beyond the file, the stores and the output: its flags."""

    dry_run: bool = False  # print the cells, their resources and state; run nothing
    adaptive: bool = False  # run the lattice in waves (scaling.adaptive; the file's `adaptive:` section)
    # allow a grid of up to this many cells (default scaling.planning.guards.MAX_CELLS)
    max_cells: int | None = None
    address: str | None = None  # join this Ray cluster ('auto' or host:port); None: a new local Ray
    num_cpus: int | None = None  # CPUs of the embedded local Ray
    num_gpus: int | None = None  # GPUs of the embedded local Ray
    gpus: int | None = None  # --dry-run's wall time on this many GPUs (None: --num-gpus, the cluster's, ...)
    gpu_memory: str | None = None  # --gpu-memory SIZE: the GPU packs planned for cards of this memory
    autoscaling: bool = False  # the cluster adds nodes on demand: no check that every cell fits a node
    verbose: bool = False  # also show Ray's and Ray Tune's own messages and banners
    live: bool | None = None  # the live view (None: when the output is a terminal)
    # count cells trained with another source of a plug-in at the same version as current
    # (scaling.sweep.plugin_sources)
    accept_plugin_changes: bool = False


@dataclass
class SweepRun:
    """The state of one sweep run, filled in phase by phase (scaling.sweep.phases.run_sweep)."""

    path: str  # the sweep file
    profile: str
    overrides: tuple[str, ...]  # the --set assignments
    options: RunOptions
    out: TextIO  # where the progress and the summary go
    started: float  # time.monotonic() when the run began
    plan: Plan
    policy: Any = None  # with --adaptive: the checked policy (scaling.adaptive.policy.Policy)
    head: Head | None = None  # the `ray up` cluster this machine is the head of
    # the cards the GPU cells plan their packs for (scaling.budget.cards), once started
    cards: Cards | None = None
    address: str | None = None  # the Ray to join (the flag, or the head's); None: a new local Ray
    uri: str = ""  # the tracking URI, resolved
    store_uri: str = ""  # this sweep's checkpoints and Tune state
    tracker: TrackingStore | None = None  # None while a new SQLite store is not created yet
    experiment_id: str | None = None
    complete: set[str] = field(default_factory=set)  # cell keys complete when the run began
    pending: list[PlannedCell] = field(default_factory=list)  # the plan's cells not complete then
    missing: tuple[str, ...] = ()  # --dry-run: the local files the plan names that this machine lacks
    outcome: SweepOutcome | None = None
    waves: list[dict] = field(default_factory=list)  # an adaptive sweep's wave records, read once
    parent: str | None = None  # the sweep's parent run
    shared: dict[str, str] = field(default_factory=dict)  # what every trial's spec carries (TrialSpec)
    trials: list[int] = field(default_factory=list)  # trials of each Tune experiment run
    # the driver's seconds by phase since ``started``, logged on the sweep's parent run when it ends
    # (scaling.trial.timeline)
    timeline: Timeline = field(init=False)

    def __post_init__(self) -> None:
        self.timeline = Timeline(prefix=DRIVER_PREFIX, began=self.started)

    @property
    def name(self) -> str:
        return self.plan.name

    def say(self, text: str) -> None:
        """A line of the sweep's own."""
        self.out.write(text + "\n")
        self.out.flush()

    def complete_now(self) -> set[str]:
        """The keys of the cells complete in the store now (TrackingStore.complete_keys): the one way a sweep
        asks which cells are complete."""
        return self.tracker.complete_keys(self.experiment_id)

    def summary(self, unfinished: int, commands: list[str]) -> Summary:
        """The closing summary of this run (scaling.sweep.progress.summary_lines renders it)."""
        names = {p.cell.key: p.name for p in self.pending}
        return Summary(
            name=self.name,
            total=self.outcome.total,
            skipped=self.outcome.skipped,
            completed=len(self.outcome.completed),
            failed={f"{names[key]} ({key})": error for key, error in self.outcome.failed.items()},
            unfinished=unfinished,
            elapsed=time.monotonic() - self.started,
            trials=sum(self.trials),
            uri=redact(self.uri),
            commands=commands,
        )
