"""The GPU script (issue 33): every CUDA figure in one run of about 7 minutes on one H100, without Ray or
MLflow (the device machine has torch, transformers and scikit-learn; nothing of the sweep's own stack).

    python -m benchmarks --gpu --out DIR              # on the GPU (docs/gpu.md: the exact device call)
    python -m benchmarks --gpu --smoke --out DIR      # tiny shapes on whatever device there is: seconds

Phases, each under its own time limit (a phase that runs over is stopped and the next one runs), every
line printed and written to DIR (gpu.json, cost_table_cuda.json) as it comes:

1. ``device``: the card, its memory, torch and CUDA; a trial holding gpu 0.25 caps its memory
   (scaling.devices, in a subprocess that asks for more than its share and is refused).
2. ``fig1``: the Fig. 1 GPT-2 cell's training step (8 layers, 8 heads, width 256, d = 8, N = 40, batch 64)
   against the Garg-style reference loop of benchmarks.training (Hugging Face GPT2Model, eager attention,
   fp32, data drawn on the CPU, torch.optim.Adam) on the same card: ours in fp32, TF32 and bf16, eager and
   replayed from a CUDA graph (scaling.papers.context_scaling.cuda_graphs); prompts/s and MFU (model FLOPs of
   scaling.cost.step_flops over the card's dense bf16 peak); the graphed steps' numbers against eager ones.
3. ``packs``: K = 1, 8, 32, 64 packed GPT-2 cells (scaling.papers.context_scaling.stacked_transformers) at the
quick
   profile's size and at Fig. 1's, fp32 as the sweeps train, eager (what a trial runs) and graphed: cells
   per hour against K cells trained one after another, the pack's peak memory; member 0's numbers after
   a few steps against the same cell trained alone.
4. ``cost``: seconds and peak memory of one fp32 step on a grid of shapes (GPT-2, SGPT, MLP; alone and
   packed), fitted as scaling.cost fits the CPU table (the pack rows of phase 3 included), written to
   DIR/cost_table_cuda.json; the Fig. 1 sweep's GPU-hours and packs under it (scaling.gpu_plan).
5. ``kinds``: each kind a GPU runs (training and its evaluation, the GPT-2 temperature scan, seed 003's
   GD and selection constructions) on the GPU and on the CPU with the same weights and prompts: their
   answers to fp32 / fp64 rounding.
6. ``llm``: the LLM scan (benchmarks.llm_scan.compare_scan) on a LLaMA-2-7B-shaped model built on the card
   from its config with random weights (bf16, ~13.5 GB; nothing downloaded) against a plain ``generate``
   loop on the same prompts: answers per second, and Fig. 3b's time at the paper's size on this card.
"""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import os
import platform
import signal
import subprocess
import sys
import time
import traceback
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

from scaling.cells import Cell
from scaling.cost import StepShape, activation_elements, fit_table, model_params, step_flops
from scaling.papers.context_scaling.stacked import stack
from scaling.papers.context_scaling.train import CellTrainer

from .common import Result, interleaved_medians, skipped

