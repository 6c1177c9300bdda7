"""The ReLU-attention transformer of "Transformers as Statisticians" (seed 003, Sec. 2), as a torch module
whose weights are set by hand (papers.statisticians.constructions) rather than trained.

A token is a column h_i of H in R^{D x (N+1)}; here the batch of tokens is a tensor (B, N+1, D), a row per
token. Its coordinates are named slots (``Slots``): eq. 2.2 puts x_i (d), y_i (1), placeholder slots for
intermediate results, then the constant 1 and the indicator t_i (1 for a training example, -1 for a
validation example, 0 for the test token).

One layer is a self-attention layer followed by a residual MLP, with no layer norm (eq. 2.1):

    h_i <- h_i + sum_m (1/N) sum_j relu(<Q_m h_i, K_m h_j>) V_m h_j,        MLP(H) = H + W_2 relu(W_1 H),

where j runs over all N+1 tokens and N is the number of in-context examples (tokens less the test token).
Each head stores the rows of Q_m and K_m that are not zero, (M, r, D), and V_m = O_m P_m as a read
P_m (M, r_v, D) and a write O_m (M, D, r_v): the same map as the paper's D x D matrices (``dense``
returns them) at the cost of the few slots a head touches. ``embed`` moves a transformer onto a larger
token layout and ``parallel`` runs transformers side by side on one token (eqs. 4.1-4.2).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator, Sequence

import torch
from torch import nn

DTYPE = torch.float64


class Slots:
    """The named coordinates of a token: an ordered list of (name, size)."""

    def __init__(self, items: Sequence[tuple[str, int]]):
        self.items = tuple((str(name), int(size)) for name, size in items)
        names = [name for name, _ in self.items]
        if len(set(names)) != len(names):
            raise ValueError(f"slot names repeat: {names}")
        self.offsets, start = {}, 0
        for name, size in self.items:
            self.offsets[name] = (start, size)
            start += size
        self.dim = start

    def __contains__(self, name: str) -> bool:
        return name in self.offsets

    def __getitem__(self, name: str) -> slice:
        start, size = self.offsets[name]
        return slice(start, start + size)

    def at(self, name: str, k: int = 0) -> int:
        """The coordinate of entry k of slot ``name``."""
        start, size = self.offsets[name]
        if not 0 <= k < size:
            raise IndexError(f"slot {name!r} has {size} entries, not {k + 1}")
        return start + k

    def index(self, name: str) -> list[int]:
        """The coordinates of slot ``name``, for pairing entry k with entry k of another slot."""
        return list(range(self[name].start, self[name].stop))

    def size(self, name: str) -> int:
        return self.offsets[name][1]

    def __repr__(self) -> str:
        return "Slots(" + ", ".join(f"{n}:{s}" for n, s in self.items) + ")"


@dataclass
class Head:
    """One attention head as the rows of Q_m and K_m (r, D), a read P (r_v, D) and a write O (D, r_v)."""

    query: torch.Tensor
    key: torch.Tensor
    read: torch.Tensor
    write: torch.Tensor

    @classmethod
    def zeros(cls, D: int, r: int, r_v: int) -> "Head":
        z = lambda *shape: torch.zeros(*shape, dtype=DTYPE)  # noqa: E731
        return cls(z(r, D), z(r, D), z(r_v, D), z(D, r_v))


@dataclass
class Unit:
    """One hidden unit of a residual MLP: relu(<w_in, h>) added to h along w_out (both (D,))."""

    w_in: torch.Tensor
    w_out: torch.Tensor


def stack_padded(rows: list[torch.Tensor], dim: int) -> torch.Tensor:
    """Stack matrices that differ in size along ``dim`` (0: rows, 1: columns), padding with zeros."""
    width = max((m.shape[dim] for m in rows), default=0)
    out = []
    for m in rows:
        pad = [0, 0, 0, 0]
        pad[3 if dim == 0 else 1] = width - m.shape[dim]
        out.append(torch.nn.functional.pad(m, pad))
    return torch.stack(out)


def frozen(weights: torch.Tensor) -> nn.Parameter:
    """A parameter set by a formula: frozen by default (``requires_grad_()`` makes it trainable)."""
    return nn.Parameter(weights, requires_grad=False)


class ReLUAttention(nn.Module):
    """Eq. 2.1: M heads of ReLU attention normalised by 1/N, with the residual connection."""

    def __init__(self, heads: Sequence[Head], D: int):
        super().__init__()
        self.D = D
        empty = torch.zeros(0, 0, D, dtype=DTYPE)
        self.query = frozen(stack_padded([h.query for h in heads], 0) if heads else empty)
        self.key = frozen(stack_padded([h.key for h in heads], 0) if heads else empty)
        self.read = frozen(stack_padded([h.read for h in heads], 0) if heads else empty)
        self.write = frozen(stack_padded([h.write for h in heads], 1) if heads else empty.transpose(1, 2))

    @property
    def heads(self) -> list[Head]:
        return [
            Head(*(t[m].detach().clone() for t in (self.query, self.key, self.read, self.write)))
            for m in range(self.query.shape[0])
        ]

    def forward(self, H: torch.Tensor, N: torch.Tensor | int) -> torch.Tensor:
        """H (B, T, D) -> (B, T, D); ``N`` the number of examples of each sequence, an int or (B,)."""
        if self.query.shape[0] == 0:
            return H
        (B, T, D), (M, r, _), r_v = H.shape, self.query.shape, self.read.shape[1]
        q = (H @ self.query.reshape(M * r, D).T).view(B, T, M, r).transpose(1, 2)  # (B, M, T, r)
        k = (H @ self.key.reshape(M * r, D).T).view(B, T, M, r).transpose(1, 2)
        v = (H @ self.read.reshape(M * r_v, D).T).view(B, T, M, r_v).transpose(1, 2)  # (B, M, T, r_v)
        weights = torch.relu(q @ k.transpose(-1, -2))  # (B, M, T_i, T_j)
        heads = (weights @ v).transpose(1, 2).reshape(B, T, M * r_v)  # (B, T, M r_v)
        out = heads @ self.write.permute(1, 0, 2).reshape(D, M * r_v).T  # (B, T, D)
        return H + out / torch.as_tensor(N, dtype=H.dtype, device=H.device).reshape(-1, 1, 1)

    def dense(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The paper's Q_m, K_m, V_m as (M, D, D) matrices (zero rows below the stored ones)."""
        M, r, D = self.query.shape
        pad = lambda t: torch.nn.functional.pad(t.detach(), (0, 0, 0, D - r))  # noqa: E731
        return pad(self.query), pad(self.key), self.write.detach() @ self.read.detach()


