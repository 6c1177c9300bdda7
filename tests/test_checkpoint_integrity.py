"""Checkpoints carry a digest and are verified on load: a damaged file (a zeroed block, a truncation, an
empty file) is named, moved aside and skipped for the last good state or a fresh start, never loaded; a
real sweep over a damaged checkpoint ends with the numbers of an uninterrupted run."""

import subprocess
import sys

import pytest
import torch
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.planning.plan import load_plan
from scaling.trial.checkpoints import MAGIC, CheckpointStore, behind


def zero_block(path, size=4096):
    """Zero one block of ``size`` bytes in the middle of the file, keeping its size (a bad sector)."""
    blob = bytearray(path.read_bytes())
    start = max(len(MAGIC) + 65, len(blob) // 2 - size // 2)
    blob[start : start + size] = bytes(min(size, len(blob) - start))
    path.write_bytes(bytes(blob))


def state(step, numbers=4096):
    return {"step": step, "weights": torch.arange(numbers, dtype=torch.float32) * step}


@pytest.fixture
def store(tmp_path):
    return CheckpointStore(str(tmp_path))


def cell_dir(tmp_path):
    return tmp_path / "checkpoints" / "k"


def test_a_zeroed_block_is_detected_and_the_previous_state_used(tmp_path, store):
    store.save("k", state(10))
    store.save("k", state(20))
    zero_block(cell_dir(tmp_path) / "state.pt")
    step, problems = store.inspect("k")  # --dry-run: sees it, changes nothing
    assert step == 10 and "state.pt is damaged: its sha256 digest" in problems[0]
    assert (cell_dir(tmp_path) / "state.pt").exists()
    loaded = store.load("k")
    assert loaded["step"] == 10 and torch.equal(loaded["weights"], state(10)["weights"])
    assert str(cell_dir(tmp_path) / "state.pt") in store.problems["k"][0]
    assert (cell_dir(tmp_path) / "state.pt.damaged").exists()
    assert not (cell_dir(tmp_path) / "state.pt").exists()


@pytest.mark.parametrize("damage", ["truncated", "empty", "zeroed header", "garbage"])
def test_every_kind_of_damage_falls_back_and_never_raises(tmp_path, store, damage):
    store.save("k", state(10))
    store.save("k", state(20))
    path = cell_dir(tmp_path) / "state.pt"
    blob = path.read_bytes()
    path.write_bytes(
        {
            "truncated": blob[: len(blob) // 3],
            "empty": b"",
            "zeroed header": bytes(100) + blob[100:],
            "garbage": b"not a checkpoint at all",
        }[damage]
    )
    assert store.load("k")["step"] == 10
    assert "state.pt is damaged" in store.problems["k"][0]


def test_both_files_damaged_means_a_fresh_start(tmp_path, store):
    store.save("k", state(10))
    store.save("k", state(20))
    for name in ("state.pt", "previous.pt"):
        zero_block(cell_dir(tmp_path) / name)
    assert store.load("k") is None and len(store.problems["k"]) == 2
    assert store.inspect("k") == (None, [])  # both moved aside: nothing left to load


def test_a_checkpoint_written_before_digests_still_loads(tmp_path, store):
    cell_dir(tmp_path).mkdir(parents=True)
    torch.save(state(7), cell_dir(tmp_path) / "state.pt")
    assert store.load("k")["step"] == 7 and store.problems["k"] == []


def test_saves_use_unique_temp_files_and_leave_none_behind(tmp_path, store):
    store.save("k", state(1))
    store.save("k", state(2))
    assert sorted(p.name for p in cell_dir(tmp_path).iterdir()) == ["previous.pt", "state.pt"]


def test_the_header_tells_step_and_logged_through_without_the_state(tmp_path, store):
    store.save("k", {**state(40), "logged_through": 30})
    assert store.peek("k") == {"step": 40, "logged": 30} and store.peek("absent") == {}
    assert store.load("k")["logged_through"] == 30
    # a file with the digest alone (before the facts were added) loads, and tells nothing
    blob = (cell_dir(tmp_path) / "state.pt").read_bytes()
    header, _, payload = blob.partition(b"\n")
    (cell_dir(tmp_path) / "state.pt").write_bytes(header[: len(MAGIC) + 64] + b"\n" + payload)
    assert store.load("k")["step"] == 40 and store.problems["k"] == [] and store.peek("k") == {}


def test_a_run_behind_its_checkpoint_is_named():
    assert behind(30, 20) and "to step 20" in behind(30, 20) and "to step 30" in behind(30, 20)
    assert behind(30, 30) is None and behind(20, 30) is None  # the run holds as much, or more
    assert behind(None, 0) is None  # a checkpoint that predates the number: as before


TRAIN_TO = """
import sys
from scaling.trial.checkpoints import CheckpointStore
from scaling.planning.plan import load_plan
from papers.context_scaling.train import CellTrainer
plan = load_plan(sys.argv[1])
store = CheckpointStore(sys.argv[2])
for planned in plan.cells:
    trainer = CellTrainer(planned.cell, "cpu")
    for stop in map(int, sys.argv[3:]):
        trainer.train_until(stop, lambda s, v: None)
        store.save(planned.cell.key, trainer.state_dict())
"""


@pytest.mark.e2e
@pytest.mark.slow
def test_a_sweep_over_a_zeroed_checkpoint_ends_with_the_uninterrupted_numbers(tmp_path, tiny_sweep):
    tiny_sweep["name"] = "damaged"
    tiny_sweep["models"]["mlp"]["width"] = 64  # a checkpoint of a few dozen KiB
    tiny_sweep["grid"] = {"model": ["mlp"], "T": [4], "seed": [0]}
    path = tmp_path / "damaged.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    storage = tmp_path / "storage"
    plan = load_plan(path)
    (cell,) = [p.cell for p in plan.cells]
    # checkpoints at steps 10 and 20 of 30, as a trial writes them; then a block of the newest zeroed
    subprocess.run(
        [sys.executable, "-c", TRAIN_TO, str(path), str(storage / "damaged"), "10", "20"], check=True
    )
    state_file = storage / "damaged" / "checkpoints" / cell.key / "state.pt"
    zero_block(state_file)

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    with open(tmp_path / "dry.log", "w") as log:
        assert (
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "scaling.sweep",
                    str(path),
                    "--dry-run",
                    "--tracking-uri",
                    uri,
                    "--storage",
                    str(storage),
                ],
                stdout=log,
                stderr=subprocess.STDOUT,
            ).returncode
            == 0
        )
    assert "checkpoint damaged" in (tmp_path / "dry.log").read_text()
    with open(tmp_path / "run.log", "w") as log:
        assert start_driver(path, uri, str(storage), log).wait(timeout=300) == 0, (
            tmp_path / "run.log"
        ).read_text()
    client = MlflowClient(uri)
    (run,) = client.search_runs(
        [client.get_experiment_by_name("damaged").experiment_id], "tags.kind = 'cell'"
    )
    assert str(state_file) in run.data.tags["checkpoint_damaged"]
    assert [m.value for m in client.get_metric_history(run.info.run_id, "trial/resumed_from")] == [10]
    assert (state_file.parent / "state.pt.damaged").exists()

    tiny_sweep["name"] = "clean"
    clean = tmp_path / "clean.yaml"
    clean.write_text(yaml.safe_dump(tiny_sweep))
    clean_uri = f"sqlite:///{tmp_path}/clean.db"
    with open(tmp_path / "clean.log", "w") as log:
        assert start_driver(clean, clean_uri, str(tmp_path / "storage2"), log).wait(timeout=300) == 0
    clean_client = MlflowClient(clean_uri)
    (clean_run,) = clean_client.search_runs(
        [clean_client.get_experiment_by_name("clean").experiment_id], "tags.kind = 'cell'"
    )
    for name in ("eval/err", "baseline/least_squares"):
        resumed = [(m.step, m.value) for m in client.get_metric_history(run.info.run_id, name)]
        uninterrupted = [
            (m.step, m.value) for m in clean_client.get_metric_history(clean_run.info.run_id, name)
        ]
        assert sorted(resumed) == sorted(uninterrupted) and resumed