LLM_SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "temp_llama_a.yaml"  # the paper-size LLM scan
FIG1 = {"d": 8, "N": 40, "n_layer": 8, "n_head": 8, "n_embd": 256, "batch": 64}
QUICK = {"d": 4, "N": 10, "n_layer": 2, "n_head": 2, "n_embd": 64, "batch": 64}  # sweeps/fig1.yaml quick
TINY = {"d": 3, "N": 5, "n_layer": 1, "n_head": 2, "n_embd": 16, "batch": 8}
CELL_STEPS = {"quick": 3000, "fig1": 500_000, "tiny": 20}  # a cell's training steps (cells per hour)
PACK_SIZES, SMOKE_PACK_SIZES = (1, 8, 32, 64), (1, 2, 4)
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}  # dense TFLOP/s
# seconds per phase on one H100 (the sum, ~7 min, leaves the 8-minute budget a margin for start-up)
PHASE_SECONDS = {"device": 25, "fig1": 90, "packs": 100, "cost": 60, "kinds": 40, "llm": 120}
SMOKE_PHASE_SECONDS = 90
TOTAL_SECONDS = 450
TARGETS = {"fig1": 2.0, "pack_quick_32": 10.0, "llm": 5.0}
LLAMA2_7B = {  # LLaMA-2-7B's shape (Touvron et al. 2023, Table 1 / its config.json)
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
}
TINY_LLAMA = {**LLAMA2_7B, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
TINY_LLAMA.update(num_attention_heads=4, num_key_value_heads=4)


class PhaseTimeout(Exception):
    """A phase ran over its time limit."""


@contextlib.contextmanager
def time_limit(seconds: float):
    """Raise PhaseTimeout in this (main) thread after ``seconds``: the phase's backstop."""

    def expire(signum, frame):
        raise PhaseTimeout(f"over its {seconds:.0f} s")

    previous = signal.signal(signal.SIGALRM, expire)
    signal.setitimer(signal.ITIMER_REAL, max(seconds, 1.0))
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Check:
    """A line that is a comparison of numbers, not of speeds (graphed vs eager, member 0 vs alone)."""

    name: str
    status: str  # PASS | FAIL | INFO | SKIP | ERROR
    text: str
    extra: dict = field(default_factory=dict)

    def line(self) -> str:
        return f"{self.name:28s} {self.status:4s}  {self.text}"

    def as_dict(self) -> dict:
        return asdict(self)


class Run:
    """The run's device, sizes, clock and output: each line printed and the JSON rewritten as it comes."""

    def __init__(self, out: Path, smoke: bool, budget: float, tokenizer: str | None):
        self.out, self.smoke, self.tokenizer = out, smoke, tokenizer
        self.device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
        self.cuda = self.device.type == "cuda"
        self.started, self.budget = time.monotonic(), budget
        self.lines: list = []
        self.cost_rows: list[dict] = []
        self.info: dict = {"started": datetime.datetime.now().isoformat(timespec="seconds"), "smoke": smoke}
        out.mkdir(parents=True, exist_ok=True)

    def left(self) -> float:
        return self.budget - (time.monotonic() - self.started)

    def add(self, line) -> None:
        print(line.line(), flush=True)
        self.lines.append(line)
        self.save()

    def say(self, text: str) -> None:
        print(f"# {text}", flush=True)

    def save(self) -> None:
        data = {**self.info, "seconds": round(time.monotonic() - self.started, 1)}
        data["results"] = [line.as_dict() for line in self.lines]
        (self.out / "gpu.json").write_text(json.dumps(data, indent=1, default=str))

    def sync(self) -> None:
        if self.cuda:
            torch.cuda.synchronize(self.device)

    def free(self) -> None:
        gc.collect()
        if self.cuda:
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)

    def peak_bytes(self) -> float | None:
        return float(torch.cuda.max_memory_allocated(self.device)) if self.cuda else None

    def peak_flops(self) -> float | None:
        if not self.cuda:
            return None
        name = torch.cuda.get_device_name(self.device)
        return next((v for k, v in PEAK_BF16.items() if k in name), None)


def cell_of(size: dict, precision: str, device: torch.device, arch: str = "gpt2", seed: int = 0) -> Cell:
    """A cell of ``size`` (members of a pack differ in seed and T, as a sweep's cells do)."""
    from .training import our_cell

    return our_cell(arch, size, precision, device, seed, 2 ** (4 + seed % 12))


def cell_batch(trainer: CellTrainer):
    batch = trainer.train_batch(trainer.step)
    return batch.xs, batch.ys


@contextlib.contextmanager
def tf32(on: bool):
    """TF32 matmuls (CUDA) on or off inside the block."""
    old = torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = on
    try:
        yield
    finally:
        torch.backends.cuda.matmul.allow_tf32, torch.backends.cudnn.allow_tf32 = old


def graphed(run: Run, trainer, batch, warmup: int = 3):
    """A step function replaying one captured CUDA graph of ``trainer``'s step (CUDA only)."""
    from scaling.papers.context_scaling.cuda_graphs import GraphedSteps

    steps = GraphedSteps(trainer, batch, warmup)
    return steps.step


