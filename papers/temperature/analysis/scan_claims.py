"""Seed 004's claims about its scans that are not a tau's gain alone (papers/temperature/analysis/claims.py
lists them), read from the scans' verdicts and units (papers/temperature/analysis/scans.py, fig6.py):

- Fig. 6's precondition (App. K.1): the covariance shift degrades GPT-2 and makes its error non-monotone in
  l at l <= 2d (fig6.py); the gain of a tau other than 1 (Fig. 6's claim) is judged only where the shift
  degrades the model: "inconclusive: the shift does not degrade this model" otherwise.
- Fig. 3a: exact match at tau = 1 is non-monotone in the number of demonstrations: highest at an inner
  number, above both ends, each difference's 90% interval (the crossed bootstrap over test questions and
  Monte Carlo runs, papers/temperature/analysis/resample.py) above 0; not reproduced where an end is
  resolved above every inner number; otherwise inconclusive.
- Fig. 3b: the best tau rises with the noisy ratio: the best tau at the largest ratio is above the best at
  the smallest, and at the largest ratio it beats the smallest ratio's best tau, resolved (as above); not
  reproduced where, at the largest ratio, the smallest ratio's best tau is resolved above every higher tau.
- Fig. 3b: the App. J heuristic tau is near the best: within a factor NEAR of the best scanned tau (pooled
  over the ratios); "inconclusive" when the heuristic is undefined (its diagonal moment <= 0).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.claims import NOT_REPRODUCED, NOT_RUN, REPRODUCED, Outcome
from papers.temperature.analysis import resample
from papers.temperature.analysis.fig6 import DEGRADED, NON_MONOTONE
from scaling.judge.verdicts import INCONCLUSIVE

NEAR = 1.5  # the heuristic tau is "near" the best when within this factor of it


def figure_rows(result, figure: str, panel: str | None = None) -> pd.DataFrame:
    v = result.verdicts
    if v is None or v.empty:
        return pd.DataFrame(columns=["figure", "panel", "metric", "x"])
    rows = v[v["figure"].astype(str) == figure]
    return rows if panel is None else rows[rows["panel"].astype(str) == panel]


def precondition(result) -> tuple[pd.Series, pd.Series] | None:
    """Fig. 6's two precondition rows (degraded, non-monotone) of the scan's first panel, or None."""
    rows = figure_rows(result, "6")
    found = [rows[rows["metric"] == metric] for metric in (DEGRADED, NON_MONOTONE)]
    return None if any(f.empty for f in found) else (found[0].iloc[0], found[1].iloc[0])


def fig6_precondition(result) -> Outcome:
    """App. K.1: the shift degrades GPT-2 and makes its error non-monotone in l at l <= 2d."""
    found = precondition(result)
    if found is None:
        return Outcome(NOT_RUN, "no precondition rows (no input shift, or cells run before they logged them)")
    degraded, rises = found
    said = f"{degraded['verdict']}; {rises['verdict']}"
    if bool(degraded["resolved"]) and bool(rises["resolved"]):
        return Outcome(REPRODUCED, said)
    return Outcome(NOT_REPRODUCED if float(degraded["gain_hi"]) < 0 else INCONCLUSIVE, said)


def gated(check):
    """Fig. 6's gain judged only where its precondition holds: the shift degrades the model."""

    def gate(result) -> Outcome:
        outcome = check(result)
        found = precondition(result)
        if outcome.status == NOT_RUN or found is None:
            return outcome
        degraded, rises = found
        if not bool(degraded["resolved"]):
            return Outcome(INCONCLUSIVE, f"the shift does not degrade this model: {degraded['verdict']}; "
                           f"the scan: {outcome.evidence}")  # fmt: skip
        if not bool(rises["resolved"]):  # half the precondition: no tau's gain can be "not reproduced"
            status = INCONCLUSIVE if outcome.status == NOT_REPRODUCED else outcome.status
            return Outcome(
                status, f"{outcome.evidence}; but the precondition holds only in part: {rises['verdict']}"
            )
        return outcome

    return gate


def llm_units(result, panel: str) -> pd.DataFrame | None:
    """The LLM cells' units of ``panel`` with each run keyed by its cell's seed, None when any is missing."""
    t = result.table
    cells = t.loc[t["panel"].astype(str) == panel, ["run_id", "seed"]].drop_duplicates("run_id")
    units = getattr(result, "units", None) or {}
    if cells.empty or any(units.get(r) is None for r in cells["run_id"]):
        return None
    frames = [units[r].assign(seed=s) for r, s in zip(cells["run_id"], cells["seed"], strict=True)]
    return pd.concat(frames, ignore_index=True)


def em_difference(units: pd.DataFrame, a: tuple[float, float], b: tuple[float, float]) -> tuple:
    """EM at (tau, x) ``b`` less EM at ``a``: (value, lo, hi), the crossed bootstrap over questions and runs
    (a run is its (seed, run); runs and questions line up between the two)."""
    runs = {key: i for i, key in enumerate(sorted(set(zip(units["seed"], units["run"]))))}
    shape = (1, len(runs), int(units["question"].max()) + 1)
    arrays = []
    for tau, x in (a, b):
        one = units[(units["tau"] == tau) & (units["x"] == x)]
        array = np.full(shape, np.nan)
        array[0, [runs[k] for k in zip(one["seed"], one["run"])], one["question"].to_numpy()] = one["correct"]
        arrays.append(array)
    return resample.crossed({"d": arrays[1] - arrays[0]}, 1000)["d"]


