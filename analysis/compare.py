"""Comparing two sweeps (say two versions of seed 001's Fig. 1): matching points, fits side by side,
overlaid curves, one report.

``compare`` reads both sweeps (analysis/pipeline.py) and judges each with its kind's plug-in (the training
kind's: papers/context_scaling/analysis/plugin.py), writes each one's tables into ``<out>/<experiment>/``, and
into ``<out>`` ``differences.csv`` (err of A and B at matching (model, T, N, predictor, n) points),
``fits_side_by_side.csv``, the overlaid figures and ``report.html``; logged as a ``kind=analysis`` run (tag
``compare_with``) in the first sweep's experiment only.

Points match on (model, T, N, predictor, n) and the task family when both tables have one; other task
settings may differ (a quick profile at d = 4 against the full sweep at d = 8). Errors are means over
seeds; ``diff`` = err_B - err_A and ``ratio`` = err_B / err_A.
"""

from __future__ import annotations

import html
import math
from dataclasses import replace
from pathlib import Path

import matplotlib.pyplot as plt
import pandas as pd

from scaling.config import format_T
from scaling.tracking.uri import resolve_tracking_uri

from . import plots
from .pipeline import judged, log_analysis, plugin_for, read, resolve, write_tables
from .plugin import AnalysisError, AnalysisResult, Request
from .report import _page, image_html, sweep_sections, table_html

POINT_KEYS = ["model", "T", "N", "predictor", "n"]
FIT_VALUES = [
    "E",
    "E_lo",
    "E_hi",
    "A",
    "A_lo",
    "A_hi",
    "alpha",
    "alpha_lo",
    "alpha_hi",
    "B",
    "B_lo",
    "B_hi",
    "beta",
    "beta_lo",
    "beta_hi",
    "n_points",
    "n_seeds",
    "converged",
    "note",
]
FIT_DROP = ["sweep", "E_fixed", "message", "loss", "level"]
MAX_OVERLAY_PANELS = 12


def match_keys(a: pd.DataFrame, b: pd.DataFrame) -> list[str]:
    family = "param.task.family"
    return POINT_KEYS + ([family] if family in a and family in b else [])


