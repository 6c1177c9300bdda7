"""In-context models of seed 001 (Sec. 4-5, App. A): GPT-2, SGPT, the one-layer model and MLPs.

Every model maps a prompt batch ``xs`` (B, N+1, d), ``ys`` (B, N+1) to a prediction at every position:
column n predicts ys[:, n] from the pairs 0..n-1 and the query xs[:, n] (the one predictor interface,
shared with the baselines). ``MODELS`` is the registry (``arch``):

- ``gpt2``: GPT-2 (scaling.papers.context_scaling.gpt2; transformers' GPT2Model for the other phis and eager
  attention) with a learnable linear read-in to the embedding width and a linear read-out (App. A "GPT-2").
  ``layout: interleaved`` (Garg et al. 2022): tokens x_1, y_1, x_2, y_2, ...
  with y zero-padded to d, causal attention, predictions read at the x tokens. ``layout: stacked`` (eq. 2):
  tokens [x_j; y_j] in R^{d+1}, the query [x_n; 0]; one pass scores every prefix by appending the P query
  tokens after the P context tokens with the stacked-prefix mask (scaling.papers.context_scaling.attention):
  query n sees the context tokens j < n and itself, at position n, which is exactly the causal pass over A_n,
  and y_n is never seen at column n. ``attention`` picks phi (softmax by default; l1, relu, identity are
  registered with transformers' AttentionInterface together with a mask function of the same name).
- ``sgpt``: eq. 13 (scaling.papers.context_scaling.sgpt), identity key/query/value, frozen random read-in, l1
attention.
- ``onelayer``: eq. 9, f(A) = relu(psi(A)_{n,:} W1) W2 of width ``width``, psi = ``feature_map``
  (scaling.papers.context_scaling.feature_maps).
- ``mlp``: eq. 14, f(x) = relu(x W_0 + b_0) W_1 + b_1 (width 1024 by default) on ``inputs``: ``vectorised``,
  the prompt [x_1 .. x_{n+1}, y_1 .. y_n] zero-padded to the cell's N (App. A "Zero-padding input for MLP":
  one model serves every context length); ``features``, psi_K(A)_{n,:}; ``both``, the two concatenated
  (Fig. 7). ``bias`` (default true): App. A calls it "a standard 2-layer ReLU MLP", and eq. 14 prints it
  without biases. Without them the model cannot learn in context at all: relu(z) = (z + |z|) / 2, so a
  bias-free one-hidden-layer ReLU network is a linear function plus an even one, f(v) - f(-v) = v W_0 W_1
  (tests/test_models.py). Every task family here is symmetric under (x, y) -> (-x, -y) (Gaussian x, task
  parameters with symmetric laws), so the best predictor of y_{n+1} is odd in the prompt and the even part
  is of no use: the bias-free MLP is at best a linear function of its input. On linear regression that is
  beta_bar^T x_query with beta_bar the mean of the pool's tasks (err/zero about 1 on unseen tasks at every
  T; on the pool's own tasks 1 - |beta_bar|^2, 0.94 at T = 16, as measured). ``bias: false`` is eq. 14 as
  printed.
- ``linear_on_scalar``: a * psi_K(A)_{n,d+1} + b, linear regression on the smoother's estimate (Fig. 6).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

import torch
from torch import nn

from ...config import check, check_choice
from . import flops
from .attention import ATTENTIONS, additive_mask, hf_attention, stacked_prefix_mask
from .feature_maps import FEATURE_MAPS, feature_rows, feature_scalar, query_rows, stacked_rows
from .gpt2 import GPT2Backbone
from .sgpt import SGPT

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
            check_choice(self.attention, "attention", ATTENTIONS)
            check(
                self.arch in DEFAULT_ATTENTION,
                "attention",
                f"only {', '.join(DEFAULT_ATTENTION)} have an attention to choose, not {self.arch}",
            )
        if self.feature_map:
            check_choice(self.feature_map, "feature_map", FEATURE_MAPS)
        check(self.bias or self.arch == "mlp", "bias", f"only mlp has biases to turn off, not {self.arch}")
        needs_map = self.arch in FEATURE_ARCHS or (self.arch == "mlp" and self.inputs != "vectorised")
        check(
            needs_map == bool(self.feature_map),
            "feature_map",
            f"{'required' if needs_map else 'not used'} for arch {self.arch} with inputs {self.inputs};"
            f" known: {', '.join(FEATURE_MAPS)}",
        )

    @property
    def label(self) -> str:
        return self.name or self.arch

    @property
    def phi(self) -> str:
        return self.attention or DEFAULT_ATTENTION.get(self.arch, "")


def interleaved_tokens(xs: torch.Tensor, ys: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """Garg et al.'s tokens x_0, y_0, x_1, y_1, ...: (B, 2P, width), x zero-padded to ``width`` (default d)
    and y in the first coordinate of a zero vector."""
    B, P, d = xs.shape
    tokens = xs.new_zeros(B, 2 * P, width or d)  # (B, 2P, width)
    tokens[:, 0::2, :d] = xs
    tokens[:, 1::2, 0] = ys
    return tokens


def own_backbone(config: ModelConfig) -> bool:
    """Whether a GPT-2 of ``config`` runs scaling.papers.context_scaling.gpt2 (softmax through SDPA, either
    layout) rather than transformers' GPT2Model; only such GPT-2 cells pack
    (scaling.papers.context_scaling.stacked_transformers)."""
    return config.phi == "softmax" and config.attn_implementation == "sdpa"


class GPT2InContext(nn.Module):
    """GPT-2 backbone with linear read-in/read-out on interleaved or stacked tokens."""

    def __init__(self, config: ModelConfig, d: int, points: int):
        super().__init__()
        self.layout, self.d, self.points = config.layout, d, points
        stacked = config.layout == "stacked"
        positions = points if stacked else 2 * points
        self.read_in = nn.Linear(d + 1 if stacked else d, config.n_embd)
        # Softmax attention through SDPA (the default; either layout) runs scaling.papers.context_scaling
        # .gpt2, the same network and parameters without transformers' import (~4.5 s of CPU in every trial
        # process); the other phis and eager attention plug into transformers' GPT2Model. The stacked
        # layout draws its initial parameters as GPT2Model drew them (it ran there until its cells packed),
        # so its cells keep their numbers; the interleaved one keeps the draws it has had since it moved.
        self.own_backbone = own_backbone(config)
        if self.own_backbone:
            draws = "gpt2model" if stacked else "own"
            self.backbone = GPT2Backbone(config.n_embd, config.n_layer, config.n_head, positions, draws=draws)
        else:
            self.backbone = hf_gpt2(config, positions)
        self.read_out = nn.Linear(config.n_embd, 1)

    def forward_interleaved(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Predictions at the x tokens. With scaling.papers.context_scaling.gpt2 the final y token is dropped
        (under causal attention no x token sees it) and the last block keeps the x tokens after its attention,
        so its output projection, MLP and the final norm never run at the y tokens: about 6% of a training
        step's FLOPs at 8 layers and N = 40, outputs equal to the full pass's to float rounding
        (tests/test_gpt2.py)."""
        tokens = self.interleaved_tokens(xs, ys)  # (B, 2P, d)
        embeds = self.read_in(tokens)  # (B, 2P, k)
        if not self.own_backbone:
            hidden = self.backbone(inputs_embeds=embeds).last_hidden_state[:, 0::2]
        elif self.backbone.recording:  # the temperature tools read every token's scores
            hidden = self.backbone(embeds)[:, 0::2]
        else:
            hidden = self.backbone(embeds[:, :-1], keep_last=slice(0, None, 2))  # (B, P, k)
        return self.read_out(hidden).squeeze(-1)  # (B, P)

    def interleaved_tokens(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """xs (B, P, d' <= d), ys (B, P) -> tokens (B, 2P, d): x_0, y_0, x_1, y_1, ... (x zero-padded to d,
        as Garg et al.'s models read lower-dimensional inputs)."""
        if xs.shape[-1] > self.d:
            raise ValueError(f"inputs have dimension {xs.shape[-1]} > the model's d = {self.d}")
        return interleaved_tokens(xs, ys, self.d)

    def forward_stacked(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Predictions at the P query tokens, appended after the P context tokens under the stacked-prefix
        mask (eq. 2; scaling.papers.context_scaling.attention.stacked_prefix_mask), context token j and
        query n at positions j and n."""
        P = xs.shape[1]
        tokens = torch.cat([stacked_rows(xs, ys), query_rows(xs)], dim=1)  # (B, 2P, d+1)
        embeds = self.read_in(tokens)  # (B, 2P, k)
        positions = torch.arange(P, device=xs.device).repeat(2)  # (2P,): j, then n
        allowed = stacked_prefix_mask(P, xs.device)  # (2P, 2P)
        if self.own_backbone:
            hidden = self.backbone(embeds, allowed=allowed, positions=positions)  # (B, 2P, k)
        else:
            hidden = self.backbone(
                inputs_embeds=embeds,
                attention_mask=additive_mask(allowed, embeds.dtype),
                position_ids=positions[None],
            ).last_hidden_state  # (B, 2P, k)
        return self.read_out(hidden[:, P:]).squeeze(-1)  # (B, P)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        if self.layout == "stacked":
            return self.forward_stacked(xs, ys)
        return self.forward_interleaved(xs, ys)

    def predict(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """forward without gradients: (B, P) predictions, column n from pairs 0..n-1 and xs[:, n]."""
        with torch.no_grad():
            return self(xs, ys)


def hf_gpt2(config: ModelConfig, positions: int) -> nn.Module:
    """transformers' GPT2Model for the stacked layout, another phi or eager attention (imported here: it
    costs ~4.5 s of CPU, paid only by the cells that need it)."""
    from transformers import GPT2Config, GPT2Model

    backbone = GPT2Config(
        vocab_size=1,
        n_positions=positions,
        n_embd=config.n_embd,
        n_layer=config.n_layer,
        n_head=config.n_head,
        resid_pdrop=0.0,
        embd_pdrop=0.0,
        attn_pdrop=0.0,
        use_cache=False,
        bos_token_id=None,
        eos_token_id=None,
        activation_function="gelu_pytorch_tanh",  # GPT-2's tanh GELU (gelu_new) as one fused kernel
    )
    phi = config.phi
    backbone._attn_implementation = config.attn_implementation if phi == "softmax" else hf_attention(phi)
    return GPT2Model(backbone)


def vectorise(xs: torch.Tensor, ys: torch.Tensor, points: int | None = None) -> torch.Tensor:
    """The vectorised prompt of every prefix, zero-padded to ``points``: (B, P, points*d + points).

    Row n holds [x_0 .. x_n, 0 .., y_0 .. y_{n-1}, 0 ..]: the inputs up to and including the query
    and the labels strictly before it (App. A "Vectorized input").
    """
    B, P, d = xs.shape
    points = points or P
    upto = torch.ones(P, P, dtype=torch.bool, device=xs.device).tril()  # (P, P): j <= n
    before = upto.tril(-1)  # (P, P): j < n
    x_part = xs.unsqueeze(1) * upto[None, :, :, None]  # (B, P, P, d)
    y_part = ys.unsqueeze(1) * before[None]  # (B, P, P)
    x_part = nn.functional.pad(x_part.reshape(B, P, P * d), (0, (points - P) * d))
    return torch.cat([x_part, nn.functional.pad(y_part, (0, points - P))], dim=-1)


class PromptMLP(nn.Module):
    """Eq. 14 on the vectorised prompt, on feature-map rows psi(A)_{n,:}, or on both (Fig. 7)."""

    def __init__(
        self, config: ModelConfig, d: int, points: int, inputs: str | None = None, bias: bool | None = None
    ):
        super().__init__()
        self.inputs, self.feature_map, self.points = inputs or config.inputs, config.feature_map, points
        size = {"vectorised": points * (d + 1), "features": d + 1, "both": points * (d + 1) + d + 1}
        bias = config.bias if bias is None else bias
        self.net = nn.Sequential(
            nn.Linear(size[self.inputs], config.width, bias=bias),
            nn.ReLU(),
            nn.Linear(config.width, 1, bias=bias),
        )

    def features(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        parts = []
        if self.inputs in ("vectorised", "both"):
            parts.append(vectorise(xs, ys, self.points))  # (B, P, points*(d+1))
        if self.inputs in ("features", "both"):
            parts.append(feature_rows(self.feature_map, xs, ys).to(xs.dtype))  # (B, P, d+1)
        return torch.cat(parts, dim=-1)

    def head_layers(self) -> list[nn.Module]:
        """The layers after ``features``: the part with parameters (scaling.packing stacks them)."""
        return list(self.net)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return self.net(self.features(xs, ys)).squeeze(-1)  # (B, P)


class LinearOnScalar(nn.Module):
    """a * psi(A)_{n,d+1} + b: linear regression on the feature map's estimate (Fig. 6)."""

    def __init__(self, config: ModelConfig, d: int, points: int):
        super().__init__()
        self.feature_map = config.feature_map
        self.linear = nn.Linear(1, 1)

    def features(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return feature_scalar(self.feature_map, xs, ys).to(xs.dtype).unsqueeze(-1)  # (B, P, 1)

    def head_layers(self) -> list[nn.Module]:
        return [self.linear]

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return self.linear(self.features(xs, ys)).squeeze(-1)  # (B, P)


def one_layer(config: ModelConfig, d: int, points: int) -> nn.Module:
    """Eq. 9: relu(psi(A)_{n,:} W1) W2, the MLP of eq. 14 on the feature-map row, without biases as
    printed (its context-scaling goes through the linear part, on the smoother's estimate)."""
    return PromptMLP(config, d, points, inputs="features", bias=False)


def simplified_gpt(config: ModelConfig, d: int, points: int) -> nn.Module:
    return SGPT(d, points, config.n_layer, config.n_embd, config.phi)


# GPT-2 prompts are 2(N+1) tokens. Garg et al.'s released checkpoints have 202 positions, GPT-2's own
# 1024; no experiment here needs more than 1024 (N <= 511). The cap turns a typo (N: 50000) into a planning
# error instead of an out-of-memory trial.
GPT2_MAX_POSITIONS = 1024


def _gpt2_params(s) -> int:
    """GPT-2: 12 k^2 + 13 k per block, positions, a one-token vocabulary, final norm, read-in, read-out."""
    k, P = s.width, s.N + 1
    read_in = (s.d + 1 if s.layout == "stacked" else s.d) * k + k
    positions = P if s.layout == "stacked" else 2 * P
    return s.layers * (12 * k * k + 13 * k) + positions * k + k + 2 * k + read_in + k + 1


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


@dataclass(frozen=True)
class ModelFacts:
    """What the rest of the project knows of an architecture, asked of the model's own entry (the cost
    model, the packer, the planner): how to build it, its parameter count and a training step's FLOPs for
    a step shape (``s``: arch, N, d, width, layers, batch, layout, e.g. scaling.cost.StepShape), its width
    and depth under a config, whether it packs (a parameter-free ``features`` then a Linear/ReLU
    ``head_layers``: scaling.papers.context_scaling.stacked) and its position limit."""

    build: Callable[[ModelConfig, int, int], nn.Module]
    params: Callable[[object], int]
    step_flops: Callable[
        [object], float
    ]  # one training step of a batch (scaling.papers.context_scaling.flops)
    width: Callable[[ModelConfig], int] = lambda config: config.width
    layers: Callable[[ModelConfig], int] = lambda config: config.n_layer
    packable: Callable[[ModelConfig], bool] = lambda config: False
    # whether packing small cells pays on a CPU (scaling.packing's ``auto``): measured on this project's
    # 2-core CPU (docs/gpu.md, "On this CPU"): 8 packed quick-size GPT-2 cells step at 0.72x, SGPT at 0.94x
    # of the same cells one after another (a CPU is busy with arithmetic at every size the sweeps
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
        """Multiply-adds of one forward pass of a batch of prompts of ``points`` pairs, counted on the model
        built on the meta device: parameters x prompts x positions (exact for the packable MLP-type models,
        whose every parameter is used once per position)."""
        with torch.device("meta"):
            model = self.build(config, d, points)
        return float(sum(p.numel() for p in model.parameters())) * batch * points

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
            " (scaling.papers.context_scaling.models.GPT2_MAX_POSITIONS)",
        )


MODELS: dict[str, ModelFacts] = {
    "gpt2": ModelFacts(
        GPT2InContext,
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
        PromptMLP,
        _mlp_params,
        flops.head_step_flops(_head_inputs),
        packable=lambda c: True,
        settings=("width", "inputs", "feature_map", "bias"),
        unused=lambda c: ("feature_map",) if c.inputs == "vectorised" else (),
    ),
    "sgpt": ModelFacts(
        simplified_gpt,
        lambda s: s.layers * 2 * s.width**2 + s.width,
        flops.sgpt_step_flops,
        width=lambda c: c.n_embd,
        layers=lambda c: c.n_layer,
        packable=lambda c: True,
        cpu_packing_pays=False,
        settings=("n_layer", "n_embd", "attention"),
    ),
    "onelayer": ModelFacts(
        one_layer,
        _head_params,
        flops.head_step_flops(_head_inputs),
        packable=lambda c: True,
        settings=("width", "feature_map"),
    ),
    "linear_on_scalar": ModelFacts(
        LinearOnScalar,
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


def build_model(config: ModelConfig, d: int, points: int) -> nn.Module:
    """The model of ``config`` for inputs of dimension d and prompts of ``points`` (x, y) pairs."""
    return MODELS[config.arch].build(config, d, points)
