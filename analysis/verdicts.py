"""The verdicts in words: the answer line, the verdict table as a reader wants it, the rule stated once.

The verdicts themselves (the rule, its numbers, the labels) are scaling.judge.verdicts': the adaptive driver
judges with the same rule. This module only says them (papers/context_scaling/analysis/plugin.py's summary and
report).
"""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from scaling.judge.verdicts import (
    AT_CHANCE,
    BASELINE_MODEL,
    INCONCLUSIVE,
    Question,
    Rule,
    is_model,
    question_named,
    value_text,
)


def rule_text(rule: Rule) -> str:
    """The rule in words, for the report (stated once, above the verdict table), its margins named."""
    t, m, lv = f"{rule.threshold:.0%}", f"{rule.chance_margin:.0%}", f"{rule.level:.0%}"
    chance = f"{1 - rule.chance_margin:g}"
    inf = "counts as the largest T" if rule.inf_T == "largest" else "is left out"
    return (
        f"Practical margin {t} (--margin), chance margin {m}, {lv} intervals, at least {rule.min_seeds} "
        "seeds. Measure: the model's error divided by the zero predictor's on the same prompts (err/zero; "
        "1 = predicting zero). drop = 1 - err(largest)/err(smallest), its ratio's geometric mean over "
        f"seeds; intervals are {lv} Student t intervals over seeds on the log scale (their simulated "
        "coverage holds the level at 3, 5 and 10 seeds: docs/analysis.md). With fewer than "
        f"{rule.min_seeds} seeds there is no interval and no verdict: 'inconclusive: too few seeds'. A "
        f"model is 'at chance' when the interval of its final err/zero lies at {chance} or above (within "
        f"{m} of the zero predictor, or worse), whatever its trend, and inconclusive when that interval "
        f"straddles {chance}. With the end resolved below {chance}: a model scales when the drop's interval "
        f"lies above the {t} margin; it 'scales weakly' when the drop's interval lies above 0 but under {t} "
        f"(a real drop under the margin); 'does not scale' when the drop's interval lies below {t} and is "
        "not above 0; otherwise inconclusive. Task verdicts: T = inf (a fresh task for every prompt) "
        f"{inf}; baselines that do not depend on T have none. Page's trend test p (decreasing error; >= 3 "
        "axis values and >= 2 seeds) is reported, not required."
    )


def setting_columns(verdicts: pd.DataFrame) -> list[str]:
    """The group columns beyond sweep/model/T/n/predictor (task.* and other settings that vary)."""
    fixed = {"sweep", "model", "T", "n", "N", "predictor", "measure", "question", "axis", "seed"}
    known = set(VERDICT_NUMBERS)
    return [c for c in verdicts.columns if c not in fixed and c not in known and "." in c]


VERDICT_NUMBERS = [
    "x_min",
    "x_max",
    "n_values",
    "n_seeds",
    "start",
    "end",
    "end_lo",
    "end_hi",
    "low",
    "high",
    "drop",
    "drop_lo",
    "drop_hi",
    "trend_p",
    "threshold",
    "level",
    "verdict",
    "note",
]


def unit_names(verdicts: pd.DataFrame) -> pd.Series:
    """The name a verdict row's unit goes by in the answer: the model (the predictor for a baseline),
    prefixed by the sweep when there are several and followed by the settings that vary."""
    name = verdicts["model"].astype(str)
    if "predictor" in verdicts:
        split = verdicts["predictor"].astype(str).str.partition("|")
        name = name.where(split[0] == "model", split[0]) + np.where(split[2] != "", " [" + split[2] + "]", "")
    if "sweep" in verdicts and verdicts["sweep"].nunique() > 1:
        name = verdicts["sweep"].astype(str) + "/" + name
    named: list[str] = []
    for c in sorted(setting_columns(verdicts), key=lambda c: (not c.endswith(".family"), c)):
        if verdicts[c].nunique() <= 1 or any(  # a setting that follows from one already named is left out
            verdicts.groupby(k)[c].nunique().max() <= 1 for k in named
        ):
            continue
        named.append(c)
        short = c.split(".", 1)[1]
        value = verdicts[c].astype(str)
        name = name + (" (" + value + ")" if short == "family" else f" {short}=" + value)
    return name


def _pct(x: float) -> str:
    return f"{100 * x:.0f}%"


def span(lo: float, hi: float) -> str:
    return f"{lo:.2f}" if f"{lo:.2f}" == f"{hi:.2f}" else f"{lo:.2f}-{hi:.2f}"


def numbers(row: pd.Series) -> str:
    """A verdict row's evidence in words: the measure from start to end, the drop with its interval."""
    q = question_named(row["question"])
    what = "err/zero" if row.get("measure", "err/zero") == "err/zero" else "error"
    text = (
        f"{what} {row['start']:.2f} -> {row['end']:.2f} from {q.axis} = {value_text(row['x_min'])} to "
        f"{value_text(row['x_max'])}"
    )
    if not math.isnan(row["drop_lo"]):
        text += f", drop {_pct(row['drop'])} [{_pct(row['drop_lo'])}, {_pct(row['drop_hi'])}]"
    elif not math.isnan(row["drop"]):
        text += f", drop {_pct(row['drop'])}"
    return text


