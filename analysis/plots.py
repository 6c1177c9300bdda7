"""Context-scaling and task-scaling figures in the papers' style (seed 001, Fig. 1).

- Context scaling: normalised error against the context length n, one panel per T, a line per model and
  training context N, baselines dashed, a dotted line at the zero predictor's 1.
- Task scaling: error against T (log axis; T = inf drawn at the right edge) at n = N, one panel per N.
Lines are means over seeds; bands span the seeds (min to max) when there are several, otherwise the
bootstrap interval over prompts of the single seed.
"""
from __future__ import annotations

import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

BASELINE_STYLE = {"least_squares": ("least squares", "0.45"), "ridge": ("ridge (Bayes)", "0.2"),
                  "zero": ("zero", "0.7")}


def over_seeds(frame: pd.DataFrame, by: list[str]) -> pd.DataFrame:
    """Mean over seeds with a band: the seed range, or the single seed's bootstrap interval."""
    grouped = frame.groupby(by, dropna=False)
    out = grouped.agg(err=("err", "mean"), lo_seed=("err", "min"), hi_seed=("err", "max"),
                      lo_boot=("err_lo", "mean"), hi_boot=("err_hi", "mean"), seeds=("seed", "nunique"))
    out["lo"] = np.where(out["seeds"] > 1, out["lo_seed"], out["lo_boot"])
    out["hi"] = np.where(out["seeds"] > 1, out["hi_seed"], out["hi_boot"])
    return out.reset_index()


def format_T(T: float) -> str:
    return "inf" if math.isinf(T) else f"{T:g}"


def _finish(ax, xlabel: str) -> None:
    ax.axhline(1.0, color="0.5", linestyle=":", linewidth=1, label="_zero")
    ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.grid(True, which="both", alpha=0.25)


def context_scaling_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    models = table[table["predictor"] == "model"]
    Ts = sorted(models["T"].unique())
    fig, axes = plt.subplots(1, len(Ts), figsize=(4.2 * len(Ts), 3.6), squeeze=False, sharey=True)
    colors = dict(zip(sorted(models["model"].unique()), plt.cm.tab10.colors))
    Ns = sorted(models["N"].unique())
    styles = dict(zip(Ns, ["-", "--", "-.", ":"] * 4))
    for ax, T in zip(axes[0], Ts):
        part = over_seeds(models[models["T"] == T], ["model", "N", "n"])
        for (model, N), curve in part.groupby(["model", "N"]):
            label = f"{model} (N={N})" if len(Ns) > 1 else model
            ax.plot(curve["n"], curve["err"], styles[N], color=colors[model], marker="o", ms=3, label=label)
            ax.fill_between(curve["n"], curve["lo"], curve["hi"], color=colors[model], alpha=0.15)
        baselines = table[(table["predictor"] != "model") & (table["predictor"] != "zero")]
        for name, curve in over_seeds(baselines, ["predictor", "n"]).groupby("predictor"):
            label, color = BASELINE_STYLE.get(name, (name, "0.3"))
            ax.plot(curve["n"], curve["err"], "--", color=color, linewidth=1, label=label)
        ax.set_title(f"T = {format_T(T)}")
        _finish(ax, "context length n")
    axes[0][0].set_ylabel("normalised error")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title or "Context scaling")
    fig.tight_layout()
    return fig


def task_scaling_figure(table: pd.DataFrame, title: str = "") -> plt.Figure:
    """Error against T at n = N (each cell scored at its own training context)."""
    models = table[(table["predictor"] == "model") & (table["n"] == table["N"])]
    Ns = sorted(models["N"].unique())
    fig, axes = plt.subplots(1, len(Ns), figsize=(4.2 * len(Ns), 3.6), squeeze=False, sharey=True)
    colors = dict(zip(sorted(models["model"].unique()), plt.cm.tab10.colors))
    finite = sorted(T for T in models["T"].unique() if not math.isinf(T))
    inf_at = (finite[-1] * 4) if finite else 1.0
    for ax, N in zip(axes[0], Ns):
        part = over_seeds(models[models["N"] == N], ["model", "T"])
        part["x"] = part["T"].where(~np.isinf(part["T"]), inf_at)
        for model, curve in part.groupby("model"):
            curve = curve.sort_values("x")
            ax.plot(curve["x"], curve["err"], "-", color=colors[model], marker="o", ms=4, label=model)
            ax.fill_between(curve["x"], curve["lo"], curve["hi"], color=colors[model], alpha=0.15)
        ridge = table[(table["predictor"] == "ridge") & (table["n"] == N) & (table["N"] == N)]
        if len(ridge):
            ax.axhline(ridge["err"].mean(), color="0.2", linestyle="--", linewidth=1, label="ridge (Bayes)")
        ax.set_xscale("log")
        ticks = finite + ([inf_at] if models["T"].map(math.isinf).any() else [])
        ax.set_xticks(ticks, [format_T(t) for t in finite] + (["inf"] if len(ticks) > len(finite) else []))
        ax.set_title(f"n = N = {N}")
        _finish(ax, "pretraining tasks T")
    axes[0][0].set_ylabel("normalised error")
    axes[0][-1].legend(fontsize=7, loc="best")
    fig.suptitle(title or "Task scaling")
    fig.tight_layout()
    return fig


def save(fig: plt.Figure, path: Path, formats: tuple[str, ...] = ("png", "svg")) -> list[Path]:
    paths = []
    for fmt in formats:
        target = path.with_suffix(f".{fmt}")
        fig.savefig(target, dpi=130)
        paths.append(target)
    plt.close(fig)
    return paths
