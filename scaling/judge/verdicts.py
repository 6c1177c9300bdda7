"""The verdict rule of seed 001's central question: which models context-scale and which task-scale.

The rule and its numbers, used by the analysis (analysis/papers/context_scaling/plugin.py; its wording of the
verdicts is analysis/verdicts.py) and by the adaptive driver (scaling.adaptive.policy) alike.

Seed 001 (Abedsoltan et al., Sec. 1) calls a model context-scaling when its error falls as the
context length n grows at a fixed number of pretraining tasks T, and task-scaling when its error
falls as T grows at a fixed n (Figs. 1, 7, 8: MLPs task-scale but do not context-scale).

Each group, (sweep, model, T, predictor) for context and (sweep, model, n, predictor) for task
scaling, plus every other setting that varies between cells (``task.*``, a ``train.lr`` axis, ...),
is judged from its points along the axis (``verdict_points``). T = inf (a fresh task for every
prompt) is the largest T of a task verdict (``Rule.inf_T``; the table's ``x_max`` says ``inf``).

The measure judged is the error relative to the zero predictor on the same prompts (same cell, same n,
same noise level: ``err / err_zero``, column ``measure`` = "err/zero") wherever every row of the group
has that partner, else the normalised error itself ("err"; the zero predictor's is 1 by construction).
Both estimate the same population quantity (errors are normalised by E[y^2]), but the ratio cancels the
sampling noise of the query labels that a model and the zero predictor share: with 512 prompts the zero
predictor's own error moves by ~0.05 between context lengths, and a model that predicts nothing would
otherwise "fall" or "rise" with it.

- start, end: the measure at the smallest and the largest axis value (means over seeds); end_lo, end_hi
  its ``level`` percentile interval over seeds resampled with replacement (``n_boot`` resamples).
- drop: the paired relative drop 1 - end_s / start_s for each seed s that has both ends, averaged over
  seeds, with the same kind of interval (drop_lo, drop_hi). A single seed gives no interval.
- trend_p: scipy.stats.page_trend_test over the seeds with every axis value, for error decreasing
  along the axis, where there are >= 3 axis values and >= 2 seeds; else NaN. Reported, not part of the
  rule: a curve that saturates (256 tasks as good as fresh ones) has no monotone trend to find, and with
  2 seeds the test cannot go below p = 1/36 even for a perfect order.

The rule (``Rule``; threshold t = 5%, chance margin m = 5%, 90% intervals):
- "at chance": the end is within m of the zero predictor or above it (end >= 1 - m), whatever the
  trend: predicting zero does as well, so nothing was learned to scale;
- "context-scales" / "task-scales": drop_lo > t and the end is resolved below the zero predictor
  (end_hi < 1 - m);
- "does not context-scale" / "does not task-scale": drop_hi < t (a rise of error counts here);
- "inconclusive": anything else (a single seed, a single axis value, an unresolved drop or end); the
  ``note`` says which.

Baselines do not depend on the model, and most not on T: their rows are judged once per group of
cells that share their prompts (``collapse_baselines``), not once per model; a baseline whose error
does not depend on T has no task verdict. The zero predictor, the yardstick of err/zero, has no verdict.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.stats import page_trend_test

from .fit import group_keys
from .power_law import FORMS, seed_draws


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
AT_CHANCE = "at chance"
BASELINE_MODEL = ""  # the model column of a baseline judged once for every model
ANY_T = math.nan  # the T column of a baseline whose error does not depend on T


@dataclass(frozen=True)
class Rule:
    """The verdict rule's numbers (the module docstring says how they combine)."""

    threshold: float = 0.05  # a resolved drop: the lower end of its interval above this
    chance_margin: float = 0.05  # "at chance": ends at or above 1 - margin of the zero predictor
    level: float = 0.9  # interval level (percentile bootstrap over seeds)
    n_boot: int = 1000
    inf_T: str = "largest"  # T = inf in task verdicts: "largest" (the largest T) or "left out"

    def __post_init__(self):
        if self.inf_T not in ("largest", "left out"):
            raise ValueError(f"inf_T must be 'largest' or 'left out', got {self.inf_T!r}")