def group_phrase(rows: pd.DataFrame, q: Question) -> str:
    """The groups of one unit that share a verdict, in words with numbers: the verdict (inconclusive says
    "too few seeds" when that is why for all of them), the fixed values it holds at, and the numbers (of the
    largest fixed value when there are several; for "at chance" the range of err/zero over all of them)."""
    verdict = rows["verdict"].iloc[0]
    at = f"{q.fixed} = {', '.join(value_text(v) for v in rows[q.fixed])}"
    word = {
        q.yes: q.yes,
        q.weak: q.weak,
        q.no: "does not " + q.yes[:-1],
        AT_CHANCE: "at chance",
        INCONCLUSIVE: "inconclusive",
    }[verdict]
    if verdict == INCONCLUSIVE and rows["note"].fillna("").str.startswith("too few seeds").all():
        word = "inconclusive (too few seeds)"
    if verdict == AT_CHANCE:
        what = "err/zero" if rows["measure"].eq("err/zero").all() else "error"
        return (
            f"{word} at {at} ({what} {span(rows['low'].min(), rows['high'].max())} over {q.axis} = "
            f"{value_text(rows['x_min'].min())}..{value_text(rows['x_max'].max())}: "
            "no better than predicting zero)"
        )
    rep = rows.iloc[-1]
    where = f"at {q.fixed} = {value_text(rep[q.fixed])}: " if len(rows) > 1 else ""
    return f"{word} at {at} ({where}{numbers(rep)})"


def unit_sentence(name: str, group: pd.DataFrame, q: Question) -> str:
    """One unit's verdicts on one question in words with numbers, e.g. "gpt2 context-scales at T = inf
    (err/zero 0.42 -> 0.27 from n = 8 to 16, drop 30% [6%, 53%])"; a unit that never scales says so first."""
    group = group.sort_values(q.fixed, na_position="first")
    order = [q.yes, q.weak, INCONCLUSIVE, q.no, AT_CHANCE]
    phrases = [group_phrase(group[group["verdict"] == v], q) for v in order if (group["verdict"] == v).any()]
    if group["verdict"].isin([q.yes, q.weak, INCONCLUSIVE]).any() or not group["verdict"].eq(AT_CHANCE).any():
        return f"{name} " + "; ".join(phrases)
    no = f"does not {q.yes[:-1]}"  # never scales, at chance somewhere: say so first
    return f"{name} {no}: " + "; ".join(p.removeprefix(no + " ") for p in phrases)


def question_sentence(verdicts: pd.DataFrame, question: str) -> str:
    q = question_named(question)
    title = {"context": "Context scaling", "task": "Task scaling"}[question]
    if verdicts.empty:
        return f"{title}: no groups."
    names = unit_names(verdicts)
    return (
        f"{title}: "
        + " | ".join(unit_sentence(name, verdicts[names == name], q) for name in sorted(names.unique()))
        + "."
    )


def answer_line(context: pd.DataFrame, task: pd.DataFrame) -> str:
    """The answer in words with numbers: which models context-scale and which task-scale."""
    return " ".join(question_sentence(v, q) for q, v in (("context", context), ("task", task)))


def display_table(verdicts: pd.DataFrame) -> pd.DataFrame:
    """The verdict table as a reader wants it: numbers rounded, intervals as [lo, hi], T = inf and
    'any' spelled out, a baseline's blank model shown as 'baseline'."""
    if verdicts.empty:
        return verdicts
    v = verdicts
    q = question_named(v["question"].iloc[0])
    out = pd.DataFrame({"question": v["question"]})
    for c in ["sweep", *setting_columns(v)]:
        if c in v and v[c].nunique(dropna=False) > 1:
            out[c] = v[c].astype(str)
    out["model"] = v["model"].replace({BASELINE_MODEL: "(baseline)"})
    out["predictor"] = v["predictor"]
    out[q.fixed] = v[q.fixed].map(value_text)
    out[f"{q.axis} range"] = [f"{value_text(a)} -> {value_text(b)}" for a, b in zip(v["x_min"], v["x_max"])]
    out["seeds"] = v["n_seeds"]
    out["start"] = v["start"].map(lambda x: f"{x:.3f}")
    out["end [interval]"] = [
        f"{e:.3f}" + ("" if math.isnan(lo) else f" [{lo:.3f}, {hi:.3f}]")
        for e, lo, hi in zip(v["end"], v["end_lo"], v["end_hi"])
    ]
    out["drop [interval]"] = [
        ("" if math.isnan(d) else _pct(d)) + ("" if math.isnan(lo) else f" [{_pct(lo)}, {_pct(hi)}]")
        for d, lo, hi in zip(v["drop"], v["drop_lo"], v["drop_hi"])
    ]
    out["trend p"] = v["trend_p"].map(lambda p: "" if math.isnan(p) else f"{p:.2g}")
    out["measure"] = v["measure"] if "measure" in v else "err"
    out["verdict"] = v["verdict"]
    out["note"] = v["note"]
    return out.reset_index(drop=True)


def format_verdicts(
    context: pd.DataFrame,
    task: pd.DataFrame,
    predictors: tuple[str, ...] | None = None,
    rule: Rule | None = None,
) -> str:
    """Text report: the answer in words, the rule once, then both verdict tables (models first,
    then each baseline once; ``predictors`` keeps only those)."""
    pick = [
        v[v["predictor"].isin(predictors)] if predictors and "predictor" in v else v for v in (context, task)
    ]
    answer = [v[is_model(v["predictor"])] if "predictor" in v else v for v in pick]
    lines = [answer_line(*answer), "", f"Rule: {rule_text(rule or Rule())}"]
    for title, verdicts in (("Context scaling", pick[0]), ("Task scaling", pick[1])):
        lines.append(f"\n{title}:")
        lines.append(
            "  (no groups)"
            if verdicts.empty
            else display_table(verdicts).drop(columns="question").to_string(index=False)
        )
    return "\n".join(lines)
