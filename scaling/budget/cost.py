"""Cost model of one training step: time and peak memory against (arch, N, d, width, layers, batch).

So a user can budget a sweep before running it. FLOPs of a step are counted from the architecture
(``step_flops``: every matrix product of the forward and backward pass as the model runs them, about
Kaplan et al. 2020's 6 x params x tokens plus attention), and a small table measured by the benchmark
suite (``python -m benchmarks --only cost --update-cost-table``, stored in ``cost_table.json`` next to
this file) fixes, per architecture and device,

    seconds = t0 + flops / rate,        peak bytes = 16 params + a * batch * tokens * width * layers + m0

(16 bytes per parameter: fp32 weights, gradients and Adam's two moments; the second term is the
activations saved for backward). ``sweep_estimate`` adds the cells of a plan up, one at a time;
``--dry-run`` costs them packed as they run (scaling.budget.cpu_plan).
"""

from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from papers.context_scaling.architectures import model_facts

TABLE = Path(__file__).with_name("cost_table.json")
# the same table measured on a GPU by ``python -m benchmarks --gpu`` (docs/gpu.md), with the card's name,
# memory and the date; absent until a GPU has measured it
GPU_TABLE = Path(__file__).with_name("cost_table_cuda.json")
ADAM_BYTES_PER_PARAM = 16


@dataclass(frozen=True)
class StepShape:
    """What a training step's cost depends on."""

    arch: str
    N: int
    d: int
    width: int
    layers: int
    batch: int
    layout: str = "interleaved"

    @classmethod
    def of_cell(cls, cell) -> "StepShape":
        m = cell.model
        facts = model_facts(m.arch)
        return cls(
            m.arch, cell.N, cell.task.d, facts.width(m), facts.layers(m), cell.train.batch_size, m.layout
        )

    @property
    def tokens(self) -> int:
        """Sequence length per prompt (the model's facts: 2(N+1) for GPT-2 and SGPT, N+1 for the MLPs)."""
        return model_facts(self.arch).tokens(self)


def model_params(s: StepShape) -> int:
    """Trainable parameters of the step shape's model
    (papers.context_scaling.architectures.ModelFacts.params)."""
    return model_facts(s.arch).params(s)


def step_flops(s: StepShape) -> float:
    """FLOPs of one training step for the batch: every matrix product of the forward and the backward pass
    as the model runs them (papers.context_scaling.flops; tests/test_speed.py checks them against
    torch's FlopCounterMode on the real model)."""
    return model_facts(s.arch).step_flops(s)


def activation_elements(s: StepShape) -> float:
    return float(s.batch) * s.tokens * s.width * max(s.layers, 1)


_tables: dict[str, dict] = {}


def load_table(path: Path | str = TABLE) -> dict:
    """The measured cost table (read once per process and path)."""
    if str(path) not in _tables:
        with open(path) as file:
            _tables[str(path)] = json.load(file)
    return _tables[str(path)]


def load_gpu_table(path: Path | str = GPU_TABLE) -> dict | None:
    """The CUDA cost table, or None when no GPU has measured one."""
    return load_table(path) if Path(path).is_file() else None


def fit_time(rows: list[dict]) -> dict:
    """Least squares of seconds = t0 + flops / rate over measured rows, weighted by 1/seconds (relative
    errors); t0 is clipped at 0."""
    xs = [r["flops"] for r in rows]
    ys = [r["seconds"] for r in rows]
    w = [1 / y**2 for y in ys]
    sw, sx, sy = sum(w), sum(wi * x for wi, x in zip(w, xs)), sum(wi * y for wi, y in zip(w, ys))
    sxx, sxy = sum(wi * x * x for wi, x in zip(w, xs)), sum(wi * x * y for wi, x, y in zip(w, xs, ys))
    slope = (sw * sxy - sx * sy) / (sw * sxx - sx * sx) if len(rows) > 1 else sy / sx
    t0 = (sy - slope * sx) / sw
    if t0 < 0:
        t0, slope = 0.0, sxy / sxx
    return {"t0": t0, "rate": 1 / slope}


def fit_memory(rows: list[dict]) -> dict:
    """Least squares of peak - 16 params = m0 + a * activation elements."""
    xs = [r["activations"] for r in rows]
    ys = [r["peak_bytes"] - ADAM_BYTES_PER_PARAM * r["params"] for r in rows]
    n, sx, sy = len(xs), sum(xs), sum(ys)
    sxx, sxy = sum(x * x for x in xs), sum(x * y for x, y in zip(xs, ys))
    a = (n * sxy - sx * sy) / (n * sxx - sx * sx) if n > 1 else sy / sx
    return {"m0": max((sy - a * sx) / n, 0.0), "bytes_per_activation": a}


def fit_table(rows: list[dict]) -> dict:
    """The fitted coefficients per architecture of the measured ``rows``."""
    out = {}
    for arch in sorted({r["arch"] for r in rows}):
        mine = [r for r in rows if r["arch"] == arch]
        out[arch] = {**fit_time(mine), **fit_memory(mine)}
    return out


def coefficients(table: dict, arch: str) -> dict:
    """The fit of ``arch``; architectures not measured use GPT-2's (the MLPs are dominated by the same
    dense matmuls)."""
    fits = table["fit"]
    return fits.get(arch) or fits.get("gpt2") or next(iter(fits.values()))


def step_seconds(s: StepShape, table: dict) -> float:
    c = coefficients(table, s.arch)
    return c["t0"] + step_flops(s) / c["rate"]


