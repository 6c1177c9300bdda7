"""Packing (scaling.budget.packing): packed members train to the numbers they reach alone; the planner's
decision."""

import pytest
import torch

from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer
from scaling.budget.packing import (
    AUTO_PACK_SIZE,
    GPU_MEMORY_USABLE,
    MAX_GPU_PACK,
    MIN_SPLIT_SECONDS,
    gpu_budget,
    gpu_pack_size,
    pack_groups,
    pack_limit,
    pack_seconds,
    pack_signature,
)
from scaling.cells import Cell
from scaling.planning.plan import SweepError, plan_document
from tests.conftest import tiny_cell_dict

TOL = dict(rtol=1e-4, atol=1e-5)


def cell(**overrides) -> Cell:
    return Cell.from_dict(tiny_cell_dict(**overrides))


def train_alone(cells) -> list[CellTrainer]:
    trainers = [CellTrainer(c) for c in cells]
    for t in trainers:
        t.train_until(t.cell.train.steps)
    return trainers


def train_packed(cells, resume_at: dict[int, int] | None = None) -> list[CellTrainer]:
    trainers = [CellTrainer(c) for c in cells]
    for i, step in (resume_at or {}).items():  # members resumed from checkpoints at other steps
        alone = CellTrainer(cells[i])
        alone.train_until(step)
        trainers[i].load_state_dict(alone.state_dict())
    pack = PackTrainer(trainers)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop)
    return trainers


@pytest.mark.parametrize(
    "arch",
    [
        {"arch": "mlp", "width": 16},
        {"arch": "onelayer", "width": 8, "feature_map": "linear"},
        {"arch": "linear_on_scalar", "feature_map": "hilbert"},  # a Linear with a bias
    ],
)
def test_packed_members_equal_unpacked_cells(arch):
    cells = [
        cell(T=4, seed=0, model=arch),
        cell(T=8, seed=1, model=arch),
        cell(T=float("inf"), seed=2, model=arch),
        cell(T=8, seed=3, model=arch, train={**tiny_cell_dict()["train"], "lr": 3e-3}),
    ]
    alone, packed = train_alone(cells), train_packed(cells)
    for a, p in zip(alone, packed):
        assert p.step == a.step == a.cell.train.steps
        for (name, x), (_, y) in zip(a.model.named_parameters(), p.model.named_parameters()):
            torch.testing.assert_close(y, x, **TOL, msg=name)
        ca, cp = a.evaluate(), p.evaluate()
        assert list(ca["predictor"]) == list(cp["predictor"]) and list(ca["n"]) == list(cp["n"])
        torch.testing.assert_close(torch.tensor(cp["err"].values), torch.tensor(ca["err"].values), **TOL)


def test_packed_members_follow_the_cosine_schedule_as_cells_alone_do():
    cosine = {**tiny_cell_dict()["train"], "schedule": "cosine", "warmup": 0.2}
    cells = [cell(T=4, seed=0, train=cosine), cell(T=8, seed=1, train={**cosine, "lr": 3e-3})]
    alone, packed = train_alone(cells), train_packed(cells)
    constant = train_alone([cell(T=4, seed=0)])[0]
    for a, p in zip(alone, packed):
        for x, y in zip(a.model.parameters(), p.model.parameters()):
            torch.testing.assert_close(y, x, **TOL)
    moved = [(x - y).abs().max() for x, y in zip(alone[0].model.parameters(), constant.model.parameters())]
    assert max(moved) > 1e-4  # the schedule changed the run


def test_members_resumed_at_different_steps_catch_up_and_match():
    cells = [cell(T=4, seed=s) for s in range(3)]
    packed = train_packed(cells, resume_at={0: 5, 2: 15})  # checkpoint_every = 5 in the tiny cell
    for a, p in zip(train_alone(cells), packed):
        for x, y in zip(a.model.parameters(), p.model.parameters()):
            torch.testing.assert_close(y, x, **TOL)


