"""The added baselines against scikit-learn and independent formulas; causality; the disk cache; split
rows."""

import math
import os
import subprocess
import sys

import numpy as np
import pytest
import torch
from sklearn.linear_model import Lasso
from sklearn.neighbors import KNeighborsRegressor

from papers.context_scaling.baselines import (
    BaselineNotApplicable,
    build_baselines,
    discrete_mmse,
    mixture_ridge_predictions,
    parse_baseline,
    ridge_predictions,
)
from papers.context_scaling.evaluate import EvalConfig, evaluate, lambda_scan
from papers.context_scaling.plugins import BASELINES, baseline
from papers.context_scaling.tasks import TaskConfig, TaskPool, fresh_prompts, make_family
from scaling.plugins import names

LIN = TaskConfig(d=4, noise_std=0.3)
MIXED = TaskConfig(family="linear_mixed_noise", d=4, noise_stds=(0.1, 0.5))


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_BASELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SCALING_BASELINE_JOBS", "1")


def small_prompts(task=LIN, count=4, points=9, seed=1):
    return fresh_prompts(make_family(task), count, points, seed=seed)


def test_lasso_matches_sklearn_at_every_prefix():
    prompts = small_prompts(TaskConfig(family="sparse_linear", d=6, sparsity=2))
    pred = (
        build_baselines(("lasso(alpha=0.05)",), TaskConfig())["lasso(alpha=0.05)"](prompts).double().numpy()
    )
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(xs.shape[0]):
        for n in range(1, xs.shape[1]):
            model = Lasso(alpha=0.05, fit_intercept=False, max_iter=100000).fit(xs[b, :n], ys[b, :n])
            assert pred[b, n] == pytest.approx(model.predict(xs[b, n : n + 1])[0], abs=1e-5)
    assert np.all(pred[:, 0] == 0)


def test_knn_matches_sklearn():
    prompts = small_prompts(points=12)
    pred = build_baselines(("knn",), LIN)["knn"](prompts).double().numpy()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(xs.shape[0]):
        for n in range(1, xs.shape[1]):
            model = KNeighborsRegressor(n_neighbors=min(3, n)).fit(xs[b, :n], ys[b, :n])
            assert pred[b, n] == pytest.approx(model.predict(xs[b, n : n + 1])[0], abs=1e-6)


def test_hilbert_is_the_kernel_smoother_and_safe_at_coincident_points():
    prompts = small_prompts(TaskConfig(d=3), points=7)
    pred = build_baselines(("hilbert",), LIN)["hilbert"](prompts).double()
    xs, ys = prompts.xs.double(), prompts.ys.double()
    for n in range(1, 7):
        k = 1 / (xs[0, :n] - xs[0, n]).norm(dim=-1) ** 3
        assert pred[0, n].item() == pytest.approx(((k * ys[0, :n]).sum() / k.sum()).item(), rel=1e-6)
    xs2 = xs.clone()
    xs2[0, 5] = xs2[0, 2]  # query 5 repeats input 2
    same = prompts.slice(0, 1)
    same.xs = (xs2[:1] * 50).float()  # large norms too
    out = baseline("hilbert")(LIN, {})(same)
    assert torch.isfinite(out).all() and out[0, 5].item() == pytest.approx(same.ys[0, 2].item(), rel=1e-6)


def test_averaging_is_garg_estimator():
    prompts = small_prompts()
    pred = baseline("averaging")(LIN, {})(prompts).double()
    xs, ys = prompts.xs.double(), prompts.ys.double()
    w = (xs[1, :5] * ys[1, :5, None]).mean(0)
    assert pred[1, 5].item() == pytest.approx((w @ xs[1, 5]).item(), rel=1e-6)


