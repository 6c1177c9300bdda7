"""Curves of seed 004's Figs. 1, 2, 4 and 5 as tidy DataFrames (theory and Monte Carlo).

Each function returns one row per curve point with the columns
    figure, panel, curve, x, tau, err, err_raw, err_se, source, l, d
(Fig. 5 has its own histogram columns). `err` is normalised by the test distribution's E[y^2]
(the zero predictor scores 1), `err_raw` is eq. 8 itself, `source` is "theory" (Thm 4.6 / 4.7) or
"simulation" (Monte Carlo of the model on fresh test prompts, all curves of one point on the same
prompts). The pretrained parameters are Lemma 4.1's, estimated from m pretraining prompts of the same l
("sampled", as in the paper's Fig. 1 with m = 5000) or in population form ("population"). Settings follow the
specification beside the repository (../shared/FIGURES.md); the paper does not state its l/d grid, so the
defaults below are a choice.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np
import pandas as pd
import torch

from papers.temperature.settings import PARAMS_SOURCES
from papers.temperature.theory import (
    AttentionParams,
    PromptDistribution,
    attention_prediction,
    attention_weights,
    bayes_ridge_prediction,
    isotropic_distribution,
    linearized_prediction_parts,
    optimal_temperature,
    pretrained_parameters,
    sample_pretrained_parameters,
    sample_prompts,
    shifted_distribution,
    simulated_optimal_temperature,
    theory_error,
)


def _parameters(
    train: PromptDistribution, l: int, m: int, source: str, generator: torch.Generator
) -> AttentionParams:
    """Lemma 4.1 parameters for prompts of l columns, estimated from m prompts or in population form."""
    if source not in PARAMS_SOURCES:
        raise KeyError(f"unknown params_source {source!r}; known: {list(PARAMS_SOURCES)}")
    if source == "population":
        return pretrained_parameters(train, l)
    return sample_pretrained_parameters(train, l, m, generator)


def _row(
    curve: str,
    x: float,
    tau: float,
    err_raw: float,
    err_se: float,
    source: str,
    test: PromptDistribution,
    l: int,
) -> dict:
    norm = test.label_second_moment()
    return {
        "curve": curve,
        "x": x,
        "tau": tau,
        "err": err_raw / norm,
        "err_raw": err_raw,
        "err_se": err_se,
        "source": source,
        "l": l,
        "d": test.d,
    }


def _simulated_point(
    params: AttentionParams,
    test: PromptDistribution,
    l: int,
    taus: dict[str, float],
    n_prompts: int,
    generator: torch.Generator,
    chunk: int,
) -> dict[str, tuple[float, float]]:
    """Monte Carlo (error, standard error) of eq. 5 at each named tau and of Bayes ridge, on shared
    prompts."""
    sq: dict[str, list[torch.Tensor]] = {name: [] for name in [*taus, "bayes_ridge"]}
    for start in range(0, n_prompts, chunk):
        xs, ys, _ = sample_prompts(test, min(chunk, n_prompts - start), l, generator)
        p, q = linearized_prediction_parts(xs, ys, params)
        for name, tau in taus.items():
            sq[name].append((p / tau + q - ys[:, -1]) ** 2)
        sq["bayes_ridge"].append((bayes_ridge_prediction(xs, ys, test) - ys[:, -1]) ** 2)
    out = {}
    for name, parts in sq.items():
        s = torch.cat(parts)
        out[name] = (float(s.mean()), float(s.std() / math.sqrt(n_prompts)))
    return out


def _point_rows(
    params: AttentionParams,
    test: PromptDistribution,
    l: int,
    x: float,
    n_prompts: int,
    generator: torch.Generator,
    chunk: int,
) -> list[dict]:
    """Theory and simulation rows for tau = 1, tau_opt (Thm 4.7) and Bayes ridge at one point."""
    taus = {"tau=1": 1.0, "tau_opt": optimal_temperature(params, test, l)}
    rows = [
        _row(name, x, tau, theory_error(params, test, l, tau), 0.0, "theory", test, l)
        for name, tau in taus.items()
    ]
    sim = _simulated_point(params, test, l, taus, n_prompts, generator, chunk)
    for name, (err, se) in sim.items():
        rows.append(_row(name, x, taus.get(name, float("nan")), err, se, "simulation", test, l))
    return rows


def error_vs_context_curves(
    train: PromptDistribution,
    test: PromptDistribution,
    l_over_d: Sequence[float],
    m: int = 5000,
    n_prompts: int = 2000,
    seed: int = 0,
    params_source: str = "sampled",
    chunk: int = 1000,
) -> pd.DataFrame:
    """Error vs x = l / d for tau = 1, tau_opt and Bayes ridge, theory and simulation (Figs. 1, 2a)."""
    generator = torch.Generator(device=train.mu_x.device).manual_seed(seed)
    rows = []
    for ratio in l_over_d:
        l = max(2, round(ratio * train.d))
        params = _parameters(train, l, m, params_source, generator)
        rows += _point_rows(params, test, l, float(ratio), n_prompts, generator, chunk)
    return pd.DataFrame(rows)


def figure1_curves(
    shift: str = "none",
    d: int = 50,
    sigma: float = 0.1,
    l_over_d: Sequence[float] = (0.25, 0.5, 1, 1.5, 2, 3, 4),
    m: int = 5000,
    n_prompts: int = 2000,
    seed: int = 0,
    params_source: str = "sampled",
    **shift_kwargs,
) -> pd.DataFrame:
    """Fig. 1: isotropic pretraining (sigma = 0.1); panel a shift="none", b "input_covariance"
    (scale=2), c "task" (mu_w = 1/sqrt(d), Sigma_w x 3). Extra keywords go to the shift."""
    train = isotropic_distribution(d, sigma)
    test = shifted_distribution(train, shift, **shift_kwargs)
    df = error_vs_context_curves(train, test, l_over_d, m, n_prompts, seed, params_source)
    return df.assign(figure="1", panel=shift)


def figure2_curves(
    d: int = 50,
    sigma_train: float = 0.1,
    sigma_test: float = 10.0,
    l_over_d: Sequence[float] = (0.25, 0.5, 1, 1.5, 2, 3, 4),
    sigma_tests: Sequence[float] = (0.1, 0.3, 1, 2, 3, 5, 7, 10),
    m: int = 5000,
    n_prompts: int = 2000,
    seed: int = 0,
    params_source: str = "sampled",
) -> pd.DataFrame:
    """Fig. 2 noise shift: (a) error vs l/d at sigma_test; (b) error vs sigma_test at l/d = 1;
    (c) tau_opt vs sigma_test: Thm 4.7 (theory, err = Thm 4.6 at that tau) and the Monte Carlo
    minimiser of eq. 5's error (simulation, standard error in tau_se, err left NaN)."""
    train = isotropic_distribution(d, sigma_train)
    generator = torch.Generator(device=train.mu_x.device).manual_seed(seed)
    panel_a = error_vs_context_curves(
        train,
        shifted_distribution(train, "noise", sigma=sigma_test),
        l_over_d,
        m,
        n_prompts,
        seed,
        params_source,
    ).assign(panel="a")
    params = _parameters(train, d, m, params_source, generator)
    rows_b, rows_c = [], []
    for s in sigma_tests:
        test = shifted_distribution(train, "noise", sigma=s)
        rows_b += _point_rows(params, test, d, float(s), n_prompts, generator, 1000)
        tau_th = optimal_temperature(params, test, d)
        tau_mc, tau_se = simulated_optimal_temperature(params, test, d, n_prompts, generator)
        rows_c.append(
            _row("tau_opt", float(s), tau_th, theory_error(params, test, d, tau_th), 0.0, "theory", test, d)
        )
        rows_c.append(
            {
                **_row("tau_opt", float(s), tau_mc, float("nan"), float("nan"), "simulation", test, d),
                "tau_se": tau_se,
            }
        )
    frames = [panel_a, pd.DataFrame(rows_b).assign(panel="b"), pd.DataFrame(rows_c).assign(panel="c")]
    return pd.concat(frames, ignore_index=True).assign(figure="2")


