"""The analysis of one sweep, or a comparison of two: load the table, fit, judge, draw, report, log.

One sweep (``analyse``) writes into its output folder: ``table.parquet``, ``fits.csv``, ``verdicts.csv``,
``ridge_lambda.parquet`` when cells scanned ridge's lambda, the layout's figures (``figures.py``) as PNG
and SVG, ``report.html``; and logs them to MLflow as a run
tagged ``kind=analysis`` under the sweep's parent run (so the UI shows it beside the cells).

Two sweeps (``compare``): both tables, ``differences.csv`` (err of A and B at matching (model, T, N,
predictor, n) points), ``fits_side_by_side.csv``, overlaid figures and ``report.html``; logged as a
``kind=analysis`` run (tag ``compare_with``) in the first sweep's experiment only.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field, replace
from pathlib import Path

import pandas as pd
import yaml

from scaling.tracking import Tracker

from . import compare as comparing
from . import figures, plots
from .fit import fit_all
from .load import load_table, split_scans
from .report import write_comparison, write_report
from .verdicts import answer_line, context_verdicts, format_verdicts, task_verdicts


class AnalysisError(RuntimeError):
    """The analysis cannot run (no such sweep or experiment, nothing complete yet)."""


@dataclass
class AnalysisResult:
    experiment: str
    out: Path
    table: pd.DataFrame
    missing: pd.DataFrame
    files: list[Path] = field(default_factory=list)
    fits: pd.DataFrame | None = None
    verdicts: pd.DataFrame | None = None
    run_id: str | None = None
    notes: list[str] = field(default_factory=list)
    tracking_uri: str = ""
    scans: pd.DataFrame | None = None  # ridge error vs lambda rows (analysis.load.split_scans)
    document: dict = field(default_factory=dict)

    def answer(self) -> str:
        """The one-line answer for the trained models (not the baselines)."""
        if self.verdicts is None or self.verdicts.empty:
            return "no verdicts"
        v = self.verdicts[self.verdicts["predictor"] == "model"]
        return answer_line(v[v["question"] == "context"], v[v["question"] == "task"])

    def summary(self) -> str:
        cells = self.table["cell_key"].nunique() if len(self.table) else 0
        lines = [
            f"analysis of {self.experiment}: {cells} complete cells, {len(self.missing)} not complete",
            f"wrote {len(self.files)} files to {self.out}",
        ]
        if self.verdicts is not None and len(self.verdicts):
            v = self.verdicts
            lines.append(format_verdicts(v[v["question"] == "context"], v[v["question"] == "task"]))
        if self.run_id:
            lines.append(f"logged to MLflow as run {self.run_id}")
        return "\n".join(lines)


def resolve_experiment(
    sweep: str | None, experiment: str | None, profile: str
) -> tuple[str, dict, dict[str, str] | None]:
    """The experiment to read, the sweep document (for the report) and, for a sweep file, its planned
    cells (key -> run name); with only an experiment name every cell run in it counts."""
    if experiment:
        return experiment, {}, None
    from scaling.plan import SweepError, load_plan

    try:
        plan = load_plan(sweep, profile)
    except SweepError as err:
        raise AnalysisError(str(err)) from None
    return plan.name, plan.document, {p.cell.key: p.cell.name for p in plan.cells}


def restrict_to_plan(
    table: pd.DataFrame, missing: pd.DataFrame, planned: dict[str, str]
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Only the sweep file's cells: runs of cells since removed from the file are left out (with a note),
    and planned cells that never started are listed as missing."""
    stale = set(table["cell_key"]) - set(planned)
    table = table[table["cell_key"].isin(planned)].reset_index(drop=True)
    missing = missing[missing["cell_key"].isin(planned)] if len(missing) else missing
    seen = set(table["cell_key"]) | set(missing["cell_key"] if len(missing) else [])
    never = pd.DataFrame(
        [
            {"cell_key": k, "run_id": "", "name": n, "status": "not started", "error": ""}
            for k, n in planned.items()
            if k not in seen
        ]
    )
    notes = (
        [f"{len(stale)} complete cells in the experiment are not in the sweep file and were left out"]
        if stale
        else []
    )
    return table, pd.concat([missing, never], ignore_index=True), notes


