"""Train and evaluate one cell (no Ray, no MLflow): seed 001 App. A, Garg et al.'s training recipe.

The loss is the mean over prompts and over prefix lengths n = 1..N of the squared error predicting
y_{n+1} from the first n pairs (App. A, "Problem formulation"), or over the context lengths
``train.lengths`` alone (App. A's single zero-padded MLP for all the figure's lengths, tested at them).
Adam with a constant learning rate (Garg et al.), or with a linear warm-up and a cosine decay to 0
(``TrainConfig.schedule``); the rate is a pure function of the step.
Everything a resumed run needs (model, optimiser, step) is in ``state_dict``; the batch of step s is a
pure function of (seed, s), so a run resumed from a checkpoint ends with the same numbers as one that
never stopped. On CUDA (``train.cuda_graphs``) a step of the cell's steady shape is captured once as a CUDA
graph and replayed (papers.context_scaling.cuda_graphs), its learning rate read on the device
(papers.context_scaling.adam.DeviceRates); the replayed steps are the eager ones bit for bit.
Evaluation (``CellTrainer.evaluate``) is papers.context_scaling.evaluate's.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import replace
from typing import Callable

import pandas as pd
import torch

from papers.context_scaling.adam import DeviceRates, FusedAdam
from papers.context_scaling.baselines import Predictor, applicable_baselines
from papers.context_scaling.configs import TrainConfig
from papers.context_scaling.cuda_graphs import StepGraph, compiled_step
from papers.context_scaling.evaluate import evaluate, lambda_scan
from papers.context_scaling.models import build_model
from papers.context_scaling.stacked_transformers import packs
from papers.context_scaling.tasks import Prompts, TaskPool, derive_seed, fresh_prompts, make_family


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
        # (papers.context_scaling.adam)
        self.optimizer = FusedAdam(self.model.parameters(), lr=cell.train.lr)
        self.columns = length_columns(cell.train, self.device)  # None: every prefix
        self.step = 0
        self.graphs = graphs_on(cell.train.cuda_graphs, self.device) if graphs is None else graphs
        self.rates = DeviceRates([cell.train.lr], self.lr_factors(), 0) if self.graphs else None
        self.capture = self.device.type == "cuda" if capture is None else capture
        self.graph = StepGraph(self, capture=self.capture) if self.graphs else None
        # train.compile: the model's forward (and its backward) as inductor's kernels at the steady shape;
        # compiled on first use only (a pack's members train in the pack's engine, compiled there); auto: on
        # for the project's own transformers on CUDA, as their packs (an MLP's few matmuls stay eager)
        self.compiled = compiled_step(cell.train, self.model, self.device, auto=packs(self.model))

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
        device (no synchronisation: papers.context_scaling.cuda_graphs captures this)."""
        self.model.train()
        model = self.compiled if self.compiled is not None and self.steady(self.step) else self.model
        with self._autocast():
            pred = model(xs, ys)
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
