"""Cost model of one training step: time and peak memory against (arch, N, d, width, layers, batch).

So a user can budget a sweep before running it. FLOPs of a step are counted from the architecture
(``step_flops``: three times the forward matmul FLOPs, Kaplan et al. 2020's 6 x params x tokens rule plus
attention), and a small table measured by the benchmark suite (``python -m benchmarks --only cost
--update-cost-table``, stored in ``cost_table.json`` next to this file) fixes, per architecture and device,

    seconds = t0 + flops / rate,        peak bytes = 16 params + a * batch * tokens * width * layers + m0

(16 bytes per parameter: fp32 weights, gradients and Adam's two moments; the second term is the
activations saved for backward). ``sweep_estimate`` adds the cells of a plan up; ``--dry-run`` prints it.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

TABLE = Path(__file__).with_name("cost_table.json")
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
        width = m.n_embd if m.arch in ("gpt2", "sgpt") else m.width
        return cls(m.arch, cell.N, cell.task.d, width, m.n_layer, cell.train.batch_size, m.layout)

    @property
    def tokens(self) -> int:
        """Sequence length per prompt: 2(N+1) for GPT-2 and SGPT (interleaved, or context then queries),
        N+1 rows for the MLPs."""
        return 2 * (self.N + 1) if self.arch in ("gpt2", "sgpt") else self.N + 1


def model_params(s: StepShape) -> int:
    """Trainable parameters (GPT-2: 12 k^2 + 13 k per block, positions, read-in/out; SGPT: 2 k^2 per layer)."""
    k, P = s.width, s.N + 1
    if s.arch == "gpt2":
        read_in = (s.d + 1 if s.layout == "stacked" else s.d) * k + k
        positions = P if s.layout == "stacked" else 2 * P
        # blocks, positions, a one-token vocabulary, final layer norm, read-in, read-out
        return s.layers * (12 * k * k + 13 * k) + positions * k + k + 2 * k + read_in + k + 1
    if s.arch == "sgpt":
        return s.layers * 2 * k * k + k
    inputs = {"mlp": P * (s.d + 1)}.get(s.arch, s.d + 1)
    return inputs * k + k


def step_flops(s: StepShape) -> float:
    """FLOPs of one training step (forward + backward = 3 x forward matmuls) for the batch."""
    k, L = s.width, s.tokens
    if s.arch == "gpt2":
        per_token = s.layers * (24 * k * k + 4 * L * k) + 2 * (s.d + 1) * k + 2 * k
    elif s.arch == "sgpt":
        per_token = s.layers * (4 * k * k + 4 * L * k) + 2 * (s.d + 1) * k + 2 * k
    else:
        per_token = 2 * model_params(s)
    return 3.0 * per_token * L * s.batch


def activation_elements(s: StepShape) -> float:
    return float(s.batch) * s.tokens * s.width * max(s.layers, 1)


def load_table(path: Path | str = TABLE) -> dict:
    with open(path) as file:
        return json.load(file)


def fit_time(rows: list[dict]) -> dict:
    """Least squares of seconds = t0 + flops / rate over measured rows, weighted by 1/seconds (relative
    errors); t0 is clipped at 0."""
    xs = [r["flops"] for r in rows]
    ys = [r["seconds"] for r in rows]
    w = [1 / y ** 2 for y in ys]
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
    return ADAM_BYTES_PER_PARAM * model_params(s) + c["m0"] + c["bytes_per_activation"] * activation_elements(s)


@dataclass(frozen=True)
class SweepEstimate:
    cells: int
    flops: float               # training FLOPs of every cell's every step
    seconds: float             # training time on the table's device, one cell at a time
    peak_bytes: float          # the largest cell's step

    def line(self, device: str) -> str:
        return (f"estimated training compute: {self.flops:.3g} FLOP over {self.cells} cells, about"
                f" {format_hours(self.seconds)} of one {device} (one cell at a time; evaluation not counted);"
                f" largest step peak memory about {self.peak_bytes / 2 ** 20:.0f} MiB")


def format_hours(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


def sweep_estimate(cells, table: dict | None = None) -> SweepEstimate:
    """Total training cost of ``cells`` (Cell objects) under the measured table."""
    table = table or load_table()
    flops = seconds = peak = 0.0
    count = 0
    for cell in cells:
        shape = StepShape.of_cell(cell)
        steps = cell.train.steps
        flops += steps * step_flops(shape)
        seconds += steps * step_seconds(shape, table)
        peak = max(peak, step_peak_bytes(shape, table))
        count += 1
    if math.isnan(seconds):
        raise ValueError("the cost table gives NaN; re-measure it")
    return SweepEstimate(count, flops, seconds, peak)


def describe_compute(plan) -> str:
    """The --dry-run line: the plan's estimated training compute, or why there is none."""
    try:
        table = load_table()
    except (OSError, ValueError) as err:
        return f"estimated training compute: unavailable ({err})"
    return sweep_estimate([p.cell for p in plan.cells], table).line(table.get("device", "machine"))


def markdown_table(table: dict) -> str:
    """The measured rows as the README's table (``python -m scaling.cost``)."""
    lines = ["| arch | N | d | width | layers | batch | GFLOP/step | s/step | peak MiB | fitted s/step |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for r in table["rows"]:
        shape = StepShape(**{k: r[k] for k in StepShape.__dataclass_fields__})
        lines.append(f"| {r['arch']} | {r['N']} | {r['d']} | {r['width']} | {r['layers']} | {r['batch']} |"
                     f" {r['flops'] / 1e9:.1f} | {r['seconds']:.2f} | {r['peak_bytes'] / 2 ** 20:.0f} |"
                     f" {step_seconds(shape, table):.2f} |")
    return "\n".join(lines)


if __name__ == "__main__":
    print(markdown_table(load_table()))
