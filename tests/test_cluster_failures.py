"""Failures played for real on a multi-node Ray cluster inside this machine (ray.cluster_utils.Cluster).

The head advertises no CPU or GPU, as on the real cluster (cluster.yaml), so every trial runs on a worker
node; worker nodes have *logical* GPUs, so GPU scheduling is real while the trials train on the CPU
(trial_device uses CUDA only where torch sees it). Checks: four 0.25-GPU cells run at once on one GPU;
a cell that no single node can hold is refused before anything is written; a worker node removed in the
middle of a trial leads to the trial finishing from its checkpoint, with one complete loss history. The
four 0.25-GPU cells are in the slow suite.
"""

import time

import pytest
import ray
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient
from ray.cluster_utils import Cluster

from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main
from scaling.sweep.phases import run_sweep
from scaling.trial.checkpoints import CheckpointStore

pytestmark = pytest.mark.e2e


@pytest.fixture
def cluster():
    cluster = Cluster(
        initialize_head=True,
        head_node_args={
            "num_cpus": 0,
            "num_gpus": 0,
            "object_store_memory": 80 * 1024**2,
            "include_dashboard": False,
        },
    )
    yield cluster
    ray.shutdown()
    cluster.shutdown()


def connect(cluster):
    ray.init(address=cluster.address, log_to_driver=False)


def write_sweep(tmp_path, tiny_sweep, name, resources, grid, steps, every):
    tiny_sweep["name"] = name
    tiny_sweep["defaults"]["train"].update(
        steps=steps, checkpoint_every=every, log_every=every, device="auto"
    )
    tiny_sweep["models"]["gpt2"]["resources"] = resources
    tiny_sweep["grid"] = grid
    tiny_sweep["run"] = {"max_failures": 2}
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    return path, f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")


def cell_runs(uri, experiment):
    client = MlflowClient(uri)
    return client, client.search_runs(
        [client.get_experiment_by_name(experiment).experiment_id], "tags.kind = 'cell'"
    )


@pytest.mark.slow  # Ray's fractional scheduling, 30 s; the 0.25-GPU requests: tests/test_plan.py
def test_four_quarter_gpu_cells_share_one_gpu_at_once(cluster, tmp_path, tiny_sweep):
    cluster.add_node(num_cpus=4, num_gpus=1)
    connect(cluster)
    path, uri, storage = write_sweep(
        tmp_path,
        tiny_sweep,
        "pack",
        {"cpu": 1, "gpu": 0.25},
        {"model": ["gpt2"], "seed": [0, 1, 2, 3]},
        steps=1500,
        every=100,
    )
    outcome = run_sweep(str(path), tracking_uri=uri, storage=storage)
    assert outcome.ok and len(outcome.completed) == 4

    _, runs = cell_runs(uri, "pack")
    assert len(runs) == 4 and all(r.data.tags["status"] == "complete" for r in runs)
    starts = [r.info.start_time for r in runs]
    ends = [r.info.end_time for r in runs]
    # One logical GPU, 0.25 each: all four ran at once (the last started before the first ended).
    assert max(starts) < min(ends), (starts, ends)


def test_cell_no_single_node_can_hold_is_refused_before_anything_is_written(
    cluster, tmp_path, tiny_sweep, capsys
):
    cluster.add_node(num_cpus=1, num_gpus=1)  # a GPU node with one CPU
    cluster.add_node(num_cpus=4, num_gpus=0, resources={"big_memory": 1})
    connect(cluster)
    # 2 CPUs + 1 GPU: the cluster has 5 CPUs and a GPU in all, but no node has both.
    path, uri, storage = write_sweep(
        tmp_path, tiny_sweep, "wide", {"cpu": 2, "gpu": 1}, {"model": ["gpt2"]}, steps=10, every=10
    )
    assert main([str(path), "--tracking-uri", uri, "--storage", storage, "--address", cluster.address]) == 2
    err = capsys.readouterr().err
    assert "asks one node for CPU=2, GPU=1" in err and "CPU=1, GPU=1" in err and "CPU=4" in err

    # A custom resource counts too: big_memory exists, but not on the GPU node.
    path, uri, storage = write_sweep(
        tmp_path,
        tiny_sweep,
        "custom",
        {"cpu": 1, "gpu": 1, "custom": {"big_memory": 1}},
        {"model": ["gpt2"]},
        steps=10,
        every=10,
    )
    assert main([str(path), "--tracking-uri", uri, "--storage", storage, "--address", cluster.address]) == 2
    assert "big_memory=1" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "custom.yaml",
        "wide.yaml",
    ]  # no mlflow.db, no storage


def test_worker_node_lost_mid_trial_finishes_from_its_checkpoint(cluster, tmp_path, tiny_sweep):
    first = cluster.add_node(num_cpus=1, num_gpus=1)
    steps, every = 1000, 50
    path, uri, storage = write_sweep(
        tmp_path, tiny_sweep, "lost", {"cpu": 1, "gpu": 1}, {"model": ["gpt2"]}, steps=steps, every=every
    )
    key = load_plan(path).cells[0].cell.key
    store = CheckpointStore(f"{storage}/lost")
    with open(tmp_path / "driver.log", "w") as log:
        driver = start_driver(path, uri, storage, log, "--address", cluster.address)
        try:
            deadline = time.monotonic() + 240
            while (store.step(key) or 0) < 2 * every:  # two checkpoints written: mid-trial
                assert driver.poll() is None and time.monotonic() < deadline, (
                    tmp_path / "driver.log"
                ).read_text()
                time.sleep(0.05)
            cluster.remove_node(first, allow_graceful=False)  # the trial's worker dies with its node
            killed_at = store.step(key)  # its last checkpoint
            cluster.add_node(num_cpus=1, num_gpus=1)
            code = driver.wait(timeout=300)
        finally:
            if driver.poll() is None:
                driver.kill()
    output = (tmp_path / "driver.log").read_text()
    assert code == 0, output
    assert killed_at < steps, f"the node was removed after training ended (step {killed_at})"

    client, runs = cell_runs(uri, "lost")
    assert len(runs) == 1 and runs[0].data.tags["status"] == "complete"
    run_id = runs[0].info.run_id
    losses = [m.step for m in client.get_metric_history(run_id, "train/loss")]
    assert losses == list(range(every, steps + 1, every))  # whole history, no step twice
    resumed = [m.value for m in client.get_metric_history(run_id, "trial/resumed_from")]
    # One restart, from the last checkpoint: the one seen when the node was removed, or a later one the
    # dying worker still wrote before it stopped (removal is not instantaneous); never from scratch.
    assert len(resumed) == 1 and killed_at <= resumed[0] < steps and resumed[0] % every == 0, (
        resumed,
        killed_at,
    )
