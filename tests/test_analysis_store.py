"""The analysis read from a real (throwaway SQLite) MLflow store filled as the sweep driver fills it:
load_table's cache (a warm read downloads nothing), the report's contents, the comparison of two sweeps,
and, marked slow, a thousand runs read back with a warm cache."""

import math
import re
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from synthetic_tables import lattice_table, write_store

from analysis.__main__ import main
from analysis.pipeline import analyse
from analysis.plugin import Request
from analysis.report import answer_html, interval_text
from scaling.tracking.table import RunNames, cell_runs, load_table
from scaling.tracking.tracker import Tracker

ERROR = "Traceback ...\nRuntimeError: loss is NaN at step 120"


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    table = lattice_table(
        rng=np.random.default_rng(0),
        Ts=(100, 1e5, math.inf),
        Ns=(5, 10, 20),
        seeds=(0, 1, 2),
        sweep="fig1-quick",
    )
    write_store(uri, table, tmp_path / "a", failed={"mlp T=1e6 N=10 seed=0": ERROR})
    return uri, table


def count_downloads(monkeypatch) -> list:
    """A spy on the real Tracker.download (each artifact fetched from the store): records each call and
    passes it through."""
    calls, real = [], Tracker.download

    def spy(self, run_id, artifact, directory, artifact_uri=None):
        calls.append(run_id)
        return real(self, run_id, artifact, directory, artifact_uri)

    monkeypatch.setattr(Tracker, "download", spy)
    return calls


def test_a_cold_read_beside_another_reader_of_the_same_cache_reads_every_run(store, tmp_path):
    """Two processes reading one store into one cache (an analysis beside a replay) download the same runs
    at once; each downloads into a folder of its own. Here the other reader is mid-download of every run
    (its partial files lie in the cache) when this one reads: it still reads every run, leaves the other's
    files alone and caches each run once."""
    uri, expected = store
    cache = tmp_path / "cache"
    runs = [r.run_id for r in cell_runs(uri, "fig1-quick") if r.status == "complete"]
    for run_id in runs:  # the other reader's downloads in flight, under the names it would use
        (cache / f".{run_id}").mkdir(parents=True)
        (cache / f".{run_id}" / "curves.parquet").write_bytes(b"partial")
    table, _ = load_table(uri, "fig1-quick", cache_dir=cache, in_place=False)
    assert table["cell_key"].nunique() == expected["cell_key"].nunique()
    assert all((cache / f".{run_id}" / "curves.parquet").read_bytes() == b"partial" for run_id in runs)
    assert sorted(p.name for p in cache.glob("*.parquet")) == sorted(f"{r}.parquet" for r in runs)


def test_cold_read_downloads_each_run_once_and_warm_read_none(store, tmp_path, monkeypatch):
    uri, expected = store
    calls = count_downloads(monkeypatch)
    cold, missing = load_table(uri, "fig1-quick", cache_dir=tmp_path / "cache", in_place=False)
    cells = expected["cell_key"].nunique()
    assert len(calls) == cells == cold.attrs["downloads"] == len(set(calls))
    warm, _ = load_table(uri, "fig1-quick", cache_dir=tmp_path / "cache", in_place=False)
    assert len(calls) == cells and warm.attrs["downloads"] == 0
    pd.testing.assert_frame_equal(cold, warm)
    # the store's artifacts are on this file system: the default reads them where they lie, the same table
    local, _ = load_table(uri, "fig1-quick", cache_dir=tmp_path / "untouched")
    assert len(calls) == cells and local.attrs["downloads"] == 0 and not (tmp_path / "untouched").exists()
    pd.testing.assert_frame_equal(cold, local)
    key = ["cell_key", "predictor", "n"]
    got = cold.sort_values(key, ignore_index=True)
    want = expected.sort_values(key, ignore_index=True)
    np.testing.assert_allclose(got["err"], want["err"])
    assert (got[["model", "T", "N", "seed"]].to_numpy() == want[["model", "T", "N", "seed"]].to_numpy()).all()
    assert got["param.task.family"].eq("linear").all()
    assert missing[["name", "status", "error"]].values.tolist() == [
        ["mlp T=1e6 N=10 seed=0", "failed", "RuntimeError: loss is NaN at step 120"]
    ]


