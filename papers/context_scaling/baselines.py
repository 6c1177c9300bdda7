"""Baselines: every predictor that is not a trained model (seed 001 Sec. 4-5; Garg et al. 2022; Bai et al.
2023).

Each baseline is a predictor with the models' interface, ``predict(prompts) -> (B, N+1)``, column n
predicting ys[:, n] from the pairs j < n and x_n. A baseline is a plug-in (papers.context_scaling.plugins): a
name, registered (these) or a researcher's module:Name, of a factory
``factory(task: TaskConfig, options: dict) -> Predictor``; a name may carry options, e.g.
``lasso(alpha=0.1)`` or ``decision_tree(max_depth=none)`` (quote it in a YAML flow list when it holds a
comma). A baseline not defined for a task raises BaselineNotApplicable.

Closed forms, batched over prompts and prefixes from running Gram matrices G_n = sum_{j<n} x_j x_j^T and
b_n = sum_{j<n} x_j y_j in float64:
- ``zero``; ``least_squares``: min-norm pinv(G_n) b_n; ``averaging``: w = b_n / n (Garg et al.).
- ``ridge``: the Bayes predictor of the linear task with beta ~ N(0, I/d): (G_n + d sigma^2 I)^-1 b_n.
  For linear_mixed_noise it is the posterior mixture over the levels: each level's ridge weighted by the
  level's marginal likelihood N(y_<n; 0, X X^T / d + sigma^2 I) (Bai et al.'s Bayes algorithm selection).
- ``ridge_per_level``: the oracle ridge with each prompt's own level, lambda = d sigma_prompt^2.
- ``ridge_tuned``: one lambda per context length n, chosen from a grid on a separate seeded validation
  set drawn from the task (options: lambdas, prompts, seed). Ridge error against lambda at a fixed n (Figs.
  2-3, right panels) is ``papers.context_scaling.train.lambda_scan``, on a cell's evaluation prompts.
- ``ridge_validation``: lambda chosen per prompt and prefix by a train/validation split of the prompt's
  own pairs (seed 003, post-ICL validation; options: lambdas, val_fraction, refit).
- ``bayes_discrete``: the discrete MMSE over a finite pool of linear tasks (``discrete_mmse``).
- ``knn`` (k = 3, uniform average of the k nearest x_j), ``hilbert`` (seed 001 eq. 4-5, Sec. 5.1).
- ``lasso``, ``xgboost``, ``decision_tree``, ``nn_student``: per-prompt fits (baseline_fits.py), run over a
  process pool and cached on disk (baseline_cache.py). ``xgboost`` is Garg et al.'s, with the settings of
  the xgboost their code pins (baseline_fits.GARG_XGBOOST).
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Protocol

import torch

from papers.context_scaling.baseline_cache import CachedPredictor, default_jobs, map_prompts
from papers.context_scaling.baseline_fits import nn_student_predictions, prefix_fits
from papers.context_scaling.configs import DEFAULT_LAMBDAS, LINEAR, TaskConfig, parse_baseline
from papers.context_scaling.plugins import BUILTIN_BASELINE_VERSIONS, baseline, family
from papers.context_scaling.tasks import Prompts, fresh_prompts, make_family
from scaling.config import canonical


class Predictor(Protocol):
    def __call__(self, prompts: Prompts) -> torch.Tensor: ...


class BaselineNotApplicable(ValueError):
    """The baseline is not defined for this task (e.g. a Bayes ridge for a non-linear task)."""


def prefix_grams(xs: torch.Tensor, ys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """G_n and b_n of every prefix in float64: (B, P, d, d) and (B, P, d); prefix n uses pairs j < n."""
    xs, ys = xs.double(), ys.double()
    outer = xs.unsqueeze(-1) * xs.unsqueeze(-2)  # (B, P, d, d)
    grams = torch.cumsum(outer, dim=1) - outer  # exclusive prefix sums
    xy = xs * ys.unsqueeze(-1)  # (B, P, d)
    rhs = torch.cumsum(xy, dim=1) - xy
    return grams, rhs


def ridge_weights(xs: torch.Tensor, ys: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    """Ridge weights of every prefix, (B, P, d); lam = 0 gives the minimum-norm least squares.

    ``lam`` may be a scalar or a (B,) tensor (a lambda per prompt).
    """
    with one_thread():
        return _ridge_weights(xs, ys, lam)


@contextlib.contextmanager
def one_thread():
    """Run torch ops on one intra-op thread: the many tiny batched solves gain nothing from threads, and
    on a shared CPU each parallel region waits for a descheduled thread (10x slower under load)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _ridge_weights(xs: torch.Tensor, ys: torch.Tensor, lam: float | torch.Tensor) -> torch.Tensor:
    grams, rhs = prefix_grams(xs, ys)
    d = xs.shape[-1]
    lam = torch.as_tensor(lam, dtype=torch.float64, device=xs.device)
    if lam.ndim == 0 and float(lam) == 0.0:
        return min_norm_least_squares(xs, ys, grams, rhs)
    eye = torch.eye(d, dtype=torch.float64, device=xs.device)
    regularised = grams + lam.reshape(-1, 1, 1, 1) * eye  # (B, P, d, d)
    return torch.linalg.solve(regularised, rhs)


