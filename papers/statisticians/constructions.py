"""Transformers built from formulas (seed 003 Secs. 3-4): in-context gradient descent and post-ICL
validation, on the ReLU-attention transformer of papers.statisticians.transformer.

Square loss l(s, y) = (s - y)^2 / 2, so d_s l = s - y = relu(s - y) - relu(y - s) is a sum of M = 2
ReLUs exactly (eq. 3.2 with epsilon = 0) and every construction below is exact, not approximate, while
the scores it masks stay below ``bound`` in magnitude (the paper assumes bounded inputs the same way).

- ``gd_transformer``: L layers of gradient descent (eqs. 3.1, 3.3-3.4) on the training examples (t = 1),
  w <- w - (eta / N) [sum_{j: t_j = 1} (<w, x_j> - y_j) x_j + lam w], then one read-out layer of two heads
  writing <w, x_i> into every token (sigma(s) - sigma(-s) = s). This is gradient descent on the ridge
  risk (1/2N) [sum_train (<w, x_j> - y_j)^2 + lam ||w||^2], whose minimiser is the project's ridge
  (G + lam I)^-1 b on the training examples (lam = d sigma^2 is the Bayes ridge of noise sigma, as in
  papers.context_scaling.baselines; TaS writes the penalty as lam / 2 ||w||^2 beside the mean loss,
  i.e. its lam is ours divided by N). The penalty is weight decay: two more heads per layer subtract
  eta lam w / N, reading w from the test token alone (see ``decay_heads``).
- ``selection_transformer``: K ridge GD-transformers with penalties lam_1..lam_K side by side (eq. 4.2),
  the validation-loss layer (eq. 4.3's evaluation step), and the three selection layers (eqs. 4.4-4.5).

Token slots (eq. 2.2): x (d), y, then placeholders, then ``one`` and ``t``. The GD transformer's
placeholders are w (d, the iterate), f (the prediction <w, x_i>) and e (|t_i|, written by its first
MLP). The selection transformer's are w_k, f_k, e_k per algorithm, then val (K validation losses),
c (K), u (K), e and fhat (the selected prediction). The paper overwrites one slot per stage; each stage
here has its own slots so that it can be read back.
"""

from __future__ import annotations

from typing import Sequence

import torch

from papers.statisticians.settings import BOUND
from papers.statisticians.transformer import DTYPE, Head, Layer, ReLUTransformer, Slots, Unit, embed, parallel


def unit_vector(slots: Slots, name: str, k: int = 0, scale: float = 1.0) -> torch.Tensor:
    v = torch.zeros(slots.dim, dtype=DTYPE)
    v[slots.at(name, k)] = scale
    return v


def gd_slots(d: int) -> Slots:
    return Slots([("x", d), ("y", 1), ("w", d), ("f", 1), ("e", 1), ("one", 1), ("t", 1)])


def gradient_heads(slots: Slots, eta: float, bound: float) -> list[Head]:
    """Eqs. 3.3-3.4 for the square loss: head s in {+1, -1} has score s (<w_i, x_j> - y_j) - bound (1 - t_j)
    (0 on the training tokens; the others are masked off) and adds -s eta x_j to w: together
    -eta (1/N) sum_{t_j = 1} (<w, x_j> - y_j) x_j."""
    d, D = slots.size("x"), slots.dim
    heads = []
    for s in (1.0, -1.0):
        h = Head.zeros(D, d + 2, d)
        h.query[list(range(d)), slots.index("w")] = s
        h.key[list(range(d)), slots.index("x")] = 1.0
        h.query[d, slots.at("one")] = -s
        h.key[d, slots.at("y")] = 1.0
        h.query[d + 1, slots.at("one")] = -bound
        h.key[d + 1, slots.at("one")], h.key[d + 1, slots.at("t")] = 1.0, -1.0
        h.read[list(range(d)), slots.index("x")] = 1.0
        h.write[slots.index("w"), list(range(d))] = -s * eta
        heads.append(h)
    return heads


