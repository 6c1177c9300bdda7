"""Packing small cells: several cells of one architecture trained in one process as a batched ensemble.

A pack is K cells whose models have the same shapes (same model settings, task dimension d and N) and
that step in lockstep (same training settings but the learning rate). Each member keeps everything it
would have alone: its own CellTrainer (task pool, model initialised from its own seed, Adam with its own
learning rate), so its batch at step s, its checkpoint (under its own cell key, in the format of an
unpacked cell) and its MLflow run are those of the cell trained alone. Only the forward and backward pass
are shared: the members' parameters are stacked into (K, ...) tensors and the template model runs once
under ``torch.func.vmap(functional_call)`` on the stacked (K, B, N+1, d) batches. The loss is the sum of
the members' losses, so member k's gradient is the gradient of its own loss; results equal the unpacked
ones up to floating-point rounding of the batched matrix products.

``PACKABLE_ARCHS`` lists the architectures checked to run under vmap; ``pack_groups`` is the planner's
decision (``run.pack``: ``auto`` packs up to ``AUTO_PACK_SIZE`` cells whose estimated cost per training
step is at most ``AUTO_PACK_MAX_FLOPS``, in packs no larger than it takes to fill the cluster's slots;
an integer K packs up to K cells of a packable architecture of any size; ``off`` or 1 never packs).
"""
from __future__ import annotations

import hashlib
import json
import traceback
from typing import Any, Callable, Sequence

import torch
from torch.func import functional_call, vmap

from .cells import Cell
from .config import canonical, to_dict
from .tracking import CellLog
from .train import CellTrainer, prefix_loss

PACKABLE_ARCHS = ("mlp", "onelayer", "linear_on_scalar")
AUTO_PACK_SIZE = 8
AUTO_PACK_MAX_FLOPS = 2e8       # estimated multiply-adds of one training step (forward) of one cell


def pack_signature(cell: Cell) -> str | None:
    """Cells with the same signature can share a pack; None for a cell that never packs.

    Everything that fixes the model's shapes and the lockstep of training must agree: the model
    settings, d, N and the training settings but the learning rate. T, the seed, the learning rate,
    the other task settings and the evaluation may differ. Different widths change shapes: not packed.
    Only training cells pack (``cell.job == "train"``).
    """
    if cell.model.arch not in PACKABLE_ARCHS or cell.job != "train":      # other jobs: temperature_jobs
        return None
    train = to_dict(cell.train)
    train.pop("lr", None)
    shape = {"model": canonical(cell.model), "d": cell.task.d, "N": cell.N, "train": train}
    return json.dumps(shape, sort_keys=True, default=str)


def step_cost(cell: Cell) -> float:
    """Multiply-adds of one forward pass of a cell's batch: parameters x prompts x positions."""
    from .models import build_model

    with torch.device("meta"):
        model = build_model(cell.model, cell.task.d, cell.N + 1)
    params = sum(p.numel() for p in model.parameters())
    return float(params) * cell.train.batch_size * (cell.N + 1)


def pack_limit(pack: str | int, cell: Cell) -> int:
    """How many cells like ``cell`` one pack may hold under the setting ``run.pack``."""
    if pack_signature(cell) is None or pack in ("off", 1, 0):
        return 1
    if pack == "auto":
        return AUTO_PACK_SIZE if step_cost(cell) <= AUTO_PACK_MAX_FLOPS else 1
    return int(pack)