def psd_solve(A: torch.Tensor, b: torch.Tensor, rtol: float = 1e-10) -> torch.Tensor:
    """A^+ b for PSD matrices A (..., m, m), b (..., m): a Cholesky solve, and the pseudo-inverse for the
    matrices whose Cholesky fails or has a pivot below rtol times the largest diagonal (singular ones)."""
    L, info = torch.linalg.cholesky_ex(A)
    out = torch.cholesky_solve(b.unsqueeze(-1), L).squeeze(-1)
    pivots = L.diagonal(dim1=-2, dim2=-1) ** 2  # (..., m)
    scale = A.diagonal(dim1=-2, dim2=-1).amax(-1, keepdim=True).clamp_min(torch.finfo(A.dtype).tiny)
    bad = (info != 0) | (pivots < rtol * scale).any(-1) | ~torch.isfinite(out).all(-1)
    if bad.any():
        out[bad] = (torch.linalg.pinv(A[bad], hermitian=True, rtol=rtol) @ b[bad].unsqueeze(-1)).squeeze(-1)
    return out


def min_norm_least_squares(
    xs: torch.Tensor, ys: torch.Tensor, grams: torch.Tensor, rhs: torch.Tensor
) -> torch.Tensor:
    """pinv(G_n) b_n of every prefix, (B, P, d), as two batched Cholesky solves (one eigendecomposition per
    prefix is ~10x slower): prefixes of n >= d pairs solve G_n w = b_n; shorter ones (G_n singular) take the
    min-norm solution X_n^T (X_n X_n^T)^+ y_n, every n at once from kernel matrices of the first m = d - 1
    pairs masked to their n x n block and padded with the identity (which leaves the padding's weights 0)."""
    xs, ys = xs.double(), ys.double()
    B, P, d = xs.shape
    w = torch.zeros(B, P, d, dtype=torch.float64, device=xs.device)
    if P > d:
        w[:, d:] = psd_solve(grams[:, d:], rhs[:, d:])
    m = min(d, P) - 1
    if m >= 1:
        X = xs[:, :m]  # (B, m, d)
        n = torch.arange(1, m + 1, device=xs.device)
        used = torch.arange(m, device=xs.device) < n.unsqueeze(1)  # (m_n, m): pair j < n
        block = (used.unsqueeze(-1) & used.unsqueeze(-2)).double()  # (m_n, m, m)
        pad = torch.diag_embed((~used).double())  # (m_n, m, m)
        kernels = (X @ X.transpose(1, 2)).unsqueeze(1) * block + pad  # (B, m_n, m, m)
        alpha = psd_solve(kernels, ys[:, :m].unsqueeze(1) * used)  # (B, m_n, m)
        w[:, 1 : m + 1] = alpha @ X  # (B, m_n, d)
    return w


