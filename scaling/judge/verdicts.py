"""The verdict rule of seed 001's central question: which models context-scale and which task-scale.

The rule and its numbers, used by the analysis (papers/context_scaling/analysis/plugin.py; its wording of the
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

Intervals over seeds are Student t intervals on the log scale (``log_t_interval``): every value judged is a
positive ratio (err/zero at an end; a seed's end over its start), and seed-to-seed noise of errors is
multiplicative, so the mean of the logs over S seeds with t's S - 1 degrees of freedom gives an interval
of the geometric mean that holds its level: simulated at a nominal 90% it covers 89-90% at 3, 5 and 10
seeds for normal per-seed ratios and for ratios of log-normal errors alike, where the percentile bootstrap
of the mean over seeds (the rule before) covered 53-61% at 3 seeds, 72-79% at 5 and 77-85% at 10, and
Student t of the plain mean 80-88% on the skewed ones (tests/coverage_study.py; docs/analysis.md has the
table; tests/test_interval_coverage.py checks it). Each seed's value already holds its own prompts' noise
(a seed draws its own prompts), so the seeds' spread carries both; a bootstrap over seeds and then prompts
covered 73-85%. Fewer than ``Rule.min_seeds`` (3) seeds give no interval and no verdict: "inconclusive",
note "too few seeds".

- start, end: the geometric means over seeds of the measure at the smallest and the largest axis value;
  end_lo, end_hi the end's ``level`` interval.
- drop: 1 - the geometric mean over seeds of the paired ratio end_s / start_s (seeds with both ends:
  ``n_seeds``), so drop = 1 - end / start when every seed has both ends; drop_lo, drop_hi its interval.
- trend_p: scipy.stats.page_trend_test over the seeds with every axis value, for error decreasing
  along the axis, where there are >= 3 axis values and >= 2 seeds; else NaN. Reported, not part of the
  rule: a curve that saturates (256 tasks as good as fresh ones) has no monotone trend to find, and with
  2 seeds the test cannot go below p = 1/36 even for a perfect order.

The rule (``Rule``; practical margin t = 5%, chance margin m = 5%, 90% intervals, 3 seeds or more):
- "inconclusive" with fewer than ``min_seeds`` seeds behind the drop, whatever the numbers;
- "at chance": the end's interval lies at or above 1 - m (end_lo >= 1 - m), whatever the trend: predicting
  zero does as well, so nothing was learned to scale;
- "inconclusive" when the end's interval straddles 1 - m: whether the model learned anything is not
  settled, so neither is whether it scales. Simulated at the boundary (a true end of 1 - m), each wrong
  side is taken about 5% of the time at a 90% level, and less away from it (tests/test_chance_rule.py);
- otherwise the end is resolved below chance (end_hi < 1 - m), and the drop decides:
- "context-scales" / "task-scales": drop_lo > t;
- "context-scales weakly" / "task-scales weakly": the drop is resolved above zero but lies under the
  margin (0 < drop_lo, drop_hi < t): a real drop too small to count as scaling at the stated margin, said
  as such rather than as none;
- "does not context-scale" / "does not task-scale": drop_hi < t and the drop is not resolved above zero
  (drop_lo <= 0; a resolved rise of error counts here);
- "inconclusive": anything else (a single axis value, a drop whose interval straddles the margin); the
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

from .fit import group_keys
from .power_law import FORMS


@dataclass(frozen=True)
class Question:
    """One scaling question: the axis it varies, the axis it holds fixed, and its verdict labels."""

    axis: str
    fixed: str
    yes: str
    no: str
    weak: str  # a drop resolved above zero but under the practical margin


QUESTIONS: dict[str, Question] = {
    "context": Question("n", "T", "context-scales", "does not context-scale", "context-scales weakly"),
    "task": Question("T", "n", "task-scales", "does not task-scale", "task-scales weakly"),
}
INCONCLUSIVE = "inconclusive"
AT_CHANCE = "at chance"
BASELINE_MODEL = ""  # the model column of a baseline judged once for every model
ANY_T = math.nan  # the T column of a baseline whose error does not depend on T


@dataclass(frozen=True)
class Rule:
    """The verdict rule's numbers (the module docstring says how they combine)."""

    threshold: float = 0.05  # the practical margin: a drop scales when its interval lies above it
    chance_margin: float = 0.05  # "at chance": ends at or above 1 - margin of the zero predictor
    level: float = 0.9  # interval level (Student t over seeds, on the log scale)
    inf_T: str = "largest"  # T = inf in task verdicts: "largest" (the largest T) or "left out"
    min_seeds: int = 3  # fewer seeds give no interval and no verdict

    def __post_init__(self):
        if self.inf_T not in ("largest", "left out"):
            raise ValueError(f"inf_T must be 'largest' or 'left out', got {self.inf_T!r}")
        if not 0 <= self.threshold < 1:
            raise ValueError(f"the margin (threshold) must be in [0, 1), got {self.threshold!r}")
        if not 0 < self.level < 1:
            raise ValueError(f"level must be in (0, 1), got {self.level!r}")
        if self.min_seeds < 3:
            raise ValueError(f"min_seeds must be 3 or more (2 seeds give no interval), got {self.min_seeds}")


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


