"""Analysis of seed 004's temperature kinds (scaling.kinds.temperature): their plug-in.

``python -m analysis sweeps/temp_*.yaml [--profile P]`` runs the pipeline every kind shares
(analysis/pipeline.py) with this plug-in (``TEMPERATURE``): into ``analysis_out/<experiment>/`` the table,
``verdicts.csv``, the paper's figures as PNG and SVG (fig1 / fig2a / fig2bc / fig3 / fig4 / fig5 / fig6)
and ``report.html``, logged as a ``kind=analysis`` run under the sweep's parent run.

``draw(table)`` gives the paper's figures (one per job found in the table), ``verdicts(table)`` a table a
reader can act on: per panel the best tau, the error (or exact match) at tau = 1 and at the best tau with
90% intervals, and whether the gain is resolved (its interval excludes zero); for the theory panels also
the largest gap between Thm 4.6 and Monte Carlo. Both read the table's columns (the curves each job
writes: predictor, x, tau, err, err_lo, err_hi, curve, source, panel, ... and ``param.job``); the scans'
verdicts also read the cells' ``units.parquet`` (``setup`` loads it: a score per question or prompt).

Intervals: the jobs' err_lo / err_hi are 90% intervals (theory Monte Carlo: +-1.645 standard errors over
the prompts; GPT-2: bootstrap over prompts per n; LLM: +-1 standard deviation over the Monte Carlo runs,
the paper's error bars). A theory verdict's difference of two curves takes each point's half-width as
1.645 standard errors and adds them in quadrature (independent errors; the curves share prompts, so this
is conservative). A scan's verdict intervals are bootstraps of the units (analysis/resample.py): test
questions and Monte Carlo runs (LLM), seeds and prompts (GPT-2); its gain is resolved only when that
interval excludes zero, and is not judged for cells that logged no units.
"""

from __future__ import annotations

import math
from typing import Mapping

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
import pandas as pd  # noqa: E402

from analysis import resample  # noqa: E402
from analysis.plugin import Analysis, AnalysisResult  # noqa: E402
from scaling.table import load_units  # noqa: E402

Z90 = 1.6448536269514722
VERDICT_COLUMNS = [
    "figure",
    "panel",
    "x",
    "metric",
    "best_tau",
    "at_tau1",
    "at_tau1_lo",
    "at_tau1_hi",
    "at_best",
    "at_best_lo",
    "at_best_hi",
    "vs_tau",
    "gain",
    "gain_lo",
    "gain_hi",
    "resolved",
    "tau_heuristic",
    "theory_gap",
    "verdict",
]
THEORY_COLOURS = {
    "tau=1": "tab:blue",
    "tau_opt": "tab:red",
    "bayes_ridge": "tab:green",
    "linear": "tab:purple",
    "linearized": "tab:orange",
}


def job_of(table: pd.DataFrame) -> pd.Series:
    if "param.job" in table:
        return table["param.job"].fillna("train")
    return pd.Series("train", index=table.index)


def jobs(table: pd.DataFrame) -> list[str]:
    """The table's temperature kinds (the jobs this module draws), sorted."""
    return sorted(job for job in set(job_of(table)) if job in FIGURES)


def _rows(table: pd.DataFrame, job: str) -> pd.DataFrame:
    return table[job_of(table) == job]


def _half(frame: pd.DataFrame) -> pd.Series:
    return ((frame["err_hi"] - frame["err_lo"]) / 2).fillna(0.0)


def _se(frame: pd.DataFrame) -> pd.Series:
    return _half(frame) / Z90


def _errors_at(one: pd.DataFrame, best: pd.DataFrame, x: float) -> dict[str, float]:
    """The verdict row's error (with its interval) at tau = 1 and at the best tau, at x."""
    return {
        f"{side}{suffix}": float(frame.loc[x, f"err{suffix}"])
        for side, frame in (("at_tau1", one), ("at_best", best))
        for suffix in ("", "_lo", "_hi")
    }


def _verdict_text(gain: float, lo: float, hi: float, what: str, best: str) -> str:
    if best == "tau = 1":  # nothing to compare: the model as trained is the best of the scanned taus
        return f"tau = 1 (as trained) is the best scanned tau on {what}"
    if lo > 0:
        return (
            f"{best} beats tau = 1 on {what}: gain {gain:.3g} (90% interval {lo:.3g} to {hi:.3g}) is resolved"
        )
    if hi < 0:
        return f"tau = 1 is better on {what} (interval {lo:.3g} to {hi:.3g})"
    return (
        f"no resolved difference between {best} and tau = 1 on {what}"
        f" (interval {lo:.3g} to {hi:.3g} includes 0)"
    )