def step_peak_bytes(s: StepShape, table: dict) -> float:
    c = coefficients(table, s.arch)
    return (
        ADAM_BYTES_PER_PARAM * model_params(s) + c["m0"] + c["bytes_per_activation"] * activation_elements(s)
    )


@dataclass(frozen=True)
class CellCost:
    """A kind's estimate of one cell's compute for ``--dry-run``: FLOPs, seconds on the cost table's
    device (one cell at a time) and peak memory in bytes; ``what`` says what was counted."""

    flops: float = 0.0
    seconds: float = 0.0
    peak_bytes: float = 0.0
    what: str = "training"


@dataclass(frozen=True)
class SweepEstimate:
    cells: int  # cells whose kind trains (the figures below are theirs)
    flops: float  # training FLOPs of every cell's every step
    seconds: float  # training time on the table's device, one cell at a time
    peak_bytes: float  # the largest cell's step
    other: dict[str, int] = field(default_factory=dict)  # what the other cells do -> how many
    borrowed: tuple[str, ...] = ()  # trained architectures the table has not measured (GPT-2's fit used)

    def line(self, device: str) -> str:
        parts = []
        if self.cells:
            parts.append(
                f"estimated training compute: {self.flops:.3g} FLOP over {self.cells}"
                f" cell{'' if self.cells == 1 else 's'}, about"
                f" {format_hours(self.seconds)} of one {device} (one cell at a time, not packed; evaluation"
                f" not counted); largest step peak memory about {self.peak_bytes / 2**20:.0f} MiB"
            )
        if self.borrowed:  # GPT-2's fixed cost per step (its t0) is many times a small model's whole step
            parts.append(
                f"  {', '.join(self.borrowed)}: not in the cost table, costed with GPT-2's fit (its fixed"
                " cost per step): an upper bound, several times too high for small models"
            )
        parts += [
            f"{count} cell{'' if count == 1 else 's'}: {what}" for what, count in sorted(self.other.items())
        ]
        return "\n".join(parts) or "no cells"


def format_hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def training_cost(cell, table: dict | None = None) -> CellCost:
    """The CellCost of training ``cell`` (its model's facts under the measured table)."""
    table = table or load_table()
    shape = StepShape.of_cell(cell)
    steps = cell.train.steps
    return CellCost(
        steps * step_flops(shape), steps * step_seconds(shape, table), step_peak_bytes(shape, table)
    )


def sweep_estimate(cells, table: dict | None = None) -> SweepEstimate:
    """Total cost of ``cells`` (Cell objects), each as its kind estimates it (scaling.kinds.Kind.cost):
    training cells under the measured table; the others counted by what they do."""
    table = table or load_table()
    flops = seconds = peak = 0.0
    count, other, borrowed = 0, {}, {}
    for cell in cells:
        cost = cell.kind.cost(cell)
        if cost is None:
            other[f"{cell.job}, cost not estimated"] = other.get(f"{cell.job}, cost not estimated", 0) + 1
            continue
        if cost.what != "training":
            other[f"{cell.job}, {cost.what}"] = other.get(f"{cell.job}, {cost.what}", 0) + 1
            continue
        flops, seconds, peak, count = (
            flops + cost.flops,
            seconds + cost.seconds,
            max(peak, cost.peak_bytes),
            count + 1,
        )
        arch = getattr(getattr(cell, "model", None), "arch", None)
        if arch is not None and arch not in table["fit"]:
            borrowed[arch] = True
    if math.isnan(seconds):
        raise ValueError("the cost table gives NaN; re-measure it")
    return SweepEstimate(count, flops, seconds, peak, other, tuple(borrowed))


def markdown_table(table: dict) -> str:
    """The measured rows as docs/results.md's step-cost table (``python -m scaling.budget.cost``)."""
    lines = [
        "| arch | N | d | width | layers | batch | GFLOP/step | s/step | peak MiB | fitted s/step |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for r in table["rows"]:
        shape = StepShape(**{k: r[k] for k in StepShape.__dataclass_fields__})
        lines.append(
            f"| {r['arch']} | {r['N']} | {r['d']} | {r['width']} | {r['layers']} | {r['batch']} |"
            f" {r['flops'] / 1e9:.1f} | {r['seconds']:.2f} | {r['peak_bytes'] / 2**20:.0f} |"
            f" {step_seconds(shape, table):.2f} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import argparse

    argparse.ArgumentParser(
        prog="python -m scaling.budget.cost",
        description="Print the measured step costs (scaling/budget/cost_table.json) as a Markdown table"
        " beside the fitted seconds per step, under a title saying when and where they were measured;"
        " re-measure with python -m benchmarks --only cost --update-cost-table.",
    ).parse_args(argv)
    table = load_table()
    try:
        print(f"{title(table)}\n\n{markdown_table(table)}", flush=True)
    except BrokenPipeError:  # read by `head`, which stopped reading: what it read is all it wanted
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no second error at exit
    return 0


def title(table: dict) -> str:
    """What the table is, when and where it was measured, and how to measure it again."""
    when = table.get("measured", "an unrecorded date")
    where = table.get("machine", "an unrecorded machine")
    return (
        f"Cost of one training step, measured {when} on {where}, {table['device']}\n"
        "(scaling/budget/cost_table.json; fitted s/step = t0 + FLOP / rate per architecture,"
        " scaling/budget/cost.py)\n"
        "measure it on this machine: python -m benchmarks --only cost --update-cost-table"
    )


if __name__ == "__main__":
    raise SystemExit(main())
