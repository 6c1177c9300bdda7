"""The claims of seed 004 (Demir & Dogan, "Optimal Attention Temperature Enhances In-Context Learning under
Distribution Shift"), each checked against the verdicts its sweep's analysis already makes
(papers/temperature/analysis/: per panel the metric at tau = 1 and at the best tau, the gain's 90%
interval).

A temperature claim ("a tau other than 1 helps", "linearized attention beats linear attention") is
"reproduced" when the verdict's gain is resolved in the paper's direction (its interval excludes zero, above
it), "not reproduced" when it is resolved the other way or tau = 1 is the best scanned tau, "inconclusive"
when the interval includes zero or the verdict could not be judged (a scan's cells without units). Fig. 5's
claim reads the weights' variance by tau: reproduced when it is largest at the smallest tau and smallest at
the largest. The claims that are not a gain are checked in theory_claims.py (Thm. 4.6 against Monte Carlo,
the trends of Figs. 1, 2 and 4, Sec. 4.4's special case) and scan_claims.py (Fig. 6's precondition, which
gates its gain, and Fig. 3's trends and heuristic tau); Fig. 3's claims run on each language model's parts
(LLaMA-2's sweep files, and their smollm profile: SmolLM2-135M-Instruct).
"""

from __future__ import annotations

import math

import pandas as pd

from analysis.claims import NOT_REPRODUCED, NOT_RUN, REPRODUCED, Claim, Outcome
from papers.temperature.analysis import scan_claims, theory_claims
from papers.temperature.analysis.theory import weight_variances
from papers.temperature.analysis.verdict_rows import rows_of
from scaling.judge.verdicts import INCONCLUSIVE


def _panel(value: str, spec: str | None) -> bool:
    """``spec`` None: any panel; else the panel itself or its shift with arguments ("noise(sigma=10)")."""
    return spec is None or value == spec or value.startswith(spec + "(")


def verdict_row(result, figure: str, panel: str | None = None) -> pd.Series | None:
    """The temperature verdict of one figure's panel (the pooled row of an LLM scan: its x is empty)."""
    v = result.verdicts
    if v is None or v.empty:
        return None
    rows = v[(v["figure"].astype(str) == figure) & v["panel"].astype(str).map(lambda p: _panel(p, panel))]
    rows = rows[~rows["metric"].astype(str).str.startswith("precondition")]  # Fig. 6's (scan_claims.py)
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
AGREEMENT = (  # Thm. 4.6 against Monte Carlo, per panel: (part, figure, panel, its label)
    *(("temp-fig1", "1", shift, panel) for panel, shift, _ in SHIFTS),
    ("temp-fig2", "2", "noise", "2a"),
    ("temp-fig2", "2", "b", "2b"),
    ("temp-fig4", "4", "input_mean", "4"),
)
LLMS = (  # Fig. 3's parts: (part key suffix, the model in words)
    ("", "LLaMA"),
    ("-smollm", "SmolLM2-135M-Instruct"),
)


def llm_claims(suffix: str, model: str) -> list[Claim]:
    """Fig. 3's claims on one language model's parts (LLaMA-2's, at the sweep's own or quick profile, and
    SmolLM2's smollm profile)."""
    return [
        Claim(
            f"temp-llama-a{suffix}",
            "3a",
            f"{model} on SciQ, noisy ratio 0.6: a tau other than 1 raises exact match (over the numbers of "
            "demonstrations)",
            gain("3", "demos"),
        ),
        Claim(
            f"temp-llama-a{suffix}",
            "3a",
            f"{model}: exact match is non-monotone in the number of demonstrations (noisy ratio 0.6)",
            scan_claims.fig3a_non_monotone,
        ),
        Claim(
            f"temp-llama-b{suffix}",
            "3b",
            f"{model} on SciQ, 6 demonstrations: a tau other than 1 raises exact match (over noisy ratios)",
            gain("3", "noisy_ratio"),
        ),
        Claim(
            f"temp-llama-b{suffix}",
            "3b",
            f"{model}: higher noisy ratios push the best tau upward",
            scan_claims.fig3b_best_tau_rises,
        ),
        Claim(
            f"temp-llama-b{suffix}",
            "3b",
            f"{model}: the App. J heuristic tau (score moments) lies near the best tau",
            scan_claims.fig3b_heuristic_near,
        ),
    ]


def theory_part(part: str) -> list[Claim]:
    """Thm. 4.6 against Monte Carlo on each panel of a theory part."""
    return [
        Claim(
            part, label, f"Thm. 4.6 matches Monte Carlo (Fig. {label})", theory_claims.agreement(fig, panel)
        )
        for key, fig, panel, label in AGREEMENT
        if key == part
    ]