def pack_groups(cells: Sequence, pack: str | int, resources_of: Callable = lambda c: None,
                slots: int = 1) -> list[list[int]]:
    """Indices of ``cells`` grouped into packs (in plan order); a group of one is an unpacked cell.

    ``cells`` are Cells; cells pack only with cells of the same signature and the same resources. Under
    ``auto`` the packs of a signature are made small enough that there are at least ``slots`` of them
    (the trials the cluster runs at once), so packing never leaves a slot idle: 8 such cells on 2 slots
    make 2 packs of 4.
    """
    signatures = [(pack_signature(c), repr(resources_of(c))) for c in cells]
    open_groups: dict[tuple, list[int]] = {}
    groups: list[list[int]] = []
    for i, cell in enumerate(cells):
        limit = pack_limit(pack, cell)
        if pack == "auto" and limit > 1:
            limit = min(limit, max(1, -(-signatures.count(signatures[i]) // max(1, slots))))
        if limit <= 1:
            groups.append([i])
            continue
        sig = signatures[i]
        group = open_groups.get(sig)
        if group is None or len(group) >= limit:
            group = open_groups[sig] = []
            groups.append(group)
        group.append(i)
    return groups


def pack_key(keys: Sequence[str]) -> str:
    """A trial name for a pack: 'pack-' and a hash of its members' keys."""
    return "pack-" + hashlib.sha256(",".join(keys).encode()).hexdigest()[:11]


class PackTrainer:
    """K CellTrainers trained together: stacked forward/backward, each member's own optimiser step."""

    def __init__(self, trainers: Sequence[CellTrainer]):
        self.trainers = list(trainers)
        self.template = trainers[0].model
        self.names = [name for name, _ in self.template.named_parameters()]

    def _stacked_loss(self, members: Sequence[CellTrainer]) -> torch.Tensor:
        """The losses of ``members`` at their (common) step: (K,)."""
        batches = [m.train_batch(m.step) for m in members]
        xs = torch.stack([b.xs for b in batches])                           # (K, B, N+1, d)
        ys = torch.stack([b.ys for b in batches])                           # (K, B, N+1)
        params = {name: torch.stack([dict(m.model.named_parameters())[name] for m in members])
                  for name in self.names}                                   # name -> (K, ...)
        buffers = {name: b for name, b in self.template.named_buffers()}

        def one(p, x, y):
            return functional_call(self.template, ({**p}, buffers), (x, y))  # (B, N+1)

        for m in members:
            m.model.train()
        with members[0]._autocast():
            pred = vmap(one)(params, xs, ys)                                # (K, B, N+1)
        return torch.stack([prefix_loss(pred[k].float(), ys[k]) for k in range(len(members))])

    def train_step(self, members: Sequence[CellTrainer]) -> list[float]:
        """One step of every member (all at the same step); their losses."""
        losses = self._stacked_loss(members)                                # (K,)
        for m in members:
            m.optimizer.zero_grad(set_to_none=True)
        losses.sum().backward()
        for m in members:
            m.optimizer.step()
            m.step += 1
        return losses.detach().tolist()

    def train_until(self, members: Sequence[CellTrainer], stop: int,
                    on_loss: Callable[[int, int, float], None] | None = None) -> None:
        """Train ``members`` (all at one step) to step ``stop``; on_loss(member index, step, loss)."""
        train = members[0].cell.train
        stop = min(stop, train.steps)
        while members[0].step < stop:
            losses = self.train_step(members)
            step = members[0].step
            if on_loss and (step % train.log_every == 0 or step == train.steps):
                for m, loss in zip(members, losses):
                    on_loss(self.trainers.index(m), step, loss)

    @property
    def done_training(self) -> bool:
        return all(t.done_training for t in self.trainers)

    def next_segment(self) -> tuple[list[CellTrainer], int]:
        """The members furthest behind and the step to train them to (the next checkpoint, or the
        step of the next member ahead: members resumed from different checkpoints catch up first)."""
        todo = [t for t in self.trainers if not t.done_training]
        low = min(t.step for t in todo)
        every = todo[0].cell.train.checkpoint_every
        ahead = [t.step for t in todo if t.step > low]
        stop = min([(low // every + 1) * every, todo[0].cell.train.steps] + ahead)
        return [t for t in todo if t.step == low], stop


def run_pack(config: dict[str, Any], report=None) -> dict[str, Any]:
    """Train, evaluate and log a pack's members as scaling.trial.run_cell does each cell alone.

    Members whose run is complete already (a retried trial) are skipped; the others resume from their
    own checkpoints. A member that fails (e.g. diverges to NaN) is marked failed in its run and does
    not stop the others; the trial then raises, naming it, so Tune retries the pack (from checkpoints).
    """
    from .trial import CheckpointStore, cap_gpu_memory, finish_trained, trial_device

    cells = [Cell.from_dict(m["cell"]) for m in config["members"]]
    torch.set_num_threads(max(1, int(config["resources"].get("cpu", 1))))
    device = trial_device(config, cells[0])
    cap_gpu_memory(device, float(config["resources"].get("gpu", 0)))
    store = CheckpointStore(config["storage"])
    logs = [CellLog.open(config["tracking_uri"], config["experiment_id"], cell, config["sweep"],
                         config.get("parent_run_id")) for cell in cells]
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
                finish_trained(trainer, cell, log)
            except Exception:
                log.fail(traceback.format_exc())
                errors[cell.key] = f"{cell.name} ({cell.key}): {traceback.format_exc().strip().splitlines()[-1]}"
    if errors:
        raise PackMemberError("; ".join(errors.values()))
    final = {"step": max(c.train.steps for c in cells), "progress": 1.0, "done": 1}
    if report:
        report(final)
    return final


class PackMemberError(RuntimeError):
    """Some members of a pack failed (their runs say why); the others are complete."""


def train_members(todo, store, device, report) -> list[CellTrainer]:
    """The members' trainers, trained to their last step with checkpoints and losses as unpacked cells."""
    trainers = [CellTrainer(cell, device) for cell, _ in todo]
    for trainer, (cell, log) in zip(trainers, todo):
        state = store.load(cell.key)
        if state is not None:
            trainer.load_state_dict(state)
            log.log_metrics("trial/resumed_from", [(trainer.step, trainer.step)])
            log.log_losses(state.get("unlogged_losses", []))
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
                log.log_losses(losses[i])
                store.save(cell.key, {**trainer.state_dict(), "unlogged_losses": log.pending})
                losses[i] = []
        if report:
            report({"step": min(t.step for t in trainers), "progress": sum(t.step for t in trainers) / steps,
                    "loss": float("nan")})
    return trainers
