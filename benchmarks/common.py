"""Shared machinery of the benchmark suite: interleaved timing, result lines and their JSON form.

These machines are shared and noisy, so no benchmark reports a single absolute time: the two sides of a
comparison run alternately (A, B, A, B, ...) after a warm-up, each side's time is the median over its
repeats, and the figure of merit is the ratio of the two medians, measured in the same run.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import asdict, dataclass, field
from typing import Callable


@dataclass
class Result:
    """One benchmark line: reference side vs ours, throughputs in ``unit``, ratio = ours / reference."""

    name: str
    reference: str  # what the reference side is (model, precision, data placement)
    ours: str
    unit: str = ""
    reference_rate: float = float("nan")
    ours_rate: float = float("nan")
    target: float | None = None  # minimum ratio; None = reported only
    status: str = ""  # PASS | FAIL | SKIP | INFO
    note: str = ""
    extra: dict = field(default_factory=dict)

    @property
    def ratio(self) -> float:
        return self.ours_rate / self.reference_rate

    def judged(self) -> "Result":
        """Set ``status`` from the ratio and the target (SKIP and an explicit FAIL stay)."""
        if self.status in ("SKIP", "FAIL"):
            return self
        self.status = "INFO" if self.target is None else ("PASS" if self.ratio >= self.target else "FAIL")
        return self

    def line(self) -> str:
        if self.status == "SKIP":
            return f"{self.name:28s} SKIP  {self.note}"
        target = f">= {self.target:g}x" if self.target is not None else "(no target)"
        text = (
            f"{self.name:28s} {self.status:4s}  ratio {self.ratio:8.2f}x  target {target:11s}"
            f" | ours {self.ours_rate:10.4g} {self.unit} [{self.ours}]"
            f" | ref {self.reference_rate:10.4g} {self.unit} [{self.reference}]"
        )
        return text + (f" | {self.note}" if self.note else "")

    def as_dict(self) -> dict:
        out = asdict(self)
        out["ratio"] = None if self.status == "SKIP" else self.ratio
        return out


def skipped(name: str, why: str) -> Result:
    return Result(name, "", "", status="SKIP", note=why)


def interleaved_medians(
    sides: dict[str, Callable[[], None]],
    repeats: int,
    warmup: int = 1,
    budget_s: float = float("inf"),
    min_repeats: int = 2,
) -> dict[str, float]:
    """Median seconds per call of each side, the sides called in turn ``repeats`` times after ``warmup``
    rounds; stops early once ``budget_s`` has passed and every side has ``min_repeats`` timings."""
    for _ in range(warmup):
        for run in sides.values():
            run()
    times: dict[str, list[float]] = {name: [] for name in sides}
    start = time.perf_counter()
    for r in range(repeats):
        for name, run in sides.items():
            t = time.perf_counter()
            run()
            times[name].append(time.perf_counter() - t)
        if r + 1 >= min_repeats and time.perf_counter() - start > budget_s:
            break
    return {name: statistics.median(values) for name, values in times.items()}


@dataclass
class Row:
    """A result given as a dict by the sweep benchmarks (sweep_overhead, packing), whose ``ratio`` and
    ``target`` carry their own meaning (seconds of overhead per cell; a speed-up) and text."""

    data: dict

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def status(self) -> str:
        return self.data.get("status", "INFO")

    def line(self) -> str:
        d = self.data
        if self.status == "SKIP":
            return f"{d['name']:28s} SKIP  {d.get('note', '')}"
        return (
            f"{d['name']:28s} {self.status:4s}  value {d.get('ratio')} ({d.get('target')})"
            f" | ours {d.get('ours')} {d.get('unit', '')}"
            f" | reference {d.get('reference')} {d.get('unit', '')}"
        )

    def as_dict(self) -> dict:
        return dict(self.data)