# in the report's order: part by part as PAPERS lists them (analysis/paper.py)
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
    *theory_part("temp-fig1"),
    Claim(
        "temp-fig1",
        "1a",
        "without a shift the model (tau = 1) converges to Bayes ridge as l grows",
        theory_claims.approaches_bayes("1", "none", "tau=1"),
    ),
    Claim(
        "temp-fig1",
        "1b",
        "under the covariance shift tau_opt restores Bayes ridge's error as l grows",
        theory_claims.approaches_bayes("1", "input_covariance", "tau_opt"),
    ),
    Claim(
        "temp-fig1",
        "1c",
        "the task shift's effect (tau = 1's excess over Bayes ridge) shrinks as l grows",
        theory_claims.approaches_bayes("1", "task", "tau=1", end=False),
    ),
    Claim(
        "temp-fig2",
        "2a",
        "under a noise shift (sigma_test = 10) tau_opt gives a lower error than tau = 1",
        gain("2", "noise"),
    ),
    Claim(
        "temp-fig2",
        "2a",
        "the noise shift's effect (tau = 1's excess over Bayes ridge) shrinks as l grows",
        theory_claims.approaches_bayes("2", "noise", "tau=1", end=False),
    ),
    Claim(
        "temp-fig2",
        "2b",
        "across sigma_test (l / d = 1) tau_opt gives a lower error than tau = 1",
        gain("2", "b"),
    ),
    Claim(
        "temp-fig2",
        "2b",
        "the model (tau = 1) diverges further from Bayes ridge as sigma_test grows (l / d = 1)",
        theory_claims.gap_grows_with_sigma,
    ),
    Claim("temp-fig2", "2c", "tau_opt rises with sigma_test", theory_claims.tau_opt_rises),
    *theory_part("temp-fig2"),
    Claim(
        "temp-fig4",
        "4",
        "under an input-mean shift linear attention's error exceeds linearized attention's",
        gain("4", tuned=False),
    ),
    Claim(
        "temp-fig4",
        "4",
        "under an input-mean shift linearized attention matches Bayes ridge as l grows; linear attention "
        "does not recover it",
        theory_claims.linear_fails_linearized_converges,
    ),
    *theory_part("temp-fig4"),
    *[
        Claim("temp-fig5", "5", f"a larger tau flattens the {name} weights", flattens(kind))
        for kind, name in (("softmax", "softmax"), ("linearized_softmax", "linearized softmax"))
    ],
    Claim(
        "temp-gpt2-scan",
        "6",
        "GPT-2 under Sigma_x test = 3 I: the shift degrades it and makes its error non-monotone in l for "
        "l up to 2d (App. K.1)",
        scan_claims.fig6_precondition,
    ),
    Claim(
        "temp-gpt2-scan",
        "6",
        "GPT-2 under Sigma_x test = 3 I: a tau other than 1 lowers the error (averaged over n)",
        scan_claims.gated(gain("6")),
    ),
    *[claim for suffix, model in LLMS for claim in llm_claims(suffix, model)],
    Claim(
        "temp-sec44",
        "Sec. 4.4",
        "w ~ N(0, I), sigma = 0, Sigma_x test = c I: the optimal temperature is tau_opt = c",
        theory_claims.sec44_tau,
    ),
    Claim(
        "temp-sec44",
        "Sec. 4.4",
        "w ~ N(0, I), sigma = 0, Sigma_x test = c I: tau_opt fully counteracts the shift",
        theory_claims.sec44_counteracts,
    ),
]

HOW = (
    "Each tau claim reads its sweep's temperature verdict (papers/temperature/analysis/): the metric "
    "at tau = 1 and at the best tau with 90% intervals (theory panels: Monte Carlo standard errors; "
    "the GPT-2 scan: Student t over the prompts of one model, or over trained models; the LLM scans: "
    "a bootstrap over test questions and Monte Carlo runs; each verdict says what its interval "
    "covers). Reproduced when the gain is resolved in the paper's direction; not reproduced when it "
    "is resolved against it, or tau = 1 is the best scanned tau; inconclusive when the interval "
    "includes zero or the scan's cells logged no units. Fig. 6's gain counts only where its "
    "precondition holds (else 'inconclusive: the shift does not degrade this model'); where the shift "
    "degrades it but its error is not non-monotone, the gain is never 'not reproduced'. Thm. 4.6 "
    "matches Monte Carlo when every point is within {agree} of the theory or inside its Monte Carlo "
    "interval; a trend is reproduced when its change between the ends of the axis is resolved "
    "(standard errors in quadrature), a convergence to Bayes ridge when it also ends within {agree} "
    "of it. Fig. 3's trends read the per-x verdicts with the same bootstrap; the heuristic tau is "
    "near the best within a factor {near}, and undefined (inconclusive) when its diagonal moment is "
    "not positive. Fig. 5: reproduced when the weights' variance is largest at the smallest tau and "
    "smallest at the largest."
).format(agree=f"{theory_claims.AGREE:.0%}", near=f"{scan_claims.NEAR:g}")
