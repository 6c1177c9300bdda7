"""Seed 001's task families as registered plug-ins (pyproject.toml's ``icl_scaling.families``), without
torch: each names its TaskFamily subclass (papers.context_scaling.tasks, which says the maths) and the
settings of TaskConfig it reads, which its cells log as MLflow params."""

from __future__ import annotations

from papers.context_scaling.configs import TaskConfig
from papers.context_scaling.plugins import FamilySpec

TASKS = "papers.context_scaling.tasks"
LINEAR = FamilySpec(f"{TASKS}:LinearRegression", TaskConfig, ("d", "noise_std"))
LINEAR_MIXED_NOISE = FamilySpec(f"{TASKS}:LinearMixedNoise", TaskConfig, ("d", "noise_stds"))
SPARSE_LINEAR = FamilySpec(f"{TASKS}:SparseLinear", TaskConfig, ("d", "noise_std", "sparsity"))
RELU_NET = FamilySpec(f"{TASKS}:ReluNet", TaskConfig, ("d", "noise_std", "hidden"))
DECISION_TREE = FamilySpec(f"{TASKS}:DecisionTree", TaskConfig, ("d", "noise_std", "depth"))
