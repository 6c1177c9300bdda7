"""Explicit references for the constructed transformers (seed 003): gradient descent written as gradient
descent (eq. 3.1), closed-form ridge, and the prompts' token indicators (which examples train, which
validate). Everything in float64.

The attention layers divide by the N examples of a prompt, so the gradient step of the constructions is
w <- w - (eta / N) [sum_{j: t_j = 1} (<w, x_j> - y_j) x_j + lam w]: gradient descent on the ridge risk
(1/2N) [sum_{t_j = 1} (<w, x_j> - y_j)^2 + lam ||w||^2], whose minimiser is the project's ridge
(G + lam I)^+ b with G = sum_{t_j = 1} x_j x_j^T, b = sum_{t_j = 1} y_j x_j
(papers.context_scaling.baselines).
"""

from __future__ import annotations

import torch

DTYPE = torch.float64


def explicit_gd(
    xs: torch.Tensor, ys: torch.Tensor, train: torch.Tensor, steps: int, eta: float, lam: float = 0.0
) -> torch.Tensor:
    """``steps`` steps of gradient descent from w = 0 on the examples where ``train`` is true:
    xs (B, N, d), ys (B, N), train (N,) or (B, N) -> w (B, d). The gradient sum is divided by N."""
    xs, ys = xs.to(DTYPE), ys.to(DTYPE)
    B, N, d = xs.shape
    mask = torch.as_tensor(train, device=xs.device).expand(B, N).to(DTYPE)
    w = torch.zeros(B, d, dtype=DTYPE, device=xs.device)
    for _ in range(steps):
        residual = (torch.einsum("bnd,bd->bn", xs, w) - ys) * mask  # (B, N)
        w = w - eta * (torch.einsum("bn,bnd->bd", residual, xs) + lam * w) / max(N, 1)
    return w


def prefix_grams(xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """G_n = sum_{j<n} x_j x_j^T (B, P, d, d) and b_n = sum_{j<n} y_j x_j (B, P, d) of every prefix n."""
    xs, ys = xs.to(DTYPE), ys.to(DTYPE)
    outer = xs.unsqueeze(-1) * xs.unsqueeze(-2)
    xy = xs * ys.unsqueeze(-1)
    return torch.cumsum(outer, 1) - outer, torch.cumsum(xy, 1) - xy


def prefix_gd_weights(
    xs: torch.Tensor, ys: torch.Tensor, steps: int, eta: float, lam: float = 0.0
) -> torch.Tensor:
    """Gradient descent on every prefix of every prompt at once, every example training: (B, P, d);
    prefix n uses the pairs j < n (w = 0 at n = 0). The same iteration as ``explicit_gd`` on G_n, b_n."""
    grams, rhs = prefix_grams(xs, ys)
    n = torch.arange(xs.shape[1], dtype=DTYPE, device=xs.device).clamp(min=1).reshape(1, -1, 1)
    w = torch.zeros_like(rhs)
    for _ in range(steps):
        w = w - eta * (torch.einsum("bpij,bpj->bpi", grams, w) - rhs + lam * w) / n
    return w


def prefix_ridge_weights(xs: torch.Tensor, ys: torch.Tensor, lam: float = 0.0) -> torch.Tensor:
    """The minimiser of sum_{j<n} (<w, x_j> - y_j)^2 + lam ||w||^2 on every prefix: (B, P, d),
    (G_n + lam I)^+ b_n (the minimum-norm least squares at lam = 0: where GD from 0 converges)."""
    grams, rhs = prefix_grams(xs, ys)
    d = xs.shape[-1]
    A = grams + lam * torch.eye(d, dtype=DTYPE, device=xs.device)
    return (torch.linalg.pinv(A, hermitian=True) @ rhs.unsqueeze(-1)).squeeze(-1)


def validation_split(n: int, val_fraction: float) -> tuple[int, int]:
    """(training, validation) examples of a prompt of n: the last v = max(1, round(val_fraction n)) examples
    validate (none when val_fraction = 0), the first n - v train."""
    if n == 0 or val_fraction == 0:
        return n, 0
    v = min(n, max(1, round(val_fraction * n)))
    return n - v, v


def indicators(n: int, val_fraction: float = 0.0, device: torch.device | str = "cpu") -> torch.Tensor:
    """t of the n examples and the test token (eq. 2.2, Sec. 4): 1 (train), -1 (validate), then 0: (n+1,)."""
    train, val = validation_split(n, val_fraction)
    return torch.tensor([1.0] * train + [-1.0] * val + [0.0], dtype=DTYPE, device=device)
