"""A training step captured once as a CUDA graph and replayed (PyTorch's whole-network capture,
``torch.cuda.graph``): the few hundred small kernels of a tiny transformer's step launched as one graph,
so the step costs its arithmetic instead of ~5 us of Python and launch per kernel.

``StepGraph(trainer, capture)`` runs the steps of anything with ``step_on(xs, ys)`` (one whole training
step that launches kernels and reads nothing back: papers.context_scaling.train.CellTrainer, one
cell; papers.context_scaling.stacked's engines, a pack), as the trial's trainers do
(``train.cuda_graphs``). Every step of the steady shape copies its batch into static input buffers (made
at the first such step); the first ``warmup`` of them run eagerly on the buffers (on a side stream on CUDA:
lazy state such as Adam's moments and cuBLAS handles, and ``train.compile``'s compile, whose guards then
see the strides the capture will: a recompile cannot run inside a capture), the next is captured on them
and every later one replays. A batch of another shape (a curriculum's shorter prompts) runs eagerly. The
trainer must hold its learning rate on the device (papers.context_scaling.adam.DeviceRates): a
captured step then reads the schedule's rate of the device's step counter and advances it, so replayed
steps are the eager steps' kernels on the same data and their numbers are the eager ones bit for bit.
Without ``capture`` (a CPU) the same path runs the step on the static buffers eagerly: the logic CI can
test.

CUDA graphs themselves run on a GPU only: benchmarks/gpu.py and benchmarks/trial_gpu_checks.py compare their
numbers and speed with the eager steps'.
"""

from __future__ import annotations

import os
import shutil

import torch

WARMUP = 3  # eager steps of the steady shape before the capture


class StepGraph:
    """The steps of ``trainer`` replayed from one CUDA graph of its steady shape (see the module
    docstring); ``capture=False`` runs the same path eagerly."""

    def __init__(self, trainer, capture: bool, warmup: int = WARMUP):
        self.trainer, self.capture, self.warmup = trainer, capture, warmup
        self.eager_steps = 0  # steady steps run eagerly before the capture
        self.replays = 0  # steps replayed from the graph (on a CPU: run on the static inputs)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.xs: torch.Tensor | None = None  # static inputs (the first steady step's) and output
        self.ys: torch.Tensor | None = None
        self.out: torch.Tensor | None = None
        self.captured = False  # the steady step recorded (on a CPU: the static path live)

    def run(self, xs: torch.Tensor, ys: torch.Tensor, steady: bool = True) -> torch.Tensor:
        """One training step on (xs, ys), the trainer's step counter left alone; its loss(es) on the device,
        valid until the next step (a replayed graph's output is overwritten)."""
        if not steady or (self.xs is not None and (xs.shape != self.xs.shape or ys.shape != self.ys.shape)):
            return self.trainer.step_on(xs, ys)
        if self.xs is None:  # contiguous, as the steps' own batches may not be (views of a batch block)
            self.xs = xs.clone(memory_format=torch.contiguous_format)
            self.ys = ys.clone(memory_format=torch.contiguous_format)
        else:
            self.xs.copy_(xs)
            self.ys.copy_(ys)
        if not self.captured:
            if self.eager_steps < self.warmup:
                self.eager_steps += 1
                return self._eager()
            self._record()
        return self._replay()

    def _eager(self) -> torch.Tensor:
        if not self.capture:
            return self.trainer.step_on(self.xs, self.ys)
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            out = self.trainer.step_on(self.xs, self.ys)
        torch.cuda.current_stream().wait_stream(side)
        return out

    def _record(self) -> None:
        """On CUDA, the step captured on the static inputs (not run: replayed)."""
        self.captured = True
        if not self.capture:
            return
        self.graph = torch.cuda.CUDAGraph()
        try:
            with torch.cuda.graph(self.graph):
                self.out = self.trainer.step_on(self.xs, self.ys)
        except Exception as error:  # nothing ran: the trainer's state is the last step's
            self.graph = self.xs = self.ys = self.out = None
            self.captured = False
            memory = out_of_memory(error)
            if memory is None:
                raise
            raise torch.OutOfMemoryError(f"while capturing a CUDA graph: {memory}") from error

    def _replay(self) -> torch.Tensor:
        self.replays += 1
        if self.graph is not None:
            self.graph.replay()
            return self.out
        out = self.trainer.step_on(self.xs, self.ys)
        if self.out is None:
            self.out = torch.empty_like(out)
        return self.out.copy_(out)