def differences(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """err of A and B (means over seeds) at every point both have, with diff and ratio."""
    keys = match_keys(a, b)
    mean_a = a.groupby(keys, dropna=False).agg(err_A=("err", "mean"), seeds_A=("seed", "nunique"))
    mean_b = b.groupby(keys, dropna=False).agg(err_B=("err", "mean"), seeds_B=("seed", "nunique"))
    both = mean_a.join(mean_b, how="inner").reset_index()
    both["diff"] = both["err_B"] - both["err_A"]
    both["ratio"] = both["err_B"] / both["err_A"]
    return both.sort_values(keys, ignore_index=True)


def fits_side_by_side(a: pd.DataFrame, b: pd.DataFrame) -> pd.DataFrame:
    """One row per fit group both sweeps have: A's and B's parameters and intervals side by side."""
    keys = [
        c
        for c in a.columns
        if c in b.columns and c not in FIT_VALUES + FIT_DROP and not c.startswith("task.")
    ]
    if "task.family" in a and "task.family" in b:
        keys.append("task.family")
    left = a[keys + [c for c in FIT_VALUES if c in a]]
    right = b[keys + [c for c in FIT_VALUES if c in b]]
    merged = left.merge(right, on=keys, how="inner", suffixes=("_A", "_B"))
    order = keys + [f"{c}_{s}" for c in FIT_VALUES for s in ("A", "B") if f"{c}_{s}" in merged]
    return merged[order]


def draw_models(ax, part: pd.DataFrame, x: str, style: str, colors: dict, sweep: str, band: bool) -> None:
    """One sweep's trained models on ``ax``: the error (mean over seeds) against ``x``, in line ``style``
    and each model's colour, labelled with the sweep; with the interval as a band where ``band``."""
    for model, rows in part.groupby("model"):
        curve = plots.over_seeds(rows, [x]).sort_values(x)
        ax.plot(
            curve[x], curve["err"], style, color=colors[model], marker="o", ms=3, label=f"{model} ({sweep})"
        )
        if band:
            ax.fill_between(curve[x], curve["lo"], curve["hi"], color=colors[model], alpha=0.1, linewidth=0)


def overlay_figures(a: pd.DataFrame, b: pd.DataFrame) -> dict[str, plt.Figure]:
    """Error vs n of the trained models, A solid and B dashed in the same colour, a panel per (T, N)
    that both sweeps have (at most MAX_OVERLAY_PANELS), plus error vs N at n = N per T."""
    keys = match_keys(a, b)
    cells = a[keys[:3]].drop_duplicates().merge(b[keys[:3]].drop_duplicates())
    colors = plots.model_colors(pd.concat([a[["model"]], b[["model"]]]))
    panels = sorted({(T, N) for T, N in zip(cells["T"], cells["N"])})[:MAX_OVERLAY_PANELS]
    fig, axes = plots.grid(1, max(len(panels), 1))
    names = (a["sweep"].iloc[0], b["sweep"].iloc[0])
    for ax, (T, N) in zip(axes[0], panels):
        for table, style, sweep in ((a, "-", names[0]), (b, "--", names[1])):
            part = table[
                (table["T"] == T)
                & (table["N"] == N)
                & (table["predictor"] == "model")
                & table["model"].isin(cells["model"])
            ]
            draw_models(ax, part, "n", style, colors, sweep, band=True)
        plots.finish(ax, "context length n", f"T = {format_T(T, short=True)}, N = {N}", False)
    figs = {
        "compare_context": plots.legend_below(fig, f"{names[0]} (solid) vs {names[1]} (dashed): error vs n")
    }
    Ts = sorted(set(cells["T"]))
    if len(Ts) and (a["N"].nunique() > 1 or b["N"].nunique() > 1):
        fig, axes = plots.grid(1, len(Ts))
        for ax, T in zip(axes[0], Ts):
            for table, style, sweep in ((a, "-", names[0]), (b, "--", names[1])):
                part = table[(table["T"] == T) & (table["n"] == table["N"]) & (table["predictor"] == "model")]
                draw_models(ax, part, "N", style, colors, sweep, band=False)
            plots.finish(ax, "context length N (train = test)", f"T = {format_T(T, short=True)}", False)
        figs["compare_diagonal"] = plots.legend_below(
            fig, f"{names[0]} (solid) vs {names[1]} (dashed): error vs N at n = N"
        )
    return figs


def summary_line(diffs: pd.DataFrame) -> str:
    """How the trained models' errors compare at the matching points."""
    model = diffs[diffs["predictor"] == "model"]
    if model.empty:
        return "no matching points of the trained models"
    ratio = model["ratio"].replace([math.inf, -math.inf], float("nan")).dropna()
    return (
        f"{len(model)} matching points of the trained models; err_B / err_A median {ratio.median():.4g} "
        f"(min {ratio.min():.4g}, max {ratio.max():.4g}); B lower at {(model['diff'] < 0).sum()} points"
    )


def write_comparison(a, b, diffs: pd.DataFrame, side: pd.DataFrame, images: list[Path], path: Path) -> Path:
    """One report comparing sweeps A and B: overlaid curves, differences at matching points, fits side by
    side, then each sweep's own sections (verdicts, fits, missing cells, runs, settings)."""
    names = f"A = {a.experiment}, B = {b.experiment}"
    body = f"""<h1>{html.escape(a.experiment)} vs {html.escape(b.experiment)}</h1><p>{html.escape(names)}</p>
<p class="answer">A: {html.escape(a.answer())}<br>B: {html.escape(b.answer())}</p>
<p>{html.escape(summary_line(diffs))}</p>
<h2>Overlaid curves</h2>{"".join(image_html(p) for p in images if p.suffix == ".png")}
<h2>Differences at matching points (err_B - err_A)</h2>{table_html(diffs, "no matching points")}
<h2>Fits side by side</h2>{table_html(side, "no fit group in both sweeps", precise=True)}
<h2>A: {html.escape(a.experiment)}</h2>{sweep_sections(a, figures=False)}
<h2>B: {html.escape(b.experiment)}</h2>{sweep_sections(b, figures=False)}"""
    path.write_text(_page(f"{a.experiment} vs {b.experiment}", body))
    return path


def compare(
    request: Request, first: tuple[str | None, str | None], second: tuple[str | None, str | None]
) -> tuple[AnalysisResult, AnalysisResult, Path]:
    """Compare two sweeps, each given as (sweep file, experiment name), with the request's profile, store,
    output folder (default analysis_out/A-vs-B), bootstrap and logging: both judged, one report."""
    uri = resolve_tracking_uri(request.tracking_uri)
    sides = [replace(request, sweep=sweep, experiment=name, overrides=()) for sweep, name in (first, second)]
    source_a, source_b = resolve(sides[0]), resolve(sides[1])
    name_a, name_b = source_a.name, source_b.name
    if name_a == name_b:
        raise AnalysisError(f"both sweeps are the experiment {name_a!r}; compare two different experiments")
    out = (request.out or Path("analysis_out") / f"{name_a}-vs-{name_b}").resolve()
    results = [read(source, uri, out / source.name) for source in (source_a, source_b)]
    for result, source, side in zip(results, (source_a, source_b), sides):
        write_tables(judged(result, plugin_for(source, uri), side))
    a, b = results
    files = [*a.files, *b.files]
    diffs = differences(a.table, b.table)
    side = fits_side_by_side(a.fits, b.fits)
    for frame, stem in ((diffs, "differences"), (side, "fits_side_by_side")):
        frame.to_csv(out / f"{stem}.csv", index=False)
        files.append(out / f"{stem}.csv")
    for stem, fig in overlay_figures(a.table, b.table).items():
        files += plots.save(fig, out / stem)
    report = write_comparison(a, b, diffs, side, [p for p in files if p.parent == out], out / "report.html")
    files.append(report)
    if request.log:
        a.run_id = log_analysis(
            uri, name_a, replace(a, out=out, files=files), extra_tags={"compare_with": name_b}
        )
    return a, b, report
