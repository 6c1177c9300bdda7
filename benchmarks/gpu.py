"""The GPU script (issue 41): the CUDA figures of the trial's own code in at most about 10 minutes on one
H100, and the product itself on the GPU (``--phases sweep``: the sweep CLI through Ray Tune and MLflow).

    python -m benchmarks --gpu --out DIR                    # the measurements (docs/gpu.md)
    python -m benchmarks --gpu --phases sweep --out DIR2    # then, in a new process: the sweeps on the GPU
    python -m benchmarks --gpu --smoke --out DIR            # tiny shapes on whatever device there is

Phases, each under its own time limit (a phase that runs over is stopped and the next one runs), every
line printed and written to DIR (gpu.json; cost_table_cuda.json; sweeps.log, smi.csv) as it comes:

1. ``device``: the card, its memory, torch and CUDA; a trial holding gpu 0.25 caps its memory
   (scaling.trial.devices, in a subprocess that asks for more than its share and is refused).
2. ``fig1``: the Fig. 1 GPT-2 step against the Garg-style reference loop, in pairs of one precision, and
   the trial's step (its precision, its CUDA graph) against it (benchmarks.gpu_steps).
3. ``packs``: packed GPT-2 cells at the quick profile's size and at Fig. 1's through the trial path:
   packing alone, MFU, peak memory, member 0 against the cell alone (benchmarks.gpu_steps).
4. ``cost``: the CUDA cost table as trials run their steps, and every figure sweep's GPU-hours and wall
   time under it (benchmarks.gpu_cost).
5. ``checks``: the trial path's own GPU checks (benchmarks.trial_gpu_checks: graphs against eager, resumed
   against whole, bf16 within the fp32 seeds' spread at Fig. 1's size once they learn, a pack splitting on
   a capped card).
6. ``compile`` (only when asked for): ``train.compile: on`` against off for Fig. 1-size packs
   (benchmarks.gpu_compile). ``kinds`` and ``llm`` (not in the default run; measured on 2026-11-26,
   docs/results.md): each kind's answers on the GPU against the CPU's; the LLM scan on a LLaMA-2-7B-shaped
   model (benchmarks.gpu_kinds).
7. ``sweep`` (only when asked for, in a process of its own): ``sweeps/smoke.yaml`` and a slice of
   ``sweeps/fig1.yaml``'s full profile through Ray Tune and MLflow on the GPU against their bare packs, with
   the GPU's utilisation sampled while they run (benchmarks.gpu_sweep).

The lines through the trial path time what a Ray trial runs (benchmarks.trial_path): the same cells, the
same trainers and loops, less the checkpoints and MLflow.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

from .common import skipped
from .gpu_common import TINY, Check, PhaseTimeout, Run, time_limit
from .gpu_compile import compile_phase
from .gpu_cost import cost_phase
from .gpu_kinds import kinds_phase, llm_phase
from .gpu_steps import fig1_phase, packs_phase
from .gpu_sweep import sweep_phase

# seconds per phase on one H100 (the default phases' sum, 10 minutes, most of it the trials' compiles and the
# checks: on a lent machine in two calls; the sweep phase's ~4 in a call of its own: benchmarks/README.md)
PHASE_SECONDS = {
    "device": 10,
    "fig1": 60,  # the trial's step compiles (train.compile auto: ~20 s)
    "packs": 150,  # each pack size compiles its step (~15-20 s at Fig. 1's size)
    "cost": 150,  # so does each GPT-2 and SGPT row
    "checks": 230,  # bf16 against fp32 off the plateau (120 s), the out-of-memory probe (80 s), the rest
    "compile": 150,  # train.compile at K = 64, then 32: each compile of the 8-layer pack may take a minute
    "kinds": 40,
    "llm": 120,
    "sweep": 360,  # its own steps' limits (benchmarks.gpu_sweep.LIMITS) keep it inside
}
DEFAULT_PHASES = ("device", "fig1", "packs", "cost", "checks")
SMOKE_PHASE_SECONDS = 90
SMOKE_SWEEP_SECONDS = 400  # two real sweeps on a (shared, 2-core) CPU
SPREAD_SECONDS = 120  # the bf16-against-fp32 check's budget: until the fp32 cells leave the loss plateau
__all__ = ["PhaseTimeout"]


CAP_PROBE = """
import sys, torch
from scaling.trial.devices import cap_gpu_memory
device = torch.device("cuda", 0)
print(cap_gpu_memory(device, 0.25))
total = torch.cuda.get_device_properties(device).total_memory
small = torch.empty(int(0.15 * total), dtype=torch.uint8, device=device)
try:
    torch.empty(int(0.2 * total), dtype=torch.uint8, device=device)
except torch.OutOfMemoryError:
    print("REFUSED")
