"""A fourth analysis plug-in, written as a contributor adds one (analysis/plugin.py): the analysis of the
test-only ``decay`` kind (tests/decay_kind.py). One verdict (does the error fall with n in every cell?) and
one figure (error against n, a line per cell); the pipeline does the rest."""

from __future__ import annotations

import pandas as pd

from analysis.plots import plt
from analysis.plugin import Analysis, AnalysisResult


def verdict_table(result: AnalysisResult) -> pd.DataFrame:
    falls = result.table.sort_values("n").groupby("cell_key")["err"].agg(lambda e: e.is_monotonic_decreasing)
    verdict = f"the error falls with n in {int(falls.sum())} of {len(falls)} cells"
    return pd.DataFrame(
        [{"question": "falls with n", "cells": len(falls), "falling": int(falls.sum()), "verdict": verdict}]
    )


def decay_figures(result: AnalysisResult) -> dict:
    fig, ax = plt.subplots(figsize=(4, 3))
    for name, cell in result.table.sort_values("n").groupby("cell_key"):
        ax.plot(cell["n"], cell["err"], marker="o", label=name)
    ax.set(xlabel="context length n", ylabel="error", yscale="log")
    return {"decay": fig}


DECAY_ANALYSIS = Analysis(
    verdicts=verdict_table,
    figures=decay_figures,
    answer=lambda result: result.verdicts["verdict"].iloc[0],
)
