"""Tests of scaling/judge/fit.py and power_law.py: power-law fits on synthetic tidy tables with known
parameters."""

import math

import numpy as np
import pandas as pd
import pytest
from scipy.optimize import check_grad
from scipy.special import huber as scipy_huber
from synthetic_tables import saturating_law, synthetic_table

from scaling.judge.fit import (
    fit_all,
    fit_context_scaling,
    fit_joint_scaling,
    fit_task_scaling,
    scaling_points,
)
from scaling.judge.power_law import (
    Problem,
    fit_points,
    form_named,
    predicted_err,
    starting_grid,
)

INF = math.inf
NS = [5, 10, 20, 40, 80]


def context_table(rng, seeds=range(5), noise=0.05, seed_noise=0.03, law=None, **kw):
    law = law or saturating_law(E=0.05, A=1.0, alpha=0.8)
    return synthetic_table(
        law, ns=NS, Ts=[INF], seeds=seeds, rng=rng, noise=noise, seed_noise=seed_noise, **kw
    )


def huber(r: np.ndarray, delta: float) -> np.ndarray:
    """The Huber loss written plainly, elementwise: r^2 / 2 inside |r| <= delta, delta (|r| - delta / 2)
    outside (reference_loss_and_grad's; Problem.loss_and_grad computes it in place)."""
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


def test_huber_matches_scipy_special():
    r = np.linspace(-0.01, 0.01, 101)
    np.testing.assert_allclose(huber(r, 1e-3), scipy_huber(1e-3, r), rtol=1e-12, atol=0)


@pytest.mark.parametrize("fixed_e", [None, math.log(0.05), -math.inf])
def test_gradient_matches_finite_differences(fixed_e):
    rng = np.random.default_rng(0)
    logx = np.log(rng.uniform(2, 1000, size=(30, 2)))
    problem = Problem(logx - logx.mean(0), logx.mean(0), rng.normal(-1, 0.5, 30), fixed_e, 0.3)
    weights = rng.integers(0, 3, 30).astype(float)
    theta = rng.normal(0, 0.5, problem.n_free)
    err = check_grad(
        lambda t: problem.loss_and_grad(t, weights)[0], lambda t: problem.loss_and_grad(t, weights)[1], theta
    )
    assert err < 1e-5


def reference_loss_and_grad(problem, theta, weights):
    """The loss and gradient written plainly (huber and np.clip on fresh arrays): the in-place steps of
    Problem.loss_and_grad must give these numbers bit for bit (refits and intervals depend on every bit)."""
    distinct, row = problem.points
    k = problem.logx.shape[1]
    at_inf = np.isinf(distinct)
    finite = np.where(at_inf, 0.0, distinct)
    z = np.empty((len(distinct), 1 + k))
    z[:, 0] = theta[0] if problem.fixed_e is None else problem.fixed_e
    cs = theta[-2 * k :].reshape(k, 2)
    z[:, 1:] = np.where(at_inf, -np.inf, cs[:, 0] - cs[:, 1] * finite)
    m = z.max(axis=1, keepdims=True)
    ez = np.exp(z - m)
    total = ez.sum(axis=1, keepdims=True)
    soft = ez / total
    r = (m[:, 0] + np.log(total[:, 0]))[row] - problem.logy
    loss = float(weights @ huber(r, problem.delta))
    dr_g = np.bincount(row, weights * np.clip(r, -problem.delta, problem.delta), minlength=len(distinct))
    g_term = dr_g @ soft
    grad = np.column_stack([g_term[1:], -(dr_g @ (soft[:, 1:] * finite))]).ravel()
    return loss, np.concatenate([g_term[:1], grad]) if problem.fixed_e is None else grad, r


@pytest.mark.parametrize("fixed_e", [None, math.log(0.05), -math.inf])
@pytest.mark.parametrize("axes", [1, 2])
def test_loss_and_gradient_equal_the_plain_formulas_bit_for_bit(fixed_e, axes):
    rng = np.random.default_rng(axes)
    x = rng.choice([2.0, 8.0, 32.0, 128.0, INF], size=(400, axes))
    x[:, 0] = np.minimum(x[:, 0], 512.0)  # the first axis finite (n), the second with T = inf
    logx = np.log(x)
    centre = np.array([c[np.isfinite(c)].mean() for c in logx.T])
    problem = Problem(logx - centre, centre, rng.normal(-1, 0.5, 400), fixed_e, 2.0)
    for _ in range(5):
        weights = rng.integers(0, 4, 400).astype(float)  # a resample's weights, zeros among them
        theta = rng.normal(0, 0.5, problem.n_free)
        loss, grad = problem.loss_and_grad(theta, weights)
        want_loss, want_grad, r = reference_loss_and_grad(problem, theta, weights)
        assert loss == want_loss and grad.tobytes() == want_grad.tobytes()
        assert 0 < np.mean(np.abs(r) <= problem.delta) < 1  # rows on both branches of the Huber loss


