"""Verdicts on seed 001's central question: which models context-scale and which task-scale.

Seed 001 (Abedsoltan et al., Sec. 1) calls a model context-scaling when its error falls as the
context length n grows at a fixed number of pretraining tasks T, and task-scaling when its error
falls as T grows at a fixed n (Figs. 1, 7, 8: MLPs task-scale but do not context-scale).

Each group, (sweep, model, T, predictor) for context and (sweep, model, n, predictor) for task
scaling (finite T only), is judged from its points along the axis (fit.scaling_points).

The measure judged is the error relative to the zero predictor on the same prompts (same cell, same n,
same noise level: ``err / err_zero``, column ``measure`` = "err/zero") wherever every row of the group
has that partner, else the normalised error itself ("err"). Both estimate the same population quantity
(errors are normalised by E[y^2]), but the ratio cancels the sampling noise of the query labels that a
model and the zero predictor share: with 512 prompts the zero predictor's own error moves by ~0.05
between context lengths, and a model that predicts nothing (Fig. 7's vectorised MLP, within 0.3% of the
zero predictor at every n) would otherwise "fall" or "rise" with it.

- drop: the paired relative drop of error from the smallest to the largest axis value,
  d_s = 1 - err_s(largest) / err_s(smallest) for each seed s that has both, averaged over seeds;
  its `level` interval is the percentile interval of that mean over seeds resampled with
  replacement (`n_boot` resamples). A single seed gives no interval.
- trend: scipy.stats.page_trend_test over seeds (the seeds with every axis value), for error
  decreasing along the axis, when there are >= 3 axis values and >= 2 seeds; else NaN.

The rule, with threshold t (default 5%) and trend significance trend_alpha (default 0.05):
- "context-scales" / "task-scales": drop_lo > t, and trend p < trend_alpha where the trend test
  is available;
- "does not context-scale" / "does not task-scale": drop_hi < t (a rise of error counts here);
- "inconclusive": anything else, including a single seed or a single axis value.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import page_trend_test

from analysis.fit import FORMS, group_keys, scaling_points, seed_draws


@dataclass(frozen=True)
class Question:
    """One scaling question: the axis it varies, the axis it holds fixed, and its verdict labels."""

    axis: str
    fixed: str
    yes: str
    no: str


QUESTIONS: dict[str, Question] = {
    "context": Question("n", "T", "context-scales", "does not context-scale"),
    "task": Question("T", "n", "task-scales", "does not task-scale"),
}
INCONCLUSIVE = "inconclusive"


def question_named(name: str) -> Question:
    """The registered question called `name`; unknown names fail listing the known ones."""
    if name not in QUESTIONS:
        raise ValueError(f"unknown scaling question {name!r}; known: {sorted(QUESTIONS)}")
    return QUESTIONS[name]


def paired_drops(wide: pd.DataFrame) -> np.ndarray:
    """(S,) per-seed relative drop 1 - err(largest)/err(smallest) of a seed x axis-value table
    (columns sorted ascending), over the seeds that have both ends."""
    ends = wide.iloc[:, [0, -1]].dropna()
    return (1.0 - ends.iloc[:, 1] / ends.iloc[:, 0]).to_numpy()


def drop_interval(
    drops: np.ndarray, n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile interval of the mean drop over seeds resampled with replacement (NaN for < 2)."""
    if len(drops) < 2:
        return math.nan, math.nan
    means = drops[seed_draws(len(drops), n_boot, rng)].mean(axis=1)  # (n_boot,)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


def trend_p_value(wide: pd.DataFrame) -> float:
    """Page's trend test p-value for error decreasing along the axis, over the seeds with every
    axis value; NaN with fewer than 3 axis values or 2 such seeds."""
    complete = wide.dropna()
    if complete.shape[1] < 3 or complete.shape[0] < 2:
        return math.nan
    # Page's alternative is increase along the columns: order them from largest axis value down
    return float(page_trend_test(complete.to_numpy()[:, ::-1]).pvalue)


