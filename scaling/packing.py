"""Which cells share a trial: the driver's packing decision (``run.pack``).

Cells whose kind allows it (scaling.kinds.Kind.packable: the training kind, for models that are
parameter-free features then a Linear/ReLU head) and whose models have the same shapes and step in
lockstep train in one trial as one stacked model (scaling.science.stacked; the pack's trial is
scaling.trial.run_pack), each still a cell of its own: its own data, initialisation, checkpoint and run.

``pack_groups`` decides: ``auto`` packs up to ``AUTO_PACK_SIZE`` cells whose estimated cost per training
step is at most ``AUTO_PACK_MAX_FLOPS``, in packs no larger than it takes to fill the cluster's slots
when each part has enough work to pay for its own trial; an integer K packs up to K cells of a packable
model of any size; ``off`` or 1 never packs.
"""

from __future__ import annotations

import hashlib
import json
from typing import Callable, Sequence

from .cells import Cell
from .config import canonical, to_dict
from .science.models import model_facts

AUTO_PACK_SIZE = 8
AUTO_PACK_MAX_FLOPS = 2e8  # estimated multiply-adds of one training step (forward) of one cell
# Splitting auto packs over the cluster's slots: a part becomes its own trial only when it keeps at least
# MIN_SPLIT_SECONDS of estimated training, since a trial's start (a worker process importing torch, Ray
# Tune and MLflow) costs seconds of CPU by itself. The estimate is deliberately on the slow side, so
# packs are split rather than serialised when in doubt: a fixed cost per step (Python, optimizer) plus
# the step's FLOPs (forward and backward: 6 per multiply-add of one member's forward, times the members)
# at a low rate.
MIN_SPLIT_SECONDS = 10.0
PACK_STEP_OVERHEAD_S = 1e-3
PACK_FLOP_RATE = 1e10


def pack_signature(cell: Cell) -> str | None:
    """Cells with the same signature can share a pack; None for a cell that never packs.

    Everything that fixes the model's shapes and the lockstep of training must agree: the model
    settings, d, N and the training settings but the learning rate. T, the seed, the learning rate,
    the other task settings and the evaluation may differ. Different widths change shapes: not packed.
    Only cells whose kind says they pack (scaling.kinds.Kind.packable) do.
    """
    if not cell.kind.packable(cell):
        return None
    train = to_dict(cell.train)
    train.pop("lr", None)
    shape = {"model": canonical(cell.model), "d": cell.task.d, "N": cell.N, "train": train}
    return json.dumps(shape, sort_keys=True, default=str)


def step_cost(cell: Cell) -> float:
    """Multiply-adds of one forward pass of a cell's batch (the model's own count)."""
    return model_facts(cell.model.arch).forward_multiply_adds(
        cell.model, cell.task.d, cell.N + 1, cell.train.batch_size
    )


def pack_seconds(cell: Cell, members: int, cost: float | None = None) -> float:
    """Estimated training seconds of a pack of ``members`` cells like ``cell`` (see MIN_SPLIT_SECONDS);
    ``cost``: the cell's step_cost, when already known."""
    cost = step_cost(cell) if cost is None else cost
    return cell.train.steps * (PACK_STEP_OVERHEAD_S + 6 * members * cost / PACK_FLOP_RATE)


def auto_parts(cell: Cell, count: int, slots: int) -> int:
    """Into how many packs ``count`` auto-packable cells like ``cell`` go on ``slots`` trial slots: one
    per slot, fewer when a part would train for less than MIN_SPLIT_SECONDS (8 cells of a few seconds
    each are faster as one trial than as two that each start a worker process)."""
    parts, cost = max(1, min(slots, count)), step_cost(cell)
    while parts > 1 and pack_seconds(cell, -(-count // parts), cost) < MIN_SPLIT_SECONDS:
        parts -= 1
    return parts


def pack_limit(pack: str | int, cell: Cell) -> int:
    """How many cells like ``cell`` one pack may hold under the setting ``run.pack``."""
    if pack_signature(cell) is None or pack in ("off", 1, 0):
        return 1
    if pack == "auto":
        return AUTO_PACK_SIZE if step_cost(cell) <= AUTO_PACK_MAX_FLOPS else 1
    return int(pack)


def pack_groups(
    cells: Sequence, pack: str | int, resources_of: Callable = lambda c: None, slots: int = 1
) -> list[list[int]]:
    """Indices of ``cells`` grouped into packs (in plan order); a group of one is an unpacked cell.

    ``cells`` are Cells; cells pack only with cells of the same signature and the same resources. Under
    ``auto`` the packs of a signature are made small enough that there are ``slots`` of them (the trials
    the cluster runs at once), so packing leaves no slot idle, unless the parts would be too short to pay
    for their own trial (``auto_parts``): 8 cells of a minute on 2 slots make 2 packs of 4, 8 cells of
    a second one pack of 8.
    """
    signatures = [(pack_signature(c), repr(resources_of(c))) for c in cells]
    open_groups: dict[tuple, list[int]] = {}
    groups: list[list[int]] = []
    parts: dict[tuple, int] = {}  # per signature: the same shapes and steps, so the same answer
    for i, cell in enumerate(cells):
        limit = pack_limit(pack, cell)
        if pack == "auto" and limit > 1:
            count = signatures.count(signatures[i])
            if signatures[i] not in parts:
                parts[signatures[i]] = auto_parts(cell, count, slots)
            limit = min(limit, max(1, -(-count // parts[signatures[i]])))
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
