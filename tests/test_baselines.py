"""Batched least squares and ridge against scikit-learn and numpy, prefix by prefix."""

import numpy as np
import pytest
import torch
from sklearn.linear_model import Ridge

from papers.context_scaling.baselines import BASELINES, build_baselines, ridge_predictions
from papers.context_scaling.configs import BASELINE_NAMES
from papers.context_scaling.tasks import LinearRegression, TaskConfig, fresh_prompts


@pytest.fixture
def prompts():
    return fresh_prompts(LinearRegression(TaskConfig(d=5, noise_std=0.3)), 6, 12, seed=2)


@pytest.mark.parametrize("lam", [0.05, 1.0, 5 * 0.3**2])
def test_ridge_matches_sklearn_at_every_prefix(prompts, lam):
    pred = ridge_predictions(prompts, lam).double().numpy()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(xs.shape[0]):
        for n in range(1, xs.shape[1]):
            model = Ridge(alpha=lam, fit_intercept=False, solver="svd").fit(xs[b, :n], ys[b, :n])
            assert pred[b, n] == pytest.approx(model.predict(xs[b, n : n + 1])[0], abs=1e-6)


def test_least_squares_is_minimum_norm_at_every_prefix(prompts):
    pred = build_baselines(("least_squares",), TaskConfig(d=5))["least_squares"](prompts).double().numpy()
    xs, ys = prompts.xs.double().numpy(), prompts.ys.double().numpy()
    for b in range(xs.shape[0]):
        for n in range(1, xs.shape[1]):
            w = np.linalg.pinv(xs[b, :n]) @ ys[b, :n]
            assert pred[b, n] == pytest.approx(xs[b, n] @ w, abs=1e-6)
    assert np.all(pred[:, 0] == 0)


def test_prediction_at_n_ignores_labels_from_n_on(prompts):
    # every baseline is checked in test_baselines_more.py; these are the original closed forms
    for name, predictor in build_baselines(
        ("zero", "least_squares", "ridge"), TaskConfig(d=5, noise_std=0.3)
    ).items():
        before = predictor(prompts)
        changed = prompts.slice(0, len(prompts))
        changed.ys = changed.ys.clone()
        changed.ys[:, 7:] += 100.0
        after = predictor(changed)
        assert torch.allclose(before[:, :8], after[:, :8]), name


def test_unknown_baseline_lists_the_known_ones():
    with pytest.raises(KeyError, match="known: zero, least_squares, ridge"):
        build_baselines(("oracle",), TaskConfig())


def test_the_baselines_are_the_ones_the_planner_knows_without_torch():
    """configs.BASELINE_NAMES (what EvalConfig accepts, without torch) is the registry's names, in order
    (the order of an unknown name's error)."""
    assert tuple(BASELINES) == BASELINE_NAMES