def question_named(name: str) -> Question:
    """The registered question called `name`; unknown names fail listing the known ones."""
    if name not in QUESTIONS:
        raise ValueError(f"unknown scaling question {name!r}; known: {sorted(QUESTIONS)}")
    return QUESTIONS[name]


def seed_table(points: pd.DataFrame, axis: str) -> pd.DataFrame:
    """(S, X) seed x axis-value table of a group's mean measure, axis values ascending (inf last)."""
    return points.pivot_table(index="seed", columns=axis, values="err", aggfunc="mean").sort_index(axis=1)


def paired_drops(wide: pd.DataFrame) -> pd.Series:
    """(S,) per-seed relative drop 1 - err(largest)/err(smallest) of a seed x axis-value table
    (columns sorted ascending), over the seeds that have both ends; indexed by seed."""
    ends = wide.iloc[:, [0, -1]].dropna()
    return 1.0 - ends.iloc[:, 1] / ends.iloc[:, 0]


def mean_interval(
    values: np.ndarray, n_boot: int, level: float, rng: np.random.Generator
) -> tuple[float, float]:
    """Percentile interval of the mean of `values` (one per seed) over seeds resampled with
    replacement (NaN for fewer than 2 values)."""
    values = np.asarray(values, float)
    if len(values) < 2:
        return math.nan, math.nan
    means = values[seed_draws(len(values), n_boot, rng)].mean(axis=1)  # (n_boot,)
    tail = 100 * (1 - level) / 2
    lo, hi = np.percentile(means, [tail, 100 - tail])
    return float(lo), float(hi)


drop_interval = mean_interval  # the interval of the mean drop over seeds (its first use)


def trend_p_value(wide: pd.DataFrame) -> float:
    """Page's trend test p-value for error decreasing along the axis, over the seeds with every
    axis value; NaN with fewer than 3 axis values or 2 such seeds."""
    complete = wide.dropna()
    if complete.shape[1] < 3 or complete.shape[0] < 2:
        return math.nan
    # Page's alternative is increase along the columns: order them from largest axis value down
    return float(page_trend_test(complete.to_numpy()[:, ::-1]).pvalue)


def verdict_label(question: Question, v: dict, rule: Rule) -> tuple[str, str]:
    """(label, note) of one group's numbers under the module docstring's rule."""
    chance = 1.0 - rule.chance_margin
    if v["end"] >= chance:
        return AT_CHANCE, f"ends at {v['end']:.3g} of the zero predictor (>= {chance:g})"
    if v["n_seeds"] < 2:
        return INCONCLUSIVE, "fewer than 2 seeds: no interval"
    if v["drop_lo"] > rule.threshold and v["end_hi"] < chance:
        return question.yes, ""
    if v["drop_hi"] < rule.threshold:
        return question.no, ""
    why = []
    if not v["drop_lo"] > rule.threshold:
        why.append(f"drop not resolved above {rule.threshold:.0%}")
    if not v["end_hi"] < chance:
        why.append(f"end not resolved below {chance:g} (upper {v['end_hi']:.3g})")
    return INCONCLUSIVE, "; ".join(why)


