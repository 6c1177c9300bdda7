"""The names seed 004's settings choose from, without torch: the test-time shifts of the theory jobs
(``SHIFT_NAMES``, papers.temperature.theory.SHIFTS), the covariance shift's default scale, the sources
of the pretrained parameters (``PARAMS_SOURCES``, papers.temperature.curves), and ``shift_label``,
an eval.shift in words.

The planner checks a temperature cell's settings and names its runs with them, and analysis reads the default
scale, without importing torch (tests/test_temperature.py checks the names against the registries).
"""

from __future__ import annotations

from dataclasses import fields

SHIFT_NAMES = ("none", "input_covariance", "task", "noise", "input_mean")
COVARIANCE_SCALE = 2.0  # Sigma_x^test = scale * Sigma_x^train: Fig. 1b uses 2
PARAMS_SOURCES = ("sampled", "population")


def shift_label(shift) -> str:
    """The fields of an eval.shift (papers.context_scaling.configs.ShiftConfig) that differ from no
    shift, e.g. 'x_scale=1.73'."""
    moved = [
        f"{f.name}={getattr(shift, f.name):g}" for f in fields(shift) if getattr(shift, f.name) != f.default
    ]
    return ",".join(moved) or "none"
