"""Checks of papers/temperature/theory.py (seed 004) against closed forms, independent formulas and
Monte Carlo. Tolerances for the asymptotic theorems are stated next to each test."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from papers.temperature.theory import (
    AttentionParams,
    PromptDistribution,
    attention_prediction,
    attention_prediction_full,
    attention_predictor,
    attention_weights,
    bayes_ridge_weights,
    input_covariance_shift,
    isotropic_distribution,
    linearized_prediction_parts,
    optimal_temperature,
    pretrained_parameters,
    pretrained_parameters_from_inputs,
    sample_prompts,
    shifted_distribution,
    simulated_optimal_temperature,
    simulated_temperature_curve,
    theory_coefficients,
    theory_error,
)

F64 = torch.float64


def gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def random_spd(d: int, g: torch.Generator) -> torch.Tensor:
    a = torch.randn(d, d, generator=g, dtype=F64)
    return a @ a.T / d + 0.5 * torch.eye(d, dtype=F64)


def special_case(d: int, c: float) -> tuple[PromptDistribution, PromptDistribution]:
    """Sec. 4.4: w ~ N(0, I), sigma = 0, x_train ~ N(0, I), x_test ~ N(0, cI)."""
    train = isotropic_distribution(d, 0.0)
    return train, input_covariance_shift(train, c)


# ----------------------------------------------------------------------------- Sec. 4.4 special case


@pytest.mark.parametrize("d,l,c", [(10, 20, 2.0), (50, 50, 3.0), (50, 200, 0.5), (7, 100, 1.5)])
def test_special_case_thm47_gives_c_times_one_plus_d_over_l(d, l, c):
    train, test = special_case(d, c)
    assert optimal_temperature(pretrained_parameters(train, l), test, l) == pytest.approx(
        c * (1 + d / l), rel=1e-12
    )


def test_special_case_thm47_tends_to_c_for_large_l_over_d():
    d, c = 20, 2.5
    train, test = special_case(d, c)
    l = 10**7 * d
    assert optimal_temperature(pretrained_parameters(train, l), test, l) == pytest.approx(c, rel=1e-6)


@pytest.mark.parametrize("l", [3, 20, 100, 5000])
def test_special_case_tau_ratio_equals_c_at_every_l(l):
    d, c = 10, 3.0
    train, test = special_case(d, c)
    params = pretrained_parameters(train, l)
    assert optimal_temperature(params, test, l) / optimal_temperature(params, train, l) == pytest.approx(
        c, rel=1e-12
    )


def test_special_case_monte_carlo_argmin_d10_l20_is_near_3_not_2():
    """Exact finite-size minimiser (eq. 5 is exactly quadratic in 1/tau) with 20k prompts.

    Thm 4.7 gives c (1 + d/l) = 3; the terms it drops (query inside the centring, l-1 vs l,
    1/l Sigma A Sigma) are O(1/l) relative, 1/l = 5% -> |tau_mc - 3| < 0.15. A 100k-prompt run gives
    2.940 +- 0.009. Sec. 4.4's tau = c = 2 is off by > 0.75 (dozens of standard errors)."""
    d, l, c = 10, 20, 2.0
    train, test = special_case(d, c)
    tau, se = simulated_optimal_temperature(pretrained_parameters(train, l), test, l, 20_000, gen(0))
    assert se < 0.03
    assert abs(tau - 3.0) < 0.15
    assert tau - 2.0 > 0.75


def test_special_case_monte_carlo_ratio_is_exactly_c_on_common_prompts():
    """With sigma = 0 the error scales exactly: x -> sqrt(c) x multiplies tau* by c for the same draws."""
    d, l, c = 10, 20, 2.0
    train, test = special_case(d, c)
    params = pretrained_parameters(train, l)
    tau_c, _ = simulated_optimal_temperature(params, test, l, 4000, gen(1))
    tau_1, _ = simulated_optimal_temperature(params, train, l, 4000, gen(1))
    assert tau_c / tau_1 == pytest.approx(c, rel=1e-9)


def test_grid_argmin_matches_quadratic_minimiser_on_same_prompts():
    d, l = 10, 20
    train, test = special_case(d, 2.0)
    params = pretrained_parameters(train, l)
    taus = np.linspace(2.0, 4.0, 2001)
    curve = simulated_temperature_curve(params, test, l, taus, 3000, gen(2))
    tau_star, _ = simulated_optimal_temperature(params, test, l, 3000, gen(2))
    assert curve.tau[curve.err_raw.idxmin()] == pytest.approx(tau_star, abs=1e-3)


