"""Drawing primitives for the papers' figures (seed 001, Figs. 1-8) and the generic scaling figures.

Conventions of seed 001's figures: normalised error on a log axis, a dotted line at the zero predictor's
1, the trained models in colour, baselines dashed and grey, the theory curve (the Bayes ridge error for
Gaussian linear tasks, the discrete MMSE over a finite task pool) dash-dotted in black. Lines are means
over seeds; bands span the seeds (min to max) when there are several, otherwise the bootstrap interval
over prompts of the single seed.

Split rows (``model|noise_std=0.1``: the error on the prompts of one noise level) are drawn only where a
panel asks for that level (``level=``), never mixed into the overall lines.

- Context scaling: error against n (every evaluated n of a cell), or against N at n = N (``diagonal``:
  trained and tested at the same length, as Figs. 1B, 5-8B).
- Task scaling: error against T at n = N (log axis; T = inf drawn at the right edge).
A panel without data says so instead of failing: a partial sweep gives missing points, not a crash.
"""

from __future__ import annotations

import math
import textwrap
from pathlib import Path

import matplotlib
import matplotlib.font_manager  # noqa: F401  (the T labels' size)
import matplotlib.ticker  # noqa: F401  (integer ticks)
import matplotlib.transforms  # noqa: F401  (the T axis break)

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from scaling.config import format_T  # noqa: E402

THEORY = {"ridge": "Bayes ridge (theory)", "bayes_discrete": "discrete MMSE (theory)"}
BASELINE_LABELS = {
    "least_squares": "OLS",
    "ridge_tuned": "tuned ridge",
    "ridge_per_level": "ridge per level",
    "ridge_validation": "ridge, validated lambda",
    "lasso": "Lasso",
    "xgboost": "XGBoost",
    "nn_student": "NN student",
    "knn": "3-NN",
    "averaging": "averaging",
    "hilbert": "Hilbert",
    "decision_tree": "decision tree",
}
BASELINE_DASHES = [(4, 2), (1.5, 1.5), (6, 2, 1.5, 2), (2, 3), (8, 3), (3, 1, 1, 1)]
BASELINE_GREYS = ["0.35", "0.55", "0.45", "0.65", "0.25", "0.5"]
PANEL_W, PANEL_H = 4.0, 3.3


def split_name(predictor: str) -> tuple[str, str | None]:
    """'model|noise_std=0.1' -> ('model', 'noise_std=0.1'); 'ridge' -> ('ridge', None)."""
    base, _, level = str(predictor).partition("|")
    return base, level or None


def rows_at(table: pd.DataFrame, level: str | None = None) -> pd.DataFrame:
    """The rows of one split level (None: the overall rows), with the predictor's base name in `base`."""
    codes, names = pd.factorize(table["predictor"], use_na_sentinel=False)  # a few names over many rows
    parts = [split_name(name) for name in names]
    keep = np.array([p[1] == level for p in parts], dtype=bool)[codes]
    out = table[keep].copy()
    out["base"] = [parts[c][0] for c in codes[keep]]
    return out


def trained_across(rows: pd.DataFrame) -> dict[str, float]:
    """The models with a single N where the rows span several (seed 001 App. A's padded MLP: one network
    trained at every length of the figure), each with that N."""
    if rows["N"].nunique() < 2:
        return {}
    trained = rows[rows["base"] == "model"] if "base" in rows else rows
    Ns = trained.groupby("model")["N"].agg(["nunique", "max"])
    return {str(model): float(row["max"]) for model, row in Ns.iterrows() if row["nunique"] == 1}


def trained_and_tested(rows: pd.DataFrame) -> pd.DataFrame:
    """The rows at n = N (each network tested at the length it was trained up to), and every n of a model
    trained across the lengths (``trained_across``), its N read as that n."""
    across = rows["model"].isin(list(trained_across(rows)))
    trained = rows["base"] == "model" if "base" in rows else True  # its baselines stay at n = N
    within = rows[across & (rows["n"] != rows["N"]) & trained]
    return pd.concat([rows[rows["n"] == rows["N"]], within.assign(N=within["n"])], ignore_index=True)


def levels(table: pd.DataFrame) -> list[str]:
    """The split levels present (e.g. ['noise_std=0.1', 'noise_std=0.5'])."""
    found = {split_name(p)[1] for p in table["predictor"].unique()}
    return sorted(x for x in found if x)