def ridge_path(
    xs: torch.Tensor, ys: torch.Tensor, lambdas: tuple[float, ...], positions: list[int] | None = None
) -> torch.Tensor:
    """Ridge weights of every prefix (or of the prefixes at ``positions``, G of them) for every lambda
    (> 0), (K, B, P or G, d), from one eigendecomposition G_n = V diag(e) V^T: w = V diag(1 / (e + lambda))
    V^T b_n."""
    grams, rhs = prefix_grams(xs, ys)
    if positions is not None:
        grams, rhs = grams[:, positions], rhs[:, positions]
    e, V = torch.linalg.eigh(grams)  # (B, P, d), (B, P, d, d)
    proj = torch.einsum("bpij,bpi->bpj", V, rhs)  # V^T b: (B, P, d)
    lam = torch.tensor(lambdas, dtype=torch.float64, device=xs.device).reshape(-1, 1, 1, 1)
    return torch.einsum("bpij,kbpj->kbpi", V, proj / (e.clamp(min=0) + lam))


def ridge_predictions(prompts: Prompts, lam: float | torch.Tensor) -> torch.Tensor:
    weights = ridge_weights(prompts.xs, prompts.ys, lam)  # (B, P, d)
    return (weights * prompts.xs.double()).sum(-1).to(prompts.ys.dtype)  # (B, P)


def linear_levels(task: TaskConfig, baseline: str) -> tuple[float, ...]:
    """The prior noise levels of a linear task; other families raise BaselineNotApplicable."""
    if task.family not in LINEAR:
        raise BaselineNotApplicable(
            f"{baseline} needs a linear task ({', '.join(LINEAR)}), not {task.family!r}"
        )
    return tuple(task.noise_stds) if task.family == "linear_mixed_noise" else (task.noise_std,)


def mixture_ridge_predictions(prompts: Prompts, levels: tuple[float, ...]) -> torch.Tensor:
    """Posterior mean of y_n under beta ~ N(0, I/d) and sigma uniform on ``levels`` (all > 0): (B, P).

    Per level, with A = G_n + d s^2 I: the ridge mean A^-1 b_n and the log marginal likelihood
    -1/2 [(y'y - b_n' A^-1 b_n) / s^2 + n log s^2 + log det A - d log(d s^2)] (Woodbury and the
    determinant lemma on X X^T / d + s^2 I_n); the levels are mixed by their posterior weights.
    """
    xs, ys = prompts.xs.double(), prompts.ys.double()
    grams, rhs = prefix_grams(xs, ys)
    d, P = xs.shape[-1], xs.shape[1]
    yy = torch.cumsum(ys**2, dim=1) - ys**2  # (B, P)
    n = torch.arange(P, dtype=torch.float64, device=xs.device)
    eye = torch.eye(d, dtype=torch.float64, device=xs.device)
    logs, preds = [], []
    for s in levels:
        lam = d * s * s
        A = grams + lam * eye  # (B, P, d, d)
        w = torch.linalg.solve(A, rhs)  # (B, P, d)
        quad = (yy - (rhs * w).sum(-1)) / (s * s)
        logdet = n * math.log(s * s) + torch.linalg.slogdet(A).logabsdet - d * math.log(lam)
        logs.append(-0.5 * (quad + logdet))
        preds.append((w * xs).sum(-1))
    weights = torch.softmax(torch.stack(logs), dim=0)  # (L, B, P)
    return (weights * torch.stack(preds)).sum(0).to(prompts.ys.dtype)


def zero(task: TaskConfig, options: dict) -> Predictor:
    return lambda prompts: torch.zeros_like(prompts.ys)


def least_squares(task: TaskConfig, options: dict) -> Predictor:
    return lambda prompts: ridge_predictions(prompts, 0.0)


def bayes_ridge(task: TaskConfig, options: dict) -> Predictor:
    levels = linear_levels(task, "ridge")
    if len(levels) == 1:
        lam = task.d * levels[0] ** 2
        return lambda prompts: ridge_predictions(prompts, lam)
    if min(levels) <= 0:
        raise BaselineNotApplicable("the mixture ridge needs every noise level > 0")
    return lambda prompts: mixture_ridge_predictions(prompts, levels)


def ridge_per_level(task: TaskConfig, options: dict) -> Predictor:
    """Oracle ridge: lambda = d sigma^2 with each prompt's own level (meta['noise_std']); a level of 0
    uses lambda = 1e-10, i.e. (numerically) the minimum-norm least squares."""
    linear_levels(task, "ridge_per_level")

    def predict(prompts: Prompts) -> torch.Tensor:
        lam = task.d * prompts.meta["noise_std"].double() ** 2
        return ridge_predictions(prompts, lam.clamp(min=1e-10))

    return predict


