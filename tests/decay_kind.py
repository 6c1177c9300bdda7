"""A test-only experiment kind, ``decay``, a plug-in a sweep names as ``job: decay_kind:DECAY``
(tests/test_analysis_plugin.py): a cell's "curve" is err(n) = scale / n for n = 1..N, no training. Its
analysis plug-in is tests/decay_analysis.py, named by ``analysis`` below."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd

from scaling.kinds import Kind


@dataclass(frozen=True)
class DecayConfig:
    """The cell's ``decay`` group of settings."""

    scale: float = 1.0  # err(n) = scale / n


def label(cell) -> str:
    return f"decay scale={cell.decay.scale:g} N={cell.N} seed={cell.seed}"


def run(cell, trial) -> dict:
    """The cell's curve, logged through the trial's MLflow log (scaling.tracking.cell_log.CellLog)."""
    n = np.arange(1, cell.N + 1)
    err = cell.decay.scale / n
    curves = pd.DataFrame(
        {"predictor": "decay", "n": n, "err": err, "err_lo": 0.9 * err, "err_hi": 1.1 * err, "prompts": 1}
    )
    trial.log.finish(cell, curves, None)
    return {"progress": 1.0, "finished": 1}


DECAY = Kind(
    name="decay",
    run=run,
    label=label,
    analysis="decay_analysis:DECAY_ANALYSIS",
    settings=DecayConfig,
    group="decay",
    reads=("decay",),
    version="1",
)
