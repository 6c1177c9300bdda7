"""The architectures of seed 001's in-context models as the planner, the cost model and the packer know them,
without torch: ``ModelConfig`` (an architecture and its sizes), the counts of each model's parameters and the
shape of a training step (``StepShape``), which each model's ``ModelFacts`` reads
(papers.context_scaling.builtins registers them). The networks themselves are in papers.context_scaling.models
(its docstring describes each architecture), imported when a model is built: a process that plans, costs or
analyses cells never imports torch (~1.5 s of start and ~0.5 s of exit)."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

from papers.context_scaling.plugins import (
    FEATURE_MAPS,
    MODELS,
    ModelFacts,
    ModelSettings,
    known,
    model_facts,
)
from scaling.budget.cost import Step
from scaling.config import check, check_choice
from scaling.plugins import is_registered, names

# phi, the attention weights (papers.context_scaling.attention.ATTENTIONS), by name: tests/test_models.py
# checks that the names are the functions' keys, in order. The feature maps psi are plug-ins
# (papers.context_scaling.plugins.FEATURE_MAPS).
ATTENTION_NAMES = ("softmax", "l1", "relu", "identity")
DEFAULT_ATTENTION = {"gpt2": "softmax", "sgpt": "l1"}
FEATURE_ARCHS = ("onelayer", "linear_on_scalar")


@dataclass(frozen=True)
class ModelConfig(ModelSettings):
    """The built-in architectures and their sizes; ``name`` is the label a sweep gives it (the model axis)."""

    arch: str = "gpt2"
    n_layer: int = 8  # GPT-2 and SGPT blocks
    n_head: int = 8  # GPT-2 attention heads
    n_embd: int = 256  # GPT-2 and SGPT width
    width: int = 1024  # MLP and one-layer hidden width (eq. 14, eq. 9)
    attn_implementation: str = "sdpa"
    layout: str = "interleaved"  # gpt2 tokens: interleaved (Garg) | stacked (eq. 2)
    attention: str = ""  # phi: softmax | l1 | relu | identity; "" = gpt2 softmax, sgpt l1
    inputs: str = "vectorised"  # mlp input: vectorised | features | both
    feature_map: str = ""  # psi of onelayer, linear_on_scalar, mlp features/both
    # mlp: biases in both layers (the module docstring says why). In every mlp cell's key even at its
    # default, so that no MLP result stored before the biases came is read as one of the model with them.
    bias: bool = field(default=True, metadata={"in_key": lambda c: c.arch == "mlp"})

    def __post_init__(self):
        check(
            is_registered(MODELS, self.arch) and model_facts(self.arch).Settings is ModelConfig,
            "arch",
            f"unknown value {self.arch!r}; known: {', '.join(names(MODELS))}; or your own as module:Name",
        )
        for name in ("n_layer", "n_head", "n_embd", "width"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(
            self.n_embd % self.n_head == 0,
            "n_embd",
            f"width {self.n_embd} must be divisible by n_head {self.n_head}",
        )
        check_choice(self.attn_implementation, "attn_implementation", ("eager", "sdpa"))
        check_choice(self.layout, "layout", ("interleaved", "stacked"))
        check_choice(self.inputs, "inputs", ("vectorised", "features", "both"))
        if self.attention:
            check_choice(self.attention, "attention", ATTENTION_NAMES)
            check(
                self.arch in DEFAULT_ATTENTION,
                "attention",
                f"only {', '.join(DEFAULT_ATTENTION)} have an attention to choose, not {self.arch}",
            )
        if self.feature_map:
            known(FEATURE_MAPS, self.feature_map, "feature_map")
        check(self.bias or self.arch == "mlp", "bias", f"only mlp has biases to turn off, not {self.arch}")
        needs_map = self.arch in FEATURE_ARCHS or (self.arch == "mlp" and self.inputs != "vectorised")
        check(
            needs_map == bool(self.feature_map),
            "feature_map",
            f"{'required' if needs_map else 'not used'} for arch {self.arch} with inputs {self.inputs};"
            f" known: {', '.join(names(FEATURE_MAPS))}",
        )

    @property
    def phi(self) -> str:
        return self.attention or DEFAULT_ATTENTION.get(self.arch, "")


def own_backbone(config: ModelConfig) -> bool:
    """Whether a GPT-2 of ``config`` runs papers.context_scaling.gpt2 (softmax through SDPA, either
    layout) rather than transformers' GPT2Model; only such GPT-2 cells pack
    (papers.context_scaling.stacked_transformers)."""
    return config.phi == "softmax" and config.attn_implementation == "sdpa"


# GPT-2 prompts are 2(N+1) tokens. Garg et al.'s released checkpoints have 202 positions, GPT-2's own
# 1024; no experiment here needs more than 1024 (N <= 511). The cap turns a typo (N: 50000) into a planning
# error instead of an out-of-memory trial.
GPT2_MAX_POSITIONS = 1024


def gpt2_count(layout: str, d: int, points: int, k: int, layers: int) -> int:
    """GPT-2's parameters: 12 k^2 + 13 k per block, positions, a one-token vocabulary, final norm, read-in,
    read-out."""
    read_in = (d + 1 if layout == "stacked" else d) * k + k
    positions = points if layout == "stacked" else 2 * points
    return layers * (12 * k * k + 13 * k) + positions * k + k + 2 * k + read_in + k + 1


def gpt2_params(s) -> int:
    return gpt2_count(s.layout, s.d, s.N + 1, s.width, s.layers)


def head_params(s) -> int:
    """The MLP-type models: the first layer's weights dominate (inputs x width + width)."""
    return head_inputs(s) * s.width + s.width


