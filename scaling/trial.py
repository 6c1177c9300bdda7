"""One Ray Tune trial: a cell (run by its experiment kind) or a pack of training cells; resume, log, report.

The driver (scaling.sweep) hands each trial a ``TrialSpec``: the cells it runs and where to log and
checkpoint them. A single cell runs through its kind (scaling.kinds): ``kind.run(cell, TrialContext)``;
a pack of training cells (scaling.packing decided it) trains its members stacked
(scaling.science.stacked) and resumes, checkpoints and finishes each member exactly as the training kind
does one cell alone (scaling.kinds.train: ``resume``, ``checkpoint``, ``finish``).

Checkpoints are keyed by the cell (scaling.checkpoints), not by the Tune trial, so they outlive any one
driver: a rerun after a crash, or a sweep edited to add cells (a new Tune experiment, never
``Tuner.restore``, which unpickles and cannot add cells), continues each cell from its own last
checkpoint. Tune's retries after a worker dies restart ``tune_trainable``, which resumes the same way.
"""

from __future__ import annotations

import dataclasses
import traceback
from dataclasses import dataclass, field
from typing import Any, Callable

import torch

from .cells import Cell
from .checkpoints import CheckpointStore
from .kinds.train import checkpoint, finish, resume
from .science.stacked import PackTrainer
from .science.train import CellTrainer, resolve_device
from .tracking import CellLog


@dataclass(frozen=True)
class TrialMember:
    """One cell of a trial: its dict (scaling.cells.Cell.to_dict), key and run name."""

    cell: dict[str, Any]
    key: str
    name: str


@dataclass(frozen=True)
class TrialSpec:
    """The driver-to-trial contract: the cells of one trial and where they log and checkpoint.

    ``members`` holds one cell, or the cells of a pack; ``key`` and ``name`` name the trial (a cell's own,
    or scaling.packing.pack_key's); ``resources`` are Tune's (``{"cpu": 1, "gpu": 0.25, ...}``).
    """

    members: tuple[TrialMember, ...]
    key: str
    name: str
    resources: dict[str, float]
    tracking_uri: str
    experiment_id: str
    sweep: str
    storage: str
    parent_run_id: str | None = None

    @property
    def is_pack(self) -> bool:
        return len(self.members) > 1

    @property
    def keys(self) -> list[str]:
        return [m.key for m in self.members]

    def cells(self) -> list[Cell]:
        return [Cell.from_dict(m.cell) for m in self.members]

    def to_dict(self) -> dict[str, Any]:
        """Plain form for Tune's param space (and its experiment state)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialSpec":
        members = tuple(TrialMember(**m) for m in data["members"])
        return cls(**{**data, "members": members})


@dataclass
class TrialContext:
    """What a kind's ``run`` gets besides its cell: the device, the cell's checkpoint store and MLflow
    log, the tracking URI (for kinds that read other runs) and ``progress`` (a dict to Tune)."""

    device: torch.device
    store: CheckpointStore
    log: CellLog
    tracking_uri: str
    report: Callable[[dict], None] | None = field(default=None, repr=False)

    def progress(self, values: dict[str, Any]) -> None:
        if self.report:
            self.report(values)


def trial_device(spec: TrialSpec, cell: Cell) -> torch.device:
    """The cell's device: CUDA only where the trial was given a GPU."""
    if cell.train.device != "auto":
        return torch.device(cell.train.device)
    return resolve_device("auto") if spec.resources.get("gpu", 0) > 0 else torch.device("cpu")


def cap_gpu_memory(device: torch.device, gpu: float) -> None:
    """Hold a trial given a fraction of a GPU to that fraction of the GPU's memory (whole GPUs: no cap)."""
    if device.type == "cuda" and 0 < gpu < 1:
        torch.cuda.set_per_process_memory_fraction(gpu, device)


