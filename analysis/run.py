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

from scaling.judge import provenance
from scaling.judge.fit import fit_models
from scaling.judge.verdicts import Rule, context_verdicts, task_verdicts
from scaling.table import load_table, split_scans
from scaling.tracking import Tracker
from scaling.tracking.adaptive_waves import read_waves
from scaling.tracking.analysis_runs import log_outputs_run

from . import compare as comparing
from . import figures, plots
from .report import write_comparison, write_report
from .verdicts import answer_line, format_verdicts


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
    scans: pd.DataFrame | None = None  # ridge error vs lambda rows (scaling.table.split_scans)
    document: dict = field(default_factory=dict)
    rule: Rule = field(default_factory=Rule)  # how the verdicts were made (stated in the report)
    axes: tuple[str, ...] = provenance.DEFAULT_AXES  # the settings cells may differ in (the grid axes)
    ui_url: str = ""  # the MLflow UI's address, for links to runs
    waves: list = field(default_factory=list)  # an adaptive sweep's wave records (scaling.adaptive)

    def answer(self) -> str:
        """The one-line answer for the trained models (not the baselines)."""
        if self.verdicts is None or self.verdicts.empty:
            return "no verdicts"
        v = self.verdicts[self.verdicts["predictor"].astype(str).str.partition("|")[0] == "model"]
        return answer_line(v[v["question"] == "context"], v[v["question"] == "task"])

    def view(self) -> pd.DataFrame:
        """The table as fits, verdicts and figures group it (fit_view)."""
        return fit_view(self.table, self.axes)

    def summary(self) -> str:
        cells = self.table["cell_key"].nunique() if len(self.table) else 0
        lines = [
            f"analysis of {self.experiment}: {cells} complete cells, {len(self.missing)} not complete",
            f"wrote {len(self.files)} files to {self.out}",
            *[f"note: {n}" for n in self.notes],
        ]
        if self.verdicts is not None and len(self.verdicts):
            v = self.verdicts
            lines.append(
                format_verdicts(v[v["question"] == "context"], v[v["question"] == "task"], rule=self.rule)
            )
        if self.run_id:
            lines.append(f"logged to MLflow as run {self.run_id}")
        return "\n".join(lines)


@dataclass(frozen=True)
class Source:
    """What to read: the experiment, the sweep document (for the report), the planned cells of a sweep file
    (key -> run name; None for an experiment name: every cell run in it counts), the grid axes, and the
    ``--set`` overrides (a sweep file's, planning its cells; an experiment's, picking one variant)."""

    name: str
    document: dict
    planned: dict[str, str] | None
    axes: tuple[str, ...]
    overrides: tuple[str, ...] = ()
    settings: pd.DataFrame | None = None  # the planned cells' settings: cell_key, model, param.*


def resolve_experiment(
    sweep: str | None, experiment: str | None, profile: str, overrides: tuple[str, ...] = ()
) -> Source:
    """The source of a sweep file (planned with ``profile`` and ``overrides``, as the sweep ran) or of an
    experiment name."""
    if experiment:
        return Source(experiment, {}, None, provenance.DEFAULT_AXES, tuple(overrides))
    from scaling.plan import SweepError, load_plan

    try:
        plan = load_plan(sweep, profile, overrides)
    except SweepError as err:
        raise AnalysisError(str(err)) from None
    axes = dict.fromkeys(a for p in plan.cells for a in p.axes)
    settings = pd.DataFrame(
        [
            {"cell_key": p.cell.key, **{f"param.{k}": v for k, v in p.cell.params().items()}}
            for p in plan.cells
        ]
    )
    return Source(
        plan.name,
        plan.document,
        {p.cell.key: p.cell.name for p in plan.cells},
        tuple(dict.fromkeys([*provenance.DEFAULT_AXES[:4], *axes])),
        tuple(overrides),
        settings.assign(model=settings.get("param.model.name", "")),
    )