def test_noise_free_context_fit_is_exact():
    tab = context_table(np.random.default_rng(0), seeds=[0, 1], noise=0.0, seed_noise=0.0)
    fit = fit_context_scaling(tab).iloc[0]
    assert fit.converged and fit.form == "context"
    assert fit.E == pytest.approx(0.05, rel=1e-4)
    assert fit.A == pytest.approx(1.0, rel=1e-4)
    assert fit.alpha == pytest.approx(0.8, rel=1e-4)
    assert math.isnan(fit.B) and math.isnan(fit.beta)
    assert (fit.n_points, fit.n_seeds) == (10, 2)


def test_single_seed_has_no_interval():
    tab = context_table(np.random.default_rng(0), seeds=[4])
    fit = fit_context_scaling(tab).iloc[0]
    assert fit.converged and fit.n_seeds == 1
    assert math.isnan(fit.alpha_lo) and math.isnan(fit.alpha_hi)
    assert "single seed" in fit.note


def test_the_estimate_and_interval_are_the_seeds_own_fits():
    """alpha is the mean of each seed's own fit and its interval Student t's over them; E on the log scale."""
    from scipy.stats import t as student_t

    tab = context_table(np.random.default_rng(5), seeds=range(4))
    fit = fit_context_scaling(tab).iloc[0]
    own = [fit_context_scaling(tab[tab.seed == s]).iloc[0] for s in range(4)]
    alphas, log_E = np.array([o.alpha for o in own]), np.log([o.E for o in own])
    half = student_t.ppf(0.95, 3) * alphas.std(ddof=1) / 2
    assert fit.alpha == pytest.approx(alphas.mean(), abs=1e-6)
    want = (alphas.mean() - half, alphas.mean() + half)
    assert (fit.alpha_lo, fit.alpha_hi) == pytest.approx(want, abs=1e-6)
    assert fit.E == pytest.approx(math.exp(log_E.mean()), rel=1e-5)
    assert fit.E_lo < fit.E < fit.E_hi
    assert fit.alpha_lo < fit.alpha < fit.alpha_hi


def test_a_seed_too_small_for_its_own_fit_leaves_no_interval():
    tab = context_table(np.random.default_rng(6), seeds=range(3))
    tab = tab[(tab.seed != 2) | (tab.n <= 10)]  # seed 2 has 2 points for 3 parameters
    fit = fit_context_scaling(tab).iloc[0]
    assert fit.converged and math.isnan(fit.alpha_lo)
    assert "seed 2 has too few points" in fit.note


def test_task_fit_recovers_beta():
    law = saturating_law(E=0.1, B=3.0, beta=0.5)
    tab = synthetic_table(
        law,
        ns=[10],
        Ts=[1e2, 1e3, 1e4, 1e5, 1e6, INF],
        seeds=range(4),
        rng=np.random.default_rng(5),
        noise=0.01,
    )
    fits = fit_task_scaling(tab)
    assert len(fits) == 1
    fit = fits.iloc[0]
    assert fit.converged and fit.n_points == 24, "T = inf is a point of the task fit: its task term is 0"
    assert fit.E == pytest.approx(0.1, rel=0.05)
    assert fit.beta == pytest.approx(0.5, abs=0.05)
    assert fit.beta_lo <= fit.beta <= fit.beta_hi and fit.beta_hi - fit.beta_lo < 0.1
    assert math.isnan(fit.alpha)


def test_joint_fit_recovers_parameters_on_lattice():
    truth = dict(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5)
    tab = synthetic_table(
        saturating_law(**truth),
        ns=[5, 10, 20, 40],
        Ts=[1e2, 1e3, 1e4, 1e5],
        seeds=range(5),
        rng=np.random.default_rng(7),
        noise=0.01,
    )
    fit = fit_joint_scaling(tab).iloc[0]
    assert fit.converged and fit.n_points == 80
    for name, value in truth.items():
        assert fit[name] == pytest.approx(value, rel=0.1), name
        assert fit[f"{name}_lo"] <= fit[name] <= fit[f"{name}_hi"], name


