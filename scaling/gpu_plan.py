"""A sweep on the GPU its CUDA cost table was measured on: GPU-hours and the packs the driver would form
(``--dry-run``, beside the CPU estimate of scaling.cost.describe_compute).

The CUDA cost table (scaling/cost_table_cuda.json, written by ``python -m benchmarks --gpu``: docs/gpu.md)
holds the card's name and memory, the date and the fit of a training step's seconds and peak memory
(scaling.cost's formulas, measured with packs of K members). The cells that ask for a GPU are packed as the
driver packs them there (scaling.packing.pack_groups with each trial's GPU budget: as many as fit its share
of the card's memory), and each pack costs ``steps x (t0 + K x flops / rate)``: the packs one after another
on one card. Until a table exists the line says that none is measured.
"""

from __future__ import annotations

from collections import Counter

from .cost import GPU_TABLE, StepShape, coefficients, format_hours, load_gpu_table, step_flops
from .packing import gpu_budget, pack_groups


def pack_seconds(cells, table: dict) -> float:
    """Training seconds of one pack (or a single cell) of ``cells`` on the table's GPU."""
    shape = StepShape.of_cell(cells[0])
    fit = coefficients(table, shape.arch)
    return cells[0].train.steps * (fit["t0"] + len(cells) * step_flops(shape) / fit["rate"])


def describe_gpu(plan, table: dict | None = None, path=GPU_TABLE) -> str:
    """The --dry-run lines for the GPU: hours and packs from the measured table, or why there are none."""
    table = table if table is not None else load_gpu_table(path)
    if table is None:
        return (
            "GPU: no CUDA cost table measured yet (scaling/cost_table_cuda.json, written by"
            " `python -m benchmarks --gpu`, docs/gpu.md): no GPU-hours estimate and no GPU packs"
        )
    planned = [p for p in plan.cells if p.resources.gpu > 0 and is_training(p.cell)]
    card = table["device"]
    if not planned:
        return f"GPU ({card}): no training cell of this sweep asks for a GPU"
    cells = [p.cell for p in planned]
    share = {p.cell.key: p.resources.gpu for p in planned}
    slots = max(1, int(1 // min(share.values())))  # trials of the smallest share that one card runs at once
    groups = pack_groups(
        cells, plan.run.pack, lambda c: share[c.key], slots, lambda c: gpu_budget(share[c.key], table)
    )
    seconds = sum(pack_seconds([cells[i] for i in group], table) for group in groups)
    sizes: dict[str, Counter] = {}
    for group in groups:
        sizes.setdefault(cells[group[0]].model.label, Counter())[len(group)] += 1
    packs = "; ".join(
        f"{label}: " + ", ".join(f"{n} x {k}" for k, n in sorted(counts.items(), reverse=True))
        for label, counts in sizes.items()
    )
    skipped = len([p for p in plan.cells if is_training(p.cell)]) - len(planned)
    lines = [
        f"GPU: about {seconds / 3600:.2f} GPU-hours ({format_hours(seconds)}) on one {card} (measured on"
        f" {table['measured']}) for the {len(cells)} training cells that ask for a GPU, packs one after"
        " another (evaluation not counted)",
        f"GPU packs (run.pack {plan.run.pack}): {len(groups)} trials for {len(cells)} cells; packs x cells:"
        f" {packs}",
    ]
    if skipped:
        lines.append(f"{skipped} training cells ask for no GPU (not counted above)")
    return "\n".join(lines)


def is_training(cell) -> bool:
    """Whether the cell's kind estimates a training cost (scaling.kinds.Kind.cost)."""
    cost = cell.kind.cost(cell)
    return cost is not None and cost.what == "training"
