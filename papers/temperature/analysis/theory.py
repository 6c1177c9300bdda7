"""The verdicts and figures of seed 004's theory jobs: error against l/d and sigma_test with tau = 1, the
optimal tau of Thm 4.7 and Bayes ridge (Figs. 1, 2), linear against linearized attention under a mean
shift (Fig. 4), and the histograms of attention weights at each tau (Fig. 5). A verdict's difference of
two curves takes each point's half-width as 1.645 standard errors and adds them in quadrature."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd

from analysis.plots import plt
from papers.temperature.analysis.verdict_rows import Z90, errors_at, standard_error, verdict_row, verdict_text

THEORY_COLOURS = {
    "tau=1": "tab:blue",
    "tau_opt": "tab:red",
    "bayes_ridge": "tab:green",
    "linear": "tab:purple",
    "linearized": "tab:orange",
}


def _theory_panels(rows: pd.DataFrame) -> list[tuple[str, str, pd.DataFrame]]:
    """(figure, panel, rows) of the error-vs-x theory panels (Fig. 2c, tau_opt vs sigma_test, excluded)."""
    out = []
    for (figure, panel), group in rows.groupby(["figure", "panel"], sort=True):
        if str(panel) == "c":
            continue
        out.append((str(figure), str(panel), group))
    return out


def _mean_over_seeds(group: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    agg = group.groupby(keys, as_index=False).agg(
        err=("err", "mean"), err_lo=("err_lo", "mean"), err_hi=("err_hi", "mean"), tau=("tau", "mean")
    )
    return agg


def theory_verdicts(rows: pd.DataFrame) -> list[dict]:
    """Per panel: the Monte Carlo error at tau = 1 and at tau_opt (Thm 4.7) where the theory's gain is
    largest, the gain's interval, and the largest |Thm 4.6 - Monte Carlo| over the panel's points."""
    out = []
    for figure, panel, group in _theory_panels(rows):
        sim = _mean_over_seeds(group[group["source"] == "simulation"], ["curve", "x"])
        th = _mean_over_seeds(group[group["source"] == "theory"], ["curve", "x"])
        gap, gap_note = _theory_gap(sim, th)
        one, opt = _curve(sim, "tau=1"), _curve(sim, "tau_opt")
        common = one.index.intersection(opt.index)
        if figure == "4" or not len(common):  # Fig. 4 compares linear and linearized attention at tau = 1
            row = _linear_vs_linearized(figure, panel, sim, gap, gap_note)
        else:
            row = _tuned_vs_one(figure, panel, one, opt, th, common, gap, gap_note)
        if row is not None:
            out.append(row)
    return out


def _curve(means: pd.DataFrame, curve: str) -> pd.DataFrame:
    """One curve's points, indexed by x."""
    return means[means["curve"] == curve].set_index("x")


def _theory_gap(sim: pd.DataFrame, th: pd.DataFrame) -> tuple[float, str]:
    """The largest |Thm 4.6 - Monte Carlo| over a panel's points (NaN when none match) and the words for
    it, naming its curve and x ("" when none)."""
    both = sim.merge(th, on=["curve", "x"], suffixes=("", "_th"))
    if not len(both):
        return np.nan, ""
    row = both.loc[(both["err"] - both["err_th"]).abs().idxmax()]
    gap = float(abs(row["err"] - row["err_th"]))
    note = (
        f"largest |Thm 4.6 - Monte Carlo| = {gap:.3g} ({row['curve']}, x = {row['x']:g}):"
        " the finite-l effect of the theory's large-l limit"
    )
    return gap, note


def _linear_vs_linearized(
    figure: str, panel: str, sim: pd.DataFrame, gap: float, gap_note: str
) -> dict | None:
    """Fig. 4's verdict row: linear minus linearized attention's Monte Carlo error at the largest l both
    reach, with its 90% interval (None when they share no l)."""
    lin, lzd = _curve(sim, "linear"), _curve(sim, "linearized")
    common = lin.index.intersection(lzd.index)
    if not len(common):
        return None
    x = max(common)
    diff = float(lin.loc[x, "err"] - lzd.loc[x, "err"])
    se = math.hypot(standard_error(lin.loc[[x]]).iloc[0], standard_error(lzd.loc[[x]]).iloc[0])
    lo, hi = diff - Z90 * se, diff + Z90 * se
    verdict = (
        f"at l = {x:g} linear attention's error exceeds linearized attention's by {diff:.3g}"
        f" (90% interval {lo:.3g} to {hi:.3g}){'' if lo > 0 else ', not resolved'}; {gap_note}"
    )
    return verdict_row(
        figure=figure,
        panel=panel,
        x=x,
        metric="err (linear - linearized)",
        best_tau=1.0,
        **errors_at(lin, lzd, x),
        gain=diff,
        gain_lo=lo,
        gain_hi=hi,
        resolved=bool(lo > 0 or hi < 0),
        theory_gap=gap,
        verdict=verdict,
    )


def _tuned_vs_one(
    figure: str,
    panel: str,
    one: pd.DataFrame,
    opt: pd.DataFrame,
    th: pd.DataFrame,
    common: pd.Index,
    gap: float,
    gap_note: str,
) -> dict:
    """The verdict row of tau_opt against tau = 1: their Monte Carlo errors and gain, with its 90%
    interval, at the x of ``common`` where the theory's gain is largest (the largest x when it has none)."""
    theory_gain = (_curve(th, "tau=1")["err"] - _curve(th, "tau_opt")["err"]).reindex(common)
    x = float(theory_gain.idxmax()) if theory_gain.notna().any() else float(max(common))
    gain = float(one.loc[x, "err"] - opt.loc[x, "err"])
    se = math.hypot(standard_error(one.loc[[x]]).iloc[0], standard_error(opt.loc[[x]]).iloc[0])
    lo, hi = gain - Z90 * se, gain + Z90 * se
    tau_opt = float(opt.loc[x, "tau"])
    verdict = verdict_text(gain, lo, hi, f"the Monte Carlo error at x = {x:g}", f"tau_opt = {tau_opt:.3g}")
    return verdict_row(
        figure=figure,
        panel=panel,
        x=x,
        metric="err (Monte Carlo)",
        best_tau=tau_opt,
        **errors_at(one, opt, x),
        gain=gain,
        gain_lo=lo,
        gain_hi=hi,
        resolved=bool(lo > 0 or hi < 0),
        theory_gap=gap,
        verdict=f"{verdict}; {gap_note}",
    )


