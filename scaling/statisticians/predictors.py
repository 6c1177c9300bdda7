"""The constructed transformers as predictors of every prefix of a batch of prompts.

Prompts are xs (B, P, d) and ys (B, P); column n of a prediction predicts ys[:, n] from the pairs j < n
and x_n, as every predictor of the project does. The transformers work in encoder mode (Sec. 2): prefix n
is its own sequence of n example tokens and the test token x_n (eq. 2.2), so a batch of P columns is P
forward passes.
"""
from __future__ import annotations

import torch

from .constructions import BOUND
from .reference import DTYPE, indicators
from .transformer import ReLUTransformer, tokens


class OutOfBound(ArithmeticError):
    """A construction's scores left the range in which it is exact (see constructions.BOUND)."""


@torch.no_grad()
def prefix_predictions(model: ReLUTransformer, xs: torch.Tensor, ys: torch.Tensor, read: str,
                       val_fraction: float = 0.0, bound: float = BOUND) -> torch.Tensor:
    """Slot ``read`` of the test token after ``model``, for every prefix n = 0..P-1: (B, P) in float64.
    The last ``val_fraction`` of each prefix's examples validate (t = -1); the rest train (t = 1)."""
    B, P, _ = xs.shape
    out = torch.zeros(B, P, dtype=DTYPE, device=xs.device)
    column = model.slots.at(read)
    for n in range(P):
        H = tokens(model.slots, xs[:, :n + 1], ys[:, :n + 1], indicators(n, val_fraction, xs.device))
        H = model(H)
        largest = float(H.abs().amax()) if H.numel() else 0.0
        if not largest * 2 < bound:
            raise OutOfBound(f"a token coordinate reached {largest:.3g}; the construction is exact only below "
                             f"bound / 2 = {bound / 2:.3g} (lower eta or raise bound)")
        out[:, n] = H[:, n, column]
    return out