def read(
    name: str, document: dict, uri: str, out: Path, planned: dict[str, str] | None = None
) -> AnalysisResult:
    """The loaded (not yet analysed) result of one experiment; fails when nothing is complete."""
    try:
        table, missing = load_table(uri, name)
    except LookupError as err:
        raise AnalysisError(str(err)) from None
    notes: list[str] = []
    if planned is not None:
        table, missing, notes = restrict_to_plan(table, missing, planned)
    table, scans = split_scans(table)
    if table.empty:
        raise AnalysisError(f"experiment {name!r} has no complete cells of this sweep yet")
    out.mkdir(parents=True, exist_ok=True)
    result = AnalysisResult(name, out, table, missing, tracking_uri=uri, document=document, scans=scans)
    result.notes += notes
    return result


def analyse(
    sweep: str | None,
    experiment: str | None = None,
    profile: str = "",
    tracking_uri: str | None = None,
    out: Path | None = None,
    bootstrap: int = 1000,
    log: bool = True,
    layout: str | None = None,
):
    """Analyse a sweep (or an experiment) with the analysis plug-in of its cells' experiment kind
    (scaling.kinds.Kind.analysis, "module:function"); every plug-in takes these arguments."""
    import importlib

    plugin = analysis_plugin(sweep, experiment, profile, tracking_uri)
    module, function = plugin.split(":")
    return getattr(importlib.import_module(module), function)(
        sweep, experiment, profile, tracking_uri, out, bootstrap, log, layout
    )


def analysis_plugin(sweep: str | None, experiment: str | None, profile: str, tracking_uri: str | None) -> str:
    """The analysis plug-in of the sweep's cells: their kinds' (one plug-in per sweep; a sweep that mixes
    kinds of different plug-ins is refused, naming them)."""
    from scaling.kinds import kind
    from scaling.plan import SweepError, load_plan
    from scaling.tracking import resolve_tracking_uri

    if experiment:
        try:
            runs = Tracker(resolve_tracking_uri(tracking_uri)).runs(experiment, "tags.kind = 'cell'")
        except LookupError as err:
            raise AnalysisError(str(err)) from None
        jobs = {r.data.params.get("job", "train") for r in runs} or {"train"}
    else:
        try:
            jobs = {p.cell.job for p in load_plan(sweep, profile).cells}
        except SweepError as err:
            raise AnalysisError(str(err)) from None
    plugins = {kind(job).analysis for job in jobs}
    if len(plugins) > 1:
        raise AnalysisError(
            f"the sweep mixes experiment kinds analysed apart ({', '.join(sorted(jobs))});"
            f" give each its own sweep file"
        )
    return plugins.pop()


def analyse_training(
    sweep: str | None,
    experiment: str | None = None,
    profile: str = "",
    tracking_uri: str | None = None,
    out: Path | None = None,
    bootstrap: int = 1000,
    log: bool = True,
    layout: str | None = None,
) -> AnalysisResult:
    """The training kind's analysis: table, fits, verdicts, the layout's figures, report, logged."""
    from scaling.tracking import resolve_tracking_uri

    name, document, planned = resolve_experiment(sweep, experiment, profile)
    uri = resolve_tracking_uri(tracking_uri)
    result = read(name, document, uri, (out or Path("analysis_out") / name).resolve(), planned)
    fit_and_write(result, bootstrap)
    drawn = figures.draw(result.table, name, layout, result.scans)
    result.notes += drawn.notes
    for stem, fig in drawn.figures.items():
        result.files += plots.save(fig, result.out / stem)
    result.files.append(write_report(result, result.out / "report.html"))
    if log:
        result.run_id = log_analysis(uri, name, result)
    return result


def fit_and_write(result: AnalysisResult, bootstrap: int) -> None:
    """Fits and verdicts into the result, and the table, fits and verdicts into its folder."""
    result.table.to_parquet(result.out / "table.parquet", index=False)
    result.files.append(result.out / "table.parquet")
    if result.scans is not None and len(result.scans):
        result.scans.to_parquet(result.out / "ridge_lambda.parquet", index=False)
        result.files.append(result.out / "ridge_lambda.parquet")
    result.fits, result.verdicts = fits_and_verdicts(result.table, bootstrap)
    for frame, stem in ((result.fits, "fits"), (result.verdicts, "verdicts")):
        frame.to_csv(result.out / f"{stem}.csv", index=False)
        result.files.append(result.out / f"{stem}.csv")