def over_seeds(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean over seeds with a band: the seed range, or the single seed's bootstrap interval."""
    grouped = frame.groupby(by, dropna=False)
    out = grouped.agg(
        err=("err", "mean"),
        lo_seed=("err", "min"),
        hi_seed=("err", "max"),
        lo_boot=("err_lo", "mean"),
        hi_boot=("err_hi", "mean"),
        seeds=("seed", "nunique"),
    )
    out["lo"] = np.where(out["seeds"] > 1, out["lo_seed"], out["lo_boot"])
    out["hi"] = np.where(out["seeds"] > 1, out["hi_seed"], out["hi_boot"])
    return out.reset_index()


def model_colors(table: pd.DataFrame) -> dict[str, tuple]:
    """One colour per model, the same in every panel and figure of a report."""
    return dict(zip(sorted(table["model"].astype(str).unique()), plt.cm.tab10.colors * 3))


def baseline_style(names: list[str]) -> dict[str, dict]:
    """Line style per baseline: theory curves black dash-dot, others grey with distinct dashes."""
    styles, k = {}, 0
    for name in sorted(names):
        if name in THEORY:
            styles[name] = dict(color="k", linestyle="-.", linewidth=1.3, label=THEORY[name])
        else:
            styles[name] = dict(
                color=BASELINE_GREYS[k % 6],
                dashes=BASELINE_DASHES[k % 6],
                linewidth=1.2,
                label=BASELINE_LABELS.get(name, name),
            )
            k += 1
    return styles


# the y label and the zero line's legend entry per measure
# (papers.context_scaling.analysis.figures.over_zero): the verdicts' err/zero, or error / E[y^2], the papers'
# "normalised error"; the zero predictor scores 1 in either
MEASURES = {
    "err/zero": ("err / zero predictor's err", "zero predictor (= 1)"),
    "err": ("error / E[y\u00b2]", "zero predictor (error = E[y\u00b2])"),
}
N_STYLES = ["-", "--", ":", "-."]  # a line style per N within a model's colour: the largest N solid
N_MARKERS = "osD^v<>p"
INF_GAP = 8.0  # T = inf sits this factor right of the largest finite T


def y_frame(lo: float, hi: float) -> tuple[float, float]:
    """The y-range of a panel from its models' curves and bands (lo, hi), not from its baselines: the
    models fill the frame, the zero predictor's 1 is always in it, theory and baseline lines are clipped."""
    lo = lo if np.isfinite(lo) and lo > 0 else 0.1
    hi = hi if np.isfinite(hi) and hi > 0 else 1.0
    return min(lo, 1.0) / 1.6, max(hi, 1.0) * 1.35


def models_span(curves: list[pd.DataFrame]) -> tuple[float, float]:
    """(lowest, highest) of the models' means and bands over a panel's curves (over_seeds frames)."""
    values = [c[col].to_numpy(float) for c in curves for col in ("err", "lo", "hi") if len(c)]
    values = np.concatenate(values) if values else np.array([])
    values = values[np.isfinite(values) & (values > 0)]
    return (float(values.min()), float(values.max())) if len(values) else (math.nan, math.nan)


def band_label(seeds: int) -> str:
    """What a band spans (said once in each figure's legend)."""
    return (
        f"band: min-max over {seeds} seeds"
        if seeds > 1
        else "band: 90% bootstrap interval over prompts (1 seed)"
    )


def add_band_key(ax, seeds: int) -> None:
    ax.fill_between([], [], [], color="0.5", alpha=0.2, linewidth=0, label=band_label(seeds))


def finish(
    ax,
    xlabel: str,
    title: str,
    empty: bool,
    frame: tuple[float, float] | None = None,
    measure: str = "err",
) -> None:
    """Zero-predictor line, log error axis over ``frame`` (the models' y_frame), labels in the ``measure``
    (MEASURES); an empty panel says it has no cells."""
    ylabel, zero = MEASURES[measure]
    ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1, label=zero)
    ax.set_yscale("log")
    if frame is not None:
        ax.set_ylim(*frame)
    plain = matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}")
    ax.yaxis.set_major_formatter(plain)
    low, high = ax.get_ylim()
    narrow = high / low < 5  # less than a decade shown: label every minor tick, else 2s and 5s
    ax.yaxis.set_minor_formatter(
        matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}" if narrow or f"{v:.0e}"[0] in "25" else "")
    )
    note_off_frame(ax)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=10)
    ax.grid(True, which="both", alpha=0.25)
    if empty:
        ax.text(0.5, 0.5, "no complete cells", transform=ax.transAxes, ha="center", color="0.4")


