"""What every paper's claims share: the ``Claim`` and its ``Outcome``, the statuses, the band of
"comparable", and ``evaluate`` / ``tally`` over a paper's list of claims (each paper's claims: ``claims.py``
of its folder of analysis/papers/; the report: analysis/paper.py). A figure whose experiment is not in the
store gives "not run" for each of its claims, but a closed form's claim (``Claim.closed_form``), which needs
no runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import pandas as pd

from scaling.judge.verdicts import INCONCLUSIVE

REPRODUCED, NOT_REPRODUCED, NOT_RUN = "reproduced", "not reproduced", "not run"
COMPARABLE = 1.5  # "comparable": the larger error at most this factor above the smaller one


@dataclass(frozen=True)
class Outcome:
    status: str  # reproduced / not reproduced / inconclusive / not run
    evidence: str  # the verdict or comparison with its numbers


@dataclass(frozen=True)
class Claim:
    figure: str  # the paper's part whose sweep it reads: fig1 .. fig8 (seed 001), temp-fig1, stat-gd, ...
    panel: str  # "1A", "7B", ...
    text: str  # what the paper states
    check: Callable[[object], Outcome]  # AnalysisResult -> Outcome
    models: tuple[str, ...] = ()  # the models it reads, which its size names (analysis.sizes); () = all
    closed_form: bool = False  # checked without runs (its check gets the figure's result or None)


def within(ratio: float) -> bool:
    """Two errors whose ratio is ``ratio`` are comparable: within a factor COMPARABLE either way (seed 003's
    claims, papers/statisticians/analysis/claims.py; seed 001's comparisons carry an interval:
    papers/context_scaling/analysis/claims.py, ``ratio_claim``)."""
    return 1 / COMPARABLE <= ratio <= COMPARABLE


def evaluate(
    results: dict[str, object], reasons: dict[str, str] | None = None, *, claims: list[Claim]
) -> pd.DataFrame:
    """One row per claim of ``claims`` (a paper's list): figure, panel, claim, status, evidence
    (``results``: figure -> AnalysisResult, a figure absent when it was not analysed, for the reason
    ``reasons`` gives)."""
    rows = []
    for claim in claims:
        result = results.get(claim.figure)
        why = (reasons or {}).get(claim.figure, "its experiment is not in the store")
        outcome = Outcome(NOT_RUN, why) if result is None and not claim.closed_form else claim.check(result)
        rows.append(
            {
                "figure": claim.figure,
                "panel": claim.panel,
                "claim": claim.text,
                "status": outcome.status,
                "evidence": outcome.evidence,
                "experiment": getattr(result, "experiment", ""),
            }
        )
    return pd.DataFrame(rows)


def tally(claims: pd.DataFrame) -> str:
    counts = claims["status"].value_counts()
    order = [REPRODUCED, NOT_REPRODUCED, INCONCLUSIVE, NOT_RUN]
    return ", ".join(f"{int(counts.get(s, 0))} {s}" for s in order if counts.get(s, 0)) or "no claims"
