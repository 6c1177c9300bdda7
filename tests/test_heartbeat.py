"""A sweep whose output is not a terminal (nohup, Ray Jobs, CI, a file) prints a heartbeat while cells run:
each running cell's step and the time left, at most once per ``run.heartbeat`` seconds (default 60).

The driver runs as a subprocess writing to a file, as under ``nohup``, with a short interval set on the
command line; the test reads the lines it wrote.
"""

from __future__ import annotations

import re

import pytest
import yaml
from drivers import start_driver

from scaling.config import ConfigError
from scaling.planning.plan import RunConfig, SweepError, plan_document

BEAT = re.compile(  # a heartbeat while the cell trains (its step), or evaluates
    r"\[beat\] running mlp T=4 N=4 seed=0 (?:step (\d+)/600|evaluating) \| 0/1 cells done \(0%\), 1 running,"
    r" 0 pending, 0 failed \| \S+ elapsed, ~\S+ left"
)
WAIT = re.compile(  # a heartbeat before the trial starts (Ray starting a worker), or after it ended
    r"\[beat\] no trial running \| (?:0/1 cells done \(0%\), 0 running, 1 pending|1/1 cells done \(100%\),"
    r" 0 running, 0 pending), 0 failed \| \S+ elapsed, ~\S+ left"
)


def test_the_heartbeat_interval_is_a_run_setting_of_a_minute_by_default(tiny_sweep):
    assert RunConfig().heartbeat == 60.0 and plan_document(tiny_sweep).run.heartbeat == 60.0
    assert plan_document({**tiny_sweep, "run": {"heartbeat": 5}}).run.heartbeat == 5.0
    with pytest.raises(SweepError, match=r"run.heartbeat: must be > 0 seconds, got 0"):
        plan_document({**tiny_sweep, "run": {"heartbeat": 0}})
    with pytest.raises(ConfigError):
        RunConfig(heartbeat=-1.0)


@pytest.mark.e2e
def test_a_sweep_writing_to_a_file_prints_a_heartbeat_with_the_cells_step(tmp_path, tiny_sweep):
    tiny_sweep["name"] = "beat"
    tiny_sweep["grid"] = {"model": ["mlp"], "T": [4], "seed": [0]}
    tiny_sweep["defaults"]["train"].update(steps=600, checkpoint_every=50)
    path = tmp_path / "beat.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    with open(tmp_path / "driver.log", "w") as log:
        driver = start_driver(path, uri, storage, log, "--num-cpus", "2", "--set", "run.heartbeat=0.5")
        assert driver.wait(timeout=300) == 0, (tmp_path / "driver.log").read_text()
    lines = (tmp_path / "driver.log").read_text().splitlines()
    beats = [line for line in lines if line.startswith(("[beat] running ", "[beat] no trial running"))]
    assert all(BEAT.fullmatch(line) or WAIT.fullmatch(line) for line in beats), "\n".join(lines)
    steps = [int(BEAT.fullmatch(line).group(1)) for line in beats if "step" in line]
    assert steps and steps == sorted(steps), "\n".join(lines)  # the cell's step as it trains
    took = re.search(r"cells complete; took (?:(\d+)m)?(\d+)s\.", "\n".join(lines))
    assert took, "\n".join(lines)
    seconds = 60 * int(took.group(1) or 0) + int(took.group(2))
    assert len(beats) <= 2 * (seconds + 1)  # at most one per 0.5 s
    # the one line per change is as before: one start, one done, in order around the heartbeats
    started = [i for i, line in enumerate(lines) if line.startswith("[beat] started mlp T=4 N=4 seed=0 |")]
    done = [i for i, line in enumerate(lines) if line.startswith("[beat] done mlp T=4 N=4 seed=0 |")]
    training = [i for i, line in enumerate(lines) if BEAT.fullmatch(line)]
    assert len(started) == 1 and len(done) == 1 and started[0] < training[0] < training[-1] < done[0]
