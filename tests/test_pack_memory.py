"""Packs sized from the device the trial holds (issue 41, part 3), on a CPU device of stated memory
(scaling.trial.devices: SCALING_STATED_MEMORY): the packer's K follows the device's memory, a pack larger than
the device fits trains in smaller packs one after another, and a pack that still runs out of memory
splits and carries on (papers.context_scaling.stacked.PackTrainer: the path a card's
torch.OutOfMemoryError takes): every member ends with its numbers alone, no step lost or trained twice, the
split said in the members' runs."""

import pytest
import torch
from mlflow import MlflowClient

from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer
from scaling.budget.cost import load_gpu_table
from scaling.budget.packing import (
    GPU_MEMORY_USABLE,
    MAX_GPU_PACK,
    coefficients,
    device_pack_size,
    member_bytes,
    memory_guard,
    pack_bytes,
)
from scaling.cells import Cell
from scaling.tracking.tracker import Tracker
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.devices import STATED_MEMORY, TrialMemory, stated_memory, trial_memory
from scaling.trial.run import pack_memory, run_pack
from scaling.trial.spec import TrialMember, TrialSpec
from tests.conftest import tiny_cell_dict

TOL = dict(rtol=1e-4, atol=1e-5)  # a member packed against alone: the rounding of batched products
TABLE = load_gpu_table()  # the committed CUDA cost table: its memory fit sizes packs on any device


def cells(count: int, **train) -> list[Cell]:
    settings = {**tiny_cell_dict()["train"], "steps": 12, "checkpoint_every": 4, "log_every": 2, **train}
    return [Cell.from_dict(tiny_cell_dict(train=settings, seed=s, T=4 + s)) for s in range(count)]


def fits(members: float) -> float:
    """Stated memory in which the packer plans ``members`` cells like cells()'s (a half more: no edge)."""
    (cell,) = cells(1)
    return (coefficients(TABLE, "mlp")["m0"] + members * member_bytes(cell, TABLE)) / GPU_MEMORY_USABLE


def train_alone(cells: list[Cell]) -> list[CellTrainer]:
    trainers = [CellTrainer(c) for c in cells]
    for t in trainers:
        t.train_until(t.cell.train.steps)
    return trainers