def stepper(run: Run, step, steps: int, tf32_on: bool = False):
    """A call of ``steps`` training steps, waited for (one timing of interleaved_medians)."""

    def call():
        with tf32(tf32_on):
            for _ in range(steps):
                step()
        run.sync()

    return call


def capture_failed(name: str, error: Exception) -> Check:
    """The line of a CUDA graph that could not be captured (the run goes on without it)."""
    text = f"CUDA graph capture failed: {type(error).__name__}: {str(error).splitlines()[0][:200]}"
    return Check(name, "ERROR", text, {"traceback": traceback.format_exc()})


@torch.no_grad()
def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a.parameters(), b.parameters()))


# ---- phase 1: the device and the memory cap ----------------------------------------------------------

CAP_PROBE = """
import sys, torch
from scaling.devices import cap_gpu_memory
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


def device_phase(run: Run) -> None:
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


# ---- phase 2: the Fig. 1 GPT-2 step ------------------------------------------------------------------


def fig1_phase(run: Run, seconds: float) -> None:
    from .training import PlainGPT2, plain_data, reference_step

    size = TINY if run.smoke else FIG1
    device, batch = run.device, size["batch"]
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        reference = PlainGPT2(size["d"], size["N"] + 1, size["n_embd"], size["n_layer"], size["n_head"])
    steps = 1 if run.smoke else 5
    sides = {
        "reference": stepper(run, reference_step(reference.to(device), plain_data(size, gen), device), steps)
    }
    variants = [("fp32", "float32", False), ("tf32", "float32", True), ("bf16", "bfloat16", False)]
    for name, precision, tf32_on in variants:
        if tf32_on and not run.cuda:
            run.add(skipped(f"fig1_gpt2_step[{name}]", "TF32 is a CUDA mode"))
            continue
        trainer = CellTrainer(cell_of(size, precision, device), device)
        sides[name] = stepper(run, trainer.next_loss, steps, tf32_on)
        if run.cuda:
            other = CellTrainer(cell_of(size, precision, device), device)
            try:
                with tf32(tf32_on):
                    sides[f"{name}+graph"] = stepper(
                        run, graphed(run, other, lambda t=other: cell_batch(t)), steps, tf32_on
                    )
            except Exception as error:  # noqa: BLE001 - the eager sides are still measured
                run.add(capture_failed(f"fig1_gpt2_step[{name}+graph]", error))
    medians = interleaved_medians(sides, 2 if run.smoke else 30, warmup=1, budget_s=0.6 * seconds)
    rates = {name: batch * steps / s for name, s in medians.items()}
    flops = step_flops(StepShape("gpt2", size["N"], size["d"], size["n_embd"], size["n_layer"], batch))
    peak = run.peak_flops()

    def mfu(rate: float) -> str:
        return f"MFU {flops * rate / batch / peak:.1%}" if peak else "MFU n/a (no GPU peak known here)"

    label = "Garg-style loop: HF GPT2Model, eager attn, fp32, data on CPU, torch Adam"
    shape = f"{size['n_layer']}L/{size['n_head']}H/w{size['n_embd']} d={size['d']} N={size['N']} B={batch}"
    for name, rate in rates.items():
        if name == "reference":
            continue
        run.add(
            Result(
                f"fig1_gpt2_step[{name}]",
                label,
                f"train step {name}",
                "prompts/s",
                rates["reference"],
                rate,
                note=f"{shape}; {mfu(rate)} (ref {mfu(rates['reference'])}); {flops / 1e9:.1f} GFLOP/step",
            ).judged()
        )
    best = max((n for n in rates if n != "reference"), key=rates.get)
    run.add(
        Result(
            "fig1_gpt2_step_best",
            label,
            f"train step {best}",
            "prompts/s",
            rates["reference"],
            rates[best],
            None if run.smoke else TARGETS["fig1"],
            note=f"{shape}; {mfu(rates[best])} of the card's dense bf16 peak",
            extra={"seconds_per_step": {k: v / steps for k, v in medians.items()}, "flops_per_step": flops},
        ).judged()
    )
    if run.cuda:
        try:
            graph_check(run, QUICK)
        except Exception as error:  # noqa: BLE001 - reported; the phase's speed lines stand
            run.add(capture_failed("graph_equals_eager", error))


def graph_check(run: Run, size: dict, steps: int = 12) -> None:
    """The graphed steps' numbers against eager ones: one cell and a pack of 4, fp32, ``steps`` steps."""
    for label, count in (("cell", 1), ("pack of 4", 4)):
        cells = [cell_of(size, "float32", run.device, seed=s) for s in range(count)]
        eager, replayed = (
            [CellTrainer(c, run.device) for c in cells],
            [CellTrainer(c, run.device) for c in cells],
        )
        if count == 1:
            for _ in range(steps):
                eager[0].next_loss()
            step = graphed(run, replayed[0], lambda: cell_batch(replayed[0]))
            while replayed[0].step < steps:
                step()
        else:
            one, two = stack(eager), stack(replayed)
            for _ in range(steps):
                one.train_step()
            step = graphed(run, two, two.step_inputs)
            while two.step < steps:
                step()
            one.write_back()
            two.write_back()
        diff = max(max_param_diff(a.model, b.model) for a, b in zip(eager, replayed))
        run.add(
            Check(
                f"graph_equals_eager[{label}]",
                "PASS" if diff <= 1e-5 else "FAIL",
                f"quick GPT-2, fp32, {steps} steps: max |param graphed - eager| = {diff:.2e} (bound 1e-5)",
            )
        )


