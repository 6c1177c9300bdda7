"""The analysis side of an experiment kind: the request, the result, and the record a kind's plug-in fills.

As a kind is a record of functions (scaling.kinds.Kind), its analysis is one too (docs/design.md,
"Plug-ins"). ``python -m analysis`` builds one ``Request``; analysis/pipeline.py
resolves and reads the sweep's cells once into an ``AnalysisResult``, asks the kind's plug-in (an
``Analysis`` that scaling.kinds.Kind.analysis names: "module:OBJECT") for its verdicts, figures and
answer, then writes the table, verdicts, figures and report, logs them to MLflow and prints the summary,
for every kind alike. A plug-in gives, as functions of the result:

- ``verdicts``: the verdict table, with a ``verdict`` column in words (``verdicts.csv``);
- ``figures``: file stem -> matplotlib figure (saved as PNG and SVG; may add notes to ``result.notes``
  for the report);
- ``answer``: the one line at the head of the report and the summary;

and, where the kind needs them, ``setup`` (read what else it needs beside the cells), ``fits`` (a fit
table, ``fits.csv``), ``verdict_html`` / ``verdict_note`` (the report's verdict section), ``sections``
(further report sections) and ``summary`` (the verdict lines printed after an analysis).
"""

from __future__ import annotations

import html
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from scaling.judge.provenance import DEFAULT_AXES
from scaling.judge.verdicts import Rule
from scaling.redact import redact
from scaling.tracking.uri import ui_command

from .report import answer_text, run_address, table_html, ui_address


class AnalysisError(RuntimeError):
    """The analysis cannot run (no such sweep or experiment, nothing complete yet)."""


@dataclass(frozen=True)
class Request:
    """What to analyse and how: a sweep file (planned with ``profile`` and ``overrides``, as it ran) or an
    experiment name (``overrides`` then pick one variant of its cells); the MLflow store (None:
    $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here), the output folder (None:
    analysis_out/<experiment>), bootstrap resamples of seed 004's scan intervals, the verdicts' practical
    margin, whether to log the analysis to MLflow, the figure layout (None: by the sweep's name) and the
    MLflow UI's address for links to runs."""

    sweep: str | None = None
    experiment: str | None = None
    profile: str = ""
    overrides: tuple[str, ...] = ()
    tracking_uri: str | None = None
    out: Path | None = None
    bootstrap: int = 1000
    log: bool = True
    layout: str | None = None
    ui_url: str = ""
    margin: float = Rule.threshold  # the verdicts' practical margin (scaling.judge.verdicts.Rule.threshold)

    def rule(self) -> Rule:
        """The verdict rule this request judges by, with its margin."""
        return Rule(threshold=self.margin)


@dataclass
class AnalysisResult:
    """One sweep's analysis: what was read (filled by the pipeline), what the plug-in made of it (fits,
    verdicts), and what was written and logged."""

    experiment: str
    out: Path
    table: pd.DataFrame
    missing: pd.DataFrame
    plugin: Analysis | None = None  # the kind's analysis that judges and draws this result
    request: Request = field(default_factory=Request)
    files: list[Path] = field(default_factory=list)
    fits: pd.DataFrame | None = None
    verdicts: pd.DataFrame | None = None
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    tracking_uri: str = ""
    scans: pd.DataFrame | None = None  # ridge error vs lambda rows (scaling.tracking.table.split_scans)
    document: dict = field(default_factory=dict)
    axes: tuple[str, ...] = DEFAULT_AXES  # the settings cells may differ in (the grid axes)
    ui_url: str = ""  # the MLflow UI's address, for links to runs
    waves: list = field(default_factory=list)  # an adaptive sweep's wave records (scaling.adaptive)
    units: dict = field(default_factory=dict)  # run id -> a scan cell's units.parquet (load_units)
    variant: tuple[str, ...] = ()  # the --set variant read (analysis.pipeline.Source.variant); () for none

    @property
    def title(self) -> str:
        """The experiment, and the variant read when there is one: 'smoke [train.steps=200]'."""
        return f"{self.experiment} [{' '.join(self.variant)}]" if self.variant else self.experiment

    def answer(self) -> str:
        return self.plugin.answer(self) if self.plugin else "no verdicts"

    def summary(self) -> str:
        """What ``python -m analysis`` prints: cells read, notes, the plug-in's verdict lines (long prose
        wrapped, the answer one unit a line), then what it wrote and logged and what to run next."""
        cells = self.table["cell_key"].nunique() if len(self.table) else 0
        lines = [
            f"analysis of {self.title}: {cells} complete cells, {len(self.missing)} not complete",
            *[f"note: {n}" for n in self.notes],
            *readable(self.plugin.summary(self) if self.plugin else [], self.answer()),
        ]
        return "\n".join([*lines, *self.closing()])

    def closing(self) -> list[str]:
        """The summary's last lines: the report and the other files written, the MLflow run, and next:
        the report to open and the MLflow UI on the analysis run (``mlflow ui`` first for a local store)."""
        report = self.out / "report.html"
        lines = [f"wrote {report} and {len(self.files) - 1} more files beside it (table, verdicts, figures)"]
        lines += (
            [f"logged to MLflow as run {self.run_id} of experiment {self.experiment}"] if self.run_id else []
        )
        lines += ["next:", f"  open {report}"]
        serve = ui_command(redact(self.tracking_uri)) if not self.ui_url else None
        where = run_address(self, self.run_id) if self.run_id else ui_address(self)
        return [*lines, *([f"  {serve}"] if serve else []), f"  open {where}"]


