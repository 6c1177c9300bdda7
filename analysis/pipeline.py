"""The analysis pipeline, the same for every experiment kind: request -> cells -> table -> verdicts, figures
-> files, report, MLflow run.

``analyse(request)`` resolves the request once (a sweep file is planned once: its cells and their kinds),
picks the kind's analysis plug-in (scaling.kinds.Kind.analysis, "module:OBJECT"; analysis/plugin.py says what
one implements), reads the complete cells from MLflow into the tidy table (scaling.tracking.table; only the
sweep file's planned cells, or one poolable variant of an experiment: scaling.judge.provenance), lets the
plug-in judge and draw them, and writes into the output folder ``table.parquet``, ``ridge_lambda.parquet``
when cells scanned ridge's lambda, ``fits.csv`` when the kind fits, ``verdicts.csv``, the figures as PNG and
SVG and ``report.html``; then logs them to MLflow as a run tagged ``kind=analysis`` under the sweep's parent
run (the report names that run). Nothing goes into the output folder when the request cannot be analysed
(AnalysisError: no such sweep file or experiment, nothing complete, cells that may not be pooled).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator

import pandas as pd
import yaml

from scaling.aside import Aside
from scaling.cells import Cell
from scaling.config import missing_paths_noted
from scaling.judge import provenance
from scaling.kinds.registry import kind
from scaling.planning.plan import SweepError, load_plan, resolved_document
from scaling.plugins import load
from scaling.tracking import BARE, Columns
from scaling.tracking.backends import existing_store
from scaling.tracking.table import RunNames, cell_runs, load_table, split_scans
from scaling.tracking.uri import resolve_tracking_uri

from . import plots
from .plugin import Analysis, AnalysisError, AnalysisResult, Request
from .report import write_report


@dataclass(frozen=True)
class Source:
    """What to read: the experiment, the sweep document (for the report), the planned cells of a sweep file
    (key -> run name; None for an experiment name: every cell run in it counts) and their kinds (None: read
    from the experiment's runs), the grid axes, the ``--set`` overrides (a sweep file's, planning its
    cells; an experiment's, picking one variant) and the planned cells themselves (their settings are
    worked out only where the experiment holds other cells to tell apart from them: ``settings``)."""

    name: str
    document: dict
    planned: dict[str, str] | None
    axes: tuple[str, ...]
    overrides: tuple[str, ...] = ()
    cells: tuple[Cell, ...] = ()
    jobs: frozenset[str] | None = None
    # local files the sweep names and this machine lacks (a model's weights): what running it needs first;
    # reading its runs needs none of them (scaling.config.check_path)
    lacks: tuple[str, ...] = ()
    # the variant read: a sweep file's --set that change cells (scaling.planning.plan.variant_of), an
    # experiment's --set that pick cells; () for the sweep as its file says
    variant: tuple[str, ...] = ()

    def settings(self) -> pd.DataFrame | None:
        """The planned cells' settings (cell_key, model, param.*; None without planned cells): their
        params, 0.2 s a 1,000 cells, asked for only when complete cells of other variants need naming."""
        if not self.cells:
            return None
        settings = pd.DataFrame(
            [{"cell_key": c.key, **{f"param.{k}": v for k, v in c.params().items()}} for c in self.cells]
        )
        return settings.assign(model=settings.get("param.model.name", ""))

    @property
    def folder(self) -> str:
        """Its output folder's name: the experiment's, and a variant's own beside it
        ('smoke+train.steps=200+grid.T=16-64'), so a variant never writes over the sweep's report."""
        return variant_folder(self.name, self.variant)


def variant_folder(name: str, variant: tuple[str, ...]) -> str:
    """``name`` and each ``KEY=VALUE`` of the variant, joined by '+', the values' brackets, commas and
    spaces written '-' (a name over 120 characters ends in a hash of the variant instead)."""
    parts = []
    for assignment in variant:
        key, _, value = (part.strip() for part in assignment.partition("="))
        parts.append(f"{key}={re.sub(r'[^A-Za-z0-9._-]+', '-', value).strip('-')}")
    folder = "+".join([name, *parts])
    if len(folder) > 120:
        folder = f"{name}+{hashlib.sha256(' '.join(variant).encode()).hexdigest()[:12]}"
    return folder