# ---- phase 3: packed GPT-2 cells -----------------------------------------------------------------------


def time_steps(run: Run, step, steps: int, warmup: int = 2) -> float:
    """Seconds per step of ``step`` after ``warmup`` steps (median of three runs of ``steps``)."""
    for _ in range(warmup):
        step()
    run.sync()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        for _ in range(steps):
            step()
        run.sync()
        times.append((time.perf_counter() - start) / steps)
    return sorted(times)[1]


def cost_row(cell: Cell, members: int, seconds: float, peak: float | None) -> dict:
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


def packs_phase(run: Run, seconds: float) -> None:
    sizes = [("tiny", TINY)] if run.smoke else [("quick", QUICK), ("fig1", FIG1)]
    ks = SMOKE_PACK_SIZES if run.smoke else PACK_SIZES
    for size_name, size in sizes:
        steps = 2 if run.smoke else (20 if size_name == "quick" else 5)
        run.free()
        alone = CellTrainer(cell_of(size, "float32", run.device), run.device)
        t_alone = time_steps(run, alone.next_loss, steps)
        run.cost_rows.append(cost_row(alone.cell, 1, t_alone, run.peak_bytes()))
        del alone
        for K in ks:
            if run.left() < 20 and not run.smoke:
                run.say(f"packs: {size_name} K={K} not run (the run's time is nearly spent)")
                break
            run.free()
            try:
                trainers = [
                    CellTrainer(cell_of(size, "float32", run.device, seed=k), run.device) for k in range(K)
                ]
                packed = stack(trainers)
                t_eager = time_steps(run, packed.train_step, steps)
                peak = run.peak_bytes()
            except torch.OutOfMemoryError:
                run.add(
                    Check(f"pack_gpt2[{size_name} K={K}]", "INFO", "out of GPU memory: larger packs not run")
                )
                break
            run.cost_rows.append(cost_row(trainers[0].cell, K, t_eager, peak))
            t_graph = None
            if run.cuda:
                run.free()  # the eager steps' cached blocks go back before the graph takes its own pool
                try:
                    t_graph = time_steps(run, graphed(run, packed, packed.step_inputs), steps)
                except torch.OutOfMemoryError:
                    run.say(f"packs: {size_name} K={K} graphed: out of GPU memory (eager timed)")
                except Exception as error:  # noqa: BLE001 - the eager pack is timed; say why once
                    run.add(capture_failed(f"pack_gpt2[{size_name} K={K}] graphed", error))
            best = min(t for t in (t_eager, t_graph) if t is not None)
            per_cell = CELL_STEPS[size_name]
            target = TARGETS["pack_quick_32"] if (size_name, K) == ("quick", 32) and not run.smoke else None
            run.add(
                Result(
                    f"pack_gpt2[{size_name} K={K}]",
                    f"{K} cells one after another (one cell alone, eager)",
                    f"{K} packed ({'graphed' if best == t_graph else 'eager'})",
                    "cells/h",
                    3600 / (per_cell * t_alone),
                    3600 * K / (per_cell * best),
                    target,
                    note=f"{size_name} GPT-2 fp32, cells of {per_cell} steps; ms/step: alone"
                    f" {t_alone * 1e3:.2f}, pack eager {t_eager * 1e3:.2f}"
                    + (f", pack graphed {t_graph * 1e3:.2f}" if t_graph else "")
                    + (f"; peak {peak / 2**30:.2f} GiB" if peak else ""),
                    extra={"alone_s": t_alone, "eager_s": t_eager, "graph_s": t_graph, "peak_bytes": peak},
                ).judged()
            )
            del trainers, packed
        save_cost_table(run)
        member_check(run, size_name, size, 4 if run.smoke else 8)


