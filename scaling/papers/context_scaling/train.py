"""Train and evaluate one cell (no Ray, no MLflow): seed 001 App. A, Garg et al.'s training recipe.

The loss is the mean over prompts and over prefix lengths n = 1..N of the squared error predicting
y_{n+1} from the first n pairs (App. A, "Problem formulation"), or over the context lengths
``train.lengths`` alone (App. A's single zero-padded MLP for all the figure's lengths, tested at them).
Adam with a constant learning rate (Garg et al.), or with a linear warm-up and a cosine decay to 0
(``TrainConfig.schedule``); the rate is a pure function of the step.
Everything a resumed run needs (model, optimiser, step) is in ``state_dict``; the batch of step s is a
pure function of (seed, s), so a run resumed from a checkpoint ends with the same numbers as one that
never stopped. On CUDA (``train.cuda_graphs``) a step of the cell's steady shape is captured once as a CUDA
graph and replayed (scaling.papers.context_scaling.cuda_graphs), its learning rate read on the device
(scaling.papers.context_scaling.adam.DeviceRates); the replayed steps are the eager ones bit for bit.
Evaluation (``CellTrainer.evaluate``) is scaling.papers.context_scaling.evaluate's.
"""

from __future__ import annotations

import contextlib
import functools
import math
from dataclasses import dataclass, field, replace
from typing import Callable

import pandas as pd
import torch

from ...config import check, check_choice
from .adam import DeviceRates, FusedAdam
from .baselines import Predictor, applicable_baselines
from .cuda_graphs import StepGraph
from .evaluate import evaluate, lambda_scan
from .models import build_model
from .tasks import Prompts, TaskPool, derive_seed, fresh_prompts, make_family


