"""Garg et al.'s curriculum on d and on the number of points (TrainConfig.curriculum)."""

import pytest
import torch

from papers.context_scaling.configs import Curriculum, TrainConfig
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.config import ConfigError

GARG_LINEAR = Curriculum(
    dims_start=5, dims_inc=1, dims_every=2000, points_start=11, points_inc=2, points_every=2000
)
GARG_RELU = Curriculum(dims_start=5, points_start=26, points_inc=5, points_every=2000)


@pytest.mark.parametrize(
    "step, dims, points",
    [
        (0, 5, 11),
        (1999, 5, 11),
        (2000, 6, 13),
        (4000, 7, 15),
        (28000, 19, 39),
        (30000, 20, 41),
        (500000, 20, 41),
    ],
)
def test_garg_linear_schedule(step, dims, points):
    assert GARG_LINEAR.dims(step, 20) == dims
    assert GARG_LINEAR.points(step, 41) == points


@pytest.mark.parametrize("step, points", [(0, 26), (2000, 31), (29999, 96), (30000, 101), (10**6, 101)])
def test_garg_relu_and_tree_points_schedule(step, points):
    assert GARG_RELU.points(step, 101) == points


def test_off_by_default_and_keeps_keys():
    assert Curriculum().dims(0, 20) == 20 and Curriculum().points(0, 41) == 41
    assert Cell.from_dict({"train": {"curriculum": {}}}).key == Cell().key
    assert Cell.from_dict({"train": {"curriculum": {"dims_start": 5}}}).key != Cell().key


@pytest.mark.parametrize("data", [{"points_start": 1}, {"dims_every": 0}, {"dims_start": -1}])
def test_invalid_curriculum(data):
    with pytest.raises(ConfigError):
        TrainConfig(curriculum=Curriculum(**data))


def trainer(curriculum, noise_std=0.0, model=None):
    return CellTrainer(
        Cell.from_dict(
            {
                "task": {"d": 6, "noise_std": noise_std},
                "model": model or {"arch": "mlp", "width": 16},
                "N": 10,
                "T": 4,
                "train": {"steps": 6, "batch_size": 8, "lr": 1e-3, "device": "cpu", "curriculum": curriculum},
            }
        )
    )


def test_curriculum_batches_zero_inputs_beyond_current_d_and_label_them_so():
    t = trainer({"dims_start": 2, "dims_every": 3, "points_start": 4, "points_inc": 3, "points_every": 3})
    early, later = t.train_batch(0), t.train_batch(3)
    assert early.xs.shape == (8, 4, 6) and later.xs.shape == (8, 7, 6)
    assert early.xs[..., 2:].abs().max() == 0 and early.xs[..., :2].abs().min() > 0
    assert later.xs[..., 3:].abs().max() == 0
    betas = t.pool.tasks(torch.arange(4))["beta"]  # the T = 4 pool
    fits = torch.einsum("bpd,td->btp", early.xs, betas) - early.ys[:, None]  # every prompt, every task
    assert fits.abs().amax(-1).amin(-1).max() < 1e-5  # labelled by a pool task


def test_truncated_batch_at_full_d_is_the_pools_batch():
    t = trainer({})
    ours, pools = t.pool.batch(5, 8, 11, dims=6), t.pool.batch(5, 8, 11)
    assert torch.equal(ours.xs, pools.xs) and torch.equal(ours.ys, pools.ys)


@pytest.mark.parametrize(
    "model",
    [
        {"arch": "mlp", "width": 16},
        {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8},
        {"arch": "sgpt", "n_layer": 1, "n_embd": 8},
    ],
)
def test_models_train_on_short_prompts_then_evaluate_at_full_length(model):
    t = trainer({"dims_start": 3, "dims_every": 2, "points_start": 3, "points_every": 2}, 0.1, model)
    t.train_until(6)
    assert t.model(torch.randn(2, 11, 6), torch.randn(2, 11)).shape == (2, 11)
