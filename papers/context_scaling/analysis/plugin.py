"""Analysis of the training kind (papers.context_scaling.kind, seed 001): its plug-in (analysis/plugin.py).

Seed 001's question, per model and baseline: does the error fall with the context length n at fixed T
(context-scaling) and with the number of tasks T at fixed n (task-scaling)? The plug-in fits the scaling laws
(scaling.judge.fit: ``fits.csv``), judges both questions (scaling.judge.verdicts:
``verdicts.csv``), draws the figures of the sweep's layout (figures.py, or ``--layout``)
and says the answer in words (analysis/verdicts.py); an adaptive sweep's report also shows the path its waves
took. Fits, verdicts and figures read the table split by every setting that varies between cells and is a
task setting or a grid axis (``fit_view``), so cells of different settings are never pooled.
"""

from __future__ import annotations

import pandas as pd

from analysis.plugin import Analysis, AnalysisResult
from analysis.report import fits_html, verdict_html, waves_html
from analysis.verdicts import answer_line, format_verdicts
from papers.context_scaling.analysis import figures
from scaling.judge import provenance
from scaling.judge.fit import fit_models
from scaling.judge.verdicts import Rule, context_verdicts, task_verdicts
from scaling.tracking.backends import existing_store


def fit_view(table: pd.DataFrame, axes=provenance.DEFAULT_AXES) -> pd.DataFrame:
    """The table as fits, verdicts and figures group it: the settings that vary between cells and are task
    settings or grid axes (``param.task.d`` -> ``task.d``, ``param.train.steps`` -> ``train.steps``;
    scaling.judge.provenance.setting_columns) also as columns of their own, so cells of different settings
    (the task panels of Figs. 4-8, a ``train.steps`` axis) are never pooled into one fit, verdict or curve
    (settings shared by every cell split nothing and stay out of the tables)."""
    columns = provenance.setting_columns(table, axes)
    return table.assign(**{short: table[c].astype(str) for short, c in columns.items()})


def adaptive_waves(uri: str, experiment: str) -> list[dict]:
    """The wave records on the sweep's parent run when it ran with --adaptive (else none)."""
    tracker = existing_store(uri)
    experiment_id = tracker.experiment_id(experiment)
    return tracker.read_waves(experiment_id, experiment) if experiment_id else []


def rule(result: AnalysisResult) -> Rule:
    """The verdict rule, with the request's margin (stated in the report and the summary)."""
    return result.request.rule()


def view(result: AnalysisResult) -> pd.DataFrame:
    return fit_view(result.table, result.axes)


def read_waves_into(result: AnalysisResult) -> None:
    result.waves = adaptive_waves(result.tracking_uri, result.experiment)


def fit_table(result: AnalysisResult) -> pd.DataFrame:
    """Scaling-law fits of the trained models (every form; scaling.judge.fit.fit_models)."""
    judging = rule(result)
    return fit_models(view(result), level=judging.level)


def verdict_table(result: AnalysisResult) -> pd.DataFrame:
    """The context and task verdicts of every model and baseline, stacked (column ``question``)."""
    table, judging = view(result), rule(result)
    return pd.concat(
        [
            context_verdicts(table, rule=judging).assign(question="context"),
            task_verdicts(table, rule=judging).assign(question="task"),
        ],
        ignore_index=True,
    )


def layout_figures(result: AnalysisResult) -> dict:
    drawn = figures.draw(view(result), result.experiment, result.request.layout, result.scans)
    result.notes += drawn.notes
    return drawn.figures


def answer(result: AnalysisResult) -> str:
    """The one-line answer for the trained models (not the baselines)."""
    if result.verdicts is None or result.verdicts.empty:
        return "no verdicts"
    v = result.verdicts
    v = v[v["predictor"].astype(str).str.partition("|")[0] == "model"]
    return answer_line(v[v["question"] == "context"], v[v["question"] == "task"])


def verdicts_and_waves_html(result: AnalysisResult) -> str:
    return verdict_html(result.verdicts, rule(result)) + "\n" + waves_html(result.waves)


def fit_sections(result: AnalysisResult) -> list[tuple[str, str]]:
    return [("Scaling-law fits", fits_html(result.fits))]


def summary_lines(result: AnalysisResult) -> list[str]:
    v = result.verdicts
    if v is None or v.empty:
        return []
    context, task = v[v["question"] == "context"], v[v["question"] == "task"]
    return [format_verdicts(context, task, rule=rule(result))]


# fits, context/task verdicts of every model and baseline, the layout's figures, the answer
TRAINING = Analysis(
    verdicts=verdict_table,
    figures=layout_figures,
    answer=answer,
    setup=read_waves_into,
    fits=fit_table,
    verdict_html=verdicts_and_waves_html,
    sections=fit_sections,
    summary=summary_lines,
    figures_from_table=True,
    verdicts_from_table=True,
    layouts=tuple(figures.LAYOUTS),
)
