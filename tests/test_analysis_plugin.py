"""A fourth experiment kind's analysis plug-in runs through ``python -m analysis`` with nothing but its module
and one registry line: tests/decay_kind.py (a test-only kind whose ``analysis`` names the plug-in) and
tests/decay_analysis.py (the plug-in: one verdict, one figure), registered here by one line in
scaling.kinds.registry.KINDS. Its cells are run by the project's trial code (scaling.trial.run.run_cell, no
Ray) into a real SQLite MLflow store, two variants of the sweep (``--set decay.scale=2`` and without); the
analysis of the ``--set`` variant, with ``--ui-url``, reads only its cells and writes, reports and logs them
as every kind's."""

from __future__ import annotations

import re

import pandas as pd
import pytest
import torch
import yaml
from mlflow.tracking import MlflowClient

from analysis.__main__ import main
from scaling.kinds.registry import KINDS
from scaling.planning.plan import load_plan
from scaling.tracking.tracker import Tracker
from scaling.trial.run import run_cell
from scaling.trial.spec import TrialMember, TrialSpec

SWEEP = {
    "name": "decay",
    "defaults": {"job": "decay", "decay": {"scale": 1.0}, "N": 4},
    "grid": {"seed": [0, 1]},
}
UI = "http://ui.example:5000"


@pytest.fixture
def decay_kind(monkeypatch):
    monkeypatch.setitem(KINDS, "decay", "decay_kind:DECAY")  # the kind's one registry line


def run_sweep(path, uri: str, storage, overrides: tuple[str, ...] = ()) -> None:
    """The sweep's cells run one by one by the trial code, logged under the sweep's parent run."""
    plan = load_plan(path, "", overrides)
    tracker = Tracker(uri)
    experiment = tracker.experiment_id(plan.name, create=True)
    parent = tracker.sweep_run(experiment, plan.name, plan.document)
    threads = torch.get_num_threads()  # a trial sets its own
    for planned in plan.cells:
        cell = planned.cell
        member = TrialMember(cell.to_dict(), cell.key, cell.name)
        spec = TrialSpec(
            (member,), cell.key, cell.name, {"cpu": 1}, uri, experiment, plan.name, str(storage), parent
        )
        run_cell(spec)
    torch.set_num_threads(threads)


def test_a_fourth_kinds_plugin_runs_through_python_m_analysis_with_set_and_ui_url(
    decay_kind, tmp_path, capsys
):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    path = tmp_path / "decay.yaml"
    path.write_text(yaml.safe_dump(SWEEP))
    run_sweep(path, uri, tmp_path / "storage")
    run_sweep(path, uri, tmp_path / "storage", ("decay.scale=2",))
    out = tmp_path / "out"

    argv = [str(path), "--set", "decay.scale=2", "--ui-url", UI, "--tracking-uri", uri, "--out", str(out)]
    assert main(argv) == 0
    printed = capsys.readouterr().out
    run_id = re.search(r"logged to MLflow as run (\w+)", printed).group(1)
    assert "analysis of decay [decay.scale=2]: 2 complete cells, 0 not complete" in printed  # the variant
    assert "note: 2 complete cells of the experiment are not cells of this sweep file as given" in printed
    assert "the error falls with n in 2 of 2 cells" in printed

    table = pd.read_parquet(out / "table.parquet")
    assert set(table["param.decay.scale"]) == {"2.0"} and table["cell_key"].nunique() == 2
    assert (table.groupby("cell_key")["err"].max() == 2.0).all()  # err(1) = scale
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert verdicts["verdict"].tolist() == ["the error falls with n in 2 of 2 cells"]
    assert {p.name for p in out.iterdir()} == {
        "table.parquet",
        "verdicts.csv",
        "decay.png",
        "decay.svg",
        "report.html",
    }

    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("decay").experiment_id
    page = (out / "report.html").read_text()
    assert "the error falls with n in 2 of 2 cells" in page and "data:image/png;base64" in page
    for cell_run in set(table["run_id"]) | {run_id}:  # every cell's run and the analysis's own, linked
        assert f'href="{UI}/#/experiments/{experiment}/runs/{cell_run}?workflowType=machine_learning"' in page
    run = client.get_run(run_id)
    parent = client.search_runs([experiment], "tags.kind = 'sweep'")[0]
    assert run.data.tags["kind"] == "analysis" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    assert {a.path for a in client.list_artifacts(run_id)} >= {"report.html", "decay.png", "verdicts.csv"}
