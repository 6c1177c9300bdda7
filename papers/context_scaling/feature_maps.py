"""Feature maps psi(A) of seed 001 Sec. 5.1 and App. B, for every prefix of a prompt batch at once.

A prompt of context length n is A_n in R^{(n+1) x (d+1)}: rows [x_j, y_j] for the pairs j < n and the
query row [x_n, 0] (eq. 2). A feature map sends A_n to psi(A_n); the model of eq. 9 reads its last row
psi(A_n)_{n,:} in R^{d+1} (the *row form*) and Fig. 6 its last entry psi(A_n)_{n,d+1} (the *scalar form*).
``feature_rows(name, xs, ys)`` returns row n of psi(A_n) for every n in one batched pass, (B, P, d+1):
row n depends only on the pairs j < n and on x_n (causal masking), never on y_n or later points.

- ``linear`` / ``linear_sum``: psi_L(A) = (A A^T) A, one step of gradient descent (eq. 10). Row n is
  sum_{j<n} (x_n^T x_j) [x_j, y_j] + ||x_n||^2 [x_n, 0]; its last entry is x_n^T X^T y (App. B).
  ``linear_sum`` is eq. 10 as printed. ``linear`` divides by the n+1 rows of A_n. Choice and reason: App. B
  derives psi_L on a single fixed-size prompt, where a constant factor is absorbed by W^(1) of eq. 9; here
  one model serves every context length (the loss is over every prefix), and the unnormalised entry grows
  like n * beta^T x_n, so no fixed weight can read it at every n. Divided by the context size it is the
  one-step-GD estimate with step 1/(n+1), which tends to beta^T x_n as n grows (E[x x^T] = I): the
  consistent, scale-free form, on the same O(1) scale as the kernel smoothers' row-normalised weights.
  Sweeps use ``linear``; ``linear_sum`` stays for the literal formula.
- ``hilbert`` / ``exponential``: kernel smoothers psi_K(A) = K_hat(X, X) A with zero diagonal and
  row-normalised weights (eqs. 11-12): row n = sum_{j<n} K(x_n, x_j) [x_j, y_j] / sum_{j<n} K(x_n, x_j),
  with the Hilbert kernel H(x, x') = ||x - x'||^-d (eq. 5) or the exponential kernel exp(x^T x') (softmax
  attention). Both are computed as a softmax of log-weights: -d log||x_n - x_j|| (distances clamped to the
  smallest normal float, so coincident points dominate and share the weight, the kernel's limit) and
  x_n^T x_j, max-subtracted. Row 0 (no context) is zero.
- ``l1_attention``: one layer of SGPT attention, phi(A A^T) A with phi the row-wise l1 normalisation and
  causal attention including the query row itself (eq. 6; the psi of the one-layer model of Fig. 5).
"""

from __future__ import annotations

from typing import Callable

import torch


def stacked_rows(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Rows [x_j, y_j] of the prompt, (B, P, d+1)."""
    return torch.cat([xs, ys.unsqueeze(-1)], dim=-1)


def query_rows(xs: torch.Tensor) -> torch.Tensor:
    """Query rows [x_n, 0], (B, P, d+1)."""
    return torch.cat([xs, torch.zeros_like(xs[..., :1])], dim=-1)


def _before(P: int, device: torch.device) -> torch.Tensor:
    """(P, P) bool: entry (n, j) is j < n, the context of the query at n."""
    return torch.ones(P, P, dtype=torch.bool, device=device).tril(-1)


def _gd_rows(xs: torch.Tensor, ys: torch.Tensor, normalise: bool) -> torch.Tensor:
    P = xs.shape[1]
    gram = xs @ xs.transpose(1, 2)  # (B, P, P): x_n^T x_j
    context = (gram * _before(P, xs.device)) @ stacked_rows(xs, ys)  # (B, P, d+1)
    rows = context + gram.diagonal(dim1=1, dim2=2).unsqueeze(-1) * query_rows(xs)
    if normalise:
        rows = rows / torch.arange(1, P + 1, dtype=xs.dtype, device=xs.device)[None, :, None]
    return rows


def linear_rows(xs, ys):
    return _gd_rows(xs, ys, normalise=True)


def linear_sum_rows(xs, ys):
    return _gd_rows(xs, ys, normalise=False)


def smoother_rows(log_weights: torch.Tensor, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Kernel smoother of every prefix from log kernel values (B, P, P): row n averages pairs j < n."""
    allowed = _before(xs.shape[1], xs.device)  # (P, P)
    logits = log_weights.masked_fill(~allowed, torch.finfo(log_weights.dtype).min)
    weights = torch.softmax(logits, dim=-1) * allowed  # row 0 -> all zero
    return weights @ stacked_rows(xs, ys)  # (B, P, d+1)


def hilbert_rows(xs, ys):
    d = xs.shape[-1]
    dist = torch.cdist(xs, xs, compute_mode="donot_use_mm_for_euclid_dist")  # (B, P, P), exact zeros
    log_dist = dist.clamp_min(torch.finfo(dist.dtype).tiny).log()
    return smoother_rows(-d * log_dist, xs, ys)


def exponential_rows(xs, ys):
    return smoother_rows(xs @ xs.transpose(1, 2), xs, ys)


def l1_attention_rows(xs, ys):
    P = xs.shape[1]
    gram = xs @ xs.transpose(1, 2)  # (B, P, P)
    upto = torch.ones(P, P, dtype=torch.bool, device=xs.device).tril()
    scores = gram * upto
    weights = scores / scores.abs().sum(-1, keepdim=True).clamp_min(torch.finfo(xs.dtype).tiny)
    context = (weights * _before(P, xs.device)) @ stacked_rows(xs, ys)  # pairs j < n
    return context + weights.diagonal(dim1=1, dim2=2).unsqueeze(-1) * query_rows(xs)


FEATURE_MAPS: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "linear": linear_rows,
    "linear_sum": linear_sum_rows,
    "hilbert": hilbert_rows,
    "exponential": exponential_rows,
    "l1_attention": l1_attention_rows,
}


def feature_rows(name: str, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """psi(A_n)_{n,:} for every prefix n, (B, P, d+1), computed in float32 at least (never autocast)."""
    if name not in FEATURE_MAPS:
        raise KeyError(f"unknown feature map {name!r}; known: {', '.join(FEATURE_MAPS)}")
    dtype = torch.promote_types(xs.dtype, torch.float32)
    with torch.autocast(xs.device.type, enabled=False):
        return FEATURE_MAPS[name](xs.to(dtype), ys.to(dtype))


def feature_scalar(name: str, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """psi(A_n)_{n,d+1} for every prefix n, (B, P): the estimator's prediction of y_n."""
    return feature_rows(name, xs, ys)[..., -1]
