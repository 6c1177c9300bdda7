"""Bootstrap intervals of the temperature scans' verdicts (analysis/papers/temperature/scans.py), over the
units the scans log in ``units.parquet`` (scaling.papers.temperature.jobs.JobResult.units).

- ``crossed``: the LLM scan. Every Monte Carlo run answers every test question, so the scores form a
  (run, question) grid per x; a resample draws runs and questions with replacement, independently (a
  two-way bootstrap: it counts the run-by-question interaction twice, so it errs wide, not narrow). Two runs
  that agree still leave the questions to resample: the interval no longer collapses to a point.
- ``nested``: the GPT-2 scan. Each cell (a seed: its own model when trained in the job, and its own prompts)
  holds its prompts' errors; a resample draws cells with replacement, then prompts within each drawn cell.

Both take several named arrays of the same shape (tau = 1, the best tau, their difference) and resample
them with the same draws, so a difference is paired. The statistic is the mean over x (LLM) or over cells
(GPT-2) of the mean over the resampled units, which with every unit once is the curves' value; the
interval is the percentile interval at ``level``. A fixed ``seed`` makes the intervals the same on every
run of the analysis.
"""

from __future__ import annotations

import warnings
from typing import Mapping, Sequence

import numpy as np

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


def nested(
    values: Mapping[str, Sequence[np.ndarray]], resamples: int, seed: int = 0, level: float = 0.9
) -> dict[str, Triple]:
    """Name -> (mean, lo, hi) of per-cell unit arrays (one 1-d array per cell, the same cells and lengths
    under every name). The mean is over cells of the mean over each cell's (resampled) units."""
    lengths = {tuple(len(a) for a in arrays) for arrays in values.values()}
    if len(lengths) != 1 or not next(iter(lengths)):
        raise ValueError("nested needs the same cells, with the same number of units, under every name")
    sizes = lengths.pop()
    cells = len(sizes)
    rng = np.random.default_rng(seed)
    chosen = rng.integers(cells, size=(resamples, cells))  # cells drawn with replacement
    totals = {name: np.zeros(resamples) for name in values}
    for slot in range(cells):
        for cell, size in enumerate(sizes):
            rows = np.flatnonzero(chosen[:, slot] == cell)
            if not len(rows):
                continue
            weights = _counts(rng, size, len(rows)) / size  # (rows, units): a resample's mean weights
            for name, arrays in values.items():
                totals[name][rows] += weights @ np.asarray(arrays[cell], dtype=float)
    out = {}
    for name, arrays in values.items():
        value = float(np.mean([np.mean(a) for a in arrays]))
        out[name] = (value, *_percentiles(totals[name] / cells, level))
    return out