def readable(lines: list[str], answer: str, width: int = 110) -> list[str]:
    """Printed lines a terminal shows whole: the answer one unit a line (report.answer_text), other prose
    longer than ``width`` wrapped; a table's lines (columns padded with spaces) as they are."""
    out = []
    for line in "\n".join(lines).splitlines():
        if line == answer:
            out += answer_text(line).splitlines()
        elif len(line) > width and "  " not in line.strip():
            out += textwrap.wrap(line, width, subsequent_indent="  ", break_on_hyphens=False)
        else:
            out.append(line)
    return out


def verdict_list_html(result: AnalysisResult) -> str:
    """The default verdict section: each verdict in words, the table without them, the plug-in's
    ``verdict_note``."""
    verdicts, note = result.verdicts, result.plugin.verdict_note if result.plugin else ""
    lines = "".join(f"<li>{html.escape(str(v))}</li>" for v in verdicts["verdict"])
    note = f"\n<p>{note}</p>" if note else ""
    return f"<ul>{lines}</ul>{table_html(verdicts.drop(columns=['verdict']), 'no verdicts')}{note}"


def answer_and_verdicts(result: AnalysisResult) -> list[str]:
    """The default summary lines, printed after the analysis's counts and notes: the answer, then each
    verdict."""
    return [result.plugin.answer(result), *(f"- {v}" for v in result.verdicts["verdict"])]


@dataclass(frozen=True)
class Analysis:
    """A kind's analysis plug-in: a record of functions of the ``AnalysisResult``, as a kind
    (scaling.kinds.Kind) is one of functions of its cell (the module docstring lists them). ``verdicts``,
    ``figures`` and ``answer`` are every plug-in's own; the others have defaults. Each function gets the
    result and may read anything on it (its ``table``, ``request``, the ``verdicts`` once made, the
    ``plugin`` itself) and keeps what it reads for later on it (``result.units``, ``result.notes``)."""

    verdicts: Callable[[AnalysisResult], pd.DataFrame]  # a row per verdict, its ``verdict`` column in words
    figures: Callable[[AnalysisResult], dict]  # file stem -> matplotlib figure
    answer: Callable[[AnalysisResult], str]  # one line: what the verdicts say
    # read what the kind needs beside its cells; called first, before any other function
    setup: Callable[[AnalysisResult], None] = lambda result: None
    fits: Callable[[AnalysisResult], pd.DataFrame | None] = lambda result: None  # fits.csv; None: no fits
    verdict_note: str = ""  # how the verdicts are made, in words: a paragraph below the verdict table
    verdict_html: Callable[[AnalysisResult], str] = verdict_list_html  # the report's verdict section
    # further report sections after the figures, as (heading, HTML)
    sections: Callable[[AnalysisResult], list[tuple[str, str]]] = lambda result: []
    summary: Callable[[AnalysisResult], list[str]] = answer_and_verdicts  # printed after an analysis
    # the figures read the table alone (not setup's reads, fits or verdicts): drawn and saved in a process
    # of their own while the fits and verdicts are worked out (scaling/aside.py)
    figures_from_table: bool = False
    # the verdicts read the table and the request alone (not setup's reads or the fits): worked out in a
    # process of their own while the fits are (scaling/aside.py)
    verdicts_from_table: bool = False
    # the figure layouts it draws, one of which ``--layout`` may pick (empty: none to pick)
    layouts: tuple[str, ...] = ()