@dataclass(frozen=True)
class Curriculum:
    """Garg et al.'s curriculum: the input dimension and the prompt length grow in steps during training.

    At step s the batch has min(d, dims_start + dims_inc * (s // dims_every)) live input coordinates (the
    others are zeroed before labelling, as Garg et al. do) and min(N+1, points_start + points_inc *
    (s // points_every)) points (pairs plus query). A start of 0 turns that curriculum off (the default).
    Garg et al.: dims 5 -> 20, +1 every 2000 steps; points 11 -> 41, +2 every 2000 (linear tasks) and
    26 -> 101, +5 every 2000 (ReLU-network and tree tasks). Evaluation always uses the full d and N.
    """

    # the starts are the switches (0 = off), always settings; the steps of a half that is off go unread
    # (left out of the cell's MLflow params, scaling.config.unread: their absence is said by the switch)
    dims_start: int = 0
    dims_inc: int = field(default=1, metadata={"applies": lambda c: c.dims_start > 0})
    dims_every: int = field(default=2000, metadata={"applies": lambda c: c.dims_start > 0})
    points_start: int = 0
    points_inc: int = field(default=2, metadata={"applies": lambda c: c.points_start > 0})
    points_every: int = field(default=2000, metadata={"applies": lambda c: c.points_start > 0})

    def __post_init__(self):
        for name in ("dims_start", "points_start"):
            check(getattr(self, name) >= 0, name, f"must be >= 0 (0 = off), got {getattr(self, name)}")
        check(self.points_start != 1, "points_start", "a prompt needs at least 2 points (a pair and a query)")
        for name in ("dims_inc", "dims_every", "points_inc", "points_every"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")

    def dims(self, step: int, d: int) -> int:
        """Live input coordinates at ``step`` for a task of dimension d."""
        if not self.dims_start:
            return d
        return min(d, self.dims_start + self.dims_inc * (step // self.dims_every))

    def points(self, step: int, points: int) -> int:
        """Points per prompt (pairs plus the query) at ``step`` for a cell of ``points`` = N+1."""
        if not self.points_start:
            return points
        return min(points, self.points_start + self.points_inc * (step // self.points_every))


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-4
    # steps between checkpoints (and metric flushes); not part of the cell key
    checkpoint_every: int = field(default=200, metadata={"key": False})
    log_every: int = field(default=10, metadata={"key": False})  # steps between train/loss points
    # auto | float32 | bfloat16 (autocast). auto resolves at planning from the cell's resources
    # (scaling.cells.resolve_precision): bfloat16 for a trial given a GPU, float32 on the CPU; a resolved
    # float32 is keyed as the default, so CPU cells keep the keys they had before auto existed, and a cell
    # never planned (no resources) trains in float32
    precision: str = field(default="auto", metadata={"keyed_as_default": ("float32",)})
    device: str = field(default="auto", metadata={"key": False})  # auto | cpu | cuda | cuda:K
    # a training step captured once as a CUDA graph and replayed (scaling.papers.context_scaling.cuda_graphs),
    # its learning rate read on the device: auto | on | off; auto = on where the trial trains on CUDA. The
    # replayed steps are the eager ones bit for bit: how, not what, so not part of the key
    cuda_graphs: str = field(default="auto", metadata={"key": False})
    curriculum: Curriculum = field(default_factory=Curriculum)  # off unless a start is set
    # the learning rate over the steps: constant (Garg et al.'s, the default), or cosine: a linear warm-up
    # from lr / w to lr over the first w = warmup * steps steps, then a cosine decay to 0 at the last step.
    # Measured on the vectorised MLP (d = 4, T = inf, N = 10): cosine at lr 3e-3 reaches err/zero 0.61 in
    # 6000 steps, constant lr 1e-3 0.71 in 10000 (sweeps/fig1.yaml's repro profile says more).
    schedule: str = "constant"
    warmup: float = field(default=0.05, metadata={"applies": lambda t: t.schedule != "constant"})
    # the context lengths the loss is taken at (seed 001 App. A: "we always trained a single MLP for all
    # context lengths by zero-padding to the largest context length", Fig. 1's "trained and tested on the same
    # set of context lengths: 5, 10, 20, 30, and 40"): one model trained on prompts of each of these lengths,
    # an MLP's vectorised input zero-padded to the largest, which is the cell's N (scaling.cells.Cell), and
    # tested at them unless eval.n says otherwise (App. A's GPT-2, "trained on context lengths from 1 to 100
    # with a step size of 10", tested between them: sweeps/fig4_lengths.yaml). Empty (the default): every
    # prefix 1..N, the loss of eq. 2
    lengths: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("steps", "batch_size", "checkpoint_every", "log_every"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(math.isfinite(self.lr), "lr", f"must be finite, got {self.lr}")
        check_choice(self.precision, "precision", ("auto", "float32", "bfloat16"))
        check_choice(self.cuda_graphs, "cuda_graphs", ("auto", "on", "off"))
        check_choice(self.schedule, "schedule", ("constant", "cosine"))
        check(0 <= self.warmup < 1, "warmup", f"must be a fraction of the steps in [0, 1), got {self.warmup}")
        check(
            all(n >= 1 for n in self.lengths) and list(self.lengths) == sorted(set(self.lengths)),
            "lengths",
            f"context lengths >= 1, increasing, each once (empty: every prefix), got {list(self.lengths)}",
        )
        check(
            not (self.lengths and self.curriculum.points_start),
            "lengths",
            "a model trained at given context lengths takes no points curriculum (points_start: 0)",
        )
        check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device",
            f"must be auto, cpu, cuda or cuda:K, got {self.device!r}",
        )

    def lr_factor(self, step: int) -> float:
        """The learning rate of the update made at ``step`` (0-based), as a fraction of ``lr``."""
        if self.schedule == "constant":
            return 1.0
        warm = int(self.warmup * self.steps)
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, self.steps - warm)))


def graphs_on(setting: str, device: torch.device) -> bool:
    """Whether a trainer on ``device`` captures its steps as CUDA graphs under ``train.cuda_graphs``: auto =
    on CUDA; on = also elsewhere, where the same path runs its steps eagerly (nothing to capture)."""
    return setting == "on" or (setting == "auto" and device.type == "cuda")


def lr_factors(train: TrainConfig, device: torch.device) -> torch.Tensor:
    """The schedule's factor of every step, float64 on ``device`` (DeviceRates' table); one tensor per
    schedule and device, shared by the trainers of a pack."""
    return _factors(train.steps, train.schedule, train.warmup, str(device))


@functools.lru_cache(maxsize=8)
def _factors(steps: int, schedule: str, warmup: float, device: str) -> torch.Tensor:
    train = TrainConfig(steps=steps, schedule=schedule, warmup=warmup)
    return torch.tensor([train.lr_factor(s) for s in range(steps)], dtype=torch.float64, device=device)


def prefix_loss(pred: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Mean squared error over prompts and prefix lengths n = 1..N (column 0 has no context)."""
    return (pred[:, 1:] - ys[:, 1:]).pow(2).mean()


def lengths_loss(pred: torch.Tensor, ys: torch.Tensor, columns: torch.Tensor) -> torch.Tensor:
    """Mean squared error over prompts and the context lengths ``columns`` (``train.lengths`` on the
    device): column n predicts y_n from the n pairs before it, so it is the prompt of length n, its
    vectorised input zero-padded to the cell's N."""
    return (pred[:, columns] - ys[:, columns]).pow(2).mean()


def length_columns(train: TrainConfig, device: torch.device) -> torch.Tensor | None:
    """``train.lengths`` as an index tensor on ``device`` (made once, so that a captured CUDA graph reads
    it), None for the prefix loss."""
    return torch.tensor(train.lengths, dtype=torch.long, device=device) if train.lengths else None


class CellTrainer:
    """The training state of one cell: pool, model, optimiser and step, checkpointable at any step.

    ``graphs`` (default: ``train.cuda_graphs`` on the device, graphs_on) holds the learning rate on the
    device and replays the steps of the steady shape from one captured CUDA graph (``self.graph``); with
    ``capture`` False (the default on a CPU) the same path runs them eagerly: the numbers are those of the
    eager steps. A pack of such trainers replays its stacked step the same way.
    """

    def __init__(
        self,
        cell,
        device: torch.device | str = "cpu",
        graphs: bool | None = None,
        capture: bool | None = None,
    ):
        self.cell, self.device = cell, torch.device(device)
        self.family = make_family(cell.task)
        self.points = cell.N + 1
        self.pool = TaskPool(self.family, cell.T, cell.seed, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(cell.seed, "init"))
            self.model = build_model(cell.model, cell.task.d, self.points).to(self.device)
        # torch.optim.Adam(fused=True)'s kernel and state without torch.optim's ~1.1 s import
        # (scaling.papers.context_scaling.adam)
        self.optimizer = FusedAdam(self.model.parameters(), lr=cell.train.lr)
        self.columns = length_columns(cell.train, self.device)  # None: every prefix
        self.step = 0
        self.graphs = graphs_on(cell.train.cuda_graphs, self.device) if graphs is None else graphs
        self.rates = DeviceRates([cell.train.lr], self.lr_factors(), 0) if self.graphs else None
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.graph = StepGraph(self, capture=self.capture) if self.graphs else None

    def lr_factors(self) -> torch.Tensor:
        """The cell's schedule on its device (lr_factors), for device-held learning rates."""
        return lr_factors(self.cell.train, self.device)

    def set_step(self, step: int) -> None:
        """Continue at ``step`` (a checkpoint, a pack's write-back): the device-held rates follow."""
        self.step = step
        if self.rates is not None:
            self.rates.seek(step)

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.set_step(int(state["step"]))

    def _autocast(self):
        """bf16 autocast for ``precision: bfloat16``; its cast cache off (each weight is cast once per
        step anyway, and a cached cast cannot be captured in a CUDA graph)."""
        if self.cell.train.precision == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def batch_shape(self, step: int) -> tuple[int, int, int | None, int]:
        """(batch size, points, input dims kept or None, the cell's points) of ``step``'s batch under the
        curriculum (TaskPool.batch's arguments)."""
        train = self.cell.train
        dims = train.curriculum.dims(step, self.cell.task.d)
        return (
            train.batch_size,
            train.curriculum.points(step, self.points),
            dims if dims < self.cell.task.d else None,
            self.points,
        )

    def steady(self, step: int) -> bool:
        """Whether ``step``'s batch has the cell's steady shape (all its points: the shape a CUDA graph is
        captured for); a curriculum's shorter prompts run eagerly."""
        return self.batch_shape(step)[1] == self.points

    def train_batch(self, step: int) -> Prompts:
        """The batch of ``step`` under the curriculum (the pool's own batch when it is off)."""
        return self.pool.batch(step, *self.batch_shape(step))

    def step_on(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """One training step on the batch (xs, ys), the step counter left alone; the loss before it, on the
        device (no synchronisation: scaling.papers.context_scaling.cuda_graphs captures this)."""
        self.model.train()
        with self._autocast():
            pred = self.model(xs, ys)
        loss = (
            prefix_loss(pred.float(), ys)
            if self.columns is None
            else lengths_loss(pred.float(), ys, self.columns)
        )
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.rates is None:
            self.optimizer.param_groups[0]["lr"] = self.cell.train.lr * self.cell.train.lr_factor(self.step)
            self.optimizer.step()
        else:  # the rate of the device's step counter (a captured step replays the schedule)
            self.optimizer.step(self.rates.rates()[0])
            self.rates.advance()
        return loss.detach()

    def next_loss(self) -> torch.Tensor:
        """Train the current step on its batch (replayed from the CUDA graph where it has the steady shape);
        its loss on the device, read before the next step."""
        batch = self.train_batch(self.step)
        if self.graph is None:
            loss = self.step_on(batch.xs, batch.ys)
        else:
            loss = self.graph.run(batch.xs, batch.ys, self.steady(self.step))
        self.step += 1
        return loss

    def train_step(self) -> float:
        return float(self.next_loss())

    def train_until(self, stop: int, on_loss: Callable[[int, float], None] | None = None) -> None:
        """Train up to step ``stop`` (exclusive of nothing: afterwards self.step == stop); a loss is read
        off the device only at the steps it is logged."""
        stop = min(stop, self.cell.train.steps)
        while self.step < stop:
            loss = self.next_loss()
            if on_loss and (self.step % self.cell.train.log_every == 0 or self.step == self.cell.train.steps):
                on_loss(self.step, float(loss))

    @property
    def done_training(self) -> bool:
        return self.step >= self.cell.train.steps

    def model_predictor(self) -> Predictor:
        model = self.model

        @torch.no_grad()
        def predict(prompts: Prompts) -> torch.Tensor:
            model.eval()
            return model(prompts.xs, prompts.ys).float()

        return predict

    def evaluate(self) -> pd.DataFrame:
        """Curves of the model and every baseline on the cell's (possibly shifted) evaluation prompts."""
        config = self.cell.eval
        if self.cell.train.lengths and not config.n:  # tested at the lengths it was trained at (App. A)
            config = replace(config, n=self.cell.train.lengths)
        family = make_family(self.cell.task, config.shift)
        baselines, skipped = applicable_baselines(config.baselines, self.cell.task, pool=self.pool)
        prompts = fresh_prompts(family, config.prompts, self.points, self.cell.seed, device=self.device)
        norm = family.y_second_moment()
        curves = evaluate(
            {"model": self.model_predictor(), **baselines},
            prompts,
            norm,
            config,
            self.cell.N,
            self.cell.seed,
            family=family,
        )
        if config.lambda_n:
            curves = pd.concat(
                [curves, lambda_scan(prompts, norm, config, self.cell.N, self.cell.seed, family)],
                ignore_index=True,
            )
        curves.attrs["skipped_baselines"] = skipped
        return curves