def test_discrete_mmse_matches_a_direct_posterior():
    pool = TaskPool(make_family(LIN), 7, seed=3)
    prompts = TaskPool(make_family(LIN), 7, seed=3).batch(0, 5, 10)  # prompts from pool tasks
    pred = build_baselines(("bayes_discrete",), LIN, pool=pool)["bayes_discrete"](prompts).double().numpy()
    betas = pool.tasks(torch.arange(7))["beta"].double().numpy()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(5):
        for n in range(10):
            loglik = np.array([-np.sum((ys[b, :n] - xs[b, :n] @ beta) ** 2) / (2 * 0.09) for beta in betas])
            post = np.exp(loglik - loglik.max())
            post /= post.sum()
            # float32 predictions: their rounding (half an ulp, 2.4e-7 at 3.5) bounds the agreement
            assert pred[b, n] == pytest.approx(post @ (betas @ xs[b, n]), rel=2e-7, abs=1e-7)


def test_discrete_mmse_mixes_noise_levels_like_a_direct_posterior():
    pool = TaskPool(make_family(MIXED), 6, seed=1)
    prompts = pool.batch(0, 3, 8)
    betas = pool.tasks(torch.arange(6))["beta"]
    pred = discrete_mmse(betas, (0.1, 0.5), chunk=4)(prompts).double().numpy()  # chunks split the pool
    betas, xs, ys = betas.double().numpy(), prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(3):
        for n in range(8):
            logs, means = [], []
            for s in (0.1, 0.5):
                for beta in betas:
                    rss = np.sum((ys[b, :n] - xs[b, :n] @ beta) ** 2)
                    logs.append(-rss / (2 * s * s) - n * np.log(s))
                    means.append(beta @ xs[b, n])
            w = np.exp(np.array(logs) - max(logs))
            assert pred[b, n] == pytest.approx(w @ np.array(means) / w.sum(), abs=1e-6)


def test_discrete_mmse_needs_a_finite_pool_and_a_linear_task():
    with pytest.raises(BaselineNotApplicable, match="finite task pool"):
        build_baselines(("bayes_discrete",), LIN)
    with pytest.raises(BaselineNotApplicable, match="finite task pool"):
        build_baselines(("bayes_discrete",), LIN, pool=TaskPool(make_family(LIN), math.inf, seed=0))
    with pytest.raises(BaselineNotApplicable, match="linear"):
        build_baselines(("ridge",), TaskConfig(family="relu_net"))


def test_mixture_ridge_is_the_posterior_over_levels():
    prompts = small_prompts(MIXED, count=3, points=8)
    pred = mixture_ridge_predictions(prompts, (0.1, 0.5)).double().numpy()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    from scipy.stats import multivariate_normal

    for b in range(3):
        for n in range(1, 8):
            X, y = xs[b, :n], ys[b, :n]
            logs, means = [], []
            for s in (0.1, 0.5):
                logs.append(multivariate_normal(np.zeros(n), X @ X.T / 4 + s * s * np.eye(n)).logpdf(y))
                means.append(xs[b, n] @ np.linalg.solve(X.T @ X + 4 * s * s * np.eye(4), X.T @ y))
            w = np.exp(np.array(logs) - max(logs))
            assert pred[b, n] == pytest.approx(w @ np.array(means) / w.sum(), abs=1e-7)


def test_ridge_per_level_uses_each_prompts_level():
    prompts = small_prompts(MIXED, count=6)
    pred = baseline("ridge_per_level")(MIXED, {})(prompts)
    for b in range(6):
        lam = 4 * prompts.meta["noise_std"][b].item() ** 2
        assert torch.allclose(pred[b], ridge_predictions(prompts.slice(b, b + 1), lam)[0], atol=1e-6)


def test_ridge_tuned_picks_near_bayes_lambda_on_its_own_validation_set():
    task = TaskConfig(d=4, noise_std=1.0)  # Bayes lambda = 4
    predictor = build_baselines(("ridge_tuned",), task)["ridge_tuned"]
    prompts = small_prompts(task, points=9)
    pred = predictor(prompts)
    close = [
        torch.allclose(pred[:, 8], ridge_predictions(prompts, lam)[:, 8], atol=1e-6)
        for lam in (
            2.0,
            2.6826957952797246,
            3.1622776601683795,
            4.216965034285822,
            5.623413251903491,
            7.498942093324558,
        )
    ]
    assert any(close)
    other = small_prompts(task, points=9, seed=2)  # test prompts never tune it
    assert torch.equal(predictor(other), build_baselines(("ridge_tuned",), task)["ridge_tuned"](other))


