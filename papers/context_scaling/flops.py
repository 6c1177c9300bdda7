"""FLOPs of one training step of each in-context model, counted as the model runs it (the MFU's numerator
and the cost model's, scaling.budget.cost.step_flops).

Counted: every matrix product of the forward pass and of autograd's backward, 2 FLOPs per multiply-add,
attention's two products over the full (T, T) score matrix as the kernels compute them (causal or masked),
as ``torch.utils.flop_counter.FlopCounterMode`` counts them (tests/test_speed.py checks each model against
it on the real model). Not counted: elementwise work (norms, GELU, softmax, the optimiser). A product's
backward costs its forward once per operand that takes a gradient, so

    step = sum over products of forward x (1 + operands that need a gradient)

which is 3 x forward but where an operand is data or frozen: the prompt tokens entering a read-in, SGPT's
frozen read-in and its first layer's attention, the MLP's parameter-free features.

``s`` is a step shape (scaling.budget.cost.StepShape: arch, N, d, width, layers, batch, layout); P = N + 1
points.
"""

from __future__ import annotations

from typing import Callable


def product(rows: float, inner: int, cols: int, grads: int) -> float:
    """FLOPs of a (rows, inner) x (inner, cols) product over a step: its forward and the backward products
    of its ``grads`` operands that need a gradient (0, 1 or 2)."""
    return 2.0 * rows * inner * cols * (1 + grads)


def gpt2_step_flops(s) -> float:
    """GPT-2 (papers.context_scaling.gpt2 / models.GPT2InContext). Interleaved: the read-in on the
    2P tokens, the blocks on 2P - 1 (the final y token is dropped), the last block's output projection and
    MLP at the P x tokens only. Stacked:
    the P context and P query tokens through every block (the cell runs GPT2Model's full pass), the read-out
    at the P queries. Each block: q, k, v on every token, the scores and the weighted values over the full
    (T, T) matrix, the output projection and the 4x MLP."""
    k, P = s.width, s.N + 1
    stacked = s.layout == "stacked"
    T = 2 * P if stacked else 2 * P - 1
    last_rows = T if stacked else P
    flops = product(2 * P, s.d + 1 if stacked else s.d, k, grads=1)  # read-in: the tokens take no gradient
    for layer in range(s.layers):
        rows = last_rows if layer == s.layers - 1 else T
        flops += product(T, k, 3 * k, grads=2)  # q, k, v
        flops += 2 * product(T, k, T, grads=2)  # q k^T over the heads, then weights x v
        flops += product(rows, k, k, grads=2) + product(rows, k, 4 * k, grads=2) + product(rows, 4 * k, k, 2)
    flops += product(P, k, 1, grads=2)  # read-out
    return s.batch * flops


def sgpt_step_flops(s) -> float:
    """SGPT (eq. 13): a frozen read-in, then per layer the scores H H^T, phi(scores) H, W_proj, W_MLP; the
    read-out at the P queries. The first layer's H is data (the frozen read-in of the tokens): its attention
    takes no gradient and its W_proj only its weight's."""
    k, P = s.width, s.N + 1
    T = 2 * P
    flops = product(T, s.d + 1, k, grads=0)
    for layer in range(s.layers):
        data = layer == 0
        flops += 2 * product(T, k, T, grads=0 if data else 2)
        flops += product(T, k, k, grads=1 if data else 2) + product(T, k, k, grads=2)
    flops += product(P, k, 1, grads=2)
    return s.batch * flops


def head_step_flops(inputs: Callable[[object], int]) -> Callable[[object], float]:
    """The MLP-type models (eq. 14, eq. 9, linear on the smoother's scalar): parameter-free features of
    ``inputs(s)`` numbers per row, then Linear(inputs, width), ReLU, Linear(width, 1) at each of the P
    rows; the features take no gradient and their own products (a feature map's) are not counted."""

    def count(s) -> float:
        P = s.N + 1
        return s.batch * (product(P, inputs(s), s.width, grads=1) + product(P, s.width, 1, grads=2))

    return count


def linear_step_flops(s) -> float:
    """a * psi(A)_{n,d+1} + b: one (1, 1) product per row, its input data."""
    return s.batch * product(s.N + 1, 1, 1, grads=1)