def resolve(request: Request) -> Source:
    """The source of a sweep file (planned once, with the request's profile and overrides, as the sweep ran)
    or of an experiment name."""
    if request.experiment:
        overrides = tuple(request.overrides)
        return Source(request.experiment, {}, None, provenance.DEFAULT_AXES, overrides, variant=overrides)
    try:
        with missing_paths_noted() as lacks:
            plan = load_plan(request.sweep, request.profile, request.overrides)
    except SweepError as err:
        raise AnalysisError(str(err)) from None
    axes = dict.fromkeys(a for p in plan.cells for a in p.axes)
    return Source(
        plan.name,
        plan.document,
        {p.cell.key: p.name for p in plan.cells},
        tuple(dict.fromkeys([*provenance.DEFAULT_AXES[:4], *axes])),
        tuple(request.overrides),
        tuple(p.cell for p in plan.cells),
        frozenset(p.cell.job for p in plan.cells),
        tuple(lacks),
        plan.variant,
    )


def experiment_jobs(uri: str, experiment: str) -> frozenset[str]:
    """The kinds of the experiment's cell runs (a run without a ``job`` param trains)."""
    try:
        runs = existing_store(uri).runs_of_sweep(
            experiment, columns=Columns(params=("job",), metrics=(), tags=())
        )
    except LookupError as err:
        raise AnalysisError(str(err)) from None
    return frozenset({r.params.get("job", "train") for r in runs} or {"train"})


def plugin_for(source: Source, uri: str) -> Analysis:
    """The analysis plug-in of the source's cells: their kinds' (one plug-in per sweep; a sweep that mixes
    kinds of different plug-ins is refused, naming them)."""
    jobs = source.jobs if source.jobs is not None else experiment_jobs(uri, source.name)
    plugins = {kind(job).analysis for job in jobs}
    if len(plugins) > 1:
        raise AnalysisError(
            f"the sweep mixes experiment kinds analysed apart ({', '.join(sorted(jobs))});"
            f" give each its own sweep file"
        )
    return load(plugins.pop())


