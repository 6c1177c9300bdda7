"""SGPT, the simplified GPT-2 of seed 001 (Sec. 4 eq. 6, App. A eq. 13), on stacked tokens.

The input is the stacked prompt of eq. 2, rows a = [x; y] in R^{d+1} with the query's y = 0. A fixed,
random, non-trainable read-in W_0 in R^{(d+1) x k} gives H^(0) = A W_0. Each of the L layers is eq. 13:

    U = g(H) W_proj + H,    H <- sigma(U W_MLP) + U,    g(H) = phi(H H^T / sqrt(k)) H

with key, query and value fixed to the identity (no parameters), phi the row-wise l1 normalisation by
default (``attention`` picks another phi from papers.context_scaling.attention), causal attention,
sigma = GeLU, no layer
norms, one linear layer per MLP block and no biases; the read-out is linear, W_O in R^{k x 1}. The
1/sqrt(k) of eq. 3 cancels under the default l1 normalisation, so the default is exactly eq. 6; it keeps
the other phi (softmax, relu/N, identity) on a usable scale.

Every prefix is scored in one pass with the stacked-prefix mask
(papers.context_scaling.attention.stacked_prefix_mask):
the sequence holds the P context tokens then the P query tokens [x_n; 0], and query n sees the context
tokens j < n and itself, which is the causal forward pass of A_n. Predictions are read at the queries.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from papers.context_scaling.attention import ATTENTIONS, stacked_prefix_mask
from papers.context_scaling.feature_maps import query_rows, stacked_rows


class SGPT(nn.Module):
    def __init__(self, d: int, points: int, n_layer: int, width: int, attention: str = "l1"):
        super().__init__()
        self.phi = ATTENTIONS[attention]
        self.width = width
        self.register_buffer("read_in", torch.randn(d + 1, width) / math.sqrt(d + 1))  # W_0, frozen
        self.proj = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(n_layer))
        self.mlp = nn.ModuleList(nn.Linear(width, width, bias=False) for _ in range(n_layer))
        self.read_out = nn.Linear(width, 1, bias=False)

    def attend(self, H: torch.Tensor, allowed: torch.Tensor) -> torch.Tensor:
        """g(H) = phi(H H^T / sqrt(k)) H under the mask, (B, L, k)."""
        scores = H @ H.transpose(1, 2) / math.sqrt(self.width)  # (B, L, L)
        return self.phi(scores, allowed) @ H

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        P = xs.shape[1]
        tokens = torch.cat([stacked_rows(xs, ys), query_rows(xs)], dim=1)  # (B, 2P, d+1)
        allowed = stacked_prefix_mask(P, xs.device)  # (2P, 2P)
        H = tokens @ self.read_in.to(tokens.dtype)  # (B, 2P, k)
        for proj, mlp in zip(self.proj, self.mlp):
            U = proj(self.attend(H, allowed)) + H
            H = nn.functional.gelu(mlp(U)) + U
        return self.read_out(H[:, P:]).squeeze(-1)  # (B, P)
