"""The Ray Tune function trainable: one trial = one cell, or a pack of cells (scaling.trial.run runs them).

The driver hands it to Tune by reference, so this module imports neither torch nor the trial's code: the
driver's process never loads torch (about 2 s of a sweep's start on this project's CPU, more with a CUDA
build), and the trial's process imports scaling.trial.run when the trial starts, its seconds counted in the
trial's setup (scaling.trial.timeline).
"""

from __future__ import annotations

from typing import Any

from scaling.trial.spec import TrialSpec, spec_in
from scaling.trial.storage import OUTAGE_NOTICE, outages_heard
from scaling.trial.timeline import Timeline


def tune_trainable(config: dict[str, Any]) -> None:
    """Run the trial of ``config`` (its TrialSpec) and report to Tune, naming any storage outage it rode
    through in its next report."""
    timeline = Timeline()  # the trial's seconds from here
    # defers Ray Tune (~2 s): run_cell and run_pack also run without Ray (tests, benchmarks)
    from ray import tune

    from scaling.trial.run import (  # defers torch to the trial's process: the driver never loads it
        run_cell,
        run_pack,
    )

    spec = TrialSpec.from_dict(spec_in(config))
    heard: list[str] = []  # an outage of the storage this trial rode through: its next report names it

    def report(values: dict) -> None:
        if heard:
            values = {**values, OUTAGE_NOTICE: heard[0]}
            heard.clear()
        tune.report(values)

    with outages_heard(heard.append):
        (run_pack if spec.is_pack else run_cell)(spec, report=report, timeline=timeline)