def restrict_to_plan(
    table: pd.DataFrame,
    missing: pd.DataFrame,
    planned: dict[str, str],
    settings: Callable[[], pd.DataFrame | None] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Only the sweep file's cells: the experiment's other complete cells (cells since removed from the file,
    or made with other ``--set`` overrides) are left out with a note naming the settings in which they differ
    from the planned cells (``settings()``, else the planned cells found complete), and planned cells that
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
    note = ""
    if len(others):
        mine = settings() if settings is not None else None
        note = provenance.other_variants(others, mine if mine is not None else table)
    return table, pd.concat([missing, never], ignore_index=True), [note] if note else []


def grid_axes(uri: str, experiment: str) -> tuple[str, ...]:
    """The grid axes of the sweep file the experiment was last run with (the ``sweep.yaml`` of its parent
    run), else provenance.DEFAULT_AXES."""
    try:
        tracker = existing_store(uri)
        parents = tracker.runs_of_sweep(experiment, kind="sweep", columns=BARE)
        if not parents:
            return provenance.DEFAULT_AXES
        parent = parents[0]
        with tempfile.TemporaryDirectory() as tmp:
            document = yaml.safe_load(
                Path(tracker.download(parent.run_id, "sweep.yaml", tmp, parent.artifact_uri)).read_text()
            )
    except Exception:  # noqa: BLE001 - no parent run or no sweep.yaml: the default axes
        return provenance.DEFAULT_AXES
    grid = (document or {}).get("grid") or {}
    return tuple(dict.fromkeys([*provenance.DEFAULT_AXES, *map(str, grid)]))


def sweep_file_of(uri: str, experiment: str) -> str:
    """The sweep file an experiment ran (its ``sweep_file`` tag), as a path from here when sweeps/ holds it;
    'SWEEP.yaml' when the store does not say."""
    tracker = existing_store(uri)
    experiment_id = tracker.experiment_id(experiment)
    name = tracker.experiment_tags(experiment_id).get("sweep_file") if experiment_id else None
    if not name:
        return "SWEEP.yaml"
    return f"sweeps/{name}" if (Path("sweeps") / name).is_file() else name


def pooled(table: pd.DataFrame, source: Source, uri: str) -> tuple[pd.DataFrame, tuple[str, ...], list[str]]:
    """An experiment's cells that may be pooled (the ``--set`` variant asked for), its grid axes and a note;
    fails when the cells differ beyond the grid axes (scaling.judge.provenance)."""
    axes, models = grid_axes(uri, source.name), set(table["model"]) if len(table) else set()
    try:
        table = provenance.select(table, source.overrides).reset_index(drop=True)
        provenance.check_poolable(table, axes, source.name, sweep_file_of(uri, source.name))
    except provenance.PoolingError as err:
        raise AnalysisError(str(err)) from None
    notes = [f"the cells with {', '.join(source.overrides)}"] if source.overrides else []
    dropped = sorted(models - set(table["model"]))  # a --set one model's preset overrides: said, not silent
    if dropped:
        notes.append(f"no cell of {', '.join(dropped)} has {', '.join(source.overrides)}: left out")
    return table, axes, notes


def planned_beside_runs(request: Request, uri: str) -> tuple[Source, list | None]:
    """The request's source (``resolve``), and the cell runs of its experiment (None where not read here): a
    sweep file is planned in a forked child (scaling.aside) while this process opens the store and searches
    its runs (a 10,000-cell plan took 1 s, opening the store and the search 2.5 s). The plan's errors come
    first, as in order: where the child fails the plan is made here, and a failed search is left to be met
    again by the read."""
    if request.experiment:
        return resolve(request), None
    try:
        name = resolved_document(request.sweep, request.profile, request.overrides)[0].get("name")
    except Exception:  # noqa: BLE001 - a file resolve refuses, naming what is wrong
        name = None
    if not isinstance(name, str) or not name:
        return resolve(request), None
    planning = Aside(lambda: resolve(request))
    try:
        runs = cell_runs(uri, name)
    except Exception:  # noqa: BLE001 - met again by the read, after the plan's own errors
        runs = None
    source = planning.result() or resolve(request)
    return source, runs if source.name == name else None


def read(source: Source, uri: str, out: Path, runs: list | None = None) -> AnalysisResult:
    """The read (not yet judged) result of one experiment (``runs``: its cell runs when read already); fails
    when nothing is complete, or when an experiment's cells differ beyond its grid axes
    (scaling.judge.provenance)."""
    name = source.name
    needs = f"; before it can run, this machine needs: {'; '.join(source.lacks)}" if source.lacks else ""
    try:
        table, missing = load_table(uri, name, runs=runs)
    except LookupError as err:
        raise AnalysisError(f"{err}{needs}") from None
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
                + needs
            )
    elif len(table):
        table, axes, notes = pooled(table, source, uri)
    table, repeated = provenance.drop_repeats(table)
    notes += repeated
    table, scans = split_scans(table)
    kept = set(table["run_id"])
    table.attrs.update(attrs, runs=RunNames({r: n for r, n in attrs.get("runs", {}).items() if r in kept}))
    if table.empty:
        raise AnalysisError(f"experiment {name!r} has no complete cells of this sweep yet")
    result = AnalysisResult(
        name, out, table, missing, tracking_uri=uri, document=source.document, scans=scans, axes=axes
    )
    result.variant = source.variant
    result.notes += notes
    if source.lacks:
        lacks = "; ".join(source.lacks)
        result.notes.append(f"running this sweep again needs what this machine lacks: {lacks}")
    return result


def judged(
    result: AnalysisResult, plugin: Analysis, request: Request, verdicts: Aside | None = None
) -> AnalysisResult:
    """The plug-in's fits and verdicts of a read result (after its ``setup``); ``verdicts``: the verdicts
    being worked out beside the fits (a plug-in's ``verdicts_from_table``), made here where that child
    could not run or failed (its error is met here)."""
    result.plugin, result.request = plugin, request
    result.ui_url = request.ui_url or (result.tracking_uri if result.tracking_uri.startswith("http") else "")
    plugin.setup(result)
    result.fits = plugin.fits(result)
    made = verdicts.result() if verdicts is not None else None
    result.verdicts = made if made is not None else plugin.verdicts(result)
    return result


def write_tables(result: AnalysisResult) -> None:
    """The output folder with the table (and ridge's lambda scans, when any), the fits and the verdicts."""
    result.out.mkdir(parents=True, exist_ok=True)
    scans = result.scans if result.scans is not None and len(result.scans) else None
    for frame, name in (
        (result.table, "table.parquet"),
        (scans, "ridge_lambda.parquet"),
        (result.fits, "fits.csv"),
        (result.verdicts, "verdicts.csv"),
    ):
        if frame is None:
            continue
        path = result.out / name
        if path.suffix == ".parquet":
            frame.to_parquet(path, index=False)
        else:
            frame.to_csv(path, index=False)
        result.files.append(path)


