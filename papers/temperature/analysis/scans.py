"""The verdicts and figures of seed 004's tau scans: a GPT-2 on shifted linear regression (Fig. 6) and a
causal LM on SciQ with noisy demonstrations (Fig. 3). A scan's verdict intervals come from the cells' units
(papers/temperature/analysis/resample.py), by the scan's structure: one GPT-2 on several prompt seeds, Student
t over the pooled prompts (it covers the prompts' sampling for that model); a GPT-2 trained per cell, Student
t over the trained models (3 or more); the LLM, a bootstrap over test questions and Monte Carlo runs. A gain
is resolved only when that interval excludes zero, and each verdict says what its interval covers."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Mapping

import numpy as np
import pandas as pd

from analysis.plots import plt
from papers.temperature.analysis import resample
from papers.temperature.analysis.fig6 import precondition_rows
from papers.temperature.analysis.verdict_rows import verdict_row, verdict_text


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

    The intervals come from the cells' ``units`` (run id -> its units.parquet;
    papers/temperature/analysis/resample.py): a bootstrap over questions and Monte Carlo runs for the LLM,
    Student t over the prompts of one model or over trained models for GPT-2 (whose panels add Fig. 6's
    precondition rows, fig6.py). A panel whose cells did not all log their units (cells run before they did)
    gets no interval and is not judged."""
    out = []
    for name, part in _tau_curves(rows).groupby("panel"):
        panel = _scan_panel(rows, name, units or {}, llm)
        if not llm and not panel.unlogged:
            out += precondition_rows(
                rows[rows["panel"] == name], panel.cells, panel.logged, panel.trained, name
            )
        points = [(None, part)]
        if llm:
            points += [(x, part[part["x"] == x]) for x in sorted(part["x"].unique())]
        for x, sub in points:
            row = _point_verdict(figure, panel, x, sub, llm, resamples)
            if row is not None:
                out.append(row)
    return out


@dataclass(frozen=True)
class _ScanPanel:
    """What the verdicts of one scan panel share: its cells (run id, seed), their units by run id (None
    where a cell logged none), the cells without units (by name), whether each cell trained its own
    model, the App. J heuristic tau, and the words each verdict ends with (coverage, heuristic)."""

    name: str
    cells: pd.DataFrame
    logged: dict[str, pd.DataFrame | None]
    unlogged: list[str]
    trained: bool
    heuristic: float
    said: str


def _scan_panel(
    rows: pd.DataFrame, name: str, units: Mapping[str, pd.DataFrame | None], llm: bool
) -> _ScanPanel:
    """A scan panel's cells, their units and the words its verdicts end with."""
    cells = rows.loc[rows["panel"] == name, ["run_id", "seed"]].drop_duplicates("run_id")
    logged = {r: units.get(r) for r in cells["run_id"]}
    unlogged = sorted(rows.attrs.get("runs", {}).get(r, r) for r, u in logged.items() if u is None)
    heuristic, heuristic_said = heuristic_tau(rows[rows["panel"] == name])
    covers = "" if unlogged else coverage_text(rows, cells, logged, llm)
    said = "".join(f"; {words}" for words in (covers, heuristic_said) if words)
    return _ScanPanel(name, cells, logged, unlogged, trained_per_cell(rows), heuristic, said)


