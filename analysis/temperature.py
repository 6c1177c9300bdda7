"""Analysis of seed 004's temperature kinds (scaling.kinds.temperature): their plug-in.

Not built yet: issue 17 draws the paper's figures and the verdict table from these cells' curves.
"""

from __future__ import annotations

from .run import AnalysisError


def analyse(
    sweep, experiment=None, profile="", tracking_uri=None, out=None, bootstrap=1000, log=True, layout=None
):
    raise AnalysisError(
        "the analysis of seed 004's temperature sweeps is not built yet (issue 17); their"
        " curves are in each cell run's curves.parquet"
    )