def restrict_to_plan(
    table: pd.DataFrame,
    missing: pd.DataFrame,
    planned: dict[str, str],
    settings: pd.DataFrame | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Only the sweep file's cells: the experiment's other complete cells (cells since removed from the file,
    or made with other ``--set`` overrides) are left out with a note naming the settings in which they differ
    from the planned cells (``settings``, else the planned cells found complete), and planned cells that
    never started are listed as missing."""
    others = table[~table["cell_key"].isin(planned)]
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
    mine = settings if settings is not None else table
    note = provenance.other_variants(others, mine) if len(others) else ""
    return table, pd.concat([missing, never], ignore_index=True), [note] if note else []


def grid_axes(uri: str, experiment: str) -> tuple[str, ...]:
    """The grid axes of the sweep file the experiment was last run with (the ``sweep.yaml`` of its parent
    run), else provenance.DEFAULT_AXES."""
    try:
        tracker = Tracker(uri)
        parents = tracker.runs(experiment, "tags.kind = 'sweep'")
        if not parents:
            return provenance.DEFAULT_AXES
        with tempfile.TemporaryDirectory() as tmp:
            document = yaml.safe_load(
                Path(tracker.download(parents[0].info.run_id, "sweep.yaml", tmp)).read_text()
            )
    except Exception:  # noqa: BLE001 - no parent run or no sweep.yaml: the default axes
        return provenance.DEFAULT_AXES
    grid = (document or {}).get("grid") or {}
    return tuple(dict.fromkeys([*provenance.DEFAULT_AXES, *map(str, grid)]))


def read(source: Source, uri: str, out: Path) -> AnalysisResult:
    """The loaded (not yet analysed) result of one experiment; fails when nothing is complete, or when an
    experiment's cells differ beyond its grid axes (scaling.judge.provenance)."""
    name = source.name
    try:
        table, missing = load_table(uri, name)
    except LookupError as err:
        raise AnalysisError(str(err)) from None
    attrs = dict(table.attrs)
    notes: list[str] = []
    axes = source.axes
    if source.planned is not None:
        everything = table
        table, missing, notes = restrict_to_plan(table, missing, source.planned, source.settings)
        if table.empty and len(everything):
            raise AnalysisError(
                f"experiment {name!r} has no complete cells of this sweep file as given yet; "
                + (notes[0] if notes else "")
            )
    elif len(table):
        axes = grid_axes(uri, name)
        try:
            table = provenance.select(table, source.overrides).reset_index(drop=True)
            provenance.check_poolable(table, axes, name)
        except provenance.PoolingError as err:
            raise AnalysisError(str(err)) from None
        if source.overrides:
            notes.append(f"the cells with {', '.join(source.overrides)}")
    table, repeated = provenance.drop_repeats(table)
    notes += repeated
    table, scans = split_scans(table)
    kept = set(table["run_id"])
    table.attrs.update(attrs, runs={r: n for r, n in attrs.get("runs", {}).items() if r in kept})
    if table.empty:
        raise AnalysisError(f"experiment {name!r} has no complete cells of this sweep yet")
    out.mkdir(parents=True, exist_ok=True)
    result = AnalysisResult(
        name, out, table, missing, tracking_uri=uri, document=source.document, scans=scans, axes=axes
    )
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
    overrides: tuple[str, ...] = (),
    ui_url: str = "",
):
    """Analyse a sweep (or an experiment) with the analysis plug-in of its cells' experiment kind
    (scaling.kinds.Kind.analysis, "module:function"); every plug-in takes the positional arguments, and
    those that support them the keywords ``overrides`` (``--set``) and ``ui_url`` (passed only when given)."""
    import importlib

    plugin = analysis_plugin(sweep, experiment, profile, tracking_uri, overrides)
    module, function = plugin.split(":")
    extra = {k: v for k, v in (("overrides", tuple(overrides)), ("ui_url", ui_url)) if v}
    return getattr(importlib.import_module(module), function)(
        sweep, experiment, profile, tracking_uri, out, bootstrap, log, layout, **extra
    )


def analysis_plugin(
    sweep: str | None,
    experiment: str | None,
    profile: str,
    tracking_uri: str | None,
    overrides: tuple[str, ...] = (),
) -> str:
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
            jobs = {p.cell.job for p in load_plan(sweep, profile, overrides).cells}
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
    overrides: tuple[str, ...] = (),
    ui_url: str = "",
) -> AnalysisResult:
    """The training kind's analysis: table, fits, verdicts, the layout's figures, report, logged (the report
    names the analysis run it is logged in)."""
    source, uri, result = open_analysis(sweep, experiment, profile, overrides, tracking_uri, out)
    result.ui_url = ui_url or (uri if uri.startswith("http") else "")
    result.waves = adaptive_waves(uri, source.name)
    fit_and_write(result, bootstrap)
    drawn = figures.draw(result.view(), source.name, layout, result.scans)
    result.notes += drawn.notes
    return save_report_and_log(result, uri, source.name, drawn.figures, write_report, log)


