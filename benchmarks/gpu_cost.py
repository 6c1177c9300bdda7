"""The GPU script's cost phase (benchmarks/gpu.py): the CUDA cost table as trials run their steps, and the
figure sweeps' GPU-hours under it.

Seconds and peak memory of a training step on a grid of shapes (GPT-2, SGPT, MLP; alone and packed; the
pack phase's rows included), each timed through the trial path (benchmarks.trial_path: the precision a GPU
trial plans, bfloat16, and its CUDA graphs), fitted as scaling.budget.cost fits the CPU table and written to
DIR/cost_table_cuda.json with what it timed (``train_precision``, ``cuda_graphs``, ``compile``): copied beside
scaling/budget/cost.py it is what ``--dry-run`` estimates GPU-hours from (scaling.budget.gpu_plan). Then every
figure sweep's full profile under it: its GPU-hours (packs one after another on one card) and its wall time on
8 GPUs, against the targets (Fig. 1 at most 3 H100-hours, Figs. 1-8 at most 20).
"""

from __future__ import annotations

import datetime
import json
import time
from pathlib import Path

import torch

from papers.context_scaling.cuda_graphs import compiles
from scaling.budget.cost import fit_table, format_hours
from scaling.budget.gpu_plan import describe_gpu, gpu_seconds, table_steps, wall_seconds
from scaling.budget.packing import gpu_budget, gpu_pack_size
from scaling.planning.plan import load_plan

from .common import skipped
from .gpu_common import FIG1, QUICK, TINY, Check, Run, seconds_per_step
from .gpu_steps import cost_row
from .trial_path import TrialSteps, cell_of

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
TARGET_HOURS = {"fig1": 3.0, "figs": 20.0}  # issue 41: H100-hours at the full profiles
NODE_GPUS = 8  # the wall time of the figures on one 8-GPU node
ESTIMATE_SECONDS = 10  # the figures' estimates after the grid (planning the 8 figure files)


def cost_grid(smoke: bool) -> list[tuple[str, dict, int]]:
    """(arch, size, members) of the table's rows beside the pack phase's."""
    if smoke:
        return [
            ("gpt2", {**TINY, "N": 10}, 1),
            ("sgpt", TINY, 1),
            ("sgpt", TINY, 2),
            ("mlp", {**TINY, "width": 32}, 1),
        ]
    base = FIG1
    rows = [("gpt2", {**base, "N": n}, 1) for n in (10, 80)]
    rows += [("gpt2", {**base, "n_embd": w, "n_head": 8}, 1) for w in (128, 512)]
    rows += [
        ("gpt2", {**base, "n_layer": 4}, 1),
        ("gpt2", {**base, "batch": 256}, 1),
        ("gpt2", {**base, "N": 10}, 8),
    ]
    rows += [("sgpt", base, 1), ("sgpt", {**base, "N": 10}, 1), ("sgpt", base, 8), ("sgpt", base, 32)]
    mlp = {"d": 8, "N": 40, "batch": 64, "width": 1024}
    rows += [("mlp", mlp, 1), ("mlp", {**mlp, "N": 10}, 1), ("mlp", mlp, 8), ("mlp", mlp, 32)]
    return rows


def cost_phase(run: Run, seconds: float) -> None:
    """The grid's rows (as long as the phase's time allows, keeping ESTIMATE_SECONDS for the figures'
    estimates), the table written, every figure sweep's GPU-hours under it."""
    ends = time.monotonic() + seconds - ESTIMATE_SECONDS
    for arch, size, members in cost_grid(run.smoke):
        if (time.monotonic() > ends or run.left() < ESTIMATE_SECONDS) and not run.smoke:
            run.say(
                f"cost: the rest of the grid not run (the phase's time is nearly spent) from {arch} {size}"
            )
            break
        run.free()
        cells = [cell_of(size, "auto", run.device, arch, seed=k) for k in range(members)]
        steps = TrialSteps(cells, run.device)
        t = seconds_per_step(run, steps, 2 if run.smoke else 5)
        run.cost_rows.append(cost_row(cells[0], members, t, run.peak_bytes()))
        del steps
        save_cost_table(run)
    table = save_cost_table(run)
    fit = table["fit"].get("gpt2", {})
    run.add(
        Check(
            "cuda_cost_table",
            "INFO",
            f"{len(table['rows'])} rows -> {run.out / 'cost_table_cuda.json'} ({table_steps(table)}); gpt2"
            f" fit: t0 {fit.get('t0', 0) * 1e3:.2f} ms, rate {fit.get('rate', 0) / 1e12:.1f} TFLOP/s,"
            f" {fit.get('bytes_per_activation', 0):.1f} bytes per activation,"
            f" m0 {fit.get('m0', 0) / 2**20:.0f} MiB",
            extra={"fit": table["fit"]},
        )
    )
    figure_estimates(run, table)


