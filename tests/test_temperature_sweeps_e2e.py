"""End to end: the LLaMA sweep's quick profile through a real local Ray and a throwaway SQLite MLflow
(sizes cut further by --set), and a scan of a model that a training sweep logged. The GPT-2 scan's quick
profile is checked on the sweep that tests/test_temperature_protocols.py runs for Fig. 6."""

from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from papers.temperature.tiny_llm import save_tiny_llama
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]
SWEEPS = Path(__file__).parent.parent / "sweeps"


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")


def only_cell_run(uri: str, experiment: str):
    client = MlflowClient(uri)
    runs = client.search_runs([client.get_experiment_by_name(experiment).experiment_id], "tags.kind = 'cell'")
    assert len(runs) == 1
    return client, runs[0]


def test_scan_of_a_model_a_training_sweep_logged(store, tiny_sweep, tmp_path):
    uri, storage = store
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": ["inf"], "seed": [0]}
    (tmp_path / "tiny.yaml").write_text(yaml.safe_dump(tiny_sweep))
    assert run_sweep(str(tmp_path / "tiny.yaml"), tracking_uri=uri, storage=storage).ok
    scan = {
        "name": "scan",
        "defaults": {
            "job": "gpt2_scan",
            "task": {"d": 2, "noise_std": 0.1},
            "N": 4,
            "model": {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8},
            "eval": {"prompts": 32, "bootstrap": 20, "baselines": ["zero"]},
            "temperature": {
                "from_sweep": "tiny",
                "from_params": {"model.name": "gpt2", "T": "inf"},
                "taus": [1, 3],
            },
        },
        "resources": {"cpu": 1},
    }
    (tmp_path / "scan.yaml").write_text(yaml.safe_dump(scan))
    assert run_sweep(str(tmp_path / "scan.yaml"), tracking_uri=uri, storage=storage).ok
    client, run = only_cell_run(uri, "scan")
    assert len(client.get_metric_history(run.info.run_id, "temperature/tau_3")) == 4
    assert "model.pt" not in {a.path for a in client.list_artifacts(run.info.run_id)}


def test_llama_quick_profile_with_the_tiny_model(store, tmp_path):
    uri, storage = store
    llm = save_tiny_llama(tmp_path / "tiny-llama")
    overrides = (
        f"temperature.llm={llm}",
        "temperature.n_demos=[2]",
        "temperature.n_test=2",
        "temperature.mc_runs=1",
        "temperature.max_new_tokens=4",
        "temperature.taus=[0.5,2]",
    )
    outcome = run_sweep(
        str(SWEEPS / "temp_llama_a.yaml"), "quick", overrides, tracking_uri=uri, storage=storage
    )
    assert outcome.ok and len(outcome.completed) == 1
    client, run = only_cell_run(uri, "temp-llama-a-quick")
    assert run.data.params["temperature.sciq_train"].endswith("tests/fixtures/sciq_tiny_train.json")
    for tau in ("0.5", "2"):
        assert [m.step for m in client.get_metric_history(run.info.run_id, f"temperature/tau_{tau}")] == [2]
    assert run.data.metrics["tau_best"] in (0.5, 2.0)
    assert ("tau_heuristic" in run.data.metrics) == (run.data.metrics["score_diag_m1"] > 0)  # App. J
    curves = pd.read_parquet(client.download_artifacts(run.info.run_id, "curves.parquet"))
    assert set(curves["predictor"]) == {"tau=0.5", "tau=2"} and (curves["prompts"] == 2).all()
