"""Packed GPT-2 and SGPT cells (papers.context_scaling.stacked_transformers): each member ends with
the numbers it reaches trained alone; a resumed pack equals an uninterrupted one; a damaged member's
checkpoint affects that member only."""

import pytest
import torch
from mlflow.tracking import MlflowClient

from papers.context_scaling.stacked import PackTrainer, stack
from papers.context_scaling.stacked_transformers import StackedTransformer
from papers.context_scaling.train import CellTrainer, prefix_loss
from scaling.cells import Cell
from scaling.tracking.tracker import Tracker
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.run import PackMemberError, run_pack
from scaling.trial.spec import TrialMember, TrialSpec
from tests.conftest import tiny_cell_dict
from tests.test_checkpoint_integrity import zero_block

GPT2 = {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16}
GPT2_STACKED = {**GPT2, "layout": "stacked"}  # eq. 2, the stacked-prefix mask (Figs. 2, 3, 4, 8)
SGPT = {"arch": "sgpt", "n_layer": 2, "n_embd": 16}
MODELS = [GPT2, GPT2_STACKED, SGPT, {**SGPT, "attention": "softmax"}]
# Evaluation errors agree to float rounding. Parameters after 20 Adam steps differ by up to ~2e-5: Adam
# divides by sqrt(v), so a rounding difference in a near-zero gradient moves a weight by up to lr; the
# same cells trained alone in float64 differ from float32 by as much (measured: 2.2e-5 against 1.5e-5).
ERR_TOL = dict(rtol=1e-4, atol=1e-6)
PARAM_TOL = dict(rtol=1e-3, atol=1e-4)


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    """Tiny transformers on one thread: on a loaded 2-core machine a second OpenMP thread makes their
    steps 20-40x slower (measured: 8 ms against 0.2 s a step), not faster."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cell(model, **overrides) -> Cell:
    return Cell.from_dict(tiny_cell_dict(model=model, **overrides))


def members(model, precision="float32") -> list[Cell]:
    train = {**tiny_cell_dict()["train"], "precision": precision}
    return [
        cell(model, T=4, seed=0, train=train),
        cell(model, T=float("inf"), seed=1, train=train),
        cell(model, T=8, seed=2, train={**train, "lr": 3e-3}),
    ]


def train_alone(cells) -> list[CellTrainer]:
    trainers = [CellTrainer(c) for c in cells]
    for t in trainers:
        t.train_until(t.cell.train.steps)
    return trainers


def train_packed(trainers) -> list[CellTrainer]:
    pack = PackTrainer(trainers)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop)
    return trainers


def assert_same_numbers(alone: CellTrainer, packed: CellTrainer, param_tol=PARAM_TOL, err_tol=ERR_TOL):
    assert packed.step == alone.step
    for (name, x), (_, y) in zip(alone.model.named_parameters(), packed.model.named_parameters()):
        torch.testing.assert_close(y, x, **param_tol, msg=name)
    a, p = alone.evaluate(), packed.evaluate()
    assert list(a["predictor"]) == list(p["predictor"]) and list(a["n"]) == list(p["n"])
    torch.testing.assert_close(torch.tensor(p["err"].values), torch.tensor(a["err"].values), **err_tol)


@pytest.mark.parametrize("model", MODELS, ids=["gpt2", "gpt2-stacked", "sgpt", "sgpt-softmax"])
def test_packed_transformer_members_end_with_their_numbers_alone(model):
    cells = members(model)
    for alone, packed in zip(train_alone(cells), train_packed([CellTrainer(c) for c in cells])):
        assert_same_numbers(alone, packed)
        assert packed.optimizer.state_dict()["state"].keys() == alone.optimizer.state_dict()["state"].keys()


@pytest.mark.parametrize("model", [GPT2, GPT2_STACKED, SGPT], ids=["gpt2", "gpt2-stacked", "sgpt"])
def test_one_stacked_step_gives_each_member_its_own_loss_and_gradient(model):
    cells = members(model)
    stacked = StackedTransformer([CellTrainer(c) for c in cells])
    losses = stacked.losses(*stacked.step_inputs())
    grads = torch.autograd.grad(losses.sum(), list(stacked.params.values()))
    for k, alone in enumerate(CellTrainer(c) for c in cells):
        batch = alone.train_batch(0)
        loss = prefix_loss(alone.model(batch.xs, batch.ys).float(), batch.ys)
        loss.backward()
        torch.testing.assert_close(losses[k], loss.detach(), rtol=1e-6, atol=0)
        own = dict(alone.model.named_parameters())
        for name, grad in zip(stacked.params, grads):
            torch.testing.assert_close(grad[k], own[name].grad, rtol=1e-5, atol=1e-7, msg=name)


@pytest.mark.parametrize("model", [GPT2, GPT2_STACKED], ids=["gpt2", "gpt2-stacked"])
def test_bfloat16_packs_match_bfloat16_cells_to_bfloat16_precision(model):
    cells = members(model, "bfloat16")
    for alone, packed in zip(train_alone(cells), train_packed([CellTrainer(c) for c in cells])):
        assert_same_numbers(alone, packed, dict(rtol=2e-2, atol=2e-2), dict(rtol=2e-2, atol=2e-3))


@pytest.mark.parametrize("model", [GPT2, GPT2_STACKED], ids=["gpt2", "gpt2-stacked"])
def test_a_curriculum_pack_matches_its_cells(model):
    train = {
        **tiny_cell_dict()["train"],
        "curriculum": {
            "dims_start": 1,
            "dims_every": 7,
            "points_start": 3,
            "points_inc": 1,
            "points_every": 7,
        },
    }
    cells = [cell(model, T=4, seed=s, train=train) for s in range(2)]
    for alone, packed in zip(train_alone(cells), train_packed([CellTrainer(c) for c in cells])):
        assert_same_numbers(alone, packed)


def test_a_resumed_pack_equals_an_uninterrupted_one():
    """Interrupted at a checkpoint (the members' state dicts, as the trial saves them) and resumed in new
    trainers: bit for bit the uninterrupted pack. A member resumed from an earlier checkpoint catches up
    alone, then rejoins: its cell's numbers to float rounding."""
    cells = members(GPT2)
    uninterrupted = train_packed([CellTrainer(c) for c in cells])
    first = [CellTrainer(c) for c in cells]
    PackTrainer(first).train_until(first, 10)
    resumed = [CellTrainer(c) for c in cells]
    for trainer, saved in zip(resumed, first):
        trainer.load_state_dict(saved.state_dict())
    train_packed(resumed)
    for a, b in zip(uninterrupted, resumed):
        assert b.step == a.step
        for (name, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters()):
            assert torch.equal(x, y), name
    early = [CellTrainer(c) for c in cells]
    PackTrainer(early).train_until(early, 5)
    mixed = [CellTrainer(c) for c in cells]
    for i, trainer in enumerate(mixed):
        trainer.load_state_dict((early if i == 1 else first)[i].state_dict())
    for a, b in zip(uninterrupted, train_packed(mixed)):
        assert_same_numbers(a, b)


def test_a_member_that_diverges_leaves_the_others_as_alone():
    train = tiny_cell_dict()["train"]
    bad, good = cell(GPT2, T=4, seed=0, train={**train, "lr": 1e30}), cell(GPT2, T=4, seed=1)
    packed = train_packed([CellTrainer(bad), CellTrainer(good)])
    assert not torch.isfinite(next(packed[0].model.parameters())).all()
    assert_same_numbers(train_alone([good])[0], packed[1])


def test_a_packs_trial_fails_a_diverged_member_alone(tmp_path):
    """The kind's run_pack trains both; the trial finishes each in turn: the diverged member's run is marked
    failed and named in the trial's error, the other's is complete."""
    train = tiny_cell_dict()["train"]
    bad, good = cell(GPT2, T=4, seed=0, train={**train, "lr": 1e30}), cell(GPT2, T=4, seed=1)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    experiment = Tracker(uri).experiment_id("diverged", create=True)
    members = tuple(TrialMember(c.to_dict(), c.key, c.name) for c in (bad, good))
    spec = TrialSpec(
        members, "pack", "pack of 2", {"cpu": 1}, uri, experiment, "diverged", str(tmp_path / "s")
    )
    with pytest.raises(PackMemberError, match=bad.key) as raised:
        run_pack(spec)
    assert good.key not in str(raised.value)
    runs = MlflowClient(uri).search_runs([experiment], "tags.kind = 'cell'")
    assert {r.data.tags["cell_key"]: r.data.tags["status"] for r in runs} == {
        bad.key: "failed",
        good.key: "complete",
    }


def test_the_engine_follows_the_model():
    assert isinstance(stack([CellTrainer(c) for c in members(GPT2)]), StackedTransformer)
    assert isinstance(stack([CellTrainer(c) for c in members(GPT2_STACKED)]), StackedTransformer)
    for model in (GPT2, GPT2_STACKED, SGPT):
        assert cell(model).kind.packable(cell(model))
    for hf in ({**GPT2_STACKED, "attention": "relu"}, {**GPT2, "attn_implementation": "eager"}):
        assert not cell(hf).kind.packable(cell(hf))  # transformers' GPT2Model: no stacked forward


def test_a_damaged_members_checkpoint_affects_that_member_only(tmp_path):
    """Three packed GPT-2 members checkpointed at steps 5 and 10; member 1's newest checkpoint is zeroed in
    the middle. The pack's trial resumes member 1 from step 5 (its run says why) and the others from 10;
    every member ends with the numbers it reaches alone."""
    cells = members(GPT2)
    storage = str(tmp_path / "storage")
    store = CheckpointStore(storage)
    trainers = [CellTrainer(c) for c in cells]
    for stop in (5, 10):
        PackTrainer(trainers).train_until(trainers, stop)
        for trainer in trainers:
            store.save(trainer.cell.key, {**trainer.state_dict(), "unlogged_losses": []})
    zero_block(tmp_path / "storage" / "checkpoints" / cells[1].key / "state.pt", size=1024)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    spec = TrialSpec(
        tuple(TrialMember(c.to_dict(), c.key, c.name) for c in cells),
        "pack",
        "pack of 3",
        {"cpu": 1},
        uri,
        Tracker(uri).experiment_id("damaged-pack", create=True),
        "damaged-pack",
        storage,
    )
    assert run_pack(spec)["finished"] == 1
    client = MlflowClient(uri)
    found = {
        r.data.tags["cell_key"]: r for r in client.search_runs([spec.experiment_id], "tags.kind = 'cell'")
    }
    for c, alone in zip(cells, train_alone(cells)):
        run = found[c.key]
        assert run.data.tags["status"] == "complete"
        resumed = [m.value for m in client.get_metric_history(run.info.run_id, "trial/resumed_from")]
        assert resumed == ([5.0] if c.key == cells[1].key else [10.0])
        assert ("checkpoint_damaged" in run.data.tags) == (c.key == cells[1].key)
        final = CellTrainer(c)
        final.load_state_dict(store.load(c.key))
        assert_same_numbers(alone, final)