def t_interval(values: np.ndarray, level: float, min_seeds: int = 3) -> tuple[np.ndarray, np.ndarray]:
    """Student t interval of the mean over the last axis (one value per seed; any leading axes are
    independent samples, as the coverage test draws them): mean -+ t(S - 1) sd / sqrt(S). NaN where there
    are fewer than ``min_seeds`` values."""
    from scipy.stats import t as student_t  # scipy.stats: 0.7 s to import, needed only here

    values = np.asarray(values, float)
    S = values.shape[-1]
    if S < max(min_seeds, 2):
        nan = np.full(values.shape[:-1], math.nan)
        return nan, nan.copy()
    half = student_t.ppf(0.5 + level / 2, S - 1) * values.std(axis=-1, ddof=1) / math.sqrt(S)
    mean = values.mean(axis=-1)
    return mean - half, mean + half


def log_t_interval(
    values: np.ndarray, level: float, min_seeds: int = 3
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(geometric mean, lo, hi) over the last axis of positive values (one per seed): the exp of the mean
    of the logs and of its Student t interval (``t_interval``; the module docstring says why)."""
    logs = np.log(np.asarray(values, float))
    lo, hi = t_interval(logs, level, min_seeds)
    centre = np.exp(logs.mean(axis=-1)) if logs.shape[-1] else np.full(logs.shape[:-1], math.nan)
    return centre, np.exp(lo), np.exp(hi)


@dataclass(frozen=True)
class RatioSide:
    """A comparison of two predictors over seeds: the geometric mean of the per-seed ratios of their
    errors with its interval (``log_t_interval``), and where that interval lies against a band."""

    ratio: float
    lo: float
    hi: float
    n_seeds: int
    side: str  # "inside", "outside" (wholly above or below the band), "straddles", or TOO_FEW


TOO_FEW = "too few seeds"


def ratio_side(ratios: np.ndarray, low: float, high: float, rule: Rule) -> RatioSide:
    """Where the interval of the per-seed ratios' geometric mean lies against [low, high] (e.g. [1/1.5,
    1.5] for "comparable", [0, 1] for "better"): a comparison's interval that straddles a bound decides
    nothing; fewer than ``rule.min_seeds`` seeds give no interval (``TOO_FEW``)."""
    ratios = np.asarray(ratios, float)
    centre, lo, hi = (float(v) for v in log_t_interval(ratios, rule.level, rule.min_seeds))
    if len(ratios) < rule.min_seeds:
        side = TOO_FEW
    elif low <= lo and hi <= high:
        side = "inside"
    elif hi < low or lo > high:
        side = "outside"
    else:
        side = "straddles"
    return RatioSide(centre, lo, hi, len(ratios), side)


def trend_p_value(wide: pd.DataFrame) -> float:
    """Page's trend test p-value for error decreasing along the axis, over the seeds with every
    axis value; NaN with fewer than 3 axis values or 2 such seeds."""
    complete = wide.dropna()
    if complete.shape[1] < 3 or complete.shape[0] < 2:
        return math.nan
    # Page's alternative is increase along the columns: order them from largest axis value down
    from scipy.stats import page_trend_test

    return float(page_trend_test(complete.to_numpy()[:, ::-1]).pvalue)


def verdict_label(question: Question, v: dict, rule: Rule) -> tuple[str, str]:
    """(label, note) of one group's numbers under the module docstring's rule."""
    chance, t = 1.0 - rule.chance_margin, rule.threshold
    if v["n_seeds"] < rule.min_seeds:
        return INCONCLUSIVE, f"too few seeds: {v['n_seeds']} (a verdict needs {rule.min_seeds})"
    end = f"{v['end']:.3g} [{v['end_lo']:.3g}, {v['end_hi']:.3g}]"
    if v["end_lo"] >= chance:
        return AT_CHANCE, f"ends at {end} of the zero predictor, resolved at or above {chance:g}"
    if not v["end_hi"] < chance:
        return INCONCLUSIVE, f"end {end} not resolved on either side of chance ({chance:g})"
    if v["drop_lo"] > t:
        return question.yes, ""
    if 0 < v["drop_lo"] and v["drop_hi"] < t:
        return question.weak, f"drop resolved above 0 but under the {t:.0%} margin"
    if v["drop_hi"] < t and not v["drop_lo"] > 0:
        return question.no, ""
    if v["drop_lo"] > 0:
        return INCONCLUSIVE, f"drop resolved above 0, not on either side of the {t:.0%} margin"
    return INCONCLUSIVE, f"drop not resolved above {t:.0%}"


def geometric_curve(wide: pd.DataFrame) -> pd.Series:
    """The geometric mean over seeds at each axis value of a seed x axis-value table (NaN skipped)."""
    return np.exp(np.log(wide).mean(axis=0))


def judge_points(points: pd.DataFrame, question: str, *, rule: Rule | None = None, **rule_fields) -> dict:
    """Verdict for one group's points (columns seed, err > 0 and the question's axis). Keywords
    (threshold, chance_margin, level, inf_T, min_seeds) build the rule when ``rule`` is not given."""
    rule = rule or Rule(**rule_fields)
    q = question_named(question)
    if not (points["err"] > 0).all():
        raise ValueError("verdicts judge positive errors (ratios on the log scale); got a value <= 0")
    wide = seed_table(points, q.axis)
    ratios = 1.0 - paired_drops(wide)  # (S,) end_s / start_s
    curve = geometric_curve(wide)
    ends = wide.iloc[:, -1].dropna().to_numpy()
    _, end_lo, end_hi = log_t_interval(ends, rule.level, rule.min_seeds)
    ratio, ratio_lo, ratio_hi = log_t_interval(ratios.to_numpy(), rule.level, rule.min_seeds)
    out = {
        "question": question,
        "axis": q.axis,
        "x_min": wide.columns[0],
        "x_max": wide.columns[-1],
        "n_values": wide.shape[1],
        "n_seeds": int(len(ratios) if wide.shape[1] > 1 else wide.shape[0]),
        "start": float(curve.iloc[0]),
        "end": float(curve.iloc[-1]),
        "end_lo": float(end_lo),
        "end_hi": float(end_hi),
        "low": float(curve.min()),
        "high": float(curve.max()),
        "drop": 1.0 - float(ratio),
        "drop_lo": 1.0 - float(ratio_hi),
        "drop_hi": 1.0 - float(ratio_lo),
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


# the columns judged_points reads besides the group keys (relative_to_zero, collapse_baselines and
# verdict_points)
POINT_COLUMNS = ("cell_key", "predictor", "model", "seed", "T", "N", "n", "err")


def judged_points(
    table: pd.DataFrame, question: str, *, by: tuple[str, ...] | None, rule: Rule, against_zero: bool
) -> tuple[list[str], list[pd.DataFrame]]:
    """(group keys, (the trained models' points, the baselines' points)) as scaling_verdicts judges them:
    one row per (keys, seed, axis value) with its mean measure (``verdict_points``); a part without rows
    stays empty."""
    q = question_named(question)
    keys = group_keys(table, FORMS[question], by)
    read = {*keys, *POINT_COLUMNS}  # the columns judged: the others would only be copied by every selection
    table = table[[c for c in table.columns if c in read]]
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
    against_zero: bool = True,
    **rule_fields,
) -> pd.DataFrame:
    """One verdict row per group of the tidy table for `question` ("context" or "task"); the trained
    models' rows first, then each baseline once (``collapse_baselines``). `against_zero` judges
    err / err_zero where the zero predictor ran on the same prompts (the module docstring says why).
    Keywords as judge_points build the rule when ``rule`` is not given."""
    rule = rule or Rule(**rule_fields)
    keys, parts = judged_points(table, question, by=by, rule=rule, against_zero=against_zero)
    rows = []
    for pts in parts:
        if pts.empty:
            continue
        for key, group in pts.groupby(keys, dropna=False, sort=True):
            rows.append({**dict(zip(keys, key)), **judge_points(group, question, rule=rule)})
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
    scaling_verdicts judges): one row per (group keys, seed) with columns ``drop``, ``log_ratio`` (log of
    end_s / start_s, the scale the verdict's interval is on) and the group's ends along the axis, ``x_min``
    and ``x_max``."""
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
            {**dict(zip(keys, key)), "seed": s, "drop": float(d), "log_ratio": math.log1p(-d), **ends}
            for s, d in paired_drops(wide).items()
        ]
    return pd.DataFrame(rows, columns=[*keys, "seed", "drop", "log_ratio", "x_min", "x_max"])


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
