"""In-context models: GPT-2 on interleaved tokens and the MLP on the vectorised prompt (seed 001, App. A).

Every model maps a prompt batch ``xs`` (B, N+1, d), ``ys`` (B, N+1) to a prediction at every position:
column n predicts ys[:, n] from the pairs 0..n-1 and the query xs[:, n] (the one predictor interface,
shared with the baselines).

- ``gpt2``: Hugging Face GPT2Model with a learnable linear read-in to the embedding width and a linear
  read-out, tokens x_1, y_1, x_2, y_2, ... with y zero-padded to d, causal attention, predictions read
  at the x tokens (Garg et al. 2022; seed 001 App. A "GPT-2"). Vocabulary of size 1 (never used).
- ``mlp``: eq. 14, f(x) = relu(x W_0) W_1 with width 1024 by default, on the vectorised prompt
  [x_1 .. x_{n+1}, y_1 .. y_n] zero-padded to the cell's N (App. A "Zero-padding input for MLP"): one
  model serves every context length.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

from .config import check, check_choice


@dataclass(frozen=True)
class ModelConfig:
    """An architecture and its sizes; ``name`` is the label a sweep gives it (the model axis)."""

    arch: str = "gpt2"
    name: str = ""               # label in run names and figures; defaults to arch
    n_layer: int = 8             # GPT-2 blocks
    n_head: int = 8              # GPT-2 attention heads
    n_embd: int = 256            # GPT-2 width
    width: int = 1024            # MLP hidden width (eq. 14)
    attn_implementation: str = "sdpa"

    def __post_init__(self):
        check_choice(self.arch, "arch", MODELS)
        for field in ("n_layer", "n_head", "n_embd", "width"):
            check(getattr(self, field) >= 1, field, f"must be >= 1, got {getattr(self, field)}")
        check(self.n_embd % self.n_head == 0, "n_embd",
              f"width {self.n_embd} must be divisible by n_head {self.n_head}")
        check_choice(self.attn_implementation, "attn_implementation", ("eager", "sdpa"))

    @property
    def label(self) -> str:
        return self.name or self.arch


class GPT2InContext(nn.Module):
    """GPT-2 backbone with linear read-in/read-out on interleaved (x, y) tokens."""

    def __init__(self, config: ModelConfig, d: int, points: int):
        super().__init__()
        backbone = GPT2Config(
            vocab_size=1, n_positions=2 * points, n_embd=config.n_embd, n_layer=config.n_layer,
            n_head=config.n_head, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
            bos_token_id=None, eos_token_id=None,
        )
        backbone._attn_implementation = config.attn_implementation
        self.d, self.points = d, points
        self.read_in = nn.Linear(d, config.n_embd)
        self.backbone = GPT2Model(backbone)
        self.read_out = nn.Linear(config.n_embd, 1)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        B, P, d = xs.shape
        tokens = torch.zeros(B, 2 * P, d, dtype=xs.dtype, device=xs.device)   # (B, 2P, d)
        tokens[:, 0::2] = xs
        tokens[:, 1::2, 0] = ys
        hidden = self.backbone(inputs_embeds=self.read_in(tokens)).last_hidden_state  # (B, 2P, k)
        return self.read_out(hidden[:, 0::2]).squeeze(-1)                    # (B, P)


def vectorise(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """The vectorised prompt of every prefix, zero-padded: (B, P, P*d + P).

    Row n holds [x_0 .. x_n, 0 .., y_0 .. y_{n-1}, 0 ..]: the inputs up to and including the query
    and the labels strictly before it (App. A "Vectorized input").
    """
    B, P, d = xs.shape
    upto = torch.ones(P, P, dtype=torch.bool, device=xs.device).tril()       # (P, P): j <= n
    before = upto.tril(-1)                                                   # (P, P): j < n
    x_part = xs.unsqueeze(1) * upto[None, :, :, None]                        # (B, P, P, d)
    y_part = ys.unsqueeze(1) * before[None]                                  # (B, P, P)
    return torch.cat([x_part.reshape(B, P, P * d), y_part], dim=-1)


class VectorisedMLP(nn.Module):
    """Eq. 14 on the vectorised, zero-padded prompt: one model for every context length."""

    def __init__(self, config: ModelConfig, d: int, points: int):
        super().__init__()
        self.net = nn.Sequential(
            nn.Linear(points * (d + 1), config.width, bias=False), nn.ReLU(),
            nn.Linear(config.width, 1, bias=False),
        )

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return self.net(vectorise(xs, ys)).squeeze(-1)                       # (B, P)


MODELS: dict[str, Callable[[ModelConfig, int, int], nn.Module]] = {
    "gpt2": GPT2InContext,
    "mlp": VectorisedMLP,
}


def build_model(config: ModelConfig, d: int, points: int) -> nn.Module:
    """The model of ``config`` for inputs of dimension d and prompts of ``points`` (x, y) pairs."""
    return MODELS[config.arch](config, d, points)
