"""The GPU script (python -m benchmarks --gpu, docs/gpu.md) is known to run before a GPU session: its smoke
mode runs every phase on tiny shapes here, with Ray and MLflow unimportable (the device machine has
neither), and a phase that runs over its time limit is stopped while the others still run."""

import json
import subprocess
import sys
import time
from pathlib import Path

import benchmarks.gpu as gpu
from scaling.cost import load_table

ROOT = Path(__file__).resolve().parents[1]
WITHOUT_RAY_OR_MLFLOW = """
import sys
sys.modules.update(ray=None, mlflow=None)  # `import ray` / `import mlflow` now raise ImportError
from benchmarks.__main__ import main
sys.exit(main(sys.argv[1:]))
"""
LINES = [  # one per figure of issue 33 (the CUDA-only ones SKIP on a CPU)
    "gpu_memory_cap",
    "fig1_gpt2_step[fp32]",
    "fig1_gpt2_step[bf16]",
    "fig1_gpt2_step_best",
    "pack_gpt2[tiny K=1]",
    "pack_gpt2[tiny K=4]",
    "pack_member0[tiny K=4]",
    "cuda_cost_table",
    "fig1_sweep_gpu_estimate",
    "gpu_pack_size",
    "kind_train_eval[cuda vs cpu]",
    "kind_gpt2_scan[cuda vs cpu]",
    "kind_gd_transformer[cuda vs cpu]",
    "kind_selection_transformer[cuda vs cpu]",
    "llm_scan_tiny",
]


def test_the_smoke_run_prints_every_figure_and_writes_the_cost_table_without_ray_or_mlflow(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", WITHOUT_RAY_OR_MLFLOW, "--gpu", "--smoke", "--out", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert [name for name in LINES if f"\n{name} " not in done.stdout] == [], done.stdout
    assert "ERROR" not in done.stdout and "FAIL" not in done.stdout
    results = json.loads((tmp_path / "gpu.json").read_text())
    assert {r["name"] for r in results["results"]} >= set(LINES) and results["smoke"]
    table = load_table(tmp_path / "cost_table_cuda.json")
    assert {"gpt2", "sgpt", "mlp"} <= set(table["fit"]) and table["smoke"]
    assert {r["members"] for r in table["rows"]} >= {1, 2, 4}


def test_a_phase_over_its_time_limit_is_stopped_and_the_next_phase_still_runs(tmp_path, monkeypatch):
    monkeypatch.setattr(gpu, "SMOKE_PHASE_SECONDS", 1)
    monkeypatch.setitem(gpu.PHASES, "slow", lambda run, seconds: time.sleep(30))
    start = time.monotonic()
    assert gpu.main(str(tmp_path), smoke=True, phases=["slow", "device"]) == 1
    assert time.monotonic() - start < 10
    lines = json.loads((tmp_path / "gpu.json").read_text())["results"]
    assert [(r["name"], r["status"]) for r in lines] == [("phase_slow", "ERROR"), ("gpu_memory_cap", "SKIP")]
    assert "PhaseTimeout" in lines[0]["text"]