def test_lambda_scan_is_ridge_error_per_lambda_and_lowest_at_the_bayes_lambda_per_level():
    family = make_family(MIXED)
    prompts = fresh_prompts(family, 4000, 13, seed=0)
    lambdas = (0.004, 0.04, 1.0, 25.0)  # Bayes: d sigma^2 = 0.04 and 1.0
    config = EvalConfig(prompts=4000, bootstrap=50, lambda_n=(8, 12, 40), lambdas=lambdas)
    scan = lambda_scan(prompts, family.y_second_moment(), config, 12, 0, family)
    assert sorted(scan["n"].unique()) == [8, 12]  # n beyond N = 12 dropped
    assert set(scan["predictor"]) == {
        "ridge_lambda",
        "ridge_lambda|noise_std=0.1",
        "ridge_lambda|noise_std=0.5",
    }
    at = scan.set_index(["predictor", "n", "lam"])
    for lam in lambdas:  # the plain formula, per lambda
        direct = (ridge_predictions(prompts, lam)[:, 8].double() - prompts.ys[:, 8].double()) ** 2
        assert at.loc[("ridge_lambda", 8, lam), "err"] == pytest.approx(
            float(direct.mean()) / family.y_second_moment(), rel=1e-5
        )
        low = prompts.meta["noise_std"] == 0.1
        assert at.loc[("ridge_lambda|noise_std=0.1", 8, lam), "err"] == pytest.approx(
            float(direct[low].mean()) / family.group_second_moment("noise_std", 0.1), rel=1e-5
        )
    row = at.loc[("ridge_lambda", 8, 1.0)]
    assert row["err_lo"] <= row["err"] <= row["err_hi"] and row["prompts"] == 4000
    level_rows = scan[(scan["n"] == 8) & scan["predictor"].str.contains("|", regex=False)]
    best = level_rows.loc[level_rows.groupby("predictor")["err"].idxmin()].set_index("predictor")["lam"]
    assert best["ridge_lambda|noise_std=0.1"] == 0.04 and best["ridge_lambda|noise_std=0.5"] == 1.0


def test_cells_without_lambda_n_scan_nothing_and_lambdas_must_be_positive():
    assert EvalConfig().lambda_n == ()
    with pytest.raises(ValueError, match="lambdas"):
        EvalConfig(lambda_n=(5,), lambdas=(0.0, 1.0))
    with pytest.raises(ValueError, match="lambda_n"):
        EvalConfig(lambda_n=(0,))


def test_ridge_validation_selects_per_prompt_from_its_own_pairs():
    prompts = small_prompts(TaskConfig(d=3, noise_std=0.5), count=4, points=12)
    pred = baseline("ridge_validation")(LIN, {"lambdas": [0.01, 10.0], "val_fraction": 0.5})(prompts).double()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(4):
        for n in range(2, 12):
            t = n - max(1, round(0.5 * n))
            errs, preds = [], []
            for lam in (0.01, 10.0):
                w = (
                    np.linalg.solve(xs[b, :t].T @ xs[b, :t] + lam * np.eye(3), xs[b, :t].T @ ys[b, :t])
                    if t
                    else np.zeros(3)
                )
                errs.append(np.mean((ys[b, t:n] - xs[b, t:n] @ w) ** 2))
                full = np.linalg.solve(xs[b, :n].T @ xs[b, :n] + lam * np.eye(3), xs[b, :n].T @ ys[b, :n])
                preds.append(full @ xs[b, n])
            assert pred[b, n].item() == pytest.approx(preds[int(np.argmin(errs))], abs=1e-6)


FAST = [
    "zero",
    "least_squares",
    "ridge",
    "ridge_per_level",
    "ridge_tuned",
    "ridge_validation",
    "bayes_discrete",
    "averaging",
    "knn",
    "hilbert",
    "lasso",
    "xgboost",
    "decision_tree",
    "decision_tree(max_depth=none)",
    "nn_student(steps=5)",
    "nn_student(steps=5, batch=3)",
]


