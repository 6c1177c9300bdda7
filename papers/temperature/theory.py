"""Theory and Monte Carlo of attention temperature for in-context linear regression (seed 004).

Implements Sec. 3-4 and App. A-I of "Optimal Attention Temperature Enhances In-Context Learning
under Distribution Shift":

- data (eq. 2): x ~ N(mu_x, Sigma_x), w ~ N(mu_w, Sigma_w), y = w^T x + eps, eps ~ N(0, sigma^2);
  a prompt holds l columns, l - 1 labelled pairs and one query (`PromptDistribution`, `sample_prompts`);
- attention read-outs of the query column: softmax (eq. 4), linearized softmax (eq. 5, App. B) and
  linear attention (eq. 6), with temperature tau (`attention_prediction`, `attention_prediction_full`,
  `attention_weights`; `attention_predictor` wraps them in the project's (B, N+1) predictor interface);
- the reduced form of eq. 5 (eqs. 10, 43-47): y_hat = p / tau + q (`linearized_prediction_parts`);
- Bayes-optimal ridge (eq. 9, App. A) (`bayes_ridge_weights`);
- Lemma 4.1 (eq. 11, App. F) pretrained parameters, population and m-prompt estimate;
- Thm 4.6 (eqs. 12-14, App. G) generalization error and Thm 4.7 (eq. 15, App. I) optimal tau;
- Monte Carlo error over a tau grid and its minimiser (`simulated_temperature_curve`,
  `simulated_optimal_temperature`); the figure curves built on them live in temperature_curves.py.

Conventions and choices where the paper is loose (each checked by Monte Carlo in the tests):
- A prompt is `xs` (B, l, d), `ys` (B, l); ys[:, -1] is the query's true label and is never fed to
  a model (the paper's Z has 0 there). Following eq. 5 the query column attends to all l columns,
  itself included, so s_x and C_xx average over all l inputs and s_y = sum_{i<l} y_i / l (eq. 44).
- Thm 4.6 uses B = Sigma_w + mu_w mu_w^T (App. G eq. 77 misprints mu_x mu_x^T) and the quadratic
  term -(1/tau) Tr(A (F2 M11 + M11^T F2^T)) (App. G eq. 96 misprints a sign).
- Lemma 4.1's X_hat is the (ml, d) matrix of all pretraining inputs centred by their global mean,
  so X_hat^T X_hat / (ml) -> Sigma_x^train; the population form uses Sigma_x^train itself.
  mu_w, Sigma_w and sigma in eq. 11 are the pretraining distribution's (assumed known).
- Eq. 9 centres the l - 1 context inputs and labels by their own means and uses the prior of the
  given distribution; it is evaluated in the equivalent form
  (X^T X + sigma^2 Sigma_w^-1)^-1 (X^T y + sigma^2 Sigma_w^-1 mu_w), whose sigma -> 0 limit
  (minimum Sigma_w^-1-norm interpolant around mu_w) is used at sigma = 0.
- With Lemma 4.1's population parameters, w ~ N(0, I), sigma = 0, x_train ~ N(0, I) and
  x_test ~ N(0, cI), eq. 15 gives tau_opt = c (1 + d / l); Sec. 4.4's tau_opt = c is its l/d -> inf
  limit. The exact finite-l optimum differs by O(1/l) (d = 10, l = 20, c = 2: about 2.9 vs 3).
- Errors are reported raw (eq. 8) and normalised by the test E[y^2] = Tr(A B) + sigma^2, the
  project's convention (the zero predictor scores 1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace
from typing import Callable, Sequence

import numpy as np
import pandas as pd
import torch

from papers.temperature.settings import COVARIANCE_SCALE

DTYPE = torch.float64


# ----------------------------------------------------------------------------- distributions


@dataclass(frozen=True)
class PromptDistribution:
    """Gaussian prompt distribution of eq. 2: x ~ N(mu_x, Sigma_x), w ~ N(mu_w, Sigma_w), noise sigma."""

    mu_x: torch.Tensor  # (d,)
    Sigma_x: torch.Tensor  # (d, d)
    mu_w: torch.Tensor  # (d,)
    Sigma_w: torch.Tensor  # (d, d)
    sigma: float

    @property
    def d(self) -> int:
        return self.mu_x.shape[0]

    def input_second_moment(self) -> torch.Tensor:
        """A = Sigma_x + mu_x mu_x^T (Thm 4.6)."""
        return self.Sigma_x + torch.outer(self.mu_x, self.mu_x)

    def task_second_moment(self) -> torch.Tensor:
        """B = Sigma_w + mu_w mu_w^T (Thm 4.6)."""
        return self.Sigma_w + torch.outer(self.mu_w, self.mu_w)

    def label_second_moment(self) -> float:
        """E[y^2] = Tr(A B) + sigma^2, the normaliser of errors."""
        return float(torch.trace(self.input_second_moment() @ self.task_second_moment())) + self.sigma**2


def isotropic_distribution(d: int, sigma: float, dtype: torch.dtype = DTYPE) -> PromptDistribution:
    """mu_x = mu_w = 0, Sigma_x = Sigma_w = I: the pretraining distribution of Figs. 1-2."""
    zeros, eye = torch.zeros(d, dtype=dtype), torch.eye(d, dtype=dtype)
    return PromptDistribution(zeros, eye, zeros.clone(), eye.clone(), float(sigma))


def no_shift(train: PromptDistribution) -> PromptDistribution:
    """Test distribution equal to the pretraining one (Fig. 1a)."""
    return train


def input_covariance_shift(train: PromptDistribution, scale: float = COVARIANCE_SCALE) -> PromptDistribution:
    """Sigma_x^test = scale * Sigma_x^train (Fig. 1b uses 2; Sec. 4.4's example uses c)."""
    return replace(train, Sigma_x=scale * train.Sigma_x)


def task_shift(
    train: PromptDistribution, mean: float | None = None, cov_scale: float = 3.0
) -> PromptDistribution:
    """mu_w^test = mean * 1 (default 1/sqrt(d)), Sigma_w^test = cov_scale * Sigma_w^train (Fig. 1c)."""
    value = 1.0 / math.sqrt(train.d) if mean is None else mean
    return replace(train, mu_w=torch.full_like(train.mu_w, value), Sigma_w=cov_scale * train.Sigma_w)


def noise_shift(train: PromptDistribution, sigma: float = 10.0) -> PromptDistribution:
    """sigma^test = sigma (Fig. 2)."""
    return replace(train, sigma=float(sigma))


def input_mean_shift(train: PromptDistribution, norm: float = 2.0) -> PromptDistribution:
    """mu_x^test = norm * 1 / sqrt(d), a mean of Euclidean norm `norm` (Fig. 4)."""
    return replace(train, mu_x=torch.full_like(train.mu_x, norm / math.sqrt(train.d)))


SHIFTS: dict[str, Callable[..., PromptDistribution]] = {
    "none": no_shift,
    "input_covariance": input_covariance_shift,
    "task": task_shift,
    "noise": noise_shift,
    "input_mean": input_mean_shift,
}


def shifted_distribution(train: PromptDistribution, name: str, **kwargs) -> PromptDistribution:
    """Test distribution `SHIFTS[name](train, **kwargs)`; unknown names fail listing the known ones."""
    if name not in SHIFTS:
        raise KeyError(f"unknown shift {name!r}; known: {sorted(SHIFTS)}")
    return SHIFTS[name](train, **kwargs)


def _gaussian(
    mean: torch.Tensor, cov: torch.Tensor, shape: tuple[int, ...], generator: torch.Generator
) -> torch.Tensor:
    """Samples of N(mean, cov) with the given leading shape; (*shape, d)."""
    chol = torch.linalg.cholesky(cov)
    z = torch.randn(*shape, mean.shape[0], generator=generator, dtype=mean.dtype, device=mean.device)
    return mean + z @ chol.T


def sample_prompts(
    dist: PromptDistribution, n_prompts: int, l: int, generator: torch.Generator
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Prompts of l columns (context length l - 1): xs (B, l, d), ys (B, l) with true query label, ws (B,
    d)."""
    xs = _gaussian(dist.mu_x, dist.Sigma_x, (n_prompts, l), generator)  # (B, l, d)
    ws = _gaussian(dist.mu_w, dist.Sigma_w, (n_prompts,), generator)  # (B, d)
    eps = dist.sigma * torch.randn(
        n_prompts, l, generator=generator, dtype=xs.dtype, device=xs.device
    )  # (B, l)
    ys = torch.einsum("bld,bd->bl", xs, ws) + eps  # (B, l)
    return xs, ys, ws


# ----------------------------------------------------------------------------- attention models


@dataclass(frozen=True)
class AttentionParams:
    """The blocks of V and M = K^T Q that reach the prediction (eq. 7): M11, m21, v21, v22."""

    M11: torch.Tensor  # (d, d)
    m21: torch.Tensor  # (d,)
    v21: torch.Tensor  # (d,)
    v22: float

    def full_matrices(self) -> tuple[torch.Tensor, torch.Tensor]:
        """(V, M), both (d+1, d+1), with the blocks marked * in eq. 7 set to zero."""
        d = self.M11.shape[0]
        V = self.M11.new_zeros(d + 1, d + 1)
        M = self.M11.new_zeros(d + 1, d + 1)
        V[d, :d], V[d, d] = self.v21, self.v22
        M[:d, :d], M[d, :d] = self.M11, self.m21
        return V, M


def _query_tokens(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
    """Columns z_j = (x_j, y_j) of Z (eq. 3) with the query label zeroed; (B, l, d+1)."""
    ys_ctx = ys.clone()
    ys_ctx[:, -1] = 0.0
    return torch.cat([xs, ys_ctx.unsqueeze(-1)], dim=-1)


def _softmax_weights(scores: torch.Tensor, tau: float) -> torch.Tensor:
    return torch.softmax(scores / tau, dim=-1)


def _linearized_softmax_weights(scores: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 33-34: 1/l + (z - mean(z)) / l with z = scores / tau."""
    l = scores.shape[-1]
    z = scores / tau
    return (1.0 + z - z.mean(dim=-1, keepdim=True)) / l


def _linear_weights(scores: torch.Tensor, tau: float) -> torch.Tensor:
    """Eq. 6 with temperature: scores / (l tau) (App. D)."""
    return scores / (scores.shape[-1] * tau)


ATTENTION_WEIGHTS: dict[str, Callable[[torch.Tensor, float], torch.Tensor]] = {
    "softmax": _softmax_weights,
    "linearized_softmax": _linearized_softmax_weights,
    "linear": _linear_weights,
}


def attention_weights(scores: torch.Tensor, tau: float, kind: str) -> torch.Tensor:
    """Weights over the last axis of pre-softmax `scores` (..., l) for `kind` in ATTENTION_WEIGHTS."""
    if kind not in ATTENTION_WEIGHTS:
        raise KeyError(f"unknown attention kind {kind!r}; known: {sorted(ATTENTION_WEIGHTS)}")
    return ATTENTION_WEIGHTS[kind](scores, tau)


def query_scores(xs: torch.Tensor, ys: torch.Tensor, M: torch.Tensor) -> torch.Tensor:
    """Pre-softmax scores of the query column, (K Z)^T (Q z_l) = Z^T M z_l for M (d+1, d+1); (B, l)."""
    z = _query_tokens(xs, ys)  # (B, l, d+1)
    return torch.einsum("bje,ef,bf->bj", z, M, z[:, -1])


def attention_prediction_full(
    xs: torch.Tensor,
    ys: torch.Tensor,
    V: torch.Tensor,
    M: torch.Tensor,
    tau: float = 1.0,
    kind: str = "linearized_softmax",
) -> torch.Tensor:
    """Query prediction from full V, M (d+1, d+1): S_{d+1,l} (eq. 4), E_{d+1,l} (eq. 5) or eq. 6; (B,)."""
    z = _query_tokens(xs, ys)  # (B, l, d+1)
    values = z @ V[-1]  # (B, l): row d+1 of V Z
    weights = attention_weights(query_scores(xs, ys, M), tau, kind)  # (B, l)
    return (values * weights).sum(dim=-1)  # the residual Z_{d+1,l} = 0 adds nothing


def attention_prediction(
    xs: torch.Tensor,
    ys: torch.Tensor,
    params: AttentionParams,
    tau: float = 1.0,
    kind: str = "linearized_softmax",
) -> torch.Tensor:
    """`attention_prediction_full` with the V, M of `params` (blocks * of eq. 7 zero); (B,)."""
    V, M = params.full_matrices()
    return attention_prediction_full(xs, ys, V, M, tau, kind)


def attention_predictor(
    params_for_l: Callable[[int], AttentionParams], tau: float = 1.0, kind: str = "linearized_softmax"
) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """Project predictor `predict(xs (B, N+1, d), ys (B, N+1)) -> (B, N+1)`: column n is the model on
    the prompt of l = n + 1 columns (pairs 0..n-1, query x_n) with parameters params_for_l(l)."""

    def predict(xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        cols = [
            attention_prediction(xs[:, : n + 1], ys[:, : n + 1], params_for_l(n + 1), tau, kind)
            for n in range(xs.shape[1])
        ]
        return torch.stack(cols, dim=1)

    return predict


def linearized_prediction_parts(
    xs: torch.Tensor, ys: torch.Tensor, params: AttentionParams
) -> tuple[torch.Tensor, torch.Tensor]:
    """(p, q), each (B,), with eq. 5's prediction p / tau + q: p = w_Att^T x_l, q = b_Att (eqs. 43-47)."""
    l = xs.shape[1]
    ys_ctx = ys.clone()
    ys_ctx[:, -1] = 0.0
    s_x, s_y = xs.mean(dim=1), ys_ctx.mean(dim=1)  # (B, d), (B,)
    xv = xs @ params.v21  # (B, l)
    cxx_v = torch.einsum("bld,bl->bd", xs, xv) / l - s_x * (s_x @ params.v21).unsqueeze(
        -1
    )  # C_xx v21, (B, d)
    cxy = torch.einsum("bld,bl->bd", xs, ys_ctx) / l - s_x * s_y.unsqueeze(-1)  # (B, d)
    cyy = (ys_ctx**2).mean(dim=1) - s_y**2  # (B,)
    w_att = (cxx_v + params.v22 * cxy) @ params.M11 + ((cxy @ params.v21) + params.v22 * cyy).unsqueeze(
        -1
    ) * params.m21
    p = (w_att * xs[:, -1]).sum(dim=-1)
    q = s_x @ params.v21 + params.v22 * s_y
    return p, q


# ----------------------------------------------------------------------------- Bayes ridge (eq. 9)


def bayes_ridge_weights(
    xs_ctx: torch.Tensor, ys_ctx: torch.Tensor, prior: PromptDistribution
) -> torch.Tensor:
    """Eq. 9 posterior mean of w from centred context (xs_ctx (B, n, d), ys_ctx (B, n)); (B, d)."""
    xc = xs_ctx - xs_ctx.mean(dim=1, keepdim=True)  # (B, n, d)
    yc = ys_ctx - ys_ctx.mean(dim=1, keepdim=True)  # (B, n)
    if prior.sigma > 0:
        prec = torch.linalg.inv(prior.Sigma_w)
        lhs = xc.transpose(1, 2) @ xc + prior.sigma**2 * prec  # (B, d, d)
        rhs = torch.einsum("bnd,bn->bd", xc, yc) + prior.sigma**2 * (prec @ prior.mu_w)  # (B, d)
        return torch.linalg.solve(lhs, rhs.unsqueeze(-1)).squeeze(-1)
    root = torch.linalg.cholesky(prior.Sigma_w)  # Sigma_w = L L^T; w = mu_w + L u
    resid = yc - xc @ prior.mu_w  # (B, n)
    u = torch.linalg.pinv(xc @ root) @ resid.unsqueeze(-1)  # (B, d, 1)
    return prior.mu_w + (u.squeeze(-1) @ root.T)


def bayes_ridge_prediction(xs: torch.Tensor, ys: torch.Tensor, prior: PromptDistribution) -> torch.Tensor:
    """Query prediction w_Bayes^T x_l from the l - 1 context pairs of each prompt; (B,)."""
    w = bayes_ridge_weights(xs[:, :-1], ys[:, :-1], prior)
    return (w * xs[:, -1]).sum(dim=-1)


# ----------------------------------------------------------------------------- Lemma 4.1 (eq. 11)


def _lemma_parameters(cov_x: torch.Tensor, train: PromptDistribution, l: int) -> AttentionParams:
    d = cov_x.shape[0]
    prec_w = torch.linalg.inv(train.Sigma_w)
    M11 = d * torch.linalg.inv(cov_x + (train.sigma**2 / l) * prec_w)
    v21 = (train.sigma**2 / (d * l)) * torch.linalg.solve(cov_x, prec_w @ train.mu_w)
    return AttentionParams(M11=M11, m21=torch.zeros_like(train.mu_w), v21=v21, v22=1.0 / d)


def pretrained_parameters(train: PromptDistribution, l: int) -> AttentionParams:
    """Eq. 11 in its population form: X_hat^T X_hat / (ml) replaced by Sigma_x^train."""
    return _lemma_parameters(train.Sigma_x, train, l)


def pretrained_parameters_from_inputs(
    xs_pretrain: torch.Tensor, train: PromptDistribution
) -> AttentionParams:
    """Eq. 11 from pretraining inputs xs_pretrain (m, l, d): X_hat is their (ml, d) stack, centred."""
    m, l, d = xs_pretrain.shape
    x_hat = xs_pretrain.reshape(m * l, d)
    x_hat = x_hat - x_hat.mean(dim=0)
    return _lemma_parameters(x_hat.T @ x_hat / (m * l), train, l)


def sample_pretrained_parameters(
    train: PromptDistribution, l: int, m: int, generator: torch.Generator, chunk: int = 1000
) -> AttentionParams:
    """Eq. 11 estimated from m fresh pretraining prompts of l columns (one task each), in chunks."""
    d = train.d
    total, gram, count = train.mu_x.new_zeros(d), train.mu_x.new_zeros(d, d), 0
    for start in range(0, m, chunk):
        xs, _, _ = sample_prompts(train, min(chunk, m - start), l, generator)
        flat = xs.reshape(-1, d)
        total, gram, count = total + flat.sum(0), gram + flat.T @ flat, count + flat.shape[0]
    mean = total / count
    return _lemma_parameters(gram / count - torch.outer(mean, mean), train, l)


# ----------------------------------------------------------------------------- Thm 4.6 / 4.7


def theory_coefficients(
    params: AttentionParams, test: PromptDistribution, l: int
) -> tuple[float, float, float]:
    """(a, b, c) with Thm 4.6's error a / tau^2 - b / tau + c (eqs. 12-14, App. I eq. 114)."""
    A, B = test.input_second_moment(), test.task_second_moment()
    S, mu_w, v21, v22, M = test.Sigma_x, test.mu_w, params.v21, params.v22, params.M11
    eye = torch.eye(test.d, dtype=S.dtype, device=S.device)
    B_hat = v22 * (torch.outer(mu_w, v21) + torch.outer(v21, mu_w)) + v22**2 * B  # eq. 14
    F1 = (S @ B_hat + (v22**2 * test.sigma**2 + torch.trace(B_hat @ S)) / l * eye) @ S  # eq. 13
    F2 = (torch.outer(mu_w, v21) + v22 * B) @ S  # eq. 13
    a = torch.trace(A @ M.T @ F1 @ M)
    b = torch.trace(A @ (F2 @ M + M.T @ F2.T))
    return float(a), float(b), test.label_second_moment()


def theory_error(
    params: AttentionParams, test: PromptDistribution, l: int, tau: float | np.ndarray
) -> float | np.ndarray:
    """Thm 4.6 generalization error (eq. 12) at temperature(s) tau (raw, not normalised)."""
    a, b, c = theory_coefficients(params, test, l)
    tau = np.asarray(tau, dtype=float)
    err = a / tau**2 - b / tau + c
    return float(err) if err.ndim == 0 else err


def optimal_temperature(params: AttentionParams, test: PromptDistribution, l: int) -> float:
    """Thm 4.7 (eq. 15): tau_opt = 2a / b; fails when a or b is not positive (no minimiser)."""
    a, b, _ = theory_coefficients(params, test, l)
    if a <= 0 or b <= 0:
        raise ValueError(f"Thm 4.7 needs a > 0 and b > 0, got a={a}, b={b}")
    return 2.0 * a / b


# ----------------------------------------------------------------------------- Monte Carlo


def _prediction_parts_mc(
    params: AttentionParams,
    test: PromptDistribution,
    l: int,
    n_prompts: int,
    generator: torch.Generator,
    chunk: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per-prompt p and r = y_l - q of eq. 5 on fresh test prompts; each (n_prompts,)."""
    ps, rs = [], []
    for start in range(0, n_prompts, chunk):
        xs, ys, _ = sample_prompts(test, min(chunk, n_prompts - start), l, generator)
        p, q = linearized_prediction_parts(xs, ys, params)
        ps.append(p)
        rs.append(ys[:, -1] - q)
    return torch.cat(ps), torch.cat(rs)


def simulated_temperature_curve(
    params: AttentionParams,
    test: PromptDistribution,
    l: int,
    taus: Sequence[float],
    n_prompts: int,
    generator: torch.Generator,
    chunk: int = 2000,
) -> pd.DataFrame:
    """Monte Carlo error of eq. 5 at each tau on one common set of prompts: columns tau, err_raw, err_se,
    err."""
    p, r = _prediction_parts_mc(params, test, l, n_prompts, generator, chunk)
    tau = torch.as_tensor(np.asarray(taus, dtype=float), dtype=p.dtype, device=p.device)
    sq = (r.unsqueeze(0) - p.unsqueeze(0) / tau.unsqueeze(1)) ** 2  # (T, n)
    err, se = sq.mean(1), sq.std(1) / math.sqrt(n_prompts)
    norm = test.label_second_moment()
    err, se = err.cpu().numpy(), se.cpu().numpy()
    return pd.DataFrame(
        {"tau": np.asarray(taus, dtype=float), "err_raw": err, "err_se": se, "err": err / norm}
    )


def simulated_optimal_temperature(
    params: AttentionParams,
    test: PromptDistribution,
    l: int,
    n_prompts: int,
    generator: torch.Generator,
    chunk: int = 2000,
) -> tuple[float, float]:
    """(tau*, standard error): exact minimiser E[p^2] / E[p r] of the Monte Carlo error of eq. 5.

    Eq. 5's prediction is p / tau + q, so its Monte Carlo error is exactly quadratic in 1 / tau and
    the minimiser over all tau > 0 is E[p^2] / E[p (y_l - q)] (needs E[p r] > 0). The standard error
    is the delta method's over the prompts.
    """
    p, r = _prediction_parts_mc(params, test, l, n_prompts, generator, chunk)
    num, den = (p * p).mean(), (p * r).mean()
    tau = float(num / den)
    influence = (p * p - tau * p * r) / den  # d tau along each prompt
    return tau, float(influence.std() / math.sqrt(n_prompts))
