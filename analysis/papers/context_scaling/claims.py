"""The claims of seed 001 (Abedsoltan et al., "Context-Scaling versus Task-Scaling in In-Context Learning",
Figs. 1-8), each checked against an analysed sweep (what every paper's claims share: analysis/claims.py).

A claim names its figure, says what the paper states, and checks it on the figure's sweep. A scaling claim
reads the verdict table (scaling.judge.verdicts) at the paper's fixed value (context scaling at the sweep's
largest T, task scaling at the n nearest the paper's N = 10): "reproduced" when the verdict is the paper's;
"not reproduced" when it is the opposite, or "at chance" where the paper has the model scaling;
"inconclusive" when the verdict is (too few seeds among the reasons), when it "scales weakly" (a drop
resolved above zero but under the stated margin: the paper's yes or no holds only up to the margin), or
when the paper has the model not scaling and it is at chance (a model that learned nothing shows neither).
A comparison claim ("comparable", "better", a ratio) reads the two predictors' errors at the largest
context length seed by seed (the same prompts), per task family and per noise level, never pooled: the
geometric mean of the per-seed ratios with its interval (Student t over seeds on the log scale, the
verdicts' method and level, 3 seeds or more): "reproduced" when the interval lies inside the claim's band
(``COMPARABLE``: within 1/1.5-1.5x; better: below 1), "not reproduced" when wholly outside, "inconclusive"
when it straddles a bound or the seeds are too few. A figure whose experiment is not in the store gives
"not run" for each of its claims.
"""

from __future__ import annotations

from typing import Callable

import numpy as np
import pandas as pd

from analysis.claims import COMPARABLE, NOT_REPRODUCED, NOT_RUN, REPRODUCED, Claim, Outcome
from analysis.verdicts import numbers
from scaling.judge.verdicts import AT_CHANCE, INCONCLUSIVE, QUESTIONS, TOO_FEW, ratio_side, value_text


def _task_rows(frame: pd.DataFrame, family: str | None, table: pd.DataFrame | None = None) -> pd.DataFrame:
    """The rows of one task family: by the frame's family column, or, in a frame without one (a sweep of a
    single family), all of them when that family is the sweep's (``table``'s) and none otherwise."""
    if family is None:
        return frame
    for col in ("task.family", "param.task.family"):
        if col in frame:
            return frame[frame[col].astype(str) == family]
    source = table if table is not None else frame
    families = set(source["param.task.family"].astype(str)) if "param.task.family" in source else set()
    return frame if families == {family} else frame.iloc[0:0]


def scaling(
    question: str, model: str, expect: bool, family: str | None = None, near: float | None = None
) -> Callable[[object], Outcome]:
    """A check that `model` does (expect=True) or does not scale on `question`, on one task family: the
    group at the largest T for context scaling (T = inf, the paper's 1e5-1e6), the n nearest `near`
    (the paper's N = 10) for task scaling."""
    q = QUESTIONS[question]

    def check(result) -> Outcome:
        v = result.verdicts
        if v is None or v.empty:
            return Outcome(NOT_RUN, "no verdicts")
        rows = _task_rows(
            v[(v["question"] == question) & (v["model"] == model) & (v["predictor"] == "model")],
            family,
            result.table,
        )
        if rows.empty:
            return Outcome(NOT_RUN, f"no {model} cells" + (f" on {family}" if family else ""))
        fixed = rows[q.fixed].astype(float)
        pick = fixed.max() if near is None else min(fixed.unique(), key=lambda x: (abs(x - near), x))
        row = rows[fixed == pick].iloc[0]
        verdict = row["verdict"]
        said = f"{verdict} at {q.fixed} = {value_text(pick)}: " + (
            f"err/zero {row['low']:.2f}-{row['high']:.2f}" if verdict == AT_CHANCE else numbers(row)
        )
        if verdict == INCONCLUSIVE:
            return Outcome(INCONCLUSIVE, said + (f" ({row['note']})" if row.get("note") else ""))
        if verdict == q.weak:  # resolved, but under the margin: the paper's yes or no holds only up to it
            return Outcome(
                INCONCLUSIVE,
                said + f": a drop resolved above 0 but under the {row['threshold']:.0%} margin, so the "
                f"paper's '{'scales' if expect else 'does not scale'}' holds only up to the margin",
            )
        if verdict == AT_CHANCE:  # learned nothing: no evidence for scaling, nor for its absence
            return Outcome(
                NOT_REPRODUCED if expect else INCONCLUSIVE,
                said
                + ": no better than predicting zero"
                + ("" if expect else ", so its not scaling says nothing"),
            )
        scales = verdict == q.yes
        return Outcome(REPRODUCED if scales == expect else NOT_REPRODUCED, said)

    return check


