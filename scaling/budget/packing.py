"""Which cells share a trial: the driver's packing decision (``run.pack``).

Cells whose kind allows it (scaling.kinds.Kind.packable: the training kind, for models that are
parameter-free features then a Linear/ReLU head, and for GPT-2 and SGPT) and whose models have the same
shapes and step in lockstep train in one trial as one stacked model (papers.context_scaling.stacked,
papers.context_scaling.stacked_transformers; the pack's trial is scaling.trial.run.run_pack), each still a
cell of its own: its own data, initialisation, checkpoint and run.

``pack_groups`` decides. ``auto`` on a GPU (a cell that asks for one, with a measured CUDA cost table): as
many cells as fit the trial's share of the memory of the card it will run on (scaling.budget.cards:
--gpu-memory, the cluster's cards, else the table's; ``gpu_pack_size``: the model's parameters and activations
under the table's measured memory fit, a pure function of the model's facts and the memory), at most
``MAX_GPU_PACK``; the trial that runs a pack sizes it again to the device it holds (``device_pack_size``, from
scaling.trial.devices.trial_memory: its share of the real card, measured there) and stacks at most that many
of its members at once. ``auto`` on a CPU: up to ``AUTO_PACK_SIZE`` cells of a model for which packing pays on
a CPU (``Step.packs_on_cpu``, the model's facts; measured: not for GPT-2 and SGPT) whose estimated cost per
training step is at most ``AUTO_PACK_MAX_FLOPS``. Either way in packs no larger than it takes to fill the
cluster's slots when each part has enough work to pay for its own trial. An integer K packs up to K cells of a
packable model of any size; ``off`` or 1 never packs.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import dataclass
from typing import Callable, Sequence

from scaling.budget.cost import ADAM_BYTES_PER_PARAM, Step, coefficients
from scaling.cells import Cell

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
# On a GPU: the fraction of the trial's share of the card's memory a pack may plan to fill (the rest: the
# allocator's fragmentation, cuBLAS workspaces, other trials' CUDA contexts), and the largest pack.
GPU_MEMORY_USABLE = 0.85
MAX_GPU_PACK = 64


@dataclass(frozen=True)
class GpuBudget:
    """What a pack's trial may fill on a GPU: ``memory_bytes``, the trial's share of the card's memory
    (resources.gpu x the card's memory), under ``table``, a measured CUDA cost table (scaling.budget.cost)."""

    memory_bytes: float
    table: dict


def gpu_budget(gpu: float, table: dict | None, card_bytes: float | None = None) -> GpuBudget | None:
    """The budget of a trial holding ``gpu`` GPUs (a fraction or a whole one) on a card of ``card_bytes``
    (the card it will run on: scaling.budget.cards; None: the card the CUDA cost table ``table`` was measured
    on), under that table's fit; None on a CPU or without a table (nothing measured to plan by)."""
    if gpu <= 0 or table is None:
        return None
    card = float(table["memory_bytes"]) if card_bytes is None else float(card_bytes)
    return GpuBudget(min(gpu, 1.0) * card, table)


def step_of(cell: Cell) -> Step:
    """One training step's cost facts of a packable cell (its kind's count: Kind.step); a kind that packs
    cells it cannot count is an error, as a pack could not be sized."""
    step = cell.kind.step(cell)
    if step is None:
        raise ValueError(f"{cell.name}: its kind packs cells whose steps it does not count (Kind.step)")
    return step


def member_bytes(cell: Cell, table: dict) -> float:
    """GPU memory one more member of a pack of cells like ``cell`` takes: Adam's 16 bytes per parameter and
    its activations under the table's measured memory fit."""
    step = step_of(cell)
    fit = coefficients(table, step.arch)
    return ADAM_BYTES_PER_PARAM * step.params + fit["bytes_per_activation"] * step.activations


def gpu_pack_size(cell: Cell, budget: GpuBudget) -> int:
    """How many cells like ``cell`` fit one trial's GPU memory: a pure function of the model's facts and
    the memory (at least 1, at most MAX_GPU_PACK)."""
    fixed = coefficients(budget.table, step_of(cell).arch)["m0"]
    fits = int((GPU_MEMORY_USABLE * budget.memory_bytes - fixed) // member_bytes(cell, budget.table))
    return max(1, min(MAX_GPU_PACK, fits))


def device_pack_size(cell: Cell, memory_bytes: float, table: dict) -> int:
    """How many cells like ``cell`` a trial stacks at once on its device, of which it may fill
    ``memory_bytes`` (its share of the real card: scaling.trial.devices.trial_memory), under the CUDA cost
    table's memory fit: gpu_pack_size with the device's memory instead of the table's card."""
    return gpu_pack_size(cell, GpuBudget(memory_bytes, table))


def pack_bytes(cell: Cell, members: int, table: dict) -> float:
    """Estimated peak bytes of ``members`` cells like ``cell`` stacked: the fit's fixed part, and each
    member's parameters, Adam state and activations (member_bytes)."""
    return coefficients(table, step_of(cell).arch)["m0"] + members * member_bytes(cell, table)


def memory_guard(cell: Cell, limit: float, table: dict) -> Callable[[object], None]:
    """The check a pack's step makes first on a device of stated memory
    (scaling.trial.devices.TrialMemory.limit): torch.OutOfMemoryError, as the card's allocator raises it, when
    the stacked engine's members (cells like ``cell``) need more than ``limit`` bytes (pack_bytes)."""

    def guard(engine) -> None:
        import torch  # a pack's trial, which holds torch already; planning packs without it

        need = pack_bytes(cell, len(engine.members), table)
        if need > limit:
            raise torch.OutOfMemoryError(
                f"{len(engine.members)} stacked members need about {need / 2**20:.1f} MiB; the device has"
                f" {limit / 2**20:.1f} MiB (stated)"
            )

    return guard


def pack_signature(cell: Cell) -> str | None:
    """Cells with the same signature can share a pack; None for a cell that never packs.

    Only cells whose kind says they pack (scaling.kinds.Kind.packable) do, and only with cells of the same
    kind and shape (Kind.pack_shape: for the training kind everything that fixes the model's shapes and the
    lockstep of training: the model settings, d, N and the training settings but the learning rate; T, the
    seed, the learning rate, the other task settings and the evaluation may differ).
    """
    if not cell.kind.packable(cell):
        return None
    return json.dumps({"job": cell.job, **cell.kind.pack_shape(cell)}, sort_keys=True, default=str)


def step_cost(cell: Cell) -> float:
    """Multiply-adds of one forward pass of a cell's batch (the model's own count)."""
    return step_of(cell).forward


def pack_seconds(cell: Cell, members: int, cost: float | None = None) -> float:
    """Estimated training seconds of a pack of ``members`` cells like ``cell`` (see MIN_SPLIT_SECONDS);
    ``cost``: the cell's step_cost, when already known."""
    cost = step_cost(cell) if cost is None else cost
    return cell.kind.steps(cell) * (PACK_STEP_OVERHEAD_S + 6 * members * cost / PACK_FLOP_RATE)


def auto_parts(cell: Cell, count: int, slots: int) -> int:
    """Into how many packs ``count`` auto-packable cells like ``cell`` go on ``slots`` trial slots: one
    per slot, fewer when a part would train for less than MIN_SPLIT_SECONDS (8 cells of a few seconds
    each are faster as one trial than as two that each start a worker process)."""
    parts, cost = max(1, min(slots, count)), step_cost(cell)
    while parts > 1 and pack_seconds(cell, -(-count // parts), cost) < MIN_SPLIT_SECONDS:
        parts -= 1
    return parts


def pack_limit(pack: str | int, cell: Cell, gpu: GpuBudget | None = None) -> int:
    """How many cells like ``cell`` one pack may hold under the setting ``run.pack``, on a GPU with the
    budget ``gpu`` or (None) on a CPU."""
    return 1 if pack_signature(cell) is None else packable_limit(pack, cell, gpu)


def packable_limit(pack: str | int, cell: Cell, gpu: GpuBudget | None = None) -> int:
    """pack_limit of a cell its kind packs (its pack_signature is not None)."""
    if pack in ("off", 1, 0):
        return 1
    if pack != "auto":
        return int(pack)
    step = cell.kind.step(cell)
    if step is None:  # a model that counts nothing: no size to judge a pack by (alone, unless run.pack is K)
        return 1
    if gpu is not None:
        return gpu_pack_size(cell, gpu)
    return AUTO_PACK_SIZE if step.packs_on_cpu and step.forward <= AUTO_PACK_MAX_FLOPS else 1


def pack_groups(
    cells: Sequence,
    pack: str | int,
    resources_of: Callable = lambda c: None,
    slots: int = 1,
    gpu_of: Callable[[Cell], GpuBudget | None] = lambda c: None,
) -> list[list[int]]:
    """Indices of ``cells`` grouped into packs (in plan order); a group of one is an unpacked cell.

    ``cells`` are Cells; cells pack only with cells of the same signature and the same resources;
    ``gpu_of(cell)`` is the GPU budget of the cell's trial (None: a CPU trial). Under ``auto`` the packs of a
    signature are made small enough that there are ``slots`` of them (the trials the cluster runs at
    once), so packing leaves no slot idle, unless the parts would be too short to pay for their own trial
    (``auto_parts``): 8 cells of a minute on 2 slots make 2 packs of 4, 8 cells of a second one pack of 8.
    On a GPU, where a pack's step costs about what one cell's does until the card is busy, the slots are
    shared among the signatures first: 10 signatures of 6 cells on 4 slots make 10 packs of 6 (as many as
    fit the memory), not 40 packs of 1 or 2.
    """
    signatures = [(pack_signature(c), repr(resources_of(c))) for c in cells]
    counts = Counter(signatures)  # once: a count per cell was quadratic (3.5 s of a 10,000-cell dry run)
    budgets = [gpu_of(c) for c in cells]
    on_gpu = {sig for sig, budget in zip(signatures, budgets) if budget is not None}
    open_groups: dict[tuple, list[int]] = {}
    groups: list[list[int]] = []
    parts: dict[tuple, int] = {}  # per signature: the same shapes and steps, so the same answer
    for i, cell in enumerate(cells):
        limit = 1 if signatures[i][0] is None else packable_limit(pack, cell, budgets[i])
        if pack == "auto" and limit > 1:
            count = counts[signatures[i]]
            if signatures[i] not in parts:
                share = max(1, slots // len(on_gpu)) if budgets[i] is not None else slots
                parts[signatures[i]] = auto_parts(cell, count, share)
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