def integer_ticks(ax, values=None) -> None:
    """Ticks only at whole numbers: at the given values when there are few, else every few integers."""
    values = sorted({int(v) for v in values}) if values is not None else []
    if values and len(values) <= 8:
        ax.set_xticks(values, [str(v) for v in values])
        ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
    else:
        ax.xaxis.set_major_locator(matplotlib.ticker.MaxNLocator(integer=True))


def plot_baseline(ax, x, y, style: dict, frame: tuple[float, float]) -> None:
    """A baseline or theory line clipped at the frame: points above its top are left out (OLS's
    interpolation peak near n = d would otherwise draw near-vertical dashes through the panel); a line
    wholly below or above the frame is not drawn (nor in the legend, which names only what is drawn) but
    named with its values at the panel's foot."""
    y = np.asarray(y, float)
    shown = y[np.isfinite(y)]
    side = (
        "below"
        if len(shown) and shown.max() < frame[0]
        else "above"
        if len(shown) and shown.min() > frame[1]
        else ""
    )
    if side:
        off = getattr(ax, "_off_frame", {})
        off.setdefault(side, []).append(f"{style['label']} {span_text(shown.min(), shown.max())}")
        ax._off_frame = off
        return
    ax.plot(x, np.where(y > frame[1], np.nan, y), **style)


def span_text(lo: float, hi: float) -> str:
    a, b = f"{lo:.2g}", f"{hi:.2g}"
    return a if a == b else f"{a}-{b}"


def note_off_frame(ax) -> None:
    """The lines below or above the frame, named at the panel's foot (their values would squeeze the
    models)."""
    off = getattr(ax, "_off_frame", {})
    if off:
        ax.text(
            0.02,
            0.02,
            "\n".join(
                # broken between the lines named, never inside one: wrapped with no-break spaces in each
                textwrap.fill(
                    f"{side} the frame: " + "; ".join(line.replace(" ", "\u00a0") for line in lines),
                    48,
                    subsequent_indent="  ",
                ).replace("\u00a0", " ")
                for side, lines in off.items()
            ),
            transform=ax.transAxes,
            fontsize=6.5,
            color="0.35",
            va="bottom",
        )


def draw_context(
    ax,
    table: pd.DataFrame,
    colors: dict,
    *,
    diagonal: bool,
    title: str,
    level: str | None = None,
    models: list[str] | None = None,
) -> None:
    """Error against n (every evaluated n; a line per model and N, a line style per N) or, ``diagonal``,
    against N at n = N (``trained_and_tested``: a padded MLP's own curve)."""
    rows = rows_at(table, level)
    xlabel = "context length n"
    if diagonal:
        across = trained_across(rows)  # as trained_and_tested finds them; named where drawn (``models``)
        rows = trained_and_tested(rows)
        xlabel = "context length N (train = test = N)" + "".join(
            f"\n{model}: one network for every N \u2264 {N:g}"
            for model, N in across.items()
            if models is None or model in models
        )
    x = "N" if diagonal else "n"
    trained = rows[rows["base"] == "model"]
    if models is not None:
        trained = trained[trained["model"].isin(models)]
    several_N = not diagonal and trained["N"].nunique() > 1
    Ns = sorted(trained["N"].unique(), reverse=True)  # the largest N first: solid
    curves = []
    for key, part in trained.groupby(["model", "N"] if several_N else ["model"]):
        model = key[0]
        curve = over_seeds(part, [x]).sort_values(x)
        k = Ns.index(key[1]) if several_N else 0
        label = f"{model} (N={key[1]})" if several_N else model
        ax.plot(
            curve[x],
            curve["err"],
            N_STYLES[k % 4],
            color=colors[model],
            marker=N_MARKERS[k % 8],
            ms=3.5,
            label=label,
        )
        ax.fill_between(curve[x], curve["lo"], curve["hi"], color=colors[model], alpha=0.15, linewidth=0)
        curves.append(curve)
    frame = y_frame(*models_span(curves))
    others = rows[~rows["base"].isin(["model", "zero"])]
    styles = baseline_style(list(others["base"].unique()))
    for name, part in others.groupby("base"):
        curve = part.groupby(x)["err"].mean().sort_index()
        plot_baseline(ax, curve.index, curve.to_numpy(), styles[name], frame)
    if len(trained):
        add_band_key(ax, int(trained["seed"].nunique()))
    finish(
        ax,
        xlabel,
        title,
        trained.empty,
        frame,
        table.attrs.get("measure", "err"),
    )
    integer_ticks(ax, rows[x].unique() if diagonal else None)


