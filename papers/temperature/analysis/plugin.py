"""Analysis of seed 004's temperature kinds (papers.temperature.kind): their plug-in.

``python -m analysis sweeps/temp_*.yaml [--profile P]`` runs the pipeline every kind shares
(analysis/pipeline.py) with this plug-in (``TEMPERATURE``): into ``analysis_out/<experiment>/`` the table,
``verdicts.csv``, the paper's figures as PNG and SVG (fig1 / fig2a / fig2bc / fig3 / fig4 / fig5 / fig6)
and ``report.html``, logged as a ``kind=analysis`` run under the sweep's parent run.

``draw(table)`` gives the paper's figures (one per job found in the table), ``verdicts(table)`` a table a
reader can act on: per panel the best tau, the error (or exact match) at tau = 1 and at the best tau with
90% intervals, and whether the gain is resolved (its interval excludes zero); for the theory panels also
the largest gap between Thm 4.6 and Monte Carlo. Both read the table's columns (the curves each job
writes: predictor, x, tau, err, err_lo, err_hi, curve, source, panel, ... and ``param.job``); the scans'
verdicts also read the cells' ``units.parquet`` (``setup`` loads it: a score per question or prompt).

Each job's verdicts and figures are made where its idea is: theory.py (the theory jobs, Figs. 1, 2, 4 and
5) and scans.py (the tau scans, Figs. 3 and 6), from the rows and columns of verdict_rows.py. Intervals:
the jobs' err_lo / err_hi are 90% intervals (theory Monte Carlo: +-1.645 standard errors over the
prompts; GPT-2: bootstrap over prompts per n; LLM: +-1 standard deviation over the Monte Carlo runs, the
paper's error bars); the scans' verdicts resample the cells' units and are not judged for cells that
logged none.
"""

from __future__ import annotations

from typing import Mapping

import pandas as pd

from analysis.plots import plt
from analysis.plugin import Analysis, AnalysisResult
from papers.temperature.analysis.scans import draw_scan, scan_verdicts
from papers.temperature.analysis.theory import (
    draw_histograms,
    draw_theory,
    histogram_verdicts,
    theory_verdicts,
)
from papers.temperature.analysis.verdict_rows import VERDICT_COLUMNS, job_of, rows_of
from scaling.tracking.table import load_units


def _context_figure(rows: pd.DataFrame, title: str) -> dict[str, plt.Figure]:
    """Fig. 1, or Fig. 2a when every cell is the noise shift's (the temp_fig2 sweep's context cell)."""
    return {("fig2a" if set(rows["figure"].astype(str)) == {"2"} else "fig1"): draw_theory(rows, title)}


# the figures (file stem -> figure) and verdict rows of each temperature kind, by the cells' ``job``
FIGURES = {
    "theory_context": _context_figure,
    "theory_noise": lambda rows, title: {"fig2bc": draw_theory(rows, title)},
    "theory_mean_shift": lambda rows, title: {"fig4": draw_theory(rows, title)},
    "attention_histograms": lambda rows, title: {"fig5": draw_histograms(rows, title)},
    "gpt2_scan": lambda rows, title: {"fig6": draw_scan(rows, title, llm=False)},
    "llm_scan": lambda rows, title: {"fig3": draw_scan(rows, title, llm=True)},
}
VERDICTS = {  # (rows, units, resamples) -> verdict rows; only the scans resample units
    "theory_context": lambda rows, units, resamples: theory_verdicts(rows),
    "theory_noise": lambda rows, units, resamples: theory_verdicts(rows),
    "theory_mean_shift": lambda rows, units, resamples: theory_verdicts(rows),
    "attention_histograms": lambda rows, units, resamples: histogram_verdicts(rows),
    "gpt2_scan": lambda rows, units, resamples: scan_verdicts(rows, "6", False, units, resamples),
    "llm_scan": lambda rows, units, resamples: scan_verdicts(rows, "3", True, units, resamples),
}
SCANS = ("gpt2_scan", "llm_scan")  # the jobs that log units.parquet


