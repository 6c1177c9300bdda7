"""Analysis of seed 003's construction kinds (scaling.kinds.statisticians): their plug-in.

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
  and the trained model. Verdicts: per noise level the selection's mean error over n relative to the
  per-level ridge, the Bayes mixture, its best single algorithm and the trained model.
"""

from __future__ import annotations

import pandas as pd

from analysis.plots import plt
from analysis.plugin import Analysis, AnalysisError, AnalysisResult

EXACT = 1e-8  # the constructed GD "equals" explicit GD when no difference exceeds this
GD_CURVES = {"constructed": "constructed transformer", "explicit_gd": "explicit GD", "gd_limit": "GD limit"}
SELECTION_ORDER = ("selection", "model", "ridge_per_level", "ridge", "ridge_validation", "least_squares")
LABELS = {
    "selection": "selection transformer",
    "model": "trained model",
    "ridge_per_level": "ridge per noise level",
    "ridge": "Bayes mixture posterior",
    "ridge_validation": "post-ICL validation (exact ridge)",
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
    singles = sorted(n for n in names if n.startswith("gd_ridge("))
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
            style = "--" if name.startswith("gd_ridge(") else "-"
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


def selection_verdicts(rows: pd.DataFrame) -> list[dict]:
    out = []
    levels = sorted(set(rows["level"]) - {""}) or [""]
    for level in levels:
        mean = rows[rows["level"] == level].groupby("base")["err"].mean()
        sel = float(mean["selection"])
        where = level or "all prompts"
        if "ridge_per_level" in mean:
            gap = sel / float(mean["ridge_per_level"]) - 1
            out.append(
                {
                    "figure": "selection",
                    "subject": f"{where} vs ridge_per_level",
                    "value": gap,
                    "verdict": f"{where}: the selection transformer's mean error over n is {1 + gap:.2f}x"
                    f" the per-level ridge's ({sel:.3g} vs {float(mean['ridge_per_level']):.3g})",
                }
            )
        singles = mean[[n for n in mean.index if n.startswith("gd_ridge(")]]
        for name, label in (("ridge", "the Bayes mixture"), ("model", "the trained model")):
            if name in mean:
                gap = sel / float(mean[name]) - 1
                out.append(
                    {
                        "figure": "selection",
                        "subject": f"{where} vs {name}",
                        "value": gap,
                        "verdict": f"{where}: selection {1 + gap:.2f}x {label} ({float(mean[name]):.3g})",
                    }
                )
        if len(singles):
            best = singles.idxmin()
            gap = sel / float(singles.min()) - 1
            out.append(
                {
                    "figure": "selection",
                    "subject": f"{where} vs best single",
                    "value": gap,
                    "verdict": f"{where}: selection {1 + gap:.2f}x its best single algorithm"
                    f" {best} ({float(singles.min()):.3g})",
                }
            )
    return out


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