def adaptive_waves(uri: str, experiment: str) -> list[dict]:
    """The wave records on the sweep's parent run when it ran with --adaptive (else none)."""
    tracker = Tracker(uri)
    experiment_id = tracker.experiment_id(experiment)
    return read_waves(tracker, experiment_id, experiment) if experiment_id else []


def open_analysis(
    sweep: str | None,
    experiment: str | None,
    profile: str,
    overrides,
    tracking_uri: str | None,
    out: Path | str | None,
) -> tuple[Source, str, AnalysisResult]:
    """What every kind's analysis starts with: the source (sweep file or experiment), the tracking URI, and
    the read result with its output folder (``out``, else analysis_out/<experiment>)."""
    from scaling.tracking import resolve_tracking_uri

    source = resolve_experiment(sweep, experiment, profile, tuple(overrides))
    uri = resolve_tracking_uri(tracking_uri)
    folder = Path(out) if out else Path("analysis_out") / source.name
    return source, uri, read(source, uri, folder.resolve())


def save_report_and_log(result, uri: str, name: str, drawn: dict, write, log: bool):
    """Save the figures, write the report (``write(result, path)``), and log the outputs as an analysis run,
    rewriting the report once it can name that run; the report is the last of ``result.files``."""
    for stem, fig in drawn.items():
        result.files += plots.save(fig, result.out / stem)
    report = write(result, result.out / "report.html")
    if log:
        result.run_id = log_analysis(
            uri, name, result, report=lambda run_id: write(replace(result, run_id=run_id), report)
        )
    result.files.append(report)
    return result


def fit_and_write(result: AnalysisResult, bootstrap: int) -> None:
    """Fits and verdicts into the result, and the table, fits and verdicts into its folder."""
    result.table.to_parquet(result.out / "table.parquet", index=False)
    result.files.append(result.out / "table.parquet")
    if result.scans is not None and len(result.scans):
        result.scans.to_parquet(result.out / "ridge_lambda.parquet", index=False)
        result.files.append(result.out / "ridge_lambda.parquet")
    result.rule = Rule(n_boot=bootstrap)
    result.fits, result.verdicts = fits_and_verdicts(result.view(), result.rule)
    for frame, stem in ((result.fits, "fits"), (result.verdicts, "verdicts")):
        frame.to_csv(result.out / f"{stem}.csv", index=False)
        result.files.append(result.out / f"{stem}.csv")


def fit_view(table: pd.DataFrame, axes=provenance.DEFAULT_AXES) -> pd.DataFrame:
    """The table as fits, verdicts and figures group it: the settings that vary between cells and are task
    settings or grid axes (``param.task.d`` -> ``task.d``, ``param.train.steps`` -> ``train.steps``;
    scaling.judge.provenance.setting_columns) also as columns of their own, so cells of different settings
    (the task panels of Figs. 4-8, a ``train.steps`` axis) are never pooled into one fit, verdict or curve
    (settings shared by every cell split nothing and stay out of the tables)."""
    columns = provenance.setting_columns(table, axes)
    return table.assign(**{short: table[c].astype(str) for short, c in columns.items()})


def fits_and_verdicts(view: pd.DataFrame, rule: Rule) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Scaling-law fits of the trained models (every form; fit.fit_models) and the context/task verdicts of
    every model and baseline under ``rule``, stacked."""
    fits = fit_models(view, n_boot=rule.n_boot, level=rule.level)
    verdicts = pd.concat(
        [
            context_verdicts(view, rule=rule).assign(question="context"),
            task_verdicts(view, rule=rule).assign(question="task"),
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
    source_a, source_b = resolve_experiment(*first, profile), resolve_experiment(*second, profile)
    name_a, name_b = source_a.name, source_b.name
    if name_a == name_b:
        raise AnalysisError(f"both sweeps are the experiment {name_a!r}; compare two different experiments")
    out = (out or Path("analysis_out") / f"{name_a}-vs-{name_b}").resolve()
    results = [read(source, uri, out / source.name) for source in (source_a, source_b)]
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


def log_analysis(
    uri: str, experiment: str, result: AnalysisResult, extra_tags: dict | None = None, report=None
) -> str:
    """Log the outputs as a run tagged kind=analysis in the sweep's experiment, under its parent run;
    ``report`` (run id -> path) writes the report once the run's id is known, logged into the same run."""
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
        late = (lambda run_id: [(report(run_id), None)]) if report else None
        return log_outputs_run(Tracker(uri), experiment, name, tags, files + [(summary, None)], late=late)
