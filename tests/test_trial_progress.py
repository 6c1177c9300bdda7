"""A trial tells the driver its step while it trains, not only at checkpoints: a long cell may checkpoint
every several minutes, and the driver's heartbeat line (at most once a minute) shows the step the trial
last reported. Reports between checkpoints come at most every ``PROGRESS_EVERY_S`` seconds; each
checkpoint and the end are reported at once."""

from __future__ import annotations

import pytest
from conftest import tiny_cell_dict

from scaling.cells import Cell
from scaling.tracking.tracker import Tracker
from scaling.trial import run as trial
from scaling.trial.run import Throttled, run_cell, run_pack
from scaling.trial.spec import TrialMember, TrialSpec


def spec_of(cells, tmp_path, name):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return TrialSpec(
        tuple(TrialMember(c.to_dict(), c.key, c.name) for c in cells),
        cells[0].key if len(cells) == 1 else "pack",
        name,
        {"cpu": 1},
        uri,
        Tracker(uri).experiment_id(name, create=True),
        name,
        str(tmp_path / "storage"),
    )


def long_segments(**overrides) -> Cell:
    """40 steps, a loss logged every 5, one checkpoint at the end."""
    train = {
        "steps": 40,
        "batch_size": 8,
        "lr": 1e-3,
        "checkpoint_every": 40,
        "log_every": 5,
        "device": "cpu",
    }
    return Cell.from_dict(tiny_cell_dict(train=train, **overrides))


def test_a_cell_reports_its_step_between_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(trial, "PROGRESS_EVERY_S", 0.0)
    reports: list[dict] = []
    final = run_cell(spec_of([long_segments()], tmp_path, "steps"), report=reports.append)
    assert final["finished"] == 1
    steps = [r["step"] for r in reports if "step" in r and not r.get("finished")]
    assert steps[:8] == [5, 10, 15, 20, 25, 30, 35, 40]  # every logged loss, then the checkpoint's
    assert reports[-1]["finished"] == 1


def test_a_pack_reports_its_members_step_between_checkpoints(tmp_path, monkeypatch):
    monkeypatch.setattr(trial, "PROGRESS_EVERY_S", 0.0)
    cells = [long_segments(T=8), long_segments(T=16)]
    reports: list[dict] = []
    assert run_pack(spec_of(cells, tmp_path, "pack-steps"), report=reports.append)["finished"] == 1
    moving = [r for r in reports if not r.get("finished")]  # one per member and logged loss, then the end's
    assert sorted({r["step"] for r in moving}) == [5, 10, 15, 20, 25, 30, 35, 40]
    assert [r["step"] for r in moving] == sorted(r["step"] for r in moving)
    assert moving[0]["progress"] == pytest.approx(5 / 40) and moving[-1]["progress"] == 1.0


def test_reports_between_checkpoints_come_at_most_every_few_seconds():
    readings = iter([0.5, 1.0, 9.9, 11.0, 11.5, 15.0, 21.6])  # one per call
    sent: list[dict] = []
    throttled = Throttled(sent.append, every=10.0, clock=lambda: next(readings))
    throttled({"step": 0})  # the first: sent, so the progress view knows the trial trains
    throttled({"step": 1})  # 0.5 s after it: held back
    throttled({"step": 2})  # 9.4 s: held back
    throttled({"step": 3})  # 10.5 s: sent
    throttled({"step": 4}, force=True)  # a checkpoint: sent at once, 0.5 s later
    throttled({"step": 5})  # 3.5 s after it: held back
    throttled({"step": 6})  # 10.1 s after it: sent
    assert [s["step"] for s in sent] == [0, 3, 4, 6]
    assert trial.PROGRESS_EVERY_S == 10.0 and Throttled(None).every == 10.0
