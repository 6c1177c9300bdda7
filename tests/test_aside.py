"""Figures drawn beside the fits (scaling/aside.py): a forked child does the work and returns its result, or
the caller does it itself (no fork while another thread runs; a child that fails); an analysis whose figures
are drawn aside writes what one drawn in order writes, and nothing when it fails."""

import dataclasses
import math
import os
import subprocess
import sys
import threading
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from synthetic_tables import lattice_table, write_store

from analysis.pipeline import analyse
from analysis.plugin import AnalysisError, Request
from analysis.same_outputs import folder_differences
from papers.context_scaling.analysis.plugin import TRAINING
from scaling.aside import Aside

ROOT = Path(__file__).resolve().parents[1]


IN_A_CHILD = """
import os
from scaling.aside import Aside

aside = Aside(lambda: {"pid": os.getpid(), "big": list(range(100_000))})
result = aside.result()
assert result["pid"] != os.getpid() and result["big"][-1] == 99_999, result
assert aside.result() is None  # once
"""


def test_the_work_runs_in_a_child_and_its_result_comes_back():
    """In a new interpreter: this one may hold threads earlier tests left (a refit pool's), and Aside never
    forks beside a thread."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", IN_A_CHILD], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]


def test_a_child_that_fails_gives_none_and_nothing_is_forked_beside_a_thread():
    assert Aside(lambda: 1 / 0).result() is None
    stop = threading.Event()
    other = threading.Thread(target=stop.wait)
    other.start()
    try:
        aside = Aside(os.getpid)
        assert aside.pid is None and aside.result() is None
    finally:
        stop.set()
        other.join()


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    table = lattice_table(
        rng=np.random.default_rng(1), Ts=(100, math.inf), Ns=(5, 10), seeds=(0, 1, 2), sweep="fig1-quick"
    )
    write_store(uri, table, tmp_path / "a")
    return uri


class Forks(Aside):
    """The real Aside, its children counted."""

    children: list = []

    def __init__(self, work):
        super().__init__(work)
        Forks.children.append(self.pid)


def draw_both_ways(store: str, out) -> None:
    """The same analysis with its figures and verdicts made aside and in order, into out/True and out/False;
    exits 0 when each assertion holds (run in a process of one thread: Aside forks only there)."""
    import analysis.pipeline

    analysis.pipeline.Aside = Forks
    request = Request(None, "fig1-quick", tracking_uri=store, bootstrap=30, log=False)
    results = {}
    for aside in (True, False):
        plugin = dataclasses.replace(TRAINING, figures_from_table=aside, verdicts_from_table=aside)
        results[aside] = analyse(dataclasses.replace(request, out=out / str(aside)), plugin=plugin)
    assert len(Forks.children) == 2 and all(Forks.children)  # drawn and judged aside once, in children
    pd.testing.assert_frame_equal(results[True].verdicts, results[False].verdicts)
    assert results[True].notes == results[False].notes
    assert [p.name for p in results[True].files] == [p.name for p in results[False].files]
    assert any(p.suffix == ".svg" for p in results[True].files)
    assert all(p.parent == out / "True" for p in results[True].files)


def test_figures_drawn_aside_are_the_figures_drawn_in_order(store, tmp_path):
    """In a new interpreter, as a `python -m analysis` runs (this one holds threads earlier tests left, and
    Aside never forks beside a thread)."""
    code = "import sys; from pathlib import Path; from test_aside import draw_both_ways; "
    code += "draw_both_ways(sys.argv[1], Path(sys.argv[2]))"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(ROOT / "tests")])}
    done = subprocess.run(
        [sys.executable, "-c", code, store, str(tmp_path)], cwd=ROOT, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert folder_differences(tmp_path / "False", tmp_path / "True") == [
        (p.name, "") for p in sorted((tmp_path / "False").iterdir())
    ]


def test_nothing_is_written_when_the_verdicts_fail(store, tmp_path):
    def fails(result):
        raise AnalysisError("no verdicts here")

    plugin = dataclasses.replace(TRAINING, verdicts=fails)
    assert plugin.figures_from_table
    request = Request(None, "fig1-quick", tracking_uri=store, out=tmp_path / "out", log=False)
    with pytest.raises(AnalysisError, match="no verdicts here"):
        analyse(request, plugin=plugin)
    assert not (tmp_path / "out").exists()
