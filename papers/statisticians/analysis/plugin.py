"""Analysis of seed 003's construction kinds (papers.statisticians.kind): their plug-in.

``python -m analysis sweeps/stat_*.yaml`` runs the pipeline every kind shares (analysis/pipeline.py) with this
plug-in (``CONSTRUCTIONS``): the table, ``verdicts.csv``, the figures (PNG and SVG) and ``report.html``,
logged as a ``kind=analysis`` run. The figure depends on the curves present:

- ``gd_vs_L``: cells with a ``constructed`` curve (the gd_transformer kind, issue 22 sweep a): error
  against L at each scored n, the constructed transformer (markers) on explicit gradient descent (lines)
  and the closed form GD converges to (dashed), a colour per lam; the last panel is max |transformer -
  explicit GD| against L. Verdicts: the largest difference over every cell, and per lam and n the error
  at the largest L relative to the closed form.
- ``selection``: cells with a ``selection`` curve (the selection_transformer kind, sweep b): error
  against n per noise level: the selection transformer, each of its K algorithms alone, the baselines
  and the trained model. Verdicts: per noise level the selection's mean error over n relative to what
  sees its data (its own algorithms on its training part, exact-ridge post-ICL validation on its split),
  then to what sees all of each prompt (the per-level ridge, the Bayes mixture, the trained model, its
  algorithms alone), labelled so; and eq. 4.4 over every prompt and prefix.
"""

from __future__ import annotations

import pandas as pd

from analysis.plots import plt
from analysis.plugin import Analysis, AnalysisError, AnalysisResult

EXACT = 1e-8  # the constructed GD "equals" explicit GD when no difference exceeds this
SELECTION_ORDER = (
    "selection",
    "ridge_selection",
    "model",
    "ridge_per_level",
    "ridge",
    "ridge_validation",
    "least_squares",
)
SAME_DATA = "selection_algorithm("  # the selection's own algorithms, fitted on its training part
ALL_DATA = "gd_ridge("  # each algorithm alone on all the examples: twice the selection's training data
LABELS = {
    "selection": "selection transformer",
    "ridge_selection": "post-ICL validation, exact ridge (same data)",
    "model": "trained model",
    "ridge_per_level": "ridge per noise level",
    "ridge": "Bayes mixture posterior",
    "ridge_validation": "post-ICL validation (exact ridge, lambda grid, refitted on all)",
    "least_squares": "least squares",
}


def number(table: pd.DataFrame, column: str, default: float = float("nan")) -> pd.Series:
    return (
        pd.to_numeric(table[column], errors="coerce") if column in table else pd.Series(default, table.index)
    )


# ----------------------------------------------------------------------------- sweep a: GD against L


def gd_frame(table: pd.DataFrame) -> pd.DataFrame:
    """The GD cells' rows of the three GD curves, with L, lam and max_abs_diff as numbers."""
    cells = table.loc[table["predictor"] == "constructed", "cell_key"].unique()
    rows = table[table["cell_key"].isin(cells)]
    return rows.assign(
        L=number(rows, "param.construction.steps", 20.0).fillna(20.0),
        lam=number(rows, "param.construction.lam", 0.0).fillna(0.0),
        max_abs_diff=number(rows, "max_abs_diff"),
    )


def gd_figure(rows: pd.DataFrame) -> plt.Figure:
    ns = sorted(rows["n"].unique())
    lams = sorted(rows["lam"].unique())
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    fig, axes = plt.subplots(1, len(ns) + 1, figsize=(4 * (len(ns) + 1), 3.6), squeeze=False)
    for ax, n in zip(axes[0], ns):
        for i, lam in enumerate(lams):
            color = colors[i % len(colors)]
            part = rows[(rows["n"] == n) & (rows["lam"] == lam)]
            mean = part.groupby(["predictor", "L"])["err"].mean().unstack(0).sort_index()
            if "explicit_gd" in mean:
                ax.plot(mean.index, mean["explicit_gd"], "-", color=color, label=f"explicit GD, lam={lam:g}")
            if "constructed" in mean:
                ax.plot(
                    mean.index,
                    mean["constructed"],
                    "o",
                    color=color,
                    mfc="none",
                    label=f"transformer, lam={lam:g}",
                )
            if "gd_limit" in mean:
                ax.axhline(
                    mean["gd_limit"].mean(), ls="--", color=color, lw=1, label=f"(G + lam I)^+ b, lam={lam:g}"
                )
        ax.set(
            xscale="log",
            yscale="log",
            xlabel="L (gradient-descent layers)",
            ylabel="normalised error",
            title=f"n = {n:g}",
        )
    ax = axes[0][-1]
    diffs = rows.groupby(["lam", "L"])["max_abs_diff"].max()
    for i, lam in enumerate(lams):
        series = diffs.loc[lam].clip(lower=1e-18)
        ax.plot(series.index, series.values, "o-", color=colors[i % len(colors)], label=f"lam={lam:g}")
    ax.axhline(EXACT, ls=":", color="k", lw=1)
    ax.set(
        xscale="log", yscale="log", xlabel="L", ylabel="max |transformer - explicit GD|", title="exactness"
    )
    for ax in axes[0]:
        ax.legend(fontsize=6)
    fig.suptitle("Seed 003: the constructed in-context GD transformer against L")
    fig.tight_layout()
    return fig


