"""Seed 004's claims about its theory figures that are not a tau's gain (papers/temperature/analysis/claims.py
lists them): Thm. 4.6 against Monte Carlo, and the trends of Figs. 1, 2 and 4 and of Sec. 4.4's special
case, each read from the theory jobs' curves in the analysed table (theory lines, Monte Carlo points with
their standard errors).

- Thm. 4.6 agrees with Monte Carlo: at every point of the panel, |theory - Monte Carlo| is within AGREE of
  the theory or inside the point's 90% Monte Carlo interval.
- A curve converges to Bayes ridge as l grows: its Monte Carlo excess over Bayes ridge shrinks from the
  smallest to the largest l / d (the drop's 90% interval above 0, standard errors in quadrature: the
  points share prompts, so this errs wide) and ends within AGREE of Bayes ridge. A shift's effect shrinks
  with l: tau = 1's excess over Bayes ridge so shrinks (no end condition).
- Fig. 2b, the gap to Bayes ridge grows with sigma_test: tau = 1's excess in the raw error (eq. 8, as the
  paper plots it) is larger at the largest sigma_test than at the smallest, resolved.
- Fig. 2c, tau_opt rises with sigma_test: Thm. 4.7's tau_opt is increasing over the scanned sigma_test and
  the Monte Carlo minimiser is larger at the largest than at the smallest, resolved.
- Fig. 4: linearized attention converges to Bayes ridge (as above) while linear attention's excess at the
  largest l stays above AGREE, resolved.
- Sec. 4.4 (sweeps/temp_sec44.yaml: w ~ N(0, I), sigma = 0, Sigma_x test = c I): tau_opt = c (Thm. 4.7 within
  AGREE of c at the largest l / d; it is c (1 + d / l) there, tending to c), and tau_opt fully counteracts
  the shift (the shifted Monte Carlo error at tau_opt within AGREE of the unshifted model's at its own
  tau_opt, at every l / d).
"""

from __future__ import annotations

import math

import pandas as pd
import yaml

from analysis.claims import NOT_REPRODUCED, NOT_RUN, REPRODUCED, Outcome
from papers.temperature.analysis.verdict_rows import Z90
from papers.temperature.settings import COVARIANCE_SCALE
from scaling.judge.verdicts import INCONCLUSIVE

AGREE = 0.10  # the stated threshold: within 10% of the theory, of Bayes ridge, of c


def _panel_of(value: str, spec: str) -> bool:
    return value == spec or value.startswith(spec + "(")


def panel_rows(result, figure: str, panel: str) -> pd.DataFrame:
    """The theory curves' rows of one figure's panel (e.g. "1", "input_covariance"), numbers as numbers."""
    t = result.table
    if "source" not in t or "figure" not in t:
        return t.iloc[0:0]
    rows = t[(t["figure"].astype(str) == figure) & t["panel"].astype(str).map(lambda p: _panel_of(p, panel))]
    rows = rows[rows["source"].isin(["theory", "simulation"])]
    return rows.assign(se=(rows["err_hi"] - rows["err_lo"]) / (2 * Z90))


def series(rows: pd.DataFrame, curve: str, source: str, column: str = "err") -> pd.Series:
    """A curve's ``column`` by x (mean over seeds)."""
    part = rows[(rows["curve"] == curve) & (rows["source"] == source)]
    return part.groupby("x")[column].mean().sort_index()


def raw_se(rows: pd.DataFrame, curve: str) -> pd.Series:
    return series(rows, curve, "simulation", "err_se")


def agreement(figure: str, panel: str):
    """Thm. 4.6 against Monte Carlo at every point of a panel, with the threshold AGREE."""

    def check(result) -> Outcome:
        rows = panel_rows(result, figure, panel)
        worst, points, off = None, 0, 0
        for curve in sorted(set(rows["curve"])):
            th, mc = series(rows, curve, "theory"), series(rows, curve, "simulation")
            se = series(rows, curve, "simulation", "se")
            for x in th.index.intersection(mc.index):
                gap, points = abs(mc[x] - th[x]), points + 1
                agrees = gap <= AGREE * abs(th[x]) or gap <= Z90 * se[x]
                off += not agrees
                if worst is None or gap / abs(th[x]) > worst[0]:
                    worst = (gap / abs(th[x]), curve, x, th[x], mc[x])
        if not points:
            return Outcome(NOT_RUN, f"no theory and Monte Carlo points in Fig. {figure} ({panel})")
        rel, curve, x, th, mc = worst
        said = (
            f"{points - off} of {points} points agree (within {AGREE:.0%} of Thm. 4.6 or inside the Monte"
            f" Carlo 90% interval); the largest gap, {rel:.1%}, at x = {x:g} ({curve}: theory {th:.3g},"
            f" Monte Carlo {mc:.3g})"
        )
        return Outcome(REPRODUCED if off == 0 else NOT_REPRODUCED, said)

    return check