def t_positions(Ts) -> tuple[dict[float, float], list[float], list[str]]:
    """x position of each T (inf INF_GAP times right of the largest finite T, past an axis break), and
    the ticks to label."""
    finite = sorted(T for T in Ts if not math.isinf(T))
    inf_at = finite[-1] * INF_GAP if finite else 1.0
    where = {T: (inf_at if math.isinf(T) else T) for T in Ts}
    ticks = sorted(set(where.values()))
    return where, ticks, [format_T(next(T for T, v in where.items() if v == t), short=True) for t in ticks]


def axis_break(ax, left: float, right: float) -> None:
    """Two slanted strokes on the x axis between the largest finite T and T = inf."""
    mid = math.sqrt(left * right)
    trans = matplotlib.transforms.blended_transform_factory(ax.transData, ax.transAxes)
    for dx in (0.93, 1.07):
        ax.plot(
            [mid * dx / 1.03, mid * dx * 1.03],
            [-0.025, 0.025],
            color="k",
            linewidth=1,
            transform=trans,
            clip_on=False,
        )


def draw_over_T(ax, part: pd.DataFrame, where: dict[float, float], color, model: str) -> pd.DataFrame:
    """One model's error against T (mean over seeds, returned): finite T as a line with its band, T = inf as
    an open point with its interval, joined to the largest finite T by a dotted segment."""
    curve = over_seeds(part, ["T"])
    curve["x"] = curve["T"].map(where)
    curve = curve.sort_values("x")
    finite, inf = curve[np.isfinite(curve["T"])], curve[np.isinf(curve["T"])]
    ax.plot(finite["x"], finite["err"], "-", color=color, marker="o", ms=4, label=model)
    ax.fill_between(finite["x"], finite["lo"], finite["hi"], color=color, alpha=0.15, linewidth=0)
    if len(inf):
        ax.errorbar(
            inf["x"],
            inf["err"],
            yerr=[inf["err"] - inf["lo"], inf["hi"] - inf["err"]],
            color=color,
            marker="o",
            ms=5,
            mfc="white",
            capsize=2,
            linestyle="none",
        )
        if len(finite):
            ax.plot(
                [finite["x"].iloc[-1], inf["x"].iloc[0]],
                [finite["err"].iloc[-1], inf["err"].iloc[0]],
                ":",
                color=color,
                linewidth=1,
            )
    return curve


def draw_baselines_over_T(ax, others: pd.DataFrame, where: dict[float, float], frame) -> None:
    """The baselines against T: the discrete MMSE (which depends on the pool) as a curve, the others, which
    do not depend on T, as flat lines across the axis."""
    styles = baseline_style(list(others["base"].unique()))
    for name, part in others.groupby("base"):
        by_T = part.groupby("T")["err"].mean()
        if name == "bayes_discrete" and len(by_T) > 1:  # depends on the pool: a curve over T
            plot_baseline(ax, [where[T] for T in by_T.index], by_T.to_numpy(), styles[name], frame)
        else:
            xs = sorted(where.values())
            plot_baseline(
                ax,
                [xs[0] / 1.5, xs[-1] * 1.5] if xs else [1, 2],
                [float(by_T.mean())] * 2,
                styles[name],
                frame,
            )


def T_axis(ax, where: dict[float, float], ticks: list[float], labels: list[str]) -> None:
    """A log T axis with a tick at each T, labelled where the labels keep apart (spaced_labels), T = inf as
    "inf (fresh)" past an axis break."""
    ax.set_xscale("log")
    if ticks:
        labels = [("\u221e\n(fresh)" if label == "inf" else label) for label in labels]
        ax.set_xlim(ticks[0] / 2, ticks[-1] * 2)
        ax.set_xticks(ticks, spaced_labels(ax, ticks, labels))
        ax.minorticks_off()
        finite = [T for T in where if not math.isinf(T)]
        if finite and any(math.isinf(T) for T in where):
            axis_break(ax, max(finite), where[math.inf])


