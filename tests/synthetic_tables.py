"""Synthetic tidy tables of the project's shape (one row per cell, predictor and n) for the
analysis tests: errors drawn from a known law with multiplicative noise, per seed."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

import numpy as np
import pandas as pd


def saturating_law(E: float, A: float = 0.0, alpha: float = 0.0, B: float = 0.0, beta: float = 0.0):
    """err(n, T) = E + A n^-alpha + B T^-beta (T = inf gives no task term)."""

    def law(n: float, T: float) -> float:
        task = 0.0 if math.isinf(T) else B * T**-beta
        return E + A * n**-alpha + task

    return law


def synthetic_table(
    law: Callable[[float, float], float],
    *,
    ns: Iterable[int],
    Ts: Iterable[float],
    seeds: Iterable[int],
    rng: np.random.Generator,
    noise: float = 0.05,
    seed_noise: float = 0.0,
    model: str = "m",
    predictor: str = "model",
    sweep: str = "s",
) -> pd.DataFrame:
    """One cell per (T, N = n, seed), evaluated at n = N (the diagonal), with
    err = law(n, T) * exp(seed_noise * u_seed + noise * eps), u and eps standard normal."""
    rows = []
    for seed in seeds:
        u = rng.normal()
        for T in Ts:
            for n in ns:
                err = law(n, T) * math.exp(seed_noise * u + noise * rng.normal())
                key = f"{model}-T{T}-N{n}-s{seed}"
                rows.append(
                    dict(sweep=sweep, cell_key=key, run_id=f"run-{key}", model=model, T=float(T),
                         N=int(n), seed=int(seed), predictor=predictor, n=int(n), err=err,
                         err_lo=0.9 * err, err_hi=1.1 * err, prompts=256)
                )
    return pd.DataFrame(rows)
