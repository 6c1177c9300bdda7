"""Packing small cells (issue 6, item 5): 8 tiny MLP cells as one packed trial vs 8 separate trials.

Both sides are the same 8 cells (T and seed differ) run through ``scaling.sweep.run_sweep`` on one local
Ray of 2 CPUs, each as a new sweep (its own MLflow experiment in one SQLite store, its own storage): the reference with ``run.pack: off`` (one
Tune trial per cell), ours with ``run.pack: 8`` (one trial, a vmapped ensemble, scaling.pack). The sides
alternate and the medians over repeats are compared. Target: packed at least 3x faster on this CPU.
(On a GPU the target is K packed cells at >= 0.8 K times the throughput of one; not measured here.)
"""
from __future__ import annotations

import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

TARGET_SPEEDUP = 3.0
CELLS = 8


def tiny_cells(steps: int) -> dict:
    return {
        "name": "packing",
        "defaults": {"task": {"family": "linear", "d": 2, "noise_std": 0.1},
                     "train": {"steps": steps, "batch_size": 16, "lr": 1e-3, "checkpoint_every": 100,
                               "log_every": 10, "device": "cpu"},
                     "eval": {"prompts": 64, "bootstrap": 50}, "N": 4},
        "models": {"mlp": {"arch": "mlp", "width": 16, "resources": {"cpu": 1}}},
        "grid": {"model": ["mlp"], "T": [1, 2, 4, 8], "seed": [0, 1]},
    }


def sweep_seconds(document: dict, pack: str | int, name: str, tmp: str) -> float:
    """Wall time of run_sweep on the document as a new sweep ``name`` (on the Ray already started)."""
    from scaling.sweep import run_sweep

    path = Path(tmp) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**document, "name": name, "run": {"pack": pack}}))
    start = time.perf_counter()
    outcome = run_sweep(str(path), tracking_uri=f"sqlite:///{tmp}/mlflow.db", storage=f"{tmp}/storage",
                        out=io.StringIO())
    elapsed = time.perf_counter() - start
    if not outcome.ok or len(outcome.completed) != CELLS:
        raise RuntimeError(f"the pack={pack} sweep did not complete its {CELLS} cells: {outcome}")
    return elapsed


def run(quick: bool) -> list[dict]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    document = tiny_cells(100 if quick else 200)
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:      # one MLflow store; each sweep its own experiment
            sweep_seconds(document, "off", "warm", tmp)    # imports, MLflow schema, Tune
            separate, packed = [], []
            for i in range(1 if quick else 3):
                separate.append(sweep_seconds(document, "off", f"separate-{i}", tmp))
                packed.append(sweep_seconds(document, CELLS, f"packed-{i}", tmp))
    finally:
        if started:
            ray.shutdown()
    reference, ours = statistics.median(separate), statistics.median(packed)
    speedup = reference / ours
    return [{"name": f"packing[{CELLS} tiny MLP cells, packed vs separate trials]", "reference": round(reference, 2),
             "ours": round(ours, 2), "reference_rate": round(CELLS / reference, 3),
             "ours_rate": round(CELLS / ours, 3), "unit": "s", "ratio": round(speedup, 2),
             "target": f"speedup >= {TARGET_SPEEDUP:g}x", "status": "PASS" if speedup >= TARGET_SPEEDUP else "FAIL",
             "separate_runs_s": [round(s, 2) for s in separate], "packed_runs_s": [round(s, 2) for s in packed]}]


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result)
