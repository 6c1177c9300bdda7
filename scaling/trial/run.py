"""One Ray Tune trial: a cell or a pack of cells, each run by its experiment kind; resume, log, report.

The driver (scaling.sweep) hands each trial a ``TrialSpec``: the cells it runs and where to log and
checkpoint them. A single cell runs through its kind (scaling.kinds): ``kind.run(cell, TrialContext)``;
a pack (scaling.budget.packing decided it) through the hook of the kind that packs,
``kind.run_pack(members, PackContext)``, which trains the members together and hands back how to finish
each; this module takes the leases, opens the members' runs and fails a member alone when its finish
fails. It knows no kind by name.

Checkpoints are keyed by the cell (scaling.trial.checkpoints), not by the Tune trial, so they outlive any one
driver: a rerun after a crash, or a sweep edited to add cells (a new Tune experiment, never
``Tuner.restore``, which unpickles and cannot add cells), continues each cell from its own last
checkpoint. Tune's retries after a worker dies restart the trainable (scaling.trial.trainable), which resumes
the same way.

A trial trains a cell only while it holds the cell's lease (scaling.trial.leases), taken before the cell's run
is opened or its checkpoint read and given back when it ends: a cell another driver's trial holds is
skipped (the trial reports it as ``held``; the driver waits for it), so no cell is trained twice at once.
The trial reads the tracking URI from its process environment when the spec carries it redacted
(scaling.redact): credentials never travel through Tune's experiment state.

On a GPU the trial sets the matmul precision its cells ask for (scaling.trial.devices.use_precision) and sizes
a pack to the device it holds (``pack_memory``: its share of the real card,
scaling.budget.packing.device_pack_size): a pack larger than that trains in smaller packs one after another,
and one that still runs out of memory splits and carries on (papers.context_scaling.stacked.PackTrainer), each
said in the members' runs.
"""

from __future__ import annotations

import math
import time
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from scaling.budget.cost import load_gpu_table
from scaling.budget.packing import device_pack_size, memory_guard
from scaling.cells import Cell
from scaling.redact import trial_tracking_uri
from scaling.tracking import CellRunLog
from scaling.tracking.backends import open_cell_log
from scaling.tracking.sweep_models import load_complete_model
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.devices import cap_gpu_memory, trial_device, trial_memory, use_precision
from scaling.trial.leases import Holder, Lease, Leases
from scaling.trial.spec import TrialSpec
from scaling.trial.storage import trial_storage_uri
from scaling.trial.timeline import Timeline

# Seconds between a trial's progress reports to Tune while it trains between checkpoints: the driver's
# heartbeat line (at most once a minute) then shows a step that moves, although a long cell may checkpoint
# only every several minutes. A report is one small message to the driver.
PROGRESS_EVERY_S = 10.0


class Throttled:
    """Passes a progress dict on to ``report`` at most once per ``every`` seconds (default
    PROGRESS_EVERY_S), unless told it must, and the first at once (the progress view learns when a trial
    starts training, and from which step: scaling.sweep.progress times the sweep from then); ``clock`` reads
    seconds (time.monotonic)."""

    def __init__(
        self, report: Callable[[dict], None] | None, every: float | None = None, clock=time.monotonic
    ):
        self.report, self.clock = report, clock
        self.every = PROGRESS_EVERY_S if every is None else every
        self.last = -math.inf

    def __call__(self, values: dict[str, Any], force: bool = False) -> None:
        if not self.report:
            return
        now = self.clock()
        if force or now - self.last >= self.every:
            self.last = now
            self.report(values)


@dataclass
class PackContext:
    """What a kind's ``run_pack`` gets besides its members: the device, the members' checkpoint store, the
    tracking URI (for kinds that read other runs: ``sweep_model``) and ``progress`` (a dict to Tune: sent at
    once with ``force``, else at most every PROGRESS_EVERY_S seconds), ``timeline``: the trial's seconds by
    phase since it started (scaling.trial.timeline). For a pack, ``limit``: how many members the device's
    memory fits stacked at once (None: all), and ``guard``: the check each stacked step makes first on a
    device of stated memory (scaling.budget.packing.memory_guard; None on a card)."""

    device: torch.device
    store: CheckpointStore
    tracking_uri: str
    report: Callable[[dict], None] | None = field(default=None, repr=False)
    limit: int | None = field(default=None, kw_only=True)
    guard: Callable[[Any], None] | None = field(default=None, kw_only=True, repr=False)
    timeline: Timeline = field(default_factory=Timeline, kw_only=True, repr=False)

    def __post_init__(self) -> None:
        self.throttled = Throttled(self.report)

    def progress(self, values: dict[str, Any], force: bool = True) -> None:
        self.throttled(values, force)

    def sweep_model(self, experiment: str, params: dict[str, str]) -> tuple[dict, dict]:
        """(cell.yaml, weights) of another sweep's complete cell run whose settings match ``params``, read
        from this trial's store (scaling.tracking.sweep_models), for a kind that scans a trained model: the
        kinds reach the store through their trial, never by importing what imports the cells."""
        return load_complete_model(experiment, params, self.tracking_uri)


