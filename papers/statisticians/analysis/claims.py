"""The claims of seed 003 (a report on Bai et al., "Transformers as Statisticians"), each checked against its
construction sweep's analysis (papers/statisticians/analysis/plugin.py).

- Sec. 3 (sweeps/stat_gd.yaml): the transformer built from eqs. 3.1-3.4 *is* in-context gradient descent:
  "reproduced" when no cell's prediction differs from explicit gradient descent by more than EXACT.
- Sec. 4 (sweeps/stat_selection.yaml), eq. 4.4: the selected prediction is a convex combination of the
  algorithms within gamma of the best validation loss, so its own validation loss is within gamma of the
  best: "reproduced" when it holds on every prompt and scored prefix of every cell (up to float64
  rounding), "not reproduced" on any failure.
- Sec. 4, the selection picks well per noise level, judged against what sees the same data (each prompt's
  first part fits, its last ``val_fraction`` validates; the algorithms alone on all of a prompt see twice
  its training data, so no selector could match them): its error against its best own algorithm on the
  same training part, and against post-ICL validation with exact ridge at its lambdas on the same split.
  Per noise level, at the largest context length, seed by seed on the same prompts: the geometric mean of
  the per-seed ratios with its Student t interval over seeds on the log scale
  (scaling.judge.verdicts.ratio_side, the verdicts' rule): "reproduced" when the interval lies within
  1/COMPARABLE-COMPARABLE, "not reproduced" when wholly outside, "inconclusive" when it straddles a bound
  or there are fewer seeds than the rule asks.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from analysis.claims import COMPARABLE, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Claim, Outcome
from papers.statisticians.analysis.plugin import EXACT, SAME_DATA, split_rows
from scaling.judge.verdicts import INCONCLUSIVE, TOO_FEW, ratio_side

LEVELS = ("noise_std=0.1", "noise_std=0.5")  # stat_selection.yaml's noise levels (seed 001 Fig. 3's)


def exact_gd(result) -> Outcome:
    rows = result.verdicts[result.verdicts["subject"] == "exactness"]
    if rows.empty:
        return Outcome(NOT_RUN, "no GD-transformer cells (no 'exactness' verdict)")
    row = rows.iloc[0]
    return Outcome(REPRODUCED if float(row["value"]) <= EXACT else NOT_REPRODUCED, str(row["verdict"]))


def eq44(result) -> Outcome:
    rows = result.verdicts[result.verdicts["subject"] == "eq. 4.4"]
    if rows.empty:
        return Outcome(NOT_RUN, "no selection cells that checked eq. 4.4 (cells run before they logged it)")
    row = rows.iloc[0]
    return Outcome(REPRODUCED if float(row["value"]) == 0 else NOT_REPRODUCED, str(row["verdict"]))


def level_errors(result, level: str) -> tuple[pd.DataFrame, float] | str:
    """(seed x predictor errors of one noise level at the largest n scored, that n), or why not."""
    rows = split_rows(result.table)
    rows = rows[rows["level"] == level]
    if rows.empty or "selection" not in set(rows["base"]):
        return f"no selection rows at {level.replace('=', ' = ')}"
    n = float(rows["n"].max())
    at = rows[rows["n"] == n]
    return at.pivot_table(index="seed", columns="base", values="err", aggfunc="mean"), n


def best_own(errors: pd.DataFrame) -> str | None:
    """The selection's own algorithm (same training part) of least geometric-mean error over the seeds."""
    own = [c for c in errors.columns if c.startswith(SAME_DATA)]
    return min(own, key=lambda c: float(np.log(errors[c]).mean())) if own else None


