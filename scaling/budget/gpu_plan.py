"""A sweep on the GPU its CUDA cost table was measured on: GPU-hours and the packs the driver would form
(``--dry-run``, beside the CPU estimate of scaling.budget.cost.describe_compute).

The CUDA cost table (scaling/budget/cost_table_cuda.json, written by ``python -m benchmarks --gpu``:
docs/gpu.md) holds the card's name and memory, the date, the precision and graphs of the steps it timed (as
trials run them) and the fit of a training step's seconds and peak memory (scaling.budget.cost's formulas,
measured with packs of K members). The cells that ask for a GPU are packed as the driver packs them there
(scaling.budget.packing.pack_groups with each trial's GPU budget: as many as fit its share of the memory of
the card it will run on, scaling.budget.cards: --gpu-memory, the `ray up` cluster's node types, this machine's
GPUs, else the table's card, said in a line), and each pack costs ``steps x (t0 + K x flops / rate)``: the
GPU-hours are the packs one after another on one card, the wall time on G cards places them longest first
(``--gpus G``, else the cluster's or this machine's count). Until a table exists the line says that none
is measured.
"""

from __future__ import annotations

import heapq
from collections import Counter

from scaling.budget.cards import Cards, planned_for, table_card
from scaling.budget.cost import GPU_TABLE, coefficients, format_hours, load_gpu_table
from scaling.budget.packing import gpu_budget, pack_groups, step_of


def pack_seconds(cells, table: dict) -> float:
    """Training seconds of one pack (or a single cell) of ``cells`` on the table's GPU."""
    step = step_of(cells[0])
    fit = coefficients(table, step.arch)
    return cells[0].kind.steps(cells[0]) * (fit["t0"] + len(cells) * step.flops / fit["rate"])


def describe_gpu(
    plan,
    table: dict | None = None,
    path=GPU_TABLE,
    gpus: int | None = None,
    gpus_from: str = "",
    cards: Cards | None = None,
    groups: list[list[int]] | None = None,
) -> str:
    """The --dry-run lines for the GPU: hours, packs (planned for the memory of ``cards``, the cards the
    cells may run on; None: the table's; ``groups``: those packs, when already formed) and the wall time on
    ``gpus`` cards (said to come from ``gpus_from``; None: one card, and how to ask for more) from the
    measured table, or why there are none."""
    table = table if table is not None else load_gpu_table(path)
    if table is None:
        return (
            "GPU: no CUDA cost table measured yet (scaling/budget/cost_table_cuda.json, written by"
            " `python -m benchmarks --gpu`, docs/gpu.md): no GPU-hours estimate and no GPU packs"
        )
    planned = gpu_cells(plan)
    card = table["device"]
    if not planned:
        return "GPU: no training cell of this sweep asks for a GPU"
    cells = [p.cell for p in planned]
    cards = cards or Cards((), table_card(table))
    groups = groups if groups is not None else gpu_packs(plan, planned, table, cards)
    seconds = [pack_seconds([cells[i] for i in group], table) for group in groups]
    sizes: dict[str, Counter] = {}
    for group in groups:
        cell = cells[group[0]]
        sizes.setdefault(cell.kind.model_label(cell), Counter())[len(group)] += 1
    packs = "; ".join(
        f"{label}: " + ", ".join(f"{n} x {k}" for k, n in sorted(counts.items(), reverse=True))
        for label, counts in sizes.items()
    )
    skipped = len([p for p in plan.cells if is_training(p.cell)]) - len(planned)
    total = sum(seconds)
    lines = [
        f"GPU: about {total / 3600:.2f} GPU-hours ({format_hours(total)}) for the {len(cells)} training cells"
        " that ask for a GPU, packs one after another",
        f"  costed on the table's {card}, measured on {table['measured']} ({table_steps(table)})",
        f"  not counted: {not_counted(table)}",
        f"GPU packs (run.pack {plan.run.pack}): {len(groups)} trials for {len(cells)} cells; packs x cells:"
        f" {packs}",
        planned_for([cards.card_for(p.resources.as_ray()) for p in planned]),
        wall_line(seconds, gpus, gpus_from),
    ]
    mismatch = precision_mismatch(cells, table)
    if mismatch:
        lines.append(mismatch)
    if skipped:
        lines.append(f"{skipped} training cells ask for no GPU (not counted above)")
    return "\n".join(lines)