@pytest.mark.parametrize("name", FAST)
def test_column_n_ignores_labels_from_n_on(name):
    task = TaskConfig(d=3, noise_std=0.3)
    pool = TaskPool(make_family(task), 5, seed=0)
    predictor = build_baselines((name,), task, pool=pool)[name]
    prompts = small_prompts(task, count=3, points=8)
    changed = prompts.slice(0, 3)
    changed.ys = prompts.ys.clone()
    changed.ys[:, 5:] += 100.0
    before, after = predictor(prompts), predictor(changed)
    assert before.shape == prompts.ys.shape
    assert torch.allclose(before[:, :6], after[:, :6], atol=1e-5), name


def test_every_registered_baseline_is_checked_for_causality():
    assert {parse_baseline(n)[0] for n in FAST} == set(names(BASELINES))


def test_nn_student_learns_a_linear_task():
    task = TaskConfig(d=2)
    prompts = small_prompts(task, count=6, points=21)
    pred = baseline("nn_student")(task, {})(prompts)
    err = (pred[:, 20] - prompts.ys[:, 20]).pow(2).mean() / (prompts.ys[:, 20].pow(2).mean())
    assert err < 0.2


def test_options_parse_and_unknown_names_list_the_known_ones():
    assert parse_baseline("decision_tree(max_depth=none)") == ("decision_tree", {"max_depth": None})
    assert parse_baseline("lasso(alpha=0.1, max_iter=50)") == ("lasso", {"alpha": 0.1, "max_iter": 50})
    with pytest.raises(KeyError, match="known: zero, least_squares, ridge, ridge_per_level"):
        build_baselines(("oracle",), TaskConfig())


CHILD = """
import sys, torch
from papers.context_scaling.baselines import build_baselines
from papers.context_scaling.tasks import TaskConfig, fresh_prompts, make_family
task = TaskConfig(d=3)
prompts = fresh_prompts(make_family(task), 3, 6, seed=4)
predictor = build_baselines(("decision_tree",), task)["decision_tree"]
torch.save(predictor(prompts), sys.argv[1])
print(predictor.hits, predictor.misses)
"""


def test_cache_is_hit_on_the_second_call_and_in_a_new_process(tmp_path):
    task = TaskConfig(d=3)
    prompts = fresh_prompts(make_family(task), 3, 6, seed=4)
    predictor = build_baselines(("decision_tree",), task)["decision_tree"]
    first = predictor(prompts)
    second = predictor(prompts)
    assert (predictor.hits, predictor.misses) == (1, 1) and torch.equal(first, second)
    other = build_baselines(("decision_tree(max_depth=2)",), task)["decision_tree(max_depth=2)"]
    other(prompts)
    assert other.misses == 1  # options change the key
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    out = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "p.pt")],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    assert out.stdout.split() == ["1", "0"]
    assert torch.equal(torch.load(tmp_path / "p.pt"), first)
    assert not list((tmp_path / "cache").glob("*.tmp"))


def test_split_rows_per_noise_level():
    family = make_family(MIXED)
    prompts = fresh_prompts(family, 400, 9, seed=0)
    predictors = build_baselines(("zero", "ridge_per_level"), MIXED)
    frame = evaluate(
        predictors,
        prompts,
        family.y_second_moment(),
        EvalConfig(prompts=400, bootstrap=20),
        8,
        0,
        family=family,
    )
    names = set(frame["predictor"])
    assert {"zero|noise_std=0.1", "zero|noise_std=0.5", "ridge_per_level|noise_std=0.5"} <= names
    zero = frame.set_index(["predictor", "n"])["err"]
    assert zero[("zero|noise_std=0.1", 8)] == pytest.approx(1.0, abs=0.15)
    assert zero[("zero|noise_std=0.5", 8)] == pytest.approx(1.0, abs=0.15)
    counts = frame[frame.n == 1].set_index("predictor")["prompts"]
    assert counts["zero|noise_std=0.1"] + counts["zero|noise_std=0.5"] == 400
    plain = evaluate(predictors, prompts, 1.0, EvalConfig(prompts=400, bootstrap=20), 8, 0)
    assert set(plain["predictor"]) == {"zero", "ridge_per_level"}  # no family, no split_by


