"""Two real drivers (two processes, each with its own local Ray) on the same sweep, the same MLflow store
and the same storage, started together and 10 s apart: every cell is trained exactly once (one owner ever
took its lease), each ends with one complete run, and every metric point is logged once."""

import time

import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.planning.plan import load_plan
from scaling.trial.leases import Leases

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

STEPS, EVERY = 600, 100


def two_drivers(tmp_path, tiny_sweep, name, delay):
    tiny_sweep["name"] = name
    tiny_sweep["defaults"]["train"].update(steps=STEPS, checkpoint_every=EVERY, log_every=EVERY)
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [2, 4, 8, 16], "seed": [0]}
    tiny_sweep["run"] = {"pack": "off"}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    logs = [open(tmp_path / f"driver{i}.log", "w") for i in (1, 2)]
    first = start_driver(path, uri, storage, logs[0], "--num-cpus", "1")
    time.sleep(delay)
    second = start_driver(path, uri, storage, logs[1], "--num-cpus", "1")
    codes = [first.wait(timeout=400), second.wait(timeout=400)]
    for log in logs:
        log.close()
    texts = [(tmp_path / f"driver{i}.log").read_text() for i in (1, 2)]
    assert codes == [0, 0], "\n\n".join(texts)
    return load_plan(path), uri, storage, texts


def check_each_cell_trained_once(plan, uri, storage, name):
    leases = Leases(f"{storage}/{name}")
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(name).experiment_id], "tags.kind = 'cell'")
    assert sorted(r.data.tags["cell_key"] for r in runs) == sorted(p.cell.key for p in plan.cells)
    drivers = set()
    for run in runs:
        key = run.data.tags["cell_key"]
        takes = leases.history(key)
        assert len(takes) == 1, f"cell {key} was taken {len(takes)} times: {takes}"
        drivers.add(takes[0]["driver"])
        assert run.data.tags["status"] == "complete" and run.info.status == "FINISHED"
        losses = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert losses == list(range(EVERY, STEPS + 1, EVERY)), losses  # each point once
        errors = [m.step for m in client.get_metric_history(run.info.run_id, "eval/err")]
        assert errors and len(errors) == len(set(errors)), errors  # each n once
        assert not list((leases.root.parent / "checkpoints" / key).glob("*.tmp"))
    return drivers


@pytest.mark.parametrize("delay", [0, 10], ids=["together", "10s-apart"])
def test_two_drivers_train_every_cell_exactly_once(tmp_path, tiny_sweep, delay):
    name = f"pair{delay}"
    plan, uri, storage, texts = two_drivers(tmp_path, tiny_sweep, name, delay)
    drivers = check_each_cell_trained_once(plan, uri, storage, name)
    print(f"delay {delay}s: cells trained by {len(drivers)} driver(s): {sorted(drivers)}")
    for text in texts:
        assert "Traceback" not in text