def out_of_memory(error: BaseException) -> str | None:
    """The message of the out-of-memory error behind ``error`` (itself, or the one a failed capture's end
    was raised over), or None."""
    while error is not None:
        if isinstance(error, torch.OutOfMemoryError):
            return str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
        error = error.__cause__ or error.__context__
    return None


RECOMPILE_LIMIT = 64  # shapes one compiled step may take in a process (a trial's pack sizes: a few)


def compiled_step(train, fn, device: torch.device, auto: bool = False) -> CompiledStep | None:
    """``fn`` (a step's forward, or a model) compiled by torch.compile for one shape where ``train.compile``
    says so (``compiles``), else None: the caller runs it at the steady shape and ``fn`` itself at a
    curriculum's others. ``auto``: whether the step is one compile is known to speed up on a GPU."""
    return CompiledStep(fn) if compiles(train.compile, device, auto) else None


def compiles(setting: str, device: torch.device, auto: bool) -> bool:
    """Whether a step on ``device`` is compiled under ``train.compile``: on, off, or auto = on for a step
    that compile speeds up (``auto``; measured: the transformers', packed Fig. 1 cells 1.45x on an H200) on
    CUDA where a C compiler is found (triton builds its kernels' launchers with one; without it the first
    step would fail)."""
    if setting == "auto":
        return auto and device.type == "cuda" and c_compiler() is not None
    return setting == "on"


def c_compiler() -> str | None:
    """The C compiler triton would use on Linux (``$CC``, else gcc, else clang on the PATH), or None."""
    return os.environ.get("CC") or shutil.which("gcc") or shutil.which("clang")


class CompiledStep:
    """``torch.compile(fn, dynamic=False)``: compiled once per shape and dtype, shared by every engine whose
    step is the same code (dynamo caches by code object; its guards check the inputs' shapes and the
    settings read, not which engine). Past RECOMPILE_LIMIT shapes in one process dynamo would quietly run
    the rest eager (a trial then trains slower than its cost table says, and nothing shows it): here it
    raises instead, before the step runs."""

    def __init__(self, fn):
        self.fn = torch.compile(fn, dynamic=False)
        self.name = getattr(fn, "__qualname__", type(fn).__name__)

    def __call__(self, *args):
        try:
            limit = dict(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True)
            with torch._dynamo.config.patch(**limit):
                return self.fn(*args)
        except torch._dynamo.exc.FailOnRecompileLimitHit as error:
            raise RuntimeError(
                f"train.compile: {self.name} was compiled for {RECOMPILE_LIMIT} input shapes in this process"
                " (dynamo's recompile limit), where a trial needs one per pack size; rather than train the"
                " rest uncompiled, this stops. Set train.compile: off to train uncompiled"
            ) from error


def pack_factors(members) -> torch.Tensor | None:
    """The schedule on the device (the members' CellTrainer.lr_factors) for a pack engine whose members'
    trainers replay CUDA graphs (CellTrainer.graphs); None: the rate stays on the host."""
    return members[0].lr_factors() if members[0].graphs else None


def pack_graph(engine, members) -> StepGraph | None:
    """A pack engine's step replayed from a CUDA graph where its members' trainers replay theirs."""
    return StepGraph(engine, capture=members[0].capture) if members[0].graphs else None


def next_losses(engine) -> torch.Tensor:
    """A pack engine's current step on its inputs (``step_inputs``), replayed from its graph at the steady
    shape; the members' losses (K,), read before the next step. The engine's step counter is left alone."""
    inputs = engine.step_inputs()
    if engine.graph is None:
        return engine.step_on(*inputs)
    return engine.graph.run(*inputs, steady=engine.members[0].steady(engine.step))
