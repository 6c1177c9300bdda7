"""Evaluation of one cell's predictors (no Ray, no MLflow): seed 001 App. A.

Evaluation scores the model and every baseline on the same fresh prompts at every context length n of
the evaluation grid (n <= N), normalised by the test distribution's E[y^2] (under ``eval.shift`` too, so
the zero predictor scores 1), with a bootstrap interval over prompts. The evaluation prompts depend only on
(task, seed, N, eval.prompts, eval.shift). Rows split by a per-prompt meta value (e.g. the noise level of
linear_mixed_noise) are named ``f"{predictor}|{name}={value:g}"`` and normalised by E[y^2] given that value.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
import torch

from papers.context_scaling.baselines import Predictor, ridge_errors
from papers.context_scaling.configs import EvalConfig
from papers.context_scaling.tasks import Prompts, TaskFamily, generator


def squared_errors(
    predictor: Predictor, prompts: Prompts, batch_size: int, positions: list[int] | None = None
) -> torch.Tensor:
    """Squared error of ``predictor`` at every position: (B, N+1), computed in chunks of prompts. A predictor
    that can compute only some columns (``by_position``, the per-prefix library fits) is given
    ``positions`` and the other columns may be NaN."""
    by_position = getattr(predictor, "by_position", False)
    chunks = []
    for start in range(0, len(prompts), batch_size):
        part = prompts.slice(start, start + batch_size)
        pred = predictor(part, positions=positions) if by_position else predictor(part)
        chunks.append((pred.double() - part.ys.double()).pow(2).cpu())
    return torch.cat(chunks)


def context_grid(config: EvalConfig, N: int) -> list[int]:
    """The context lengths to score: the configured grid up to N, or every n in 1..N."""
    grid = sorted({n for n in config.n if n <= N}) if config.n else list(range(1, N + 1))
    return grid or [N]


def bootstrap_interval(
    errors: torch.Tensor, resamples: int, ci: float, seed: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """Percentile interval of the mean over prompts, per column: errors (P, K) -> (K,), (K,)."""
    gen = generator(seed, "bootstrap")
    idx = torch.randint(errors.shape[0], (resamples, errors.shape[0]), generator=gen)
    means = errors[idx].mean(dim=1)  # (R, K)
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
    return [
        {
            "predictor": name,
            "n": n,
            "err": float(mean[k]),
            "err_lo": float(lo[k]),
            "err_hi": float(hi[k]),
            "prompts": errors.shape[0],
        }
        for k, n in enumerate(grid)
    ]


def subsets(
    prompts: Prompts, splits: tuple[str, ...], norm: float, family: TaskFamily | None
) -> list[tuple[str, torch.Tensor, float]]:
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


def lambda_scan(
    prompts: Prompts, norm: float, config: EvalConfig, N: int, seed: int, family: TaskFamily | None = None
) -> pd.DataFrame:
    """Ridge regression's normalised error against lambda at each context length of ``config.lambda_n``
    (up to N) on the evaluation prompts (seed 001 Figs. 2-3, right panels: the effect of regularisation
    at a fixed number of examples). Rows as ``evaluate``'s, predictor ``ridge_lambda`` (and its split
    rows), with the lambda in ``lam``; the interval is the bootstrap over prompts at each lambda."""
    grid = sorted({n for n in config.lambda_n if n <= N}) or [N]
    lambdas = list(config.lambdas)
    squared = ridge_errors(prompts, tuple(lambdas), positions=grid).cpu()  # (K, P, G)
    rows = []
    for g, n in enumerate(grid):
        for suffix, chosen, subset_norm in subsets(prompts, split_names(config, family), norm, family):
            errors = squared[:, chosen, g].T / subset_norm  # (P', K)
            rows += [
                {**row, "n": n, "lam": row["n"]}
                for row in error_rows("ridge_lambda" + suffix, errors, lambdas, config, seed)
            ]
    return pd.DataFrame(rows)


def evaluate(
    predictors: dict[str, Predictor],
    prompts: Prompts,
    norm: float,
    config: EvalConfig,
    N: int,
    seed: int,
    family: TaskFamily | None = None,
    prompt_errors: dict[str, np.ndarray] | None = None,
) -> pd.DataFrame:
    """One row per (predictor, n): mean normalised error, bootstrap interval, number of prompts.

    ``prompt_errors``, when given, is filled with each predictor's normalised squared error per prompt
    averaged over the context lengths scored (P,): its mean is the mean of the predictor's ``err`` over n
    (the temperature scan logs it, so that its analysis can resample prompts).

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
        squared = squared_errors(predictor, prompts, config.batch_size, grid)[:, grid]  # (P, K)
        if prompt_errors is not None:
            prompt_errors[name] = (squared / norm).mean(dim=1).numpy()
        for suffix, chosen, subset_norm in subsets(prompts, splits, norm, family):
            rows += error_rows(name + suffix, squared[chosen] / subset_norm, grid, config, seed)
    frame = pd.DataFrame(rows)
    if frame["err"].isna().any():
        bad = frame.loc[frame["err"].isna(), "predictor"].unique().tolist()
        raise FloatingPointError(f"NaN errors from {bad}: the model or a baseline diverged")
    return frame
