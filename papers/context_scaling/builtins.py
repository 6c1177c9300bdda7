"""Seed 001's task families and models as registered plug-ins (pyproject.toml's ``icl_scaling.families``
and ``icl_scaling.models``), without torch: each family names its TaskFamily subclass
(papers.context_scaling.tasks, which says the maths) and the settings of TaskConfig it reads; each model
its builder (papers.context_scaling.models) and its facts (papers.context_scaling.architectures counts
them). Their cells log the settings they read as MLflow params."""

from __future__ import annotations

from papers.context_scaling import flops
from papers.context_scaling.architectures import (
    GPT2_MAX_POSITIONS,
    ModelConfig,
    gpt2_parameters,
    gpt2_params,
    head_inputs,
    head_params,
    mlp_parameters,
    mlp_params,
    one_layer_parameters,
    own_backbone,
    sgpt_parameters,
)
from papers.context_scaling.configs import TaskConfig
from papers.context_scaling.plugins import FamilySpec, ModelFacts

LINEAR = FamilySpec("papers.context_scaling.tasks:LinearRegression", TaskConfig, ("d", "noise_std"))
LINEAR_MIXED_NOISE = FamilySpec(
    "papers.context_scaling.tasks:LinearMixedNoise", TaskConfig, ("d", "noise_stds")
)
SPARSE_LINEAR = FamilySpec(
    "papers.context_scaling.tasks:SparseLinear", TaskConfig, ("d", "noise_std", "sparsity")
)
RELU_NET = FamilySpec("papers.context_scaling.tasks:ReluNet", TaskConfig, ("d", "noise_std", "hidden"))
DECISION_TREE = FamilySpec(
    "papers.context_scaling.tasks:DecisionTree", TaskConfig, ("d", "noise_std", "depth")
)


GPT2 = ModelFacts(
    "papers.context_scaling.models:GPT2InContext",
    gpt2_parameters,
    gpt2_params,
    flops.gpt2_step_flops,
    width=lambda c: c.n_embd,
    layers=lambda c: c.n_layer,
    packable=own_backbone,
    cpu_packing_pays=False,
    max_positions=GPT2_MAX_POSITIONS,
    title="GPT-2",
    settings=("n_layer", "n_head", "n_embd", "attn_implementation", "layout", "attention"),
    Settings=ModelConfig,
    tokens_per_point=2,
)
MLP = ModelFacts(
    "papers.context_scaling.models:PromptMLP",
    mlp_parameters,
    mlp_params,
    flops.head_step_flops(head_inputs),
    packable=lambda c: True,
    settings=("width", "inputs", "feature_map", "bias"),
    unused=lambda c: ("feature_map",) if c.inputs == "vectorised" else (),
    Settings=ModelConfig,
)
SGPT = ModelFacts(
    "papers.context_scaling.models:simplified_gpt",
    sgpt_parameters,
    lambda s: s.layers * 2 * s.width**2 + s.width,
    flops.sgpt_step_flops,
    width=lambda c: c.n_embd,
    layers=lambda c: c.n_layer,
    packable=lambda c: True,
    cpu_packing_pays=False,
    settings=("n_layer", "n_embd", "attention"),
    Settings=ModelConfig,
    tokens_per_point=2,
)
ONELAYER = ModelFacts(
    "papers.context_scaling.models:one_layer",
    one_layer_parameters,
    head_params,
    flops.head_step_flops(head_inputs),
    packable=lambda c: True,
    settings=("width", "feature_map"),
    Settings=ModelConfig,
)
LINEAR_ON_SCALAR = ModelFacts(
    "papers.context_scaling.models:LinearOnScalar",
    lambda c, d, points: 2,
    head_params,
    flops.linear_step_flops,
    packable=lambda c: True,
    settings=("feature_map",),
    Settings=ModelConfig,
)