def differences_text(differences: list[tuple]) -> str:
    """em_difference's (value, lo, hi) triples as 'v [lo, hi], ...'."""
    return ", ".join(f"{v:.3g} [{lo:.3g}, {hi:.3g}]" for v, lo, hi in differences)


def fig3a_non_monotone(result) -> Outcome:
    """Fig. 3a: exact match at tau = 1 peaks at an inner number of demonstrations, above both ends."""
    rows = figure_rows(result, "3", "demos")
    rows = rows[rows["x"].notna()].sort_values("x")
    units = llm_units(result, "demos")
    if len(rows) < 3 or units is None:
        return Outcome(NOT_RUN, "exact match at three or more numbers of demonstrations, with units, needed")
    em = rows.set_index("x")["at_tau1"].astype(float)
    peak = float(em.idxmax())
    listed = ", ".join(f"{v:.2f} ({x:g})" for x, v in em.items())
    said = f"exact match at tau = 1 by demonstrations: {listed}"
    if peak in (em.index.min(), em.index.max()):
        # monotone only where that end is resolved above every inner number (a flat curve decides nothing)
        inner = [em_difference(units, (1.0, float(x)), (1.0, peak)) for x in em.index[1:-1]]
        said += f": highest at an end ({peak:g}), above the inner numbers by {differences_text(inner)}"
        if all(lo > 0 for _, lo, _ in inner):
            return Outcome(NOT_REPRODUCED, said)
        return Outcome(INCONCLUSIVE, said + ": not resolved")
    ends = [em_difference(units, (1.0, float(end)), (1.0, peak)) for end in (em.index.min(), em.index.max())]
    said += f"; the peak above the ends: {differences_text(ends)}"
    if all(lo > 0 for _, lo, _ in ends):
        return Outcome(REPRODUCED, said)
    return Outcome(INCONCLUSIVE, said + ": not resolved")


def fig3b_best_tau_rises(result) -> Outcome:
    """Fig. 3b: the best tau at the largest noisy ratio is above the best at the smallest, resolved."""
    rows = figure_rows(result, "3", "noisy_ratio")
    rows = rows[rows["x"].notna()].sort_values("x")
    units = llm_units(result, "noisy_ratio")
    if len(rows) < 2 or units is None:
        return Outcome(NOT_RUN, "the best tau at two or more noisy ratios, with units, needed")
    best = rows.set_index("x")["best_tau"].astype(float)
    first, last = best.index.min(), best.index.max()
    said = "best tau by noisy ratio: " + ", ".join(f"{t:g} ({x:g})" for x, t in best.items())
    if not best[last] > best[first]:
        # not rising only where, at the largest ratio, the first ratio's best tau is resolved above every
        # higher tau scanned (ties, as with a model that answers nothing right, decide nothing)
        higher = sorted(t for t in set(units["tau"]) if t > best[first])
        beats = [em_difference(units, (t, last), (best[first], last)) for t in higher]
        said += (
            f": not higher at the largest ratio; there tau = {best[first]:g} above the higher taus by "
            + (differences_text(beats) or "(none scanned)")
        )
        if beats and all(lo > 0 for _, lo, _ in beats):
            return Outcome(NOT_REPRODUCED, said)
        return Outcome(INCONCLUSIVE, said + ": not resolved")
    value, lo, hi = em_difference(units, (best[first], last), (best[last], last))
    said += (
        f"; at noisy ratio {last:g} tau = {best[last]:g} beats tau = {best[first]:g} by {value:.3g} (90% "
        f"interval {lo:.3g} to {hi:.3g})"
    )
    return Outcome(REPRODUCED if lo > 0 else INCONCLUSIVE, said + ("" if lo > 0 else ": not resolved"))


def fig3b_heuristic_near(result) -> Outcome:
    """Fig. 3b: the App. J heuristic tau lies within a factor NEAR of the best scanned tau (pooled row)."""
    rows = figure_rows(result, "3", "noisy_ratio")
    pooled = rows[rows["x"].isna()]
    if pooled.empty:
        return Outcome(NOT_RUN, "no Fig. 3b verdict")
    row = pooled.iloc[0]
    best, heuristic = float(row["best_tau"]), float(row["tau_heuristic"])
    if not math.isfinite(heuristic):
        said = next(
            (p for p in str(row["verdict"]).split("; ") if p.startswith("heuristic tau")), "no heuristic"
        )
        return Outcome(INCONCLUSIVE, said)
    near = best / NEAR <= heuristic <= best * NEAR
    said = f"heuristic tau (App. J) {heuristic:.3g}, best scanned tau {best:g} (near: within {NEAR:g}x)"
    return Outcome(REPRODUCED if near else NOT_REPRODUCED, said)
