"""One saturating power law fitted to one group's points, with intervals from a bootstrap over seeds.

The laws (``FORMS``: seed 001's context, task and joint forms) are err = E + sum_k C_k x_k^-s_k over one or
two axes x_k (n, T); T = inf (fresh tasks) makes its term 0. ``fit_points`` fits one group's rows
(scaling.judge.fit chooses the rows and the groups of a sweep's table).

The fit is done in log space with a log-sum-exp parametrisation, as in Hoffmann et al. 2022
(Chinchilla, Sec. 3.3 and App. D.2):

    log err_hat = LSE(e, a - alpha log n, b - beta log T),   E = exp(e), A = exp(a), B = exp(b),

minimising the Huber loss (delta = 1e-3, summed over points) of log err_hat - log err with
scipy.optimize L-BFGS-B from a grid of starting points, keeping the best. E can be fixed at a known
floor (e.g. the noise level's normalised error); E = 0 drops the constant term.

Intervals come from a cluster bootstrap over seeds: the set of seeds is resampled with replacement
and each draw keeps all rows of the drawn seeds (rows drawn twice count twice). Each resample is
refit from the full fit's optimum; intervals are percentiles of the converged refits. With one
seed no interval is given (NaN and a note). With few seeds percentile intervals run narrow (a 95%
interval covered the true exponent in 95% of synthetic repetitions with 8 seeds, about 90% with
4-5 seeds).
"""

from __future__ import annotations

import itertools
import math
import multiprocessing
import os
import threading
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from typing import Callable

import numpy as np
import pandas as pd
from threadpoolctl import threadpool_limits

from . import lbfgsb


@dataclass(frozen=True)
class Form:
    """A fit form: the axes its power-law terms run over and the names of their parameters."""

    axes: tuple[str, ...]  # table columns, one power-law term each
    coefs: tuple[str, ...]  # name of each term's coefficient (A, B)
    exponents: tuple[str, ...]  # name of each term's exponent (alpha, beta)
    keys: tuple[str, ...]  # base group keys


FORMS: dict[str, Form] = {
    "context": Form(("n",), ("A",), ("alpha",), ("sweep", "model", "T", "predictor")),
    "task": Form(("T",), ("B",), ("beta",), ("sweep", "model", "n", "predictor")),
    "joint": Form(("n", "T"), ("A", "B"), ("alpha", "beta"), ("sweep", "model", "predictor")),
}
PARAMS = ("E", "A", "alpha", "B", "beta")
EXPONENT_BOUNDS = (0.0, 10.0)
LOG_BOUNDS = (-50.0, 50.0)


def form_named(name: str) -> Form:
    """The registered fit form called `name`; unknown names fail listing the known ones."""
    if name not in FORMS:
        raise ValueError(f"unknown fit form {name!r}; known: {sorted(FORMS)}")
    return FORMS[name]


def seed_draws(n_seeds: int, n_resamples: int, rng: np.random.Generator) -> np.ndarray:
    """(n_resamples, n_seeds) positions of seeds drawn with replacement, one row per resample."""
    return rng.integers(0, n_seeds, size=(n_resamples, n_seeds))


def cluster_resample_indices(
    seeds: np.ndarray, n_resamples: int, rng: np.random.Generator
) -> list[np.ndarray]:
    """Row positions of each cluster-bootstrap resample: the seeds are drawn with replacement and
    every row of a drawn seed is kept (once per draw), so each resample is a union of whole
    seeds."""
    unique, codes = np.unique(np.asarray(seeds), return_inverse=True)
    rows_of = [np.flatnonzero(codes == k) for k in range(len(unique))]
    draws = seed_draws(len(unique), n_resamples, rng)  # (R, S)
    return [np.concatenate([rows_of[k] for k in draw]) for draw in draws]