def _point_verdict(
    figure: str, panel: _ScanPanel, x: float | None, sub: pd.DataFrame, llm: bool, resamples: int
) -> dict | None:
    """The verdict row of one point of a scan panel (x None: over all its x): the best tau against tau = 1
    (or, when tau = 1 is best, the best other), with intervals; None when tau = 1 was not scanned there."""
    means = sub.groupby("tau")["err"].mean()
    if 1.0 not in means.index:
        return None
    best, vs = _best_and_weighed(means)
    common, a1, av, ab = _means_at(sub, best, vs)
    gain = a1 - av  # error at tau = 1 minus at tau = vs: for the LLM, EM(vs) - EM(1)
    i1, iv, ig = _point_intervals(panel, vs, common, llm, resamples)
    ib = i1 if best == 1.0 else iv
    lo, hi = ig[1], ig[2]
    what = f"exact match ({'all x' if x is None else f'x = {x:g}'})" if llm else "the error averaged over n"
    text = _scan_text(gain, (lo, hi), (best, vs), what, llm)
    if panel.unlogged and best != 1.0:
        text = _not_judged(gain, best, what, panel.unlogged, len(panel.cells))
    at = dict(at_tau1=1 - a1, at_best=1 - ab) if llm else dict(at_tau1=a1, at_best=ab)  # LLM: EM
    return verdict_row(
        figure=figure,
        panel=panel.name,
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
        tau_heuristic=panel.heuristic,
        verdict=text + panel.said,
    )


def _point_intervals(
    panel: _ScanPanel, vs: float, common: pd.Index, llm: bool, resamples: int
) -> tuple[tuple, tuple, tuple]:
    """(metric at tau = 1, at tau = vs, their gain) as (value, lo, hi) over the x in ``common``: the LLM's
    crossed bootstrap or GPT-2's Student t; all NaN when a cell of the panel logged no units."""
    if panel.unlogged:
        nan3 = (np.nan, np.nan, np.nan)
        return nan3, nan3, nan3
    if llm:
        return _llm_intervals(panel.cells, panel.logged, vs, list(common), resamples)
    return _gpt2_intervals(panel.cells, panel.logged, vs, panel.trained)


def heuristic_tau(rows: pd.DataFrame) -> tuple[float, str]:
    """The App. J heuristic tau of a panel's cells and the words for it: the mean off-diagonal second
    moment over the mean diagonal first moment of their scores at tau = 1, "undefined" when that diagonal
    moment is not positive (Thm. 4.7's ratio needs it positive), with the per-layer moments (of the first
    cell). Cells that logged only tau_heuristic (before the moments): its value, undefined when <= 0."""
    if "score_diag_m1" in rows and rows["score_diag_m1"].notna().any():
        cells = rows.dropna(subset=["score_diag_m1"]).drop_duplicates(["run_id", "x"])
        diag, off = float(cells["score_diag_m1"].mean()), float(cells["score_offdiag_m2"].mean())
        if diag > 0:
            return off / diag, f"heuristic tau (App. J) = {off / diag:.3g}"
        layers = str(cells["score_layers"].iloc[0]) if "score_layers" in cells else ""
        return math.nan, (
            f"heuristic tau (App. J) undefined: the diagonal scores' mean is {diag:.3g} <= 0 (Thm. 4.7's "
            f"ratio needs it positive; off-diagonal E[s^2] {off:.3g}); per layer: {layers}"
        )
    if "tau_heuristic" not in rows or rows["tau_heuristic"].isna().all():
        return math.nan, ""
    logged = float(rows["tau_heuristic"].mean())
    if logged > 0:
        return logged, f"heuristic tau (App. J) = {logged:.3g}"
    return math.nan, (
        f"heuristic tau (App. J) undefined: the cells logged {logged:.3g}, a diagonal moment <= 0 (Thm. "
        "4.7's ratio needs it positive); they ran before the scans logged the per-layer moments: rerun them"
    )


def _scan_text(gain: float, interval: tuple, taus: tuple[float, float], what: str, llm: bool) -> str:
    """The verdict in words: the best tau against tau = 1, and the best other when tau = 1 is best."""
    (lo, hi), (best, vs) = interval, taus
    text = verdict_text(gain, lo, hi, what, f"tau = {best:g}")
    if best == 1.0 and vs != 1.0:
        text += "; " + _runner_up_text(gain, lo, hi, vs, llm)
    return text


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


