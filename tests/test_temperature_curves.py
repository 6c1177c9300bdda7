"""Checks of the seed-004 figure curves (papers/temperature/curves.py) at tiny sizes."""

import numpy as np
import pytest
import torch

from papers.temperature.curves import (
    figure1_curves,
    figure2_curves,
    figure4_curves,
    figure5_histograms,
)
from papers.temperature.theory import (
    isotropic_distribution,
    optimal_temperature,
    pretrained_parameters,
    shifted_distribution,
    theory_error,
)

COLUMNS = {"figure", "panel", "curve", "x", "tau", "err", "err_raw", "err_se", "source", "l", "d"}


def test_figure1_rows_match_closed_forms_with_population_parameters():
    d, sigma = 8, 0.1
    df = figure1_curves(
        "input_covariance",
        d=d,
        sigma=sigma,
        l_over_d=(1, 2),
        n_prompts=300,
        params_source="population",
        scale=2.0,
    )
    assert COLUMNS <= set(df.columns)
    assert set(df.curve) == {"tau=1", "tau_opt", "bayes_ridge"}
    assert set(df.source) == {"theory", "simulation"}
    assert len(df) == 2 * 5  # per point: 2 theory rows + 3 simulation rows
    train = isotropic_distribution(d, sigma)
    test = shifted_distribution(train, "input_covariance", scale=2.0)
    for l in (8, 16):
        params = pretrained_parameters(train, l)
        tau_opt = optimal_temperature(params, test, l)
        th = df[(df.source == "theory") & (df.l == l)].set_index("curve")
        assert th.loc["tau_opt", "tau"] == pytest.approx(tau_opt)
        assert th.loc["tau=1", "err_raw"] == pytest.approx(theory_error(params, test, l, 1.0))
        assert th.loc["tau_opt", "err"] == pytest.approx(
            theory_error(params, test, l, tau_opt) / test.label_second_moment()
        )


def test_figure1_temperature_helps_under_covariance_shift_and_ridge_is_best():
    df = figure1_curves("input_covariance", d=8, l_over_d=(2,), m=500, n_prompts=2000, scale=2.0)
    sim = df[df.source == "simulation"].set_index("curve").err
    assert sim["tau_opt"] < 0.5 * sim["tau=1"]
    assert sim["bayes_ridge"] < sim["tau_opt"]


def test_figure2_panels_and_tau_opt_grows_with_test_noise():
    df = figure2_curves(d=6, l_over_d=(1,), sigma_tests=(0.1, 3.0, 10.0), m=300, n_prompts=400)
    assert set(df.panel) == {"a", "b", "c"}
    c = df[(df.panel == "c") & (df.source == "theory")].sort_values("x")
    assert np.all(np.diff(c.tau.values) > 0)
    sim = df[(df.panel == "c") & (df.source == "simulation")]
    assert sim.tau_se.notna().all()


def test_figure4_linear_attention_fails_under_mean_shift_linearized_does_not():
    """App. C: centring makes eq. 5 robust to an input-mean shift; eq. 6 keeps a bias as l grows."""
    df = figure4_curves(d=6, mean_norm=2.0, ls=(60,), n_prompts=2000)
    sim = df[df.source == "simulation"].set_index("curve").err
    assert sim["linearized"] < 0.5 * sim["linear"]
    assert sim["bayes_ridge"] < sim["linearized"]


def test_figure5_linearized_variance_scales_as_one_over_tau_squared():
    z = torch.randn(500, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    df = figure5_histograms(taus=(0.5, 2.0), bins=10, scores=z)
    stats = df.groupby(["curve", "tau"])[["mean", "var"]].first()
    for tau in (0.5, 2.0):
        assert stats.loc[("linearized_softmax", tau), "mean"] == pytest.approx(1 / 500)
        assert stats.loc[("softmax", tau), "mean"] == pytest.approx(1 / 500)
        assert stats.loc[("linearized_softmax", tau), "var"] == pytest.approx(
            z.var(unbiased=False).item() / (500 * tau) ** 2
        )
    hist = df[(df.curve == "softmax") & (df.tau == 2.0)]
    assert (hist.density * hist.bin_width).sum() == pytest.approx(1.0)


def test_unknown_params_source_lists_known():
    with pytest.raises(KeyError, match="population"):
        figure1_curves(d=4, l_over_d=(1,), n_prompts=10, params_source="oracle")