class ResidualMLP(nn.Module):
    """MLP(H) = H + W_2 relu(W_1 H) (Sec. 2), one hidden unit per row of W_1."""

    def __init__(self, units: Sequence[Unit], D: int):
        super().__init__()
        self.D = D
        w1 = torch.stack([u.w_in for u in units]) if units else torch.zeros(0, D, dtype=DTYPE)
        w2 = torch.stack([u.w_out for u in units], 1) if units else torch.zeros(D, 0, dtype=DTYPE)
        self.w1, self.w2 = frozen(w1), frozen(w2)  # (U, D), (D, U)

    @property
    def units(self) -> list[Unit]:
        return [
            Unit(self.w1[u].detach().clone(), self.w2[:, u].detach().clone()) for u in range(self.w1.shape[0])
        ]

    def forward(self, H: torch.Tensor) -> torch.Tensor:
        if self.w1.shape[0] == 0:
            return H
        return H + torch.relu(H @ self.w1.T) @ self.w2.T


class Layer(nn.Module):
    """Attention, then the residual MLP."""

    def __init__(self, heads: Sequence[Head], units: Sequence[Unit], D: int, name: str = ""):
        super().__init__()
        self.name = name
        self.attention = ReLUAttention(heads, D)
        self.mlp = ResidualMLP(units, D)

    def forward(self, H: torch.Tensor, N: torch.Tensor | int) -> torch.Tensor:
        return self.mlp(self.attention(H, N))


class ReLUTransformer(nn.Module):
    """A stack of ``Layer``s over tokens laid out by ``slots``; ``forward(H)`` with H (B, N+1, D)."""

    def __init__(self, slots: Slots, layers: Sequence[Layer]):
        super().__init__()
        self.slots = slots
        self.layers = nn.ModuleList(layers)
        for layer in layers:
            if layer.attention.D != slots.dim:
                raise ValueError(f"layer {layer.name!r} has D = {layer.attention.D}, the slots {slots.dim}")

    def states(self, H: torch.Tensor, N: torch.Tensor | int | None = None) -> Iterator[torch.Tensor]:
        """The tokens after each layer in turn. ``N``: the examples of each sequence, an int or (B,);
        by default every sequence is N examples and a test token, N = T - 1 (eq. 2.1's normaliser)."""
        N = max(H.shape[1] - 1, 1) if N is None else N
        for layer in self.layers:
            H = layer(H, N)
            yield H

    def forward(
        self, H: torch.Tensor, N: torch.Tensor | int | None = None, keep: bool = False
    ) -> torch.Tensor | list[torch.Tensor]:
        """The output tokens; with keep=True the tokens after every layer, the input first."""
        states = [H, *self.states(H, N)]
        return states if keep else states[-1]

    def __add__(self, other: "ReLUTransformer") -> "ReLUTransformer":
        """Composition: ``self``'s layers, then ``other``'s (same slots)."""
        if other.slots.items != self.slots.items:
            raise ValueError(
                f"cannot compose transformers on different slots: {self.slots} and {other.slots}"
            )
        return ReLUTransformer(self.slots, [*self.layers, *other.layers])