def member_check(run: Run, size_name: str, size: dict, K: int, steps: int = 10) -> None:
    """Member 0 of a pack of K after ``steps`` steps against the same cell trained alone (fp32)."""
    run.free()
    cells = [cell_of(size, "float32", run.device, seed=k) for k in range(K)]
    alone = CellTrainer(cells[0], run.device)
    losses_alone = [float(alone.next_loss()) for _ in range(steps)]
    trainers = [CellTrainer(c, run.device) for c in cells]
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


# ---- phase 4: the CUDA cost table ------------------------------------------------------------------------


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
    for arch, size, members in cost_grid(run.smoke):
        if run.left() < 15 and not run.smoke:
            run.say(f"cost: the rest of the grid not run (the run's time is nearly spent) from {arch} {size}")
            break
        run.free()
        trainers = [
            CellTrainer(cell_of(size, "float32", run.device, arch, seed=k), run.device)
            for k in range(members)
        ]
        step = trainers[0].next_loss if members == 1 else stack(trainers).train_step
        t = time_steps(run, step, 2 if run.smoke else 5)
        run.cost_rows.append(cost_row(trainers[0].cell, members, t, run.peak_bytes()))
        del trainers, step
        save_cost_table(run)
    table = save_cost_table(run)
    fit = table["fit"].get("gpt2", {})
    run.add(
        Check(
            "cuda_cost_table",
            "INFO",
            f"{len(table['rows'])} rows -> {run.out / 'cost_table_cuda.json'}; gpt2 fit: t0"
            f" {fit.get('t0', 0) * 1e3:.2f} ms, rate {fit.get('rate', 0) / 1e12:.1f} TFLOP/s,"
            f" {fit.get('bytes_per_activation', 0):.1f} bytes per activation,"
            f" m0 {fit.get('m0', 0) / 2**20:.0f} MiB",
            extra={"fit": table["fit"]},
        )
    )
    fig1_estimate(run, table)


