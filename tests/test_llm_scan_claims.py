"""Fig. 3's shape claims on an LLM scan (papers/temperature/analysis/scan_claims.py) say "not reproduced" only
where the per-question answers resolve it: a model that answers nothing right (the tiny random LLaMA) gives a
flat curve, which decides nothing. The scans' tables are built here from chosen answers."""

from types import SimpleNamespace

import pandas as pd

from analysis.claims import NOT_REPRODUCED, REPRODUCED
from papers.temperature.analysis.scan_claims import fig3a_non_monotone, fig3b_best_tau_rises
from scaling.judge.verdicts import INCONCLUSIVE

QUESTIONS, RUNS, TAUS = 24, 2, (0.5, 1.0, 2.0)


def scan(panel: str, correct: dict) -> SimpleNamespace:
    """A scan result over ``panel``: ``correct[(tau, x)]`` the share of questions answered right (the first
    questions, in every run); one cell per x."""
    xs = sorted({x for _, x in correct})
    units, verdicts = {}, []
    for x in xs:
        rows = [
            (tau, x, run, q, float(q < round(correct[(tau, x)] * QUESTIONS)))
            for tau in TAUS
            for run in range(RUNS)
            for q in range(QUESTIONS)
        ]
        units[f"r{x}"] = pd.DataFrame(rows, columns=["tau", "x", "run", "question", "correct"])
        em = {tau: correct[(tau, x)] for tau in TAUS}
        verdicts.append({"figure": "3", "panel": panel, "metric": "exact match", "x": x, "at_tau1": em[1.0],
                         "best_tau": max(TAUS, key=lambda t: em[t])})  # fmt: skip
    table = pd.DataFrame({"panel": panel, "run_id": [f"r{x}" for x in xs], "seed": 0})
    return SimpleNamespace(table=table, verdicts=pd.DataFrame(verdicts), units=units)


def by_demos(at: dict) -> dict:
    return {(tau, x): v for x, v in at.items() for tau in TAUS}


def test_a_flat_exact_match_is_inconclusive_not_monotone():
    outcome = fig3a_non_monotone(scan("demos", by_demos({1: 0.0, 2: 0.0, 4: 0.0})))
    assert outcome.status == INCONCLUSIVE and "not resolved" in outcome.evidence


def test_an_end_resolved_above_the_inner_numbers_is_not_reproduced_and_an_inner_peak_is_reproduced():
    falling = fig3a_non_monotone(scan("demos", by_demos({1: 0.9, 2: 0.4, 4: 0.1})))
    assert falling.status == NOT_REPRODUCED and "highest at an end (1)" in falling.evidence
    peaked = fig3a_non_monotone(scan("demos", by_demos({1: 0.2, 2: 0.9, 4: 0.3})))
    assert peaked.status == REPRODUCED


def test_a_best_tau_tied_everywhere_is_inconclusive_and_one_resolved_at_the_largest_ratio_is_not_rising():
    zeros = {(tau, x): 0.0 for tau in TAUS for x in (0.0, 0.6)}
    assert fig3b_best_tau_rises(scan("noisy_ratio", zeros)).status == INCONCLUSIVE
    low_tau_wins = {(tau, x): v for x in (0.0, 0.6) for tau, v in zip(TAUS, (0.8, 0.4, 0.1), strict=True)}
    outcome = fig3b_best_tau_rises(scan("noisy_ratio", low_tau_wins))
    assert outcome.status == NOT_REPRODUCED and "there tau = 0.5 above the higher taus" in outcome.evidence
    rising = {**low_tau_wins, (1.0, 0.6): 0.9}
    assert fig3b_best_tau_rises(scan("noisy_ratio", rising)).status == REPRODUCED