def excess_drop(rows: pd.DataFrame, curve: str) -> tuple[pd.Series, float, float, float] | str:
    """(the curve's Monte Carlo excess over Bayes ridge by x, its drop from the smallest to the largest x, the
    drop's 90% interval), or why not."""
    mc, bayes = series(rows, curve, "simulation"), series(rows, "bayes_ridge", "simulation")
    se, se_b = series(rows, curve, "simulation", "se"), series(rows, "bayes_ridge", "simulation", "se")
    xs = mc.index.intersection(bayes.index)
    if len(xs) < 2:
        return f"no {curve} and Bayes ridge Monte Carlo points at two x"
    excess = (mc - bayes)[xs]
    first, last = xs.min(), xs.max()
    drop = float(excess[first] - excess[last])
    half = Z90 * math.sqrt(se[first] ** 2 + se_b[first] ** 2 + se[last] ** 2 + se_b[last] ** 2)
    return excess, drop, drop - half, drop + half


def approaches_bayes(figure: str, panel: str, curve: str, end: bool = True):
    """``curve``'s excess over Bayes ridge shrinks as l grows (resolved), and (``end``) ends within AGREE."""

    def check(result) -> Outcome:
        rows = panel_rows(result, figure, panel)
        found = excess_drop(rows, curve)
        if isinstance(found, str):
            return Outcome(NOT_RUN, found)
        excess, drop, lo, hi = found
        bayes = series(rows, "bayes_ridge", "simulation")
        last = excess.index.max()
        rel = float(excess[last] / bayes[last])
        said = (
            f"{curve}'s excess over Bayes ridge (Monte Carlo, err/E[y^2]) goes from {excess.iloc[0]:.3g}"
            f" at x = {excess.index.min():g} to {excess[last]:.3g} at x = {last:g} (drop {drop:.3g}, 90%"
            f" interval {lo:.3g} to {hi:.3g})"
            + (f"; at the end {rel:.1%} above Bayes ridge (matched within {AGREE:.0%})" if end else "")
        )
        if hi < 0:
            return Outcome(NOT_REPRODUCED, said)
        if lo <= 0:
            return Outcome(INCONCLUSIVE, said + ": the drop is not resolved")
        return Outcome(REPRODUCED if (not end or rel <= AGREE) else NOT_REPRODUCED, said)

    return check


def gap_grows_with_sigma(result) -> Outcome:
    """Fig. 2b: tau = 1's raw excess over Bayes ridge is larger at the largest sigma_test, resolved."""
    rows = panel_rows(result, "2", "b")
    one, bayes = (
        series(rows, "tau=1", "simulation", "err_raw"),
        series(rows, "bayes_ridge", "simulation", "err_raw"),
    )
    xs = one.index.intersection(bayes.index)
    if len(xs) < 2:
        return Outcome(NOT_RUN, "no Fig. 2b Monte Carlo points at two sigma_test")
    se1, seb = raw_se(rows, "tau=1"), raw_se(rows, "bayes_ridge")
    a, b = xs.min(), xs.max()
    rise = float((one[b] - bayes[b]) - (one[a] - bayes[a]))
    half = Z90 * math.sqrt(se1[a] ** 2 + seb[a] ** 2 + se1[b] ** 2 + seb[b] ** 2)
    said = (
        f"tau = 1's raw error (eq. 8) above Bayes ridge: {one[a] - bayes[a]:.3g} at sigma_test = {a:g}, "
        f"{one[b] - bayes[b]:.3g} at {b:g} (rise {rise:.3g}, 90% interval {rise - half:.3g} to"
        f" {rise + half:.3g})"
    )
    if rise - half > 0:
        return Outcome(REPRODUCED, said)
    return Outcome(NOT_REPRODUCED if rise + half < 0 else INCONCLUSIVE, said)