def final_rows(result, name: str, family: str | None, level: str | None, baseline: bool) -> pd.DataFrame:
    """The rows a comparison reads of one predictor on one task family: a model's (its ``model`` rows, or
    ``model|<level>`` at one noise level) at its largest N and T; a baseline's (``name`` or ``name|<level>``)
    at the largest N."""
    t = result.table
    predictor = ("model" if not baseline else name) + (f"|{level}" if level else "")
    rows = t[t["predictor"].astype(str) == predictor]
    rows = _task_rows(rows if baseline else rows[rows["model"] == name], family, t)
    if rows.empty:
        return rows
    rows = rows[rows["N"] == rows["N"].max()]
    return rows if baseline else rows[rows["T"] == rows["T"].max()]


def level_text(level: str | None) -> str:
    """'noise_std=0.1' -> ' at noise_std = 0.1' (empty for no level)."""
    return " at " + level.replace("=", " = ") if level else ""


def seed_errors(result, a: str, b: str, family, level, baseline: bool) -> tuple[pd.DataFrame, float] | str:
    """(one row per seed that scored both: columns a and b, their errors at the largest n both were scored
    at; that n), or why not (no rows of one of them)."""
    rows = {a: final_rows(result, a, family, level, False), b: final_rows(result, b, family, level, baseline)}
    for name, part in rows.items():
        if part.empty:
            return f"no {name} rows" + (f" on {family}" if family else "") + level_text(level)
    common = set(rows[a]["n"]) & set(rows[b]["n"])
    if not common:
        return f"{a} and {b} were scored at no common n"
    n = max(common)
    per_seed = {k: v[v["n"] == n].groupby("seed")["err"].mean() for k, v in rows.items()}
    return pd.DataFrame(per_seed).dropna(), float(n)


def ratio_claim(
    a: str, b: str, band: tuple[float, float], what: str, family=None, level=None, baseline=False
) -> Callable[[object], Outcome]:
    """A check that a's error over b's (seed by seed, on the same prompts, at the largest n) lies in
    ``band``: the geometric mean of the per-seed ratios with its interval (scaling.judge.verdicts.ratio_side,
    the verdicts' rule and level): "reproduced" when the interval lies inside the band, "not reproduced" when
    wholly outside, "inconclusive" when it straddles a bound or there are too few seeds (``what``: the band
    in words)."""

    def check(result) -> Outcome:
        found = seed_errors(result, a, b, family, level, baseline)
        if isinstance(found, str):
            return Outcome(NOT_RUN, found)
        errors, n = found
        r = ratio_side((errors[a] / errors[b]).to_numpy(), *band, result.request.rule())
        means = np.exp(np.log(errors).mean()) if len(errors) else errors.mean()
        said = f"at n = {n:g}{level_text(level)}: {a} {means[a]:.3f}, {b} {means[b]:.3f} (geometric means), "
        if r.side == TOO_FEW:
            return Outcome(
                INCONCLUSIVE,
                said + f"ratio {r.ratio:.2f} on {r.n_seeds} seeds: too few seeds (a claim needs "
                f"{result.request.rule().min_seeds}); {what}",
            )
        said += f"ratio {r.ratio:.2f} [{r.lo:.2f}, {r.hi:.2f}] over {r.n_seeds} seeds; {what}"
        status = {"inside": REPRODUCED, "outside": NOT_REPRODUCED}.get(r.side, INCONCLUSIVE)
        return Outcome(status, said + ("" if r.side != "straddles" else ": the interval straddles a bound"))

    return check


def comparable(
    a: str, b: str, family: str | None = None, baseline: bool = False, level: str | None = None
) -> Callable[[object], Outcome]:
    """A check that `a` and `b` (models; `b` a baseline when ``baseline``) reach errors within a factor
    COMPARABLE of each other at the largest n: the ratio's interval within [1/COMPARABLE, COMPARABLE]."""
    what = f"comparable: the interval within {1 / COMPARABLE:.2f}-{COMPARABLE:g}x"
    return ratio_claim(a, b, (1 / COMPARABLE, COMPARABLE), what, family, level, baseline)