def judge_points(
    points: pd.DataFrame,
    question: str,
    *,
    rule: Rule | None = None,
    rng: np.random.Generator | int = 0,
    **rule_fields,
) -> dict:
    """Verdict for one group's points (columns seed, err and the question's axis). Keywords
    (threshold, chance_margin, level, n_boot, inf_T) build the rule when ``rule`` is not given."""
    rule = rule or Rule(**rule_fields)
    q = question_named(question)
    rng = np.random.default_rng(rng)
    wide = seed_table(points, q.axis)
    drops = paired_drops(wide)
    curve = wide.mean(axis=0)
    end_lo, end_hi = mean_interval(wide.iloc[:, -1].dropna().to_numpy(), rule.n_boot, rule.level, rng)
    drop_lo, drop_hi = mean_interval(drops, rule.n_boot, rule.level, rng)
    out = {
        "question": question,
        "axis": q.axis,
        "x_min": wide.columns[0],
        "x_max": wide.columns[-1],
        "n_values": wide.shape[1],
        "n_seeds": int(wide.shape[0]),
        "start": float(curve.iloc[0]),
        "end": float(curve.iloc[-1]),
        "end_lo": end_lo,
        "end_hi": end_hi,
        "low": float(curve.min()),
        "high": float(curve.max()),
        "drop": float(drops.mean()) if len(drops) else math.nan,
        "drop_lo": drop_lo,
        "drop_hi": drop_hi,
        "trend_p": trend_p_value(wide),
        "threshold": rule.threshold,
        "level": rule.level,
    }
    if wide.shape[1] < 2:
        out.update(verdict=INCONCLUSIVE, note=f"a single {q.axis} value")
        return out
    out["verdict"], out["note"] = verdict_label(q, out, rule)
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


def is_model(predictor: pd.Series) -> pd.Series:
    """Rows of a trained model (``model`` or a split row ``model|<level>``), not of a baseline."""
    return predictor.astype(str).str.partition("|")[0] == "model"


def constant_over(part: pd.DataFrame, col: str, ids: list[str]) -> bool:
    """Whether a predictor's err is the same at every value of `col` (to float rounding) once the other
    identifying columns `ids` are fixed."""
    rest = [c for c in ids if c in part and c != col]
    errs = part.groupby(rest, dropna=False)["err"]
    spread = errs.max() - errs.min()  # per group, in pandas' own loops: a lambda per group took minutes
    return bool(len(spread)) and float(spread.max()) <= 1e-9 * max(1.0, float(part["err"].abs().max()))


def collapse_baselines(rows: pd.DataFrame, keys: list[str], question: Question) -> pd.DataFrame:
    """Baseline rows judged once: a baseline whose error is the same in every model's cells (same
    prompts) loses its model (``BASELINE_MODEL``), and one whose error is the same at every T as well
    loses its T (``ANY_T``; in task verdicts it is left out: it cannot task-scale); a baseline that
    differs (the discrete MMSE depends on T) keeps it."""
    ids = list(dict.fromkeys([*keys, "seed", "n", "N", "T", "model"]))
    out = []
    for _, part in rows.groupby("predictor", sort=True):
        if "model" in part and constant_over(part, "model", ids):
            part = part.drop_duplicates([c for c in ids if c in part and c != "model"]).assign(
                model=BASELINE_MODEL
            )
        if "T" in part and constant_over(part, "T", ids):
            if question.axis == "T":
                continue
            part = part.drop_duplicates([c for c in ids if c in part and c != "T"]).assign(T=ANY_T)
        out.append(part)
    return pd.concat(out, ignore_index=True) if out else rows.iloc[0:0]


def verdict_points(table: pd.DataFrame, question: Question, keys: list[str], rule: Rule) -> pd.DataFrame:
    """One row per (keys, seed, axis value) with its mean measure: n = N where a group's cells span
    several N (trained and tested at the same length, seed 001 App. A), every n of a group of one N;
    n >= 1; task verdicts keep T = inf as the largest T unless the rule leaves it out."""
    rows = table
    lattice = [k for k in keys if k != "n"]
    group_Ns = (
        rows.groupby(lattice, dropna=False)["N"].transform("nunique") if lattice else rows["N"].nunique()
    )
    rows = rows[(group_Ns == 1) | (rows["n"] == rows["N"])]
    rows = rows[rows["n"] >= 1]
    if question.axis == "T":
        rows = rows[(rows["T"] > 0) & (np.isfinite(rows["T"]) | (rule.inf_T == "largest"))]
    rows = rows[np.isfinite(rows["err"]) & (rows["err"] > 0)]
    cols = list(dict.fromkeys([*keys, "seed", question.axis]))
    return rows.groupby(cols, dropna=False, sort=True)["err"].mean().reset_index()


