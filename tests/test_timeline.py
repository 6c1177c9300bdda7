"""A trial's seconds by phase (scaling.trial.timeline): how they add up, and that each cell's run carries them
(``trial/seconds/<phase>``) after a real trial, a cell alone and a pack, into a real MLflow store."""

import time

import pytest
from mlflow import MlflowClient

from scaling.trial.run import run_cell, run_pack
from scaling.trial.timeline import PREFIX, Timeline
from tests.test_graph_path import cell, trial_spec

PHASES = ("setup", "train", "checkpoint", "evaluate")


class Clock:
    def __init__(self):
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def test_phases_add_up_and_the_first_training_block_ends_the_setup():
    clock = Clock()
    timeline = Timeline(clock)
    clock.now += 7  # imports, leases, runs opened, data built
    for _ in range(2):
        with timeline.steps():
            clock.now += 3
        with timeline.phase("checkpoint"):
            clock.now += 0.5
    with timeline.phase("evaluate"):
        clock.now += 2
    assert timeline.metrics() == {
        PREFIX + "setup": 7.0,
        PREFIX + "train": 6.0,
        PREFIX + "checkpoint": 1.0,
        PREFIX + "evaluate": 2.0,
    }
    assert timeline.metrics(evaluate=0.25)[PREFIX + "evaluate"] == 0.25  # one member's own evaluation
    with pytest.raises(RuntimeError), timeline.phase("evaluate"):  # a failed block still counts its time
        clock.now += 1
        raise RuntimeError
    assert timeline.seconds["evaluate"] == 3.0


@pytest.mark.parametrize("count", [1, 3], ids=["cell", "pack"])
def test_each_cell_run_carries_its_trials_seconds_by_phase(tmp_path, count):
    cells = [cell("gpt2", seed=s) for s in range(count)]
    spec = trial_spec(cells, tmp_path, "timeline")
    timeline = Timeline()
    time.sleep(0.2)  # the trial's time before it is handed its spec: setup too
    assert (run_cell if count == 1 else run_pack)(spec, timeline=timeline)["finished"] == 1
    wall = time.monotonic() - timeline.began
    client = MlflowClient(spec.tracking_uri)
    runs = client.search_runs([spec.experiment_id], "tags.kind = 'cell'")
    assert len(runs) == count
    seconds = [{p: run.data.metrics[PREFIX + p] for p in PHASES} for run in runs]
    for own in seconds:
        assert own["setup"] >= 0.2 and own["train"] > 0 and own["checkpoint"] > 0 and own["evaluate"] > 0
        assert sum(own.values()) <= wall
    shared = {tuple(own[p] for p in ("setup", "train", "checkpoint")) for own in seconds}
    assert len(shared) == 1  # a pack's members share its setup, steps and checkpoints


# A real sweep through the CLI, its sweep run's sweep/seconds and its cells' trial/seconds:
# tests/test_no_torch.py::test_a_sweeps_driver_never_imports_torch (one sweep for both checks).