def test_the_packers_K_follows_the_devices_memory():
    (cell,) = cells(1)
    m0, each = coefficients(TABLE, "mlp")["m0"], member_bytes(cell, TABLE)
    sizes = [device_pack_size(cell, fits(k + 0.5), TABLE) for k in (1, 2, 5, 9)]
    assert sizes == [1, 2, 5, 9]
    big = 24e9  # a 24 GB card (an A10G), half of it: an independent count of what fits
    assert device_pack_size(cell, 0.5 * big, TABLE) == min(MAX_GPU_PACK, int((0.85 * 0.5 * big - m0) // each))
    assert device_pack_size(cell, 1.0, TABLE) == 1  # nothing fits: one at a time


def test_a_trials_memory_is_its_stated_device_or_none_on_a_cpu(monkeypatch):
    monkeypatch.delenv(STATED_MEMORY, raising=False)
    assert trial_memory(torch.device("cpu"), 0) is None
    assert pack_memory(cells(3), torch.device("cpu"), 0) == (None, None, None)  # a CPU: packs as planned
    monkeypatch.setenv(STATED_MEMORY, f"{fits(2.5)}")
    memory = trial_memory(torch.device("cpu"), 0)
    assert memory.plan == memory.limit == fits(2.5)
    limit, guard, note = pack_memory(cells(3), torch.device("cpu"), 0)
    assert limit == 2 and "fits 2 of this pack's 3 members" in note and guard is not None
    assert stated_memory("2e8,1e8") == TrialMemory(2e8, 1e8, stated_memory("2e8,1e8").source)
    for bad in ("lots", "0", "1,2,3", "-5"):
        with pytest.raises(ValueError, match=STATED_MEMORY):
            stated_memory(bad)


def test_the_guard_raises_what_a_card_raises_past_the_stated_memory():
    members = cells(3)
    guard = memory_guard(members[0], pack_bytes(members[0], 2, TABLE), TABLE)
    trainers = [CellTrainer(c) for c in members]
    with pytest.raises(torch.OutOfMemoryError, match="3 stacked members need"):
        guard(type("Engine", (), {"members": trainers})())
    guard(type("Engine", (), {"members": trainers[:2]})())


class FailsAt:
    """A guard that runs out of memory at one step of engines of ``size`` members (as a card's allocator
    may, after other processes took memory): the split then happens mid-segment."""

    def __init__(self, size: int, step: int):
        self.size, self.step, self.raised = size, step, 0

    def __call__(self, engine) -> None:
        if len(engine.members) >= self.size and engine.step == self.step:
            self.raised += 1
            raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")


@pytest.mark.parametrize("graphs", [False, True])
def test_a_pack_out_of_memory_mid_segment_splits_and_keeps_every_finished_step(graphs):
    members = cells(4, schedule="cosine", warmup=0.2)
    trainers = [CellTrainer(c, graphs=graphs) for c in members]
    splits: list[str] = []
    guard = FailsAt(size=3, step=6)
    pack = PackTrainer(trainers, guard=guard, on_split=lambda indices, text: splits.append((indices, text)))
    losses: dict[int, list[int]] = {i: [] for i in range(4)}
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop, lambda i, step, loss: losses[i].append(step))
    assert guard.raised == 1 and pack.limit == 2 and len(splits) == 1
    assert splits[0][0] == [0, 1, 2, 3] and "out of memory with 4 members stacked, at step 6" in splits[0][1]
    assert all(steps == [2, 4, 6, 8, 10, 12] for steps in losses.values())  # each logged once, none lost
    for alone, packed in zip(train_alone(members), trainers):
        assert packed.step == alone.step == 12
        for x, y in zip(alone.model.parameters(), packed.model.parameters()):
            torch.testing.assert_close(y, x, **TOL)


def test_a_member_alone_that_does_not_fit_is_an_error():
    trainers = [CellTrainer(c) for c in cells(2)]
    pack = PackTrainer(trainers, guard=FailsAt(size=1, step=0))
    with pytest.raises(torch.OutOfMemoryError, match="alone does not fit the device"):
        while not pack.done_training:
            pack.train_until(*pack.next_segment())


def spec_of(members: list[Cell], tmp_path) -> TrialSpec:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return TrialSpec(
        tuple(TrialMember(c.to_dict(), c.key, c.name) for c in members),
        "pack",
        f"pack of {len(members)}",
        {"cpu": 1},
        uri,
        Tracker(uri).experiment_id("stated", create=True),
        "stated",
        str(tmp_path / "storage"),
    )


def test_a_pack_on_a_device_of_stated_memory_splits_and_finishes_every_member(tmp_path, monkeypatch):
    """Six cells planned as one pack on a device that the packer sizes for four and that holds two: the
    trial trains four, runs out of memory on their first step, goes on in packs of two, then trains the
    last two; every member's run is complete with its numbers alone and says how its pack was split."""
    members = cells(6)
    monkeypatch.setenv(STATED_MEMORY, f"{fits(4.5)},{pack_bytes(members[0], 2.5, TABLE)}")
    spec = spec_of(members, tmp_path)
    assert run_pack(spec)["finished"] == 1
    client = MlflowClient(spec.tracking_uri)
    runs = {
        r.data.tags["cell_key"]: r for r in client.search_runs([spec.experiment_id], "tags.kind = 'cell'")
    }
    store = CheckpointStore(spec.storage)
    for cell, alone in zip(members, train_alone(members)):
        run = runs[cell.key]
        assert run.data.tags["status"] == "complete"
        assert "fits 4 of this pack's 6 members" in run.data.tags["pack_memory"]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert sorted(steps) == list(range(2, 13, 2))  # every logged loss once: nothing trained twice
        state = store.load(cell.key)
        assert state["step"] == 12
        for name, x in alone.model.state_dict().items():
            torch.testing.assert_close(state["model"][name], x, **TOL)
    split = [runs[c.key].data.tags.get("pack_split", "") for c in members]
    assert all("out of memory with 4 members stacked, at step 0" in text for text in split[:4])
    assert split[4:] == ["", ""]  # the last two trained as a pack that fits