def cluster_resample_counts(
    seeds: np.ndarray, n_resamples: int, rng: np.random.Generator
) -> tuple[np.ndarray, np.ndarray]:
    """The resamples of ``cluster_resample_indices`` (the same draws of ``rng``) as (n_resamples, seeds)
    counts: how many times each distinct seed is drawn; and (rows,) each row's seed among them. Row i's
    weight in resample r is ``counts[r, codes[i]]``: a bootstrap needs no more, and this is one small array,
    not a list of rows per resample (1,000 resamples of 500 seeds took 0.1 s per fit that way)."""
    unique, codes = np.unique(np.asarray(seeds), return_inverse=True)
    draws = seed_draws(len(unique), n_resamples, rng)  # (R, S)
    counts = np.zeros((n_resamples, len(unique)))
    np.add.at(counts, (np.arange(n_resamples)[:, None], draws), 1.0)
    return counts, codes.reshape(-1)


def row_weights(counts: np.ndarray, codes: np.ndarray) -> np.ndarray:
    """One resample's weight per row, from its seed counts: a new contiguous array (a strided view would
    give the refit's dot products other sums)."""
    return counts[codes]


@dataclass(frozen=True)
class Problem:
    """One fit's data: log x per term (centred, so each coefficient is the term's value at the
    geometric-mean x, which decorrelates it from the exponent), log err, and how E enters.

    The model's prediction depends on x alone, and a lattice has few distinct x (its (n, T) points)
    under many rows (one per seed), so the terms are computed once per distinct x and only the
    residuals per row: the same loss and gradient, at a cost that no longer grows with the seeds
    but for a few elementwise operations."""

    logx: np.ndarray  # (P, K) centred
    centre: np.ndarray  # (K,) mean log x removed from logx
    logy: np.ndarray  # (P,)
    fixed_e: float | None  # log E when fixed; -inf drops the constant term; None means free
    delta: float

    @property
    def n_free(self) -> int:
        return 2 * self.logx.shape[1] + (self.fixed_e is None)

    @cached_property
    def points(self) -> tuple[np.ndarray, np.ndarray]:
        """(G, K) the distinct rows of logx and (P,) each row's position among them."""
        distinct, row = np.unique(self.logx, axis=0, return_inverse=True)
        return distinct, row.reshape(-1)

    @cached_property
    def _at_inf(self) -> np.ndarray:
        """(G, K) where x is infinite (T = inf, fresh tasks): that term is 0 (log term -inf)."""
        return np.isinf(self.points[0])

    @cached_property
    def _finite(self) -> np.ndarray:
        """(G, K) log x with 0 where x is infinite."""
        return np.where(self._at_inf, 0.0, self.points[0])

    @cached_property
    def _has_inf(self) -> bool:
        return bool(self._at_inf.any())

    @cached_property
    def _scratch(self) -> tuple[np.ndarray, ...]:
        """The (P,) arrays the loss writes its per-row steps into (an evaluation allocates none)."""
        rows = len(self.logy)
        return np.empty(rows), np.empty(rows), np.empty(rows), np.empty(rows, bool)

    def __getstate__(self) -> dict:
        """Pickled without the scratch arrays (a worker makes its own; unpickling fills __dict__ with the
        rest, as for any object)."""
        return {k: v for k, v in self.__dict__.items() if k != "_scratch"}

    def terms(self, theta: np.ndarray) -> np.ndarray:
        """(G, 1+K) log of each additive term at each distinct x: e, then c_k - s_k log x_k (-inf where
        x_k = inf)."""
        k = self.logx.shape[1]
        z = np.empty((len(self._finite), 1 + k))
        z[:, 0] = theta[0] if self.fixed_e is None else self.fixed_e
        cs = theta[-2 * k :].reshape(k, 2)  # (K, 2): log coefficient, exponent
        z[:, 1:] = cs[:, 0] - cs[:, 1] * self._finite  # (G, K)
        if self._has_inf:
            z[:, 1:][self._at_inf] = -np.inf
        return z

    def loss_and_grad(self, theta: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """Weighted summed Huber loss of log residuals (r^2 / 2 inside |r| <= delta, delta (|r| - delta / 2)
        outside) and its gradient in theta. The per-row steps run in place in ``_scratch``: the same loss and
        gradient, bit for bit, as the plain formulas on fresh arrays (tests/test_fit.py), in less time."""
        distinct, row = self.points
        z = self.terms(theta)  # (G, 1+K)
        m = z.max(axis=1, keepdims=True)  # (G, 1)
        ez = np.exp(z - m)
        total = ez.sum(axis=1, keepdims=True)
        soft = ez / total  # (G, 1+K) d log err_hat / d term
        r, a, q, inside = self._scratch
        np.take(m[:, 0] + np.log(total[:, 0]), row, out=r)
        np.subtract(r, self.logy, out=r)  # (P,) residuals
        np.abs(r, out=a)
        np.less_equal(a, self.delta, out=inside)
        np.subtract(a, 0.5 * self.delta, out=a)
        np.multiply(self.delta, a, out=a)  # huber outside delta
        np.multiply(np.multiply(0.5, r, out=q), r, out=q)
        np.copyto(a, q, where=inside)  # and inside
        loss = float(weights @ a)
        np.minimum(np.maximum(r, -self.delta, out=a), self.delta, out=a)  # d huber / d r
        np.multiply(weights, a, out=a)
        dr_g = np.bincount(row, a, minlength=len(distinct))  # (G,) summed over each x's rows
        g_term = dr_g @ soft  # (1+K,)
        g_exp = -(dr_g @ (soft[:, 1:] * self._finite))  # (K,)
        k = len(g_exp)
        free = self.fixed_e is None
        grad = np.empty(2 * k + free)
        grad[free::2] = g_term[1:]
        grad[free + 1 :: 2] = g_exp
        if free:
            grad[0] = g_term[0]
        return loss, grad

    def bounds(self) -> list[tuple[float, float]]:
        per_term = [LOG_BOUNDS, EXPONENT_BOUNDS] * self.logx.shape[1]
        return ([LOG_BOUNDS] if self.fixed_e is None else []) + per_term


def starting_grid(problem: Problem) -> np.ndarray:
    """(G, n_free) starting points around the data's scale: E a fraction of the smallest error,
    each term's exponent from a spread of values and its coefficient (the term's log value at the
    centre of log x) at the median log error."""
    y_min, y_mid = problem.logy.min(), float(np.median(problem.logy))
    e_grid = [y_min + math.log(f) for f in (0.1, 0.5, 0.9)] if problem.fixed_e is None else []
    exponents = (0.2, 0.6, 1.5)
    per_term = [[(y_mid, s) for s in exponents]] * problem.logx.shape[1]
    combos = [[v for pair in combo for v in pair] for combo in itertools.product(*per_term)]
    grid = [[e, *c] for e in e_grid for c in combos] if e_grid else combos
    low, high = zip(*problem.bounds())
    return np.clip(np.array(grid), low, high)


def minimise(
    problem: Problem, start: np.ndarray, weights: np.ndarray, maxiter: int
) -> tuple[np.ndarray, float, bool, str]:
    """One L-BFGS-B run (scipy's, driven by scaling.judge.lbfgsb): (theta, loss, converged, message).
    Converged means the routine reports success and the optimum and its loss are finite."""
    # scipy's ftol is relative to max(|f|, 1) and the summed Huber loss is ~1e-3, so the default
    # (2.2e-9) stops early in the flat E-A-alpha valley (alpha off by up to 0.3 on resamples);
    # 1e-12 brought it within 0.002 of a run to full convergence
    x, fun, success, message = lbfgsb.minimise(
        problem.loss_and_grad, start, (weights,), problem.bounds(), maxiter, ftol=1e-12, gtol=1e-10
    )
    ok = success and np.all(np.isfinite(x)) and np.isfinite(fun)
    return x, fun, bool(ok), message


def best_fit(problem: Problem, weights: np.ndarray, maxiter: int) -> tuple[np.ndarray, float, bool, str]:
    """The lowest-loss converged run over the starting grid (the lowest-loss run if none
    converged)."""
    runs = [minimise(problem, s, weights, maxiter) for s in starting_grid(problem)]
    converged = [r for r in runs if r[2]]
    return min(converged or runs, key=lambda r: r[1])


def named_params(problem: Problem, theta: np.ndarray, form: Form) -> dict[str, float]:
    """E, A, alpha, B, beta from theta (NaN for the parameters the form does not have)."""
    out = dict.fromkeys(PARAMS, math.nan)
    out["E"] = math.exp(theta[0] if problem.fixed_e is None else problem.fixed_e)
    k = len(form.axes)
    cs = np.asarray(theta)[-2 * k :].reshape(k, 2)
    for (c, s), mu, coef, expo in zip(cs, problem.centre, form.coefs, form.exponents):
        out[coef], out[expo] = math.exp(c + s * mu), float(s)
    return out


def log_problem(points: pd.DataFrame, spec: Form, fixed_E: float | None, delta: float) -> Problem:
    """The points in log space, each axis centred on its finite values' mean; E fixed where given
    (0: no constant term)."""
    x, err = points[list(spec.axes)].to_numpy(float), points["err"].to_numpy(float)  # (P, K), (P,)
    if not (np.all((x > 0) & ~np.isnan(x)) and np.all(np.isfinite(err) & (err > 0))):
        raise ValueError("fit_points needs finite positive err and positive axis values")
    logx = np.log(x)
    finite = np.isfinite(logx)
    centre = np.array([col[ok].mean() if ok.any() else 0.0 for col, ok in zip(logx.T, finite.T)])
    return Problem(
        logx=logx - centre,
        centre=centre,
        logy=np.log(err),
        fixed_e=None if fixed_E is None else (math.log(fixed_E) if fixed_E > 0 else -math.inf),
        delta=delta,
    )


def unfitted(points: pd.DataFrame, fixed_E: float | None, level: float) -> dict:
    """A fit's row before fitting: the parameters and their bounds NaN, the points and seeds counted."""
    return {
        **{f"{p}{s}": math.nan for p in PARAMS for s in ("", "_lo", "_hi")},
        "n_points": len(points),
        "n_seeds": len(np.unique(points["seed"].to_numpy())),
        "E_fixed": math.nan if fixed_E is None else float(fixed_E),
        "converged": False,
        "message": "",
        "loss": math.nan,
        "n_boot": 0,
        "boot_converged": math.nan,
        "level": level,
        "note": "",
    }


def too_few_points(problem: Problem, spec: Form) -> str:
    """Why the law cannot be fitted to these points (fewer distinct points than parameters, or one
    value on an axis); empty when it can."""
    distinct = len(problem.points[0])
    per_axis = min(len(np.unique(col)) for col in problem.logx.T)
    if distinct >= problem.n_free and per_axis >= 2:
        return ""
    return (
        f"not fitted: {distinct} distinct points ({per_axis} values of "
        f"{'/'.join(spec.axes)} on the sparsest axis) for {problem.n_free} parameters"
    )


def fit_points(points: pd.DataFrame, form: str, **options) -> dict:
    """Fit one group's points (columns seed, err and the form's axes) with a seed-cluster bootstrap
    (``options``: started_fit's keywords).

    Returns a flat dict: the parameters with _lo/_hi interval bounds, n_points, n_seeds, E_fixed,
    converged, message, loss, n_boot, boot_converged (fraction of refits that converged), level and
    a note saying why an interval or a fit is missing.
    """
    return started_fit(points, form, **options)()


def started_fit(
    points: pd.DataFrame,
    form: str,
    *,
    fixed_E: float | None = None,
    n_boot: int = 1000,
    level: float = 0.9,
    rng: np.random.Generator | int = 0,
    delta: float = 1e-3,
    maxiter: int = 1000,
) -> Callable[[], dict]:
    """fit_points begun: the fit done and its bootstrap refits handed to the worker processes (when they
    run there); the call returned gives fit_points' dict once they are back. ``fixed_E``: E held at this
    value (0 drops the constant term); ``n_boot`` resamples for the ``level`` interval, drawn from ``rng``;
    ``delta``: the Huber loss' threshold; ``maxiter``: L-BFGS-B's iterations. Starting every group's fit
    before finishing any keeps the workers busy while this process fits the next group (fit_scaling)."""
    spec = form_named(form)
    rng = np.random.default_rng(rng)
    if fixed_E is not None and not fixed_E >= 0:
        raise ValueError(f"fixed_E must be >= 0, got {fixed_E}")
    if fixed_E == 0 and "T" in spec.axes:  # no constant term: T = inf would predict an error of 0
        points = points[np.isfinite(points["T"])]
    problem = log_problem(points, spec, fixed_E, delta)
    seeds = points["seed"].to_numpy()
    out = unfitted(points, fixed_E, level)
    out["message"] = out["note"] = too_few_points(problem, spec)
    if out["message"]:
        return lambda: out
    # L-BFGS-B calls BLAS on tiny matrices; BLAS threads only add contention (10x slower here)
    with threadpool_limits(1, "blas"):
        theta, loss, ok, message = best_fit(problem, np.ones(len(points)), maxiter)
        out.update(named_params(problem, theta, spec), converged=ok, message=message, loss=loss)
        if fixed_E is not None:
            out["E"] = float(fixed_E)
        out["note"] = _bound_note(out, spec)
        if not ok:
            _add_note(out, "optimiser did not converge; parameters unreliable, no interval")
            return lambda: out
        if out["n_seeds"] < 2:
            _add_note(out, "single seed: no bootstrap interval")
            return lambda: out
        boot = _bootstrap_bounds(problem, spec, theta, seeds, n_boot, level, rng, maxiter)

    def finished() -> dict:
        bounds = boot()
        _add_note(out, bounds.pop("note", ""))
        out.update(bounds)
        if fixed_E is not None:
            out["E_lo"] = out["E_hi"] = float(fixed_E)
        return out

    return finished


def _add_note(out: dict, text: str) -> None:
    out["note"] = "; ".join(t for t in (out["note"], text) if t)


def _bound_note(params: dict, form: Form) -> str:
    """A note naming exponents that ended on a bound of EXPONENT_BOUNDS (e.g. a flat curve)."""
    hit = [f"{e} at bound {params[e]:g}" for e in form.exponents if params[e] in EXPONENT_BOUNDS]
    return "; ".join(hit)


def predicted_err(
    fit: dict | pd.Series, n: np.ndarray | float = math.inf, T: np.ndarray | float = math.inf
) -> np.ndarray:
    """E + A n^-alpha + B T^-beta from a row of fit results (terms the form lacks are left out;
    T = inf drops the task term), for drawing fitted curves."""
    out = np.full(np.broadcast(n, T).shape, float(fit["E"]))
    for coef, expo, x in (("A", "alpha", n), ("B", "beta", T)):
        if not math.isnan(fit[coef]):
            out = out + fit[coef] * np.asarray(x, float) ** -fit[expo]
    return out


# Refits of one fit's resamples are independent: above this many they go to worker processes, one per
# core (each keeps BLAS to one thread); below it a pool's start costs more than it saves.
PARALLEL_REFITS = 400
_pool: ProcessPoolExecutor | None = None


def _refit_chunk(
    problem: Problem, form: Form, theta: np.ndarray, counts: np.ndarray, codes: np.ndarray, maxiter: int
) -> list:
    """Each resample's parameters (a row of seed ``counts``, weights per row by ``codes``) refit from
    ``theta`` (from the starting grid when that fails; None when both do)."""
    out = []
    with threadpool_limits(1, "blas"):
        for row in counts:
            w = row_weights(row, codes)
            t, _, ok, _ = minimise(problem, theta, w, maxiter)
            if not ok:  # rare: fall back on the full starting grid
                t, _, ok, _ = best_fit(problem, w, maxiter)
            out.append(named_params(problem, t, form) if ok else None)
    return out


def refit_workers() -> int:
    """Worker processes for bootstrap refits: the cores this process may use (SCALING_FIT_WORKERS
    overrides; 1 keeps every refit in this process)."""
    given = os.environ.get("SCALING_FIT_WORKERS", "").strip()
    if not given:
        return len(os.sched_getaffinity(0))
    if not given.isdigit() or int(given) < 1:
        raise ValueError(f"SCALING_FIT_WORKERS={given!r}: give a whole number of worker processes, 1 or more")
    return int(given)


def refits(
    problem: Problem, form: Form, theta: np.ndarray, counts: np.ndarray, codes: np.ndarray, maxiter: int
) -> Callable[[], list]:
    """_refit_chunk over the resamples (rows of seed ``counts``), split over worker processes when there are
    many and this process runs no other thread: the call returned gives the same results in the same order
    (each refit is deterministic and independent of the others; a worker is sent the seed counts, not a
    weight per row). The workers are forks, which need no importable main module (a user's script) and
    start in milliseconds; a fork copies only the forking thread, so with another thread alive (a Ray
    driver's, MLflow's) one lock it held could stay locked in the worker: then the refits stay here (and
    are done before this returns)."""
    global _pool
    workers = refit_workers()
    if workers < 2 or len(counts) < PARALLEL_REFITS or (_pool is None and threading.active_count() > 1):
        done = _refit_chunk(problem, form, theta, counts, codes, maxiter)
        return lambda: done
    if _pool is None:  # forks every worker at its first map, before its own threads start (fork context)
        _pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    chunks = [c for c in np.array_split(np.arange(len(counts)), 4 * workers) if len(c)]
    futures = [_pool.submit(_refit_chunk, problem, form, theta, counts[c], codes, maxiter) for c in chunks]
    return lambda: [fit for future in futures for fit in future.result()]


def _bootstrap_bounds(
    problem: Problem,
    form: Form,
    theta: np.ndarray,
    seeds: np.ndarray,
    n_boot: int,
    level: float,
    rng: np.random.Generator,
    maxiter: int,
) -> Callable[[], dict]:
    """Percentile interval bounds of each parameter over seed-cluster resamples, each refit from the full
    fit's optimum (the call returned gives them, once the refits are back). A resample becomes integer
    weights on the rows; resamples drawing the same multiset of seeds (frequent with few seeds) share one
    refit; a refit that fails to converge is retried from the starting grid and left out of the interval if
    it fails again."""
    counts, codes = cluster_resample_counts(seeds, n_boot, rng)
    keys = [c.tobytes() for c in counts]
    first: dict[bytes, int] = {}  # each multiset of seeds -> its first resample (refit once, in order)
    for i, key in enumerate(keys):
        first.setdefault(key, i)
    pending = refits(problem, form, theta, counts[list(first.values())], codes, maxiter)
    return lambda: percentile_bounds(dict(zip(first, pending())), keys, n_boot, level)


def percentile_bounds(refitted: dict, keys: list[bytes], n_boot: int, level: float) -> dict:
    """The bootstrap's columns: each parameter's percentile interval over the converged refits (``refitted``:
    each multiset's parameters, None where its refit failed; ``keys``: each resample's multiset)."""
    fits = [refitted[k] for k in keys if refitted[k] is not None]
    n_ok = len(fits)
    out = {"n_boot": n_boot, "boot_converged": n_ok / n_boot if n_boot else math.nan}
    if n_ok < 2:
        out["note"] = "too few converged bootstrap refits for an interval"
        return out
    tail = 100 * (1 - level) / 2
    for p in PARAMS:
        vals = np.array([f[p] for f in fits])
        if np.all(np.isfinite(vals)):
            out[f"{p}_lo"], out[f"{p}_hi"] = np.percentile(vals, [tail, 100 - tail])
    if n_ok < 0.9 * n_boot:
        out["note"] = f"only {n_ok}/{n_boot} bootstrap refits converged"
    return out
