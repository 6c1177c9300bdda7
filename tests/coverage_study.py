"""The coverage study behind the verdicts' intervals over seeds (scaling/judge/verdicts.py): how often a
nominal 90% interval holds the truth, simulated, for the rule before (the percentile bootstrap of the mean
over seeds), Student t of the mean, the rule now (Student t of the mean of the logs: an interval of the
geometric mean) and a hierarchical bootstrap (seeds, then prompts within each).
tests/test_interval_coverage.py checks the rule now on these draws; ``python tests/coverage_study.py``
prints the whole table (docs/analysis.md shows it; about a minute on 2 cores).

Per-seed values (one per seed, a draw of ``seeds`` of them is one simulated verdict):
- normal: ratios end / start normal around 0.7, sd 0.07;
- log-normal: ratios of two errors each log-normal (sd 0.3 or 0.6 on the log scale), skewed, as a seed's
  end over its start is when the seed-to-seed noise of errors is multiplicative;
- seeds and prompts: a seed's error is the mean over 128 prompts of its own squared errors (chi-square,
  skewed) around a seed-level error log-normal with sd 0.3; the truth is the mean of the seed-level errors.
The truth is the mean for the mean's methods and exp(E log) for the logs'.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from scaling.judge.verdicts import log_t_interval, t_interval  # noqa: E402

LEVEL = 0.9


def covered(lo: np.ndarray, hi: np.ndarray, truth: float) -> float:
    return float(np.mean((lo <= truth) & (truth <= hi)))


def normal_ratios(rng: np.random.Generator, draws: int, seeds: int) -> tuple[np.ndarray, float, float]:
    """(draws, seeds) ratios normal around 0.7 (sd 0.07), their mean and exp(E log)."""
    geometric = float(np.exp(np.log(0.7 + 0.07 * np.random.default_rng(99).normal(size=2_000_000)).mean()))
    return 0.7 + 0.07 * rng.normal(size=(draws, seeds)), 0.7, geometric


def lognormal_ratios(rng: np.random.Generator, draws: int, seeds: int, sd: float = 0.6):
    """(draws, seeds) ratios 0.7 e^(sd (z1 - z2)): mean 0.7 e^(sd^2), exp(E log) 0.7."""
    z = rng.normal(size=(2, draws, seeds))
    return 0.7 * np.exp(sd * (z[0] - z[1])), 0.7 * math.exp(sd**2), 0.7


def percentile_bootstrap(values: np.ndarray, rng: np.random.Generator, resamples: int = 1000):
    """The rule before: percentile interval of the mean over seeds drawn with replacement, per row."""
    draws, seeds = values.shape
    lo, hi = np.empty(draws), np.empty(draws)
    for start in range(0, draws, 500):
        part = values[start : start + 500]
        picks = rng.integers(seeds, size=(len(part), resamples, seeds))
        means = np.take_along_axis(part[:, None, :], picks, axis=2).mean(axis=2)
        lo[start : start + 500], hi[start : start + 500] = np.quantile(
            means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2], axis=1
        )
    return lo, hi


def seeds_and_prompts(rng: np.random.Generator, draws: int, seeds: int, prompts: int = 128, resamples=300):
    """(coverage of the percentile bootstrap over seeds, of Student t over seeds, of the hierarchical
    bootstrap: seeds with replacement, then each drawn seed's prompts with replacement)."""
    level_errors = np.exp(0.3 * rng.normal(size=(draws, seeds)))
    errors = level_errors[..., None] * rng.chisquare(1, size=(draws, seeds, prompts))
    per_seed, truth = errors.mean(axis=-1), math.exp(0.3**2 / 2)
    hits = 0
    for d in range(draws):
        picked = rng.integers(seeds, size=(resamples, seeds))
        within = rng.integers(prompts, size=(resamples, seeds, prompts))
        means = errors[d][picked[..., None], within].mean(axis=(1, 2))
        lo, hi = np.quantile(means, [(1 - LEVEL) / 2, (1 + LEVEL) / 2])
        hits += lo <= truth <= hi
    return (
        covered(*percentile_bootstrap(per_seed, rng), truth),
        covered(*t_interval(per_seed, LEVEL, min_seeds=2), truth),
        hits / draws,
    )


def table(draws: int = 20_000) -> list[str]:
    """The markdown table: coverage at 2, 3, 5 and 10 seeds of each method on each kind of values."""
    rng = np.random.default_rng(0)
    out = [
        "| per-seed values | seeds | percentile bootstrap (before) | Student t, mean | Student t, logs (now) "
        "| bootstrap seeds then prompts |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    kinds = {
        "normal ratios": normal_ratios,
        "log-normal errors, sd 0.3": lambda r, d, s: lognormal_ratios(r, d, s, 0.3),
        "log-normal errors, sd 0.6": lambda r, d, s: lognormal_ratios(r, d, s, 0.6),
    }
    for name, draw in kinds.items():
        for seeds in (2, 3, 5, 10):
            values, mean, geometric = draw(rng, draws, seeds)
            _, lo, hi = log_t_interval(values, LEVEL, min_seeds=2)
            cells = [
                covered(*percentile_bootstrap(values[: draws // 5], rng), mean),
                covered(*t_interval(values, LEVEL, min_seeds=2), mean),
                covered(lo, hi, geometric),
            ]
            out.append(f"| {name} | {seeds} | " + " | ".join(f"{c:.0%}" for c in cells) + " | |")
    for seeds in (2, 3, 5, 10):
        boot, t, hierarchical = seeds_and_prompts(rng, 1000, seeds)
        out.append(f"| seeds and prompts | {seeds} | {boot:.0%} | {t:.0%} | | {hierarchical:.0%} |")
    return out


if __name__ == "__main__":
    print("\n".join(table()))
