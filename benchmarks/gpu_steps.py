"""The GPU script's step phases (benchmarks/gpu.py): the Fig. 1 GPT-2 step and packed GPT-2 cells, timed
through the trial's own training code (benchmarks.trial_path), each ratio saying what it compares.

``fig1``: the Fig. 1 cell's step (8 layers, 8 heads, width 256, d = 8, N = 40, batch 64) against the
Garg-style reference loop of benchmarks.training (Hugging Face GPT2Model, eager attention, data drawn on the
CPU, torch.optim.Adam) on the same card, in pairs of one precision: our step eager against the loop, fp32
and bf16; the trial's step (its planned precision, graphs on CUDA) against the loop in that precision (the
target: 2x); and, apart, the trial's step against the fp32 loop (across precisions: what a user gains over
the reference as it is usually run). MFU from the exact FLOP count (scaling.budget.cost.step_flops).

``packs``: K = 1, 8, 32, 64 cells packed at the quick profile's size and at Fig. 1's, through the trial path:
packing alone (a pack's step against K steps of one cell, both as the trial runs them: the same precision,
both graphed on CUDA), the pack's MFU (the target: 25% at Fig. 1's size), its peak memory; member 0 against
the cell trained alone.
"""

from __future__ import annotations

import time

import torch

from papers.context_scaling.stacked import stack
from papers.context_scaling.train import CellTrainer
from scaling.budget.cost import StepShape, activation_elements, model_params, step_flops
from scaling.trial.devices import use_precision

from .common import Result, interleaved_medians
from .gpu_common import CELL_STEPS, FIG1, QUICK, TINY, Check, Run, max_param_diff, mfu, seconds_per_step
from .trial_path import TrialSteps, cell_of

# the MFU target's pack first: each size compiles its step (train.compile auto), and time may run out
PACK_SIZES, SMOKE_PACK_SIZES = (64, 32, 8, 1), (1, 2, 4)
TARGETS = {"fig1": 2.0, "pack_mfu": 0.25}
REFERENCE = "Garg-style loop: HF GPT2Model, eager attn, data on CPU, torch Adam"


def shape_of(size: dict, arch: str = "gpt2") -> StepShape:
    width = size.get("width") if arch == "mlp" else size["n_embd"]
    return StepShape(arch, size["N"], size["d"], width, size.get("n_layer", 1), size["batch"])


def reference(run: Run, size: dict, bf16: bool):
    """The reference loop's step in fp32 (TF32 off) or under bf16 autocast (TF32 on, as a bf16 trial)."""
    from .training import PlainGPT2, plain_data, reference_step

    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        model = PlainGPT2(size["d"], size["N"] + 1, size["n_embd"], size["n_layer"], size["n_head"])
    step = reference_step(model.to(run.device), plain_data(size, gen), run.device, bf16)

    def steps_of(n: int) -> None:
        use_precision(run.device, "bfloat16" if bf16 else "float32")
        for _ in range(n):
            step()

    return steps_of


def waited(run: Run, steps_of, steps: int):
    """One timing of interleaved_medians: ``steps`` steps, waited for."""

    def call():
        steps_of(steps)
        run.sync()

    return call


def eager_steps(run: Run, size: dict, precision: str) -> TrialSteps:
    """A cell's steps in ``precision``, eager and uncompiled: our side of the same-dtype lines."""
    return TrialSteps([cell_of(size, precision, run.device, compile="off")], run.device, graphs=False)


def fig1_sides(run: Run, size: dict) -> tuple[dict, str]:
    """The Fig. 1 phase's sides (name -> steps_of) and the precision the trial's cell is planned in."""
    trial = TrialSteps([cell_of(size, "auto", run.device)], run.device)
    sides = {
        "ref fp32": reference(run, size, bf16=False),
        "ref bf16": reference(run, size, bf16=True),
        "fp32 eager": eager_steps(run, size, "float32"),
        "bf16 eager": eager_steps(run, size, "bfloat16"),
        "trial": trial,
    }
    trial(8)  # its graph captured (and its step compiled) before the timings
    how = trial.precision + ("+graph" if trial.graphed else " eager")
    return sides, how + ("+compile" if trial.compiled else "")