def judged_points(
    table: pd.DataFrame, question: str, *, by: tuple[str, ...] | None, rule: Rule, against_zero: bool
) -> tuple[list[str], list[pd.DataFrame]]:
    """(group keys, (the trained models' points, the baselines' points)) as scaling_verdicts judges them:
    one row per (keys, seed, axis value) with its mean measure (``verdict_points``); a part without rows
    stays empty."""
    q = question_named(question)
    keys = group_keys(table, FORMS[question], by)
    table = relative_to_zero(table, keys) if against_zero else table.assign(measure="err")
    keys = [*keys, "measure"]  # constant within a group: carried into the verdict rows
    if "predictor" in table:  # the zero predictor is the yardstick (err/zero = 1), not a candidate
        table = table[table["predictor"].astype(str).str.partition("|")[0] != "zero"]
    trained = is_model(table["predictor"]) if "predictor" in table else pd.Series(True, index=table.index)
    parts = [table[trained], collapse_baselines(table[~trained], keys, q)]
    return keys, [part if part.empty else verdict_points(part, q, keys, rule) for part in parts]


def scaling_verdicts(
    table: pd.DataFrame,
    question: str,
    *,
    by: tuple[str, ...] | None = None,
    rule: Rule | None = None,
    rng: np.random.Generator | int = 0,
    against_zero: bool = True,
    **rule_fields,
) -> pd.DataFrame:
    """One verdict row per group of the tidy table for `question` ("context" or "task"); the trained
    models' rows first, then each baseline once (``collapse_baselines``). `against_zero` judges
    err / err_zero where the zero predictor ran on the same prompts (the module docstring says why).
    Keywords as judge_points build the rule when ``rule`` is not given."""
    rule = rule or Rule(**rule_fields)
    rng = np.random.default_rng(rng)
    keys, parts = judged_points(table, question, by=by, rule=rule, against_zero=against_zero)
    rows = []
    for pts in parts:
        if pts.empty:
            continue
        for key, group in pts.groupby(keys, dropna=False, sort=True):
            rows.append({**dict(zip(keys, key)), **judge_points(group, question, rule=rule, rng=rng)})
    return pd.DataFrame(rows)


def seed_drops(
    table: pd.DataFrame,
    question: str,
    *,
    by: tuple[str, ...] | None = None,
    rule: Rule | None = None,
    against_zero: bool = True,
) -> pd.DataFrame:
    """The per-seed drops behind the trained models' verdicts (``paired_drops`` of each group that
    scaling_verdicts judges): one row per (group keys, seed) with columns ``drop`` and the group's ends along
    the axis, ``x_min`` and ``x_max``."""
    rule = rule or Rule()
    q = question_named(question)
    keys, (trained, _) = judged_points(table, question, by=by, rule=rule, against_zero=against_zero)
    rows = []
    for key, group in trained.groupby(keys, dropna=False, sort=True) if not trained.empty else ():
        wide = seed_table(group, q.axis)
        if wide.shape[1] < 2:
            continue
        ends = {"x_min": wide.columns[0], "x_max": wide.columns[-1]}
        rows += [
            {**dict(zip(keys, key)), "seed": s, "drop": float(d), **ends}
            for s, d in paired_drops(wide).items()
        ]
    return pd.DataFrame(rows, columns=[*keys, "seed", "drop", "x_min", "x_max"])


def context_verdicts(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """Does each (sweep, model, T, predictor) context-scale? Keywords as scaling_verdicts."""
    return scaling_verdicts(table, "context", **kwargs)


def task_verdicts(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """Does each (sweep, model, n, predictor) task-scale? Keywords as scaling_verdicts."""
    return scaling_verdicts(table, "task", **kwargs)


def value_text(x) -> str:
    """A number as a reader writes it: inf, 16, 1e5, 0.1 (NaN: 'any')."""
    x = float(x)
    if math.isnan(x):
        return "any"
    if math.isinf(x):
        return "inf"
    if x >= 1e4 and math.log10(x) == int(math.log10(x)):
        return f"1e{int(math.log10(x))}"
    return f"{x:g}"