def verdict_label(
    question: Question,
    drop_lo: float,
    drop_hi: float,
    trend_p: float,
    threshold: float,
    trend_alpha: float,
) -> str:
    """The module docstring's rule."""
    trend_ok = math.isnan(trend_p) or trend_p < trend_alpha
    if drop_lo > threshold and trend_ok:
        return question.yes
    if drop_hi < threshold:
        return question.no
    return INCONCLUSIVE


def judge_points(
    points: pd.DataFrame,
    question: str,
    *,
    threshold: float = 0.05,
    level: float = 0.9,
    n_boot: int = 1000,
    trend_alpha: float = 0.05,
    rng: np.random.Generator | int = 0,
) -> dict:
    """Verdict for one group's points (columns seed, err and the question's axis)."""
    q = question_named(question)
    rng = np.random.default_rng(rng)
    wide = points.pivot_table(index="seed", columns=q.axis, values="err", aggfunc="mean")
    wide = wide.sort_index(axis=1)  # (S, X) ascending axis values
    drops = paired_drops(wide)
    lo, hi = drop_interval(drops, n_boot, level, rng)
    trend_p = trend_p_value(wide)
    out = {
        "question": question,
        "axis": q.axis,
        "x_min": wide.columns[0],
        "x_max": wide.columns[-1],
        "n_values": wide.shape[1],
        "n_seeds": len(drops),
        "drop": float(drops.mean()) if len(drops) else math.nan,
        "drop_lo": lo,
        "drop_hi": hi,
        "threshold": threshold,
        "level": level,
        "trend_p": trend_p,
        "note": "",
    }
    if wide.shape[1] < 2:
        out.update(verdict=INCONCLUSIVE, note=f"a single {q.axis} value")
        return out
    if len(drops) < 2:
        out.update(verdict=INCONCLUSIVE, note="fewer than 2 seeds: no interval")
        return out
    out["verdict"] = verdict_label(q, lo, hi, trend_p, threshold, trend_alpha)
    return out


