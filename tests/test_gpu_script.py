"""The GPU script (python -m benchmarks --gpu, docs/gpu.md) is known to run before a GPU session: its smoke
mode runs the default phases on tiny shapes here with Ray and MLflow unimportable (they need neither), its
sweep phase runs a real tiny sweep through Ray Tune and MLflow against its bare pack (and plans the GPU run's
sweeps), and a phase that runs over its time limit is stopped while the others still run."""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

import benchmarks.gpu as gpu
from scaling.budget.cost import load_table
from scaling.planning.plan import load_plan

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_RAY_OR_MLFLOW = """
import sys
sys.modules.update(ray=None, mlflow=None)  # `import ray` / `import mlflow` now raise ImportError
from benchmarks.__main__ import main
sys.exit(main(sys.argv[1:]))
"""
LINES = [  # one per figure of issue 41 (the CUDA-only ones SKIP or say so on a CPU)
    "gpu_memory_cap",
    "fig1_step_fp32[eager vs ref eager]",
    "fig1_step_bf16[eager vs ref eager]",
    "fig1_step_trial[float32 eager vs ref fp32]",  # on a GPU: [bfloat16+graph vs ref bf16], target 2x
    "fig1_step_best[trial float32 eager vs ref fp32]",
    "pack_gpt2[tiny K=1]",
    "pack_gpt2[tiny K=4]",
    "pack_mfu[tiny]",
    "pack_member0[tiny K=4]",
    "cuda_cost_table",
    *(f"dry_run[fig{k}]" for k in range(1, 9)),
    "dry_run_hours[fig1]",
    "dry_run_hours[figs 1-8]",
    "gpu_pack_size",
    "trial_graph_equals_eager[cell]",
    "trial_resume_equals_whole[pack of 3]",
    "trial_bf16_within_seed_spread",
    "trial_pack_splits_on_card",
]


def run_script(tmp_path, *args) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY_OR_MLFLOW, "--gpu", "--smoke", "--out", str(tmp_path), *args],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )


def test_the_smoke_run_prints_every_figure_and_writes_the_cost_table_without_ray_or_mlflow(tmp_path):
    done = run_script(tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    assert [name for name in LINES if f"\n{name} " not in done.stdout] == [], done.stdout
    assert "ERROR" not in done.stdout and "FAIL" not in done.stdout
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert {r["name"] for r in results["results"]} >= set(LINES) and results["smoke"]
    table = load_table(tmp_path / "cost_table_cuda.json")
    assert {"gpt2", "sgpt", "mlp"} <= set(table["fit"]) and table["smoke"]
    assert {r["members"] for r in table["rows"]} >= {1, 2, 4}
    assert table["train_precision"] == "float32" and table["cuda_graphs"] is False  # a CPU trial's


@pytest.mark.e2e
@pytest.mark.slow  # the GPU run's phase rehearsed on the CPU: its parts run by default in test_pack_e2e
def test_the_sweep_phase_runs_a_sweep_through_ray_and_mlflow_against_its_bare_pack(tmp_path):
    """On a CPU the Fig. 1 slice runs tiny (2 GPT-2 cells packed into one trial); the GPU run's two sweeps
    (their files and every --set) are planned with --dry-run."""
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--gpu", "--smoke", "--phases", "sweep", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    lines = {r["name"]: r for r in json.loads((tmp_path / "gpu.json").read_text())["results"]}
    smoke = len(load_plan(ROOT / "sweeps" / "smoke.yaml").cells)
    assert lines["sweep_plan[smoke]"]["text"].endswith(f"planned: {smoke} cells")
    assert lines["sweep_plan[fig1_slice]"]["text"].endswith("planned: 6 cells")
    slice_ = lines["sweep[fig1_slice]"]
    assert slice_["status"] == "INFO" and "2/2 cells complete" in slice_["text"], slice_
    assert slice_["extra"]["bare"]["cells"] == 2 and slice_["extra"]["ratio"] > 1
    # where the trial's time went, from its cells' runs (scaling.trial.timeline), and the slice at full length
    phases = r"in its trials .*: setup [\d.]+ s, train [\d.]+ s, checkpoint [\d.]+ s, evaluate"
    assert re.search(phases, slice_["text"]), slice_["text"]
    driver = r"its driver \(the sweep run's sweep/seconds\): plan [\d.]+ s, ray [\d.]+ s, cards [\d.]+ s"
    assert re.search(driver, slice_["text"]), slice_["text"]
    projected = lines["sweep_projected[fig1]"]
    assert projected["status"] == "INFO" and "at the full profile's 500000 steps" in projected["text"]
    assert projected["extra"]["ratio"] < slice_["extra"]["ratio"]  # fixed costs shrink with length
    assert "2/2 cells complete" in (tmp_path / "sweeps.log").read_text()


def test_a_phase_over_its_time_limit_is_stopped_and_the_next_phase_still_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "SMOKE_PHASE_SECONDS", 1)
    monkeypatch.setitem(gpu.PHASES, "slow", lambda run, seconds: time.sleep(30))
    start = time.monotonic()
    assert gpu.main(str(tmp_path), smoke=True, phases=["slow", "device"]) == 1
    assert time.monotonic() - start < 10
    lines = json.loads((tmp_path / "gpu.json").read_text())["results"]
    assert [(r["name"], r["status"]) for r in lines] == [("phase_slow", "ERROR"), ("gpu_memory_cap", "SKIP")]
    assert "PhaseTimeout" in lines[0]["text"]