FORKED_READ = """
import sys
import pandas as pd
import scaling.tracking.table as table

uri = sys.argv[1]
threads, _ = table.load_table(uri, "fig1-quick")  # fewer runs than FORKED_READ: read on threads
forks = []


class Counted(table.Aside):
    def __init__(self, work):
        super().__init__(work)
        forks.append(self.pid)


table.Aside, table.FORKED_READ = Counted, 2
forked, _ = table.load_table(uri, "fig1-quick")
assert len(forks) == 1 and forks[0], forks  # half of the curves read by a forked child
pd.testing.assert_frame_equal(threads, forked)
assert threads.attrs["downloads"] == forked.attrs["downloads"] == 0
print(len(forked))
"""


def test_curves_read_by_two_processes_make_the_table_one_reads_on_threads(store):
    """In a new interpreter, as `python -m analysis` runs (this one holds threads earlier tests left, and a
    child is never forked beside a thread)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    done = subprocess.run(
        [sys.executable, "-c", FORKED_READ, store[0]], cwd=root, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == len(store[1])


PLANNED_BESIDE = """
import sys
import analysis.pipeline as pipeline
from analysis.plugin import AnalysisError, Request

uri, sweep = sys.argv[1], sys.argv[2]
forks = []


class Counted(pipeline.Aside):
    def __init__(self, work):
        super().__init__(work)
        forks.append(self.pid)


pipeline.Aside = Counted
request = Request(sweep, profile="quick", tracking_uri=uri)
source, runs = pipeline.planned_beside_runs(request, uri)
assert len(forks) == 1 and forks[0], forks  # planned in a child while this process read the store
assert source == pipeline.resolve(request)
assert [r.run_id for r in runs] == [r.run_id for r in pipeline.cell_runs(uri, "fig1-quick")]
bad = Request(sweep, profile="quick", overrides=("train.steps=-5",), tracking_uri="sqlite:////nowhere/x.db")
try:
    pipeline.planned_beside_runs(bad, bad.tracking_uri)
except AnalysisError as err:  # the plan's error, not the missing store's
    assert "train.steps" in str(err) and "nowhere" not in str(err), err
else:
    raise AssertionError("a bad plan was accepted")