def decay_heads(slots: Slots, eta: float, lam: float) -> list[Head]:
    """The ridge penalty as weight decay, -eta lam w / N: the scores relu(1 - t_j) and relu(-t_j) are
    1, 0 on the test token (t = 0), 0, 0 on a training token and 2, 1 on a validation token, so the
    heads, writing -eta lam and +2 eta lam, read w from the test token alone: (1/N) w_test = w / N."""
    d, D = slots.size("x"), slots.dim
    heads = []
    for offset, scale in ((1.0, 1.0), (0.0, -2.0)):
        h = Head.zeros(D, 1, d)
        h.query[0, slots.at("one")] = 1.0
        h.key[0, slots.at("one")], h.key[0, slots.at("t")] = offset, -1.0
        h.read[list(range(d)), slots.index("w")] = 1.0
        h.write[slots.index("w"), list(range(d))] = -eta * lam * scale
        heads.append(h)
    return heads


def indicator_units(slots: Slots, target: str) -> list[Unit]:
    """e_i = relu(t_i) + relu(-t_i) = |t_i|: 1 on the examples, 0 on the test token."""
    return [Unit(unit_vector(slots, "t", scale=s), unit_vector(slots, target)) for s in (1.0, -1.0)]


def readout_heads(slots: Slots) -> list[Head]:
    """<w, x_i> into f of every token: scores +-<x_i, w_j> (w_j is the same in every token) weighted by
    e_j, whose average over the tokens is 1: relu(s) - relu(-s) = s."""
    d, D = slots.size("x"), slots.dim
    heads = []
    for s in (1.0, -1.0):
        h = Head.zeros(D, d, 1)
        h.query[list(range(d)), slots.index("x")] = s
        h.key[list(range(d)), slots.index("w")] = 1.0
        h.read[0, slots.at("e")] = 1.0
        h.write[slots.at("f"), 0] = s
        heads.append(h)
    return heads


def gd_transformer(d: int, steps: int, eta: float, lam: float = 0.0, bound: float = BOUND) -> ReLUTransformer:
    """L = ``steps`` layers of gradient descent with step ``eta`` on the training examples' square loss
    (ridge with penalty lam/2 ||w||^2 when lam > 0), then the read-out layer: L + 1 layers (Sec. 3)."""
    if steps < 0 or eta <= 0 or lam < 0:
        raise ValueError(f"need steps >= 0, eta > 0, lam >= 0; got {steps}, {eta}, {lam}")
    slots = gd_slots(d)
    step_heads = gradient_heads(slots, eta, bound) + (decay_heads(slots, eta, lam) if lam > 0 else [])
    first_mlp = indicator_units(slots, "e")  # the first layer's MLP writes e
    layers = [Layer(step_heads, first_mlp if l == 0 else [], slots.dim, f"gd{l + 1}") for l in range(steps)]
    layers.append(Layer(readout_heads(slots), first_mlp if steps == 0 else [], slots.dim, "readout"))
    return ReLUTransformer(slots, layers)


def selection_slots(d: int, K: int) -> Slots:
    blocks = [item for k in range(K) for item in ((f"w{k}", d), (f"f{k}", 1), (f"e{k}", 1))]
    return Slots(
        [
            ("x", d),
            ("y", 1),
            *blocks,
            ("val", K),
            ("c", K),
            ("u", K),
            ("e", 1),
            ("fhat", 1),
            ("one", 1),
            ("t", 1),
        ]
    )


def validation_heads(slots: Slots, K: int, bound: float) -> list[Head]:
    """The evaluation step: val_k = (1/N) sum_{t_j = -1} (f_k(x_j) - y_j)^2 in every token, exactly, as
    relu(r) r + relu(-r) (-r) = r^2 with r = f_k(x_j) - y_j; the score's - bound (1 + t_j) leaves only
    the validation tokens. This is the validation mean square error times N_val / N."""
    D, heads = slots.dim, []
    for k in range(K):
        for s in (1.0, -1.0):
            h = Head.zeros(D, 2, 1)
            h.query[0, slots.at("one")], h.query[1, slots.at("one")] = s, -bound
            h.key[0, slots.at(f"f{k}")], h.key[0, slots.at("y")] = 1.0, -1.0
            h.key[1, slots.at("one")], h.key[1, slots.at("t")] = 1.0, 1.0
            h.read[0, slots.at(f"f{k}")], h.read[0, slots.at("y")] = 1.0, -1.0
            h.write[slots.at("val", k), 0] = s
            heads.append(h)
    return heads


