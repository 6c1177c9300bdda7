"""A training step captured once as a CUDA graph and replayed (PyTorch's whole-network capture,
``torch.cuda.graph``): the few hundred small kernels of a tiny transformer's step launched as one graph,
so the step costs its arithmetic instead of ~5 us of Python and launch per kernel.

``GraphedSteps(trainer, batch)`` takes anything with ``step_on(xs, ys)`` (one whole training step that
launches kernels and reads nothing back: scaling.papers.context_scaling.train.CellTrainer, one cell, and
scaling.papers.context_scaling.stacked_transformers.StackedTransformer, a pack), its ``step`` counter and
``batch()``, the current step's inputs. It trains ``warmup`` steps eagerly on a side stream (lazy state:
Adam's moments, cuBLAS handles), then captures one step on static input buffers; each ``step()`` copies the
step's batch into them and replays. The steps are the eager steps' kernels on the same data, so the numbers
are those of eager training to rounding. Shapes must stay fixed (no curriculum), and so must the learning rate
(a captured step replays the rate it was captured with: the constant schedule only).

CUDA only: CI never runs it; benchmarks/gpu.py compares its numbers and speed with the eager steps'.
"""

from __future__ import annotations

from typing import Callable

import torch


class GraphedSteps:
    """Training steps of ``trainer`` replayed from one captured CUDA graph (see the module docstring)."""

    def __init__(self, trainer, batch: Callable[[], tuple[torch.Tensor, torch.Tensor]], warmup: int = 3):
        cell = trainer.cell if hasattr(trainer, "cell") else trainer.members[0].cell
        if cell.train.schedule != "constant":
            raise ValueError(
                f"a captured step replays one learning rate: schedule {cell.train.schedule!r} cannot be"
                " captured"
            )
        self.trainer, self.batch = trainer, batch
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for _ in range(warmup):
                trainer.step_on(*batch())
                trainer.step += 1
        torch.cuda.current_stream().wait_stream(side)
        xs, ys = batch()
        self.xs, self.ys = xs.clone(), ys.clone()  # static inputs: each step's batch is copied in
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.loss = trainer.step_on(self.xs, self.ys)  # static output

    def step(self) -> torch.Tensor:
        """Train the trainer's current step; its loss(es) on the device (overwritten by the next step)."""
        xs, ys = self.batch()
        if xs.shape != self.xs.shape or ys.shape != self.ys.shape:
            raise ValueError(f"a captured step takes batches {tuple(self.xs.shape)}, not {tuple(xs.shape)}")
        self.xs.copy_(xs)
        self.ys.copy_(ys)
        self.graph.replay()
        self.trainer.step += 1
        return self.loss
