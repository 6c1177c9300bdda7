"""Train and evaluate one cell (no Ray, no MLflow): seed 001 App. A, Garg et al.'s training recipe.

The loss is the mean over prompts and over prefix lengths n = 1..N of the squared error predicting
y_{n+1} from the first n pairs (App. A, "Problem formulation"). Adam with a constant learning rate.
Everything a resumed run needs (model, optimiser, step) is in ``state_dict``; the batch of step s is a
pure function of (seed, s), so a run resumed from a checkpoint ends with the same numbers as one that
never stopped.

Evaluation scores the model and every baseline on the same fresh prompts at every context length n of
the evaluation grid (n <= N), normalised by the test distribution's E[y^2] (under ``eval.shift`` too, so
the zero predictor scores 1), with a bootstrap interval over prompts. The evaluation prompts depend only on
(task, seed, N, eval.prompts, eval.shift). Rows split by a per-prompt meta value (e.g. the noise level of
linear_mixed_noise) are named ``f"{predictor}|{name}={value:g}"`` and normalised by E[y^2] given that value.
"""
from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd
import torch

from .adam import FusedAdam
from .baselines import DEFAULT_LAMBDAS, Predictor, applicable_baselines, parse_baseline, ridge_errors
from ..config import ConfigError, check, check_choice
from .models import build_model
from .tasks import Prompts, ShiftConfig, TaskFamily, TaskPool, derive_seed, fresh_prompts, generator, make_family