else:
    print("ALLOWED")
"""


def device_phase(run: Run, seconds: float = 0.0) -> None:
    info = {"python": platform.python_version(), "torch": torch.__version__, "device": str(run.device)}
    if run.cuda:
        props = torch.cuda.get_device_properties(run.device)
        info.update(
            name=props.name,
            memory_bytes=props.total_memory,
            capability=f"{props.major}.{props.minor}",
            cuda=torch.version.cuda,
            multiprocessors=props.multi_processor_count,
        )
    run.info["device"] = info
    run.say(" ".join(f"{k}={v}" for k, v in info.items()))
    if not run.cuda:
        run.add(skipped("gpu_memory_cap", "no CUDA device: the cap is CUDA's (checked on the GPU run)"))
        return
    probe = subprocess.run(
        [sys.executable, "-c", CAP_PROBE], capture_output=True, text=True, timeout=60, env=os.environ.copy()
    )
    lines = probe.stdout.strip().splitlines()
    ok = probe.returncode == 0 and lines[-1:] == ["REFUSED"] and "capped to 0.25" in probe.stdout
    text = "a trial holding gpu 0.25: 15% of the card allocated, a further 20% refused; its log says: " + (
        lines[0] if lines else ""
    )
    run.add(Check("gpu_memory_cap", "PASS" if ok else "FAIL", text if ok else probe.stdout + probe.stderr))


def checks_phase(run: Run, seconds: float) -> None:
    """The trial path's GPU checks (benchmarks.trial_gpu_checks), each line as it comes (tiny when smoke)."""
    from . import trial_gpu_checks as checks

    small = TINY if run.smoke else None
    spread = dict(segment=10, budget_s=1, learned=0) if run.smoke else dict(budget_s=SPREAD_SECONDS)
    for lines in (
        lambda: checks.graph_equals_eager(run.device, small or checks.QUICK),
        lambda: checks.resume_equals_whole(run.device, small or checks.QUICK),
        lambda: checks.bf16_within_seed_spread(run.device, small or checks.FIG1_A, **spread),
        lambda: checks.pack_splits_on_card(run.device, small or checks.FIG1),
    ):
        for line in lines():
            run.add(Check(line["name"], line["status"], line["text"], line.get("extra", {})))
        run.free()


PHASES = {
    "device": device_phase,
    "fig1": fig1_phase,
    "packs": packs_phase,
    "cost": cost_phase,
    "checks": checks_phase,
    "compile": compile_phase,
    "kinds": kinds_phase,
    "llm": llm_phase,
    "sweep": sweep_phase,
}


def main(out: str, smoke: bool = False, budget: float | None = None, phases=None, tokenizer=None) -> int:
    """Run the phases in order under their time limits; 0 when every line with a target met it."""
    phases = list(phases or DEFAULT_PHASES)
    run = Run(Path(out), smoke, budget or sum(phase_limit(name, smoke) for name in phases), tokenizer)
    if not run.cuda:
        torch.set_num_threads(1)  # tiny shapes: a second thread on a shared CPU only contends
    what = "GPU script (smoke)" if smoke else "GPU script"
    run.say(
        f"{what}: device {run.device}, phases {' '.join(phases)}, budget {run.budget:.0f} s, out {run.out}"
    )
    errors = []
    for name in phases:
        began = time.perf_counter()
        limit = phase_limit(name, smoke) if smoke else min(phase_limit(name, smoke), max(run.left(), 1.0))
        try:
            with time_limit(limit + (30 if name == "sweep" else 0)):  # the sweep keeps its own limits
                PHASES[name](run, limit)
        except Exception as error:  # noqa: BLE001 - a phase that fails or runs over must not stop the others
            errors.append(name)
            text = f"{type(error).__name__}: {error}".splitlines()[0][:300]
            run.add(Check(f"phase_{name}", "ERROR", text, {"traceback": traceback.format_exc()}))
        run.free()
        run.say(f"{name}: {time.perf_counter() - began:.0f} s (limit {limit:.0f} s); {run.left():.0f} s left")
    failed = [line.name for line in run.lines if line.status in ("FAIL", "ERROR")]
    run.say(
        f"{len(run.lines)} lines in {time.monotonic() - run.started:.0f} s; "
        + (f"FAILED: {', '.join(failed)}" if failed else "every target met")
    )
    run.save()
    return 1 if failed or errors else 0


def phase_limit(name: str, smoke: bool) -> float:
    """A phase's seconds: its share of the GPU run (PHASE_SECONDS), or on a smoke run a CPU's."""
    if smoke:
        return SMOKE_SWEEP_SECONDS if name == "sweep" else SMOKE_PHASE_SECONDS
    return PHASE_SECONDS[name]
