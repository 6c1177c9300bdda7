"""The architectures of seed 001's in-context models as the planner, the cost model and the packer know them,
without torch: ``ModelConfig`` (an architecture and its sizes), ``ModelFacts`` (parameter counts, step FLOPs,
settings, position limits, whether cells pack) and ``MODELS``, the registry (``arch``). The networks
themselves are in papers.context_scaling.models (its docstring describes each architecture), imported
when a model is built: a process that plans, costs or analyses cells never imports torch (~1.5 s of start
and ~0.5 s of exit)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from papers.context_scaling import flops
from scaling.config import check, check_choice

# phi, the attention weights (papers.context_scaling.attention.ATTENTIONS) and psi, the feature maps
# (papers.context_scaling.feature_maps.FEATURE_MAPS), by name: tests/test_models.py checks that the
# names are the functions' keys, in order.
ATTENTION_NAMES = ("softmax", "l1", "relu", "identity")
FEATURE_MAP_NAMES = ("linear", "linear_sum", "hilbert", "exponential", "l1_attention")
DEFAULT_ATTENTION = {"gpt2": "softmax", "sgpt": "l1"}
FEATURE_ARCHS = ("onelayer", "linear_on_scalar")


@dataclass(frozen=True)
class ModelConfig:
    """An architecture and its sizes; ``name`` is the label a sweep gives it (the model axis)."""

    arch: str = "gpt2"
    name: str = ""  # label in run names and figures; defaults to arch
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
        check_choice(self.arch, "arch", MODELS)
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
            check_choice(self.feature_map, "feature_map", FEATURE_MAP_NAMES)
        check(self.bias or self.arch == "mlp", "bias", f"only mlp has biases to turn off, not {self.arch}")
        needs_map = self.arch in FEATURE_ARCHS or (self.arch == "mlp" and self.inputs != "vectorised")
        check(
            needs_map == bool(self.feature_map),
            "feature_map",
            f"{'required' if needs_map else 'not used'} for arch {self.arch} with inputs {self.inputs};"
            f" known: {', '.join(FEATURE_MAP_NAMES)}",
        )

    @property
    def label(self) -> str:
        return self.name or self.arch

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


def _gpt2_count(layout: str, d: int, points: int, k: int, layers: int) -> int:
    """GPT-2's parameters: 12 k^2 + 13 k per block, positions, a one-token vocabulary, final norm, read-in,
    read-out."""
    read_in = (d + 1 if layout == "stacked" else d) * k + k
    positions = points if layout == "stacked" else 2 * points
    return layers * (12 * k * k + 13 * k) + positions * k + k + 2 * k + read_in + k + 1


def _gpt2_params(s) -> int:
    return _gpt2_count(s.layout, s.d, s.N + 1, s.width, s.layers)


def _head_params(s) -> int:
    """The MLP-type models: the first layer's weights dominate (inputs x width + width)."""
    return _head_inputs(s) * s.width + s.width


def _mlp_params(s) -> int:
    """Eq. 14 with its biases (the default): ``_head_params`` plus b_0 (width) and b_1 (1); ``bias: false``
    has width + 1 fewer, which no estimate made from this notices."""
    return _head_params(s) + s.width + 1


def _tokens(s) -> int:
    """Sequence length per prompt: 2(N+1) for GPT-2 and SGPT (interleaved, or context then queries),
    N+1 rows for the MLPs."""
    return 2 * (s.N + 1) if s.arch in ("gpt2", "sgpt") else s.N + 1


def _head_inputs(s) -> int:
    """Numbers per row entering the MLP-type models' first layer (the vectorised prompt for ``mlp``)."""
    return (s.N + 1) * (s.d + 1) if s.arch == "mlp" else s.d + 1


# The exact parameter counts of the models papers.context_scaling.models builds for (config, d,
# points): ``ModelFacts.parameters`` (tests/test_models.py counts every architecture's built model).


def _gpt2_parameters(c: ModelConfig, d: int, points: int) -> int:
    return _gpt2_count(c.layout, d, points, c.n_embd, c.n_layer)


def _mlp_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Eq. 14: inputs x width + width (W_0, b_0) and width + 1 (W_1, b_1), the biases only with ``bias``."""
    inputs = {"vectorised": points * (d + 1), "features": d + 1, "both": points * (d + 1) + d + 1}
    return inputs[c.inputs] * c.width + c.width + (c.width + 1 if c.bias else 0)


def _sgpt_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Two width x width maps per block and the read-out; the frozen read-in is a buffer."""
    return c.n_layer * 2 * c.n_embd**2 + c.n_embd


def _one_layer_parameters(c: ModelConfig, d: int, points: int) -> int:
    """Eq. 9 without biases: psi's row (d + 1) x width, then width x 1."""
    return (d + 1) * c.width + c.width