def fit_view(table: pd.DataFrame) -> pd.DataFrame:
    """The table as fit.py and verdicts.py group it: the ``param.task.*`` settings that vary also as
    ``task.*``, so different task settings (the task panels of Figs. 4-8) are never pooled into one fit
    or verdict (settings shared by every cell split nothing and stay out of the tables)."""
    tasks = {
        c: c[len("param.") :]
        for c in table.columns
        if c.startswith("param.task.") and table[c].nunique(dropna=False) > 1
    }
    return table.assign(**{short: table[c] for c, short in tasks.items()})


def fits_and_verdicts(table: pd.DataFrame, bootstrap: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Scaling-law fits of every form and the context/task verdicts of every model, stacked."""
    view = fit_view(table)
    fits = fit_all(view, n_boot=bootstrap)
    verdicts = pd.concat(
        [
            context_verdicts(view, n_boot=bootstrap).assign(question="context"),
            task_verdicts(view, n_boot=bootstrap).assign(question="task"),
        ],
        ignore_index=True,
    )
    return fits, verdicts


def compare(
    first: tuple[str | None, str | None],
    second: tuple[str | None, str | None],
    profile: str = "",
    tracking_uri: str | None = None,
    out: Path | None = None,
    bootstrap: int = 1000,
    log: bool = True,
) -> tuple[AnalysisResult, AnalysisResult, Path]:
    """Compare two sweeps, each given as (sweep file, experiment name): both analysed, one report."""
    from scaling.tracking import resolve_tracking_uri

    uri = resolve_tracking_uri(tracking_uri)
    (name_a, doc_a, plan_a), (name_b, doc_b, plan_b) = (
        resolve_experiment(*first, profile),
        resolve_experiment(*second, profile),
    )
    if name_a == name_b:
        raise AnalysisError(f"both sweeps are the experiment {name_a!r}; compare two different experiments")
    out = (out or Path("analysis_out") / f"{name_a}-vs-{name_b}").resolve()
    results = [
        read(name, doc, uri, out / name, planned)
        for name, doc, planned in ((name_a, doc_a, plan_a), (name_b, doc_b, plan_b))
    ]
    for result in results:
        fit_and_write(result, bootstrap)
    a, b = results
    files = [*a.files, *b.files]
    diffs = comparing.differences(a.table, b.table)
    side = comparing.fits_side_by_side(a.fits, b.fits)
    for frame, stem in ((diffs, "differences"), (side, "fits_side_by_side")):
        frame.to_csv(out / f"{stem}.csv", index=False)
        files.append(out / f"{stem}.csv")
    for stem, fig in comparing.overlay_figures(a.table, b.table).items():
        files += plots.save(fig, out / stem)
    report = write_comparison(a, b, diffs, side, [p for p in files if p.parent == out], out / "report.html")
    files.append(report)
    if log:
        a.run_id = log_analysis(
            uri, name_a, replace(a, out=out, files=files), extra_tags={"compare_with": name_b}
        )
    return a, b, report


def log_analysis(uri: str, experiment: str, result: AnalysisResult, extra_tags: dict | None = None) -> str:
    """Log the outputs as a run tagged kind=analysis in the sweep's experiment, under its parent run."""
    tags = {"kind": "analysis", "sweep": experiment, **(extra_tags or {})}
    name = f"analysis {experiment}" + (f" vs {extra_tags['compare_with']}" if extra_tags else "")
    files = [
        (path, path.parent.relative_to(result.out).as_posix() if path.parent != result.out else None)
        for path in result.files
    ]
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.yaml"
        summary.write_text(
            yaml.safe_dump(
                {
                    "cells": int(result.table["cell_key"].nunique()),
                    "missing": int(len(result.missing)),
                    "out": os.fspath(result.out),
                    "answer": result.answer(),
                    "notes": result.notes,
                }
            )
        )
        return Tracker(uri).log_outputs_run(experiment, name, tags, files + [(summary, None)])