def fig1_phase(run: Run, seconds: float) -> None:
    size = TINY if run.smoke else FIG1
    batch, steps = size["batch"], 1 if run.smoke else 5
    sides, trial = fig1_sides(run, size)
    calls = {name: waited(run, side, steps) for name, side in sides.items()}
    medians = interleaved_medians(calls, 2 if run.smoke else 30, warmup=1, budget_s=0.6 * seconds)
    rate = {name: batch * steps / s for name, s in medians.items()}
    flops = step_flops(shape_of(size))
    shape = f"{size['n_layer']}L/{size['n_head']}H/w{size['n_embd']} d={size['d']} N={size['N']} B={batch}"

    def note(ours: str, ref: str) -> str:
        used = {side: mfu(run, flops * rate[side] / batch, 1.0) for side in (ours, ref)}
        return f"{shape}; {used[ours]} (ref {used[ref]}); {flops / 1e9:.1f} GFLOP/step"

    same = "ref bf16" if trial.startswith("bfloat16") else "ref fp32"
    pairs = [
        ("fig1_step_fp32[eager vs ref eager]", "fp32 eager", "ref fp32", None),
        ("fig1_step_bf16[eager vs ref eager]", "bf16 eager", "ref bf16", None),
        (f"fig1_step_trial[{trial} vs {same}]", "trial", same, None if run.smoke else TARGETS["fig1"]),
        (f"fig1_step_best[trial {trial} vs ref fp32]", "trial", "ref fp32", None),
    ]
    for name, ours, ref, target in pairs:
        what = {"trial": f"the trial's step ({trial})"}.get(ours, f"our step, {ours}")
        against = f"{REFERENCE}, {ref.split()[1]}, eager"
        run.add(
            Result(
                name,
                against,
                what,
                "prompts/s",
                rate[ref],
                rate[ours],
                target,
                note=note(ours, ref),
                extra={
                    "seconds_per_step": {k: v / steps for k, v in medians.items()},
                    "flops_per_step": flops,
                },
            ).judged()
        )


def pack_line(run: Run, size_name: str, K: int, t_alone: float, t_pack: float, peak, flops: float, how: str):
    """A pack's line: packing alone (K cells one at a time against the pack, both through the trial path),
    cells per hour of a cell of its size, the pack's MFU and peak memory."""
    per_cell = CELL_STEPS[size_name]
    run.add(
        Result(
            f"pack_gpt2[{size_name} K={K}]",
            f"{K} cells one after another, each as a trial runs it ({how})",
            f"{K} packed, as a trial runs them ({how})",
            "cells/h",
            3600 / (per_cell * t_alone),
            3600 * K / (per_cell * t_pack),
            note=f"packing alone; {size_name} GPT-2 cells of {per_cell} steps; ms/step: one cell"
            f" {t_alone * 1e3:.2f}, the pack {t_pack * 1e3:.2f}; pack {mfu(run, K * flops, t_pack)}"
            + (f"; peak {peak / 2**30:.2f} GiB" if peak else ""),
            extra={"alone_s": t_alone, "pack_s": t_pack, "peak_bytes": peak, "flops_per_cell_step": flops},
        ).judged()
    )