def better(
    a: str, b: str, family: str | None = None, level: str | None = None
) -> Callable[[object], Outcome]:
    """A check that model `a` ends below baseline `b` at the largest n: the ratio's interval below 1."""
    return ratio_claim(a, b, (0.0, 1.0), "better: the interval below 1", family, level, baseline=True)


def _scales(fig, panel, model, question, expect, family=None, near=None, what=""):
    verb = {"context": "context-scales", "task": "task-scales"}[question]
    text = f"{what or model} {verb if expect else 'does not ' + verb[:-1]}" + (
        f" ({family})" if family else ""
    )
    return Claim(fig, panel, text, scaling(question, model, expect, family, near), (model,))


CLAIMS: list[Claim] = [
    _scales("fig1", "1A", "gpt2", "task", True, near=10, what="GPT-2"),
    _scales("fig1", "1A", "mlp", "task", True, near=10, what="MLP (vectorised input)"),
    _scales("fig1", "1B", "gpt2", "context", True, what="GPT-2"),
    _scales("fig1", "1B", "mlp", "context", False, what="MLP (vectorised input)"),
    Claim(
        "fig2",
        "2",
        "SGPT is comparable to GPT-2 (linear regression, one noise level)",
        comparable("sgpt", "gpt2"),
    ),
    Claim(
        "fig2",
        "2",
        "GPT-2 is close to optimally tuned ridge",
        comparable("gpt2", "ridge_tuned", baseline=True),
    ),
    _scales("fig2", "2", "sgpt", "context", True, what="SGPT"),
    *[
        Claim(
            "fig3",
            "3",
            f"SGPT is comparable to GPT-2 at noise level sigma = {sigma} (each level judged alone)",
            comparable("sgpt", "gpt2", level=f"noise_std={sigma}"),
        )
        for sigma in ("0.1", "0.5")
    ],
    *[
        Claim("fig4", f"4{p}", f"SGPT is comparable to GPT-2 ({f})", comparable("sgpt", "gpt2", f))
        for p, f in (("A", "decision_tree"), ("B", "relu_net"), ("C", "sparse_linear"))
    ],
    Claim("fig4", "4A", "SGPT beats XGBoost (decision tree)", better("sgpt", "xgboost", "decision_tree")),
    Claim(
        "fig4",
        "4C",
        "SGPT is close to Lasso (sparse linear)",
        comparable("sgpt", "lasso", "sparse_linear", baseline=True),
    ),
    Claim("fig4", "4C", "SGPT beats OLS (sparse linear)", better("sgpt", "least_squares", "sparse_linear")),
    *[
        _scales("fig5", "5", m, "context", True, f, what=what)
        for m, what in (("sgpt1", "one-layer SGPT"), ("onelayer", "one-layer model of eq. 9"))
        for f in ("linear", "sparse_linear", "relu_net", "decision_tree")
    ],
    *[
        Claim(
            "fig6",
            "6",
            f"the scalar psi_{k}(A)_(N,d+1) is as good as the row psi_{k}(A)_(N,:) ({f})",
            comparable(f"scalar_psi{k}", f"row_psi{k}", f),
        )
        for f in ("linear", "relu_net")
        for k in ("L", "H")
    ],
    *[
        c
        for f in ("linear", "relu_net")
        for c in (
            _scales("fig7", "7A", "mlp", "task", True, f, 10, "MLP on vectorised input"),
            _scales("fig7", "7B", "mlp", "context", False, f, what="MLP on vectorised input"),
            _scales("fig7", "7A", "mlp_psiH", "task", False, f, 10, "MLP on psi_H features"),
            _scales("fig7", "7B", "mlp_psiH", "context", True, f, what="MLP on psi_H features"),
            _scales("fig7", "7A", "mlp_both_psiH", "task", True, f, 10, "MLP on vectorised input + psi_H"),
            _scales(
                "fig7", "7B", "mlp_both_psiH", "context", True, f, what="MLP on vectorised input + psi_H"
            ),
        )
    ],
    *[
        _scales("fig8", f"8{p}", m, q, True, f, 10 if q == "task" else None, name)
        for f in ("linear", "relu_net")
        for m, name in (("gpt2", "GPT-2"), ("sgpt", "SGPT"))
        for p, q in (("A", "task"), ("B", "context"))
    ],
]