def ridge_errors(
    prompts: Prompts, lambdas: tuple[float, ...], positions: list[int] | None = None
) -> torch.Tensor:
    """Squared error of ridge at every lambda and position (or at ``positions``): (K, B, P or G)."""
    ys = prompts.ys.double() if positions is None else prompts.ys.double()[:, positions]
    return (ridge_path_predictions(prompts, lambdas, positions) - ys) ** 2


def ridge_path_predictions(
    prompts: Prompts, lambdas: tuple[float, ...], positions: list[int] | None = None
) -> torch.Tensor:
    """Ridge predictions at every lambda (> 0) and position (or at ``positions``), float64: (K, B, P or G)."""
    weights = ridge_path(prompts.xs, prompts.ys, lambdas, positions)  # (K, B, P or G, d)
    xs = prompts.xs.double() if positions is None else prompts.xs.double()[:, positions]
    return (weights * xs).sum(-1)


def ridge_tuned(task: TaskConfig, options: dict) -> Predictor:
    """Ridge with, at each context length n, the grid lambda of least mean error on ``prompts`` validation
    prompts of the (unshifted) task drawn from seed ``seed`` under purpose 'ridge-tuned' (never the test
    set)."""
    lambdas = tuple(options.get("lambdas", DEFAULT_LAMBDAS))
    count, seed = options.get("prompts", 1024), options.get("seed", 0)
    chosen: dict[int, torch.Tensor] = {}

    def best(points: int) -> torch.Tensor:
        if points not in chosen:
            valid = fresh_prompts(make_family(task), count, points, seed, purpose="ridge-tuned")
            chosen[points] = ridge_errors(valid, lambdas).mean(1).argmin(0)  # (P,)
        return chosen[points]

    def predict(prompts: Prompts) -> torch.Tensor:
        index = best(prompts.xs.shape[1]).to(prompts.ys.device)  # (P,)
        preds = ridge_path_predictions(prompts, lambdas)  # (K, B, P)
        chosen = index.reshape(1, 1, -1).expand(1, *preds.shape[1:])
        return preds.gather(0, chosen).squeeze(0).to(prompts.ys.dtype)

    return predict


def ridge_validation(task: TaskConfig, options: dict) -> Predictor:
    """Post-ICL validation (seed 003, Sec. 4): for a prefix of n >= 2 pairs, fit ridge at every grid lambda
    on the first t = n - v pairs, v = max(1, round(val_fraction n)), score it on pairs t..n-1, and predict
    x_n with the best lambda refitted on all n pairs (refit=false: the fit on the t training pairs, as in
    Bai et al.'s construction). Prefixes of n < 2 pairs use the largest lambda of the grid."""
    lambdas = tuple(options.get("lambdas", DEFAULT_LAMBDAS))
    fraction, refit = float(options.get("val_fraction", 0.5)), bool(options.get("refit", True))

    def predict(prompts: Prompts) -> torch.Tensor:
        xs, ys = prompts.xs.double(), prompts.ys.double()
        P, device = xs.shape[1], xs.device
        n = torch.arange(P, device=device)
        t = (n - torch.clamp(torch.round(fraction * n), min=1)).long().clamp(min=0)  # (P,) training pairs
        j = torch.arange(P, device=device)
        in_val = (j.unsqueeze(0) >= t.unsqueeze(1)) & (j.unsqueeze(0) < n.unsqueeze(1))  # (P_n, P_j)
        val_errors, preds = [], []
        for w in ridge_path(xs, ys, lambdas):  # (B, P, d) per lambda
            fitted = torch.einsum("bmd,bjd->bmj", w[:, t], xs)  # (B, P_n, P_j): w_{t(n)} . x_j
            sq = (fitted - ys.unsqueeze(1)) ** 2 * in_val
            val_errors.append(sq.sum(-1) / in_val.sum(-1).clamp(min=1))  # (B, P)
            at_query = w if refit else w[:, t]
            preds.append((at_query * xs).sum(-1))  # (B, P)
        best = torch.stack(val_errors).argmin(0)  # (B, P)
        best[:, n < 2] = len(lambdas) - 1
        out = torch.stack(preds).gather(0, best.unsqueeze(0)).squeeze(0)
        return out.to(prompts.ys.dtype)

    return predict


