"""Garg et al. (2022)'s in-context GPT-2 and a loader for their released checkpoints.

Seed 004, App. K.1-K.2 (Fig. 6) scans attention temperature on the GPT-2 that Garg et al. pretrained on
linear regression (d = 20, 12 layers, 8 heads, width 256). Their model reads interleaved tokens
x_1, y_1, x_2, y_2, ... (each y zero-padded to d) through a linear read-in, a Hugging Face GPT2Model with
causal attention and a linear read-out, and reads the prediction of y_n at the position of x_n, so one
forward pass scores every prefix. Checkpoints are `state.pt` files holding
{"model_state_dict", "optimizer_state_dict", "train_step"}; they were saved by an old transformers whose
GPT-2 attention carried the buffers `attn.bias` and `attn.masked_bias`, dropped here before a strict load.
"""

from __future__ import annotations

from pathlib import Path
import re

import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

from ..science.models import interleaved_tokens

CHECKPOINT_FILE = "state.pt"
_LEGACY_BUFFER = re.compile(r"^_backbone\.h\.\d+\.attn\.(bias|masked_bias)$")


class InterleavedGPT2(nn.Module):
    """predict(xs, ys) -> (B, N+1): column n predicts ys[:, n] from pairs 0..n-1 and xs[:, n]."""

    def __init__(
        self,
        n_dims: int = 20,
        n_positions: int = 202,
        n_embd: int = 256,
        n_layer: int = 12,
        n_head: int = 8,
        attn_implementation: str = "eager",
    ):
        super().__init__()
        self.n_dims = n_dims
        config = GPT2Config(
            n_positions=n_positions,  # tokens, two per (x, y) pair
            n_embd=n_embd,
            n_layer=n_layer,
            n_head=n_head,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
            attn_implementation=attn_implementation,
        )
        self._read_in = nn.Linear(n_dims, n_embd)
        self._backbone = GPT2Model(config)
        self._read_out = nn.Linear(n_embd, 1)

    def interleaved_tokens(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """xs (B, N+1, d <= n_dims), ys (B, N+1) -> tokens (B, 2(N+1), n_dims): x_0, y_0, x_1, y_1, ..."""
        if xs.shape[-1] > self.n_dims:
            raise ValueError(f"inputs have dimension {xs.shape[-1]} > the model's n_dims = {self.n_dims}")
        return interleaved_tokens(xs, ys, self.n_dims)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        tokens = self.interleaved_tokens(xs, ys)  # (B, 2(N+1), n_dims)
        hidden = self._backbone(inputs_embeds=self._read_in(tokens)).last_hidden_state  # (B, 2(N+1), n_embd)
        return self._read_out(hidden)[:, ::2, 0]  # (B, N+1), read at the x positions

    def predict(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        with torch.no_grad():
            return self(xs, ys)


def _checkpoint_file(path: str | Path) -> Path:
    path = Path(path)
    file = path / CHECKPOINT_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(f"no Garg et al. checkpoint at {file} (expected models/<task>/<run>/{CHECKPOINT_FILE})")
    return file


def current_state_dict(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The checkpoint's weights without the legacy GPT-2 attention buffers current transformers lacks."""
    return {k: v for k, v in model_state.items() if not _LEGACY_BUFFER.match(k)}


def load_garg_gpt2(
    path: str | Path,
    n_dims: int = 20,
    n_positions: int = 202,
    n_embd: int = 256,
    n_layer: int = 12,
    n_head: int = 8,
    attn_implementation: str = "eager",
    device: torch.device | str = "cpu",
    dtype: torch.dtype = torch.float32,
) -> InterleavedGPT2:
    """Build InterleavedGPT2 with the given sizes and strictly load a released `state.pt` into it (eval mode)."""
    state = torch.load(_checkpoint_file(path), map_location="cpu", weights_only=True)
    model = InterleavedGPT2(n_dims, n_positions, n_embd, n_layer, n_head, attn_implementation)
    model.load_state_dict(current_state_dict(state["model_state_dict"]), strict=True)
    return model.to(device=device, dtype=dtype).eval()
