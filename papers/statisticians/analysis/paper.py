"""Seed 003 in the reproduction report (analysis.paper; registered in pyproject.toml's
``icl_scaling.papers``): its parts, one sweep file each."""

from __future__ import annotations

from analysis.paper import Paper, Part
from papers.statisticians.analysis.claims import CLAIMS, HOW

PAPER = Paper(
    "003",
    "a report on Bai et al., Transformers as Statisticians",
    (
        Part("stat-gd", "sweeps/stat_gd.yaml", "Sec. 3: in-context gradient descent", ("d", "N")),
        Part(
            "stat-selection",
            "sweeps/stat_selection.yaml",
            "Sec. 4: in-context algorithm selection",
            ("d", "N"),  # the claims read the constructions, not the GPT-2 trained beside them
        ),
    ),
    CLAIMS,
    lambda request: HOW,
)
