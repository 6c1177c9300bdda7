"""The coverage study behind the temperature scans' verdict intervals
(papers/temperature/analysis/resample.py): how often a nominal 90% interval holds the truth, simulated in each
scan's real structure. tests/test_scan_coverage.py checks the methods in use on these draws; ``python
tests/scan_coverage_study.py`` prints the whole table (docs/temperature.md shows it).

Methods: those of papers/temperature/analysis/resample.py (crossed, over_prompts, over_models) and the GPT-2
scans' bootstrap before (``nested``: cells with replacement, then prompts within each drawn cell).

- GPT-2 scan (Fig. 6), one model: every cell scans the same model (a checkpoint, another sweep's run) on its
  own prompts (a prompt seed). A prompt's error, averaged over n, is the model's error scale times a
  Gamma variable (skewed: squared errors); the best tau's shares most of it (paired). The truth is the
  model's expected error over the test distribution, at tau = 1 and the gain of the best tau.
- GPT-2 scan, trained models: each cell trains its own model (``train_model``), whose error scale is
  log-normal over seeds (sd 0.2), its gain too; the truth is the expectation over training seeds and
  prompts.
- LLM scan (Fig. 3): one model answers the same Q test questions at every x (demonstrations or noisy ratio)
  in R Monte Carlo runs; the noise each run draws is drawn afresh for every question, so a run shares
  nothing across questions: a question's log-odds of being right is its own (normal), a prompt (question,
  run, x) adds its own noise, and the best tau shifts the question's log-odds (paired: one uniform draw
  decides both taus). The truth is the expected exact match over questions, runs and prompts.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Mapping, Sequence

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from papers.temperature.analysis import resample  # noqa: E402

LEVEL = 0.9
SHAPE = 2.0  # a prompt's error averaged over n: scale x Gamma(SHAPE, 1 / SHAPE) (mean 1, sd 0.71)


def gpt2_cells(rng: np.random.Generator, cells: int, prompts: int, models: bool) -> tuple[dict, dict]:
    """({"one", "best", "gain"}: per-cell arrays of per-prompt errors, {the same: truth})."""
    scale = np.full(cells, 0.5)
    ratio = np.full(cells, 0.96)
    if models:  # each cell its own trained model
        scale = 0.5 * np.exp(0.2 * rng.normal(size=cells))
        ratio = 0.96 * np.exp(0.05 * rng.normal(size=cells))
    g1 = rng.gamma(SHAPE, 1 / SHAPE, size=(cells, prompts))
    g2 = rng.gamma(SHAPE, 1 / SHAPE, size=(cells, prompts))
    one = scale[:, None] * g1
    best = (scale * ratio)[:, None] * (0.8 * g1 + 0.2 * g2)
    arrays = {"one": list(one), "best": list(best), "gain": list(one - best)}
    if models:
        one_truth = 0.5 * math.exp(0.2**2 / 2)
        best_truth = 0.5 * 0.96 * math.exp((0.2**2 + 0.05**2) / 2)
    else:
        one_truth, best_truth = 0.5, 0.48
    return arrays, {"one": one_truth, "best": best_truth, "gain": one_truth - best_truth}


LLM_TRUTH_DRAWS = 2_000_000


def llm_truth(xs: int) -> dict[str, float]:
    """Expected exact match at tau = 1 and at the best tau, averaged over the x (a large Monte Carlo)."""
    rng = np.random.default_rng(12345)
    one, best = [], []
    for x in range(xs):
        a = rng.normal(0.5, 1.5, LLM_TRUTH_DRAWS) - 0.3 * x
        d = rng.normal(0.3, 0.5, LLM_TRUTH_DRAWS)
        e = rng.normal(0.0, 1.0, LLM_TRUTH_DRAWS)
        one.append((1 / (1 + np.exp(-(a + e)))).mean())
        best.append((1 / (1 + np.exp(-(a + d + e)))).mean())
    m1, m2 = float(np.mean(one)), float(np.mean(best))
    return {"one": m1, "best": m2, "gain": m2 - m1}


def llm_units(rng: np.random.Generator, xs: int, runs: int, questions: int) -> dict[str, np.ndarray]:
    """{"one", "best", "gain"}: (x, run, question) arrays of exact match (0 or 1; gain -1, 0 or 1)."""
    a = rng.normal(0.5, 1.5, questions)
    d = rng.normal(0.3, 0.5, questions)
    shift = -0.3 * np.arange(xs)[:, None, None]
    e = rng.normal(0.0, 1.0, (xs, runs, questions))
    u = rng.uniform(size=(xs, runs, questions))
    one = (u < 1 / (1 + np.exp(-(a + shift + e)))).astype(float)
    best = (u < 1 / (1 + np.exp(-(a + d + shift + e)))).astype(float)
    return {"one": one, "best": best, "gain": best - one}


def nested(
    values: Mapping[str, Sequence[np.ndarray]], resamples: int, seed: int = 0, level: float = 0.9
) -> dict[str, tuple]:
    """The GPT-2 scans' bootstrap before (cells with replacement, then each drawn cell's prompts): name ->
    (mean, lo, hi) of per-cell unit arrays. The mean is over cells of the mean over each cell's units."""
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
            weights = (
                rng.multinomial(size, np.full(size, 1.0 / size), size=len(rows)) / size
            )  # (rows, units): a resample's mean weights
            for name, arrays in values.items():
                totals[name][rows] += weights @ np.asarray(arrays[cell], dtype=float)
    out = {}
    for name, arrays in values.items():
        value = float(np.mean([np.mean(a) for a in arrays]))
        out[name] = (value, *np.quantile(totals[name] / cells, [(1 - level) / 2, (1 + level) / 2]))
    return out


