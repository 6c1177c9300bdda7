"""A tracking store restored from a backup older than the storage (the head's disk lost: docs/cluster.md):
the sweep notices that checkpoints are ahead of their runs, says which cells it trains again, and ends
with every cell complete once, each loss point once, and the cells complete in the backup untouched.

The quick form of tests/test_head_loss.py's second test (a real cluster and PostgreSQL, slow): the
embedded Ray and a SQLite store whose backup is a copy of its file.
"""

import shutil

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

pytestmark = pytest.mark.e2e

STEPS, EVERY = 300, 100


# 45 s (slow); the checkpoint checks it relies on run by default (tests/test_checkpoint_integrity.py)
@pytest.mark.slow
def test_a_store_older_than_the_storage_is_noticed_and_its_cells_trained_again(tmp_path, tiny_sweep):
    tiny_sweep["name"] = "restored"
    tiny_sweep["defaults"]["train"].update(steps=STEPS, checkpoint_every=EVERY, log_every=EVERY)
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [4], "seed": [0]}
    path = tmp_path / "restored.yaml"
    db = tmp_path / "mlflow.db"
    uri, storage = f"sqlite:///{db}", str(tmp_path / "storage")
    flush = {"SCALING_LOSS_FLUSH_S": "0"}  # losses reach the store at every checkpoint

    def sweep(name: str) -> str:
        path.write_text(yaml.safe_dump(tiny_sweep))
        with open(tmp_path / f"{name}.log", "w") as log:
            code = start_driver(path, uri, storage, log, **flush).wait(timeout=300)
        text = (tmp_path / f"{name}.log").read_text()
        assert code == 0, text
        return text

    sweep("first")  # seed 0 complete
    shutil.copy(db, tmp_path / "backup.db")  # the backup
    tiny_sweep["grid"]["seed"] = [0, 1, 2]
    sweep("second")  # seeds 1 and 2 complete after the backup
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("restored").experiment_id
    before = {r.data.tags["cell_key"]: r for r in client.search_runs([experiment], "tags.kind = 'cell'")}
    shutil.copy(tmp_path / "backup.db", db)  # restored: seeds 1 and 2 are gone from the store
    assert len(client.search_runs([experiment], "tags.kind = 'cell'")) == 1

    with open(tmp_path / "dry-run.log", "w") as log:  # --dry-run shows what the rerun will do
        assert start_driver(path, uri, storage, log, "--dry-run", **flush).wait(timeout=300) == 0
    dry = (tmp_path / "dry-run.log").read_text()
    assert "totals: 2 behind the tracking store, 1 complete" in dry, dry

    text = sweep("after-restore")
    (said,) = [line for line in text.splitlines() if "the tracking store is behind the storage" in line]
    late = {k: r for k, r in before.items() if r.data.params["seed"] != "0"}
    assert "for 2 cells" in said and all(r.info.run_name in said for r in late.values()), said
    assert "1 already complete" in text

    runs = {r.data.tags["cell_key"]: r for r in client.search_runs([experiment], "tags.kind = 'cell'")}
    assert sorted(runs) == sorted(before)  # one run per cell: none counted twice, none skipped
    for key, run in runs.items():
        assert run.data.tags["status"] == "complete"
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(EVERY, STEPS + 1, EVERY)), (key, steps)  # each point once
        assert run.data.metrics["eval/err"] == before[key].data.metrics["eval/err"]  # the same numbers
        if key in late:  # trained again from step 0: said in its run, not resumed
            assert "trained again from step 0" in run.data.tags["redone"]
            assert not client.get_metric_history(run.info.run_id, "trial/resumed_from")
        else:  # complete in the backup: untouched
            assert run.info.run_id == before[key].info.run_id and "redone" not in run.data.tags
            assert run.info.end_time == before[key].info.end_time
