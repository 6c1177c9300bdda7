"""Task pools: deterministic, nested, sampled with replacement, normalised."""

import math

import pytest
import torch

from papers.context_scaling.configs import FAMILY_SETTINGS
from papers.context_scaling.tasks import (
    FAMILIES,
    LinearRegression,
    TaskConfig,
    TaskPool,
    fresh_prompts,
    make_family,
)


def family(d=4, sigma=0.0):
    return LinearRegression(TaskConfig(d=d, noise_std=sigma))


def test_pool_is_deterministic_across_a_restart():
    first = TaskPool(family(), 32, seed=3).batch(step=17, batch_size=8, points=5)
    again = TaskPool(family(), 32, seed=3).batch(step=17, batch_size=8, points=5)
    assert torch.equal(first.xs, again.xs) and torch.equal(first.ys, again.ys)


def test_batches_differ_by_step_and_seed():
    pool = TaskPool(family(), 32, seed=3)
    assert not torch.equal(pool.batch(1, 8, 5).xs, pool.batch(2, 8, 5).xs)
    assert not torch.equal(pool.batch(1, 8, 5).xs, TaskPool(family(), 32, seed=4).batch(1, 8, 5).xs)


def test_T_smaller_than_batch_samples_with_replacement():
    pool = TaskPool(family(d=3), 2, seed=0)
    batch = pool.batch(0, 64, 10)
    betas = torch.linalg.lstsq(batch.xs, batch.ys.unsqueeze(-1)).solution.squeeze(-1)  # noiseless: exact
    distinct = torch.unique(betas.round(decimals=4), dim=0)
    assert batch.xs.shape == (64, 10, 3)
    assert len(distinct) == 2
    assert torch.allclose(
        torch.sort(distinct, dim=0).values,
        torch.sort(pool.tasks(torch.arange(2))["beta"], dim=0).values,
        atol=1e-3,
    )


def test_pools_are_nested_and_large_pools_regenerate_identically():
    small = TaskPool(family(), 10, seed=1).tasks(torch.arange(10))["beta"]
    big = TaskPool(family(), 10_000, seed=1, max_resident=0)  # forced lazy
    assert big._resident is None
    assert torch.equal(big.tasks(torch.arange(10))["beta"], small)


def test_a_resident_pool_of_many_chunks_holds_the_tasks_a_lazy_one_regenerates():
    teachers = make_family(TaskConfig(family="relu_net", d=3, hidden=20))  # 80 numbers a task
    held = TaskPool(teachers, 1001, seed=2)
    lazy = TaskPool(teachers, 1001, seed=2, max_resident=0)
    assert held._resident is not None and lazy._resident is None
    assert 1001 % held.chunk_size and 1001 // held.chunk_size >= 2  # several chunks, a partial last one
    idx = torch.tensor([0, 1000, held.chunk_size, held.chunk_size - 1, 517])
    for key in ("w1", "w2"):
        assert held._resident[key].shape[0] == 1001
        assert torch.equal(held.tasks(idx)[key], lazy.tasks(idx)[key])


def test_infinite_pool_draws_fresh_tasks():
    batch = TaskPool(family(d=3), math.inf, seed=0).batch(0, 64, 10)
    betas = torch.linalg.lstsq(batch.xs, batch.ys.unsqueeze(-1)).solution.squeeze(-1)
    assert len(torch.unique(betas.round(decimals=4), dim=0)) == 64


def test_second_moment_normalises_the_zero_predictor_to_one():
    fam = family(d=8, sigma=0.5)
    prompts = fresh_prompts(fam, 20000, 4, seed=0)
    assert fam.y_second_moment() == 1.25
    assert abs(prompts.ys.pow(2).mean().item() / fam.y_second_moment() - 1) < 0.03
    assert prompts.meta["noise_std"].unique().tolist() == [0.5]


def test_stacked_batches_are_each_pools_own_batch():
    """scaling.budget.packing's members: one labelling for all, the numbers each pool draws alone."""
    from papers.context_scaling.tasks import stacked_batches

    relu = make_family(TaskConfig(family="relu_net", d=4, hidden=8, noise_std=0.2))
    cases = [
        [
            TaskPool(family(sigma=0.1), T, seed) for T, seed in [(1, 0), (4, 1), (math.inf, 2)]
        ],  # one labelling
        [TaskPool(family(sigma=0.1), 4, 0), TaskPool(family(sigma=0.5), 4, 0)],  # noise differs
        [TaskPool(family(), 8, 0), TaskPool(relu, 8, 0)],  # families differ
    ]
    for pools in cases:
        for dims in (None, 2):
            xs, ys = stacked_batches(pools, 7, 5, 6, dims)
            assert xs.shape == (len(pools), 5, 6, 4) and ys.shape == (len(pools), 5, 6)
            for k, pool in enumerate(pools):
                alone = pool.batch(7, 5, 6, dims)
                assert torch.equal(xs[k], alone.xs)
                torch.testing.assert_close(ys[k], alone.ys, rtol=1e-6, atol=1e-7)


def test_a_steps_batch_does_not_depend_on_what_was_asked_before():
    """Batches come in blocks of steps; step s's is the same whether asked in order, alone or after others."""
    in_order = TaskPool(family(sigma=0.1), 16, seed=5)
    batches = [in_order.batch(s, 8, 6) for s in range(70)]
    assert in_order.block_steps(8, 6) == 32  # blocks 0, 1 and part of 2
    jumping = TaskPool(family(sigma=0.1), 16, seed=5)
    for s in (67, 3, 40, 31, 32, 0):
        again = jumping.batch(s, 8, 6)
        assert torch.equal(again.xs, batches[s].xs) and torch.equal(again.ys, batches[s].ys)
    assert not torch.equal(batches[31].xs, batches[32].xs)


def test_shorter_prompts_are_the_full_batchs_first_pairs_and_views_stay_unharmed():
    pool = TaskPool(family(sigma=0.1), math.inf, seed=1)
    full = pool.batch(9, 4, 10)
    short = pool.batch(9, 4, 3, max_points=10)
    assert torch.equal(short.xs, full.xs[:, :3]) and torch.equal(short.ys, full.ys[:, :3])
    zeroed = pool.batch(9, 4, 10, dims=2)  # labelled again, on a copy of the inputs
    assert zeroed.xs[..., 2:].abs().max() == 0 and not torch.equal(zeroed.ys, full.ys)
    fresh = TaskPool(family(sigma=0.1), math.inf, seed=1).batch(9, 4, 10)
    assert torch.equal(pool.batch(9, 4, 10).xs, fresh.xs) and torch.equal(pool.batch(9, 4, 10).ys, fresh.ys)
    with pytest.raises(ValueError, match="points 11 exceed max_points 10"):
        pool.batch(9, 4, 11, max_points=10)


def test_blocks_of_large_batches_hold_fewer_steps():
    pool = TaskPool(family(d=20), math.inf, seed=0)
    assert pool.block_steps(64, 41) == 16  # Fig. 1: ~0.9 M numbers per block of 16
    assert pool.block_steps(64, 1001) == 1  # one step at a time past the memory bound


def test_the_families_are_the_ones_the_planner_knows_without_torch():
    """configs.FAMILY_SETTINGS (what TaskConfig accepts and what a cell logs, without torch) names exactly
    the registry's families, in order, each with the settings its class reads."""
    assert {name: family.SETTINGS for name, family in FAMILIES.items()} == FAMILY_SETTINGS
    assert list(FAMILIES) == list(FAMILY_SETTINGS)