def mlp_params(s) -> int:
    """Eq. 14 with its biases (the default): ``head_params`` plus b_0 (width) and b_1 (1); ``bias: false``
    has width + 1 fewer, which no estimate made from this notices."""
    return head_params(s) + s.width + 1


def head_inputs(s) -> int:
    """Numbers per row entering the MLP-type models' first layer (the vectorised prompt for ``mlp``)."""
    return (s.N + 1) * (s.d + 1) if s.arch == "mlp" else s.d + 1


# The exact parameter counts of the models papers.context_scaling.models builds for (config, d,
# points): ``ModelFacts.parameters`` (tests/test_models.py counts every architecture's built model).


def gpt2_parameters(c: ModelConfig, d: int, points: int) -> int:
    return gpt2_count(c.layout, d, points, c.n_embd, c.n_layer)


def mlp_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Eq. 14: inputs x width + width (W_0, b_0) and width + 1 (W_1, b_1), the biases only with ``bias``."""
    inputs = {"vectorised": points * (d + 1), "features": d + 1, "both": points * (d + 1) + d + 1}
    return inputs[c.inputs] * c.width + c.width + (c.width + 1 if c.bias else 0)


def sgpt_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Two width x width maps per block and the read-out; the frozen read-in is a buffer."""
    return c.n_layer * 2 * c.n_embd**2 + c.n_embd


def one_layer_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Eq. 9 without biases: psi's row (d + 1) x width, then width x 1."""
    return (d + 1) * c.width + c.width


@dataclass(frozen=True)
class StepShape:
    """What a training step's cost depends on, for the models this file knows."""

    arch: str
    N: int
    d: int
    width: int
    layers: int
    batch: int
    layout: str = "interleaved"

    @classmethod
    def of_cell(cls, cell) -> "StepShape":
        m = cell.model
        facts = model_facts(m.arch)
        return cls(
            m.arch, cell.N, cell.task.d, facts.width(m), facts.layers(m), cell.train.batch_size, m.layout
        )

    @property
    def tokens(self) -> int:
        """Sequence length per prompt (the model's facts: 2(N+1) for GPT-2 and SGPT, N+1 for the MLPs)."""
        return model_facts(self.arch).tokens(self)

    def step(self) -> Step:
        """The cost facts of one training step of this shape (scaling.budget.cost.Step)."""
        facts = model_facts(self.arch)
        return Step(
            self.arch,
            step_flops(self),
            model_params(self),
            activation_elements(self),
            0.0,
            facts.cpu_packing_pays,
        )


def model_params(s: StepShape) -> int:
    """Trainable parameters of the step shape's model (ModelFacts.params)."""
    return model_facts(s.arch).params(s)


def step_flops(s: StepShape) -> float:
    """FLOPs of one training step for the batch: every matrix product of the forward and the backward pass
    as the model runs them (papers.context_scaling.flops; tests/test_speed.py checks them against
    torch's FlopCounterMode on the real model)."""
    return model_facts(s.arch).step_flops(s)


def activation_elements(s: StepShape) -> float:
    return float(s.batch) * s.tokens * s.width * max(s.layers, 1)


def step_of(s: StepShape, facts: ModelFacts, config: ModelConfig) -> Step:
    """The cost facts of one training step of shape ``s`` with the forward pass the packer weighs."""
    forward = facts.forward_multiply_adds(config, s.d, s.N + 1, s.batch)
    return dataclasses.replace(s.step(), forward=forward)