@dataclass
class TrialContext(PackContext):
    """What a kind's ``run`` gets besides its cell: a PackContext's device, store, tracking URI and progress,
    and the cell's MLflow ``log``."""

    log: CellRunLog = field(kw_only=True)


@dataclass(frozen=True)
class Prepared:
    """A trial's device, its GPU memory cap (the log line, or None) and its checkpoint store."""

    device: torch.device
    cap: str | None
    store: CheckpointStore

    def note_cap(self, log: CellRunLog) -> None:
        """Say in the cell's run (a tag and the trial's log) that its GPU memory is capped."""
        if self.cap:
            log.note("gpu_memory_cap", self.cap)

    def context(self, kind: type[PackContext], spec: TrialSpec, report, timeline: Timeline, **more):
        """The context a kind runs in (TrialContext for a cell, PackContext for a pack: ``more`` holds the
        rest of its fields) on this trial's device and store."""
        uri = trial_tracking_uri(spec.tracking_uri)
        return kind(self.device, self.store, uri, report, timeline=timeline, **more)


def prepare(spec: TrialSpec, cell: Cell, leases: dict[str, Lease]) -> Prepared:
    """Threads, device and GPU memory cap of the trial (scaling.trial.devices); its checkpoint store, which
    writes a cell's checkpoint only while the cell's lease in ``leases`` is still this trial's."""
    torch.set_num_threads(max(1, int(spec.resources.get("cpu", 1))))
    gpu = float(spec.resources.get("gpu", 0))
    device_setting, precision = cell.kind.runs_on(cell)
    device = trial_device(device_setting, gpu)
    use_precision(device, precision)
    return Prepared(
        device,
        cap_gpu_memory(device, gpu),
        CheckpointStore(trial_storage_uri(spec.storage), guard=lambda key: leases[key].check()),
    )


def open_log(spec: TrialSpec, cell: Cell) -> CellRunLog:
    """The cell's log into its run, named as the driver named it (a variant's cells carry the variant)."""
    name = next((m.name for m in spec.members if m.key == cell.key), None)
    uri = trial_tracking_uri(spec.tracking_uri)
    return open_cell_log(uri, spec.experiment_id, cell, spec.sweep, spec.parent_run_id, name)


def take_leases(spec: TrialSpec) -> tuple[dict[str, Lease], dict[str, Holder]]:
    """The leases of the spec's cells this trial got, and the live holders of the others."""
    leases, held = {}, {}
    store = Leases(trial_storage_uri(spec.storage))
    for key in spec.keys:
        got = store.acquire(key, spec.driver)
        (leases if isinstance(got, Lease) else held)[key] = got
    return leases, held


def release(leases: dict[str, Lease]) -> None:
    for lease in leases.values():
        lease.release()


def held_report(held: dict[str, Holder], report) -> dict[str, Any]:
    """The trial's final report when other trials hold some of its cells: the driver waits for those."""
    final = {
        "held": len(held),
        "held_keys": ",".join(held),
        "progress": 1.0,
        "held_by": "; ".join(sorted({h.describe() for h in held.values()})),
    }
    if report:
        report(final)
    return final


def run_cell(spec: TrialSpec, report=None, timeline: Timeline | None = None) -> dict[str, Any]:
    """Run one cell by its kind and log it; ``report`` receives progress dicts (tune.report in a trial),
    ``timeline`` the seconds by phase since the trial started (default: from now). A failure marks the
    cell's run failed with its traceback and is raised again (Tune retries)."""
    timeline = timeline or Timeline()
    (cell,) = spec.cells()
    leases, held = take_leases(spec)
    if held:
        return held_report(held, report)
    try:
        prepared = prepare(spec, cell, leases)
        log = open_log(spec, cell)
        if log.complete:  # finished meanwhile (by another driver, or before a retry)
            final = {"progress": 1.0, "finished": 1}
        else:
            leases[cell.key].record()
            prepared.note_cap(log)
            trial = prepared.context(TrialContext, spec, report, timeline, log=log)
            try:
                final = cell.kind.run(cell, trial)
            except Exception:
                log.fail(traceback.format_exc())
                raise
        if report:
            report(final)
        return final
    finally:
        release(leases)


