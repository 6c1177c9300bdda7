"""In-context models of seed 001 (Sec. 4-5, App. A): GPT-2, SGPT, the one-layer model and MLPs.

Every model maps a prompt batch ``xs`` (B, N+1, d), ``ys`` (B, N+1) to a prediction at every position:
column n predicts ys[:, n] from the pairs 0..n-1 and the query xs[:, n] (the one predictor interface,
shared with the baselines). ``BUILDERS`` builds each architecture (``arch``; their configs and facts,
without torch: papers.context_scaling.architectures):

- ``gpt2``: GPT-2 (papers.context_scaling.gpt2; transformers' GPT2Model for the other phis and eager
  attention) with a learnable linear read-in to the embedding width and a linear read-out (App. A "GPT-2").
  ``layout: interleaved`` (Garg et al. 2022): tokens x_1, y_1, x_2, y_2, ...
  with y zero-padded to d, causal attention, predictions read at the x tokens. ``layout: stacked`` (eq. 2):
  tokens [x_j; y_j] in R^{d+1}, the query [x_n; 0]; one pass scores every prefix by appending the P query
  tokens after the P context tokens with the stacked-prefix mask (papers.context_scaling.attention):
  query n sees the context tokens j < n and itself, at position n, which is exactly the causal pass over A_n,
  and y_n is never seen at column n. ``attention`` picks phi (softmax by default; l1, relu, identity are
  registered with transformers' AttentionInterface together with a mask function of the same name).
- ``sgpt``: eq. 13 (papers.context_scaling.sgpt), identity key/query/value, frozen random read-in, l1
attention.
- ``onelayer``: eq. 9, f(A) = relu(psi(A)_{n,:} W1) W2 of width ``width``, psi = ``feature_map``
  (papers.context_scaling.feature_maps).
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

from typing import Callable

import torch
from torch import nn

from papers.context_scaling.architectures import ModelConfig, own_backbone
from papers.context_scaling.attention import additive_mask, hf_attention, stacked_prefix_mask
from papers.context_scaling.feature_maps import feature_rows, feature_scalar, query_rows, stacked_rows
from papers.context_scaling.gpt2 import GPT2Backbone
from papers.context_scaling.sgpt import SGPT


def interleaved_tokens(xs: torch.Tensor, ys: torch.Tensor, width: int | None = None) -> torch.Tensor:
    """Garg et al.'s tokens x_0, y_0, x_1, y_1, ...: (B, 2P, width), x zero-padded to ``width`` (default d)
    and y in the first coordinate of a zero vector."""
    B, P, d = xs.shape
    tokens = xs.new_zeros(B, 2 * P, width or d)  # (B, 2P, width)
    tokens[:, 0::2, :d] = xs
    tokens[:, 1::2, 0] = ys
    return tokens


class GPT2InContext(nn.Module):
    """GPT-2 backbone with linear read-in/read-out on interleaved or stacked tokens."""

    def __init__(self, config: ModelConfig, d: int, points: int):
        super().__init__()
        self.layout, self.d, self.points = config.layout, d, points
        stacked = config.layout == "stacked"
        positions = points if stacked else 2 * points
        self.read_in = nn.Linear(d + 1 if stacked else d, config.n_embd)
        # Softmax attention through SDPA (the default; either layout) runs papers.context_scaling
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
        """Predictions at the x tokens. With papers.context_scaling.gpt2 the final y token is dropped
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
        mask (eq. 2; papers.context_scaling.attention.stacked_prefix_mask), context token j and
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
        """The layers after ``features``: the part with parameters (scaling.budget.packing stacks them)."""
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


# what builds each architecture's model from (config, d, points); the architectures' facts are
# papers.context_scaling.architectures.MODELS (tests/test_models.py: the same keys)
BUILDERS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "gpt2": GPT2InContext,
    "mlp": PromptMLP,
    "sgpt": simplified_gpt,
    "onelayer": one_layer,
    "linear_on_scalar": LinearOnScalar,
}


def build_model(config: ModelConfig, d: int, points: int) -> nn.Module:
    """The model of ``config`` for inputs of dimension d and prompts of ``points`` (x, y) pairs."""
    return BUILDERS[config.arch](config, d, points)
