"""Task families: stated moments (Monte Carlo), mixed noise, lazy large pools, shifts, the registry."""

import math
import resource

import pytest
import torch

from papers.context_scaling.tasks import (
    FAMILIES,
    ShiftConfig,
    TaskConfig,
    TaskPool,
    fresh_prompts,
    generator,
    make_family,
)
from scaling.config import ConfigError

D20 = {"d": 20}
CASES = {  # family settings -> the E[y^2] each docstring states
    "linear": ({"d": 8, "noise_std": 0.3}, 1 + 0.09),
    "linear_mixed_noise": ({"d": 8, "noise_stds": (0.1, 0.5)}, 1 + (0.01 + 0.25) / 2),
    "sparse_linear": ({"d": 20, "sparsity": 3, "noise_std": 0.2}, 3 + 0.04),
    "relu_net": ({"d": 20, "hidden": 100}, 20.0),
    "decision_tree": ({"d": 20, "depth": 4}, 1.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_stated_second_moment_matches_monte_carlo(name):
    settings, stated = CASES[name]
    fam = make_family(TaskConfig(family=name, **settings))
    ys = fresh_prompts(fam, 8000, 8, seed=5).ys.double()
    assert fam.y_second_moment() == pytest.approx(stated, rel=1e-9)
    # tolerance 5%: relative standard error of the mean of y^2 over 8000 tasks is below 2% for all five
    assert ys.pow(2).mean().item() == pytest.approx(stated, rel=0.05)


def test_relu_teacher_is_garg_scaled_two_layer_net():
    fam = make_family(TaskConfig(family="relu_net", d=3, hidden=5))
    params = fam.draw(2, generator(0, "t"))
    xs = torch.randn(2, 4, 3, generator=generator(1, "t"))
    by_hand = torch.stack([torch.relu(xs[b] @ params["w1"][b]) @ params["w2"][b] for b in range(2)])
    assert torch.allclose(fam.signal(params, xs), by_hand * math.sqrt(2 / 5), atol=1e-6)


def test_sparse_task_has_exactly_s_coordinates():
    fam = make_family(TaskConfig(family="sparse_linear", d=10, sparsity=3))
    prompts = fresh_prompts(fam, 50, 30, seed=0)
    betas = torch.linalg.lstsq(prompts.xs, prompts.ys.unsqueeze(-1)).solution.squeeze(-1)  # noiseless
    assert ((betas.abs() > 1e-4).sum(dim=1) == 3).all()


def test_tree_follows_its_splits_by_hand():
    fam = make_family(TaskConfig(family="decision_tree", d=3, depth=2))
    params = {"coords": torch.tensor([[0, 1, 2]]), "leaves": torch.tensor([[10.0, 11.0, 12.0, 13.0]])}
    xs = torch.tensor([[[-1.0, -1.0, 5.0], [-1.0, 2.0, 5.0], [3.0, 0.0, -1.0], [3.0, 0.0, 1.0]]])
    # root splits on x0; left child (node 1) on x1, right child (node 2) on x2; right when > 0
    assert fam.signal(params, xs).tolist() == [[10.0, 11.0, 12.0, 13.0]]


def test_mixed_noise_draws_each_level_with_probability_one_half():
    fam = make_family(TaskConfig(family="linear_mixed_noise", d=4, noise_stds=(0.1, 0.5)))
    prompts = fresh_prompts(fam, 4000, 64, seed=1)
    levels = prompts.meta["noise_std"]
    assert levels.unique().tolist() == pytest.approx([0.1, 0.5])
    assert (levels == levels.max()).float().mean().item() == pytest.approx(0.5, abs=0.03)  # 4 sigma
    xs, ys = prompts.xs.double(), prompts.ys.double()
    beta = torch.linalg.solve(xs.transpose(1, 2) @ xs, (xs.transpose(1, 2) @ ys.unsqueeze(-1))).squeeze(-1)
    residual = ys - torch.einsum("bpd,bd->bp", xs, beta)
    high = residual[levels > 0.3].pow(2).mean() * 64 / 60  # dof-corrected noise variance
    assert high.item() == pytest.approx(0.25, rel=0.05)


def test_mixed_noise_needs_levels():
    with pytest.raises(ConfigError, match="noise_stds"):
        TaskConfig(family="linear_mixed_noise")


def test_a_two_million_relu_pool_is_lazy_and_regenerates_identical_tasks():
    fam = make_family(TaskConfig(family="relu_net", d=20, hidden=100))
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    pool = TaskPool(fam, 2_000_000, seed=7)
    again = TaskPool(fam, 2_000_000, seed=7)
    idx = torch.tensor([0, 5, 1_999_999, 1_234_567])
    first, second = pool.tasks(idx), again.tasks(idx)
    grown_mb = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert pool._resident is None and grown_mb < 200  # the full pool would be 17 GB
    assert all(torch.equal(first[k], second[k]) for k in first)
    small = TaskPool(fam, 6, seed=7).tasks(torch.tensor([0, 5]))  # nested: same first tasks
    assert torch.equal(small["w1"], first["w1"][:2]) and torch.equal(small["w2"], first["w2"][:2])
    assert torch.equal(pool.batch(3, 8, 5).ys, again.batch(3, 8, 5).ys)


@pytest.mark.parametrize("name", ["sparse_linear", "decision_tree", "linear_mixed_noise"])
def test_every_family_has_deterministic_finite_pools(name):
    config = TaskConfig(family=name, d=5, noise_stds=(0.1, 0.5))
    a = TaskPool(make_family(config), 16, seed=2).batch(4, 32, 6)
    b = TaskPool(make_family(config), 16, seed=2).batch(4, 32, 6)
    assert torch.equal(a.ys, b.ys) and torch.equal(a.meta["noise_std"], b.meta["noise_std"])


SHIFT = ShiftConfig(x_mean=0.5, x_scale=2.0, task_mean=0.3, task_scale=3.0, noise_std=1.0)


def test_input_shift_sets_mean_and_covariance():
    fam = make_family(TaskConfig(d=6), SHIFT)
    xs = fam.inputs(4000, 10, generator(0, "x")).reshape(-1, 6).double()
    assert xs.mean(0) == pytest.approx([0.5] * 6, abs=0.03)
    cov = torch.cov(xs.T)
    assert torch.allclose(cov, 4.0 * torch.eye(6, dtype=torch.float64), atol=0.1)


def test_task_shift_sets_the_task_distribution_and_noise():
    fam = make_family(TaskConfig(d=8, noise_std=0.1), SHIFT)
    beta = fam.draw(20000, generator(0, "w"))["beta"].double()
    assert beta.mean().item() == pytest.approx(0.3, abs=0.01)
    assert beta.var(0).mean().item() == pytest.approx(9 / 8, rel=0.03)  # t^2 I / d
    assert fresh_prompts(fam, 10, 3, seed=0).meta["noise_std"].tolist() == [1.0] * 10


@pytest.mark.parametrize("name", list(CASES))
def test_shifted_normaliser_is_the_test_distribution_second_moment(name):
    settings, _ = CASES[name]
    fam = make_family(TaskConfig(family=name, **settings), SHIFT)
    ys = fresh_prompts(fam, 8000, 8, seed=3).ys.double()
    assert ys.pow(2).mean().item() == pytest.approx(fam.y_second_moment(), rel=0.07)


def test_training_batches_ignore_the_evaluation_shift():
    from papers.context_scaling.train import CellTrainer
    from scaling.cells import Cell
    from tests.conftest import tiny_cell_dict

    plain = Cell.from_dict(tiny_cell_dict())
    shifted = Cell.from_dict(tiny_cell_dict(eval={"prompts": 32, "bootstrap": 50, "shift": {"x_scale": 3.0}}))
    assert plain.key != shifted.key
    a, b = CellTrainer(plain).pool.batch(2, 8, 6), CellTrainer(shifted).pool.batch(2, 8, 6)
    assert torch.equal(a.xs, b.xs) and torch.equal(a.ys, b.ys)


def test_unknown_family_lists_the_known_ones():
    with pytest.raises(ConfigError, match="known: " + ", ".join(FAMILIES)):
        TaskConfig(family="quadratic")
