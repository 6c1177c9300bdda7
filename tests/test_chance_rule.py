"""The "at chance" rule with an interval (scaling/judge/verdicts.py): a model is at chance where the 90%
interval of its final err/zero lies at or above 1 - margin, resolved below chance where it lies below, and
inconclusive where it straddles. Its error rates, simulated: at the boundary (a true end of 0.95) each wrong
side is taken about 5% of the time, and less away from it; the point rule before (the end's estimate at
0.95 or more) called a model just below the line "at chance" about half the time."""

import numpy as np
import pandas as pd
import pytest

from scaling.judge.verdicts import AT_CHANCE, INCONCLUSIVE, Rule, judge_points, log_t_interval

DRAWS = 20_000
CHANCE = 1 - Rule.chance_margin


def ends(rng: np.random.Generator, truth: float, seeds: int, sd: float = 0.08) -> np.ndarray:
    """(DRAWS, seeds) final err/zero of each seed: log-normal about the true geometric mean ``truth``."""
    return truth * np.exp(sd * rng.normal(size=(DRAWS, seeds)))


def rates(values: np.ndarray) -> tuple[float, float, float]:
    """(at chance, resolved below chance, straddling) shares of the draws under the interval rule."""
    _, lo, hi = log_t_interval(values, Rule.level)
    at, below = lo >= CHANCE, hi < CHANCE
    return float(at.mean()), float(below.mean()), float(1 - at.mean() - below.mean())


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_at_the_boundary_each_wrong_side_is_taken_about_5_percent_of_the_time(seeds):
    at, below, _ = rates(ends(np.random.default_rng(seeds), CHANCE, seeds))
    assert 0.04 <= at <= 0.06 and 0.04 <= below <= 0.06


@pytest.mark.parametrize("seeds", [3, 5, 10])
def test_away_from_the_boundary_the_wrong_side_is_rarer_and_the_right_one_grows(seeds):
    rng = np.random.default_rng(100 + seeds)
    for truth in (0.9, 0.85, 0.7):  # a model that learned something: "at chance" is the error
        at, below, _ = rates(ends(rng, truth, seeds))
        assert at < 0.05
    for truth in (1.0, 1.05, 1.2):  # predicting zero does as well or better: "below chance" is the error
        at, below, _ = rates(ends(rng, truth, seeds))
        assert below < 0.05
    low, high = rates(ends(rng, 0.8, seeds))[1], rates(ends(rng, 1.1, seeds))[0]
    assert low > 0.5 and high > 0.5  # clear cases are settled more often than not, even at 3 seeds


def test_the_point_rule_before_called_a_model_just_below_the_line_at_chance_half_the_time():
    values = ends(np.random.default_rng(7), 0.94, 3)
    point = np.exp(np.log(values).mean(axis=1)) >= CHANCE
    assert 0.3 < point.mean() < 0.6
    assert rates(values)[0] < 0.05


def group(end_by_seed: list[float], start: float = 0.6) -> pd.DataFrame:
    """One group's points: err/zero ``start`` at n = 5 and each seed's end at n = 40."""
    rows = []
    for seed, end in enumerate(end_by_seed):
        rows += [dict(seed=seed, n=5, err=start), dict(seed=seed, n=40, err=end)]
    return pd.DataFrame(rows)


def test_judge_points_reads_the_ends_interval():
    above = judge_points(group([0.99, 1.0, 1.01]), "context")
    assert above["verdict"] == AT_CHANCE and "resolved at or above 0.95" in above["note"]
    # geometric mean 0.955: "at chance" by the point rule before
    straddles = judge_points(group([0.88, 0.97, 1.02]), "context")
    assert straddles["verdict"] == INCONCLUSIVE
    assert "not resolved on either side of chance (0.95)" in straddles["note"]
    below = judge_points(group([0.30, 0.31, 0.29]), "context")
    assert below["verdict"] == "context-scales"