def discrete_mmse(betas: torch.Tensor, levels: tuple[float, ...], chunk: int = 4096) -> Predictor:
    """Posterior mean of y_n over a finite pool of linear tasks ``betas`` (T, d), uniform prior over the
    pool and over the noise ``levels`` (levels of 0 are floored at 1e-4): the discrete MMSE / dMMSE
    predictor of a model pretrained on those T tasks. Weights exp(-R_k / (2 s^2)) / s^n with R_k the
    residual sum of squares of task k on pairs < n, accumulated over chunks of tasks in log space."""
    levels = tuple(max(s, 1e-4) for s in levels)

    def predict(prompts: Prompts) -> torch.Tensor:
        xs, ys = prompts.xs.double(), prompts.ys.double()
        B, P, _ = xs.shape
        n = torch.arange(P, dtype=torch.float64, device=xs.device).reshape(1, P, 1)
        top = torch.full((B, P, 1), -math.inf, dtype=torch.float64, device=xs.device)
        total = torch.zeros(B, P, 1, dtype=torch.float64, device=xs.device)
        mean = torch.zeros(B, P, 1, dtype=torch.float64, device=xs.device)
        for start in range(0, betas.shape[0], chunk):
            block = betas[start : start + chunk].to(xs.device).double()  # (Tc, d)
            f = torch.einsum("bpd,td->bpt", xs, block)  # (B, P, Tc)
            sq = (ys.unsqueeze(-1) - f) ** 2
            rss = torch.cumsum(sq, dim=1) - sq  # pairs < n
            for s in levels:
                logw = -rss / (2 * s * s) - n * math.log(s)  # (B, P, Tc)
                new_top = torch.maximum(top, logw.amax(-1, keepdim=True))
                scale = torch.exp(top - new_top)
                weights = torch.exp(logw - new_top)
                total = total * scale + weights.sum(-1, keepdim=True)
                mean = mean * scale + (weights * f).sum(-1, keepdim=True)
                top = new_top
        return (mean / total).squeeze(-1).to(prompts.ys.dtype)

    return predict


def bayes_discrete(task: TaskConfig, options: dict) -> Predictor:
    """The discrete MMSE over the cell's pool: needs options['pool'], a finite TaskPool of a linear task
    (``build_baselines(..., pool=trainer.pool)`` passes it), with at most ``max_tasks`` (default 2^20)
    tasks."""
    levels = linear_levels(task, "bayes_discrete")
    pool = options.get("pool")
    if pool is None or not pool.finite:
        raise BaselineNotApplicable("bayes_discrete needs the cell's finite task pool (T < inf)")
    if int(pool.T) > options.get("max_tasks", 1 << 20):
        raise BaselineNotApplicable(f"bayes_discrete over T = {int(pool.T)} tasks exceeds max_tasks")
    betas = pool.tasks(torch.arange(int(pool.T), device=pool.device))["beta"]
    return discrete_mmse(betas, levels)


def averaging(task: TaskConfig, options: dict) -> Predictor:
    def predict(prompts: Prompts) -> torch.Tensor:
        _, rhs = prefix_grams(prompts.xs, prompts.ys)  # (B, P, d)
        n = torch.arange(prompts.xs.shape[1], device=rhs.device).clamp(min=1).reshape(1, -1, 1)
        return ((rhs / n) * prompts.xs.double()).sum(-1).to(prompts.ys.dtype)

    return predict


def causal_distances(xs: torch.Tensor) -> torch.Tensor:
    """Squared distances ||x_n - x_j||^2, (B, P, P) in float64, with j >= n set to +inf."""
    xs = xs.double()
    sq = torch.cdist(xs, xs, compute_mode="donot_use_mm_for_euclid_dist").pow(2)  # (B, P_n, P_j), exact zeros
    future = torch.ones(xs.shape[1], xs.shape[1], dtype=torch.bool, device=xs.device).triu()
    return sq.masked_fill(future, math.inf)