def relative_to_zero(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The table with a ``measure`` column and, in the groups (`keys`) where every row has the zero
    predictor's row of the same cell, n and noise level (``zero`` or ``zero|<level>``) with a positive
    error, err divided by that error (measure "err/zero"); other groups keep err (measure "err")."""
    if table.empty or not {"cell_key", "predictor", "n"} <= set(table.columns):
        return table.assign(measure="err")
    parts = table["predictor"].astype(str).str.partition("|")  # name, "|", level
    pair = ["cell_key", "n", "_level"]
    marked = table.assign(_level=parts[2])
    zeros = marked[parts[0] == "zero"].groupby(pair, dropna=False)["err"].mean().rename("_zero").reset_index()
    merged = marked.reset_index(drop=True).merge(zeros, on=pair, how="left")
    ok = np.isfinite(merged["_zero"]) & (merged["_zero"] > 0)
    whole = (
        ok.groupby([merged[k] for k in keys], dropna=False).transform("all")
        if keys
        else pd.Series(bool(ok.all()), index=ok.index)
    )
    return merged.assign(
        err=merged["err"].where(~whole, merged["err"] / merged["_zero"]),
        measure=np.where(whole, "err/zero", "err"),
    ).drop(columns=["_level", "_zero"])


def scaling_verdicts(
    table: pd.DataFrame,
    question: str,
    *,
    by: tuple[str, ...] | None = None,
    select: str = "auto",
    n_min: int = 1,
    threshold: float = 0.05,
    level: float = 0.9,
    n_boot: int = 1000,
    trend_alpha: float = 0.05,
    rng: np.random.Generator | int = 0,
    against_zero: bool = True,
) -> pd.DataFrame:
    """One verdict row per group of the tidy table for `question` ("context" or "task").

    Groups and point selection are those of the fit of the same name (fit.group_keys,
    fit.scaling_points: by default n == N where a group's cells span several N, every evaluated n
    of a group of one N, n >= n_min, finite T for task scaling). `against_zero` judges err / err_zero
    where the zero predictor ran on the same prompts (relative_to_zero; the module docstring says why).
    """
    q = question_named(question)
    rng = np.random.default_rng(rng)
    keys = group_keys(table, FORMS[question], by)
    table = relative_to_zero(table, keys) if against_zero else table.assign(measure="err")
    keys = [*keys, "measure"]  # constant within a group: carried into the verdict rows
    pts = scaling_points(table, (q.axis,), keys, select, n_min)
    rows = []
    for key, group in pts.groupby(keys, dropna=False, sort=True):
        verdict = judge_points(
            group, question, threshold=threshold, level=level, n_boot=n_boot, trend_alpha=trend_alpha, rng=rng
        )
        rows.append({**dict(zip(keys, key)), **verdict})
    return pd.DataFrame(rows)


def context_verdicts(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """Does each (sweep, model, T, predictor) context-scale? Keywords as scaling_verdicts."""
    return scaling_verdicts(table, "context", **kwargs)


def task_verdicts(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """Does each (sweep, model, n, predictor) task-scale? Keywords as scaling_verdicts."""
    return scaling_verdicts(table, "task", **kwargs)


def _value(x: float) -> str:
    return "inf" if math.isinf(x) else f"{x:g}"


def unit_names(verdicts: pd.DataFrame) -> pd.Series:
    """The name a verdict row's unit goes by in the answer: the model, prefixed by the sweep when
    there are several sweeps and followed by the task.* settings that vary."""
    name = verdicts["model"].astype(str)
    if "sweep" in verdicts and verdicts["sweep"].nunique() > 1:
        name = verdicts["sweep"].astype(str) + "/" + name
    varying = [c for c in verdicts if c.startswith("task.") and verdicts[c].nunique() > 1]
    for c in varying:
        name = name + f" {c[len('task.') :]}=" + verdicts[c].astype(str)
    return name


def verdict_summary(verdicts: pd.DataFrame, question: str) -> dict[str, list[str]]:
    """Label -> the units (unit_names) given it. A unit whose groups disagree is listed under each
    label with the fixed axis value, e.g. "mlp [T=1e+06]"."""
    q = question_named(question)
    labels = {q.yes: [], q.no: [], INCONCLUSIVE: []}
    if verdicts.empty:
        return labels
    for name, group in verdicts.groupby(unit_names(verdicts), sort=True):
        if group["verdict"].nunique() == 1:
            labels[group["verdict"].iloc[0]].append(name)
            continue
        for _, row in group.iterrows():
            labels[row["verdict"]].append(f"{name} [{q.fixed}={_value(row[q.fixed])}]")
    return labels


def answer_line(context: pd.DataFrame, task: pd.DataFrame) -> str:
    """The one-line answer: which models context-scale and which task-scale."""
    parts = []
    for question, verdicts in (("context", context), ("task", task)):
        q = question_named(question)
        labels = verdict_summary(verdicts, question)
        named = {k: ", ".join(v) or "none" for k, v in labels.items()}
        parts.append(
            f"{q.yes.replace('scales', 'scale')}: {named[q.yes]} "
            f"(not: {named[q.no]}; inconclusive: {named[INCONCLUSIVE]})"
        )
    return "; ".join(parts) + "."


def format_verdicts(
    context: pd.DataFrame, task: pd.DataFrame, predictors: tuple[str, ...] = ("model",)
) -> str:
    """Text report: the one-line answer for the given predictors, then both verdict tables."""
    pick = [v[v["predictor"].isin(predictors)] if "predictor" in v else v for v in (context, task)]
    lines = [answer_line(*pick)]
    cols = [
        "model",
        "predictor",
        "x_min",
        "x_max",
        "n_seeds",
        "drop",
        "drop_lo",
        "drop_hi",
        "trend_p",
        "verdict",
        "note",
    ]
    sections = (("Context scaling", pick[0], "T"), ("Task scaling", pick[1], "n"))
    for title, verdicts, fixed in sections:
        lines.append(f"\n{title}:")
        if verdicts.empty:
            lines.append("  (no groups)")
            continue
        tasks = sorted(c for c in verdicts if c.startswith("task."))
        shown = [c for c in ["sweep", *tasks, fixed, *cols] if c in verdicts]
        lines.append(verdicts[shown].to_string(index=False, float_format=lambda x: f"{x:.3g}"))
    return "\n".join(lines)
