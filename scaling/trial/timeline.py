"""Where a trial's wall time goes: the seconds of each of its phases, logged with each cell's run.

A trial's ``Timeline`` starts when the trial does (scaling.trial.trainable.tune_trainable) and adds up the
seconds spent in each phase the training kind names (papers.context_scaling.kind): ``train`` (the steps),
``checkpoint`` (checkpoints and the losses logged with them), ``evaluate``; ``setup`` is the time from the
trial's start to its first training step (the training code's import, the leases, the runs opened, models
and data built, checkpoints read). Each cell's run gets them as metrics ``trial/seconds/<phase>`` (a pack's
members share the pack's, and each has its own evaluation's), so the MLflow UI shows what besides training
a trial cost, and the GPU script's sweep phase reads them (benchmarks.gpu_sweep). Wall-clock seconds on the
host: a phase on a GPU ends where the host waits for the device (a loss read, a checkpoint's copy). A sweep's
driver keeps one too (``sweep/seconds/<phase>`` on the sweep's parent run: plan, Ray, cards, store,
trials; scaling.sweep.phases).
"""

from __future__ import annotations

import contextlib
import time
from typing import Callable, Iterator

PREFIX = "trial/seconds/"
DRIVER_PREFIX = "sweep/seconds/"  # a sweep driver's phases, on the sweep's parent run (scaling.sweep.phases)


class Timeline:
    """Seconds per phase since ``began`` (default: ``clock()``, time.monotonic, at creation), named
    ``prefix`` + phase in ``metrics``; see the module docstring."""

    def __init__(
        self, clock: Callable[[], float] = time.monotonic, prefix: str = PREFIX, began: float | None = None
    ):
        self.clock, self.prefix = clock, prefix
        self.began = clock() if began is None else began
        self.seconds: dict[str, float] = {}

    def since_start(self, name: str) -> None:
        """Phase ``name``: the seconds from the start to now (a sweep driver's plan)."""
        self.seconds[name] = self.clock() - self.began

    @contextlib.contextmanager
    def steps(self) -> Iterator[None]:
        """A block of training steps (phase ``train``); the first one ends the setup."""
        self.seconds.setdefault("setup", self.clock() - self.began)
        with self.phase("train"):
            yield

    @contextlib.contextmanager
    def phase(self, name: str) -> Iterator[None]:
        """Add the block's seconds to ``name``."""
        start = self.clock()
        try:
            yield
        finally:
            self.seconds[name] = self.seconds.get(name, 0.0) + self.clock() - start

    def metrics(self, **own: float) -> dict[str, float]:
        """{"trial/seconds/<phase>": seconds} so far, with ``own`` phases (one member's) in place of the
        trial's."""
        return {self.prefix + name: round(value, 3) for name, value in {**self.seconds, **own}.items()}
