"""How far to trust an answer on few seeds, and how many seeds it needs (the adaptive policy's arithmetic).

The verdicts' and the fits' intervals are Student t over seeds; ``large_sample`` is the factor from one to the
normal half-width that S_need extrapolates. The seed-to-seed spread of a model's drops is
pooled over the groups of a question (``pooled_spread``), with the degrees of freedom that groups sharing
seeds really carry. ``seeds_needed`` extrapolates a half-width (as 1/sqrt(seeds)) to the seeds at which it
reaches a target.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import norm
from scipy.stats import t as student_t


def large_sample(S: int, level: float) -> float:
    """The factor from a Student t half-width of a mean over S seeds (the verdicts' and fits' intervals) to
    the large-sample (normal) one that S_need extrapolates: z / t(S - 1)."""
    if S < 2:
        return math.nan
    q = 0.5 + level / 2
    return float(norm.ppf(q) / student_t.ppf(q, S - 1))


@dataclass(frozen=True)
class Spread:
    """The seed-to-seed spread of a model's drops for one question, pooled over its groups (the values of the
    axis the question holds fixed): sd, and the degrees of freedom of that sd."""

    sd: float
    dof: float

    def half_width(self, S: int, level: float, large_sample: bool = False) -> float:
        """The Student t half-width of a mean over S seeds at ``level``, from the pooled sd (``large_sample``:
        the normal one, which S_need extrapolates)."""
        if not (self.dof > 0 and math.isfinite(self.sd)) or S < 1:
            return math.inf
        q = 0.5 + level / 2
        return float((norm.ppf(q) if large_sample else student_t.ppf(q, self.dof)) * self.sd / math.sqrt(S))


def pooled_spread(drops: dict[object, pd.Series]) -> Spread:
    """The pooled sd of per-seed drops (one Series per group, indexed by seed) and its effective degrees of
    freedom. Groups share seeds, and a seed's drops can move together across groups (the plain MLP's do
    across T on adaptive_mlp: correlation 0.85), which makes their sample variances correlated (rho^2 for
    normal data): k groups of S seeds then carry k (S - 1) / (1 + (k - 1) rho^2) degrees of freedom, not
    k (S - 1) (Satterthwaite's match of the variance of the pooled variance). rho^2 is the mean squared
    correlation of the groups' drops over common seeds (pairs with 3 or more; 1 when there is none), which
    over few seeds is biased up (1 / (S - 1) for independent groups): the estimate errs on the narrow side
    of the degrees of freedom, not the wide one. One group gives its own sd on S - 1."""
    groups = [d for d in drops.values() if len(d) >= 2]
    dof = sum(len(d) - 1 for d in groups)
    if not dof:
        return Spread(math.nan, 0.0)
    squares = sum(float(((d - d.mean()) ** 2).sum()) for d in groups)
    r2 = []
    for a, b in itertools.combinations(groups, 2):
        common = a.index.intersection(b.index)
        if len(common) >= 3:
            x, y = a[common].to_numpy(), b[common].to_numpy()
            r = np.corrcoef(x, y)[0, 1] if x.std() > 0 and y.std() > 0 else 1.0
            r2.append(float(r) ** 2)
    rho2 = float(np.mean(r2)) if r2 else 1.0
    return Spread(math.sqrt(squares / dof), dof / (1 + (len(groups) - 1) * rho2))


def seeds_needed(S: int, h: float, g: float, min_seeds: int) -> float:
    """Seeds at which a half-width h at S seeds shrinks (as 1/sqrt(seeds)) to g."""
    if not (math.isfinite(h) and h > 0):
        return float(max(min_seeds, S + 1))
    if g <= 1e-9:
        return math.inf
    return max(float(min_seeds), S * (h / g) ** 2)
