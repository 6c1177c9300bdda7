"""The temperature verdict table's columns and the pieces every panel's verdict row is made of: a job's rows
of the table, an interval's half-width and standard error, the errors at tau = 1 and at the best tau, and
the verdict in words (the theory panels', papers/temperature/analysis/theory.py, and the scans',
scans.py)."""

from __future__ import annotations

import numpy as np
import pandas as pd

Z90 = 1.6448536269514722
VERDICT_COLUMNS = [
    "figure",
    "panel",
    "x",
    "metric",
    "best_tau",
    "at_tau1",
    "at_tau1_lo",
    "at_tau1_hi",
    "at_best",
    "at_best_lo",
    "at_best_hi",
    "vs_tau",
    "gain",
    "gain_lo",
    "gain_hi",
    "resolved",
    "tau_heuristic",
    "theory_gap",
    "verdict",
]


def job_of(table: pd.DataFrame) -> pd.Series:
    if "param.job" in table:
        return table["param.job"].fillna("train")
    return pd.Series("train", index=table.index)


def rows_of(table: pd.DataFrame, job: str) -> pd.DataFrame:
    return table[job_of(table) == job]


def half_width(frame: pd.DataFrame) -> pd.Series:
    return ((frame["err_hi"] - frame["err_lo"]) / 2).fillna(0.0)


def standard_error(frame: pd.DataFrame) -> pd.Series:
    return half_width(frame) / Z90


def errors_at(one: pd.DataFrame, best: pd.DataFrame, x: float) -> dict[str, float]:
    """The verdict row's error (with its interval) at tau = 1 and at the best tau, at x."""
    return {
        f"{side}{suffix}": float(frame.loc[x, f"err{suffix}"])
        for side, frame in (("at_tau1", one), ("at_best", best))
        for suffix in ("", "_lo", "_hi")
    }


def verdict_text(gain: float, lo: float, hi: float, what: str, best: str) -> str:
    if best == "tau = 1":  # nothing to compare: the model as trained is the best of the scanned taus
        return f"tau = 1 (as trained) is the best scanned tau on {what}"
    if lo > 0:
        return (
            f"{best} beats tau = 1 on {what}: gain {gain:.3g} (90% interval {lo:.3g} to {hi:.3g}) is resolved"
        )
    if hi < 0:
        return f"tau = 1 is better on {what} (interval {lo:.3g} to {hi:.3g})"
    return (
        f"no resolved difference between {best} and tau = 1 on {what}"
        f" (interval {lo:.3g} to {hi:.3g} includes 0)"
    )


def verdict_row(**kw) -> dict:
    return {c: kw.get(c, np.nan) for c in VERDICT_COLUMNS}