def hits(triples: dict, truth: dict) -> dict[str, bool]:
    return {name: triples[name][1] <= truth[name] <= triples[name][2] for name in truth}


def gpt2_coverage(
    rng, draws: int, cells: int, prompts: int, models: bool, method: str, resamples: int = 400
) -> dict[str, float]:
    """Coverage of "one" and "gain" by ``method``: nested (before), over_prompts, over_models."""
    counts = {"one": 0, "gain": 0}
    for _ in range(draws):
        arrays, truth = gpt2_cells(rng, cells, prompts, models)
        if method == "nested":
            triples = nested(arrays, resamples, seed=int(rng.integers(1 << 30)))
        else:
            triples = getattr(resample, method)(arrays, LEVEL)
        for name, hit in hits(triples, truth).items():
            if name in counts:
                counts[name] += hit
    return {name: c / draws for name, c in counts.items()}


def llm_coverage(
    rng, draws: int, xs: int, runs: int, questions: int, truth: dict, resamples: int = 400
) -> dict[str, float]:
    """Coverage of "one" and "gain" by the crossed bootstrap over runs and questions."""
    counts = {"one": 0, "gain": 0}
    for _ in range(draws):
        units = llm_units(rng, xs, runs, questions)
        triples = resample.crossed(units, resamples, seed=int(rng.integers(1 << 30)))
        for name, hit in hits(triples, truth).items():
            if name in counts:
                counts[name] += hit
    return {name: c / draws for name, c in counts.items()}


def table(draws: int = 2000) -> list[str]:
    rng = np.random.default_rng(0)
    out = [
        "| scan | structure | cells or (x, runs, questions) | method | tau = 1 | gain |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for models, structure, methods in (
        (False, "one model, prompt seeds", ("nested", "over_prompts")),
        (True, "a trained model per cell", ("nested", "over_models")),
    ):
        for cells in (3, 5, 10):
            for method in methods:
                got = gpt2_coverage(rng, draws, cells, 256, models, method)
                cover = f"{got['one']:.0%} | {got['gain']:.0%}"
                out.append(f"| GPT-2 | {structure} | {cells} x 256 prompts | {method} | {cover} |")
    for xs, runs, questions in ((1, 2, 24), (6, 2, 24), (6, 12, 24), (1, 12, 87), (6, 2, 87)):
        truth = llm_truth(xs)
        got = llm_coverage(rng, draws, xs, runs, questions, truth)
        where = f"({xs}, {runs}, {questions})"
        out.append(f"| LLM | one model | {where} | crossed | {got['one']:.0%} | {got['gain']:.0%} |")
    return out


if __name__ == "__main__":
    print("\n".join(table(int(sys.argv[1]) if len(sys.argv) > 1 else 2000)))
