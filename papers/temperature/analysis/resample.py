"""Intervals of the temperature scans' verdicts (papers/temperature/analysis/scans.py), over the units the
scans log in ``units.parquet`` (papers.temperature.jobs.JobResult.units), each method for a scan's
structure, its coverage measured by simulating that structure (tests/scan_coverage_study.py, checked by
tests/test_scan_coverage.py; the table is in docs/temperature.md):

- ``crossed``: the LLM scan, one model. Every Monte Carlo run answers every test question, so the scores
  form a (run, question) grid per x; a resample draws runs and questions with replacement, independently
  (a two-way bootstrap). A run's noisy labels are drawn afresh for every question, so a run shares nothing
  across questions and the run factor adds width: simulated coverage of a nominal 90% is 90-96% (2 or 12
  runs, 24 or 87 questions, 1 or 6 x). Two runs that agree still leave the questions to resample: the
  interval no longer collapses to a point. It covers the questions' and the labels' sampling for this model.
- ``over_prompts``: the GPT-2 scan of one model (a checkpoint, another sweep's run) on several prompt seeds
  (its cells): the prompts pool, Student t over them (simulated 88-92% at 3, 5 and 10 prompt seeds). It
  covers the test prompts' sampling for that model, not retraining. (The bootstrap over cells then prompts
  used before ran wide here, 94-98%: it counted the prompts' noise twice.)
- ``over_models``: the GPT-2 scan whose cells each trained their own model: Student t over the cells'
  means (simulated 88-91% at 3, 5 and 10 models; the bootstrap over cells then prompts used before held
  72% at 3, 79-81% at 5 and 84-86% at 10, as tests/coverage_study.py found for the verdicts), none with
  fewer than 3. It covers retraining and the prompts.

Each takes several named arrays of the same shape (tau = 1, the best tau, their difference) and treats
them alike (the same draws for the bootstrap), so a difference is paired. The value is the mean over x
(LLM) or over cells (GPT-2) of the mean over the units: the curves' value. The bootstrap's interval is the
percentile interval at ``level`` from a fixed ``seed``: the same store gives the same intervals.
"""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import numpy as np

from scaling.judge.verdicts import t_interval

Triple = tuple[float, float, float]  # value (every unit once), interval lo, hi


def _percentiles(draws: np.ndarray, level: float) -> tuple[float, float]:
    tail = (1 - level) / 2
    finite = draws[np.isfinite(draws)]
    if not len(finite):
        return float("nan"), float("nan")
    lo, hi = np.quantile(finite, [tail, 1 - tail])
    return float(lo), float(hi)


def _counts(rng: np.random.Generator, size: int, resamples: int) -> np.ndarray:
    """(resamples, size): how often each unit is drawn in each resample (draws with replacement)."""
    return rng.multinomial(size, np.full(size, 1.0 / size), size=resamples).astype(float)


def crossed(
    values: Mapping[str, np.ndarray], resamples: int, seed: int = 0, level: float = 0.9
) -> dict[str, Triple]:
    """Name -> (mean, lo, hi) of arrays (X, R, Q): x, run, question; NaN where a (run, question) was not
    scored at that x. The mean is over x of the mean over the (resampled) runs and questions."""
    shapes = {a.shape for a in values.values()}
    if len(shapes) != 1 or len(next(iter(shapes))) != 3:
        raise ValueError(f"crossed needs arrays of one shape (x, run, question), got {sorted(shapes)}")
    _, runs, questions = shapes.pop()
    rng = np.random.default_rng(seed)
    w_run = np.vstack([np.ones(runs), _counts(rng, runs, resamples)])  # row 0: every unit once
    w_question = np.vstack([np.ones(questions), _counts(rng, questions, resamples)])
    out = {}
    for name, array in values.items():
        seen = np.isfinite(array)
        total = np.einsum("br,xrq,bq->bx", w_run, np.where(seen, array, 0.0), w_question, optimize=True)
        weight = np.einsum("br,xrq,bq->bx", w_run, seen.astype(float), w_question, optimize=True)
        with np.errstate(invalid="ignore", divide="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)  # a resample that drew no scored unit at an x
            stat = np.nanmean(np.where(weight > 0, total / weight, np.nan), axis=1)  # (1 + resamples,)
        out[name] = (float(stat[0]), *_percentiles(stat[1:], level))
    return out


def _same_cells(values: Mapping[str, Sequence[np.ndarray]]) -> None:
    lengths = {tuple(len(a) for a in arrays) for arrays in values.values()}
    if len(lengths) != 1 or not next(iter(lengths)):
        raise ValueError("the same cells, with the same number of units, are needed under every name")


def over_prompts(values: Mapping[str, Sequence[np.ndarray]], level: float = 0.9) -> dict[str, Triple]:
    """Name -> (mean, lo, hi) of per-cell unit arrays when every cell scans one and the same model (a
    checkpoint, or another sweep's run) on its own prompts: the cells' prompts are independent draws of
    the one test distribution, so they pool, and the interval is Student t over the pooled prompts. It
    covers the test prompts' sampling for that model, not what another training run would give."""
    _same_cells(values)
    out = {}
    for name, arrays in values.items():
        pooled = np.concatenate([np.asarray(a, float) for a in arrays])
        lo, hi = t_interval(pooled, level, min_seeds=2)
        out[name] = (float(pooled.mean()), float(lo), float(hi))
    return out


def over_models(
    values: Mapping[str, Sequence[np.ndarray]], level: float = 0.9, min_seeds: int = 3
) -> dict[str, Triple]:
    """Name -> (mean, lo, hi) of per-cell unit arrays when each cell trained its own model (a seed): the
    models are the independent units, each cell's mean over its prompts one value (its prompts' noise in
    it), and the interval is Student t over the cells' means (scaling.judge.verdicts.t_interval, the
    verdicts' method): it covers retraining and the prompts. Fewer than ``min_seeds`` cells: no interval
    (NaN)."""
    _same_cells(values)
    out = {}
    for name, arrays in values.items():
        means = np.array([np.mean(a) for a in arrays], float)
        lo, hi = t_interval(means, level, min_seeds)
        out[name] = (float(means.mean()), float(lo), float(hi))
    return out
