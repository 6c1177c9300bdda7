"""The GPU script's compile phase (benchmarks/gpu.py, ``--phases compile``): ``train.compile: on``
(torch.compile of a stacked GPT-2 pack's forward and loss, replayed inside the pack's captured step) against
the same pack with it off, at Fig. 1's size, through the trial path (benchmarks.trial_path), in one process.

For each K: both packs in the trial's precision and graphed (on CUDA), both warm (the compiled one's first
steps, which compile, are timed apart and reported), then their steps timed in alternation; the line is the
compiled step against the uncompiled one, with the compiled pack's MFU and how far member 0's parameters
moved from the uncompiled pack's over the same steps (inductor's kernels round differently; on the CPU the
members end with their numbers alone, tests/test_pack_compile.py). On an H200 (2026-11-29) it showed 1.45x
at K = 64, so ``train.compile: auto`` compiles the transformers' steps on CUDA (docs/gpu.md).
"""

from __future__ import annotations

import time

import torch

from scaling.budget.cost import step_flops

from .common import Result, interleaved_medians
from .gpu_common import FIG1, TINY, Check, Run, max_param_diff, mfu
from .gpu_steps import shape_of, waited
from .trial_path import TrialSteps, cell_of

PACK_SIZES, SMOKE_PACK_SIZES = (64, 32), (2,)  # 64 first: the MFU target's pack; 32 if time is left
WARMUP = 6  # steps before timing: the eager steps, the compile and the CUDA graph's capture among them


def pack_of(size: dict, K: int, device: torch.device, compiled: bool) -> TrialSteps:
    how = "on" if compiled else "off"
    return TrialSteps([cell_of(size, "auto", device, seed=k, compile=how) for k in range(K)], device)


def first_steps(run: Run, steps: TrialSteps) -> float:
    """Seconds of the pack's first WARMUP steps (the compile among them), waited for."""
    start = time.perf_counter()
    steps(WARMUP)
    run.sync()
    return time.perf_counter() - start


def compile_phase(run: Run, seconds: float) -> None:
    """Each K's line (as long as the phase's time allows: a compile may take a minute)."""
    name, size = ("tiny", TINY) if run.smoke else ("fig1", FIG1)
    steps = 2 if run.smoke else 5
    flops = step_flops(shape_of(size))
    ends = time.monotonic() + seconds
    for K in SMOKE_PACK_SIZES if run.smoke else PACK_SIZES:
        if time.monotonic() > ends - 30 and not run.smoke:
            run.say(f"compile: K={K} not run (the phase's time is nearly spent)")
            break
        run.free()
        try:
            plain, compiled = pack_of(size, K, run.device, False), pack_of(size, K, run.device, True)
            warm = {"off": first_steps(run, plain), "on": first_steps(run, compiled)}
            calls = {
                setting: waited(run, side, steps) for setting, side in (("off", plain), ("on", compiled))
            }
            medians = interleaved_medians(calls, 2 if run.smoke else 10, warmup=1, budget_s=0.3 * seconds)
        except torch.OutOfMemoryError:
            run.add(Check(f"pack_compile[{name} K={K}]", "INFO", "out of GPU memory: larger packs not run"))
            break
        moved = max_param_diff(plain.models()[0], compiled.models()[0])
        how = plain.precision + (", graphed" if plain.graphed else ", eager")
        per_step = {setting: s / steps for setting, s in medians.items()}
        run.add(
            Result(
                f"pack_compile[{name} K={K}]",
                f"{K} packed, train.compile off ({how})",
                f"{K} packed, train.compile on ({how})",
                "steps/s",
                1 / per_step["off"],
                1 / per_step["on"],
                note=f"ms/step {per_step['off'] * 1e3:.2f} -> {per_step['on'] * 1e3:.2f}; compiled pack"
                f" {mfu(run, K * flops, per_step['on'])} (uncompiled {mfu(run, K * flops, per_step['off'])});"
                f" first {WARMUP} steps {warm['off']:.1f} s -> {warm['on']:.1f} s (the compile);"
                f" member 0's parameters apart by {moved:.2e} after the same steps",
                extra={"seconds_per_step": per_step, "first_steps_s": warm, "param_diff": moved},
            ).judged()
        )
        del plain, compiled
