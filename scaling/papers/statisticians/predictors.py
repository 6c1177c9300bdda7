"""The constructed transformers as predictors of every prefix of a batch of prompts (the project's
predictor interface, scaling.papers.context_scaling.baselines.Predictor, on xs and ys).

Prompts are xs (B, P, d) and ys (B, P); column n of a prediction predicts ys[:, n] from the pairs j < n
and x_n, as every predictor of the project does. The transformers work in encoder mode (Sec. 2): prefix n
is its own sequence of n example tokens and the test token x_n (eq. 2.2), divided by its own N = n.
Prefixes of similar length run as one batch, padded with all-zero tokens: a zero token is inert (its
query, key and value are 0, so relu(0) = 0 adds nothing anywhere, and the MLPs have no biases), so a
padded sequence computes exactly what it would alone (tests/test_statisticians.py checks this).
"""

from __future__ import annotations

import torch

from .constructions import BOUND
from .reference import DTYPE, validation_split
from .transformer import ReLUTransformer, Slots

MEMORY = 1 << 26  # bytes of attention weights (B, M, T, T) one batch of prefixes may hold


class OutOfBound(ArithmeticError):
    """A construction's scores left the range in which it is exact (see constructions.BOUND)."""


def prefix_tokens(
    slots: Slots, xs: torch.Tensor, ys: torch.Tensor, ns: list[int], length: int, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eq. 2.2 tokens of prefixes ``ns`` of every prompt, padded with zero tokens to ``length``:
    (B * len(ns), length, D) ordered prompt-major, and N = max(n, 1) of each sequence ((B * len(ns),)).
    Prefix n: examples 0..n-1 (the first train, t = 1; the last ``val_fraction`` validate, t = -1), then
    x_n with its label hidden (t = 0)."""
    B, _, d = xs.shape
    H = torch.zeros(B, len(ns), length, slots.dim, dtype=DTYPE, device=xs.device)
    for g, n in enumerate(ns):
        train, val = validation_split(n, val_fraction)
        H[:, g, : n + 1, slots["x"]] = xs[:, : n + 1].to(DTYPE)
        H[:, g, :n, slots.at("y")] = ys[:, :n].to(DTYPE)
        H[:, g, : n + 1, slots.at("one")] = 1.0
        H[:, g, :train, slots.at("t")] = 1.0
        H[:, g, train:n, slots.at("t")] = -1.0
    counts = torch.tensor([max(n, 1) for n in ns], dtype=DTYPE, device=xs.device).repeat(B)
    return H.reshape(B * len(ns), length, slots.dim), counts


def prefix_groups(
    prefixes: list[int], batch: int, heads: int, memory: int = MEMORY, waste: float = 1.3
) -> list[list[int]]:
    """Increasing ``prefixes`` in groups whose padded attention weights stay under ``memory`` bytes and
    at most ``waste`` times what the group's prefixes would hold alone."""
    groups, current = [], []
    for n in sorted(prefixes):
        padded = (len(current) + 1) * (n + 1) ** 2
        alone = sum((m + 1) ** 2 for m in current) + (n + 1) ** 2
        if current and (batch * padded * heads * 8 > memory or padded > waste * alone):
            groups.append(current)
            current = []
        current.append(n)
    return groups + [current]


def bound_check(H: torch.Tensor, slots: Slots, bound: float) -> float:
    """The largest token norm (less the constant slot); every score of a construction is at most
    R^2 + R in magnitude, so R^2 + R < bound / 2 keeps the masks and offsets exact."""
    keep = torch.ones(slots.dim, dtype=torch.bool, device=H.device)
    keep[slots.at("one")] = False
    R = float(H[..., keep].norm(dim=-1).amax()) if H.numel() else 0.0
    if not R * R + R < bound / 2:
        raise OutOfBound(
            f"a token reached norm {R:.3g}; the construction is exact only while R^2 + R <"
            f" bound / 2 = {bound / 2:.3g} (lower eta or raise bound)"
        )
    return R


@torch.no_grad()
def prefix_predictions(
    model: ReLUTransformer,
    xs: torch.Tensor,
    ys: torch.Tensor,
    read: str,
    val_fraction: float = 0.0,
    bound: float = BOUND,
    memory: int = MEMORY,
    positions: list[int] | None = None,
) -> torch.Tensor:
    """Slot ``read`` of the test token after ``model``, for every prefix n = 0..P-1 (or only those in
    ``positions``; the other columns are NaN): (B, P) in float64.
    The last ``val_fraction`` of each prefix's examples validate (t = -1); the rest train (t = 1).
    ``memory``: bytes of attention weights per batch of prefixes (0: each prefix alone, unpadded).
    Raises OutOfBound when a token leaves the range where the construction is exact."""
    B, P, _ = xs.shape
    heads = max((layer.attention.query.shape[0] for layer in model.layers), default=1)
    prefixes = list(range(P)) if positions is None else sorted({n for n in positions if 0 <= n < P})
    out = torch.full((B, P), float("nan"), dtype=DTYPE, device=xs.device)
    column = model.slots.at(read)
    for ns in prefix_groups(prefixes, B, heads, memory) if prefixes else []:
        H, counts = prefix_tokens(model.slots, xs, ys, ns, ns[-1] + 1, val_fraction)
        bound_check(H, model.slots, bound)
        for H in model.states(H, counts):
            bound_check(H, model.slots, bound)
        test = torch.tensor(ns, device=xs.device).repeat(B)  # the test token's index
        out[:, ns] = H[torch.arange(len(test), device=xs.device), test, column].reshape(B, len(ns))
    return out


def transformer_predictor(
    model: ReLUTransformer,
    read: str,
    val_fraction: float = 0.0,
    bound: float = BOUND,
    positions: list[int] | None = None,
):
    """``predict(prompts) -> (B, P)``: the project's predictor interface on ``prompts.xs``, ``prompts.ys``
    (only the columns of ``positions``, when given: the context lengths an evaluation scores)."""

    def predict(prompts) -> torch.Tensor:
        return prefix_predictions(
            model, prompts.xs, prompts.ys, read, val_fraction, bound, positions=positions
        )

    return predict
