"""Baselines: batched closed forms against per-prompt, per-prefix scikit-learn fits; the cache of the
expensive baselines.

- ``least_squares`` and ``ridge`` of papers.context_scaling.baselines solve every prefix of every
prompt in one batched
  float64 solve. The reference fits scikit-learn's LinearRegression / Ridge (no intercept) once per prompt
  and prefix, as Garg et al.'s evaluation loops do. Target: >= 50x, and agreement to 1e-6 (else FAIL).
- ``lasso`` (a per-prompt library fit run over all cores, papers.context_scaling.baseline_cache): a
second evaluation
  of the same prompts is a cache hit; the line reports computing vs reading the cached predictions.
- ``xgboost`` (Garg et al.'s settings) at fig4's quick grid (n = 1, 3, 5, 10, 15, 20 of N = 20, d = 5): every
  prefix fitted against only the six an evaluation reads, on one core; the columns read must be equal
  (else FAIL).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
import warnings

import numpy as np
import torch

from papers.context_scaling.baselines import build_baselines
from papers.context_scaling.tasks import TaskConfig, fresh_prompts, make_family

from .common import Result, interleaved_medians

TARGET = 50.0
TOLERANCE = 1e-6


def sklearn_prefix_predictions(xs: np.ndarray, ys: np.ndarray, make) -> np.ndarray:
    """(B, P) predictions, column n from a fresh estimator fitted on pairs < n of each prompt."""
    out = np.zeros(ys.shape)
    for b in range(xs.shape[0]):
        for n in range(1, xs.shape[1]):
            model = make().fit(xs[b, :n], ys[b, :n])
            out[b, n] = model.predict(xs[b, n : n + 1])[0]
    return out


def closed_form(name: str, prompts_count: int, N: int, d: int, repeats: int, target: float | None) -> Result:
    from sklearn.linear_model import LinearRegression, Ridge

    noise = 0.5
    task = TaskConfig(family="linear", d=d, noise_std=noise)
    prompts = fresh_prompts(make_family(task), prompts_count, N + 1, seed=0)
    prompts.xs, prompts.ys = prompts.xs.double(), prompts.ys.double()
    ours = build_baselines((name,), task)[name]
    lam = d * noise**2
    make = (
        (lambda: LinearRegression(fit_intercept=False))
        if name == "least_squares"
        else (lambda: Ridge(alpha=lam, fit_intercept=False))
    )
    xs, ys = prompts.xs.numpy(), prompts.ys.numpy()
    box = {}
    sides = {
        "reference": lambda: box.__setitem__("ref", sklearn_prefix_predictions(xs, ys, make)),
        "ours": lambda: box.__setitem__("ours", ours(prompts).numpy()),
    }
    medians = interleaved_medians(sides, repeats, warmup=0)
    # least squares is unique only once the prefix has d pairs; below that both sides give the min-norm fit
    gap = float(np.abs(box["ours"] - box["ref"]).max())
    fits = prompts_count * N
    result = Result(
        f"{name}_batched",
        "sklearn per prompt and prefix",
        f"papers.context_scaling.baselines.{name}, one solve",
        "fits/s",
        fits / medians["reference"],
        fits / medians["ours"],
        target,
        note=f"{prompts_count} prompts x {N} prefixes, d={d}; max |ours - sklearn| = {gap:.1e}"
        f" (tolerance {TOLERANCE:g})",
        extra={"max_abs_diff": gap},
    )
    if gap > TOLERANCE:
        result.status = "FAIL"
    return result.judged()


@contextlib.contextmanager
def empty_baseline_cache():
    """The baselines' disk cache (papers.context_scaling.baseline_cache) in a new, empty folder."""
    old = os.environ.get("SCALING_BASELINE_CACHE")
    with tempfile.TemporaryDirectory() as folder:
        os.environ["SCALING_BASELINE_CACHE"] = folder
        try:
            yield
        finally:
            if old is None:
                os.environ.pop("SCALING_BASELINE_CACHE")
            else:
                os.environ["SCALING_BASELINE_CACHE"] = old


def timed(work):
    """``work()``'s value and its wall time in seconds."""
    start = time.perf_counter()
    value = work()
    return value, time.perf_counter() - start


def lasso_cache(prompts_count: int, N: int, d: int) -> Result:
    """First evaluation (computed over all cores) against the second (read from the on-disk cache)."""
    task = TaskConfig(family="sparse_linear", d=d, noise_std=0.0, sparsity=2)
    prompts = fresh_prompts(make_family(task), prompts_count, N + 1, seed=0)
    with empty_baseline_cache(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        lasso = build_baselines(("lasso(alpha=0.01)",), task)["lasso(alpha=0.01)"]
        first, computed = timed(lambda: lasso(prompts))
        second, cached = timed(lambda: lasso(prompts))
    same = bool(torch.equal(first, second))
    result = Result(
        "lasso_cache",
        "computed (all cores)",
        "second evaluation, cached",
        "evals/s",
        1 / computed,
        1 / cached,
        None,
        note=f"{prompts_count} prompts x {N} prefixes on {os.cpu_count()} cores; cached = computed: {same}",
    )
    if not same:
        result.status = "FAIL"
    return result.judged()


def xgboost_grid(prompts_count: int) -> Result:
    """Per-prefix XGBoost fits of every column against those of fig4's quick grid, one process each."""
    task = TaskConfig(family="decision_tree", d=5, depth=4)
    prompts = fresh_prompts(make_family(task), prompts_count, 21, seed=0)
    grid = [1, 3, 5, 10, 15, 20]
    with empty_baseline_cache():  # both sides compute
        xgboost = build_baselines(("xgboost(n_jobs=1)",), task)["xgboost(n_jobs=1)"]
        xgboost(prompts.slice(0, 1))  # warm: the imports and the process pool
        read, grid_columns = timed(lambda: xgboost(prompts, positions=grid))  # first: a file of every
        every, all_columns = timed(lambda: xgboost(prompts))  # column would serve the grid's request
    same = bool(torch.equal(every[:, grid], read[:, grid])) and xgboost.misses == 3
    result = Result(
        "xgboost_grid",
        "every prefix fitted (20 per prompt)",
        "the evaluated prefixes only (6 per prompt)",
        "prompts/s",
        prompts_count / all_columns,
        prompts_count / grid_columns,
        None,
        note=f"{prompts_count} prompts, d=5, N=20, Garg et al.'s XGBoost, one core; equal where read: {same}",
    )
    if not same:
        result.status = "FAIL"
    return result.judged()


def run(size: str = "full") -> list[Result]:
    """The rows at ``size`` (full: judged against the target; quick; tiny: the code path only)."""
    prompts, N, d, repeats = {"full": (64, 40, 8, 3), "quick": (16, 40, 8, 1), "tiny": (2, 5, 2, 1)}[size]
    target = TARGET if size == "full" else None  # the target is for the full size
    lasso = {"full": (32, 20), "quick": (8, 10), "tiny": (2, 4)}[size]
    return [
        closed_form("least_squares", prompts, N, d, repeats, target),
        closed_form("ridge", prompts, N, d, repeats, target),
        lasso_cache(*lasso, d),
        xgboost_grid({"full": 32, "quick": 8, "tiny": 2}[size]),
    ]