@dataclass(frozen=True)
class ModelFacts:
    """What the rest of the project knows of an architecture, asked of the model's own entry (the cost
    model, the packer, the planner), without building the model: its exact parameter count under a config,
    its estimated parameter count and a training step's FLOPs for a step shape (``s``: arch, N, d, width,
    layers, batch, layout, e.g. scaling.budget.cost.StepShape), its width and depth under a config, whether it
    packs (a parameter-free ``features`` then a Linear/ReLU ``head_layers``:
    papers.context_scaling.stacked) and its position limit."""

    # the parameters of the model built for (config, d, points) (papers.context_scaling.models
    # .BUILDERS), counted without building it
    parameters: Callable[[ModelConfig, int, int], int]
    params: Callable[[object], int]
    step_flops: Callable[[object], float]  # one training step of a batch (papers.context_scaling.flops)
    width: Callable[[ModelConfig], int] = lambda config: config.width
    layers: Callable[[ModelConfig], int] = lambda config: config.n_layer
    packable: Callable[[ModelConfig], bool] = lambda config: False
    # whether packing small cells pays on a CPU (scaling.budget.packing's ``auto``): measured on this
    # project's 2-core CPU (docs/gpu.md, "On this CPU"): 8 packed quick-size GPT-2 cells step at 0.72x, SGPT
    # at 0.94x of the same cells one after another (a CPU is busy with arithmetic at every size the sweeps
    # train), so transformers pack on GPUs only
    cpu_packing_pays: bool = True
    max_positions: int | None = None  # tokens per prompt the model takes; None: no limit
    title: str = ""  # the name errors use (default: the arch's)
    # the ModelConfig settings the architecture reads (arch and name are every model's); a cell logs only
    # these as MLflow params (scaling.cells.Cell.params), its cell.yaml keeps every setting
    settings: tuple[str, ...] = ()
    unused: Callable[[ModelConfig], tuple[str, ...]] = lambda config: ()  # of those, unread under config

    def applicable(self, config: ModelConfig) -> tuple[str, ...]:
        """The settings of ``config`` that this architecture reads: arch, name and its ``settings`` but the
        ones ``unused`` under this config."""
        unused = set(self.unused(config))
        return ("arch", "name", *(s for s in self.settings if s not in unused))

    def tokens(self, s) -> int:
        return _tokens(s)

    def forward_multiply_adds(self, config: ModelConfig, d: int, points: int, batch: int) -> float:
        """Multiply-adds of one forward pass of a batch of prompts of ``points`` pairs: the model's parameters
        x prompts x positions (exact for the packable MLP-type models, whose every parameter is used once per
        position)."""
        return float(self.parameters(config, d, points)) * batch * points

    def check_positions(self, config: ModelConfig, N: int) -> None:
        """A ConfigError on N when a prompt of N+1 points exceeds the position limit."""
        if self.max_positions is None:
            return
        positions = 2 * (N + 1)
        check(
            positions <= self.max_positions,
            "N",
            f"N={N} makes {self.title or config.arch} prompts of 2(N+1)={positions} tokens, more than the"
            f" {self.max_positions} positions allowed"
            " (papers.context_scaling.architectures.GPT2_MAX_POSITIONS)",
        )


MODELS: dict[str, ModelFacts] = {
    "gpt2": ModelFacts(
        _gpt2_parameters,
        _gpt2_params,
        flops.gpt2_step_flops,
        width=lambda c: c.n_embd,
        layers=lambda c: c.n_layer,
        packable=own_backbone,
        cpu_packing_pays=False,
        max_positions=GPT2_MAX_POSITIONS,
        title="GPT-2",
        settings=("n_layer", "n_head", "n_embd", "attn_implementation", "layout", "attention"),
    ),
    "mlp": ModelFacts(
        _mlp_parameters,
        _mlp_params,
        flops.head_step_flops(_head_inputs),
        packable=lambda c: True,
        settings=("width", "inputs", "feature_map", "bias"),
        unused=lambda c: ("feature_map",) if c.inputs == "vectorised" else (),
    ),
    "sgpt": ModelFacts(
        _sgpt_parameters,
        lambda s: s.layers * 2 * s.width**2 + s.width,
        flops.sgpt_step_flops,
        width=lambda c: c.n_embd,
        layers=lambda c: c.n_layer,
        packable=lambda c: True,
        cpu_packing_pays=False,
        settings=("n_layer", "n_embd", "attention"),
    ),
    "onelayer": ModelFacts(
        _one_layer_parameters,
        _head_params,
        flops.head_step_flops(_head_inputs),
        packable=lambda c: True,
        settings=("width", "feature_map"),
    ),
    "linear_on_scalar": ModelFacts(
        lambda c, d, points: 2,
        _head_params,
        flops.linear_step_flops,
        packable=lambda c: True,
        settings=("feature_map",),
    ),
}


def model_facts(arch: str) -> ModelFacts:
    """The facts of ``arch``; an architecture without an entry is an error, never a guessed formula."""
    if arch not in MODELS:
        raise KeyError(f"no model facts for arch {arch!r}; known: {', '.join(MODELS)}")
    return MODELS[arch]