def _row(**kw) -> dict:
    return {c: kw.get(c, np.nan) for c in VERDICT_COLUMNS}


# ----------------------------------------------------------------------------- theory (Figs. 1, 2, 4)


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
        both = sim.merge(th, on=["curve", "x"], suffixes=("", "_th"))
        gap_row = both.loc[(both["err"] - both["err_th"]).abs().idxmax()] if len(both) else None
        gap = float(abs(gap_row["err"] - gap_row["err_th"])) if gap_row is not None else np.nan
        gap_note = (
            f"largest |Thm 4.6 - Monte Carlo| = {gap:.3g} ({gap_row['curve']}, x = {gap_row['x']:g}):"
            " the finite-l effect of the theory's large-l limit"
            if gap_row is not None
            else ""
        )
        one, opt = sim[sim["curve"] == "tau=1"].set_index("x"), sim[sim["curve"] == "tau_opt"].set_index("x")
        common = one.index.intersection(opt.index)
        if figure == "4" or not len(common):  # Fig. 4 compares linear and linearized attention at tau = 1
            lin, lzd = (
                sim[sim["curve"] == "linear"].set_index("x"),
                sim[sim["curve"] == "linearized"].set_index("x"),
            )
            common = lin.index.intersection(lzd.index)
            if not len(common):
                continue
            x = max(common)
            diff = float(lin.loc[x, "err"] - lzd.loc[x, "err"])
            se = math.hypot(_se(lin.loc[[x]]).iloc[0], _se(lzd.loc[[x]]).iloc[0])
            lo, hi = diff - Z90 * se, diff + Z90 * se
            verdict = (
                f"at l = {x:g} linear attention's error exceeds linearized attention's by {diff:.3g}"
                f" (90% interval {lo:.3g} to {hi:.3g}){'' if lo > 0 else ', not resolved'}; {gap_note}"
            )
            out.append(
                _row(
                    figure=figure,
                    panel=panel,
                    x=x,
                    metric="err (linear - linearized)",
                    best_tau=1.0,
                    **_errors_at(lin, lzd, x),
                    gain=diff,
                    gain_lo=lo,
                    gain_hi=hi,
                    resolved=bool(lo > 0 or hi < 0),
                    theory_gap=gap,
                    verdict=verdict,
                )
            )
            continue
        th_one = th[th["curve"] == "tau=1"].set_index("x")["err"]
        th_opt = th[th["curve"] == "tau_opt"].set_index("x")["err"]
        theory_gain = (th_one - th_opt).reindex(common)
        x = float(theory_gain.idxmax()) if theory_gain.notna().any() else float(max(common))
        gain = float(one.loc[x, "err"] - opt.loc[x, "err"])
        se = math.hypot(_se(one.loc[[x]]).iloc[0], _se(opt.loc[[x]]).iloc[0])
        lo, hi = gain - Z90 * se, gain + Z90 * se
        tau_opt = float(opt.loc[x, "tau"])
        verdict = _verdict_text(
            gain, lo, hi, f"the Monte Carlo error at x = {x:g}", f"tau_opt = {tau_opt:.3g}"
        )
        out.append(
            _row(
                figure=figure,
                panel=panel,
                x=x,
                metric="err (Monte Carlo)",
                best_tau=tau_opt,
                **_errors_at(one, opt, x),
                gain=gain,
                gain_lo=lo,
                gain_hi=hi,
                resolved=bool(lo > 0 or hi < 0),
                theory_gap=gap,
                verdict=f"{verdict}; {gap_note}",
            )
        )
    return out


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
            _row(
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


# ----------------------------------------------------------------------------- tau scans (Figs. 3 and 6)


def _tau_curves(rows: pd.DataFrame) -> pd.DataFrame:
    """The tau=<value> rows (no split rows), averaged over seeds per (panel, tau, x)."""
    scans = rows[rows["tau"].notna() & ~rows["predictor"].astype(str).str.contains("|", regex=False)]
    return scans.groupby(["panel", "tau", "x"], as_index=False).agg(
        err=("err", "mean"), err_lo=("err_lo", "mean"), err_hi=("err_hi", "mean"), seeds=("seed", "nunique")
    )


def scan_verdicts(
    rows: pd.DataFrame,
    figure: str,
    llm: bool,
    units: Mapping[str, pd.DataFrame | None] | None = None,
    resamples: int = 1000,
) -> list[dict]:
    """Per panel of a tau scan: the best tau (least mean error over x; for the LLM, most exact match),
    the metric at tau = 1 and at the best tau averaged over x with 90% intervals, the gain's interval;
    for the LLM also one row per x (noisy ratio or demonstrations).

    The intervals are bootstraps of the cells' ``units`` (run id -> its units.parquet; analysis/resample.py):
    over questions and Monte Carlo runs for the LLM, over seeds and prompts for GPT-2. A panel whose cells
    did not all log their units (cells run before they did) gets no interval and is not judged resolved."""
    out = []
    units = units or {}
    curves = _tau_curves(rows)
    for panel, part in curves.groupby("panel"):
        cells = rows.loc[rows["panel"] == panel, ["run_id", "seed"]].drop_duplicates("run_id")
        logged = {r: units.get(r) for r in cells["run_id"]}
        unlogged = sorted(rows.attrs.get("runs", {}).get(r, r) for r, u in logged.items() if u is None)
        heuristic = (
            float(rows.loc[rows["panel"] == panel, "tau_heuristic"].mean())
            if "tau_heuristic" in rows
            else np.nan
        )
        points = [(None, part)]
        if llm:
            points += [(x, part[part["x"] == x]) for x in sorted(part["x"].unique())]
        for x, sub in points:
            means = sub.groupby("tau")["err"].mean()
            if 1.0 not in means.index:
                continue
            best, vs = _best_and_weighed(means)
            common, a1, av, ab = _means_at(sub, best, vs)
            gain = a1 - av  # error at tau = 1 minus at tau = vs: for the LLM, EM(vs) - EM(1)
            nan3 = (np.nan, np.nan, np.nan)
            if unlogged:
                i1, iv, ig = nan3, nan3, nan3
            elif llm:
                i1, iv, ig = _llm_intervals(cells, logged, vs, list(common), resamples)
            else:
                i1, iv, ig = _gpt2_intervals(cells, logged, vs, resamples)
            ib = i1 if best == 1.0 else iv
            lo, hi = ig[1], ig[2]
            what = (
                f"exact match ({'all x' if x is None else f'x = {x:g}'})"
                if llm
                else "the error averaged over n"
            )
            text = _verdict_text(gain, lo, hi, what, f"tau = {best:g}")
            if best == 1.0 and vs != 1.0:
                text += "; " + _runner_up_text(gain, lo, hi, vs, llm)
            if unlogged and best != 1.0:
                text = _not_judged(gain, best, what, unlogged, len(cells))
            if math.isfinite(heuristic):
                text += f"; heuristic tau (App. J) = {heuristic:.3g}"
            at = dict(at_tau1=1 - a1, at_best=1 - ab) if llm else dict(at_tau1=a1, at_best=ab)  # LLM: EM
            out.append(
                _row(
                    figure=figure,
                    panel=panel,
                    x=x if (llm and x is not None) else np.nan,
                    metric="exact match" if llm else "err (mean over n)",
                    best_tau=best,
                    **at,
                    at_tau1_lo=i1[1],
                    at_tau1_hi=i1[2],
                    at_best_lo=ib[1],
                    at_best_hi=ib[2],
                    vs_tau=vs,
                    gain=gain,
                    gain_lo=lo,
                    gain_hi=hi,
                    resolved=bool(lo > 0 or hi < 0),
                    tau_heuristic=heuristic,
                    verdict=text,
                )
            )
    return out


def _best_and_weighed(means: pd.Series) -> tuple[float, float]:
    """The best tau (least mean error) and the tau weighed against tau = 1: the best, or when tau = 1 is the
    best, the best of the others (so a scan always says by how much, with its interval, a tau other than 1
    helps or hurts)."""
    best = float(means.idxmin())
    others = means.drop(1.0)
    return best, (best if best != 1.0 or others.empty else float(others.idxmin()))


def _means_at(sub: pd.DataFrame, best: float, vs: float) -> tuple[pd.Index, float, float, float]:
    """The x where tau = 1 and tau = vs both have a point, and the mean error there at tau = 1, vs, best."""
    one, top = sub[sub["tau"] == 1.0].set_index("x"), sub[sub["tau"] == vs].set_index("x")
    common = one.index.intersection(top.index)
    at_best = sub[sub["tau"] == best].set_index("x").loc[common, "err"].mean()
    return common, float(one.loc[common, "err"].mean()), float(top.loc[common, "err"].mean()), float(at_best)


def _runner_up_text(gain: float, lo: float, hi: float, vs: float, llm: bool) -> str:
    """How the best tau other than 1 compares, when tau = 1 is the best scanned: a loss, resolved or not."""
    change = f"{'exact match' if llm else 'error'} {'up' if (gain > 0) == llm else 'down'} by {abs(gain):.3g}"
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return f"the best other, tau = {vs:g}: {change} (no interval)"
    return (
        f"the best other, tau = {vs:g}: {change} (gain {gain:.3g}, 90% interval {lo:.3g} to {hi:.3g}"
        f"{', resolved' if lo > 0 or hi < 0 else ', not resolved'})"
    )


def _not_judged(gain: float, best: float, what: str, unlogged: list[str], cells: int) -> str:
    """The verdict of a gain whose cells did not all log units.parquet (cells run before the scans did)."""
    named = ", ".join(unlogged[:3]) + (", ..." if len(unlogged) > 3 else "")
    return (
        f"not judged: gain of tau = {best:g} over tau = 1 on {what} is {gain:.3g}, but {len(unlogged)} of"
        f" {cells} cells logged no units.parquet (per-question or per-prompt scores: {named}); they ran"
        " before the scans recorded them: rerun them for an interval"
    )


def _llm_intervals(
    cells: pd.DataFrame, units: Mapping[str, pd.DataFrame], best: float, xs: list[float], resamples: int
) -> tuple[tuple, tuple, tuple]:
    """(EM at tau = 1, EM at the best tau, their gain) as (value, lo, hi): the crossed bootstrap over
    Monte Carlo runs (a cell's seed and run) and test questions of the x in ``xs``."""
    frames = [
        units[run_id].assign(seed=seed) for run_id, seed in zip(cells["run_id"], cells["seed"], strict=True)
    ]
    scored = pd.concat(frames, ignore_index=True)
    scored = scored[scored["tau"].isin([1.0, best]) & scored["x"].isin(xs)]
    run_units = {key: i for i, key in enumerate(sorted(set(zip(scored["seed"], scored["run"]))))}
    x_index = {x: i for i, x in enumerate(sorted(xs))}
    shape = (len(x_index), len(run_units), int(scored["question"].max()) + 1 if len(scored) else 0)
    arrays = {}
    for tau in (1.0, best):
        one = scored[scored["tau"] == tau]
        array = np.full(shape, np.nan)
        r = [run_units[key] for key in zip(one["seed"], one["run"])]
        array[one["x"].map(x_index).to_numpy(), r, one["question"].to_numpy()] = one["correct"].astype(float)
        arrays[tau] = array
    drawn = resample.crossed(
        {"one": arrays[1.0], "best": arrays[best], "gain": arrays[best] - arrays[1.0]}, resamples
    )
    return drawn["one"], drawn["best"], drawn["gain"]


def _gpt2_intervals(
    cells: pd.DataFrame, units: Mapping[str, pd.DataFrame], best: float, resamples: int
) -> tuple[tuple, tuple, tuple]:
    """(error at tau = 1, at the best tau, their gain) as (value, lo, hi): the nested bootstrap over cells
    (seeds) and, within each, its prompts' errors averaged over n."""
    per_tau: dict[float, list[np.ndarray]] = {1.0: [], best: []}
    for run_id in cells["run_id"]:
        frame = units[run_id]
        for tau in per_tau:
            per_tau[tau].append(frame[frame["tau"] == tau].sort_values("prompt")["err"].to_numpy(float))
    gain = [a - b for a, b in zip(per_tau[1.0], per_tau[best], strict=True)]
    drawn = resample.nested({"one": per_tau[1.0], "best": per_tau[best], "gain": gain}, resamples)
    return drawn["one"], drawn["best"], drawn["gain"]


def draw_scan(rows: pd.DataFrame, title: str, llm: bool) -> plt.Figure:
    """One panel per shift (GPT-2) or per x axis (LLM): one curve per tau, tau = 1 bold black, the best tau
    dashed red; GPT-2 adds its baselines (grey), the LLM marks the heuristic tau in the legend."""
    curves = _tau_curves(rows)
    panels = sorted(curves["panel"].unique())
    fig, axes = plt.subplots(1, len(panels), figsize=(5.5 * len(panels), 4), squeeze=False)
    for ax, panel in zip(axes[0], panels):
        part = curves[curves["panel"] == panel]
        means = part.groupby("tau")["err"].mean()
        best = float(means.idxmin())
        taus = sorted(part["tau"].unique())
        colours = plt.cm.coolwarm(np.linspace(0, 1, len(taus)))
        heuristic = (
            float(rows.loc[rows["panel"] == panel, "tau_heuristic"].mean())
            if "tau_heuristic" in rows
            else np.nan
        )
        for tau, colour in zip(taus, colours):
            one = part[part["tau"] == tau].sort_values("x")
            y = 1 - one["err"] if llm else one["err"]
            lo = 1 - one["err_hi"] if llm else one["err_lo"]
            hi = 1 - one["err_lo"] if llm else one["err_hi"]
            style = dict(color=colour, lw=1.0, alpha=0.8)
            label = f"tau = {tau:g}"
            if tau == 1.0:
                style = dict(color="black", lw=2.6)
                label += " (as trained)"
            if tau == best:
                style = dict(color="tab:red", lw=2.2, ls="--") if tau != 1.0 else style
                label += " (best)"
            if llm:
                ax.errorbar(
                    one["x"], y, yerr=[y - lo, hi - y], capsize=2, marker="o", ms=3, label=label, **style
                )
            else:
                ax.plot(one["x"], y, label=label, **style)
                ax.fill_between(one["x"], lo, hi, color=style["color"], alpha=0.08)
        if not llm:
            base = rows[rows["tau"].isna() & ~rows["predictor"].astype(str).str.contains("|", regex=False)]
            base = base[base["panel"] == panel]
            # the taus' curves set the frame: least squares near n = d (its interpolation peak) would flatten
            # them to a line; a baseline that leaves the frame says so
            top = 1.3 * float(part["err_hi"].fillna(part["err"]).max())
            for name, b in base.groupby("predictor"):
                b = b.groupby("n")["err"].mean()
                label = f"{name} (baseline{', above the frame in places' if b.max() > top else ''})"
                ax.plot(b.index, b.values, color="grey", ls=":", lw=1.5, label=label)
            if math.isfinite(top) and top > 0:
                ax.set_ylim(0, top)
            ax.set_xlabel("context length n")
            ax.set_ylabel("normalised squared error")
            ax.set_title(f"Fig. 6: shift {panel}")
        else:
            ax.set_xlabel("noisy ratio" if panel == "noisy_ratio" else "number of demonstrations")
            ax.set_ylabel("exact match")
            ax.set_title(f"Fig. 3{'b' if panel == 'noisy_ratio' else 'a'}")
        if math.isfinite(heuristic):
            ax.plot([], [], " ", label=f"heuristic tau (App. J) = {heuristic:.3g}")
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig


# ----------------------------------------------------------------------------- entry points


def _context_figure(rows: pd.DataFrame, title: str) -> dict[str, plt.Figure]:
    """Fig. 1, or Fig. 2a when every cell is the noise shift's (the temp_fig2 sweep's context cell)."""
    return {("fig2a" if set(rows["figure"].astype(str)) == {"2"} else "fig1"): draw_theory(rows, title)}


# the figures (file stem -> figure) and verdict rows of each temperature kind, by the cells' ``job``
FIGURES = {
    "theory_context": _context_figure,
    "theory_noise": lambda rows, title: {"fig2bc": draw_theory(rows, title)},
    "theory_mean_shift": lambda rows, title: {"fig4": draw_theory(rows, title)},
    "attention_histograms": lambda rows, title: {"fig5": draw_histograms(rows, title)},
    "gpt2_scan": lambda rows, title: {"fig6": draw_scan(rows, title, llm=False)},
    "llm_scan": lambda rows, title: {"fig3": draw_scan(rows, title, llm=True)},
}
VERDICTS = {  # (rows, units, resamples) -> verdict rows; only the scans resample units
    "theory_context": lambda rows, units, resamples: theory_verdicts(rows),
    "theory_noise": lambda rows, units, resamples: theory_verdicts(rows),
    "theory_mean_shift": lambda rows, units, resamples: theory_verdicts(rows),
    "attention_histograms": lambda rows, units, resamples: histogram_verdicts(rows),
    "gpt2_scan": lambda rows, units, resamples: scan_verdicts(rows, "6", False, units, resamples),
    "llm_scan": lambda rows, units, resamples: scan_verdicts(rows, "3", True, units, resamples),
}
SCANS = ("gpt2_scan", "llm_scan")  # the jobs that log units.parquet


def draw(table: pd.DataFrame, name: str) -> dict[str, plt.Figure]:
    """The figures of every temperature job in the table, keyed by file stem."""
    figures = {}
    for job in jobs(table):
        figures.update(FIGURES[job](_rows(table, job), f"{name}: {job}"))
    return figures


def verdicts(
    table: pd.DataFrame, units: Mapping[str, pd.DataFrame | None] | None = None, resamples: int = 1000
) -> pd.DataFrame:
    """The verdict table (VERDICT_COLUMNS) of every temperature job in the table; ``units``: the scan
    cells' units.parquet by run id (scaling.table.load_units), which the scans' intervals resample."""
    out: list[dict] = []
    for job in jobs(table):
        out += VERDICTS[job](_rows(table, job), units, resamples)
    return pd.DataFrame(out, columns=VERDICT_COLUMNS)


def scan_runs(table: pd.DataFrame) -> list[str]:
    """The run ids of the table's scan cells (the cells whose units the verdicts resample)."""
    return sorted(set(table.loc[job_of(table).isin(SCANS), "run_id"]))


# ----------------------------------------------------------------------------- the plug-in


def answer_line(table: pd.DataFrame) -> str:
    """One line for the report's head: how many panels a tuned tau helps, resolved."""
    if table is None or table.empty:
        return "no verdicts"
    judged = table[table["gain"].notna() & table["figure"].isin(["1", "2", "3", "6"])]
    if "x" in judged:  # LLM: the pooled row of each panel (x NaN); theory and GPT-2 rows are per panel
        judged = judged[judged["x"].isna() | ~judged["figure"].isin(["3"])]
    if judged.empty:
        return f"{len(table)} verdict rows (descriptive figures only)"
    better = judged[judged["gain_lo"] > 0]
    worse = judged[judged["gain_hi"] < 0]
    return (
        f"tuned tau vs tau = 1: a resolved gain in {len(better)} of {len(judged)} panels"
        f" ({', '.join(f'Fig. {f} {p}' for f, p in zip(better['figure'], better['panel'])) or 'none'}),"
        f" a resolved loss in {len(worse)}, unresolved in {len(judged) - len(better) - len(worse)}"
    )


def read_units(result: AnalysisResult) -> None:
    """The scan cells' units.parquet (None for a cell that logged none), and a note naming those."""
    result.units = load_units(result.tracking_uri, scan_runs(result.table))
    unlogged = [r for r, u in result.units.items() if u is None]
    if unlogged:
        result.notes.append(
            f"{len(unlogged)} scan cells logged no units.parquet (per-question or per-prompt scores;"
            " cells run before the scans recorded them): their gains get no interval and are not"
            " judged resolved; rerun those cells"
        )


VERDICT_NOTE = (
    "Intervals are 90%: theory Monte Carlo +-1.645 standard errors over prompts;"
    " GPT-2 scan: bootstrap over seeds and prompts;\n"
    "LLM scan: bootstrap over test questions and Monte Carlo runs (paired between taus)."
    " A gain is resolved\n"
    "when its interval excludes zero. theory_gap is the largest |Thm 4.6 - Monte Carlo|"
    " over a panel's points:\n"
    "the finite-l effect of a large-l theory."
)

# the paper's figures of each temperature job in the table, the verdict rows, the answer line
TEMPERATURE = Analysis(
    verdicts=lambda result: verdicts(result.table, result.units, result.request.bootstrap),
    figures=lambda result: draw(result.table, result.experiment),
    answer=lambda result: answer_line(result.verdicts),
    setup=read_units,
    verdict_note=VERDICT_NOTE,
)
