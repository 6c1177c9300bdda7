"""End to end: a tiny sweep through a real local Ray and a throwaway SQLite MLflow, read back by analysis.

Checks the MLflow contract (one run per cell, tags, params, metrics, artifacts), that a finished sweep
trains nothing, that cells added to a sweep file are the only ones to run, and that analysis reads it.
"""

import math
from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient

from analysis.pipeline import analyse
from analysis.plugin import Request
from scaling.sweep.__main__ import main
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]


@pytest.fixture
def workspace(tmp_path, tiny_sweep, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    return path, f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")


def cell_runs(uri: str, experiment: str) -> list:
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id], "tags.kind = 'cell'")


def test_tiny_sweep_end_to_end_then_idempotent_then_extended(workspace, tiny_sweep, capsys):
    path, uri, storage = workspace
    tiny_sweep["defaults"]["eval"]["lambda_n"] = [2]  # the ridge-vs-lambda scan of Figs. 2-3
    path.write_text(yaml.safe_dump(tiny_sweep))
    outcome = run_sweep(str(path), tracking_uri=uri, storage=storage)
    assert outcome.ok and len(outcome.completed) == 2 and outcome.skipped == 0

    client = MlflowClient(uri)
    # a model-training experiment for MLflow 3 (not a GenAI one)
    assert client.get_experiment_by_name("tiny").tags["mlflow.experimentKind"] == "custom_model_development"
    runs = cell_runs(uri, "tiny")
    assert len(runs) == 2
    for run in runs:
        tags, params = run.data.tags, run.data.params
        assert tags["status"] == "complete" and tags["sweep"] == "tiny" and len(tags["cell_key"]) == 16
        assert run.info.status == "FINISHED"
        assert run.info.run_name in ("mlp T=4 N=4 seed=0", "mlp T=inf N=4 seed=0")
        assert params["task.d"] == "2" and params["model.arch"] == "mlp" and params["N"] == "4"
        assert params["T"] in ("4", "inf")  # as typed: the UI's filter params.T = '4' finds it
        # only the settings that apply to an MLP on linear regression; cell.yaml keeps every setting
        assert params["model.width"] == "16" and "eval.lambdas" in params  # lambda_n asks for the scan
        assert {"model.n_layer", "model.n_head", "model.layout", "task.hidden", "task.depth"}.isdisjoint(
            params
        )
        assert not {"train.curriculum.dims_inc", "train.curriculum.points_every"} & set(params)
        assert tags["mlflow.parentRunId"]
        losses = client.get_metric_history(run.info.run_id, "train/loss")
        assert [m.step for m in losses] == [5, 10, 15, 20, 25, 30]
        assert sorted(m.step for m in client.get_metric_history(run.info.run_id, "eval/err")) == [1, 2, 3, 4]
        for name in ("zero", "least_squares", "ridge"):
            assert len(client.get_metric_history(run.info.run_id, f"baseline/{name}")) == 4
        artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
        assert artifacts == {"cell.yaml", "curves.parquet", "model.pt"}
        full = yaml.safe_load(Path(client.download_artifacts(run.info.run_id, "cell.yaml")).read_text())
        assert full["model"]["n_layer"] == 8 and full["task"]["hidden"] == 100  # every setting, unread too
        curves = pd.read_parquet(client.download_artifacts(run.info.run_id, "curves.parquet"))
        assert set(curves.columns) >= {"predictor", "n", "err", "err_lo", "err_hi", "prompts"}
        assert (curves["err_lo"] <= curves["err"]).all() and (curves["err"] <= curves["err_hi"]).all()
        scan = curves[curves["lam"].notna()]
        assert set(scan["predictor"]) == {"ridge_lambda"} and set(scan["n"]) == {2} and len(scan) == 29
        assert not any(key.startswith("baseline/ridge_lambda") for key in run.data.metrics)
    assert len(set(r.data.tags["cell_key"] for r in runs)) == 2

    again = run_sweep(str(path), tracking_uri=uri, storage=storage)
    assert again.skipped == 2 and again.completed == [] and again.ok
    said = capsys.readouterr().out.splitlines()
    assert "nothing to train" in said[-5] and said[-4] == "next:", said  # what to run next, as after a run
    assert said[-3] == f"  python -m analysis {path}"  # the store is the default, ./mlflow.db
    assert said[-1].startswith("  open http")
    assert len(cell_runs(uri, "tiny")) == 2

    tiny_sweep["grid"]["seed"] = [0, 1]
    path.write_text(yaml.safe_dump(tiny_sweep))
    extended = run_sweep(str(path), tracking_uri=uri, storage=storage)
    assert extended.skipped == 2 and len(extended.completed) == 2
    runs = cell_runs(uri, "tiny")
    assert len(runs) == 4 and all(r.data.tags["status"] == "complete" for r in runs)

    result = analyse(Request(str(path), tracking_uri=uri, out=path.parent / "out", bootstrap=50))
    table = result.table
    assert table["cell_key"].nunique() == 4
    assert set(table["predictor"]) == {"model", "zero", "least_squares", "ridge"}
    assert set(table["T"]) == {4.0, math.inf} and set(table["seed"]) == {0, 1}
    assert set(result.scans["lam"].notna()) == {True} and result.scans["cell_key"].nunique() == 4
    for name in (
        "table.parquet",
        "ridge_lambda.parquet",
        "ridge_lambda.png",
        "context_scaling.png",
        "task_scaling.png",
        "report.html",
    ):
        assert (path.parent / "out" / name).exists(), name
    analysis_runs = MlflowClient(uri).search_runs(
        [MlflowClient(uri).get_experiment_by_name("tiny").experiment_id], "tags.kind = 'analysis'"
    )
    assert len(analysis_runs) == 1


def test_dry_run_lists_state_and_runs_nothing(workspace, capsys):
    path, uri, storage = workspace
    assert main([str(path), "--dry-run", "--tracking-uri", uri, "--storage", storage]) == 0
    out = capsys.readouterr().out
    assert "mlp T=4 N=4 seed=0" in out and "totals: 2 pending" in out
    assert "estimated training compute" in out and "FLOP over 2 cells" in out
    assert not (path.parent / "mlflow.db").exists()


def test_invalid_sweep_exits_2_and_writes_nothing(workspace, tiny_sweep, capsys):
    path, uri, storage = workspace
    tiny_sweep["grid"]["T"] = [4, -1]
    path.write_text(yaml.safe_dump(tiny_sweep))
    assert main([str(path), "--tracking-uri", uri, "--storage", storage]) == 2
    assert "grid.T[1]" in capsys.readouterr().err
    assert not (path.parent / "mlflow.db").exists() and not (path.parent / "storage").exists()


def test_cell_that_fails_is_reported_and_does_not_block_others(workspace, tiny_sweep, capsys):
    path, uri, storage = workspace
    tiny_sweep["run"] = {"max_failures": 0}
    tiny_sweep["grid"] = {"model": ["mlp"], "train.lr": [1e-3, 1e30], "T": [4]}  # lr 1e30 diverges to NaN
    path.write_text(yaml.safe_dump(tiny_sweep))
    outcome = run_sweep(str(path), tracking_uri=uri, storage=storage)
    assert len(outcome.completed) == 1 and len(outcome.failed) == 1
    assert "NaN" in next(iter(outcome.failed.values()))
    statuses = sorted(r.data.tags["status"] for r in cell_runs(uri, "tiny"))
    assert statuses == ["complete", "failed"]
    assert "FAILED" in capsys.readouterr().out