@pytest.mark.parametrize("feature_numbers", [1 << 22, 10000, 1])  # runs of 32, 4 and 1 steps
@pytest.mark.parametrize(
    "curriculum",
    [{}, {"dims_start": 1, "dims_every": 10, "points_start": 2, "points_inc": 1, "points_every": 10}],
)
def test_features_computed_for_runs_of_steps_equal_the_steps_own(monkeypatch, feature_numbers, curriculum):
    """Over several batch blocks (80 steps, 32 per block), with and without a curriculum, and whatever
    the run of steps whose features are computed at once: the numbers of the cells alone."""
    monkeypatch.setattr("papers.context_scaling.stacked.FEATURE_BLOCK_NUMBERS", feature_numbers)
    train = {**tiny_cell_dict()["train"], "steps": 80, "checkpoint_every": 25, "curriculum": curriculum}
    cells = [cell(T=4, seed=0, train=train), cell(T=float("inf"), seed=1, train=train)]
    for a, p in zip(train_alone(cells), train_packed(cells, resume_at={1: 50})):
        for (name, x), (_, y) in zip(a.model.named_parameters(), p.model.named_parameters()):
            torch.testing.assert_close(y, x, **TOL, msg=name)


def test_members_train_on_their_own_losses_not_the_sum():
    """A member that diverges (huge lr) leaves the others exactly as they are alone."""
    bad = cell(T=4, seed=0, train={**tiny_cell_dict()["train"], "lr": 1e30})
    good = cell(T=4, seed=1)
    packed = train_packed([bad, good])
    alone = train_alone([good])[0]
    for x, y in zip(alone.model.parameters(), packed[1].model.parameters()):
        torch.testing.assert_close(y, x, **TOL)


