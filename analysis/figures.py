"""The figure layouts: a sweep is drawn as the paper figure it reproduces (seed 001, Figs. 1-8).

The layout is chosen by the sweep's (experiment's) name: ``fig1`` .. ``fig8`` (with or without a profile
suffix, e.g. ``fig1-quick``) and ``smoke``; any other name gets the generic context- and task-scaling
figures. Panels are split by the tidy table's ``param.*`` columns (``param.task.family`` for the task
panels of Figs. 4-8). Each layout returns its figures by file stem and notes for the report (a panel
left out, a panel whose wanted value is absent from the sweep).

- fig1 / fig8: (A) error vs T at N = 10; (B) error vs N at T = 1e5 and 1e6; fig8 a row per task.
- fig2: error vs n of SGPT, GPT-2 and the tuned ridge, and on the right ridge error vs lambda at the
  scanned n (cells with ``eval.lambda_n``) with the models' errors at that n.  fig3: the same, a left
  panel per noise level and a right panel with a curve per level.
  Any other layout whose cells scanned lambda gets those panels as a figure of their own, ``ridge_lambda``.
- fig4: error vs n per task (decision tree, ReLU teacher, sparse linear) with its baselines.
- fig5: error vs N (train = test) per task.  fig6: error vs N per task at the sweep's fixed T.
- fig7: as fig8 with (B) at T = 1e5 only: MLPs on vectorised input, on psi_K features, on both.
- smoke: fig1's panels at the values the sweep has, plus the generic figures.

Every figure plots the verdicts' measure, err/zero: each error (and its band) divided by the zero
predictor's error on the same prompts (same cell, n and noise level; scaling.judge.verdicts), so a value
read off a figure is the value the report's text quotes; the zero predictor is the dotted 1. A table
without the zero predictor's rows keeps the error / E[y^2] the cells log (the same 1 in expectation).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable

import pandas as pd

from scaling.config import format_T

from . import plots

TASK = "param.task.family"


@dataclass
class Drawn:
    """A layout's output: figures by file stem, and notes for the report."""

    figures: dict = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


def pick(present, wanted: list[float]) -> list[float]:
    """The wanted values the sweep has; if none, its largest len(wanted) values (inf counts as largest)."""
    present = sorted(set(present))
    hit = [v for v in wanted if v in present]
    return hit or present[-len(wanted) :]


def nearest(present, wanted: float) -> float | None:
    present = sorted(set(present))
    return min(present, key=lambda v: (abs(v - wanted), v)) if present else None


