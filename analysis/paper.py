"""The reproduction report of seed 001: every figure's sweep present in the store, checked claim by claim.

``python -m analysis --paper sweeps/fig*.yaml --profile quick`` analyses each sweep file's experiment that
has complete cells (as ``python -m analysis SWEEP`` does: its own folder and report), then writes one page,
``analysis_out/paper[-PROFILE]/report.html`` with ``claims.csv``: for each figure of the paper (Figs. 1-8),
its figure as drawn from the runs, and each of the paper's claims on it (analysis.claims) with the verdict
and its numbers, and "reproduced", "not reproduced", "inconclusive" or "not run". A figure whose sweep file
is not given, or whose experiment is not in the store, is listed as not run, with the reason.
"""

from __future__ import annotations

import html
from dataclasses import dataclass, replace
from pathlib import Path

import pandas as pd

from scaling.judge.verdicts import Rule

from . import claims as claiming
from .figures import layout_name
from .pipeline import analyse, resolve
from .plugin import AnalysisError, Request
from .report import _page, image_html, table_html
from .training import TRAINING
from .verdicts import rule_text

FIGURES = [f"fig{k}" for k in range(1, 9)]
STATUS_COLOURS = {
    claiming.REPRODUCED: "#dff3df",
    claiming.NOT_REPRODUCED: "#fbe0e0",
    "inconclusive": "#fff3cd",
    claiming.NOT_RUN: "#eeeeee",
}
PAPER = "Abedsoltan et al., Context-Scaling versus Task-Scaling in In-Context Learning (seed 001)"


@dataclass
class Figure:
    """One figure of the paper: its sweep file, experiment, analysis (None when not run) and why not."""

    name: str
    sweep: str = ""
    experiment: str = ""
    result: object = None
    reason: str = "no sweep file given for it"


def analyse_figures(sweeps: list[str], request: Request) -> dict[str, Figure]:
    """Each sweep file's analysis (the request's profile, store, bootstrap, logging and UI address; each in
    its own folder under the paper's), by figure (fig1 .. fig8); files of other layouts are refused."""
    figures = {name: Figure(name) for name in FIGURES}
    for sweep in sweeps:
        side = replace(request, sweep=sweep, experiment=None, overrides=(), layout=None)
        source = resolve(side)
        name = layout_name(source.name)
        if name not in figures:
            raise AnalysisError(
                f"{sweep}: the sweep {source.name!r} is not one of the paper's figures "
                f"({', '.join(FIGURES)}); the reproduction report reads only those"
            )
        figure = figures[name] = Figure(name, sweep, source.name)
        try:
            figure.result = analyse(replace(side, out=paper_folder(request) / source.name), source, TRAINING)
        except AnalysisError as err:
            figure.reason = str(err)
    return figures


def paper_folder(request: Request) -> Path:
    """The report's folder: the request's, else analysis_out/paper[-PROFILE]."""
    default = Path("analysis_out") / ("paper" + (f"-{request.profile}" if request.profile else ""))
    return Path(request.out or default).resolve()


def main_figure(result) -> Path | None:
    """The PNG of a figure's own layout (fig1.png for fig1-quick), else its first PNG."""
    pngs = [p for p in result.files if p.suffix == ".png"]
    own = [p for p in pngs if p.stem == layout_name(result.experiment)]
    return (own or pngs or [None])[0]


def figure_section(figure: Figure, rows: pd.DataFrame, out: Path) -> str:
    title = f"Figure {figure.name[3:]}"
    if figure.result is None:
        where = f" ({html.escape(figure.experiment)})" if figure.experiment else ""
        head = f"<h2>{title}: not run{where}</h2><p>{html.escape(figure.reason)}</p>"
    else:
        result = figure.result
        cells = result.table["cell_key"].nunique()
        link = (result.out / "report.html").relative_to(out) if result.out.is_relative_to(out) else result.out
        head = (
            f"<h2>{title}: experiment {html.escape(result.experiment)}</h2><p>{cells} complete cells, "
            f"{len(result.missing)} not complete; the sweep's own report: "
            f'<a href="{html.escape(str(link))}">{html.escape(str(link))}</a></p>'
        )
        png = main_figure(result)
        head += image_html(png) if png else "<p>(no figure drawn)</p>"
    shown = rows[["panel", "claim", "status", "evidence"]]
    body = "".join(
        f'<tr style="background:{STATUS_COLOURS.get(r.status, "#fff")}"><td>{html.escape(r.panel)}</td>'
        f"<td style='text-align:left'>{html.escape(r.claim)}</td><td><b>{html.escape(r.status)}</b></td>"
        f"<td style='text-align:left;white-space:normal'>{html.escape(r.evidence)}</td></tr>"
        for r in shown.itertuples()
    )
    return head + (
        '<table class="data"><tr><th>panel</th><th>claim</th><th>status</th><th>evidence</th></tr>'
        f"{body}</table>"
    )


def write_paper(figures: dict[str, Figure], request: Request) -> tuple[Path, pd.DataFrame]:
    """The one-page reproduction report and claims.csv; returns the page's path and the claims."""
    out, profile, bootstrap = paper_folder(request), request.profile, request.bootstrap
    out.mkdir(parents=True, exist_ok=True)
    results = {name: f.result for name, f in figures.items() if f.result is not None}
    claims = claiming.evaluate(results, {name: f.reason for name, f in figures.items()})
    claims.to_csv(out / "claims.csv", index=False)
    ran = [f for f in figures.values() if f.result is not None]
    summary = pd.DataFrame(
        [
            {
                "figure": f.name,
                "sweep": f.sweep or "-",
                "experiment": f.experiment or "-",
                "cells": (f.result.table["cell_key"].nunique() if f.result is not None else 0),
                "status": "analysed" if f.result is not None else "not run: " + f.reason,
            }
            for f in figures.values()
        ]
    )
    sections = "".join(figure_section(f, claims[claims["figure"] == f.name], out) for f in figures.values())
    body = f"""<h1>Reproduction report: seed 001{f" ({html.escape(profile)} profile)" if profile else ""}</h1>
<p>{html.escape(PAPER)}. Each claim of the paper is checked on the runs in the store: {len(ran)} of
{len(figures)} figures have complete cells.</p>
<p class="answer">{html.escape(claiming.tally(claims))}.</p>
<p><b>How claims are judged.</b> A scaling claim reads the verdict of the model at the paper's fixed value
(context scaling at the sweep's largest T, task scaling at the n nearest the paper's N = 10).
{html.escape(rule_text(Rule(n_boot=bootstrap)))} A paper claim that a model scales is "not reproduced" when
the model is at chance; a claim that it does not scale is "inconclusive" then (a model that learned nothing
shows neither). "Comparable" means the two errors at the largest context length are within a factor of
{claiming.COMPARABLE:g} of each other. The runs are small (see each figure's sweep file for its profile),
so a claim that does not reproduce here says what this budget shows, not that the paper is wrong.</p>
{table_html(summary, "no figures")}
{sections}"""
    page = out / "report.html"
    page.write_text(_page("seed 001 reproduction report", body))
    return page, claims