def gd_verdicts(rows: pd.DataFrame) -> list[dict]:
    largest = float(rows["max_abs_diff"].max())
    out = [
        {
            "figure": "gd_vs_L",
            "subject": "exactness",
            "value": largest,
            "verdict": f"the constructed GD transformer {'equals' if largest <= EXACT else 'DIFFERS from'}"
            f" explicit GD: max |difference| {largest:.2g} over {rows['cell_key'].nunique()} cells"
            f" (L = {', '.join(f'{v:g}' for v in sorted(rows['L'].unique()))})",
        }
    ]
    top = rows[rows["L"] == rows["L"].max()]
    for (lam, n), part in top.groupby(["lam", "n"]):
        mean = part.groupby("predictor")["err"].mean()
        ratio = float(mean["constructed"] / mean["gd_limit"])
        out.append(
            {
                "figure": "gd_vs_L",
                "subject": f"lam={lam:g} n={n:g}",
                "value": ratio,
                "verdict": f"lam={lam:g}, n={n:g}: at L={top['L'].max():g} the transformer's error"
                f" {mean['constructed']:.3g} is {ratio:.3g}x that of (G + lam I)^+ b"
                f" ({mean['gd_limit']:.3g})",
            }
        )
    return out


# ----------------------------------------------------------------------------- sweep b: selection


def split_rows(table: pd.DataFrame) -> pd.DataFrame:
    """The selection cells' rows, with ``base`` (the predictor) and ``level`` (the split, '' for all)."""
    cells = table.loc[table["predictor"] == "selection", "cell_key"].unique()
    rows = table[table["cell_key"].isin(cells)]
    if rows.empty:
        return rows.assign(base=pd.Series(dtype=str), level=pd.Series(dtype=str))
    parts = rows["predictor"].str.partition("|")
    return rows.assign(base=parts[0], level=parts[2])


def selection_names(rows: pd.DataFrame) -> list[str]:
    names = set(rows["base"])
    singles = sorted(n for n in names if n.startswith((ALL_DATA, SAME_DATA)))
    return [n for n in SELECTION_ORDER if n in names and n != "least_squares"] + singles


def selection_figure(rows: pd.DataFrame) -> plt.Figure:
    levels = sorted(set(rows["level"]) - {""}) or [""]
    names = selection_names(rows)
    fig, axes = plt.subplots(1, len(levels), figsize=(5 * len(levels), 3.8), squeeze=False)
    for ax, level in zip(axes[0], levels):
        part = rows[rows["level"] == level]
        for name in names:
            curve = part[part["base"] == name].groupby("n")[["err", "err_lo", "err_hi"]].mean()
            if curve.empty:
                continue
            style = {ALL_DATA: "--", SAME_DATA: ":"}.get(name.split("(")[0] + "(", "-")
            width = 2.2 if name == "selection" else 1.2
            line = ax.plot(
                curve.index, curve["err"], style, lw=width, marker=".", label=LABELS.get(name, name)
            )
            ax.fill_between(
                curve.index, curve["err_lo"], curve["err_hi"], alpha=0.15, color=line[0].get_color()
            )
        ax.set(
            yscale="log", xlabel="context length n", ylabel="normalised error", title=level or "all prompts"
        )
        ax.legend(fontsize=6)
    fig.suptitle("Seed 003: the constructed selection transformer (post-ICL validation)")
    fig.tight_layout()
    return fig


def comparison_row(where: str, subject: str, sel: float, other: float, label: str) -> dict:
    gap = sel / other - 1
    return {
        "figure": "selection",
        "subject": f"{where} vs {subject}",
        "value": gap,
        "verdict": f"{where}: selection {1 + gap:.2f}x {label} ({other:.3g})",
    }