def ratio_outcome(errors: pd.DataFrame, name: str, where: str, rule) -> Outcome:
    """The selection against ``name`` (columns of ``errors``, a row per seed): the per-seed ratios'
    geometric mean, its interval and where it lies against 1/COMPARABLE-COMPARABLE."""
    pair = errors[["selection", name]].dropna()
    r = ratio_side((pair["selection"] / pair[name]).to_numpy(), 1 / COMPARABLE, COMPARABLE, rule)
    means = np.exp(np.log(pair).mean())
    said = (
        f"{where}: selection {means['selection']:.3g}, {name} {means[name]:.3g} (geometric means over "
        f"seeds); ratio {r.ratio:.2f}"
    )
    if r.side == TOO_FEW:
        return Outcome(
            INCONCLUSIVE, f"{said} on {r.n_seeds} seeds: too few seeds (a claim needs {rule.min_seeds})"
        )
    band = f"comparable: within {1 / COMPARABLE:.2f}-{COMPARABLE:g}x"
    said += f" [{r.lo:.2f}, {r.hi:.2f}] over {r.n_seeds} seeds; {band}"
    status = {"inside": REPRODUCED, "outside": NOT_REPRODUCED}.get(r.side, INCONCLUSIVE)
    return Outcome(status, said + (": the interval straddles a bound" if r.side == "straddles" else ""))


def same_data(other: str, what: str, level: str):
    """A check that the selection is comparable to ``other`` (``"best own"``: its best own algorithm) at
    ``level``: per-seed ratios at the largest n, their interval within 1/COMPARABLE-COMPARABLE."""

    def check(result) -> Outcome:
        found = level_errors(result, level)
        if isinstance(found, str):
            return Outcome(NOT_RUN, found)
        errors, n = found
        name = best_own(errors) if other == "best own" else other
        if name is None or name not in errors:
            return Outcome(NOT_RUN, f"no {what} rows (cells run before they logged them: rerun)")
        where = f"at n = {n:g}, {level.replace('=', ' = ')}"
        return ratio_outcome(errors, name, where, result.request.rule())

    return check


def _level_text(level: str) -> str:
    return level.replace("noise_std=", "sigma = ")


CLAIMS: list[Claim] = [
    Claim(
        "stat-gd",
        "Sec. 3",
        "a transformer of L + 1 ReLU-attention layers with the constructed weights does L steps of gradient "
        "descent on the prompt (its predictions equal explicit GD's)",
        exact_gd,
    ),
    Claim(
        "stat-selection",
        "eq. 4.4",
        "the selection layers output a convex combination of the algorithms within gamma of the best "
        "validation loss, so the selected prediction's validation loss is within gamma of the best",
        eq44,
    ),
    *[
        Claim(
            "stat-selection",
            "Sec. 4",
            f"the selection transformer picks as well as its best own algorithm on the same training part "
            f"({_level_text(level)})",
            same_data("best own", "own-algorithm", level),
        )
        for level in LEVELS
    ],
    *[
        Claim(
            "stat-selection",
            "Sec. 4",
            f"the selection transformer is comparable to post-ICL validation with exact ridge on the same "
            f"split ({_level_text(level)})",
            same_data("ridge_selection", "exact-ridge post-ICL validation (ridge_selection)", level),
        )
        for level in LEVELS
    ],
]

HOW = (
    f"The GD claim reads the largest |transformer - explicit GD| over the sweep's cells (equal: at most "
    f"{EXACT:g}). Eq. 4.4 is checked on every prompt and scored prefix of every selection cell: the "
    "combination's weights (read from the transformer's u slots) are >= 0, sum to 1 and are > 0 only for "
    "algorithms within gamma of the best validation loss, and the selected prediction's validation loss "
    "is within gamma of the best, up to float64 rounding. The selection claims compare it with what sees "
    "its data (each prompt's first part fits, the rest validates: its own algorithms, exact-ridge post-ICL "
    "validation at its lambdas), never with predictors fitted on all of a prompt (twice its training "
    "data; the sweep's own analysis shows those, labelled), per noise level at the largest context length, "
    "seed by seed on the same prompts: the geometric mean of the per-seed ratios with its 90% Student t "
    f"interval over seeds on the log scale. 'Comparable' means the interval lies within a factor of "
    f"{COMPARABLE:g} either way; an interval that straddles the bound, or fewer than 3 seeds, is "
    "'inconclusive'."
)