def test_fixed_E_is_honoured():
    rng = np.random.default_rng(11)
    tab = context_table(rng, seeds=range(4), noise=0.02)
    fixed = fit_context_scaling(tab, fixed_E=0.05).iloc[0]
    assert fixed.converged and fixed.E == 0.05 and fixed.E_fixed == 0.05
    assert fixed.E_lo == fixed.E_hi == 0.05
    assert fixed.alpha == pytest.approx(0.8, abs=0.05)
    wrong = fit_context_scaling(tab, fixed_E=0.2).iloc[0]
    assert wrong.E == 0.2 and abs(wrong.alpha - fixed.alpha) > 0.1


def test_zero_floor_fits_a_pure_power_law():
    law = saturating_law(E=0.0, A=2.0, alpha=0.6)
    tab = synthetic_table(law, ns=NS, Ts=[INF], seeds=[0, 1], rng=np.random.default_rng(0), noise=0.0)
    fit = fit_context_scaling(tab, fixed_E=0.0).iloc[0]
    assert fit.converged and fit.E == 0.0
    assert fit.A == pytest.approx(2.0, rel=1e-5) and fit.alpha == pytest.approx(0.6, rel=1e-5)


def test_fixed_E_from_a_column_per_group():
    rng = np.random.default_rng(3)
    a = context_table(rng, seeds=[0, 1], model="a").assign(floor=0.05)
    b = context_table(rng, seeds=[0, 1], model="b").assign(floor=0.01)
    fits = fit_context_scaling(pd.concat([a, b]), fixed_E="floor")
    assert fits.set_index("model").E.to_dict() == {"a": 0.05, "b": 0.01}


def test_non_converging_fit_is_flagged():
    tab = context_table(np.random.default_rng(0), seeds=range(3))
    fit = fit_context_scaling(tab, maxiter=1).iloc[0]
    assert not fit.converged
    assert "ITERATIONS" in fit.message.upper()
    assert "did not converge" in fit.note
    assert math.isnan(fit.alpha_lo) and math.isnan(fit.alpha_hi)


def test_too_few_points_are_not_fitted():
    points = pd.DataFrame({"seed": [0, 0, 1, 1], "n": [5, 10, 5, 10], "err": [0.5, 0.3, 0.5, 0.3]})
    fit = fit_points(points, "context")
    assert not fit["converged"] and math.isnan(fit["alpha"])
    assert "not fitted" in fit["message"]


def test_scaling_points_selects_diagonal_positive_T_and_averages_duplicates():
    base = dict(sweep="s", model="m", predictor="model", T=10.0, seed=0)
    rows = [
        dict(base, N=5, n=5, err=0.5),
        dict(base, N=10, n=5, err=0.7),  # off-diagonal
        dict(base, N=10, n=10, err=0.3),
        dict(base, N=10, n=0, err=1.0),
        dict(base, N=10, n=10, err=0.4, T=INF),
        dict(base, N=20, n=20, err=-1.0),  # invalid error
    ]
    table = pd.DataFrame(rows)
    keys = ["sweep", "model", "predictor"]
    diag = scaling_points(table, ("n", "T"), keys, select="diagonal")
    assert diag[["n", "T", "err"]].values.tolist() == [[5, 10.0, 0.5], [10, 10.0, 0.3], [10, INF, 0.4]]
    every = scaling_points(table, ("n",), keys + ["T"], select="all", n_min=0)
    at_5 = every[(every.n == 5) & (every["T"] == 10.0)].err
    assert at_5.tolist() == [pytest.approx(0.6)]
    assert sorted(every.n.unique()) == [0, 5, 10]


def test_auto_selection_is_the_diagonal_across_N_and_the_whole_curve_of_a_single_N():
    base = dict(sweep="s", predictor="model", T=INF, seed=0)
    lattice = [dict(base, model="mlp", N=N, n=n, err=1.0 / n) for N in (5, 10) for n in range(1, N + 1)]
    one_cell = [dict(base, model="sgpt", N=40, n=n, err=1.0 / n) for n in (10, 20, 40)]
    points = scaling_points(pd.DataFrame(lattice + one_cell), ("n",), ["sweep", "model", "T", "predictor"])
    assert points[points.model == "mlp"].n.tolist() == [5, 10]  # n == N: train = test
    assert points[points.model == "sgpt"].n.tolist() == [10, 20, 40]  # Figs. 2-4: n within the cell
    task = scaling_points(
        pd.DataFrame(lattice + one_cell).assign(T=100.0), ("T",), ["sweep", "model", "n", "predictor"]
    )
    assert task[task.model == "mlp"].n.tolist() == [5, 10]  # grouped by n, still the diagonal


