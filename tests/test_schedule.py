"""The learning-rate schedule (TrainConfig.schedule): constant by default, or a linear warm-up and a cosine
decay, a pure function of the step, so a resumed cell ends where an uninterrupted one does."""

import math

import pytest
import torch

from papers.context_scaling.train import CellTrainer, TrainConfig
from scaling.cells import Cell
from scaling.config import ConfigError
from tests.conftest import tiny_cell_dict


def test_constant_by_default_and_keeps_keys():
    assert TrainConfig().lr_factor(0) == TrainConfig().lr_factor(10**6) == 1.0
    assert Cell.from_dict({"train": {"schedule": "constant"}}).key == Cell().key
    assert Cell.from_dict({"train": {"schedule": "cosine"}}).key != Cell().key


def test_cosine_warms_up_linearly_then_decays_to_zero():
    train = TrainConfig(steps=1000, schedule="cosine", warmup=0.1)
    assert train.lr_factor(0) == pytest.approx(1 / 100)
    assert train.lr_factor(49) == pytest.approx(0.5)
    assert train.lr_factor(100) == 1.0  # the first step after the warm-up
    assert train.lr_factor(550) == pytest.approx(0.5)  # half way through the decay
    assert 0 < train.lr_factor(999) < 1e-4
    factors = [train.lr_factor(s) for s in range(100, 1000)]
    assert all(a > b for a, b in zip(factors, factors[1:]))
    assert TrainConfig(steps=10, schedule="cosine", warmup=0).lr_factor(0) == 1.0


@pytest.mark.parametrize(
    "data, field",
    [({"schedule": "linear"}, "unknown value"), ({"schedule": "cosine", "warmup": 1.0}, "warmup")],
)
def test_invalid_schedules_say_why(data, field):
    with pytest.raises(ConfigError, match=field):
        TrainConfig(**data)


def test_a_cell_resumed_under_the_cosine_schedule_ends_as_one_never_stopped():
    cosine = {**tiny_cell_dict()["train"], "schedule": "cosine", "warmup": 0.2}
    cell = Cell.from_dict(tiny_cell_dict(train=cosine))
    whole = CellTrainer(cell)
    whole.train_until(cell.train.steps)
    first = CellTrainer(cell)
    first.train_until(7)
    resumed = CellTrainer(cell)
    resumed.load_state_dict(first.state_dict())
    resumed.train_until(cell.train.steps)
    for x, y in zip(whole.model.parameters(), resumed.model.parameters()):
        assert torch.equal(x, y)
    assert math.isclose(resumed.optimizer.param_groups[0]["lr"], 1e-3 * cell.train.lr_factor(19))
