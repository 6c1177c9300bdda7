"""The worked example (examples/quadratic.py and its sweep, docs/extending.md), run as a researcher runs it:
from a folder of their own outside the repository, by the documented commands, through a real local Ray and
a fresh MLflow store, at its tiny profile. Its task family, its two models (an LSTM that trains alone, a
smoother MLP that packs), its feature map and its baseline are all plug-ins named in the sweep file.

- the sweep: every cell complete, the MLP cells in one pack, the LSTM cells one per trial;
- the same command again trains nothing;
- the analysis: tables, fits, verdicts, figures and a report that names the plug-ins and their versions;
- the module's source changed under the same version: the sweep is refused, naming the plug-in and its
  cells; ``--accept-plugin-changes`` counts them as current; a new version of one plug-in is new cells.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[1]


def run(folder: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    """A documented command, from the researcher's folder (its store and checkpoints land there)."""
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=folder, capture_output=True, text=True, timeout=timeout
    )


@pytest.fixture(scope="module")
def swept(tmp_path_factory):
    """The example copied to a folder outside the repository and swept once at its tiny profile."""
    folder = tmp_path_factory.mktemp("my-experiment")
    for name in ("quadratic.py", "quadratic.yaml"):
        shutil.copy(ROOT / "examples" / name, folder / name)
    done = run(folder, "scaling.sweep", "quadratic.yaml", "--profile", "tiny")
    return folder, done


def test_the_example_sweeps_with_the_mlp_cells_packed_and_the_lstm_alone(swept):
    folder, done = swept
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "12 cells trained in 7 trials (small cells packed together), 0 failed; 12/12 cells complete" in (
        done.stdout
    )
    assert "pack of 6: smoother_mlp" in done.stdout and "pack of" not in re.sub(
        r"pack of 6: smoother_mlp", "", done.stdout
    )
    assert (folder / "mlflow.db").is_file()


def test_the_same_command_again_trains_nothing(swept):
    folder, _ = swept
    again = run(folder, "scaling.sweep", "quadratic.yaml", "--profile", "tiny")
    assert again.returncode == 0, again.stderr[-3000:]
    assert "all 12 cells are complete" in again.stdout and "nothing to train" in again.stdout


def test_the_analysis_judges_draws_and_names_the_plugins(swept):
    folder, _ = swept
    done = run(folder, "analysis", "quadratic.yaml", "--profile", "tiny")
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    out = folder / "analysis_out" / "quadratic-tiny"
    assert {"report.html", "table.parquet", "fits.csv", "verdicts.csv", "task_scaling.png"} <= {
        p.name for p in out.iterdir()
    }
    verdicts = pd.read_csv(out / "verdicts.csv")
    assert set(verdicts["model"]) >= {"lstm", "smoother_mlp"} and verdicts["verdict"].notna().all()
    table = pd.read_parquet(out / "table.parquet")
    assert {"model", "quadratic:QuadraticLeastSquares", "least_squares", "zero"} <= set(table["predictor"])
    report = (out / "report.html").read_text()
    for plugin in ("quadratic:Quadratic", "quadratic:LSTM", "quadratic:SmootherMLP"):
        assert re.search(rf"plug-in {plugin} version 1 \(source [0-9a-f]{{16}}\): (6|12) cells", report), (
            plugin
        )
    assert "plug-in quadratic:QuadraticLeastSquares version 1" in done.stdout


def test_a_changed_source_under_the_same_version_is_refused_then_accepted_or_versioned(swept):
    folder, _ = swept
    module = folder / "quadratic.py"
    original = module.read_text()
    try:
        module.write_text(original + "\n# an edit that may change what the plug-ins compute\n")
        refused = run(folder, "scaling.sweep", "quadratic.yaml", "--profile", "tiny")
        assert refused.returncode == 2, refused.stdout[-2000:]
        line = refused.stderr.strip().splitlines()[-1]
        assert (
            "plug-in quadratic:Quadratic version 1: its source changed since these cells ran: lstm T=16"
            in line
        )
        assert "Give the plug-in a new version" in line and "--accept-plugin-changes" in line
        accepted = run(
            folder, "scaling.sweep", "quadratic.yaml", "--profile", "tiny", "--accept-plugin-changes"
        )
        assert accepted.returncode == 0, accepted.stderr[-2000:]
        assert "counted as current (--accept-plugin-changes)" in accepted.stdout
        assert "nothing to train" in accepted.stdout
        module.write_text(
            original.replace('class LSTM:\n    """', 'class LSTM:\n    """(v2) ', 1).replace(
                'Settings = LSTMSettings\n    version = "1"', 'Settings = LSTMSettings\n    version = "2"'
            )
        )
        # the module's every plug-in changed source with it: the LSTM's cells are new, the rest accepted
        planned = run(
            folder,
            "scaling.sweep",
            "quadratic.yaml",
            "--profile",
            "tiny",
            "--dry-run",
            "--accept-plugin-changes",
        )
        assert planned.returncode == 0, planned.stderr[-2000:]
        states = re.findall(r"^(\w+) T=\S+ N=6 seed=\d\s.*\s(pending|complete)$", planned.stdout, re.M)
        assert sorted(set(states)) == [("lstm", "pending"), ("smoother_mlp", "complete")], planned.stdout
    finally:
        module.write_text(original)
