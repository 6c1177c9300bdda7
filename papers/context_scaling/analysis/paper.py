"""Seed 001 in the reproduction report (analysis.paper; registered in pyproject.toml's
``icl_scaling.papers``): its parts, one sweep file each, what the paper states of their sizes, and how its
claims are judged."""

from __future__ import annotations

from analysis import claims as claiming
from analysis.paper import Paper, Part
from analysis.plugin import Request
from analysis.verdicts import rule_text
from papers.context_scaling.analysis.claims import CLAIMS


def how(request: Request) -> str:
    """How seed 001's claims are judged, in words."""
    return (
        "A scaling claim reads the verdict of the model at the paper's fixed value (context scaling at the "
        "sweep's largest T, task scaling at the n nearest the paper's N = 10). "
        f"{rule_text(request.rule())} A paper claim that a model scales is 'not reproduced' "
        "when the model is at chance; a claim that it does not scale is 'inconclusive' then (a model that "
        "learned nothing shows neither), and either claim is 'inconclusive' when the model scales weakly "
        "(it holds only up to the margin). A comparison reads the two errors at the largest context length "
        "seed by seed, per task and per noise level, never pooled: the geometric mean of the per-seed ratios "
        "with its "
        f"{request.rule().level:.0%} interval (the verdicts' method). 'Comparable' means the interval lies "
        f"within a factor of {claiming.COMPARABLE:g} either way, 'better' that it lies below 1; an interval "
        "that straddles the bound, or fewer than 3 seeds, is 'inconclusive'."
    )


# seed 001 states no training budget (its sweep files take Garg et al.'s), and T only where said here
SILENT_STEPS = {"steps": "not stated; Garg et al. 500000"}
UNSTATED_T = {"T": "not stated; Garg et al. inf"}
SEED001_STATED = {
    1: {"d": "not stated in Fig. 1; App. C 8", "T": "1e5, 1e6 in B; A's values not stated"},
    2: UNSTATED_T,
    3: UNSTATED_T,
    4: {},
    5: UNSTATED_T,
    6: {"T": "not stated", "N": "not stated"},
    7: {"T": "not stated"},
    8: {"T": "1e5, 1e6 in B; A's values not stated"},
}
PAPER = Paper(
    "001",
    "Abedsoltan et al., Context-Scaling versus Task-Scaling in In-Context Learning",
    (
        *(
            Part(
                f"fig{k}",
                f"sweeps/fig{k}.yaml",
                f"Figure {k}",
                paper={**SILENT_STEPS, **stated},
                figure=f"fig{k}",
            )
            for k, stated in SEED001_STATED.items()
        ),
        Part(
            "fig4-lengths",
            "sweeps/fig4_lengths.yaml",
            "App. A: context lengths not trained on (Fig. 4's ReLU task)",
            paper=SILENT_STEPS,
        ),
    ),
    CLAIMS,
    how,
)
