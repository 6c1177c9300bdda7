"""A sweep's training time on CPUs as the driver runs it: the packs it forms and the wall time on the run's
CPUs (``--dry-run``'s CPU lines, from the cost table scaling/budget/cost_table.json).

The training cells that ask for no GPU are packed as the driver packs them
(scaling.budget.packing.pack_groups, with the trial slots the CPUs give: CPUs // a trial's CPUs). Each trial
(a pack of K cells, or one cell) costs ``steps x (t0 + K x flops / rate)`` under the table's fit
(scaling.budget.gpu_plan.pack_seconds), its rate scaled to the threads the trial gets (its CPUs) from the
threads the table was measured with; the wall time places the trials on the slots longest first
(scaling.budget.gpu_plan.wall_seconds). A trial's start-up and the evaluation are not counted. Architectures
without a row in the table borrow GPT-2's fit, said in a line.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from scaling.budget.cost import format_hours, load_gpu_table, load_table, sweep_estimate
from scaling.budget.gpu_plan import is_training, pack_seconds, wall_seconds
from scaling.budget.packing import pack_groups


@dataclass(frozen=True)
class CpuEstimate:
    """The CPU cells' trials as the driver forms them: each trial's cells and estimated seconds."""

    trials: list[list]  # the cells of each trial (one: an unpacked cell)
    seconds: list[float]  # each trial's training seconds at its threads
    slots: int  # trials the CPUs run at once
    threads: int  # torch threads of a trial (its CPUs)

    @property
    def wall(self) -> float:
        return wall_seconds(self.seconds, self.slots) if self.seconds else 0.0


def table_threads(table: dict) -> int:
    """The threads the table's steps were timed with (its device, "cpu (2 threads)"; 1 if unsaid)."""
    found = re.search(r"(\d+) threads?", str(table.get("device", "")))
    return int(found.group(1)) if found else 1


def at_threads(table: dict, threads: int) -> dict:
    """The table with each fit's rate scaled from the table's threads to ``threads`` (no faster than
    measured: a trial with more threads than the table is costed at the table's rate)."""
    scale = min(threads, table_threads(table)) / table_threads(table)
    fits = {arch: {**fit, "rate": fit["rate"] * scale} for arch, fit in table["fit"].items()}
    return {**table, "fit": fits}


def cpu_estimate(plan, table: dict, cpus: int) -> CpuEstimate:
    """The trials of the plan's CPU training cells on ``cpus`` CPUs and their estimated seconds: a pure
    function of the plan and the table."""
    planned = [p for p in plan.cells if p.resources.gpu <= 0 and is_training(p.cell)]
    if not planned:
        return CpuEstimate([], [], 1, 1)
    per_trial = max(1, int(planned[0].resources.cpu or 1))
    slots = max(1, cpus // per_trial)
    cells = [p.cell for p in planned]
    groups = pack_groups(cells, plan.run.pack, lambda c: None, slots)
    trials = [[cells[i] for i in group] for group in groups]
    scaled = at_threads(table, per_trial)
    return CpuEstimate(trials, [pack_seconds(t, scaled) for t in trials], slots, per_trial)


def describe_compute(plan, cpus: int, cpus_from: str, estimate: CpuEstimate | None = None) -> str:
    """The --dry-run lines of the CPU: FLOPs and peak memory of the training cells, then the wall time
    of their trials as the driver packs them on ``cpus`` CPUs (said to come from ``cpus_from``; ``estimate``:
    those trials, when already formed)."""
    try:
        table = load_table()
    except (OSError, ValueError) as err:
        return f"estimated training compute: unavailable ({err})"
    total = sweep_estimate([p.cell for p in plan.cells], table)
    lines = []
    if total.cells:
        estimate = estimate or cpu_estimate(plan, table, cpus)
        lines.append(
            f"estimated training compute: {total.flops:.3g} FLOP over {total.cells}"
            f" cell{'' if total.cells == 1 else 's'}; largest step peak memory about"
            f" {total.peak_bytes / 2**20:.0f} MiB"
        )
        if estimate.trials:
            alone = sweep_estimate([cell for trial in estimate.trials for cell in trial], table).seconds
            lines.append(time_line(estimate, table, cpus, cpus_from, alone))
        else:
            device = table.get("device", "machine")
            lines.append(
                "CPU: every training cell asks for a GPU (their time: the GPU lines)\n  one at a time"
                f" unpacked on the table's {device} they would take {format_hours(total.seconds)}"
            )
    if total.borrowed:
        lines.append(f"  {', '.join(total.borrowed)}: {borrowed_line(table)}")
    lines += [f"{n} cell{'' if n == 1 else 's'}: {what}" for what, n in sorted(total.other.items())]
    return "\n".join(lines) or "no cells"


def time_line(estimate: CpuEstimate, table: dict, cpus: int, cpus_from: str, unpacked: float) -> str:
    """What the CPU trials will take: the wall time, how it was counted, and the unpacked sum beside it."""
    packs = [t for t in estimate.trials if len(t) > 1]
    packed = sum(len(t) for t in packs)
    cells = sum(len(t) for t in estimate.trials)
    how = f"{len(estimate.trials)} trials for {cells} cells that ask for no GPU"
    how += f", {packed} cells packed into {len(packs)}" if packs else ""
    threads = f"{estimate.threads} thread{'' if estimate.threads == 1 else 's'}"
    measured = table.get("measured", "undated")
    return (
        f"estimated CPU training time: about {format_hours(estimate.wall)} on {cpus} CPU"
        f"{'' if cpus == 1 else 's'} ({cpus_from})"
        f"\n  {how}, {estimate.slots} at a time, longest first"
        f"\n  a trial's step: t0 + K x FLOP/rate of the {measured} table at {threads};"
        " start-up and evaluation not counted"
        f"\n  the cells one at a time unpacked: {format_hours(unpacked)}"
    )


def borrowed_line(table: dict) -> str:
    """What an architecture with no measured row is costed with."""
    t0 = table["fit"].get("gpt2", {}).get("t0")
    fixed = f" ({t0 * 1e3:.0f} ms a step fixed)" if t0 is not None else ""
    return (
        f"no measured row in the cost table; costed with GPT-2's fit{fixed}\n    likely high for small models"
        " (measure it: python -m benchmarks --only cost --update-cost-table)"
    )


def cell_weights(trials: list[list], table: dict | None = None, gpu_table: dict | None = None) -> dict:
    """Each cell's estimated training seconds by its key, its share of its trial's (``trials``: the
    planned cells of each trial as the driver formed them; a GPU trial under the CUDA table, a CPU one at
    its threads): what the progress weighs the time left by. Cells with no estimate (a kind that does not
    train, a GPU cell with no CUDA table) weigh the mean of the others; every cell 1.0 if none has one."""
    table = table if table is not None else load_table()
    gpu_table = gpu_table if gpu_table is not None else load_gpu_table()  # {}: none
    weights: dict[str, float | None] = {}
    for trial in trials:
        cells = [p.cell for p in trial]
        on_gpu = trial[0].resources.gpu > 0
        fit = gpu_table if on_gpu else at_threads(table, max(1, int(trial[0].resources.cpu or 1)))
        known = bool(fit) and all(is_training(c) for c in cells)
        seconds = pack_seconds(cells, fit) / len(cells) if known else None
        weights.update({c.key: seconds for c in cells})
    measured = [w for w in weights.values() if w is not None]
    mean = sum(measured) / len(measured) if measured else 1.0
    return {key: mean if w is None else w for key, w in weights.items()}