def figure4_curves(
    d: int = 20,
    sigma: float = 0.1,
    mean_norm: float = 2.0,
    ls: Sequence[int] = (5, 10, 20, 40, 80, 160),
    n_prompts: int = 2000,
    seed: int = 0,
) -> pd.DataFrame:
    """Fig. 4 (App. C): error vs x = l of linear attention (eq. 6) and linearized attention (eq. 5),
    both at tau = 1 with Lemma 4.1's population parameters, and Bayes ridge, when the test inputs'
    mean moves to a vector of norm mean_norm; theory (Thm 4.6) only for the linearized model."""
    train = isotropic_distribution(d, sigma)
    test = shifted_distribution(train, "input_mean", norm=mean_norm)
    generator = torch.Generator(device=train.mu_x.device).manual_seed(seed)
    predictors = {
        "linearized": lambda xs, ys, p: attention_prediction(xs, ys, p, 1.0, "linearized_softmax"),
        "linear": lambda xs, ys, p: attention_prediction(xs, ys, p, 1.0, "linear"),
        "bayes_ridge": lambda xs, ys, p: bayes_ridge_prediction(xs, ys, test),
    }
    rows = []
    for l in ls:
        params = pretrained_parameters(train, l)
        xs, ys, _ = sample_prompts(test, n_prompts, l, generator)
        for name, predict in predictors.items():
            sq = (predict(xs, ys, params) - ys[:, -1]) ** 2
            rows.append(
                _row(
                    name,
                    float(l),
                    1.0,
                    float(sq.mean()),
                    float(sq.std() / math.sqrt(n_prompts)),
                    "simulation",
                    test,
                    l,
                )
            )
        rows.append(
            _row("linearized", float(l), 1.0, theory_error(params, test, l, 1.0), 0.0, "theory", test, l)
        )
    return pd.DataFrame(rows).assign(figure="4", panel="input_mean")


def figure5_histograms(
    taus: Sequence[float] = (0.1, 0.5, 1.0, 2.0, 10.0),
    l: int = 1000,
    bins: int = 40,
    seed: int = 0,
    scores: torch.Tensor | None = None,
) -> pd.DataFrame:
    """Fig. 5 (App. D): histograms of the entries of softmax(z / tau), linearized_softmax(z / tau)
    (eq. 34) and z / (l tau) for one score vector z (default z ~ N(0, I_l)); curve "input" is z.
    Columns: figure, curve, tau, x (bin centre), density, bin_width, mean, var (of the entries)."""
    if scores is None:
        scores = torch.randn(l, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    panels = [("input", float("nan"), scores)]
    for tau in taus:
        panels += [
            (kind, float(tau), attention_weights(scores, tau, kind))
            for kind in ("softmax", "linearized_softmax", "linear")
        ]
    rows = []
    for curve, tau, values in panels:
        v = values.detach().cpu().numpy()
        density, edges = np.histogram(v, bins=bins, density=True)
        for k in range(bins):
            rows.append(
                {
                    "figure": "5",
                    "curve": curve,
                    "tau": tau,
                    "x": 0.5 * (edges[k] + edges[k + 1]),
                    "density": density[k],
                    "bin_width": edges[k + 1] - edges[k],
                    "mean": v.mean(),
                    "var": v.var(),
                }
            )
    return pd.DataFrame(rows)
