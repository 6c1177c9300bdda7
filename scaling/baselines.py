"""Closed-form baselines, batched over prompts and prefixes (seed 001 Sec. 4; Garg et al. 2022).

Each baseline is a predictor with the models' interface: ``predict(prompts) -> (B, N+1)``, column n
predicting ys[:, n] from the first n pairs. Least squares and ridge solve every prefix of every prompt at
once from running Gram matrices G_n = sum_{j<n} x_j x_j^T and b_n = sum_{j<n} x_j y_j, in float64:

- ``zero``: predicts 0; its normalised error is 1 by construction.
- ``least_squares``: the minimum-norm solution pinv(X_n) y_n (= pinv(G_n) b_n), as Garg et al.
- ``ridge``: (G_n + lambda I)^-1 b_n with the Bayes lambda = d sigma^2 for beta ~ N(0, I/d), i.e. the
  posterior mean of beta (the Bayes-optimal predictor of the linear task); at sigma = 0 it is the
  minimum-norm least-squares interpolant.
"""
from __future__ import annotations

from typing import Callable, Protocol

import torch

from .tasks import Prompts, TaskConfig


class Predictor(Protocol):
    def __call__(self, prompts: Prompts) -> torch.Tensor: ...


class BaselineNotApplicable(ValueError):
    """The baseline is not defined for this task (e.g. a Bayes ridge for a non-linear task)."""


def prefix_grams(xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """G_n and b_n of every prefix in float64: (B, P, d, d) and (B, P, d); prefix n uses pairs j < n."""
    xs, ys = xs.double(), ys.double()
    outer = xs.unsqueeze(-1) * xs.unsqueeze(-2)                              # (B, P, d, d)
    grams = torch.cumsum(outer, dim=1) - outer                               # exclusive prefix sums
    xy = xs * ys.unsqueeze(-1)                                               # (B, P, d)
    rhs = torch.cumsum(xy, dim=1) - xy
    return grams, rhs


def ridge_weights(xs: torch.Tensor, ys: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """Ridge weights of every prefix, (B, P, d); lam = 0 gives the minimum-norm least squares.

    ``lam`` may be a scalar or a (B,) tensor (a lambda per prompt).
    """
    grams, rhs = prefix_grams(xs, ys)
    d = xs.shape[-1]
    lam = torch.as_tensor(lam, dtype=torch.float64, device=xs.device)
    if lam.ndim == 0 and float(lam) == 0.0:
        return (torch.linalg.pinv(grams, hermitian=True, rtol=1e-10) @ rhs.unsqueeze(-1)).squeeze(-1)
    eye = torch.eye(d, dtype=torch.float64, device=xs.device)
    regularised = grams + lam.reshape(-1, 1, 1, 1) * eye                     # (B, P, d, d)
    return torch.linalg.solve(regularised, rhs)


def ridge_predictions(prompts: Prompts, lam: float | torch.Tensor) -> torch.Tensor:
    weights = ridge_weights(prompts.xs, prompts.ys, lam)                     # (B, P, d)
    return (weights * prompts.xs.double()).sum(-1).to(prompts.ys.dtype)      # (B, P)


def zero(task: TaskConfig) -> Predictor:
    return lambda prompts: torch.zeros_like(prompts.ys)


def least_squares(task: TaskConfig) -> Predictor:
    return lambda prompts: ridge_predictions(prompts, 0.0)


def bayes_ridge(task: TaskConfig) -> Predictor:
    if task.family != "linear":
        raise BaselineNotApplicable(f"the Bayes ridge needs the linear task, not {task.family!r}")
    lam = task.d * task.noise_std ** 2
    return lambda prompts: ridge_predictions(prompts, lam)


BASELINES: dict[str, Callable[[TaskConfig], Predictor]] = {
    "zero": zero,
    "least_squares": least_squares,
    "ridge": bayes_ridge,
}


def build_baselines(names: tuple[str, ...], task: TaskConfig) -> dict[str, Predictor]:
    """The named baselines for ``task``; unknown names fail listing the known ones."""
    unknown = [n for n in names if n not in BASELINES]
    if unknown:
        raise KeyError(f"unknown baseline {unknown[0]!r}; known: {', '.join(BASELINES)}")
    return {name: BASELINES[name](task) for name in names}
