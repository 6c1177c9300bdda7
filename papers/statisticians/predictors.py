"""The constructed transformers as predictors of every prefix of a batch of prompts (the project's
predictor interface, papers.context_scaling.baselines.Predictor, on xs and ys).

Prompts are xs (B, P, d) and ys (B, P); column n of a prediction predicts ys[:, n] from the pairs j < n
and x_n, as every predictor of the project does. The transformers work in encoder mode (Sec. 2): prefix n
is its own sequence of n example tokens and the test token x_n (eq. 2.2), divided by its own N = n.
Prefixes of similar length run as one batch, padded with all-zero tokens: a zero token is inert (its
query, key and value are 0, so relu(0) = 0 adds nothing anywhere, and the MLPs have no biases), so a
padded sequence computes exactly what it would alone (tests/test_statisticians.py checks this).

``selection_readout`` runs the selection transformer once and reads several of its slots (the selected
prediction and each algorithm's, all fitted on the same training examples) and checks eq. 4.4 on every
prefix: the selected prediction's validation loss is within gamma of the best algorithm's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from papers.statisticians.constructions import BOUND
from papers.statisticians.reference import DTYPE, validation_split
from papers.statisticians.transformer import ReLUTransformer, Slots

MEMORY = 1 << 26  # bytes of attention weights (B, M, T, T) one batch of prefixes may hold
TOLERANCE = 1e-9  # eq. 4.4's check: float64 rounding allowed, relative to the losses' size


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
def prefix_states(
    model: ReLUTransformer,
    xs: torch.Tensor,
    ys: torch.Tensor,
    val_fraction: float = 0.0,
    bound: float = BOUND,
    memory: int = MEMORY,
    positions: list[int] | None = None,
) -> Iterator[tuple[list[int], torch.Tensor]]:
    """(ns, H) per batch of prefixes: the prefixes ``ns`` (every n = 0..P-1, or those in ``positions``)
    and their tokens after ``model``, (B, len(ns), ns[-1] + 1, D), prompt-major, zero-padded. The last
    ``val_fraction`` of each prefix's examples validate (t = -1); the rest train (t = 1). ``memory``: bytes
    of attention weights per batch (0: each prefix alone, unpadded). Raises OutOfBound when a token leaves
    the range where the construction is exact."""
    B, P, _ = xs.shape
    heads = max((layer.attention.query.shape[0] for layer in model.layers), default=1)
    prefixes = list(range(P)) if positions is None else sorted({n for n in positions if 0 <= n < P})
    for ns in prefix_groups(prefixes, B, heads, memory) if prefixes else []:
        H, counts = prefix_tokens(model.slots, xs, ys, ns, ns[-1] + 1, val_fraction)
        bound_check(H, model.slots, bound)
        for H in model.states(H, counts):
            bound_check(H, model.slots, bound)
        yield ns, H.reshape(B, len(ns), *H.shape[1:])


def query_tokens(ns: list[int], H: torch.Tensor) -> torch.Tensor:
    """The test token of each prefix of ``prefix_states``' H (B, G, T, D): (B, G, D) (prefix n's: token n)."""
    index = torch.tensor(ns, device=H.device).reshape(1, -1, 1, 1).expand(H.shape[0], -1, 1, H.shape[-1])
    return H.gather(2, index).squeeze(2)


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
    ``positions``; the other columns are NaN): (B, P) in float64 (``prefix_states`` says the rest)."""
    B, P, _ = xs.shape
    out = torch.full((B, P), float("nan"), dtype=DTYPE, device=xs.device)
    column = model.slots.at(read)
    for ns, H in prefix_states(model, xs, ys, val_fraction, bound, memory, positions):
        out[:, ns] = query_tokens(ns, H)[..., column]
    return out


@dataclass
class SelectionReadout:
    """What the selection transformer (constructions.selection_transformer) computed on every prefix of a
    batch of prompts, (B, P) each, NaN where a prefix was not run: ``slots`` (name -> the test token's
    slot: fhat, f0..f{K-1}), and eq. 4.4's check: ``excess``, the validation loss of fhat less (the best
    algorithm's validation loss + gamma), both as the transformer computes them ((1/N) sum over the
    validation examples: eq. 4.4 bounds it by 0; NaN for a prefix with no validation example); ``holds``,
    eq. 4.4 on the prefix: the combination's weights lambda_k (read from u) are >= 0, sum to 1 and are
    > 0 only for algorithms within gamma of the best validation loss, and excess <= 0 (both up to
    TOLERANCE: float64 rounding); ``kept``, how many weights are > 0."""

    slots: dict[str, torch.Tensor]
    excess: torch.Tensor
    holds: torch.Tensor
    kept: torch.Tensor


def combination_weights(u: torch.Tensor) -> torch.Tensor:
    """lambda_k = relu(1 - u_1 - .. - u_{k-1}) - relu(1 - u_1 - .. - u_k) of eq. 4.5's selection: (..., K)."""
    s = torch.relu(1 - torch.cumsum(torch.cat([torch.zeros_like(u[..., :1]), u], -1), -1))  # (..., K+1)
    return s[..., :-1] - s[..., 1:]