def packs_phase(run: Run, seconds: float) -> None:
    """Each size's packs (as long as the phase's time allows, keeping time for the member checks)."""
    ends = time.monotonic() + seconds - 10
    sizes = [("tiny", TINY)] if run.smoke else [("quick", QUICK), ("fig1", FIG1)]
    for size_name, size in sizes:
        steps = 2 if run.smoke else (20 if size_name == "quick" else 5)
        flops = step_flops(shape_of(size))
        run.free()
        alone = TrialSteps([cell_of(size, "auto", run.device)], run.device)
        how = alone.how
        t_alone = seconds_per_step(run, alone, steps)
        run.cost_rows.append(cost_row(alone.trainers[0].cell, 1, t_alone, run.peak_bytes()))
        del alone
        mfus = {}
        for K in SMOKE_PACK_SIZES if run.smoke else PACK_SIZES:
            if (time.monotonic() > ends or run.left() < 20) and not run.smoke:
                run.say(f"packs: {size_name} K={K} not run (the phase's time is nearly spent)")
                break
            run.free()
            try:
                pack = TrialSteps([cell_of(size, "auto", run.device, seed=k) for k in range(K)], run.device)
                t_pack = seconds_per_step(run, pack, steps)
                peak = run.peak_bytes()
            except torch.OutOfMemoryError:
                run.add(Check(f"pack_gpt2[{size_name} K={K}]", "INFO", "out of GPU memory"))
                continue
            run.cost_rows.append(cost_row(pack.trainers[0].cell, K, t_pack, peak))
            pack_line(run, size_name, K, t_alone, t_pack, peak, flops, how)
            mfus[K] = K * flops / t_pack
            del pack
        if size_name != "quick" and mfus:
            mfu_line(run, size_name, mfus)
        member_check(run, size_name, size, 4 if run.smoke else 8)


def mfu_line(run: Run, size_name: str, flops_per_s: dict[int, float]) -> None:
    """The best pack's MFU at ``size_name`` against the target (25% of the dense bf16 peak)."""
    K = max(flops_per_s, key=flops_per_s.get)
    peak = run.peak_flops()
    if peak is None:
        run.add(Check(f"pack_mfu[{size_name}]", "INFO", f"no GPU peak known here; best K = {K}"))
        return
    value = flops_per_s[K] / peak
    ok = value >= TARGETS["pack_mfu"]
    run.add(
        Check(
            f"pack_mfu[{size_name}]",
            "PASS" if ok else "FAIL",
            f"{value:.1%} of the dense bf16 peak at K = {K}, packed cells through the trial path (target >="
            f" {TARGETS['pack_mfu']:.0%}); by K: "
            + ", ".join(f"{k}: {v / peak:.1%}" for k, v in sorted(flops_per_s.items())),
        )
    )


def cost_row(cell, members: int, seconds: float, peak: float | None) -> dict:
    """A row of the CUDA cost table: a pack of ``members`` cells like ``cell`` (totals over the pack)."""
    shape = StepShape.of_cell(cell)
    params = model_params(shape)
    return {
        **shape.__dict__,
        "members": members,
        "seconds": seconds,
        "flops": members * step_flops(shape),
        "params": members * params,
        "params_formula": members * params,
        "activations": members * activation_elements(shape),
        "peak_bytes": peak if peak is not None else 16.0 * members * params,  # CPU (smoke): no allocator peak
    }


def member_check(run: Run, size_name: str, size: dict, K: int, steps: int = 10) -> None:
    """Member 0 of a pack of K after ``steps`` steps against the same cell trained alone (fp32, eager)."""
    run.free()
    use_precision(run.device, "float32")
    cells = [cell_of(size, "float32", run.device, seed=k, compile="off") for k in range(K)]
    alone = CellTrainer(cells[0], run.device, graphs=False)
    losses_alone = [float(alone.next_loss()) for _ in range(steps)]
    trainers = [CellTrainer(c, run.device, graphs=False) for c in cells]
    packed = stack(trainers)
    losses_packed = [float(packed.train_step()[0]) for _ in range(steps)]
    packed.write_back()
    diff = max_param_diff(alone.model, trainers[0].model)
    loss_diff = max(abs(a - b) / abs(a) for a, b in zip(losses_alone, losses_packed))
    run.add(
        Check(
            f"pack_member0[{size_name} K={K}]",
            "PASS" if diff <= 1e-4 and loss_diff <= 1e-4 else "FAIL",
            f"fp32, {steps} steps: max |param packed - alone| = {diff:.2e}, losses' largest relative"
            f" difference {loss_diff:.2e} (bounds 1e-4: float rounding through Adam)",
        )
    )