def embed(model: ReLUTransformer, slots: Slots, names: dict[str, str] | None = None) -> ReLUTransformer:
    """``model`` acting on the tokens of ``slots``: each of its slots ``s`` becomes ``names.get(s, s)``
    there (same size), and the slots it does not name are left alone (eq. 4.1)."""
    names = names or {}
    index = torch.empty(model.slots.dim, dtype=torch.long)
    for name, size in model.slots.items:
        target = names.get(name, name)
        if target not in slots or slots.size(target) != size:
            raise ValueError(f"slot {name!r} -> {target!r} is not a slot of size {size} in {slots}")
        index[model.slots[name]] = torch.arange(slots[target].start, slots[target].stop)
    D = slots.dim

    def columns(t: torch.Tensor) -> torch.Tensor:  # (..., D_old) -> (..., D)
        out = torch.zeros(*t.shape[:-1], D, dtype=t.dtype)
        out[..., index] = t
        return out

    layers = []
    for layer in model.layers:
        heads = [
            Head(columns(h.query), columns(h.key), columns(h.read), columns(h.write.T).T)
            for h in layer.attention.heads
        ]
        units = [Unit(columns(u.w_in), columns(u.w_out)) for u in layer.mlp.units]
        layers.append(Layer(heads, units, D, layer.name))
    return ReLUTransformer(slots, layers)


def written(layer: Layer) -> set[int]:
    """The coordinates a layer can change (rows of its writes and MLP outputs that are not zero)."""
    rows = set(layer.attention.write.detach().abs().sum((0, 2)).nonzero().flatten().tolist())
    return rows | set(layer.mlp.w2.detach().abs().sum(1).nonzero().flatten().tolist())


def parallel(models: Sequence[ReLUTransformer]) -> ReLUTransformer:
    """Eq. 4.2: the transformers (on the same slots, writing disjoint coordinates) run side by side: layer l
    has the heads and hidden units of every model's layer l; a shorter model is padded with empty layers."""
    slots = models[0].slots
    if any(m.slots.items != slots.items for m in models):
        raise ValueError("parallel transformers must be embedded on the same slots first (embed)")
    depth = max(len(m.layers) for m in models)
    layers = []
    for depth_index in range(depth):
        present = [m.layers[depth_index] for m in models if depth_index < len(m.layers)]
        seen: set[int] = set()
        for layer in present:
            rows = written(layer)
            if rows & seen:
                raise ValueError(
                    f"parallel transformers write the same coordinates {sorted(rows & seen)}"
                    f" in layer {depth_index}"
                )
            seen |= rows
        heads = [h for layer in present for h in layer.attention.heads]
        units = [u for layer in present for u in layer.mlp.units]
        names = "+".join(dict.fromkeys(layer.name for layer in present))
        layers.append(Layer(heads, units, slots.dim, names))
    return ReLUTransformer(slots, layers)


def tokens(slots: Slots, xs: torch.Tensor, ys: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """Eq. 2.2: tokens (B, N+1, D) from inputs xs (B, N+1, d), labels ys (B, N+1) and indicators t
    (N+1,) or (B, N+1); the label of every token with t = 0 (the test token) is set to 0, placeholders
    are 0."""
    B, T, d = xs.shape
    H = torch.zeros(B, T, slots.dim, dtype=DTYPE, device=xs.device)
    t = torch.as_tensor(t, dtype=DTYPE, device=xs.device).expand(B, T)
    H[..., slots["x"]] = xs.to(DTYPE)
    H[..., slots.at("y")] = ys.to(DTYPE) * (t != 0)
    H[..., slots.at("one")] = 1.0
    H[..., slots.at("t")] = t
    return H