def comparison_units(slots: Slots, K: int) -> list[Unit]:
    """Selection layer 1's MLP: c_k = sum_{p != k} relu(val_k - val_p) (and the indicator e)."""
    units = []
    for k in range(K):
        for p in range(K):
            if p != k:
                w_in = unit_vector(slots, "val", k) - unit_vector(slots, "val", p)
                units.append(Unit(w_in, unit_vector(slots, "c", k)))
    return units + indicator_units(slots, "e")


def threshold_units(slots: Slots, K: int, gamma: float) -> list[Unit]:
    """Selection layer 2's MLP: u_k = relu(1 - c_k / gamma), in [0, 1] and > 0 iff c_k < gamma."""
    return [
        Unit(unit_vector(slots, "one") - unit_vector(slots, "c", k, 1.0 / gamma), unit_vector(slots, "u", k))
        for k in range(K)
    ]


def combination_heads(slots: Slots, K: int, bound: float) -> list[Head]:
    """Selection layer 3, eq. 4.5: fhat = sum_{k=1}^{K+1} sum_{w in {0,1}} relu(1 - u_1 - .. - u_{k-1})
    (1 - 2w) f_{k-w}, f_0 = f_{K+1} = 0, in 2(K+1) heads. Head (k, w) scores
    (f_{k-w}(x_i) + bound)(1 - u_1 - .. - u_{k-1}) (u is the same in every token; f + bound >= 0 makes the
    relu factor out), weighted by e_j (average 1); the offsets bound cancel between the heads of one k."""
    D, heads = slots.dim, []
    for k in range(1, K + 2):
        for w in (0, 1):
            h = Head.zeros(D, 1, 1)
            h.query[0, slots.at("one")] = bound
            if 1 <= k - w <= K:
                h.query[0, slots.at(f"f{k - w - 1}")] = 1.0
            h.key[0, slots.at("one")] = 1.0
            for p in range(k - 1):
                h.key[0, slots.at("u", p)] = -1.0
            h.read[0, slots.at("e")] = 1.0
            h.write[slots.at("fhat"), 0] = 1.0 - 2 * w
            heads.append(h)
    return heads


def selection_transformer(
    d: int, steps: int, eta: float, lambdas: Sequence[float], gamma: float, bound: float = BOUND
) -> ReLUTransformer:
    """Post-ICL validation (Sec. 4): K = len(lambdas) ridge GD-transformers in parallel on the training
    examples (t = 1), the validation-loss layer on the validation examples (t = -1), then the three
    selection layers: L + 5 layers. ``fhat`` of the test token is the prediction."""
    if gamma <= 0 or not lambdas:
        raise ValueError(f"need gamma > 0 and at least one lambda; got {gamma}, {list(lambdas)}")
    K = len(lambdas)
    slots = selection_slots(d, K)
    blocks = [
        embed(gd_transformer(d, steps, eta, lam, bound), slots, {"w": f"w{k}", "f": f"f{k}", "e": f"e{k}"})
        for k, lam in enumerate(lambdas)
    ]
    stages = [
        Layer(validation_heads(slots, K, bound), [], slots.dim, "validation"),
        Layer([], comparison_units(slots, K), slots.dim, "select-c"),
        Layer([], threshold_units(slots, K, gamma), slots.dim, "select-u"),
        Layer(combination_heads(slots, K, bound), [], slots.dim, "select"),
    ]
    return parallel(blocks) + ReLUTransformer(slots, stages)
