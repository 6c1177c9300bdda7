"""Attention nonlinearities phi (seed 001 eq. 3 and 6; Bai et al. 2023, seed 003) and token masks.

``ATTENTIONS`` maps a name to phi applied to the scores S (..., L, L) under a boolean mask of allowed
(query, key) pairs:

- ``softmax``: row-wise softmax of S over the allowed keys (GPT-2).
- ``l1``: S / sum_j |S_ij| over the allowed keys, the row-wise l1 normalisation of SGPT (eq. 6).
- ``relu``: relu(S) divided by the number of allowed keys (Bai et al.'s ReLU attention normalised by 1/N).
- ``identity``: S itself on the allowed keys (linear attention).

For Hugging Face GPT-2, ``hf_attention(name)`` registers phi as an attention function with transformers'
``AttentionInterface`` and the eager mask function under the same name (without it the causal mask silently
disappears: the specification, ../shared/FIGURES.md, warns of it); the models also always pass their own 4D
mask.

``stacked_prefix_mask(P)`` is the mask that lets one forward pass score every prefix of a stacked prompt
(seed 001 eq. 2): the sequence is the P context tokens [x_j; y_j] followed by the P query tokens
[x_n; 0]. Context token j sees context tokens <= j (causal); query token n sees context tokens < n and
itself. Query n thus sees exactly the prompt A_n of eq. 2 in causal order, while no token ever sees y_n
through the query of position n: the same numbers as P separate causal forward passes.
"""

from __future__ import annotations

from typing import Callable

import torch


def softmax_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.softmax(scores.masked_fill(~allowed, torch.finfo(scores.dtype).min), dim=-1) * allowed


def l1_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    scores = scores * allowed
    return scores / scores.abs().sum(-1, keepdim=True).clamp_min(torch.finfo(scores.dtype).tiny)


def relu_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return torch.relu(scores) * allowed / allowed.sum(-1, keepdim=True).clamp_min(1)


def identity_weights(scores: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
    return scores * allowed


ATTENTIONS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "softmax": softmax_weights,
    "l1": l1_weights,
    "relu": relu_weights,
    "identity": identity_weights,
}


def causal_mask(L: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(L, L) bool: token i sees tokens j <= i."""
    return torch.ones(L, L, dtype=torch.bool, device=device).tril()


def stacked_prefix_mask(P: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """(2P, 2P) bool over [context tokens 0..P-1, query tokens 0..P-1]; see the module docstring."""
    mask = torch.zeros(2 * P, 2 * P, dtype=torch.bool, device=device)
    mask[:P, :P] = causal_mask(P, device)
    mask[P:, :P] = causal_mask(P, device).tril(-1)
    mask[P:, P:] = torch.eye(P, dtype=torch.bool, device=device)
    return mask


def additive_mask(allowed: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """(L, L) bool -> (1, 1, L, L) additive float mask (0 allowed, dtype min blocked), the 4D HF form."""
    blocked = torch.zeros(allowed.shape, dtype=dtype, device=allowed.device)
    return blocked.masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def _allowed_from(mask: torch.Tensor | None, scores: torch.Tensor) -> torch.Tensor:
    if mask is None:
        L, S = scores.shape[-2:]
        return torch.ones(L, S, dtype=torch.bool, device=scores.device).tril(S - L)
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def hf_attention(name: str) -> str:
    """Register phi ``name`` with transformers (once) and return the attn_implementation to use."""
    if name not in ATTENTIONS:
        raise KeyError(f"unknown attention {name!r}; known: {', '.join(ATTENTIONS)}")
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface, eager_mask

    impl = f"icl_{name}"
    phi = ATTENTIONS[name]

    def forward(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
        scaling = query.size(-1) ** -0.5 if scaling is None else scaling
        scores = (query @ key.transpose(-1, -2)) * scaling  # (B, h, L, L)
        weights = phi(scores, _allowed_from(attention_mask, scores)).to(value.dtype)
        weights = torch.nn.functional.dropout(weights, p=dropout, training=module.training)
        return (weights @ value).transpose(1, 2), weights  # (B, L, h, hd)

    AttentionInterface.register(impl, forward)
    AttentionMaskInterface.register(impl, eager_mask)
    return impl
