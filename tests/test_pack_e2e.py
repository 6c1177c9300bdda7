"""Packed sweeps end to end: the same MLflow runs (keys, names, metrics) as unpacked ones, and a packed
sweep whose driver is killed resumes without retraining complete members or duplicating runs.
"""

import signal
import time

import pytest
import ray
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.sweep.phases import run_sweep

pytestmark = pytest.mark.e2e


def runs(uri, experiment):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client, client.search_runs([exp.experiment_id], "tags.kind = 'cell'")


def test_packed_and_unpacked_sweeps_log_the_same_cells_and_numbers(tmp_path, tiny_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    tiny_sweep["grid"] = {"model": ["mlp"], "T": [4, "inf"], "seed": [0, 1]}
    uri, results = f"sqlite:///{tmp_path}/mlflow.db", {}
    ray.init(  # a Ray of its own, never one already running on this machine
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 * 1024**2,
        log_to_driver=False,
    )
    try:
        for pack in ("off", 4):
            tiny_sweep.update(name=f"pack-{pack}", run={"pack": pack})
            path = tmp_path / f"pack-{pack}.yaml"
            path.write_text(yaml.safe_dump(tiny_sweep))
            outcome = run_sweep(str(path), tracking_uri=uri, storage=str(tmp_path / "storage"))
            assert outcome.ok and len(outcome.completed) == 4
            client, found = runs(uri, f"pack-{pack}")
            results[pack] = {
                r.data.tags["cell_key"]: (
                    r.info.run_name,
                    r.data.params,
                    {
                        key: [
                            (m.step, m.value)
                            for m in sorted(
                                client.get_metric_history(r.info.run_id, key), key=lambda m: m.step
                            )
                        ]
                        for key in ("train/loss", "eval/err", "baseline/ridge")
                    },
                )
                for r in found
            }
            assert all(r.data.tags["status"] == "complete" for r in found)
    finally:
        ray.shutdown()
    unpacked, packed = results["off"], results[4]
    assert set(unpacked) == set(packed) and len(packed) == 4
    for key, (name, params, metrics) in unpacked.items():
        p_name, p_params, p_metrics = packed[key]
        assert p_name == name and p_params == params
        for metric, points in metrics.items():
            assert [s for s, _ in p_metrics[metric]] == [s for s, _ in points], metric
            assert [v for _, v in p_metrics[metric]] == pytest.approx(
                [v for _, v in points], rel=1e-4, abs=1e-6
            )


@pytest.mark.slow  # 23 s; a trial killed mid-run resumes from its checkpoint in test_cluster_failures
def test_packed_sweep_resumes_after_sigkill(tmp_path, tiny_sweep):
    """Two packs of 2 (run.pack: 2); the driver dies once a pack is complete; the rerun finishes the rest."""
    tiny_sweep.update(name="packcrash", run={"pack": 2, "max_concurrent": 1})
    tiny_sweep["defaults"]["train"].update(steps=600, checkpoint_every=50, log_every=50)
    tiny_sweep["grid"] = {"model": ["mlp"], "T": [2, 4], "seed": [0, 1]}
    path = tmp_path / "packcrash.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    with open(tmp_path / "first.log", "w") as log:
        first = start_driver(path, uri, storage, log)
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and " 2/4 cells done" not in (tmp_path / "first.log").read_text():
            time.sleep(0.2)
        first.send_signal(signal.SIGKILL)
        first.wait()
    assert " 2/4 cells done" in (tmp_path / "first.log").read_text(), (tmp_path / "first.log").read_text()
    client, before = runs(uri, "packcrash")
    complete_before = {
        r.data.tags["cell_key"]: r.info.end_time for r in before if r.data.tags["status"] == "complete"
    }
    assert 2 <= len(complete_before) < 4

    with open(tmp_path / "second.log", "w") as log:
        assert start_driver(path, uri, storage, log).wait(timeout=300) == 0, (
            tmp_path / "second.log"
        ).read_text()
    assert f"{4 - len(complete_before)} of 4 cells to run" in (tmp_path / "second.log").read_text()
    client, after = runs(uri, "packcrash")
    assert len(after) == 4 and len({r.data.tags["cell_key"] for r in after}) == 4
    for run in after:
        assert run.data.tags["status"] == "complete" and run.info.status == "FINISHED"
        if run.data.tags["cell_key"] in complete_before:
            assert run.info.end_time == complete_before[run.data.tags["cell_key"]]
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(50, 601, 50))