def coverage_text(
    rows: pd.DataFrame, cells: pd.DataFrame, units: Mapping[str, pd.DataFrame], llm: bool
) -> str:
    """What a scan panel's intervals cover, in words, from its cells' units."""
    frames = [scan_units(units[r]) for r in cells["run_id"]]
    if llm:
        questions = max(int(f["question"].max()) + 1 for f in frames)
        runs = sum(f["run"].nunique() for f in frames)
        return (
            f"intervals: 90% bootstrap over the {questions} test questions and {runs} Monte Carlo runs of "
            "one model, crossed (they cover the questions' and the noisy labels' sampling for this model)"
        )
    prompts = int((frames[0]["tau"] == frames[0]["tau"].iloc[0]).sum())
    if trained_per_cell(rows) and len(frames) < 3:
        return f"intervals: none, {len(frames)} trained model(s) (a seed each): too few seeds (3 needed)"
    return "intervals: " + gpt2_coverage(rows, len(frames), prompts)


def scan_units(frame: pd.DataFrame) -> pd.DataFrame:
    """A GPT-2 scan cell's units of the tau scan (each prompt's error averaged over n), without Fig. 6's
    per-n precondition rows (papers/temperature/analysis/fig6.py); an LLM cell's as they are."""
    return frame[frame["n"].isna()] if "n" in frame and "prompt" in frame else frame


def trained_per_cell(rows: pd.DataFrame) -> bool:
    """Whether each GPT-2 scan cell trained its own model (``temperature.train_model``); otherwise every cell
    scans one model (a checkpoint, another sweep's run) on its own prompt seed."""
    column = "param.temperature.train_model"
    return column in rows and rows[column].astype(str).str.lower().isin(["true", "1"]).any()


def gpt2_coverage(rows: pd.DataFrame, cells: int, prompts: int) -> str:
    """What a GPT-2 scan's intervals cover, in words (papers/temperature/analysis/resample.py says why each
    method)."""
    if trained_per_cell(rows):
        return (
            f"90% Student t interval over {cells} trained models (one per seed, each on its own "
            f"{prompts} prompts): it covers retraining and the prompts"
        )
    return (
        f"90% Student t interval over the {cells * prompts} prompts of one model ({cells} prompt seeds x "
        f"{prompts}): it covers the test prompts' sampling for this model, not retraining"
    )


def _gpt2_intervals(
    cells: pd.DataFrame, units: Mapping[str, pd.DataFrame], best: float, trained: bool
) -> tuple[tuple, tuple, tuple]:
    """(error at tau = 1, at the best tau, their gain) as (value, lo, hi), from each cell's prompts' errors
    averaged over n (paired between the taus): Student t over the cells' means when each trained its own
    model (resample.over_models; fewer than 3: no interval), else over the pooled prompts of the one model
    (resample.over_prompts)."""
    per_tau: dict[float, list[np.ndarray]] = {1.0: [], best: []}
    for run_id in cells["run_id"]:
        frame = scan_units(units[run_id])
        for tau in per_tau:
            per_tau[tau].append(frame[frame["tau"] == tau].sort_values("prompt")["err"].to_numpy(float))
    gain = [a - b for a, b in zip(per_tau[1.0], per_tau[best], strict=True)]
    values = {"one": per_tau[1.0], "best": per_tau[best], "gain": gain}
    drawn = resample.over_models(values) if trained else resample.over_prompts(values)
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
        heuristic, said = heuristic_tau(rows[rows["panel"] == panel])
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
                above = ", above the frame in places" if b.max() > top else ""
                if str(name).startswith("unshifted"):  # Fig. 6's precondition: the model without the shift
                    ax.plot(
                        b.index, b.values, color="black", ls="--", lw=1.2, label=f"tau = 1 unshifted{above}"
                    )
                    continue
                label = f"{name} (baseline{above})"
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
        if said:
            label = f"heuristic tau (App. J) = {heuristic:.3g}" if math.isfinite(heuristic) else said[:60]
            ax.plot([], [], " ", label=label)
        ax.legend(fontsize=6)
    fig.suptitle(title, fontsize=9)
    fig.tight_layout()
    return fig