def jobs(table: pd.DataFrame) -> list[str]:
    """The table's temperature kinds (the jobs this module draws), sorted."""
    return sorted(job for job in set(job_of(table)) if job in FIGURES)


def draw(table: pd.DataFrame, name: str) -> dict[str, plt.Figure]:
    """The figures of every temperature job in the table, keyed by file stem."""
    figures = {}
    for job in jobs(table):
        figures.update(FIGURES[job](rows_of(table, job), f"{name}: {job}"))
    return figures


def verdicts(
    table: pd.DataFrame, units: Mapping[str, pd.DataFrame | None] | None = None, resamples: int = 1000
) -> pd.DataFrame:
    """The verdict table (VERDICT_COLUMNS) of every temperature job in the table; ``units``: the scan
    cells' units.parquet by run id (scaling.tracking.table.load_units), which the scans' intervals
    resample."""
    out: list[dict] = []
    for job in jobs(table):
        out += VERDICTS[job](rows_of(table, job), units, resamples)
    return pd.DataFrame(out, columns=VERDICT_COLUMNS)


def scan_runs(table: pd.DataFrame) -> list[str]:
    """The run ids of the table's scan cells (the cells whose units the verdicts resample)."""
    return sorted(set(table.loc[job_of(table).isin(SCANS), "run_id"]))


# ----------------------------------------------------------------------------- the plug-in


def answer_line(table: pd.DataFrame) -> str:
    """One line for the report's head: how many panels a tuned tau helps, resolved."""
    if table is None or table.empty:
        return "no verdicts"
    scans = ~table["metric"].astype(str).str.startswith("precondition")  # Fig. 6's are no tau's gain
    judged = table[table["gain"].notna() & table["figure"].isin(["1", "2", "3", "6"]) & scans]
    if "x" in judged:  # LLM: the pooled row of each panel (x NaN); theory and GPT-2 rows are per panel
        judged = judged[judged["x"].isna() | ~judged["figure"].isin(["3"])]
    if judged.empty:
        return f"{len(table)} verdict rows (descriptive figures only)"
    better = judged[judged["gain_lo"] > 0]
    worse = judged[judged["gain_hi"] < 0]
    return (
        f"tuned tau vs tau = 1: a resolved gain in {len(better)} of {len(judged)} panels"
        f" ({', '.join(f'Fig. {f} {p}' for f, p in zip(better['figure'], better['panel'])) or 'none'}),"
        f" a resolved loss in {len(worse)}, unresolved in {len(judged) - len(better) - len(worse)}"
    )


def read_units(result: AnalysisResult) -> None:
    """The scan cells' units.parquet (None for a cell that logged none), and a note naming those."""
    result.units = load_units(result.tracking_uri, scan_runs(result.table))
    unlogged = [r for r, u in result.units.items() if u is None]
    if unlogged:
        result.notes.append(
            f"{len(unlogged)} scan cells logged no units.parquet (per-question or per-prompt scores;"
            " cells run before the scans recorded them): their gains get no interval and are not"
            " judged resolved; rerun those cells"
        )


VERDICT_NOTE = (
    "Intervals are 90%: theory Monte Carlo +-1.645 standard errors over prompts;"
    " GPT-2 scan: Student t over the prompts of one model\n(its prompt seeds), or over the trained models"
    " when each cell trained one; LLM scan: bootstrap over test questions\nand Monte Carlo runs (paired"
    " between taus); each verdict says what its interval covers. A gain is resolved when its interval\n"
    "excludes zero. Fig. 6's precondition rows: the shift degrades tau = 1, its error non-monotone in"
    " n <= 2d.\ntheory_gap is the largest |Thm 4.6 - Monte Carlo| over a panel's points: the finite-l effect"
    " of a large-l theory."
)

# the paper's figures of each temperature job in the table, the verdict rows, the answer line
TEMPERATURE = Analysis(
    verdicts=lambda result: verdicts(result.table, result.units, result.request.bootstrap),
    figures=lambda result: draw(result.table, result.experiment),
    answer=lambda result: answer_line(result.verdicts),
    setup=read_units,
    verdict_note=VERDICT_NOTE,
)