def test_groups_split_by_model_T_and_task_columns():
    rng = np.random.default_rng(0)
    parts = [
        context_table(rng, seeds=[0, 1], model=m).assign(**{"task.sigma": s})
        for m in ("a", "b")
        for s in (0.1, 0.5)
    ]
    fits = fit_context_scaling(pd.concat(parts))
    assert len(fits) == 4 and {"model", "task.sigma", "T", "predictor"} <= set(fits.columns)


def test_fit_all_stacks_forms_and_unknown_form_lists_known():
    tab = synthetic_table(
        saturating_law(0.05, 1.0, 0.8, 2.0, 0.5),
        ns=[5, 10, 20],
        Ts=[1e2, 1e3, 1e4],
        seeds=[0, 1],
        rng=np.random.default_rng(0),
    )
    fits = fit_all(tab)
    assert fits.form.value_counts().to_dict() == {"context": 3, "task": 3, "joint": 1}
    with pytest.raises(ValueError, match="joint"):
        form_named("chinchilla")


def test_predicted_err_evaluates_the_fitted_law():
    law = saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5)
    fit = dict(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5)
    n, T = np.array([5.0, 40.0]), np.array([1e3, INF])
    np.testing.assert_allclose(predicted_err(fit, n, T), [law(5, 1e3), law(40, INF)])
    context_only = dict(fit, B=math.nan, beta=math.nan)
    np.testing.assert_allclose(predicted_err(context_only, n), 0.05 + n**-0.8)


def test_flat_curve_fit_notes_exponent_on_bound_or_vanishing_term():
    tab = context_table(np.random.default_rng(0), seeds=range(3), law=saturating_law(E=0.3), noise=0.01)
    fit = fit_context_scaling(tab).iloc[0]
    assert fit.converged
    np.testing.assert_allclose(predicted_err(fit, np.array(NS)), 0.3, rtol=0.03)
    assert "alpha at bound" in fit.note or fit.A * 5**-fit.alpha < 0.01


def test_non_positive_errors_are_rejected_by_fit_points():
    points = pd.DataFrame({"seed": [0, 0, 0], "n": [5, 10, 20], "err": [0.5, 0.0, 0.2]})
    with pytest.raises(ValueError, match="positive"):
        fit_points(points, "context")


@pytest.mark.parametrize("fixed_e", [None, math.log(0.05)])
def test_the_own_lbfgsb_driver_gives_scipys_iterates_bit_for_bit(fixed_e):
    """scaling.judge.lbfgsb drives scipy's routine itself (3x fewer wrappers per refit): on joint-form
    problems with row weights (zeros among them, as a seed's own fit has), from the starting grid and from
    far off, converging or stopped by maxiter, it returns minimize's optimum, loss, success and message
    exactly."""
    from scaling.judge import lbfgsb

    assert lbfgsb.own_driver()  # this project's scipy: the fast path is the one tested
    rng = np.random.default_rng(3)
    logx = np.log(rng.choice([5.0, 10, 20, 40, 80], size=(60, 2)))
    n, T = np.exp(logx).T
    logy = np.log(0.05 + 2 * n**-0.7 + T**-0.4) + rng.normal(0, 0.05, 60)
    problem = Problem(logx - logx.mean(0), logx.mean(0), logy, fixed_e, 1e-3)
    starts = [*starting_grid(problem), rng.normal(0, 3, problem.n_free)]
    stopped = 0
    for start in starts:
        weights = rng.integers(0, 3, 60).astype(float)
        for maxiter in (1000, 3):
            args = (problem.loss_and_grad, start, (weights,), problem.bounds(), maxiter, 1e-12, 1e-10)
            ours, theirs = lbfgsb._driven(*args), lbfgsb._scipy(*args)
            assert np.array_equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]
            stopped += "ITERATIONS REACHED LIMIT" in ours[3]
    assert stopped >= len(starts)  # maxiter=3 stops every run early
