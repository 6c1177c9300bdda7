"""The temperature scans' verdict intervals hold their stated level in each scan's real structure
(papers/temperature/analysis/resample.py, simulated by tests/scan_coverage_study.py): a GPT-2 scanned on
several prompt seeds of one model (Student t over the pooled prompts), GPT-2s trained one per cell (Student t
over the models), the LLM's questions and Monte Carlo runs of one model (the crossed bootstrap): 88% or more
at a nominal 90%. The same harness finds the bootstrap over cells then prompts, used before for GPT-2, well
short of it when each cell trained its own model."""

import numpy as np
import pytest
from scan_coverage_study import gpt2_cells, gpt2_coverage, llm_coverage, llm_truth

from papers.temperature.analysis import resample


@pytest.mark.parametrize("cells", [3, 5, 10])
def test_gpt2_intervals_cover_at_least_88_percent_in_either_structure(cells):
    rng = np.random.default_rng(cells)
    for models, method in ((False, "over_prompts"), (True, "over_models")):
        got = gpt2_coverage(rng, 2000, cells, 128, models, method)
        assert min(got.values()) >= 0.88, (models, got)


def test_the_bootstrap_before_falls_short_when_each_cell_trained_its_own_model():
    rng = np.random.default_rng(0)
    got = gpt2_coverage(rng, 400, 3, 256, models=True, method="nested", resamples=300)
    assert max(got.values()) < 0.82, got  # about 72%


@pytest.mark.parametrize("xs,runs,questions", [(1, 2, 24), (6, 2, 24)])
def test_llm_intervals_cover_at_least_88_percent(xs, runs, questions):
    rng = np.random.default_rng(xs)
    got = llm_coverage(rng, 1500, xs, runs, questions, llm_truth(xs), resamples=300)
    assert min(got.values()) >= 0.88, got


def test_too_few_trained_models_give_no_interval_and_one_model_pools_its_prompts():
    arrays, _ = gpt2_cells(np.random.default_rng(1), 2, 50, models=True)
    value, lo, hi = resample.over_models(arrays)["gain"]
    assert np.isfinite(value) and np.isnan(lo) and np.isnan(hi)
    arrays, _ = gpt2_cells(np.random.default_rng(1), 3, 50, models=False)
    pooled = np.concatenate(arrays["gain"])
    value, lo, hi = resample.over_prompts(arrays)["gain"]
    assert value == pytest.approx(pooled.mean()) and lo < value < hi
    half = 1.6448536269514722 * pooled.std(ddof=1) / np.sqrt(150)
    assert hi - lo == pytest.approx(2 * half, rel=0.01)  # t with 149 degrees of freedom ~ normal