class PackMemberError(RuntimeError):
    """Some members of a pack failed (their runs say why); the others are complete."""


def run_pack(spec: TrialSpec, report=None, timeline: Timeline | None = None) -> dict[str, Any]:
    """Train, evaluate and log a pack's members by their kind's ``run_pack``, each as its own cell.

    Members whose run is complete already (a retried trial) are skipped, and so are members whose lease
    another trial holds (reported as ``held``); the others resume from their own checkpoints. A member
    that fails (e.g. diverges to NaN) is marked failed in its run and does not stop the others; the trial
    then raises, naming it, so Tune retries the pack (from checkpoints). ``timeline``: as run_cell's.
    """
    timeline = timeline or Timeline()
    leases, held = take_leases(spec)
    try:
        final = run_members(spec, [c for c in spec.cells() if c.key in leases], leases, report, timeline)
    except Exception:
        if held:  # the last report names them: the driver waits for them instead of failing them
            held_report(held, report)
        raise
    finally:
        release(leases)
    return held_report(held, report) if held else final


def run_members(
    spec: TrialSpec, cells: list[Cell], leases: dict[str, Lease], report, timeline: Timeline
) -> dict[str, Any]:
    """Train and finish the pack's members this trial holds (see run_pack)."""
    if not cells:
        return {"progress": 1.0, "finished": 1}
    prepared = prepare(spec, cells[0], leases)
    logs = [open_log(spec, cell) for cell in cells]
    todo = [(cell, log) for cell, log in zip(cells, logs) if not log.complete]
    for cell, log in todo:
        leases[cell.key].record()
        prepared.note_cap(log)
    if todo:
        limit, guard, note = pack_memory(
            [c for c, _ in todo], prepared.device, float(spec.resources.get("gpu", 0))
        )
        if note:
            for _, log in todo:
                log.note("pack_memory", note)
        pack = prepared.context(PackContext, spec, report, timeline, limit=limit, guard=guard)
        errors = finish_members(todo, train_members(todo, pack))
        if errors:
            raise PackMemberError("; ".join(errors.values()))
    final = {"step": max(c.kind.steps(c) for c in cells), "progress": 1.0, "finished": 1}
    if report:
        report(final)
    return final


def pack_memory(cells: list[Cell], device: torch.device, gpu: float):
    """(limit, guard, note) of a pack's members on the trial's device: how many it stacks at once (its
    memory, scaling.trial.devices.trial_memory, under the CUDA cost table's fit:
    scaling.budget.packing.device_pack_size), the check a device of stated memory makes before each step, and
    the line the members' runs carry when the pack is larger than the device fits (None otherwise). (None,
    None, None) where nothing sizes it: a CPU, or no CUDA cost table."""
    memory, table = trial_memory(device, gpu), load_gpu_table()
    if memory is None or table is None or cells[0].kind.step(cells[0]) is None:  # nothing counted to size by
        return None, None, None
    limit = device_pack_size(cells[0], memory.plan, table)
    guard = None if memory.limit is None else memory_guard(cells[0], memory.limit, table)
    note = None
    if limit < len(cells):
        note = (
            f"the trial's device ({memory.source}) fits {limit} of this pack's {len(cells)} members stacked"
            f" at once: they train in packs of at most {limit}, one after another"
        )
    return limit, guard, note


def train_members(todo: list[tuple[Cell, CellRunLog]], pack: PackContext) -> list[Callable[[], Any]]:
    """The members trained together by their kind's ``run_pack``: each member's finish, in order. A failure
    while they train fails every member's run and is raised again (Tune retries the pack)."""
    kind = todo[0][0].kind
    if kind.run_pack is None:
        raise RuntimeError(f"the kind {kind.name!r} packs cells (its packable) but has no run_pack")
    try:
        return kind.run_pack(todo, pack)
    except Exception:
        for _, log in todo:
            log.fail(traceback.format_exc())
        raise


def finish_members(todo: list[tuple[Cell, CellRunLog]], finishes: list[Callable[[], Any]]) -> dict[str, str]:
    """Each member finished in turn (``finishes``: train_members'); key -> error of those that failed, each
    marked failed in its own run without stopping the others."""
    errors: dict[str, str] = {}
    for finish, (cell, log) in zip(finishes, todo):
        try:
            finish()
        except Exception:
            log.fail(traceback.format_exc())
            errors[cell.key] = f"{cell.name} ({cell.key}): {traceback.format_exc().strip().splitlines()[-1]}"
    return errors