def eq44_check(
    ns: list[int], H: torch.Tensor, ys: torch.Tensor, slots, gamma: float, val_fraction: float
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(excess, holds, kept) of ``SelectionReadout`` for the prefixes ``ns`` of ``prefix_states``' H
    (B, G, T, D): (B, G) each."""
    test = query_tokens(ns, H)  # (B, G, D)
    val, u = test[..., slots["val"]], test[..., slots["u"]]  # (B, G, K)
    best = val.min(-1).values
    lam = combination_weights(u)
    tol = TOLERANCE * (1 + best.abs() + gamma)
    near = val <= (best + gamma + tol).unsqueeze(-1)
    weights_ok = (lam >= -tol.unsqueeze(-1)).all(-1) & ((lam.sum(-1) - 1).abs() <= tol)
    weights_ok &= ((lam <= tol.unsqueeze(-1)) | near).all(-1)
    excess = torch.full_like(best, float("nan"))
    for g, n in enumerate(ns):
        train, v = validation_split(n, val_fraction)
        if v:
            residual = H[:, g, train:n, slots.at("fhat")] - ys[:, train:n].to(DTYPE)  # (B, v)
            excess[:, g] = residual.square().sum(-1) / max(n, 1) - best[:, g] - gamma
    holds = weights_ok & (excess.isnan() | (excess <= tol))
    return excess, holds, (lam > tol.unsqueeze(-1)).sum(-1)


@torch.no_grad()
def selection_readout(
    model: ReLUTransformer,
    xs: torch.Tensor,
    ys: torch.Tensor,
    reads: list[str],
    gamma: float,
    val_fraction: float,
    bound: float = BOUND,
    positions: list[int] | None = None,
) -> SelectionReadout:
    """The selection transformer run once on every prefix (or those in ``positions``): the test token's
    slots ``reads`` and eq. 4.4's check (``SelectionReadout``)."""
    B, P, _ = xs.shape
    nan = torch.full((B, P), float("nan"), dtype=DTYPE, device=xs.device)
    ok = torch.ones((B, P), dtype=torch.bool, device=xs.device)  # a prefix not run breaks nothing
    out = SelectionReadout({r: nan.clone() for r in reads}, nan.clone(), ok, nan.clone())
    for ns, H in prefix_states(model, xs, ys, val_fraction, bound, positions=positions):
        test = query_tokens(ns, H)
        for read in reads:
            out.slots[read][:, ns] = test[..., model.slots.at(read)]
        excess, holds, kept = eq44_check(ns, H, ys, model.slots, gamma, val_fraction)
        out.excess[:, ns], out.holds[:, ns], out.kept[:, ns] = excess, holds, kept.to(DTYPE)
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


class SelectionReader:
    """The selection transformer run once per batch of prompts an evaluation scores: the predictors of its
    slots (``predictor(read)``) share that one pass, and each batch's ``SelectionReadout`` is kept
    (``readouts``: eq. 4.4's check over every prompt scored). A batch is recognised by its values."""

    def __init__(self, model, reads, gamma, val_fraction, bound=BOUND, positions=None):
        self.model, self.reads, self.positions = model, list(reads), positions
        self.gamma, self.val_fraction, self.bound = gamma, val_fraction, bound
        self.readouts: list[tuple[torch.Tensor, torch.Tensor, SelectionReadout]] = []

    def readout(self, prompts) -> SelectionReadout:
        for xs, ys, done in self.readouts:
            if xs.shape == prompts.xs.shape and torch.equal(xs, prompts.xs) and torch.equal(ys, prompts.ys):
                return done
        done = selection_readout(
            self.model, prompts.xs, prompts.ys, self.reads, self.gamma, self.val_fraction, self.bound,
            self.positions,
        )  # fmt: skip
        self.readouts.append((prompts.xs, prompts.ys, done))
        return done

    def predictor(self, read: str):
        """``predict(prompts) -> (B, P)``: slot ``read`` of the test token (one of ``reads``)."""
        return lambda prompts: self.readout(prompts).slots[read]

    def checks(self) -> dict[str, float]:
        """Eq. 4.4 over every (prompt, prefix) read so far: ``checked`` (prefixes with a validation
        example), ``violations`` (prefixes where it does not hold), ``max_excess`` (<= 0
        when it holds; the validation loss's scale) and ``mixed`` (the fraction that keep 2 or more)."""
        excess = torch.cat([r.excess.flatten() for _, _, r in self.readouts])
        holds = torch.cat([r.holds.flatten() for _, _, r in self.readouts])
        kept = torch.cat([r.kept.flatten() for _, _, r in self.readouts])
        seen = ~excess.isnan()
        return {
            "checked": float(seen.sum()),
            "violations": float((~holds).sum()),
            "max_excess": float(excess[seen].max()) if seen.any() else float("nan"),
            "mixed": float((kept[seen] >= 2).double().mean()) if seen.any() else float("nan"),
        }
