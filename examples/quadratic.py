"""A researcher's own experiment in one file (docs/extending.md walks through it): a task family no paper
here has (quadratic regression), a model that is not a transformer (an LSTM), a model that packs (an MLP on
a feature map of its own), a feature map (a polynomial-kernel smoother) and a baseline (least squares on
quadratic features). The sweep file beside it, quadratic.yaml, names each by ``quadratic:Name``.

Every plug-in declares a ``version``: it is part of its cells' keys, so change it whenever the plug-in
computes something else (the driver refuses a sweep whose cells ran with other source under the same version).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from papers.context_scaling.extend import ModelSettings, Prompts, TaskFamily, TaskSettings, feature_rows


# ---------------------------------------------------------------- the task family
@dataclass(frozen=True)
class QuadraticSettings(TaskSettings):
    """``task:`` settings of the family (d and noise_std are every family's)."""

    curvature: float = 1.0  # weight of the quadratic part


class Quadratic(TaskFamily):
    """y = beta^T x + c ((u^T x)^2 - |u|^2) / sqrt(2) + sigma eps, with beta, u ~ N(0, I/d) per task and
    c = ``curvature``. E[f(x)^2] = 1 + c^2 (1 + 2/d): the linear part and the centred quadratic part are
    uncorrelated (one is odd in x, the other even), E|beta|^2 = 1 and E[((u^T x)^2 - |u|^2)^2] = 2 E|u|^4."""

    Settings = QuadraticSettings
    version = "1"
    GAUSSIAN = ("beta", "u")  # the parameters an evaluation-time task shift moves
    baselines = (
        "zero",
        "least_squares",
        "knn",
        "quadratic:QuadraticLeastSquares",
    )  # ridge's prior is not ours

    def draw_tasks(self, count, gen):
        d = self.config.d
        beta = torch.randn(count, d, generator=gen, device=gen.device) / d**0.5
        return {"beta": beta, "u": torch.randn(count, d, generator=gen, device=gen.device) / d**0.5}

    def signal(self, params, xs):
        linear = torch.einsum("bpd,bd->bp", xs, params["beta"])  # (B, P)
        projected = torch.einsum("bpd,bd->bp", xs, params["u"])
        centred = projected**2 - params["u"].pow(2).sum(-1, keepdim=True)
        return linear + self.config.curvature * centred / 2**0.5

    def signal_second_moment(self):
        if self.shift.moves_inputs or self.shift.moves_tasks:
            return self.monte_carlo_signal_moment()  # the closed form is the unshifted one
        return 1 + self.config.curvature**2 * (1 + 2 / self.config.d)


# ---------------------------------------------------------------- a feature map
def quadratic_rows(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Row n of psi(A_n): the pairs before n, [x_j, y_j], weighted by the quadratic kernel (1 + x_n^T x_j)^2
    and divided by n + 1 (the rows of A_n), (B, P, d+1); row n reads only x_n and the pairs j < n."""
    P = xs.shape[1]
    before = torch.ones(P, P, dtype=torch.bool, device=xs.device).tril(-1)  # (P, P): j < n
    weights = (1 + xs @ xs.transpose(1, 2)) ** 2 * before  # (B, P, P)
    rows = torch.cat([xs, ys.unsqueeze(-1)], dim=-1)  # (B, P, d+1)
    sizes = torch.arange(1, P + 1, device=xs.device, dtype=xs.dtype).view(1, P, 1)
    return weights @ rows / sizes


quadratic_rows.version = "1"


# ---------------------------------------------------------------- a model that is not a transformer
@dataclass(frozen=True)
class LSTMSettings(ModelSettings):
    hidden: int = 64
    layers: int = 1


class PrefixLSTM(nn.Module):
    """Reads step n = [x_n, y_{n-1}] (y_{-1} = 0), so its state at n has seen the pairs j < n and x_n alone,
    and predicts y_n from it: a prediction at every prefix, as every model's."""

    def __init__(self, settings: LSTMSettings, d: int):
        super().__init__()
        self.lstm = nn.LSTM(d + 1, settings.hidden, settings.layers, batch_first=True)
        self.head = nn.Linear(settings.hidden, 1)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        previous = torch.cat([ys.new_zeros(ys.shape[0], 1), ys[:, :-1]], dim=1)  # (B, P): y_{n-1}
        states, _ = self.lstm(torch.cat([xs, previous.unsqueeze(-1)], dim=-1))  # (B, P, hidden)
        return self.head(states).squeeze(-1)  # (B, P)


class LSTM:
    """The model plug-in: its settings, its builder and its counts (for --dry-run's costs; a model without
    ``parameters`` and ``step_flops`` is costed "not estimated"). It does not pack: one cell per trial."""

    Settings = LSTMSettings
    version = "1"

    def build(self, settings: LSTMSettings, d: int, points: int) -> nn.Module:
        return PrefixLSTM(settings, d)

    def parameters(self, settings: LSTMSettings, d: int, points: int) -> int:
        h, total, width = settings.hidden, 0, d + 1
        for _ in range(settings.layers):
            total += 4 * h * (width + h) + 8 * h  # input and recurrent weights, two biases per gate
            width = h
        return total + h + 1

    def step_flops(self, settings: LSTMSettings, d: int, points: int, batch: int) -> float:
        return 6.0 * self.parameters(settings, d, points) * batch * points  # forward and backward


# ---------------------------------------------------------------- a model that packs
@dataclass(frozen=True)
class FeatureMLPSettings(ModelSettings):
    width: int = 64


class FeatureMLP(nn.Module):
    """An MLP on the quadratic smoother's rows: a parameter-free ``features`` then Linear/ReLU
    ``head_layers``, the form in which K cells of one shape train as one stacked model (a pack)."""

    def __init__(self, settings: FeatureMLPSettings, d: int):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1, settings.width), nn.ReLU(), nn.Linear(settings.width, 1))

    def features(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return feature_rows("quadratic:quadratic_rows", xs, ys).to(xs.dtype)  # (B, P, d+1)

    def head_layers(self) -> list[nn.Module]:
        return list(self.net)

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        return self.net(self.features(xs, ys)).squeeze(-1)


class SmootherMLP:
    """The packing model's plug-in: ``packs = True`` (its module has features and head_layers)."""

    Settings = FeatureMLPSettings
    version = "1"
    packs = True

    def build(self, settings: FeatureMLPSettings, d: int, points: int) -> nn.Module:
        return FeatureMLP(settings, d)

    def parameters(self, settings: FeatureMLPSettings, d: int, points: int) -> int:
        return (d + 1) * settings.width + settings.width + settings.width + 1

    def step_flops(self, settings: FeatureMLPSettings, d: int, points: int, batch: int) -> float:
        return 6.0 * self.parameters(settings, d, points) * batch * points


# ---------------------------------------------------------------- a baseline
class QuadraticLeastSquares:
    """Min-norm least squares on the quadratic features [x, x_i x_k (i <= k)] of the pairs before each
    query: a factory (task settings, options) of a predictor of every prefix, (B, P)."""

    version = "1"

    def __init__(self, task: TaskSettings, options: dict):
        self.d = task.d

    def lift(self, xs: torch.Tensor) -> torch.Tensor:
        i, k = torch.triu_indices(self.d, self.d)
        return torch.cat([xs, xs[..., i] * xs[..., k]], dim=-1)  # (B, P, d + d(d+1)/2)

    def __call__(self, prompts: Prompts) -> torch.Tensor:
        phi, ys = self.lift(prompts.xs.double()), prompts.ys.double()
        out = torch.zeros_like(ys)
        for n in range(1, ys.shape[1]):  # the prefix before query n
            weights = torch.linalg.pinv(phi[:, :n]) @ ys[:, :n].unsqueeze(-1)  # (B, F, 1)
            out[:, n] = (phi[:, n : n + 1] @ weights).squeeze(-1).squeeze(-1)
        return out.to(prompts.ys.dtype)