def save_cost_table(run: Run) -> dict:
    """The rows so far, fitted, written to DIR/cost_table_cuda.json (also after every row: partial results
    survive a phase that runs over)."""
    info = run.info.get("device", {})
    table = {
        "device": info.get("name", str(run.device)),
        "memory_bytes": info.get("memory_bytes", 0),
        "measured": datetime.date.today().isoformat(),
        "torch": torch.__version__,
        "precision": "float32 (TF32 off), eager steps as a trial runs them",
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


def fig1_estimate(run: Run, table: dict) -> None:
    """The Fig. 1 sweep's --dry-run GPU lines under the table just measured."""
    from scaling.gpu_plan import describe_gpu
    from scaling.plan import load_plan

    if not table["fit"]:
        run.add(skipped("fig1_sweep_gpu_estimate", "no fit of the table"))
        return
    if run.smoke and not table["memory_bytes"]:  # a CPU: the lines' code runs on an 80 GiB card's memory
        table = {**table, "memory_bytes": 80 * 2**30, "device": "no GPU (smoke; 80 GiB assumed)"}
    text = describe_gpu(load_plan(str(Path(__file__).resolve().parents[1] / "sweeps" / "fig1.yaml")), table)
    run.add(Check("fig1_sweep_gpu_estimate", "INFO", text.replace("\n", " | ")))
    from scaling.packing import gpu_budget, gpu_pack_size

    sizes = {
        f"{name} at gpu {share:g}": gpu_pack_size(
            cell_of(size, "float32", run.device), gpu_budget(share, table)
        )
        for name, size in (("quick", QUICK), ("fig1", FIG1))
        for share in (0.25, 0.5, 1.0)
    }
    text = "; ".join(f"{k}: K = {v}" for k, v in sizes.items())
    run.add(Check("gpu_pack_size", "INFO", f"GPT-2 cells a trial packs on this card under the table: {text}"))


# ---- phase 5: the kinds on CUDA against the CPU ----------------------------------------------------------

KIND_CELLS = {  # small cells of the kinds a GPU runs (their sweeps' quick profiles, fewer prompts)
    "train": {
        "task": {"family": "linear", "d": 4, "noise_std": 0.1},
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
        "train": {"steps": 40, "batch_size": 32, "lr": 1e-3},
        "eval": {"prompts": 256, "bootstrap": 100, "baselines": ["zero", "least_squares", "ridge"]},
        "N": 10,
        "T": 16,
    },
    "scan": {
        "job": "gpt2_scan",
        "task": {"family": "linear", "d": 4},
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
        "train": {"steps": 40, "batch_size": 32, "lr": 1e-3},
        "eval": {"prompts": 256, "bootstrap": 100, "baselines": ["zero", "least_squares"]},
        "temperature": {"train_model": True, "taus": [0.5, 1, 2]},
        "N": 10,
    },
    "gd": {
        "job": "gd_transformer",
        "task": {"family": "linear", "d": 5, "noise_std": 0.5},
        "construction": {"steps": 16, "eta": 0.1, "lam": 1.25},
        "eval": {"prompts": 256, "n": [5, 10, 20], "bootstrap": 100, "baselines": ["zero", "ridge"]},
        "N": 20,
    },
    "selection": {
        "job": "selection_transformer",
        "task": {"family": "linear_mixed_noise", "d": 5, "noise_stds": [0.1, 0.5]},
        "construction": {
            "steps": 16,
            "eta": 0.1,
            "lambdas": [0.05, 1.25],
            "gamma": 0.02,
            "val_fraction": 0.5,
        },
        "eval": {"prompts": 256, "n": [5, 10, 20], "bootstrap": 100, "baselines": ["zero", "ridge"]},
        "N": 20,
    },
}


class RecordedLog:
    """Where a kind run outside a trial logs: its curves and summary kept (the GPU machine has no MLflow)."""

    def finish(self, cell, curves, weights_path=None, summary=None, metric_key=None, units=None) -> None:
        self.curves, self.summary = curves, summary or {}


@dataclass
class Bench:
    """The parts of scaling.trial.TrialContext a kind's run reads, without MLflow or checkpoints."""

    device: torch.device
    log: RecordedLog = field(default_factory=RecordedLog)
    tracking_uri: str = ""
    sweep_model: None = None  # no store here: a from_sweep scan is not benched

    def progress(self, values: dict) -> None:
        pass


def curves_apart(a, b) -> float:
    """The largest relative difference of two runs' err columns (same rows in the same order)."""
    if list(a["predictor"]) != list(b["predictor"]) or list(a["n"]) != list(b["n"]):
        return float("inf")
    x, y = torch.tensor(a["err"].to_numpy()), torch.tensor(b["err"].to_numpy())
    return float(((x - y).abs() / y.abs().clamp_min(1e-12)).max())


def kinds_phase(run: Run, seconds: float) -> None:
    """Each kind a GPU runs, on the GPU and on the CPU, on the same weights and evaluation prompts (drawn on
    the CPU whatever the device: scaling.papers.context_scaling.tasks.fresh_prompts): their answers agree to
    fp32 (GPT-2) or fp64 (constructions) rounding. A cell trained on each device (CUDA draws its own batches)
    is INFO."""
    from scaling.papers.temperature.jobs import scan_gpt2

    cpu, gpu = torch.device("cpu"), run.device
    train = Cell.from_dict(KIND_CELLS["train"])
    trained = CellTrainer(train, cpu)
    trained.train_until(train.train.steps)
    moved = CellTrainer(train, gpu)
    moved.load_state_dict(trained.state_dict())
    apart = curves_apart(moved.evaluate(), trained.evaluate())
    run.add(
        Check(
            "kind_train_eval[cuda vs cpu]",
            "PASS" if apart <= 1e-4 else "FAIL",
            f"{gpu} vs cpu, the same"
            f" weights: evaluation errors (model and baselines) apart by {apart:.1e} relative (bound 1e-4)",
        )
    )
    on_gpu = CellTrainer(train, gpu)
    on_gpu.train_until(train.train.steps)
    a, b = (
        frame[frame["predictor"] == "model"].iloc[-1] for frame in (on_gpu.evaluate(), trained.evaluate())
    )
    half = (b["err_hi"] - b["err_lo"]) / 2
    text = (
        f"trained {train.train.steps} steps on each (CUDA draws its own batches): err at n={int(a['n'])}"
        f" {a['err']:.4f} on {gpu}, {b['err']:.4f} on cpu (CI half-width {half:.4f})"
    )
    run.add(Check("kind_train_trained[cuda vs cpu]", "INFO", text))
    scan = Cell.from_dict(KIND_CELLS["scan"])
    model = CellTrainer(scan, cpu)
    model.train_until(scan.train.steps)
    there = CellTrainer(scan, gpu)
    there.load_state_dict(model.state_dict())
    cpu_scan = scan_gpt2(scan, model.model.eval(), cpu)
    gpu_scan = scan_gpt2(scan, there.model.eval(), gpu)
    apart = curves_apart(gpu_scan.curves, cpu_scan.curves)
    same_tau = gpu_scan.summary["tau_best"] == cpu_scan.summary["tau_best"]
    run.add(
        Check(
            "kind_gpt2_scan[cuda vs cpu]",
            "PASS" if apart <= 1e-4 and same_tau else "FAIL",
            f"the same weights: errors at every tau apart by {apart:.1e} relative (bound 1e-4); tau_best"
            f" {gpu_scan.summary['tau_best']:g} vs {cpu_scan.summary['tau_best']:g}",
        )
    )
    for construction in ("gd", "selection"):
        cell = Cell.from_dict(KIND_CELLS[construction])
        job, here, there = cell.job, Bench(cpu), Bench(gpu)
        cell.kind.run(cell, here)  # the kind's own run, as a trial runs it
        cell.kind.run(cell, there)
        apart = curves_apart(there.log.curves, here.log.curves)
        run.add(
            Check(
                f"kind_{job}[cuda vs cpu]",
                "PASS" if apart <= 1e-9 else "FAIL",
                f"float64 constructions: errors apart by {apart:.1e} relative (bound 1e-9);"
                f" summary {there.log.summary} vs {here.log.summary}",
            )
        )


# ---- phase 6: the LLM scan on a LLaMA-2-7B-shaped model ---------------------------------------------------


def llm_phase(run: Run, seconds: float) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from scaling.papers.temperature.tiny_llm import char_tokenizer

    from .llm_scan import FIG3_ANSWERS, compare_scan

    if not run.cuda and not run.smoke:
        run.add(skipped("llm_scan_7b", "no CUDA device"))
        return
    if run.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(run.tokenizer, local_files_only=True)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        tokenizer = char_tokenizer()
    shape = TINY_LLAMA if run.smoke else LLAMA2_7B
    config = LlamaConfig(
        vocab_size=max(32000, len(tokenizer)),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **shape,
    )
    dtype = torch.bfloat16 if run.cuda else torch.float32
    run.free()
    start = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.random.fork_rng(devices=[]), torch.device(run.device):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    run.sync()
    params = sum(p.numel() for p in model.parameters())
    run.say(
        f"llm: {params / 1e9:.2f}e9 random parameters in {dtype} built in {time.perf_counter() - start:.1f} s"
    )
    # 24 questions x 2 runs: 48 distinct prompts, as many as one decoding batch of the paper's sweep holds
    n_test, runs, taus = (2, 1, (1.0,)) if run.smoke else (24, 2, (1.0,))
    batch = scan_batch_size()
    m = compare_scan(model, tokenizer, n_test, runs, taus, batch)
    per_answer = m["fast_s"] / m["answers"]
    fig3_hours = FIG3_ANSWERS * per_answer / 3600
    peak = run.peak_bytes()
    run.add(
        Result(
            "llm_scan_7b" if not run.smoke else "llm_scan_tiny",
            "plain generate: 1 prompt, 30 new tokens",
            f"scan: shared prefixes once, batches of {batch}, stop at answer",
            "answers/s",
            m["answers"] / m["plain_s"],
            m["answers"] / m["fast_s"],
            None if run.smoke else TARGETS["llm"],
            note=f"{'LLaMA-2-7B-shaped' if not run.smoke else 'tiny LLaMA'} random weights, {dtype},"
            f" {params / 1e9:.2f}e9 params, tokenizer {run.tokenizer or 'one token per character'};"
            f" {m['answers']} answers; answers agree {m['agree']:.0%};"
            f" {m['prompt_tokens'] / m['answers']:.0f} prompt tokens and"
            f" {m['plain_new_tokens'] / m['answers']:.1f} new tokens per plain answer;"
            f" {m['decode_steps_per_batch']:.1f} decoding steps per batch of {batch}"
            + (f"; peak {peak / 2**30:.1f} GiB" if peak else "")
            + f". Fig. 3b at the paper's size ({FIG3_ANSWERS} answers) at ours' rate: {fig3_hours:.1f} h"
            " on this device (random weights rarely stop early: an upper bound for the real model's answers)",
            extra={**m, "fig3b_hours": fig3_hours, "params": params},
        ).judged()
    )
    del model


def scan_batch_size(sweep: Path = LLM_SWEEP) -> int:
    """The decoding batch of the paper-size LLM scan (``temperature.batch_size`` of the sweep file's
    defaults, one whole GPU per cell), so that this line times what a cell of that sweep runs."""
    import yaml

    return int(yaml.safe_load(sweep.read_text())["defaults"]["temperature"]["batch_size"])


PHASES = {
    "device": None,
    "fig1": fig1_phase,
    "packs": packs_phase,
    "cost": cost_phase,
    "kinds": kinds_phase,
    "llm": llm_phase,
}


def main(out: str, smoke: bool = False, budget: float | None = None, phases=None, tokenizer=None) -> int:
    """Run the phases in order under their time limits; 0 when every line with a target met it."""
    run = Run(
        Path(out), smoke, budget or (len(PHASES) * SMOKE_PHASE_SECONDS if smoke else TOTAL_SECONDS), tokenizer
    )
    if not run.cuda:
        torch.set_num_threads(1)  # tiny shapes: a second thread on a shared CPU only contends
    what = "GPU script (smoke)" if smoke else "GPU script"
    run.say(f"{what}: device {run.device}, budget {run.budget:.0f} s, out {run.out}")
    errors = []
    for name in phases or PHASES:
        began = time.perf_counter()
        limit = SMOKE_PHASE_SECONDS if smoke else min(PHASE_SECONDS[name], max(run.left(), 1.0))
        try:
            with time_limit(limit):
                if name == "device":
                    device_phase(run)
                else:
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