def knn(task: TaskConfig, options: dict) -> Predictor:
    """Average of the labels of the k = options['k'] (default 3) nearest earlier inputs (min(k, n) of
    them)."""
    k = int(options.get("k", 3))

    def predict(prompts: Prompts) -> torch.Tensor:
        dist = causal_distances(prompts.xs)  # (B, P, P)
        k_eff = min(k, dist.shape[-1])
        near, idx = dist.topk(k_eff, dim=-1, largest=False)  # (B, P, k)
        valid = torch.isfinite(near)
        labels = prompts.ys.double().unsqueeze(1).expand_as(dist).gather(-1, idx)
        out = (labels * valid).sum(-1) / valid.sum(-1).clamp(min=1)
        return out.to(prompts.ys.dtype)

    return predict


def hilbert(task: TaskConfig, options: dict) -> Predictor:
    """The Hilbert estimate (seed 001 eq. 4-5): sum_j K(x_n, x_j) y_j / sum_j K(x_n, x_j), K = ||x - x'||^-d,
    j < n. Weights are a softmax of -(d/2) log ||x_n - x_j||^2 (distances floored at 1e-300, so coincident
    points share the largest weight). Column 0 is 0."""

    def predict(prompts: Prompts) -> torch.Tensor:
        d = prompts.xs.shape[-1]
        logk = -(d / 2) * torch.log(
            causal_distances(prompts.xs).clamp(min=1e-300)
        )  # (B, P, P); -inf for j >= n
        weights = torch.softmax(logk, dim=-1).nan_to_num(0.0)  # row 0 has no context
        return (weights * prompts.ys.double().unsqueeze(1)).sum(-1).to(prompts.ys.dtype)

    return predict


def library_fit(kind: str, name: str) -> Callable[[TaskConfig, dict], Predictor]:
    """Factory of a per-prompt scikit-learn / XGBoost baseline (registered as ``name``), run in processes and
    cached on disk. Its version (BUILTIN_BASELINE_VERSIONS, where it has one) is in the cache's key, so a
    cache never returns the numbers of another version."""
    version = BUILTIN_BASELINE_VERSIONS.get(name, "")

    def factory(task: TaskConfig, options: dict) -> Predictor:
        settings = {k: v for k, v in options.items() if k not in ("n_jobs", "pool")}
        jobs = int(options.get("n_jobs", default_jobs()))

        def compute(prompts: Prompts, positions: list[int] | None = None) -> torch.Tensor:
            return map_prompts(prefix_fits, prompts, jobs, kind=kind, options=settings, positions=positions)

        spec = {"baseline": kind, "options": settings, "task": canonical(task)}
        return CachedPredictor(compute, {**spec, "version": version} if version else spec, by_position=True)

    factory.version = version
    return factory


def nn_student(task: TaskConfig, options: dict) -> Predictor:
    settings = {k: options[k] for k in ("hidden", "lr", "batch", "steps", "seed") if k in options}
    return CachedPredictor(
        lambda prompts: nn_student_predictions(prompts, **settings),
        {"baseline": "nn_student", "options": settings, "task": canonical(task)},
    )


LASSO = library_fit("lasso", "lasso")
XGBOOST = library_fit("xgboost", "xgboost")
DECISION_TREE = library_fit("tree", "decision_tree")


def applicable_baselines(
    names: tuple[str, ...], task: TaskConfig, pool=None
) -> tuple[dict[str, Predictor], dict[str, str]]:
    """The named baselines that are defined for ``task``, and the reasons of those that are not.

    A sweep's baseline list is shared by every cell, also across a task axis (Fig. 7 mixes linear
    and ReLU-network tasks), so a baseline not defined for one cell's task is left out of that cell.
    """
    out, skipped = {}, {}
    for name in names:
        try:
            out.update(build_baselines((name,), task, pool))
        except BaselineNotApplicable as err:
            skipped[name] = str(err)
    return out, skipped


def build_baselines(names: tuple[str, ...], task: TaskConfig, pool=None) -> dict[str, Predictor]:
    """The named baselines for ``task``, keyed by the names as written; unknown names fail listing the
    known ones. ``pool`` (the cell's TaskPool) reaches factories as options['pool'] (bayes_discrete)."""
    out = {}
    valid = family(task.family).baselines
    for name in names:
        base, options = parse_baseline(name)
        if valid is not None and base not in valid:
            raise BaselineNotApplicable(f"{base} is not valid for the task family {task.family}")
        factory = baseline(base)  # a registered baseline, or a researcher's module:Name
        out[name] = factory(task, {**options, "pool": pool} if pool is not None else options)
    return out