print(len(runs))
"""


def test_a_sweep_planned_beside_the_store_read_is_the_sweep_planned_alone(store):
    """In a new interpreter, as `python -m analysis` runs (a child is never forked beside a thread)."""
    import os
    import subprocess
    import sys

    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(root)}
    code = [sys.executable, "-c", PLANNED_BESIDE, store[0], str(root / "sweeps" / "fig1.yaml")]
    done = subprocess.run(code, cwd=root, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-3000:]
    assert int(done.stdout.split()[-1]) == store[1]["cell_key"].nunique() + 1  # and the failed cell's run


def test_frames_made_from_the_table_share_its_run_names_instead_of_copying_them():
    """pandas deep-copies attrs into each frame made from a frame; the run names are shared (a 2,000-cell
    analysis spent half its time copying them)."""
    names = RunNames({"r1": "gpt2 T=16 N=8 seed=0", "r2": "gpt2 T=16 N=8 seed=1"})
    table = pd.DataFrame({"run_id": ["r1", "r2"], "err": [0.5, 0.25]})
    table.attrs["runs"] = names
    parts = [part for _, part in table.groupby("run_id")]
    assert table[table["err"] > 0.3].attrs["runs"] is names
    assert all(part.attrs["runs"] is names for part in parts)


def test_report_has_the_answer_verdicts_fits_missing_cells_and_runs(store, tmp_path):
    uri, _ = store
    result = analyse(Request(None, "fig1-quick", tracking_uri=uri, out=tmp_path / "out", bootstrap=30))
    assert isinstance(result.table.attrs["runs"], RunNames)  # shared by every frame made from the table
    page = (tmp_path / "out" / "report.html").read_text()
    assert answer_html(result.answer()) in page and "gpt2 context-scales" in result.answer()
    for heading in (
        "Verdicts",
        "Figures",
        "Scaling-law fits",
        "Cells not complete",
        "MLflow runs",
        "Sweep settings",
    ):
        assert f"<h2>{heading}" in page
    verdicts = result.verdicts
    assert set(verdicts["verdict"]) <= {
        "context-scales",
        "context-scales weakly",
        "does not context-scale",
        "task-scales",
        "task-scales weakly",
        "does not task-scale",
        "inconclusive",
        "at chance",
    }
    assert all(v in page for v in verdicts["verdict"].unique())
    fitted = result.fits[result.fits["converged"] & (result.fits["form"] == "context")]
    assert len(fitted) and all(
        interval_text(r.alpha, r.alpha_lo, r.alpha_hi, "alpha") in page for r in fitted.itertuples()
    )  # value [interval] for each fit (an end at the exponent's bound written open)
    csv = pd.read_csv(tmp_path / "out" / "fits.csv")
    np.testing.assert_array_equal(
        csv["alpha_lo"].to_numpy(), result.fits["alpha_lo"].to_numpy()
    )  # full precision
    assert "RuntimeError: loss is NaN at step 120" in page
    assert all(run_id in page for run_id in result.table["run_id"].unique())
    assert len(re.findall("data:image/png;base64", page)) == 1
    for name in ("fig1.png", "fig1.svg", "table.parquet", "fits.csv", "verdicts.csv"):
        assert (tmp_path / "out" / name).exists()
    client = MlflowClient(uri)
    run = client.get_run(result.run_id)
    parent = client.search_runs([run.info.experiment_id], "tags.kind = 'sweep'")[0]
    assert run.data.tags["kind"] == "analysis" and run.data.tags["mlflow.parentRunId"] == parent.info.run_id
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"report.html", "fig1.png", "table.parquet", "fits.csv"} <= artifacts
    logged = Path(client.download_artifacts(result.run_id, "report.html", str(tmp_path))).read_text()
    assert (
        f'/runs/{result.run_id}?workflowType=machine_learning"><code>{result.run_id}</code></a>' in logged
    )  # the report names its own run


def test_compare_two_sweeps_in_one_report(store, tmp_path, capsys):
    uri, first = store
    second = lattice_table(
        rng=np.random.default_rng(5), Ts=(1e5, math.inf), Ns=(5, 10, 20, 40), seeds=(0, 1), sweep="fig1"
    )
    write_store(uri, second, tmp_path / "b")  # a second experiment in the same store
    out = tmp_path / "cmp"
    assert (
        main(
            [
                "--experiment",
                "fig1-quick",
                "--experiment",
                "fig1",
                "--tracking-uri",
                uri,
                "--out",
                str(out),
                "--bootstrap",
                "20",
            ]
        )
        == 0
    )
    diffs = pd.read_csv(out / "differences.csv")
    matching = (
        first[first["T"].isin([1e5, math.inf])]
        .groupby(["model", "T", "N", "predictor", "n"])["err"]
        .mean()
        .rename("a")
        .to_frame()
        .join(second.groupby(["model", "T", "N", "predictor", "n"])["err"].mean().rename("b"), how="inner")
    )
    assert len(diffs) == len(matching)
    np.testing.assert_allclose(np.sort(diffs["diff"]), np.sort(matching["b"] - matching["a"]))
    page = (out / "report.html").read_text()
    assert (
        "fig1-quick vs fig1" in page
        and "Differences at matching points" in page
        and "Fits side by side" in page
    )
    assert len(re.findall("data:image/png;base64", page)) == 2
    side = pd.read_csv(out / "fits_side_by_side.csv")
    assert {"alpha_A", "alpha_B", "alpha_lo_A", "alpha_hi_B"} <= set(side.columns) and len(side)
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("fig1-quick").experiment_id
    runs = client.search_runs([exp], "tags.kind = 'analysis' and tags.compare_with = 'fig1'")
    assert len(runs) == 1 and not client.search_runs(
        [client.get_experiment_by_name("fig1").experiment_id], "tags.kind = 'analysis'"
    )
    assert "A: fig1-quick" in capsys.readouterr().out


def test_compare_refuses_the_same_experiment_twice(store, capsys):
    uri, _ = store
    assert main(["--compare", "fig1-quick", "fig1-quick", "--tracking-uri", uri, "--no-log"]) == 2
    assert "two different experiments" in capsys.readouterr().err


@pytest.mark.slow
def test_a_thousand_runs_read_back_in_seconds_with_a_warm_cache(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    table = lattice_table(
        rng=np.random.default_rng(0),
        models=[f"m{k}" for k in range(10)],
        Ts=(10, 100, 1000, 1e4, 1e5),
        Ns=(4, 8, 16, 32),
        seeds=range(5),
        baselines=("zero",),
        all_n=False,
        sweep="big",
    )
    start = time.perf_counter()
    write_store(uri, table, tmp_path / "a")
    print(f"\nwrote {table['cell_key'].nunique()} runs in {time.perf_counter() - start:.1f}s")
    calls = count_downloads(monkeypatch)
    for label in ("cold", "warm"):
        start = time.perf_counter()
        read, _ = load_table(uri, "big", cache_dir=tmp_path / "cache", in_place=False)
        print(
            f"{label} read of {read['cell_key'].nunique()} runs: {time.perf_counter() - start:.2f}s, "
            f"{read.attrs['downloads']} downloads"
        )
    assert read["cell_key"].nunique() == 1000 and len(calls) == 1000 and read.attrs["downloads"] == 0