def save_cost_table(run: Run) -> dict:
    """The rows so far, fitted, written to DIR/cost_table_cuda.json (also after every row: partial results
    survive a phase that runs over), with the precision and graphs the rows were timed with."""
    info = run.info.get("device", {})
    planned = cell_of(TINY, "auto", run.device)
    table = {
        "device": info.get("name", str(run.device)),
        "memory_bytes": info.get("memory_bytes", 0),
        "measured": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "train_precision": planned.train.precision,
        "cuda_graphs": run.cuda,
        # the transformers' steps compiled (train.compile auto on CUDA, as trials run them)
        "compile": compiles(planned.train.compile, run.device, auto=True),
        "steps": "the trial path (benchmarks/trial_path.py): cells planned for a GPU trial, the kind's loops",
        "smoke": run.smoke,
        "command": "python -m benchmarks --gpu" + (" --smoke" if run.smoke else ""),
        "rows": run.cost_rows,
        "fit": {},
    }
    try:
        table["fit"] = fit_table(run.cost_rows)
    except (ZeroDivisionError, ValueError) as error:  # too few distinct rows yet
        table["fit_error"] = str(error)
    (run.out / "cost_table_cuda.json").write_text(json.dumps(table, indent=1) + "\n")
    return table


def figure_estimates(run: Run, table: dict) -> None:
    """Each figure sweep's --dry-run GPU figures under the table just measured, and the targets."""
    if not table["fit"]:
        run.add(skipped("figure_gpu_hours", "no fit of the table"))
        return
    if run.smoke and not table["memory_bytes"]:  # a CPU: the lines' code runs on an 80 GiB card's memory
        table = {**table, "memory_bytes": 80 * 2**30, "device": "no GPU (smoke; 80 GiB assumed)"}
    hours = {}
    for k in range(1, 9):
        plan = load_plan(str(SWEEPS / f"fig{k}.yaml"))
        seconds = gpu_seconds(plan, table)
        hours[k] = sum(seconds) / 3600
        text = describe_gpu(plan, table, gpus=NODE_GPUS, gpus_from="one 8-GPU node").replace("\n", " | ")
        run.add(Check(f"dry_run[fig{k}]", "INFO", text, {"gpu_hours": hours[k], "pack_seconds": seconds}))
        if k == 1:
            wall = wall_seconds(seconds, NODE_GPUS)
            run.add(hours_check("dry_run_hours[fig1]", hours[1], TARGET_HOURS["fig1"], wall, run.smoke))
    total = sum(hours.values())
    run.add(hours_check("dry_run_hours[figs 1-8]", total, TARGET_HOURS["figs"], None, run.smoke))
    pack_sizes(run, table)


def hours_check(name: str, hours: float, target: float, wall: float | None, smoke: bool) -> Check:
    """GPU-hours against their target (a smoke run's CPU table: reported, not judged)."""
    text = f"{hours:.2f} GPU-hours on one card under the measured table (target <= {target:g})"
    if wall is not None:
        text += f"; {format_hours(wall)} on {NODE_GPUS} GPUs"
    status = "INFO" if smoke else ("PASS" if hours <= target else "FAIL")
    return Check(name, status, text, {"hours": hours})


def pack_sizes(run: Run, table: dict) -> None:
    """How many GPT-2 cells of the quick and Fig. 1 sizes a trial holding 0.25, 0.5, 1 GPU packs here."""
    sizes = {
        f"{name} at gpu {share:g}": gpu_pack_size(cell_of(size, "auto", run.device), gpu_budget(share, table))
        for name, size in (("quick", QUICK), ("fig1", FIG1))
        for share in (0.25, 0.5, 1.0)
    }
    text = "; ".join(f"{k}: K = {v}" for k, v in sizes.items())
    run.add(Check("gpu_pack_size", "INFO", f"GPT-2 cells a trial packs on this card under the table: {text}"))