DIGIT_EM = 0.64  # a digit's width in DejaVu Sans, matplotlib's font, in ems


def spaced_labels(ax, ticks: list[float], labels: list[str]) -> list[str]:
    """The labels of a log axis' ticks with every k-th kept, counted down from the largest finite T (T = inf's
    kept too), for the smallest k whose kept labels are at least half an em apart on the axis' width before
    the layout (which only widens it); the others blank, their ticks kept: many T close together (1, 2, 4,
    ... 256) would run into each other ("128256")."""
    size = matplotlib.font_manager.FontProperties(size=matplotlib.rcParams["xtick.labelsize"]).get_size()
    width = ax.get_position().width * ax.figure.get_figwidth() * 72  # points
    lo, hi = (math.log(v) for v in ax.get_xlim())
    at = [(math.log(t) - lo) / (hi - lo) * width for t in ticks]
    # the first lines side by side: only inf's label has a second line ("(fresh)", under its narrow first)
    half = [len(label.split("\n")[0]) * DIGIT_EM * size / 2 for label in labels]
    last = len(ticks) - 1 - (labels[-1].startswith("\u221e") and len(ticks) > 1)
    for k in range(1, len(ticks) + 1):
        kept = [i for i in range(len(ticks)) if i > last or (last - i) % k == 0]
        if all(at[j] - at[i] >= half[i] + half[j] + size / 2 for i, j in zip(kept, kept[1:])):
            break
    return [label if i in kept else "" for i, label in enumerate(labels)]


def draw_task(
    ax,
    table: pd.DataFrame,
    colors: dict,
    *,
    N: int,
    title: str,
    level: str | None = None,
    models: list[str] | None = None,
) -> None:
    """Error against T at n = N = the given N (a padded MLP at n = N: ``trained_and_tested``); T = inf
    (fresh tasks) past an axis break, joined by a dotted segment; baselines that do not depend on T as flat
    lines."""
    rows = trained_and_tested(rows_at(table, level))
    rows = rows[rows["N"] == N]
    trained = rows[rows["base"] == "model"]
    if models is not None:
        trained = trained[trained["model"].isin(models)]
    where, ticks, labels = t_positions(rows["T"].unique())
    curves = [draw_over_T(ax, part, where, colors[model], model) for model, part in trained.groupby("model")]
    frame = y_frame(*models_span(curves))
    draw_baselines_over_T(ax, rows[~rows["base"].isin(["model", "zero"])], where, frame)
    T_axis(ax, where, ticks, labels)
    if len(trained):
        add_band_key(ax, int(trained["seed"].nunique()))
    xlabel = "pretraining tasks T  (\u221e: a fresh task per prompt)"
    finish(ax, xlabel, title, trained.empty, frame, table.attrs.get("measure", "err"))


LEVEL_STYLES = ["-", "--", ":", "-."]


def draw_lambda(
    ax,
    scans: pd.DataFrame,
    table: pd.DataFrame,
    colors: dict,
    *,
    n: int,
    title: str,
    levels: list[str | None] = (None,),
) -> None:
    """Ridge error against lambda at context length n (seed 001 Figs. 2-3, right panels): per level (None:
    all prompts; 'noise_std=0.1': that level's prompts, a line style each) the scan's curve (band over
    seeds, or the bootstrap interval of one seed) with its minimum marked, and each model's error at the
    same n on the same prompts as a horizontal line in the model's colour."""
    top, lowest = 0.0, math.inf
    for k, level in enumerate(levels):
        style, suffix = LEVEL_STYLES[k % len(LEVEL_STYLES)], f" ({level})" if level else ""
        curve = over_seeds(rows_at(scans[scans["n"] == n], level), ["lam"]).sort_values("lam")
        if curve.empty:
            continue
        ax.plot(
            curve["lam"], curve["err"], style, color="0.3", linewidth=1.4, label=f"ridge vs lambda{suffix}"
        )
        ax.fill_between(curve["lam"], curve["lo"], curve["hi"], color="0.3", alpha=0.12, linewidth=0)
        best = curve.loc[curve["err"].idxmin()]
        ax.plot([best["lam"]], [best["err"]], "v", color="0.3", ms=6, label="best lambda")
        top = max(top, float(curve["err"].max()))
        lowest = min(lowest, float(curve["lo"].min()))
        trained = rows_at(table[table["n"] == n], level)
        trained = trained[trained["base"] == "model"]
        trained = trained[trained["N"] == trained.groupby("model")["N"].transform("max")]
        for model, part in trained.groupby("model"):
            lowest = min(lowest, float(part["err"].mean()))
            ax.axhline(
                float(part["err"].mean()),
                linestyle=style,
                color=colors[model],
                linewidth=1.3,
                label=f"{model}{suffix}",
            )
    ax.set_xscale("log")
    frame = (lowest / 1.6, max(top, 1.0) * 1.35) if top else None
    finish(ax, "ridge lambda", title, top == 0.0, frame, scans.attrs.get("measure", "err"))