def analyse(request: Request, source: Source | None = None, plugin: Analysis | None = None) -> AnalysisResult:
    """Analyse a sweep (or an experiment) with its kind's plug-in (``plugin`` overrides the choice;
    ``source``: the request already resolved): the tables, figures and report written, the analysis logged
    unless the request says not to."""
    uri = resolve_tracking_uri(request.tracking_uri)
    runs = None
    if source is None:
        source, runs = planned_beside_runs(request, uri)
    plugin = plugin or plugin_for(source, uri)
    folder = Path(request.out) if request.out else Path("analysis_out") / source.folder
    result = read(source, uri, folder.resolve(), runs)
    result.plugin, result.request = plugin, request
    with figures_aside(result) as figures:
        verdicts = Aside(lambda: plugin.verdicts(result)) if plugin.verdicts_from_table else None
        try:
            result = judged(result, plugin, request, verdicts)
        finally:
            if verdicts is not None:
                verdicts.result()  # reaped, whatever happened
        saved = figures()
        write_tables(result)
        result.files += saved()
    report = write_report(result, result.out / "report.html")
    if request.log:

        def named(run_id: str) -> Path:  # the report again, once it can name the run it is logged in
            return write_report(replace(result, run_id=run_id), report)

        result.run_id = log_analysis(uri, source.name, result, report=named)
    result.files.append(report)
    return result


@contextlib.contextmanager
def figures_aside(result: AnalysisResult) -> Iterator[Callable[[], Callable[[], list[Path]]]]:
    """``drawn()``: the plug-in's figures drawn (their notes added to the result), giving ``saved()``: their
    files in the output folder. Where the plug-in's figures read the table alone they are drawn and saved
    from the start of the block in a forked process (scaling/aside.py), into a folder of their own that
    ``saved`` moves in; else ``drawn`` draws them and ``saved`` saves them, as one process does. Nothing of
    them reaches the output folder when the block fails."""
    aside, beside = None, None
    if result.plugin.figures_from_table:
        beside = Path(tempfile.mkdtemp(prefix="analysis-figures-"))
        aside = Aside(lambda: figures_saved(result, beside))

    def drawn() -> Callable[[], list[Path]]:
        made = aside.result() if aside is not None else None
        if made is None:  # not forked, or the child failed: drawn here, where an error is met
            figures, out = result.plugin.figures(result), result.out
            return lambda: [path for stem, fig in figures.items() for path in plots.save(fig, out / stem)]
        files, notes = made
        result.notes += notes
        return lambda: moved(files, result.out)

    try:
        yield drawn
    finally:
        if aside is not None:
            aside.result()  # reaped, whatever happened
            shutil.rmtree(beside, ignore_errors=True)


def figures_saved(result: AnalysisResult, folder: Path) -> tuple[list[Path], list[str]]:
    """The plug-in's figures drawn and saved (PNG and SVG) into ``folder``, and the notes drawing added."""
    before = len(result.notes)
    drawn = result.plugin.figures(result)
    files = [path for stem, fig in drawn.items() for path in plots.save(fig, folder / stem)]
    return files, result.notes[before:]


def moved(files: list[Path], folder: Path) -> list[Path]:
    """The files moved into ``folder`` (which exists), in order; their new paths."""
    return [Path(shutil.move(path, folder / path.name)) for path in files]


def log_analysis(
    uri: str, experiment: str, result: AnalysisResult, extra_tags: dict | None = None, report=None
) -> str:
    """Log the outputs as a run tagged kind=analysis in the sweep's experiment, under its parent run;
    ``report`` (run id -> path) writes the report once the run's id is known, logged into the same run."""
    tags = {"kind": "analysis", "sweep": experiment, **(extra_tags or {})}
    if result.variant:
        tags["variant"] = " ".join(result.variant)
    name = f"analysis {result.title}" + (f" vs {extra_tags['compare_with']}" if extra_tags else "")
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
        return existing_store(uri).log_outputs_run(
            experiment, name, tags, files + [(summary, None)], late=late
        )