def tau_opt_rises(result) -> Outcome:
    """Fig. 2c: Thm. 4.7's tau_opt increases over sigma_test and the Monte Carlo minimiser rises, resolved."""
    rows = panel_rows(result, "2", "c")
    theory = series(rows, "tau_opt", "theory", "tau")
    sim, se = series(rows, "tau_opt", "simulation", "tau"), series(rows, "tau_opt", "simulation", "tau_se")
    if len(theory) < 2 or len(sim) < 2:
        return Outcome(NOT_RUN, "no Fig. 2c tau_opt at two sigma_test")
    increasing = bool((theory.diff().dropna() > 0).all())
    a, b = sim.index.min(), sim.index.max()
    rise, half = float(sim[b] - sim[a]), Z90 * math.hypot(se[a], se[b])
    listed = ", ".join(f"{t:.3g}" for t in theory)
    said = (
        f"Thm. 4.7's tau_opt over sigma_test {', '.join(f'{x:g}' for x in theory.index)}: {listed} "
        f"({'increasing' if increasing else 'not increasing'}); the Monte Carlo minimiser {sim[a]:.3g} at "
        f"{a:g} to {sim[b]:.3g} at {b:g} (rise 90% interval {rise - half:.3g} to {rise + half:.3g})"
    )
    if increasing and rise - half > 0:
        return Outcome(REPRODUCED, said)
    return Outcome(NOT_REPRODUCED if (not increasing or rise + half < 0) else INCONCLUSIVE, said)


def linear_fails_linearized_converges(result) -> Outcome:
    """Fig. 4: linearized attention converges to Bayes ridge as l grows; linear attention does not."""
    rows = panel_rows(result, "4", "input_mean")
    converges = approaches_bayes("4", "input_mean", "linearized")(result)
    found = excess_drop(rows, "linear")
    if converges.status == NOT_RUN or isinstance(found, str):
        return Outcome(NOT_RUN, "no Fig. 4 Monte Carlo points of both attentions and Bayes ridge")
    excess = found[0]
    last = excess.index.max()
    bayes = series(rows, "bayes_ridge", "simulation")
    se = math.hypot(
        series(rows, "linear", "simulation", "se")[last],
        series(rows, "bayes_ridge", "simulation", "se")[last],
    )
    fails = excess[last] - Z90 * se > AGREE * bayes[last]
    said = (
        f"{converges.evidence}; linear attention at l = {last:g}: {excess[last] / bayes[last]:.1%} above"
        f" Bayes ridge ({'fails to recover it' if fails else 'not resolved above ' + format(AGREE, '.0%')})"
    )
    if converges.status == REPRODUCED and fails:
        return Outcome(REPRODUCED, said)
    return Outcome(NOT_REPRODUCED if converges.status == NOT_REPRODUCED else INCONCLUSIVE, said)


def sec44_tau(result) -> Outcome:
    """Sec. 4.4: Thm. 4.7's tau_opt under Sigma_x test = c I (sigma = 0) is c, within AGREE at the largest
    l / d (it is c (1 + d / l): c only as l / d grows)."""
    rows = panel_rows(result, "1", "input_covariance")
    tau = series(rows, "tau_opt", "theory", "tau")
    if tau.empty:
        return Outcome(NOT_RUN, "no Sec. 4.4 cell under the covariance shift")
    c = shift_scale(result)
    ratios = ", ".join(f"{t / c:.3g}c at l/d = {x:g}" for x, t in tau.items())
    rel = abs(tau.iloc[-1] / c - 1)
    said = f"c = {c:g}: tau_opt = {ratios} (Thm. 4.7 gives c (1 + d/l), c only as l/d grows)"
    return Outcome(
        REPRODUCED if rel <= AGREE else NOT_REPRODUCED,
        said + f"; within {AGREE:.0%} of c at the largest l/d: {'yes' if rel <= AGREE else 'no'}",
    )


def shift_scale(result) -> float:
    """c of the covariance shift: temperature.shift_kwargs' scale, else the shift's default."""
    column = "param.temperature.shift_kwargs"
    for text in result.table[column].dropna().astype(str) if column in result.table else []:
        given = yaml.safe_load(text)
        if isinstance(given, dict) and "scale" in given:
            return float(given["scale"])
    return float(COVARIANCE_SCALE)


def sec44_counteracts(result) -> Outcome:
    """Sec. 4.4: at tau_opt the shifted error equals the unshifted model's at its tau_opt (Monte Carlo)."""
    shifted = series(panel_rows(result, "1", "input_covariance"), "tau_opt", "simulation")
    plain = series(panel_rows(result, "1", "none"), "tau_opt", "simulation")
    xs = shifted.index.intersection(plain.index)
    if not len(xs):
        return Outcome(NOT_RUN, "no Sec. 4.4 cells with and without the shift")
    rel = ((shifted[xs] - plain[xs]).abs() / plain[xs]).max()
    listed = ", ".join(f"{shifted[x]:.3g} vs {plain[x]:.3g} (l/d = {x:g})" for x in xs)
    said = f"err/E[y^2] at tau_opt under the shift vs without it: {listed}; largest difference {rel:.1%}"
    return Outcome(
        REPRODUCED if rel <= AGREE else NOT_REPRODUCED, said + f" (counteracted: within {AGREE:.0%})"
    )