def grid(rows: int, cols: int) -> tuple[plt.Figure, np.ndarray]:
    fig, axes = plt.subplots(rows, cols, figsize=(PANEL_W * cols, PANEL_H * rows + 0.6), squeeze=False)
    return fig, axes


def legend_below(fig: plt.Figure, title: str) -> plt.Figure:
    """One legend for the figure (unique labels of every panel) under the panels, and the title."""
    handles = {}
    for ax in fig.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    fig.suptitle(title, fontsize=11)
    width, height = fig.get_size_inches()
    ncol = max(1, min(len(handles), 6, int(width / 2.3)))  # a label is up to ~2.2 in wide at 8 pt
    rows = math.ceil(len(handles) / ncol) if handles else 0
    fig.tight_layout(rect=(0, min(0.4, (0.2 + 0.2 * rows) / height) if handles else 0, 1, 0.96))
    if handles:
        fig.legend(handles.values(), handles.keys(), loc="lower center", ncol=ncol, fontsize=8, frameon=False)
    return fig


def task_label(table: pd.DataFrame) -> pd.Series:
    """A short name per row of the settings that vary across the table ('' when there are none): the
    analysis view's setting columns ('task.d', 'train.steps', scaling.judge.provenance), else the
    ``param.task.*`` columns that vary."""
    cols = [c for c in table.columns if "." in c and not c.startswith("param.") and table[c].nunique() > 1]
    cols = cols or [
        c for c in table.columns if c.startswith("param.task.") and table[c].nunique(dropna=True) > 1
    ]
    if not cols:
        return pd.Series("", index=table.index)
    short = [c.removeprefix("param.").removeprefix("task.") for c in cols]
    parts = [name + "=" + table[c].astype(str) for name, c in zip(short, cols)]
    label = parts[0]
    for part in parts[1:]:
        label = label + " " + part
    return label.str.replace(r" [a-z_]+=(nan|None)", "", regex=True).str.replace("family=", "", regex=False)


def context_scaling_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Generic: error vs n, a panel per (task, T), a line per model and N."""
    table = table.assign(_task=task_label(table))
    pairs = table[["_task", "T"]].drop_duplicates()  # a few panels over many rows
    keys = sorted(set(zip(pairs["_task"], pairs["T"])), key=lambda k: (k[0], k[1]))
    fig, axes = grid(1, max(len(keys), 1))
    colors = model_colors(table)
    for ax, (task, T) in zip(axes[0], keys):
        part = table[(table["_task"] == task) & (table["T"] == T)]
        draw_context(ax, part, colors, diagonal=False, title=f"{task} T = {format_T(T, short=True)}".strip())
    return legend_below(fig, title or "Context scaling")


def task_scaling_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Generic: error vs T at n = N, a panel per (task, N)."""
    table = table.assign(_task=task_label(table))
    pairs = table[["_task", "N"]].drop_duplicates()
    keys = sorted(set(zip(pairs["_task"], pairs["N"])))
    fig, axes = grid(1, max(len(keys), 1))
    colors = model_colors(table)
    for ax, (task, N) in zip(axes[0], keys):
        draw_task(ax, table[table["_task"] == task], colors, N=int(N), title=f"{task} n = N = {N}".strip())
    return legend_below(fig, title or "Task scaling")


def save(fig: plt.Figure, path: Path, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    paths = []
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        fig.savefig(target, dpi=130)
        paths.append(target)
    plt.close(fig)
    return paths
