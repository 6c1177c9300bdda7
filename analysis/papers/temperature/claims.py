"""The claims of seed 004 (Demir & Dogan, "Optimal Attention Temperature Enhances In-Context Learning under
Distribution Shift"), each checked against the verdicts its sweep's analysis already makes
(analysis/papers/temperature/: per panel the metric at tau = 1 and at the best tau, the gain's 90%
interval).

A temperature claim ("a tau other than 1 helps", "linearized attention beats linear attention") is
"reproduced" when the verdict's gain is resolved in the paper's direction (its interval excludes zero, above
it), "not reproduced" when it is resolved the other way or tau = 1 is the best scanned tau, "inconclusive"
when the interval includes zero or the verdict could not be judged (a scan's cells without units). Fig. 5's
claim reads the weights' variance by tau: reproduced when it is largest at the smallest tau and smallest at
the largest.
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.claims import NOT_REPRODUCED, NOT_RUN, REPRODUCED, Claim, Outcome
from scaling.judge.verdicts import INCONCLUSIVE

from .theory import weight_variances
from .verdict_rows import rows_of


def _panel(value: str, spec: str | None) -> bool:
    """``spec`` None: any panel; else the panel itself or its shift with arguments ("noise(sigma=10)")."""
    return spec is None or value == spec or value.startswith(spec + "(")


def verdict_row(result, figure: str, panel: str | None = None) -> pd.Series | None:
    """The temperature verdict of one figure's panel (the pooled row of an LLM scan: its x is empty)."""
    v = result.verdicts
    if v is None or v.empty:
        return None
    rows = v[(v["figure"].astype(str) == figure) & v["panel"].astype(str).map(lambda p: _panel(p, panel))]
    if "x" in rows and figure == "3":
        rows = rows[rows["x"].isna()]
    return rows.iloc[0] if len(rows) else None


def gain(figure: str, panel: str | None = None, tuned: bool = True):
    """A check that the verdict's gain is resolved above zero (``tuned``: the gain of a tau other than 1, so
    tau = 1 being the best scanned tau does not reproduce it)."""

    def check(result) -> Outcome:
        row = verdict_row(result, figure, panel)
        if row is None:
            return Outcome(NOT_RUN, f"no verdict for Fig. {figure}" + (f" panel {panel}" if panel else ""))
        said = str(row["verdict"])
        lo, hi = float(row["gain_lo"]), float(row["gain_hi"])
        if tuned and float(row["best_tau"]) == 1.0:
            return Outcome(NOT_REPRODUCED, said)
        if math.isnan(lo) or math.isnan(hi):
            return Outcome(INCONCLUSIVE, said)
        if lo > 0:
            return Outcome(REPRODUCED, said)
        return Outcome(NOT_REPRODUCED if hi < 0 else INCONCLUSIVE, said)

    return check


def flattens(kind: str):
    """A check that a larger tau flattens ``kind``'s weights (Fig. 5): their variance is largest at the
    smallest scanned tau and smallest at the largest."""

    def check(result) -> Outcome:
        variances = weight_variances(rows_of(result.table, "attention_histograms"))
        if kind not in variances:
            return Outcome(NOT_RUN, f"no {kind} histograms")
        var = variances[kind].sort_index()
        listed = ", ".join(f"{v:.3g} (tau = {t:g})" for t, v in var.items())
        said = f"{kind}: variance of the weights {listed}"
        ok = var.idxmax() == var.index.min() and var.idxmin() == var.index.max()
        return Outcome(REPRODUCED if ok else NOT_REPRODUCED, said)

    return check


SHIFTS = (
    ("1a", "none", "no shift"),
    ("1b", "input_covariance", "Sigma_x test = 2 Sigma_x train"),
    ("1c", "task", "a shift of the task distribution"),
)
CLAIMS: list[Claim] = [
    *[
        Claim(
            "temp-fig1",
            panel,
            f"tau_opt (Thm 4.7) gives a lower error than tau = 1 ({what}; Monte Carlo)",
            gain("1", shift),
        )
        for panel, shift, what in SHIFTS
    ],
    Claim(
        "temp-fig2",
        "2a",
        "under a noise shift (sigma_test = 10) tau_opt gives a lower error than tau = 1",
        gain("2", "noise"),
    ),
    Claim(
        "temp-fig2",
        "2b",
        "across sigma_test (l / d = 1) tau_opt gives a lower error than tau = 1",
        gain("2", "b"),
    ),
    Claim(
        "temp-fig4",
        "4",
        "under an input-mean shift linear attention's error exceeds linearized attention's",
        gain("4", tuned=False),
    ),
    *[
        Claim("temp-fig5", "5", f"a larger tau flattens the {name} weights", flattens(kind))
        for kind, name in (("softmax", "softmax"), ("linearized_softmax", "linearized softmax"))
    ],
    Claim(
        "temp-gpt2-scan",
        "6",
        "GPT-2 under Sigma_x test = 3 I: a tau other than 1 lowers the error (averaged over n)",
        gain("6"),
    ),
    Claim(
        "temp-llama-a",
        "3a",
        "LLaMA on SciQ, noisy ratio 0.6: a tau other than 1 raises exact match (over the numbers of "
        "demonstrations)",
        gain("3", "demos"),
    ),
    Claim(
        "temp-llama-b",
        "3b",
        "LLaMA on SciQ, 6 demonstrations: a tau other than 1 raises exact match (over noisy ratios)",
        gain("3", "noisy_ratio"),
    ),
]

HOW = (
    "Each claim reads its sweep's temperature verdict (analysis/papers/temperature/): the metric "
    "at tau = 1 and "
    "at the best tau with 90% intervals (theory panels: Monte Carlo standard errors; the GPT-2 and LLM "
    "scans: bootstraps over prompts and seeds, questions and Monte Carlo runs). Reproduced when the gain is "
    "resolved in the paper's direction; not reproduced when it is resolved against it, or tau = 1 is the "
    "best scanned tau; inconclusive when the interval includes zero or the scan's cells logged no units. "
    "Fig. 5: reproduced when the weights' variance is largest at the smallest tau and smallest at the "
    "largest."
)
