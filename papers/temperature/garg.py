"""Garg et al. (2022)'s in-context GPT-2 checkpoints, loaded into the project's own GPT-2 model.

Seed 004, App. K.1-K.2 (Fig. 6) scans attention temperature on the GPT-2 that Garg et al. pretrained on
linear regression (d = 20, 12 layers, 8 heads, width 256). Their model is the project's interleaved GPT-2
(papers.context_scaling.models.GPT2InContext): tokens x_1, y_1, x_2, y_2, ... (each y zero-padded to
d) through a linear read-in, GPT-2's transformer with causal attention and a linear read-out, the prediction
of y_n read at the position of x_n, so one forward pass scores every prefix. Only the parameter names differ,
so loading is a renaming, as nanoGPT's ``from_pretrained`` renames Hugging Face's weights:

    _read_in.*   -> read_in.*      _backbone.*  -> backbone.*      _read_out.*  -> read_out.*

Checkpoints are ``state.pt`` files holding {"model_state_dict", "optimizer_state_dict", "train_step"};
they were saved by an old transformers whose GPT-2 attention carried the buffers ``attn.bias`` and
``attn.masked_bias`` (dropped) and with GPT-2's 50257-row token embedding, which no input of an
in-context model reads (its first row is kept, the project's models have one). The load is strict: any
other missing or unexpected weight is an error.
"""

from __future__ import annotations

import re
from pathlib import Path

import torch

from papers.context_scaling.models import GPT2InContext, ModelConfig

CHECKPOINT_FILE = "state.pt"
RENAMES = (("_read_in.", "read_in."), ("_backbone.", "backbone."), ("_read_out.", "read_out."))
TOKEN_EMBEDDING = "backbone.wte.weight"
_LEGACY_BUFFER = re.compile(r"^_backbone\.h\.\d+\.attn\.(bias|masked_bias)$")


def garg_model(
    n_dims: int = 20,
    n_positions: int = 202,
    n_embd: int = 256,
    n_layer: int = 12,
    n_head: int = 8,
    attn_implementation: str = "eager",
) -> GPT2InContext:
    """The project's interleaved GPT-2 with the sizes of a Garg et al. model (``n_positions`` tokens, two
    per (x, y) pair; inputs of dimension <= n_dims are zero-padded). Eager attention by default, the
    implementation the temperature tools record scores from."""
    if n_positions % 2:
        raise ValueError(
            f"n_positions={n_positions}: Garg et al.'s models take two tokens per pair (an even count)"
        )
    config = ModelConfig(
        arch="gpt2", n_embd=n_embd, n_layer=n_layer, n_head=n_head, attn_implementation=attn_implementation
    )
    return GPT2InContext(config, d=n_dims, points=n_positions // 2)


def from_garg_names(model_state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """A Garg et al. state dict under the project's names: renamed, legacy attention buffers dropped, the
    token embedding cut to its first row."""
    state = {}
    for key, value in model_state.items():
        if _LEGACY_BUFFER.match(key):
            continue
        for old, new in RENAMES:
            if key.startswith(old):
                key = new + key[len(old) :]
                break
        state[key] = value[:1] if key == TOKEN_EMBEDDING else value
    return state


def to_garg_names(model_state: dict[str, torch.Tensor], vocab: int = 50257) -> dict[str, torch.Tensor]:
    """The inverse: a GPT2InContext's state dict in the released checkpoints' format (names, a ``vocab``-row
    token embedding whose first row is the model's), to write checkpoints as Garg et al.'s code does."""
    state = {}
    for key, value in model_state.items():
        if key == TOKEN_EMBEDDING:
            value = torch.cat([value, value.new_zeros(vocab - value.shape[0], value.shape[1])])
        for old, new in RENAMES:
            if key.startswith(new):
                key = old + key[len(new) :]
                break
        state[key] = value
    return state


def _checkpoint_file(path: str | Path) -> Path:
    path = Path(path)
    file = path / CHECKPOINT_FILE if path.is_dir() else path
    if not file.is_file():
        raise FileNotFoundError(
            f"no Garg et al. checkpoint at {file} (expected models/<task>/<run>/{CHECKPOINT_FILE})"
        )
    return file


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
) -> GPT2InContext:
    """garg_model with the given sizes, a released ``state.pt`` strictly loaded into it (eval mode)."""
    state = torch.load(_checkpoint_file(path), map_location="cpu", weights_only=True)
    model = garg_model(n_dims, n_positions, n_embd, n_layer, n_head, attn_implementation)
    weights = from_garg_names(state["model_state_dict"])
    try:
        model.load_state_dict(weights, strict=True)
    except RuntimeError as err:  # name the checkpoint's own keys, not the renamed ones
        message = str(err)
        for old, new in RENAMES:
            message = message.replace(f'"{new}', f'"{old}')
        raise RuntimeError(f"{_checkpoint_file(path)}: {message}") from None
    return model.to(device=device, dtype=dtype).eval()
