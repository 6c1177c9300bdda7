"""The xgboost baseline is Garg et al.'s (github.com/dtsip/in-context-learning, src/models.py, XGBoostModel:
``xgb.XGBRegressor()`` under the xgboost 1.6.1 their environment pins), with those settings written out
for today's xgboost; its version is in its cells' keys and in its disk cache's, so numbers of other
settings are never read back."""

import json

import numpy as np
import pytest
from xgboost import XGBRegressor

from papers.context_scaling import plugins as points
from papers.context_scaling.baseline_cache import CachedPredictor
from papers.context_scaling.baseline_fits import GARG_XGBOOST, prefix_fits, sklearn_model
from papers.context_scaling.baselines import build_baselines
from papers.context_scaling.tasks import TaskConfig, fresh_prompts, make_family
from scaling.cells import Cell
from scaling.config import ConfigError
from scaling.planning.plan import load_plan

# one prompt of 8 points in d = 3, and what Garg et al.'s XGBRegressor() under xgboost 1.6.1 predicts at
# each prefix n (fitted on the pairs < n, evaluated at x_n; n = 0, no data: 0, as their code predicts)
XS = np.array(
    [
        [0.5, -1.0, 2.0],
        [1.5, 0.25, -0.5],
        [-1.0, 2.0, 0.0],
        [0.0, -0.5, 1.0],
        [2.0, 1.0, -1.5],
        [-0.75, 0.5, 0.5],
        [1.0, -2.0, 0.25],
        [0.25, 1.5, -1.0],
    ]
)
YS = np.array([1.0, -0.5, 2.0, 0.75, -1.25, 0.5, 1.5, -2.0])
XGBOOST_1_6_1 = [
    0.0,
    0.9999998211860657,
    0.9990423917770386,
    1.0000239610671997,
    -0.4990418553352356,
    1.9989573955535889,
    -0.4996786415576935,
    1.5001341104507446,
]


@pytest.fixture(autouse=True)
def cache_in_tmp(tmp_path, monkeypatch):
    monkeypatch.setenv("SCALING_BASELINE_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("SCALING_BASELINE_JOBS", "1")


def test_the_estimator_has_the_settings_of_garg_et_al_s_xgboost():
    """Every setting written out reaches the estimator; those xgboost 3 changed are 1.6.1's (the predictions
    test below holds them to 1.6.1's numbers)."""
    params = sklearn_model("xgboost", {}).get_params()
    assert {k: params[k] for k in GARG_XGBOOST} == GARG_XGBOOST and params["n_jobs"] == 1
    pinned = dict(tree_method="exact", base_score=0.5, n_estimators=100, learning_rate=0.3, max_depth=6)
    assert {k: GARG_XGBOOST[k] for k in pinned} == pinned
    # what the fitted booster ran with: the exact greedy updater and a fixed intercept, not one fitted
    model = sklearn_model("xgboost", {}).fit(XS, YS)
    config = json.loads(model.get_booster().save_config())["learner"]
    assert [u["name"] for u in config["gradient_booster"]["updater"]] == ["grow_colmaker", "prune"]
    assert float(config["learner_model_param"]["base_score"].strip("[]")) == 0.5


def test_it_predicts_what_xgboost_1_6_1_predicts_and_the_same_each_time():
    first, second = prefix_fits(XS, YS, "xgboost", {}), prefix_fits(XS, YS, "xgboost", {})
    assert first.tolist() == second.tolist()
    assert first == pytest.approx(XGBOOST_1_6_1, rel=1e-6, abs=1e-6)
    # today's defaults (hist trees, an intercept fitted to the labels) predict otherwise on this prompt
    default = [float(XGBRegressor(n_jobs=1).fit(XS[:n], YS[:n]).predict(XS[n : n + 1])[0]) for n in (3, 6)]
    assert default != pytest.approx([XGBOOST_1_6_1[3], XGBOOST_1_6_1[6]], abs=0.1)


def test_its_version_is_in_the_keys_of_the_cells_that_run_it(monkeypatch):
    full = [p.cell for p in load_plan("sweeps/fig4.yaml").cells]
    quick = [p.cell for p in load_plan("sweeps/fig4.yaml", "quick").cells]
    without = [p.cell for p in load_plan("sweeps/fig2.yaml", "quick").cells]
    assert all("xgboost" in c.eval.baselines for c in full + quick)
    assert {json.dumps(c.versions) for c in full + quick} == {'{"baselines.xgboost": "2"}'}
    # a cell without xgboost has no version
    assert all("xgboost" not in c.eval.baselines and c.versions == {} for c in without)
    cell = full[0]
    data = {k: v for k, v in cell.to_dict().items() if k != "versions"}
    assert Cell.from_dict(data).key == cell.key
    monkeypatch.setitem(points.BUILTIN_BASELINE_VERSIONS, "xgboost", "3")
    assert Cell.from_dict(data).key != cell.key  # another version: another cell
    with pytest.raises(ConfigError, match="planned with plug-in versions"):
        Cell.from_dict(cell.to_dict())  # a cell planned under version 2 never runs under 3


def test_its_disk_cache_never_returns_numbers_of_another_version():
    task = TaskConfig(d=3)
    prompts = fresh_prompts(make_family(task), 2, 5, seed=3)
    predictor = build_baselines(("xgboost",), task)["xgboost"]
    assert predictor.spec["version"] == points.BUILTIN_BASELINE_VERSIONS["xgboost"]
    # a file where the same baseline without a version (xgboost's own defaults) cached these prompts
    unversioned = {k: v for k, v in predictor.spec.items() if k != "version"}
    stale = CachedPredictor(lambda p: p.ys * 0 + 123.0, unversioned)
    assert stale(prompts).eq(123.0).all() and stale.path(prompts) != predictor.path(prompts)
    pred = predictor(prompts)
    assert predictor.misses == 1 and not pred.eq(123.0).any()
    expected = [prefix_fits(prompts.xs[b].double().numpy(), prompts.ys[b].double().numpy(), "xgboost", {})
                for b in range(2)]  # fmt: skip
    assert pred.double().numpy() == pytest.approx(np.stack(expected), abs=1e-6)