def draw_theory(rows: pd.DataFrame, title: str) -> plt.Figure:
    """Error vs x per panel: theory as lines, Monte Carlo as points with 90% intervals; Fig. 2c's panel
    (tau_opt vs sigma_test) as tau against x."""
    panels = sorted({(str(f), str(p)) for f, p in zip(rows["figure"], rows["panel"])})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.6 * len(panels), 3.8), squeeze=False)
    for ax, (figure, panel) in zip(axes[0], panels):
        group = rows[(rows["figure"].astype(str) == figure) & (rows["panel"].astype(str) == panel)]
        if panel == "c":  # Fig. 2c: tau_opt against sigma_test
            th = group[group["source"] == "theory"].groupby("x")["tau"].mean()
            sim = (
                group[group["source"] == "simulation"]
                .groupby("x")
                .agg(tau=("tau", "mean"), se=("tau_se", "mean"))
            )
            ax.plot(th.index, th.values, "-", color="tab:red", label="tau_opt (Thm 4.7)")
            ax.errorbar(
                sim.index,
                sim["tau"],
                yerr=Z90 * sim["se"].fillna(0),
                fmt="o",
                color="tab:red",
                mfc="none",
                capsize=2,
                label="Monte Carlo minimiser",
            )
            ax.set_xscale("log")
            ax.set_xlabel("sigma_test")
            ax.set_ylabel("tau_opt")
            ax.set_title(f"Fig. {figure}c: tau_opt vs sigma_test")
            ax.legend(fontsize=7)
            continue
        for curve, part in group.groupby("curve"):
            colour = THEORY_COLOURS.get(curve, None)
            th = part[part["source"] == "theory"].groupby("x")["err"].mean()
            sim = (
                part[part["source"] == "simulation"]
                .groupby("x")
                .agg(err=("err", "mean"), lo=("err_lo", "mean"), hi=("err_hi", "mean"))
            )
            if len(th):
                ax.plot(th.index, th.values, "-", color=colour, label=f"{curve} (theory)")
            if len(sim):
                ax.errorbar(
                    sim.index,
                    sim["err"],
                    yerr=[sim["err"] - sim["lo"], sim["hi"] - sim["err"]],
                    fmt="o",
                    color=colour,
                    mfc="none",
                    ms=4,
                    capsize=2,
                    label=f"{curve} (Monte Carlo)",
                )
        xlabel = {"4": "l (context length)"}.get(figure, "sigma_test" if panel == "b" else "l / d")
        ax.set_xlabel(xlabel)
        ax.set_ylabel("normalised error")
        if panel == "b":
            ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_title(f"Fig. {figure} ({panel})")
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- Fig. 5


def draw_histograms(rows: pd.DataFrame, title: str) -> plt.Figure:
    kinds = [k for k in ("input", "softmax", "linearized_softmax", "linear") if k in set(rows["curve"])]
    fig, axes = plt.subplots(1, len(kinds), figsize=(4.2 * len(kinds), 3.5), squeeze=False)
    taus = sorted(t for t in rows["tau"].dropna().unique())
    colours = plt.cm.viridis(np.linspace(0, 0.9, max(len(taus), 1)))
    for ax, kind in zip(axes[0], kinds):
        part = rows[rows["curve"] == kind]
        for tau, colour in zip([np.nan] if kind == "input" else taus, colours):
            one = part if kind == "input" else part[part["tau"] == tau]
            one = one.groupby("x")["err"].mean()
            ax.step(
                one.index,
                one.values,
                where="mid",
                color="black" if kind == "input" else colour,
                label="scores" if kind == "input" else f"tau = {tau:g}",
            )
        ax.set_title(f"Fig. 5: {kind}")
        ax.set_xlabel("weight" if kind != "input" else "score")
        ax.set_ylabel("density")
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


def weight_variances(rows: pd.DataFrame) -> dict[str, pd.Series]:
    """Fig. 5's rows: per weight kind, the variance of its weights by tau (mean over seeds)."""
    return {
        str(kind): part.groupby("tau")["var"].mean()
        for kind, part in rows[rows["curve"] != "input"].groupby("curve")
    }


def histogram_verdicts(rows: pd.DataFrame) -> list[dict]:
    """Fig. 5 is descriptive: per weight kind, how the weights' spread (their variance) moves with tau."""
    out = []
    for kind, var in weight_variances(rows).items():
        lo, hi = var.idxmin(), var.idxmax()
        out.append(
            verdict_row(
                figure="5",
                panel=kind,
                metric="variance of the weights",
                best_tau=np.nan,
                at_tau1=float(var.get(1.0, np.nan)),
                verdict=f"{kind}: the weights' variance runs from {var.min():.3g} (tau = {lo:g}) to"
                f" {var.max():.3g} (tau = {hi:g}); a larger tau flattens the weights"
                if kind != "linear" or lo > hi
                else f"{kind}: variance {var.min():.3g} (tau = {lo:g}) to {var.max():.3g} (tau = {hi:g})",
            )
        )
    return out
