"""Fig. 6's precondition (seed 004, App. K.1): the input-covariance shift "substantially degrade[s]
performance and can even induce nonmonotonic generalization error with respect to context length l", and the
optimal temperature mitigates it. A gain of a tau other than 1 is evidence for the paper's claim only where
that holds, so the GPT-2 scan's verdicts check it first, on the cells' units (papers.temperature.jobs:
tau = 1's error per prompt and context length n, under the shift and without it, on the same random draws):

- degraded: tau = 1's error averaged over n under the shift exceeds the error without it by more than the
  practical margin (MARGIN of the unshifted error), its interval above that;
- non-monotone: at l <= 2d (n <= 2d), tau = 1's mean error under the shift rises somewhere: the largest rise
  e(n_b) - e(n_a), n_a < n_b, on the mean curve, judged with its interval against MARGIN of e(n_a) (the pair
  is picked on the same data; the interval does not widen for that choice).

The intervals are the scan's own (papers/temperature/analysis/resample.py): Student t over the pooled prompts
of one model (its prompt seeds), or over the trained models when each cell trained one. A claim that reads
Fig. 6's gain is "inconclusive: the shift does not degrade this model" when the first fails, and says when the
second does.
"""

from __future__ import annotations

from typing import Mapping

import numpy as np
import pandas as pd

from papers.temperature.analysis import resample
from papers.temperature.analysis.verdict_rows import verdict_row
from scaling.judge.verdicts import Rule

MARGIN = Rule().threshold  # the verdicts' practical margin (5%)
DEGRADED, NON_MONOTONE = "precondition: degraded", "precondition: non-monotone at l <= 2d"


def per_n(units: Mapping[str, pd.DataFrame], run_ids: list[str], shifted: bool) -> list[pd.DataFrame]:
    """Each cell's (prompt x n) table of tau = 1's errors, under the shift or without it; [] for cells that
    logged none (before the scans did)."""
    out = []
    for run_id in run_ids:
        frame = units[run_id]
        if "n" not in frame or frame["n"].isna().all():
            return []
        rows = frame[frame["n"].notna() & (frame["shifted"].astype(bool) == shifted)]
        out.append(rows.pivot_table(index="prompt", columns="n", values="err"))
    return out


def interval(arrays: list[np.ndarray], trained: bool) -> tuple[float, float, float]:
    values = {"v": arrays}
    return (resample.over_models if trained else resample.over_prompts)(values)["v"]


def degradation_row(panel, shifted, plain, trained: bool) -> dict:
    """The shifted error over n less the unshifted, per prompt (paired draws), its interval, the verdict."""
    diff = [(s.mean(axis=1) - p.mean(axis=1)).to_numpy() for s, p in zip(shifted, plain)]
    value, lo, hi = interval(diff, trained)
    base = float(np.mean([p.to_numpy().mean() for p in plain]))
    top = float(np.mean([s.to_numpy().mean() for s in shifted]))
    holds = lo > MARGIN * base
    said = (
        f"the shift {'degrades' if holds else 'does not degrade'} this model: tau = 1's error averaged over n"
        f" {top:.3g} under the shift against {base:.3g} without it, a rise of {value:.3g} (90% interval"
        f" {lo:.3g} to {hi:.3g}; degraded when it lies above {MARGIN:.0%} of the unshifted error,"
        f" {MARGIN * base:.3g})"
    )
    return verdict_row(
        figure="6", panel=panel, metric=DEGRADED, best_tau=1.0, at_tau1=top, at_best=base, gain=value,
        gain_lo=lo, gain_hi=hi, resolved=bool(holds), verdict=said,
    )  # fmt: skip


def monotone_row(panel, shifted, d: int, trained: bool) -> dict:
    """The largest rise of tau = 1's mean error under the shift between two n <= 2d, with its interval."""
    ns = [n for n in shifted[0].columns if n <= 2 * d]
    curve = pd.concat([s[ns] for s in shifted]).mean()
    if len(ns) < 2:
        said = f"the error is not scored at two n <= 2d = {2 * d}: non-monotonicity not judged"
        return verdict_row(figure="6", panel=panel, metric=NON_MONOTONE, resolved=False, verdict=said)
    rises = [(curve[b] - curve[a], a, b) for i, a in enumerate(ns) for b in ns[i + 1 :]]
    _, a, b = max(rises)
    value, lo, hi = interval([(s[b] - s[a]).to_numpy() for s in shifted], trained)
    holds = lo > MARGIN * curve[a]
    said = (
        f"at l <= 2d = {2 * d} tau = 1's error under the shift is"
        f" {'non-monotone' if holds else 'monotone'} in n:"
        f" its largest rise, n = {a:g} to {b:g} ({curve[a]:.3g} to {curve[b]:.3g}), is {value:.3g} (90%"
        f" interval {lo:.3g} to {hi:.3g}; a rise counts when it lies above {MARGIN:.0%} of the error at"
        f" n = {a:g})"
    )
    return verdict_row(
        figure="6", panel=panel, metric=NON_MONOTONE, best_tau=1.0, at_tau1=float(curve[b]),
        at_best=float(curve[a]), gain=value, gain_lo=lo, gain_hi=hi, resolved=bool(holds), verdict=said,
    )  # fmt: skip


def precondition_rows(rows: pd.DataFrame, cells: pd.DataFrame, units, trained: bool, panel) -> list[dict]:
    """The two precondition rows of one GPT-2 scan panel, [] when its cells logged no per-n units (no input
    shift, or cells run before the scans logged them)."""
    run_ids = list(cells["run_id"])
    if any(units.get(r) is None for r in run_ids):
        return []
    shifted, plain = per_n(units, run_ids, True), per_n(units, run_ids, False)
    if not shifted or not plain:
        return []
    d = int(float(rows["param.task.d"].iloc[0]))
    return [degradation_row(panel, shifted, plain, trained), monotone_row(panel, shifted, d, trained)]
