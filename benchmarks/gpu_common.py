"""What the GPU script's phases share (benchmarks/gpu.py): the run (device, clock, lines printed and written
as they come), a phase's time limit, the sizes timed and the timing helpers."""

from __future__ import annotations

import contextlib
import datetime
import gc
import json
import signal
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch

FIG1 = {"d": 8, "N": 40, "n_layer": 8, "n_head": 8, "n_embd": 256, "batch": 64}  # sweeps/fig1.yaml's GPT-2
QUICK = {"d": 4, "N": 10, "n_layer": 2, "n_head": 2, "n_embd": 64, "batch": 64}  # sweeps/fig1.yaml quick
TINY = {"d": 3, "N": 5, "n_layer": 1, "n_head": 2, "n_embd": 16, "batch": 8}
CELL_STEPS = {"quick": 3000, "fig1": 500_000, "tiny": 20}  # a cell's training steps (cells per hour)
PEAK_BF16 = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}  # dense TFLOP/s


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


@torch.no_grad()
def max_param_diff(a: torch.nn.Module, b: torch.nn.Module) -> float:
    return max(float((x - y).abs().max()) for x, y in zip(a.parameters(), b.parameters()))


def seconds_per_step(run: Run, steps_of, steps: int, warmup: int = 6) -> float:
    """Seconds per step of ``steps_of`` (``steps_of(n)`` trains n steps: a benchmarks.trial_path.TrialSteps)
    after ``warmup`` steps (a CUDA graph's eager steps and its capture among them): the median of three runs
    of ``steps``, each waited for."""
    steps_of(warmup)
    run.sync()
    times = []
    for _ in range(3):
        start = time.perf_counter()
        steps_of(steps)
        run.sync()
        times.append((time.perf_counter() - start) / steps)
    return sorted(times)[1]


def mfu(run: Run, flops: float, seconds: float) -> str:
    """The model FLOP utilisation of ``flops`` done in ``seconds``: of the card's dense bf16 peak."""
    peak = run.peak_flops()
    return f"MFU {flops / seconds / peak:.1%}" if peak else "MFU n/a (no GPU peak known here)"