def task_rows(table: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) per task, or per combination of the settings that vary (the view's setting columns, e.g.
    a ``task.d`` or ``train.steps`` axis: plots.task_label), named by the family alone when it tells them
    apart; one ('', table) when nothing varies."""
    labels = plots.task_label(table)
    if labels.nunique() <= 1:
        return [("", table)]
    if TASK in table and table[TASK].nunique() == labels.nunique() == len(set(zip(table[TASK], labels))):
        labels = table[TASK].astype(str)  # the family alone tells the panels apart: name them by it
    return [(str(name), part) for name, part in table.groupby(labels, sort=True)]


def _prefix(task: str, text: str) -> str:
    return f"{task}: {text}" if task else text


def task_and_context(table: pd.DataFrame, name: str, N_A: float, Ts_B: list[float]) -> Drawn:
    """Figs. 1, 7, 8: per task a row of (A) error vs T at N = N_A and (B) error vs N at each T of Ts_B."""
    drawn, colors = Drawn(), plots.model_colors(table)
    rows = task_rows(table)
    N = nearest(table["N"].unique(), N_A)
    Ts = pick(table["T"].unique(), Ts_B)
    if N != N_A:
        drawn.notes.append(f"panel A: the sweep has no N = {N_A:g}; drawn at N = {N}")
    if [T for T in Ts_B if T in Ts] != Ts_B:
        drawn.notes.append(
            f"panel B: wanted T = {', '.join(format_T(T, short=True) for T in Ts_B)}; "
            f"drawn at T = {', '.join(format_T(T, short=True) for T in Ts)}"
        )
    fig, axes = plots.grid(len(rows), 1 + len(Ts))
    for r, (task, part) in enumerate(rows):
        plots.draw_task(axes[r][0], part, colors, N=int(N), title=_prefix(task, f"(A) error vs T, N = {N}"))
        for c, T in enumerate(Ts, start=1):
            plots.draw_context(
                axes[r][c],
                part[part["T"] == T],
                colors,
                diagonal=True,
                title=_prefix(task, f"(B) error vs N, T = {format_T(T, short=True)}"),
            )
    drawn.figures[name] = plots.legend_below(fig, f"{name}: task scaling (A) and context scaling (B)")
    return drawn


def context_panels(
    table: pd.DataFrame, name: str, diagonal: bool, by_level: bool = False, scans: pd.DataFrame | None = None
) -> Drawn:
    """Figs. 2-6: error vs n (or vs N at n = N) in a panel per task, or per noise level; with ``scans``
    (Figs. 2-3), ridge error vs lambda on the right, a panel per scanned n with a curve per level."""
    drawn, colors = Drawn(), plots.model_colors(table)
    panels = [(task, part, None) for task, part in task_rows(table)]
    levels = [None]
    if by_level:
        found = plots.levels(table)
        panels = [("", table, level) for level in found] or panels
        levels = found or levels
        if not found:
            drawn.notes.append("no per-level rows (model|noise_std=...): one panel over all prompts")
    right = lambda_panels(scans, levels) if scans is not None else []
    if scans is not None and not right:
        drawn.notes.append(
            "right panel (ridge error vs lambda) omitted: no cell scanned lambda "
            "(set eval.lambda_n in the sweep)"
        )
    fig, axes = plots.grid(1, len(panels) + len(right))
    for ax, (task, part, level) in zip(axes[0], panels):
        title = level or task or "all prompts"
        axis = "N" if diagonal else "n"
        plots.draw_context(
            ax, part, colors, diagonal=diagonal, level=level, title=f"error vs {axis}: {title}"
        )
    for ax, (n, drawn_levels) in zip(axes[0][len(panels) :], right):
        plots.draw_lambda(ax, scans, table, colors, n=n, levels=drawn_levels, title=lambda_title(n))
    drawn.figures[name] = plots.legend_below(
        fig, f"{name}: context scaling" + (", ridge vs lambda" if right else "")
    )
    return drawn


def lambda_panels(scans: pd.DataFrame | None, levels: list[str | None]) -> list[tuple[int, list]]:
    """(n, levels drawn) of each ridge-vs-lambda panel: a panel per scanned n, holding a curve for each
    of ``levels`` the scan has (None: all prompts)."""
    if scans is None or scans.empty:
        return []
    found = set(plots.levels(scans))
    drawn = [level for level in levels if level is None or level in found]
    return [(int(n), drawn) for n in sorted(scans["n"].unique())] if drawn else []


def lambda_title(n: int) -> str:
    return f"ridge error vs lambda, n = {n}"


def lambda_figure(table: pd.DataFrame, scans: pd.DataFrame, name: str) -> plots.plt.Figure:
    """The ridge-vs-lambda panels alone (layouts other than Figs. 2-3): a panel per scanned n, a curve
    over all prompts and one per level the scan has."""
    panels = lambda_panels(scans, [None, *plots.levels(scans)])
    fig, axes = plots.grid(1, len(panels))
    colors = plots.model_colors(table)
    for ax, (n, levels) in zip(axes[0], panels):
        plots.draw_lambda(ax, scans, table, colors, n=n, levels=levels, title=lambda_title(n))
    return plots.legend_below(fig, f"{name}: ridge error vs lambda")


def fixed_T(table: pd.DataFrame, name: str, wanted: float) -> Drawn:
    """Fig. 6: error vs N at one T (the wanted T, else the sweep's largest finite T)."""
    finite = [T for T in table["T"].unique() if not math.isinf(T)] or list(table["T"].unique())
    T = wanted if wanted in finite else max(finite)
    drawn = context_panels(table[table["T"] == T], name, diagonal=True)
    drawn.notes.append(f"drawn at T = {format_T(T, short=True)}")
    return drawn


def generic(table: pd.DataFrame, name: str) -> Drawn:
    return Drawn(
        {
            "context_scaling": plots.context_scaling_figure(table, f"{name}: context scaling"),
            "task_scaling": plots.task_scaling_figure(table, f"{name}: task scaling"),
        }
    )


def smoke(table: pd.DataFrame, name: str) -> Drawn:
    drawn = task_and_context(table, name, 10, [1e5, 1e6])
    more = generic(table, name)
    drawn.figures.update(more.figures)
    return drawn


SCANS = ("fig2", "fig3")  # the layouts whose figure holds the lambda scans (its right panels)

LAYOUTS: dict[str, Callable[..., Drawn]] = {
    "fig1": lambda t, name: task_and_context(t, name, 10, [1e5, 1e6]),
    "fig2": lambda t, name, scans=None: context_panels(t, name, diagonal=False, scans=scans),
    "fig3": lambda t, name, scans=None: context_panels(t, name, diagonal=False, by_level=True, scans=scans),
    "fig4": lambda t, name: context_panels(t, name, diagonal=False),
    "fig5": lambda t, name: context_panels(t, name, diagonal=True),
    "fig6": lambda t, name: fixed_T(t, name, 1e5),
    "fig7": lambda t, name: task_and_context(t, name, 10, [1e5]),
    "fig8": lambda t, name: task_and_context(t, name, 10, [1e5, 1e6]),
    "smoke": smoke,
    "generic": generic,
}


def layout_name(experiment: str) -> str:
    """The layout of an experiment: its leading figN / smoke (fig1-quick -> fig1), else 'generic'."""
    match = re.match(r"(fig\d+|smoke)(?![0-9])", experiment)
    return match.group(1) if match and match.group(1) in LAYOUTS else "generic"


def layout_named(name: str) -> Callable[..., Drawn]:
    if name not in LAYOUTS:
        raise ValueError(f"unknown figure layout {name!r}; known: {sorted(LAYOUTS)}")
    return LAYOUTS[name]


def over_zero(frame: pd.DataFrame, table: pd.DataFrame) -> pd.DataFrame:
    """``frame`` in the verdicts' measure (its attrs' ``measure``: "err/zero"): err, err_lo and err_hi divided
    by the zero predictor's error in ``table`` on the same prompts (cell, n and noise level: ``zero`` or
    ``zero|<level>``), when every row has it; else as it is (measure "err": error / E[y^2])."""
    if frame.empty or not {"cell_key", "n", "predictor"} <= set(table.columns):
        return frame
    level = table["predictor"].astype(str).str.partition("|")
    zeros = (
        table[level[0] == "zero"].assign(_level=level[2]).groupby(["cell_key", "n", "_level"])["err"].mean()
    )
    keys = pd.MultiIndex.from_arrays(
        [frame["cell_key"], frame["n"], frame["predictor"].astype(str).str.partition("|")[2]]
    )
    zero = zeros.reindex(keys).to_numpy()
    if not (pd.notna(zero) & (zero > 0)).all():
        return frame
    scaled = frame.assign(**{c: frame[c] / zero for c in ("err", "err_lo", "err_hi") if c in frame})
    scaled.attrs = {**frame.attrs, "measure": "err/zero"}
    return scaled


def draw(
    table: pd.DataFrame, experiment: str, layout: str | None = None, scans: pd.DataFrame | None = None
) -> Drawn:
    """The figures of a sweep in its layout (``layout`` overrides the choice by name); ``scans`` are the
    cells' ridge-vs-lambda rows (``scaling.tracking.table.split_scans``)."""
    name = layout or layout_name(experiment)
    title = name if name not in ("generic",) else experiment
    scans = scans if scans is not None else pd.DataFrame(columns=["n", "lam", "predictor"])
    table, scans = over_zero(table, table), over_zero(scans, table)
    if name in SCANS:
        drawn = layout_named(name)(table, title, scans=scans)
    else:
        drawn = layout_named(name)(table, title)
        if len(scans):
            drawn.figures["ridge_lambda"] = lambda_figure(table, scans, title)
    drawn.notes.insert(0, f"figure layout: {name}")
    return drawn