# ----------------------------------------------------------------------------- Thm 4.6 vs Monte Carlo

SHIFT_GRID = [
    ("none", {}),
    ("input_covariance", {"scale": 2.0}),
    ("task", {}),
    ("noise", {"sigma": 1.0}),
    ("input_mean", {"norm": 1.0}),
]


def _thm46_gap(d: int, l: int, n_prompts: int, name: str, kwargs: dict, seed: int) -> tuple[float, float]:
    train = isotropic_distribution(d, 0.1)
    test = shifted_distribution(train, name, **kwargs)
    params = pretrained_parameters(train, l)
    taus = np.array([0.7, 1.0, 1.5, optimal_temperature(params, test, l)])
    curve = simulated_temperature_curve(params, test, l, taus, n_prompts, gen(seed))
    gap = np.abs(theory_error(params, test, l, taus) - curve.err_raw.values) / curve.err_raw.values
    return float(gap.max()), float((curve.err_se / curve.err_raw).max())


@pytest.mark.parametrize(
    "d,l,n_prompts",
    [(10, 20, 10_000), (20, 40, 6_000), pytest.param(40, 80, 6_000, marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("name,kwargs", SHIFT_GRID, ids=[s for s, _ in SHIFT_GRID])
def test_thm46_matches_monte_carlo_within_shrinking_tolerance(d, l, n_prompts, name, kwargs):
    """Relative gap at tau in {0.7, 1, 1.5, tau_opt} <= 4/l (dropped O(1/l) terms) + 4 Monte Carlo SE.

    Measured max gaps: ~0.10-0.16 at (10, 20), ~0.03-0.05 at (40, 80) (tolerance 0.2 + noise vs 0.05 +
    noise)."""
    gap, se = _thm46_gap(d, l, n_prompts, name, kwargs, seed=d)
    assert gap <= 4.0 / l + 4.0 * se


# ----------------------------------------------------------------------------- Thm 4.7 vs Monte Carlo argmin
# at d = 50


def _argmin_check(l: int, name: str, kwargs: dict, n_prompts: int, seed: int) -> None:
    """Grid argmin of the simulated error vs eq. 15: |diff| <= 4 SE (delta method, same prompts)
    + 2/l * tau_opt (terms Thm 4.6 drops) + grid step."""
    train = isotropic_distribution(50, 0.1)
    test = shifted_distribution(train, name, **kwargs)
    params = pretrained_parameters(train, l)
    tau_th = optimal_temperature(params, test, l)
    taus = tau_th * np.linspace(0.5, 2.0, 1501)
    curve = simulated_temperature_curve(params, test, l, taus, n_prompts, gen(seed))
    _, se = simulated_optimal_temperature(params, test, l, n_prompts, gen(seed))
    tau_grid = curve.tau[curve.err_raw.idxmin()]
    assert abs(tau_grid - tau_th) <= 4 * se + 2.0 / l * tau_th + (taus[1] - taus[0])
    assert se < 0.05 * tau_th


def test_thm47_matches_simulated_argmin_at_d50_fast():
    _argmin_check(l=100, name="input_covariance", kwargs={"scale": 2.0}, n_prompts=3000, seed=5)


@pytest.mark.slow
@pytest.mark.parametrize("l", [50, 100, 200])
@pytest.mark.parametrize(
    "name,kwargs",
    [("none", {}), ("input_covariance", {"scale": 2.0}), ("task", {}), ("noise", {"sigma": 3.0})],
)
def test_thm47_matches_simulated_argmin_at_d50(l, name, kwargs):
    _argmin_check(l=l, name=name, kwargs=kwargs, n_prompts=10_000, seed=l)


def test_thm47_is_the_minimum_of_thm46():
    train = isotropic_distribution(8, 0.2)
    test = shifted_distribution(train, "task")
    params = pretrained_parameters(train, 12)
    tau = optimal_temperature(params, test, 12)
    grid = tau * np.linspace(0.2, 5.0, 2001)
    assert theory_error(params, test, 12, tau) <= theory_error(params, test, 12, grid).min() + 1e-12


def test_thm46_constant_term_is_error_of_zero_weight_limit():
    """tau -> inf removes p / tau, leaving Tr(A B) + sigma^2 = E[y^2] (Thm 4.6 constant)."""
    g = gen(3)
    d = 6
    test = PromptDistribution(
        torch.randn(d, generator=g, dtype=F64),
        random_spd(d, g),
        torch.randn(d, generator=g, dtype=F64),
        random_spd(d, g),
        0.4,
    )
    _, _, c = theory_coefficients(pretrained_parameters(isotropic_distribution(d, 0.1), 10), test, 10)
    xs, ys, _ = sample_prompts(test, 200_000, 2, g)
    assert c == pytest.approx(float((ys[:, -1] ** 2).mean()), rel=0.02)


# ----------------------------------------------------------------------------- eq. 5 reduction, weights


def test_eq5_from_full_matrices_equals_reduced_form_with_arbitrary_star_blocks():
    """Eq. 5 computed from Z with random full V, M equals p / tau + q of eqs. 43-47 (m21 != 0)."""
    g = gen(4)
    d, l = 5, 9
    test = shifted_distribution(isotropic_distribution(d, 0.3), "input_mean", norm=1.5)
    xs, ys, _ = sample_prompts(test, 16, l, g)
    V = torch.randn(d + 1, d + 1, generator=g, dtype=F64)
    M = torch.randn(d + 1, d + 1, generator=g, dtype=F64)
    params = AttentionParams(M11=M[:d, :d], m21=M[d, :d], v21=V[d, :d], v22=float(V[d, d]))
    p, q = linearized_prediction_parts(xs, ys, params)
    for tau in (0.3, 1.0, 4.0):
        torch.testing.assert_close(
            attention_prediction_full(xs, ys, V, M, tau), p / tau + q, rtol=1e-10, atol=1e-10
        )


def test_prediction_never_uses_query_label():
    g = gen(5)
    xs, ys, _ = sample_prompts(isotropic_distribution(4, 0.1), 8, 6, g)
    params = pretrained_parameters(isotropic_distribution(4, 0.1), 6)
    ys2 = ys.clone()
    ys2[:, -1] += 100.0
    for kind in ("softmax", "linearized_softmax", "linear"):
        torch.testing.assert_close(
            attention_prediction(xs, ys, params, 1.0, kind), attention_prediction(xs, ys2, params, 1.0, kind)
        )


def test_attention_weights_limits():
    g = gen(6)
    z = torch.randn(3, 50, generator=g, dtype=F64)
    lin = attention_weights(z, 0.7, "linearized_softmax")
    torch.testing.assert_close(lin.sum(-1), torch.ones(3, dtype=F64))
    # linearized softmax is softmax's first-order Taylor expansion (eq. 32): gap O(1/tau^2)
    for tau in (10.0, 100.0):
        gap = (
            (attention_weights(z, tau, "softmax") - attention_weights(z, tau, "linearized_softmax"))
            .abs()
            .max()
        )
        assert gap < 2.0 / (50 * tau**2) * float(z.abs().max()) ** 2
    torch.testing.assert_close(attention_weights(z, 2.0, "linear"), z / (50 * 2.0))
    with pytest.raises(KeyError, match="linearized_softmax"):
        attention_weights(z, 1.0, "cosine")


def test_unknown_shift_lists_known_names():
    with pytest.raises(KeyError, match="input_covariance"):
        shifted_distribution(isotropic_distribution(3, 0.1), "rotation")


def test_attention_predictor_columns_use_prefixes():
    g = gen(7)
    train = isotropic_distribution(4, 0.2)
    xs, ys, _ = sample_prompts(train, 5, 8, g)
    predict = attention_predictor(lambda l: pretrained_parameters(train, l), tau=1.5)
    out = predict(xs, ys)
    assert out.shape == (5, 8)
    n = 5
    expected = attention_prediction(xs[:, : n + 1], ys[:, : n + 1], pretrained_parameters(train, n + 1), 1.5)
    torch.testing.assert_close(out[:, n], expected)
    ys2 = ys.clone()
    ys2[:, n:] = 7.0  # labels at and after column n must not move column n
    torch.testing.assert_close(predict(xs, ys2)[:, n], out[:, n])


# ----------------------------------------------------------------------------- Lemma 4.1 and Bayes ridge


def test_lemma41_with_matching_covariance_reproduces_eq9():
    """If Sigma_x^train equals the prompt's C_xx, eq. 11 makes w_Att exactly eq. 9 with
    X^T X = l C_xx, X^T y = l C_xy (App. F, eq. 54): the algebra of Lemma 4.1."""
    g = gen(8)
    d, l, sigma = 4, 12, 0.5
    xs, ys, _ = sample_prompts(isotropic_distribution(d, sigma), 1, l, g)
    x, y = xs[0], ys[0].clone()
    y[-1] = 0.0
    s_x, s_y = x.mean(0), y.sum() / l
    cxx = x.T @ x / l - torch.outer(s_x, s_x)
    cxy = x.T @ y / l - s_y * s_x
    mu_w, Sigma_w = torch.randn(d, generator=g, dtype=F64), random_spd(d, g)
    train = PromptDistribution(torch.zeros(d, dtype=F64), cxx, mu_w, Sigma_w, sigma)
    P = pretrained_parameters(train, l)
    w_att = P.M11.T @ (cxx @ P.v21 + P.v22 * cxy)
    prec = torch.linalg.inv(Sigma_w)
    w_bayes = torch.linalg.solve(l * cxx / sigma**2 + prec, l * cxy / sigma**2 + prec @ mu_w)
    torch.testing.assert_close(w_att, w_bayes, rtol=1e-10, atol=1e-10)


def test_lemma41_estimate_converges_to_population_form():
    g = gen(9)
    d, l = 5, 10
    train = PromptDistribution(
        torch.ones(d, dtype=F64),
        random_spd(d, g),
        torch.randn(d, generator=g, dtype=F64),
        random_spd(d, g),
        0.3,
    )
    xs, _, _ = sample_prompts(train, 20_000, l, g)
    est, pop = pretrained_parameters_from_inputs(xs, train), pretrained_parameters(train, l)
    torch.testing.assert_close(est.M11, pop.M11, rtol=0.03, atol=0.03 * float(pop.M11.abs().max()))
    torch.testing.assert_close(est.v21, pop.v21, rtol=0.05, atol=0.05 * float(pop.v21.abs().max()))
    assert est.v22 == pop.v22 == 1 / d


def _centred(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    return (x - x.mean(0)).numpy(), (y - y.mean()).numpy()


@pytest.mark.parametrize("n", [3, 30])
def test_bayes_ridge_equals_gaussian_conditioning_and_sklearn(n):
    """Eq. 9 vs E[w | y] = mu + S X^T (X S X^T + s^2 I)^-1 (y - X mu) and vs sklearn Ridge on w = mu + L u."""
    g = gen(10 + n)
    d, sigma = 8, 0.3
    prior = PromptDistribution(
        torch.zeros(d, dtype=F64),
        torch.eye(d, dtype=F64),
        torch.randn(d, generator=g, dtype=F64),
        random_spd(d, g),
        sigma,
    )
    xs = torch.randn(2, n, d, generator=g, dtype=F64) + 1.0
    ys = torch.randn(2, n, generator=g, dtype=F64)
    got = bayes_ridge_weights(xs, ys, prior).numpy()
    mu, S = prior.mu_w.numpy(), prior.Sigma_w.numpy()
    L = np.linalg.cholesky(S)
    for b in range(2):
        X, y = _centred(xs[b], ys[b])
        cond = mu + S @ X.T @ np.linalg.solve(X @ S @ X.T + sigma**2 * np.eye(n), y - X @ mu)
        ridge = Ridge(alpha=sigma**2, fit_intercept=False, solver="cholesky").fit(X @ L, y - X @ mu)
        np.testing.assert_allclose(got[b], cond, rtol=1e-8, atol=1e-10)
        np.testing.assert_allclose(got[b], mu + L @ ridge.coef_, rtol=1e-8, atol=1e-10)


def test_bayes_ridge_noiseless_is_small_noise_limit():
    g = gen(12)
    d, n = 6, 4
    prior = isotropic_distribution(d, 0.0)
    prior = PromptDistribution(
        prior.mu_x, prior.Sigma_x, torch.randn(d, generator=g, dtype=F64), random_spd(d, g), 0.0
    )
    xs = torch.randn(1, n, d, generator=g, dtype=F64)
    ys = torch.randn(1, n, generator=g, dtype=F64)
    X, y = _centred(xs[0], ys[0])
    mu, S = prior.mu_w.numpy(), prior.Sigma_w.numpy()
    s2 = 1e-7
    # centring leaves rank n - 1: the Gram matrix is singular, so regularise it by s2 -> 0
    limit = mu + S @ X.T @ np.linalg.solve(X @ S @ X.T + s2 * np.eye(n), y - X @ mu)
    np.testing.assert_allclose(bayes_ridge_weights(xs, ys, prior)[0].numpy(), limit, rtol=1e-4, atol=1e-5)
