"""Sweep overhead (issue 6, item 4): the time the machinery adds per cell over a sweep of tiny cells.

Both sides on the same cells: the reference is the cells' bare work (scaling.train.CellTrainer: train and
evaluate, no Ray, no MLflow, no checkpoints), ours is ``python -m scaling.sweep`` run as a user runs it (a
fresh process: Ray start, Tune trials, MLflow logging to SQLite, checkpoints) on 2 CPUs. The overhead per
cell is (sweep wall time - bare time) / cells; target: at most 3 s per cell, measured with packing off (one
trial per cell) and with the default (``run.pack: auto``). ``run(quick)``: 10 cells instead of 50.
"""
from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

TARGET_SECONDS_PER_CELL = 3.0
ROOT = Path(__file__).resolve().parents[1]


def tiny_sweep(cells: int) -> dict:
    """``cells`` tiny MLP cells (width 16, 20 steps): T x seed."""
    seeds = max(1, cells // 10)
    Ts = [1, 2, 4, 8, 16, 32, 64, 128, 256, "inf"][: cells // seeds]
    return {
        "name": "overhead",
        "defaults": {"task": {"family": "linear", "d": 2, "noise_std": 0.1},
                     "train": {"steps": 20, "batch_size": 16, "lr": 1e-3, "checkpoint_every": 10, "log_every": 5,
                               "device": "cpu"},
                     "eval": {"prompts": 32, "bootstrap": 50}, "N": 4},
        "models": {"mlp": {"arch": "mlp", "width": 16, "resources": {"cpu": 1}}},
        "grid": {"model": ["mlp"], "T": Ts, "seed": list(range(seeds))},
    }


def bare_seconds(document: dict) -> float:
    """Train and evaluate every cell in this process, one after another: the work without machinery."""
    import torch

    from scaling.plan import plan_document
    from scaling.train import CellTrainer

    torch.set_num_threads(1)
    start = time.perf_counter()
    for planned in plan_document(document).cells:
        trainer = CellTrainer(planned.cell)
        trainer.train_until(planned.cell.train.steps)
        trainer.evaluate()
    return time.perf_counter() - start


def sweep_seconds(document: dict, pack: str) -> float:
    """Wall time of ``python -m scaling.sweep`` on the document in a fresh directory and process."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "overhead.yaml"
        path.write_text(yaml.safe_dump(document))
        env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
               "RAY_AUTH_MODE": "disabled"}
        start = time.perf_counter()
        done = subprocess.run([sys.executable, "-m", "scaling.sweep", str(path), "--num-cpus", "2",
                               "--tracking-uri", f"sqlite:///{tmp}/mlflow.db", "--storage", f"{tmp}/storage",
                               "--set", f"run.pack={pack}"], cwd=tmp, env=env, capture_output=True, text=True)
        elapsed = time.perf_counter() - start
        if done.returncode != 0:
            raise RuntimeError(f"the sweep failed ({done.returncode}):\n{done.stdout[-2000:]}{done.stderr[-2000:]}")
    return elapsed


def row(name: str, cells: int, bare: float, wall: float) -> dict:
    per_cell = (wall - bare) / cells
    return {"name": name, "reference": round(bare, 2), "ours": round(wall, 2),
            "reference_rate": round(cells / bare, 2), "ours_rate": round(cells / wall, 2), "unit": "s",
            "ratio": round(per_cell, 2), "target": f"overhead <= {TARGET_SECONDS_PER_CELL:g} s/cell",
            "status": "PASS" if per_cell <= TARGET_SECONDS_PER_CELL else "FAIL",
            "overhead_per_cell_s": round(per_cell, 2), "cells": cells}


def run(quick: bool) -> list[dict]:
    """Rows: overhead per cell (``ratio``, seconds) with packing off and with the default packing."""
    cells = 10 if quick else 50
    document = tiny_sweep(cells)
    repeats = 1 if quick else 2
    bare, walls = [], {"off": [], "auto": []}
    for _ in range(repeats):                      # the sides alternate, so a load change hits both
        bare.append(bare_seconds(document))
        for pack in walls:
            walls[pack].append(sweep_seconds(document, pack))
    bare_s = statistics.median(bare)
    return [row(f"sweep_overhead[{cells} tiny cells, pack={pack}]", cells, bare_s, statistics.median(w))
            for pack, w in walls.items()]


if __name__ == "__main__":
    for result in run("--quick" in sys.argv):
        print(result)