def level_verdicts(where: str, mean: pd.Series) -> list[dict]:
    """One level's comparisons of the selection's mean error over n: first with what sees its data (its
    own algorithms on its training part, exact-ridge post-ICL validation on its split), then with what
    sees all of each prompt (twice its training data: a bound no selector on half the data reaches)."""
    sel, out = float(mean["selection"]), []
    own = mean[[n for n in mean.index if n.startswith(SAME_DATA)]]
    if len(own):
        label = f"its best own algorithm on the same training part, {own.idxmin()}"
        out.append(comparison_row(where, "best own algorithm", sel, float(own.min()), label))
    if "ridge_selection" in mean:
        label = "post-ICL validation with exact ridge on the same split"
        out.append(comparison_row(where, "ridge_selection", sel, float(mean["ridge_selection"]), label))
    all_data = " (sees all n examples: twice the selection's training data)"
    for name, label in (
        ("ridge_per_level", "the per-level ridge"),
        ("ridge", "the Bayes mixture"),
        ("model", "the trained model"),
    ):
        if name in mean:
            out.append(comparison_row(where, name, sel, float(mean[name]), label + all_data))
    singles = mean[[n for n in mean.index if n.startswith(ALL_DATA)]]
    if len(singles):
        label = f"its best single algorithm {singles.idxmin()}{all_data}"
        out.append(comparison_row(where, "best single", sel, float(singles.min()), label))
    return out


def eq44_verdict(rows: pd.DataFrame) -> list[dict]:
    """Eq. 4.4 over every cell: the selected prediction's validation loss within gamma of the best
    algorithm's on every prompt and scored prefix (the cells' eq44_* columns; none before they logged it)."""
    if "eq44_checked" not in rows or rows["eq44_checked"].isna().all():
        return []
    cells = rows.drop_duplicates("cell_key")
    checked, bad = int(cells["eq44_checked"].sum()), int(cells["eq44_violations"].sum())
    excess, mixed = float(cells["eq44_max_excess"].max()), float(cells["eq44_mixed"].mean())
    holds = "holds" if bad == 0 else f"FAILS on {bad}"
    return [
        {
            "figure": "selection",
            "subject": "eq. 4.4",
            "value": float(bad),
            "verdict": f"eq. 4.4 {holds} of {checked} prompt prefixes over {len(cells)} cells: the selected "
            f"prediction's validation loss less (the best algorithm's + gamma) is at most {excess:.3g} "
            f"(<= 0 holds); {mixed:.0%} of the prefixes combine two or more algorithms",
        }
    ]


def selection_verdicts(rows: pd.DataFrame) -> list[dict]:
    out = []
    levels = sorted(set(rows["level"]) - {""}) or [""]
    for level in levels:
        mean = rows[rows["level"] == level].groupby("base")["err"].mean()
        out += level_verdicts(level or "all prompts", mean)
    return out + eq44_verdict(rows)


# ----------------------------------------------------------------------------- the plug-in


def check_curves(result: AnalysisResult) -> None:
    """Refuse an experiment with no construction curves (``constructed`` or ``selection``)."""
    if gd_frame(result.table).empty and split_rows(result.table).empty:
        raise AnalysisError(
            f"experiment {result.experiment!r} has no construction curves (constructed or selection)"
        )


def verdict_table(result: AnalysisResult) -> pd.DataFrame:
    gd, selection = gd_frame(result.table), split_rows(result.table)
    rows = gd_verdicts(gd) if len(gd) else []
    rows += selection_verdicts(selection) if len(selection) else []
    return pd.DataFrame(rows, columns=["figure", "subject", "value", "verdict"])


def construction_figures(result: AnalysisResult) -> dict[str, plt.Figure]:
    gd, selection = gd_frame(result.table), split_rows(result.table)
    drawn = {"gd_vs_L": gd_figure(gd)} if len(gd) else {}
    return drawn | ({"selection": selection_figure(selection)} if len(selection) else {})


def answer(result: AnalysisResult) -> str:
    return " | ".join(result.verdicts["verdict"]) if len(result.verdicts) else "no verdicts"


def verdict_lines(result: AnalysisResult) -> list[str]:
    return list(result.verdicts["verdict"])


# the constructions' figures and verdicts, by the curves present: ``gd_vs_L`` (cells with a ``constructed``
# curve) and ``selection`` (cells with a ``selection`` curve)
CONSTRUCTIONS = Analysis(
    verdicts=verdict_table,
    figures=construction_figures,
    answer=answer,
    setup=check_curves,
    summary=verdict_lines,
)
