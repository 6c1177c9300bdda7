"""The coverage study of the power-law fits' intervals (scaling.judge.power_law.seed_interval): how often the
report's 90% interval of the exponent holds the true one, simulated at 3, 5 and 8 seeds.

Each draw is a synthetic context-scaling table (tests/synthetic_tables.py: err = 0.05 + n^-0.8 at
n = 5, 10, 20, 40, 80, each seed's errors scaled by exp(0.03 u) and each point by exp(0.05 eps)), fitted as
the report fits it. ``python tests/fit_coverage_study.py [DRAWS]`` prints the coverage of alpha per number
of seeds with its 95% Wilson interval (about 0.1 s a draw on 2 cores); docs/results.md quotes it and
tests/test_fit_coverage.py asserts it (a fast form by default, the full study in the slow suite).
"""

from __future__ import annotations

import math
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from synthetic_tables import saturating_law, synthetic_table  # noqa: E402

from scaling.judge.fit import fit_context_scaling  # noqa: E402

ALPHA = 0.8
LAW = saturating_law(E=0.05, A=1.0, alpha=ALPHA)
SEEDS = (3, 5, 8)


def alpha_coverage(seeds: int, draws: int, rng: np.random.Generator) -> tuple[int, float]:
    """(draws whose 90% interval of alpha holds ALPHA, median interval width)."""
    hits, widths = 0, []
    for _ in range(draws):
        tab = synthetic_table(
            LAW, ns=[5, 10, 20, 40, 80], Ts=[np.inf], seeds=range(seeds), rng=rng, noise=0.05, seed_noise=0.03
        )
        fit = fit_context_scaling(tab, level=0.9).iloc[0]
        hits += bool(fit.alpha_lo <= ALPHA <= fit.alpha_hi)
        widths.append(fit.alpha_hi - fit.alpha_lo)
    return hits, float(np.median(widths))


def wilson(hits: int, draws: int, z: float = 1.96) -> tuple[float, float]:
    """The Wilson score interval of a binomial share (z = 1.96: 95%)."""
    p = hits / draws
    centre = (p + z * z / (2 * draws)) / (1 + z * z / draws)
    half = z * math.sqrt(p * (1 - p) / draws + z * z / (4 * draws * draws)) / (1 + z * z / draws)
    return centre - half, centre + half


if __name__ == "__main__":
    draws = int(sys.argv[1]) if len(sys.argv) > 1 else 1000
    rng = np.random.default_rng(0)
    print("| seeds | draws | coverage of alpha (nominal 90%) | 95% Wilson interval | median width |")
    print("| --- | --- | --- | --- | --- |")
    for seeds in SEEDS:
        hits, width = alpha_coverage(seeds, draws, rng)
        lo, hi = wilson(hits, draws)
        print(f"| {seeds} | {draws} | {hits / draws:.1%} | {lo:.1%}-{hi:.1%} | {width:.2f} |", flush=True)