def prepare(spec: TrialSpec, cell: Cell) -> tuple[torch.device, CheckpointStore]:
    """Threads, device and GPU memory cap of the trial; its checkpoint store."""
    torch.set_num_threads(max(1, int(spec.resources.get("cpu", 1))))
    device = trial_device(spec, cell)
    cap_gpu_memory(device, float(spec.resources.get("gpu", 0)))
    return device, CheckpointStore(spec.storage)


def open_log(spec: TrialSpec, cell: Cell) -> CellLog:
    return CellLog.open(spec.tracking_uri, spec.experiment_id, cell, spec.sweep, spec.parent_run_id)


def run_cell(spec: TrialSpec, report=None) -> dict[str, Any]:
    """Run one cell by its kind and log it; ``report`` receives progress dicts (tune.report in a trial).
    A failure marks the cell's run failed with its traceback and is raised again (Tune retries)."""
    (cell,) = spec.cells()
    device, store = prepare(spec, cell)
    log = open_log(spec, cell)
    trial = TrialContext(device, store, log, spec.tracking_uri, report)
    try:
        final = cell.kind.run(cell, trial)
    except Exception:
        log.fail(traceback.format_exc())
        raise
    trial.progress(final)
    return final


class PackMemberError(RuntimeError):
    """Some members of a pack failed (their runs say why); the others are complete."""


def run_pack(spec: TrialSpec, report=None) -> dict[str, Any]:
    """Train, evaluate and log a pack's members as the training kind does each cell alone.

    Members whose run is complete already (a retried trial) are skipped; the others resume from their
    own checkpoints. A member that fails (e.g. diverges to NaN) is marked failed in its run and does
    not stop the others; the trial then raises, naming it, so Tune retries the pack (from checkpoints).
    """
    cells = spec.cells()
    device, store = prepare(spec, cells[0])
    logs = [open_log(spec, cell) for cell in cells]
    todo = [(cell, log) for cell, log in zip(cells, logs) if not log.complete]
    errors: dict[str, str] = {}
    if todo:
        try:
            trainers = train_members(todo, store, device, report)
        except Exception:
            for _, log in todo:
                log.fail(traceback.format_exc())
            raise
        for trainer, (cell, log) in zip(trainers, todo):
            try:
                finish(trainer, log)
            except Exception:
                log.fail(traceback.format_exc())
                errors[cell.key] = (
                    f"{cell.name} ({cell.key}): {traceback.format_exc().strip().splitlines()[-1]}"
                )
    if errors:
        raise PackMemberError("; ".join(errors.values()))
    final = {"step": max(c.train.steps for c in cells), "progress": 1.0, "finished": 1}
    if report:
        report(final)
    return final


def train_members(todo, store, device, report) -> list[CellTrainer]:
    """The members' trainers, trained to their last step with checkpoints and losses as unpacked cells."""
    trainers = [CellTrainer(cell, device) for cell, _ in todo]
    for trainer, (_, log) in zip(trainers, todo):
        resume(trainer, store, log)
    pack = PackTrainer(trainers)
    losses: list[list] = [[] for _ in trainers]
    steps = sum(c.train.steps for c, _ in todo)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop, lambda i, s, v: losses[i].append((s, v)))
        for trainer in active:
            i = trainers.index(trainer)
            cell, log = todo[i]
            if trainer.step % cell.train.checkpoint_every == 0 or trainer.done_training:
                checkpoint(trainer, store, log, losses[i])
                losses[i] = []
        if report:
            report(
                {
                    "step": min(t.step for t in trainers),
                    "progress": sum(t.step for t in trainers) / steps,
                    "loss": float("nan"),
                }
            )
    return trainers


def tune_trainable(config: dict[str, Any]) -> None:
    """The Ray Tune function trainable: one trial = one cell, or a pack of cells."""
    from ray import tune

    spec = TrialSpec.from_dict(config["spec"])
    (run_pack if spec.is_pack else run_cell)(spec, report=tune.report)