@dataclass(frozen=True)
class Curriculum:
    """Garg et al.'s curriculum: the input dimension and the prompt length grow in steps during training.

    At step s the batch has min(d, dims_start + dims_inc * (s // dims_every)) live input coordinates (the
    others are zeroed before labelling, as Garg et al. do) and min(N+1, points_start + points_inc *
    (s // points_every)) points (pairs plus query). A start of 0 turns that curriculum off (the default).
    Garg et al.: dims 5 -> 20, +1 every 2000 steps; points 11 -> 41, +2 every 2000 (linear tasks) and
    26 -> 101, +5 every 2000 (ReLU-network and tree tasks). Evaluation always uses the full d and N.
    """

    dims_start: int = 0
    dims_inc: int = 1
    dims_every: int = 2000
    points_start: int = 0
    points_inc: int = 2
    points_every: int = 2000

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
    log_every: int = field(default=10, metadata={"key": False})   # steps between train/loss points
    precision: str = "float32"    # float32 | bfloat16 (autocast)
    device: str = field(default="auto", metadata={"key": False})  # auto | cpu | cuda | cuda:K
    curriculum: Curriculum = field(default_factory=Curriculum)    # off unless a start is set

    def __post_init__(self):
        for name in ("steps", "batch_size", "checkpoint_every", "log_every"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check_choice(self.precision, "precision", ("float32", "bfloat16"))
        check(self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"), "device",
              f"must be auto, cpu, cuda or cuda:K, got {self.device!r}")


@dataclass(frozen=True)
class EvalConfig:
    prompts: int = 1280                       # fresh test prompts (Garg et al.: 1280)
    n: tuple[int, ...] = ()                   # context lengths to score; empty = every n in 1..N
    baselines: tuple[str, ...] = ("zero", "least_squares", "ridge")
    bootstrap: int = 1000                     # resamples of prompts for the interval
    ci: float = 0.9                           # interval coverage
    batch_size: int = field(default=256, metadata={"key": False})  # prompts per forward pass
    shift: ShiftConfig = field(default_factory=ShiftConfig)     # test-time distribution shift; none by default
    # per-prompt meta names to split errors by (rows named f"{predictor}|{name}={value:g}"); empty means
    # the family's default (linear_mixed_noise: noise_std; others: none)
    split_by: tuple[str, ...] = ()
    # context lengths at which to scan ridge regression's error against lambda on the evaluation prompts
    # (seed 001 Figs. 2-3, right panels: rows ``ridge_lambda`` with a ``lam`` column); empty: no scan
    lambda_n: tuple[int, ...] = ()
    lambdas: tuple[float, ...] = DEFAULT_LAMBDAS              # the scan's grid (1e-4 .. 1e3, 4 per decade)

    def __post_init__(self):
        check(self.prompts >= 2, "prompts", f"must be >= 2, got {self.prompts}")
        check(all(n >= 1 for n in self.n), "n", f"context lengths must be >= 1, got {list(self.n)}")
        check(all(n >= 1 for n in self.lambda_n), "lambda_n", f"context lengths must be >= 1, got {list(self.lambda_n)}")
        check(len(self.lambdas) >= 1 and all(lam > 0 for lam in self.lambdas), "lambdas",
              f"must be one or more values > 0, got {list(self.lambdas)}")
        check(0 < self.ci < 1, "ci", f"must be in (0, 1), got {self.ci}")
        check(self.bootstrap >= 1, "bootstrap", f"must be >= 1, got {self.bootstrap}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        for i, name in enumerate(self.baselines):
            try:
                parse_baseline(name)
            except (KeyError, ValueError) as err:
                raise ConfigError(f"baselines[{i}]", str(err).strip("'\"")) from None


def resolve_device(name: str) -> torch.device:
    """'auto' -> cuda when one is visible, else cpu; resolved once per run."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def prefix_loss(pred: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Mean squared error over prompts and prefix lengths n = 1..N (column 0 has no context)."""
    return (pred[:, 1:] - ys[:, 1:]).pow(2).mean()


class CellTrainer:
    """The training state of one cell: pool, model, optimiser and step, checkpointable at any step."""

    def __init__(self, cell, device: torch.device | str = "cpu"):
        self.cell, self.device = cell, torch.device(device)
        self.family = make_family(cell.task)
        self.points = cell.N + 1
        self.pool = TaskPool(self.family, cell.T, cell.seed, self.device)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(derive_seed(cell.seed, "init"))
            self.model = build_model(cell.model, cell.task.d, self.points).to(self.device)
        # torch.optim.Adam(fused=True)'s kernel and state without torch.optim's ~1.1 s import (scaling.science.adam)
        self.optimizer = FusedAdam(self.model.parameters(), lr=cell.train.lr)
        self.step = 0

    def state_dict(self) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(), "step": self.step}

    def load_state_dict(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.step = int(state["step"])

    def _autocast(self):
        if self.cell.train.precision == "bfloat16":
            return torch.autocast(self.device.type, dtype=torch.bfloat16)
        return contextlib.nullcontext()

    def batch_shape(self, step: int) -> tuple[int, int, int | None, int]:
        """(batch size, points, input dims kept or None, the cell's points) of ``step``'s batch under the
        curriculum (TaskPool.batch's arguments)."""
        train = self.cell.train
        dims = train.curriculum.dims(step, self.cell.task.d)
        return (train.batch_size, train.curriculum.points(step, self.points),
                dims if dims < self.cell.task.d else None, self.points)

    def train_batch(self, step: int) -> Prompts:
        """The batch of ``step`` under the curriculum (the pool's own batch when it is off)."""
        return self.pool.batch(step, *self.batch_shape(step))

    def train_step(self) -> float:
        batch = self.train_batch(self.step)
        self.model.train()
        with self._autocast():
            pred = self.model(batch.xs, batch.ys)
        loss = prefix_loss(pred.float(), batch.ys)
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.step += 1
        return float(loss.detach())

    def train_until(self, stop: int, on_loss: Callable[[int, float], None] | None = None) -> None:
        """Train up to step ``stop`` (exclusive of nothing: afterwards self.step == stop)."""
        stop = min(stop, self.cell.train.steps)
        while self.step < stop:
            loss = self.train_step()
            if on_loss and (self.step % self.cell.train.log_every == 0 or self.step == self.cell.train.steps):
                on_loss(self.step, loss)

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
        family = make_family(self.cell.task, config.shift)
        baselines, skipped = applicable_baselines(config.baselines, self.cell.task, pool=self.pool)
        prompts = fresh_prompts(family, config.prompts, self.points, self.cell.seed, device=self.device)
        norm = family.y_second_moment()
        curves = evaluate({"model": self.model_predictor(), **baselines}, prompts, norm, config, self.cell.N,
                          self.cell.seed, family=family)
        if config.lambda_n:
            curves = pd.concat([curves, lambda_scan(prompts, norm, config, self.cell.N, self.cell.seed, family)],
                               ignore_index=True)
        curves.attrs["skipped_baselines"] = skipped
        return curves


def squared_errors(predictor: Predictor, prompts: Prompts, batch_size: int) -> torch.Tensor:
    """Squared error of ``predictor`` at every position: (B, N+1), computed in chunks of prompts."""
    chunks = []
    for start in range(0, len(prompts), batch_size):
        part = prompts.slice(start, start + batch_size)
        chunks.append((predictor(part).double() - part.ys.double()).pow(2).cpu())
    return torch.cat(chunks)


def context_grid(config: EvalConfig, N: int) -> list[int]:
    """The context lengths to score: the configured grid up to N, or every n in 1..N."""
    grid = sorted({n for n in config.n if n <= N}) if config.n else list(range(1, N + 1))
    return grid or [N]


def bootstrap_interval(errors: torch.Tensor, resamples: int, ci: float, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval of the mean over prompts, per column: errors (P, K) -> (K,), (K,)."""
    gen = generator(seed, "bootstrap")
    idx = torch.randint(errors.shape[0], (resamples, errors.shape[0]), generator=gen)
    means = errors[idx].mean(dim=1)                                           # (R, K)
    tail = (1 - ci) / 2
    q = torch.tensor([tail, 1 - tail], dtype=means.dtype)
    lo, hi = torch.quantile(means, q, dim=0)
    return lo, hi


def split_names(config: EvalConfig, family: TaskFamily | None) -> tuple[str, ...]:
    """The meta names to split rows by: ``config.split_by``, else the family's default."""
    if config.split_by or family is None:
        return config.split_by
    return family.default_split


def error_rows(name: str, errors: torch.Tensor, grid: list[int], config: EvalConfig, seed: int) -> list[dict]:
    """Rows of one predictor (or one subset): errors (P, K) normalised."""
    lo, hi = bootstrap_interval(errors, config.bootstrap, config.ci, seed)
    mean = errors.mean(dim=0)
    return [{"predictor": name, "n": n, "err": float(mean[k]), "err_lo": float(lo[k]), "err_hi": float(hi[k]),
             "prompts": errors.shape[0]} for k, n in enumerate(grid)]


def subsets(prompts: Prompts, splits: tuple[str, ...], norm: float,
            family: TaskFamily | None) -> list[tuple[str, torch.Tensor, float]]:
    """(name suffix, prompt mask (P,), normaliser) of every row group: all prompts ('', norm), then for
    every meta name in ``splits`` and value it takes ('|name=value', its prompts, E[y^2] given the value;
    ``norm`` without a family)."""
    out = [("", torch.ones(len(prompts), dtype=torch.bool), norm)]
    for meta in splits:
        values = prompts.meta[meta].cpu()
        for value in values.unique().tolist():
            group_norm = family.group_second_moment(meta, value) if family is not None else norm
            out.append((f"|{meta}={value:g}", values == value, group_norm))
    return out


def lambda_scan(prompts: Prompts, norm: float, config: EvalConfig, N: int, seed: int,
                family: TaskFamily | None = None) -> pd.DataFrame:
    """Ridge regression's normalised error against lambda at each context length of ``config.lambda_n``
    (up to N) on the evaluation prompts (seed 001 Figs. 2-3, right panels: the effect of regularisation
    at a fixed number of examples). Rows as ``evaluate``'s, predictor ``ridge_lambda`` (and its split
    rows), with the lambda in ``lam``; the interval is the bootstrap over prompts at each lambda."""
    grid = sorted({n for n in config.lambda_n if n <= N}) or [N]
    lambdas = list(config.lambdas)
    squared = ridge_errors(prompts, tuple(lambdas), positions=grid).cpu()     # (K, P, G)
    rows = []
    for g, n in enumerate(grid):
        for suffix, chosen, subset_norm in subsets(prompts, split_names(config, family), norm, family):
            errors = squared[:, chosen, g].T / subset_norm                     # (P', K)
            rows += [{**row, "n": n, "lam": row["n"]}
                     for row in error_rows("ridge_lambda" + suffix, errors, lambdas, config, seed)]
    return pd.DataFrame(rows)


def evaluate(predictors: dict[str, Predictor], prompts: Prompts, norm: float, config: EvalConfig, N: int,
             seed: int, family: TaskFamily | None = None) -> pd.DataFrame:
    """One row per (predictor, n): mean normalised error, bootstrap interval, number of prompts.

    For every meta name in ``split_names(config, family)`` and every value it takes, extra rows
    ``f"{predictor}|{name}={value:g}"`` score the prompts with that value, normalised by
    ``family.group_second_moment(name, value)`` (by ``norm`` without a family).
    """
    grid = context_grid(config, N)
    splits = split_names(config, family)
    missing = [m for m in splits if m not in prompts.meta]
    if missing:
        raise KeyError(f"split_by {missing[0]!r} is not a prompt meta; known: {', '.join(prompts.meta)}")
    rows = []
    for name, predictor in predictors.items():
        squared = squared_errors(predictor, prompts, config.batch_size)[:, grid]        # (P, K)
        for suffix, chosen, subset_norm in subsets(prompts, splits, norm, family):
            rows += error_rows(name + suffix, squared[chosen] / subset_norm, grid, config, seed)
    frame = pd.DataFrame(rows)
    if frame["err"].isna().any():
        bad = frame.loc[frame["err"].isna(), "predictor"].unique().tolist()
        raise FloatingPointError(f"NaN errors from {bad}: the model or a baseline diverged")
    return frame