def gpu_cells(plan) -> list:
    """The plan's training cells that ask for a GPU (the planned cells)."""
    return [p for p in plan.cells if p.resources.gpu > 0 and is_training(p.cell)]


def gpu_seconds(plan, table: dict) -> list[float]:
    """The training seconds of each pack (trial) of the plan's GPU cells, on the table's card."""
    planned = gpu_cells(plan)
    if not planned:
        return []
    cells = [p.cell for p in planned]
    return [pack_seconds([cells[i] for i in group], table) for group in gpu_packs(plan, planned, table)]


def gpu_packs(plan, planned, table: dict, cards: Cards | None = None) -> list[list[int]]:
    """The packs the driver forms of the ``planned`` cells that ask for a GPU, each trial's memory its share
    of the card it will run on (``cards``; None: the table's card) (indices into ``planned``)."""
    cells = [p.cell for p in planned]
    cards = cards or Cards((), table_card(table))
    budget = {
        p.cell.key: gpu_budget(p.resources.gpu, table, cards.card_for(p.resources.as_ray()).memory_bytes)
        for p in planned
    }
    share = {p.cell.key: p.resources.gpu for p in planned}
    slots = max(1, int(1 // min(share.values())))  # trials of the smallest share that one card runs at once
    return pack_groups(cells, plan.run.pack, lambda c: share[c.key], slots, lambda c: budget[c.key])


def wall_seconds(seconds: list[float], gpus: int) -> float:
    """The packs' wall time on ``gpus`` cards: each pack to the least busy card, longest first (packs that
    share a card share its throughput, so a card's time is the sum of its packs'; a pack runs on one card)."""
    cards = [0.0] * max(1, gpus)
    for s in sorted(seconds, reverse=True):
        heapq.heapreplace(cards, cards[0] + s)
    return max(cards)


def wall_line(seconds: list[float], gpus: int | None, gpus_from: str) -> str:
    """The wall-time line: on ``gpus`` cards, or on one (and how to ask for G) when none is known."""
    if gpus is None:
        one = format_hours(wall_seconds(seconds, 1))
        return f"GPU wall time: about {one} on 1 GPU (no GPU count known here: --gpus G for G GPUs)"
    wall = wall_seconds(seconds, gpus)
    return (
        f"GPU wall time: about {format_hours(wall)} on {gpus} GPU{'' if gpus == 1 else 's'} ({gpus_from};"
        f" {len(seconds)} trials placed longest first; the longest alone {format_hours(max(seconds))})"
    )


def table_steps(table: dict) -> str:
    """What the table timed: its precision, whether the steps were replayed from CUDA graphs, and whether the
    transformers' steps were compiled (train.compile)."""
    precision = table.get("train_precision", "float32")
    graphs = ", CUDA graphs" if table.get("cuda_graphs") else ", eager"
    return f"{precision} steps{graphs}" + (", transformers compiled" if table.get("compile") else "")


def not_counted(table: dict) -> str:
    """What the hours leave out: evaluation, and the transformers' compiles where the table's steps were
    compiled (train.compile auto: each trial compiles once per pack size, ~20 s at Fig. 1's size)."""
    return "evaluation and each trial's compiles" if table.get("compile") else "evaluation"


def precision_mismatch(cells, table: dict) -> str:
    """A line when the cells train in another precision than the table timed (its figures are then not
    theirs), else ''."""
    timed = table.get("train_precision", "float32")
    other = sorted({c.kind.runs_on(c)[1] for c in cells} - {timed})
    if not other:
        return ""
    return (
        f"GPU note: the table timed {timed} steps, these cells train in {', '.join(other)}: re-measure it as"
        " they run (python -m benchmarks --gpu, docs/gpu.md)"
    )


def is_training(cell) -> bool:
    """Whether the cell's kind estimates a training cost (scaling.kinds.Kind.cost)."""
    cost = cell.kind.cost(cell)
    return cost is not None and cost.what == "training"
