"""Shared fixtures: tiny cells and sweep documents that train in seconds on a CPU."""

from __future__ import annotations

import copy
import os
from pathlib import Path

import pytest

os.environ.setdefault("RAY_AUTH_MODE", "disabled")  # tests start their own throwaway local clusters
os.environ.setdefault("RAY_DEDUP_LOGS", "0")
# A machine that is the head of a `ray up` cluster has ~/.icl-scaling/cluster.env, which sends drivers to
# that cluster (scaling.sweep.cluster); tests start their own Rays and stores, and never join one they find.
os.environ["SCALING_CLUSTER_ENV"] = os.devnull
# Drivers started as subprocesses and Ray workers import `scaling` from this checkout, not from whichever
# checkout an editable install points at.
REPO = str(Path(__file__).resolve().parents[1])
os.environ["PYTHONPATH"] = os.pathsep.join([REPO, *filter(None, [os.environ.get("PYTHONPATH")])])

TINY_SWEEP = {
    "name": "tiny",
    "defaults": {
        "task": {"family": "linear", "d": 2, "noise_std": 0.1},
        "train": {
            "steps": 30,
            "batch_size": 16,
            "lr": 1e-3,
            "checkpoint_every": 10,
            "log_every": 5,
            "device": "cpu",
        },
        "eval": {"prompts": 32, "bootstrap": 50},
        "N": 4,
    },
    "models": {
        "mlp": {"arch": "mlp", "width": 16, "resources": {"cpu": 1}},
        "gpt2": {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "resources": {"cpu": 1}},
    },
    "grid": {"model": ["mlp"], "T": [4, "inf"], "seed": [0]},
}


@pytest.fixture
def tiny_sweep() -> dict:
    return copy.deepcopy(TINY_SWEEP)


def tiny_cell_dict(**overrides) -> dict:
    cell = {
        "task": {"d": 3, "noise_std": 0.1},
        "model": {"arch": "mlp", "width": 16},
        "train": {"steps": 20, "batch_size": 8, "lr": 1e-3, "checkpoint_every": 5, "device": "cpu"},
        "eval": {"prompts": 32, "bootstrap": 50},
        "T": 8,
        "N": 5,
        "seed": 0,
    }
    for key, value in overrides.items():
        cell[key] = value
    return cell


@pytest.fixture(scope="module")
def local_ray():
    """A real, small local Ray for the in-process end-to-end tests of one module."""
    import ray

    ray.init(
        address="local",
        num_cpus=2,
        include_dashboard=False,
        object_store_memory=80 * 1024**2,
        log_to_driver=False,
    )
    yield
    ray.shutdown()