def test_a_per_prefix_fit_computes_only_the_columns_evaluated_and_scores_the_same():
    # a decision tree is fitted per prefix; an evaluation grid of 3 of 8 columns costs 3 fits per prompt
    task = TaskConfig(d=3)
    prompts = small_prompts(task, count=6, points=9, seed=5)
    config = EvalConfig(prompts=6, bootstrap=20, n=(2, 5, 8))
    predictor = build_baselines(("decision_tree",), task)["decision_tree"]
    some = predictor(prompts, positions=[2, 5, 8])
    assert predictor.misses == 1 and torch.isnan(some[:, [1, 3, 4, 6, 7]]).all()
    everything = build_baselines(("decision_tree",), task)["decision_tree"]
    full = everything(prompts)
    assert everything.misses == 1  # a file of some columns never serves a request for all of them
    assert torch.equal(some[:, [2, 5, 8]], full[:, [2, 5, 8]]) and not torch.isnan(full).any()
    again = build_baselines(("decision_tree",), task)["decision_tree"]
    assert torch.equal(again(prompts, positions=[2, 8]), full) and again.hits == 1  # every column serves any
    other = small_prompts(task, count=2, points=9, seed=6)
    assert not torch.isnan(again(other, positions=list(range(9)))).any() and again.misses == 1
    again(other)
    assert again.hits == 2  # a request for every column wrote the file of every column
    scored = evaluate({"decision_tree": predictor}, prompts, 1.0, config, 8, 0)
    by_full = evaluate({"decision_tree": lambda part: full[: len(part)]}, prompts, 1.0, config, 8, 0)
    assert scored.equals(by_full)


@pytest.mark.slow
def test_process_pool_gives_the_same_predictions_as_one_process():
    prompts = small_prompts(TaskConfig(d=3), count=4, points=7)
    one = build_baselines(("decision_tree(n_jobs=1)",), TaskConfig(d=3))["decision_tree(n_jobs=1)"](prompts)
    two = build_baselines(("decision_tree(n_jobs=2)",), TaskConfig(d=3))["decision_tree(n_jobs=2)"]
    assert two.hits == 1 - 1 and torch.equal(two(prompts), one) and two.hits == 1  # n_jobs is not in the key
    from papers.context_scaling.baseline_cache import map_prompts
    from papers.context_scaling.baseline_fits import prefix_fits

    assert torch.equal(map_prompts(prefix_fits, prompts, 2, kind="tree", options={}), one)


def test_eval_config_rejects_unknown_baselines_at_plan_time():
    from scaling.config import ConfigError, from_dict

    with pytest.raises(ConfigError, match=r"baselines\[1\]: unknown baseline 'lass'; known: zero"):
        from_dict(EvalConfig, {"baselines": ["zero", "lass(alpha=0.1)"]})
    assert from_dict(EvalConfig, {"baselines": ["lasso(alpha=0.1)"], "split_by": "noise_std"}).split_by == (
        "noise_std",
    )


def test_nn_student_subsets_hold_min_batch_n_prefix_pairs():
    from papers.context_scaling.baseline_fits import random_subset
    from papers.context_scaling.tasks import generator

    in_prefix = torch.arange(10).expand(9, 10) < torch.arange(1, 10).unsqueeze(1)  # n = 1..9
    chosen = random_subset(in_prefix, 4, generator(0, "s"))
    assert chosen.sum(1).tolist() == [1, 2, 3, 4, 4, 4, 4, 4, 4] and not (chosen & ~in_prefix).any()


def test_baselines_not_defined_for_a_task_are_left_out_with_the_reason():
    from papers.context_scaling.baselines import applicable_baselines

    predictors, skipped = applicable_baselines(
        ("zero", "ridge", "least_squares"), TaskConfig(family="relu_net", d=4)
    )
    assert list(predictors) == ["zero", "least_squares"]
    assert list(skipped) == ["ridge"] and "linear" in skipped["ridge"]