@pytest.mark.parametrize(
    "name, cells, pack, expected",
    [
        (
            "same shape, T and seed differ: one pack",
            [cell(T=4), cell(T=8), cell(seed=1)],
            "auto",
            [[0, 1, 2]],
        ),
        (
            "lr differs: still one pack",
            [cell(), cell(train={**tiny_cell_dict()["train"], "lr": 1e-2})],
            "auto",
            [[0, 1]],
        ),
        (
            "width differs: shapes differ, two packs",
            [cell(), cell(model={"arch": "mlp", "width": 32}), cell(T=4)],
            "auto",
            [[0, 2], [1]],
        ),
        ("N differs: two packs", [cell(), cell(N=6)], "auto", [[0], [1]]),
        (
            "steps differ: no lockstep, two packs",
            [cell(), cell(train={**tiny_cell_dict()["train"], "steps": 40})],
            "auto",
            [[0], [1]],
        ),
        ("off", [cell(), cell(T=4)], "off", [[0], [1]]),
        ("K=2 splits three cells", [cell(T=2), cell(T=4), cell(T=8)], 2, [[0, 1], [2]]),
        (
            "gpt2 packs, but auto does not pack it on a CPU (it does not pay there)",
            [cell(model={"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8}, T=t) for t in (2, 4)],
            "auto",
            [[0], [1]],
        ),
        (
            "K packs gpt2",
            [cell(model={"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8}, T=t) for t in (2, 4)],
            2,
            [[0, 1]],
        ),
        (
            "K packs gpt2 on the stacked layout",
            [cell(model={"arch": "gpt2", "n_embd": 8, "layout": "stacked"}, T=t) for t in (2, 4)],
            2,
            [[0, 1]],
        ),
        (
            "gpt2 on transformers' GPT2Model (relu attention) never packs",
            [
                cell(model={"arch": "gpt2", "n_embd": 8, "layout": "stacked", "attention": "relu"}, T=t)
                for t in (2, 4)
            ],
            2,
            [[0], [1]],
        ),
        (
            "auto leaves large cells alone",
            [cell(model={"arch": "mlp", "width": 4096}, N=40, T=t) for t in (2, 4)],
            "auto",
            [[0], [1]],
        ),
        (
            "K packs large cells too",
            [cell(model={"arch": "mlp", "width": 4096}, N=40, T=t) for t in (2, 4)],
            4,
            [[0, 1]],
        ),
    ],
)
def test_planner_packing_decision(name, cells, pack, expected):
    assert pack_groups(cells, pack) == expected, name


LONG = {**tiny_cell_dict()["train"], "steps": 50_000}  # ~50 s of estimated training per pack


@pytest.mark.parametrize(
    "cells, slots, sizes", [(8, 2, [4, 4]), (8, 1, [8]), (20, 2, [8, 8, 4]), (3, 4, [1, 1, 1])]
)
def test_auto_packs_fill_the_slots(cells, slots, sizes):
    long_cells = [cell(T=2**i, train=LONG) for i in range(cells)]
    assert pack_seconds(long_cells[0], 1) >= MIN_SPLIT_SECONDS
    assert [len(g) for g in pack_groups(long_cells, "auto", slots=slots)] == sizes


@pytest.mark.parametrize(
    "steps, slots, sizes", [(20, 2, [8]), (20, 8, [8]), (20_000, 4, [2, 2, 2, 2]), (9_000, 4, [8])]
)
def test_auto_packs_split_only_when_each_part_pays_for_its_trial(steps, slots, sizes):
    """8 cells of 20 steps stay one pack on any number of slots (a trial's start costs more than their
    training); 20k steps (~20 s of estimate per part) fill 4 slots, 9k steps (~9 s) stay one pack."""
    cells = [cell(T=2**i, train={**tiny_cell_dict()["train"], "steps": steps}) for i in range(8)]
    assert [len(g) for g in pack_groups(cells, "auto", slots=slots)] == sizes


def test_auto_pack_size_is_capped():
    cells = [cell(T=2**i) for i in range(AUTO_PACK_SIZE + 2)]
    assert [len(g) for g in pack_groups(cells, "auto")] == [AUTO_PACK_SIZE, 2]
    assert pack_limit("auto", cells[0]) == AUTO_PACK_SIZE and pack_signature(cells[0]) is not None


@pytest.mark.parametrize(
    "value, ok", [("auto", "auto"), ("off", "off"), (False, "off"), (4, 4), (0, None), ("some", None)]
)
def test_run_pack_setting_is_validated(value, ok):
    document = {"name": "x", "defaults": tiny_cell_dict(), "run": {"pack": value}}
    if ok:
        assert plan_document(document).run.pack == ok
    else:
        with pytest.raises(SweepError, match="run.pack"):
            plan_document(document)


def test_a_packed_members_checkpoint_resumes_alone_to_the_same_numbers():
    """After a packed segment a member's state (model, torch Adam state, step) is an unpacked cell's:
    loaded into a cell trained alone from there, it ends where the cell trained alone all the way ends."""
    cells = [cell(T=4, seed=0), cell(T=8, seed=1, train={**tiny_cell_dict()["train"], "lr": 3e-3})]
    trainers = [CellTrainer(c) for c in cells]
    PackTrainer(trainers).train_until(trainers, 10)
    for c, packed, alone in zip(cells, trainers, train_alone(cells)):
        state = packed.state_dict()
        assert state["step"] == 10 and float(state["optimizer"]["state"][0]["step"]) == 10
        resumed = CellTrainer(c)
        resumed.load_state_dict(state)
        resumed.train_until(c.train.steps)
        for x, y in zip(alone.model.parameters(), resumed.model.parameters()):
            torch.testing.assert_close(y, x, **TOL)


def test_bfloat16_packs_match_bfloat16_cells_to_bfloat16_precision():
    """Under bf16 autocast the stacked products run in bf16 as autograd's do alone."""
    train = {**tiny_cell_dict()["train"], "precision": "bfloat16"}
    cells = [cell(T=4, seed=0, train=train), cell(T=8, seed=1, train=train)]
    for a, p in zip(train_alone(cells), train_packed(cells)):
        for x, y in zip(a.model.parameters(), p.model.parameters()):
            torch.testing.assert_close(y, x, rtol=2e-2, atol=2e-2)


GPU_TABLE = {  # a CUDA cost table's parts the packer reads (scaling.budget.cost.load_gpu_table)
    "device": "a GPU",
    "memory_bytes": 80 * 2**30,
    "fit": {"gpt2": {"t0": 1e-3, "rate": 1e14, "m0": 2**30, "bytes_per_activation": 40.0}},
}
FIG1_GPT2 = {"arch": "gpt2", "n_layer": 8, "n_head": 8, "n_embd": 256}


def fig1_cell(T=100, **overrides) -> Cell:
    train = {**tiny_cell_dict()["train"], "batch_size": 64}
    return cell(model=FIG1_GPT2, task={"d": 8}, N=40, T=T, train=train, **overrides)


def test_the_gpu_pack_size_is_the_memory_over_each_members_params_and_activations():
    """Against an independent count: 16 bytes per parameter of the Fig. 1 GPT-2 (its formula written out
    here) and 40 bytes per activation element (batch x 2(N+1) tokens x width x layers)."""
    k, layers, d, N, batch = 256, 8, 8, 40, 64
    params = layers * (12 * k * k + 13 * k) + 2 * (N + 1) * k + k + 2 * k + (d * k + k) + k + 1
    member = 16 * params + 40.0 * batch * 2 * (N + 1) * k * layers
    for share in (0.25, 0.5, 1.0):
        budget = gpu_budget(share, GPU_TABLE)
        expected = int((GPU_MEMORY_USABLE * share * 80 * 2**30 - 2**30) // member)
        assert 1 < gpu_pack_size(fig1_cell(), budget) == min(expected, MAX_GPU_PACK)


def test_the_gpu_pack_size_is_a_pure_function_of_the_model_and_the_memory(monkeypatch):
    """No device is asked (torch.cuda is not touched), cells differing only in T, seed or lr get the same
    size, and more memory or a smaller model never gives fewer members."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: pytest.fail("the packer asked the device"))
    sizes = [
        gpu_pack_size(fig1_cell(T=t, seed=s), gpu_budget(0.5, GPU_TABLE)) for t in (16, 1e5) for s in (0, 1)
    ]
    assert len(set(sizes)) == 1
    by_memory = [gpu_pack_size(fig1_cell(), gpu_budget(g, GPU_TABLE)) for g in (0.1, 0.25, 0.5, 1.0)]
    assert by_memory == sorted(by_memory) and by_memory[0] < by_memory[-1]
    wider = cell(model={**FIG1_GPT2, "n_embd": 512}, task={"d": 8}, N=40, train=fig1_cell().train.__dict__)
    assert gpu_pack_size(wider, gpu_budget(0.5, GPU_TABLE)) < gpu_pack_size(
        fig1_cell(), gpu_budget(0.5, GPU_TABLE)
    )
    small = cell(model={"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8})
    assert gpu_pack_size(small, gpu_budget(1.0, GPU_TABLE)) == MAX_GPU_PACK
    huge = cell(model={**FIG1_GPT2, "n_embd": 4096}, task={"d": 8}, N=500, train=fig1_cell().train.__dict__)
    assert gpu_pack_size(huge, gpu_budget(0.1, GPU_TABLE)) == 1


def test_on_a_gpu_auto_packs_gpt2_cells_as_many_as_fit_and_without_a_table_not_at_all():
    cells = [fig1_cell(T=2**i) for i in range(12)]
    budget = gpu_budget(0.05, GPU_TABLE)  # 4 GiB
    size = gpu_pack_size(cells[0], budget)
    assert 1 < size < 12
    groups = pack_groups(cells, "auto", gpu_of=lambda c: budget)
    assert [len(g) for g in groups] == [size] * (12 // size) + ([12 % size] if 12 % size else [])
    assert gpu_budget(0.25, None) is None and gpu_budget(0, GPU_TABLE) is None
    assert pack_groups(cells, "auto", gpu_of=lambda c: None) == [[i] for i in range(12)]
