"""Scaling-law fits of normalised ICL error against context length n and number of tasks T.

Seed 001 (Abedsoltan et al., Sec. 1 and Figs. 1, 7, 8) asks whether error falls with the context
length n at fixed T (context-scaling) and with the number of pretraining tasks T at fixed n
(task-scaling). This file fits three saturating power laws to the project's tidy table:

    context:  err(n)    = E + A n^-alpha                 per (sweep, model, T, predictor)
    task:     err(T)    = E + B T^-beta                  per (sweep, model, n, predictor)
    joint:    err(n, T) = E + A n^-alpha + B T^-beta     per (sweep, model, predictor)

T = inf (a fresh task for every prompt) enters the task and joint forms with its task term 0: it pins E.
When a lattice has too few values of N for the context form over n = N (the smoke sweep has two), the
fits fall back on each cell's own curve over n = 1..N (``fit_models``: the cells of the largest N, every
evaluated n), and say so in the ``fit_on`` column; a row that cannot be fitted says why in ``note``.

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

import numpy as np
import pandas as pd
from scipy.optimize import minimize
from threadpoolctl import threadpool_limits


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
SELECTIONS = ("auto", "diagonal", "all")
EXPONENT_BOUNDS = (0.0, 10.0)
LOG_BOUNDS = (-50.0, 50.0)


def form_named(name: str) -> Form:
    """The registered fit form called `name`; unknown names fail listing the known ones."""
    if name not in FORMS:
        raise ValueError(f"unknown fit form {name!r}; known: {sorted(FORMS)}")
    return FORMS[name]


def group_keys(table: pd.DataFrame, form: Form, by: tuple[str, ...] | None = None) -> list[str]:
    """Group keys for a form: `by` if given, else the form's base keys present in the table plus
    every task.* column (different task settings are never pooled into one fit)."""
    if by is not None:
        clash = set(by) & set(form.axes)
        if clash:
            raise ValueError(f"group keys {sorted(clash)} are fit axes of this form")
        return list(by)
    base = [k for k in form.keys if k in table.columns]
    return base + setting_keys(table)


def setting_keys(table: pd.DataFrame) -> list[str]:
    """The analysis view's setting columns ('task.family', 'train.steps': dotted names without 'param.'):
    settings that vary between cells, never pooled into one fit or verdict."""
    return sorted(c for c in table.columns if "." in c and not c.startswith("param."))


def scaling_points(
    table: pd.DataFrame,
    axes: tuple[str, ...],
    keys: list[str],
    select: str = "auto",
    n_min: int = 1,
) -> pd.DataFrame:
    """The rows a scaling analysis uses: one per (keys, seed, axes) with its mean err.

    select="diagonal" keeps rows evaluated at the cell's own length (n == N, train and test on the
    same context length as in seed 001 App. A); "all" keeps every evaluated n; "auto" (the default)
    is "diagonal" for groups whose cells span several N and "all" for groups of one N, whose curve
    over n is one cell trained on every prefix (seed 001 Figs. 2-4: one N = 40 cell per model). When n is a
    fit axis only n >= n_min is kept (n^-alpha needs n > 0); when T is a fit axis T > 0 is kept, T = inf
    (fresh tasks) included: its task term B T^-beta is 0, so those points pin E (+ A n^-alpha).
    Rows with non-finite or non-positive err are dropped. Duplicates of (keys, seed, axes) left
    after selection (several cells evaluated at the same n under select="all") are averaged.
    """
    if select not in SELECTIONS:
        raise ValueError(f"unknown selection {select!r}; known: {list(SELECTIONS)}")
    rows = table
    if select == "diagonal":
        rows = rows[rows["n"] == rows["N"]]
    elif select == "auto":  # a lattice over N is judged per group without n (a task group's own key)
        lattice = [k for k in keys if k != "n"]
        group_Ns = (
            rows.groupby(lattice, dropna=False)["N"].transform("nunique") if lattice else rows["N"].nunique()
        )
        rows = rows[(group_Ns == 1) | (rows["n"] == rows["N"])]
    if "n" in axes:
        rows = rows[rows["n"] >= n_min]
    if "T" in axes:
        rows = rows[rows["T"] > 0]
    rows = rows[np.isfinite(rows["err"]) & (rows["err"] > 0)]
    cols = list(dict.fromkeys([*keys, "seed", *axes]))
    return rows.groupby(cols, dropna=False, sort=True)["err"].mean().reset_index()


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


def huber(r: np.ndarray, delta: float) -> np.ndarray:
    """Elementwise Huber loss: r^2 / 2 inside |r| <= delta, delta (|r| - delta / 2) outside."""
    a = np.abs(r)
    return np.where(a <= delta, 0.5 * r * r, delta * (a - 0.5 * delta))


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

    def terms(self, theta: np.ndarray) -> np.ndarray:
        """(G, 1+K) log of each additive term at each distinct x: e, then c_k - s_k log x_k (-inf where
        x_k = inf)."""
        k = self.logx.shape[1]
        z = np.empty((len(self._finite), 1 + k))
        z[:, 0] = theta[0] if self.fixed_e is None else self.fixed_e
        cs = theta[-2 * k :].reshape(k, 2)  # (K, 2): log coefficient, exponent
        z[:, 1:] = np.where(self._at_inf, -np.inf, cs[:, 0] - cs[:, 1] * self._finite)  # (G, K)
        return z

    def loss_and_grad(self, theta: np.ndarray, weights: np.ndarray) -> tuple[float, np.ndarray]:
        """Weighted summed Huber loss of log residuals and its gradient in theta."""
        distinct, row = self.points
        z = self.terms(theta)  # (G, 1+K)
        m = z.max(axis=1, keepdims=True)  # (G, 1)
        ez = np.exp(z - m)
        total = ez.sum(axis=1, keepdims=True)
        soft = ez / total  # (G, 1+K) d log err_hat / d term
        r = (m[:, 0] + np.log(total[:, 0]))[row] - self.logy  # (P,)
        loss = float(weights @ huber(r, self.delta))
        dr = weights * np.clip(r, -self.delta, self.delta)  # (P,) d huber / d r
        dr_g = np.bincount(row, dr, minlength=len(distinct))  # (G,) summed over each x's rows
        g_term = dr_g @ soft  # (1+K,)
        g_exp = -(dr_g @ (soft[:, 1:] * self._finite))  # (K,)
        grad = np.column_stack([g_term[1:], g_exp]).ravel()
        if self.fixed_e is None:
            grad = np.concatenate([g_term[:1], grad])
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
    """One L-BFGS-B run: (theta, loss, converged, message). Converged means scipy reports success
    and the optimum and its loss are finite."""
    # scipy's ftol is relative to max(|f|, 1) and the summed Huber loss is ~1e-3, so the default
    # (2.2e-9) stops early in the flat E-A-alpha valley (alpha off by up to 0.3 on resamples);
    # 1e-12 brought it within 0.002 of a run to full convergence
    res = minimize(
        problem.loss_and_grad,
        start,
        args=(weights,),
        jac=True,
        method="L-BFGS-B",
        bounds=problem.bounds(),
        options={"maxiter": maxiter, "ftol": 1e-12, "gtol": 1e-10},
    )
    ok = bool(res.success) and np.all(np.isfinite(res.x)) and np.isfinite(res.fun)
    return res.x, float(res.fun), ok, str(res.message)


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


def fit_points(
    points: pd.DataFrame,
    form: str,
    *,
    fixed_E: float | None = None,
    n_boot: int = 1000,
    level: float = 0.9,
    rng: np.random.Generator | int = 0,
    delta: float = 1e-3,
    maxiter: int = 1000,
) -> dict:
    """Fit one group's points (columns seed, err and the form's axes) with a seed-cluster bootstrap.

    Returns a flat dict: the parameters with _lo/_hi interval bounds, n_points, n_seeds, E_fixed,
    converged, message, loss, n_boot, boot_converged (fraction of refits that converged), level and
    a note saying why an interval or a fit is missing.
    """
    spec = form_named(form)
    rng = np.random.default_rng(rng)
    if fixed_E is not None and not fixed_E >= 0:
        raise ValueError(f"fixed_E must be >= 0, got {fixed_E}")
    if fixed_E == 0 and "T" in spec.axes:  # no constant term: T = inf would predict an error of 0
        points = points[np.isfinite(points["T"])]
    x, err = points[list(spec.axes)].to_numpy(float), points["err"].to_numpy(float)  # (P, K), (P,)
    if not (np.all((x > 0) & ~np.isnan(x)) and np.all(np.isfinite(err) & (err > 0))):
        raise ValueError("fit_points needs finite positive err and positive axis values")
    logx = np.log(x)
    finite = np.isfinite(logx)
    centre = np.array([col[ok].mean() if ok.any() else 0.0 for col, ok in zip(logx.T, finite.T)])
    problem = Problem(
        logx=logx - centre,
        centre=centre,
        logy=np.log(err),
        fixed_e=None if fixed_E is None else (math.log(fixed_E) if fixed_E > 0 else -math.inf),
        delta=delta,
    )
    seeds = points["seed"].to_numpy()
    out = {
        **{f"{p}{s}": math.nan for p in PARAMS for s in ("", "_lo", "_hi")},
        "n_points": len(points),
        "n_seeds": len(np.unique(seeds)),
        "E_fixed": math.nan if fixed_E is None else float(fixed_E),
        "converged": False,
        "message": "",
        "loss": math.nan,
        "n_boot": 0,
        "boot_converged": math.nan,
        "level": level,
        "note": "",
    }
    distinct = len(problem.points[0])
    per_axis = min(len(np.unique(col)) for col in problem.logx.T)
    if distinct < problem.n_free or per_axis < 2:
        out["message"] = (
            f"not fitted: {distinct} distinct points ({per_axis} values of "
            f"{'/'.join(spec.axes)} on the sparsest axis) for {problem.n_free} parameters"
        )
        out["note"] = out["message"]
        return out
    # L-BFGS-B calls BLAS on tiny matrices; BLAS threads only add contention (10x slower here)
    with threadpool_limits(1, "blas"):
        theta, loss, ok, message = best_fit(problem, np.ones(len(points)), maxiter)
        out.update(named_params(problem, theta, spec), converged=ok, message=message, loss=loss)
        if fixed_E is not None:
            out["E"] = float(fixed_E)
        out["note"] = _bound_note(out, spec)
        if not ok:
            _add_note(out, "optimiser did not converge; parameters unreliable, no interval")
            return out
        if out["n_seeds"] < 2:
            _add_note(out, "single seed: no bootstrap interval")
            return out
        boot = _bootstrap_bounds(problem, spec, theta, seeds, n_boot, level, rng, maxiter)
        _add_note(out, boot.pop("note", ""))
        out.update(boot)
    if fixed_E is not None:
        out["E_lo"] = out["E_hi"] = float(fixed_E)
    return out


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
    problem: Problem, form: Form, theta: np.ndarray, weights: list[np.ndarray], maxiter: int
) -> list:
    """Each resample's parameters refit from ``theta`` (from the starting grid when that fails; None when
    both do)."""
    out = []
    with threadpool_limits(1, "blas"):
        for w in weights:
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


def refits(problem: Problem, form: Form, theta: np.ndarray, weights: list[np.ndarray], maxiter: int) -> list:
    """_refit_chunk over ``weights``, split over worker processes when there are many and this process
    runs no other thread: the same results in the same order (each refit is deterministic and independent
    of the others). The workers are forks, which need no importable main module (a user's script) and
    start in milliseconds; a fork copies only the forking thread, so with another thread alive (a Ray
    driver's, MLflow's) one lock it held could stay locked in the worker: then the refits stay here."""
    global _pool
    workers = refit_workers()
    if workers < 2 or len(weights) < PARALLEL_REFITS or (_pool is None and threading.active_count() > 1):
        return _refit_chunk(problem, form, theta, weights, maxiter)
    if _pool is None:  # forks every worker at its first map, before its own threads start (fork context)
        _pool = ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork"))
    chunks = [c for c in np.array_split(np.arange(len(weights)), 4 * workers) if len(c)]
    parts = _pool.map(
        _refit_chunk,
        *zip(*[(problem, form, theta, [weights[i] for i in c], maxiter) for c in chunks]),
    )
    return [fit for part in parts for fit in part]


def _bootstrap_bounds(
    problem: Problem,
    form: Form,
    theta: np.ndarray,
    seeds: np.ndarray,
    n_boot: int,
    level: float,
    rng: np.random.Generator,
    maxiter: int,
) -> dict:
    """Percentile interval bounds of each parameter over seed-cluster resamples, each refit from
    the full fit's optimum. A resample becomes integer weights on the rows; resamples drawing the
    same multiset of seeds (frequent with few seeds) share one refit; a refit that fails to
    converge is retried from the starting grid and left out of the interval if it fails again."""
    weights = [
        np.bincount(idx, minlength=len(seeds)).astype(float)
        for idx in cluster_resample_indices(seeds, n_boot, rng)
    ]
    keys = [w.tobytes() for w in weights]
    distinct = dict(zip(keys, weights))  # first resample of each multiset, in order
    refitted = dict(zip(distinct, refits(problem, form, theta, list(distinct.values()), maxiter)))
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


def fit_scaling(
    table: pd.DataFrame,
    form: str,
    *,
    by: tuple[str, ...] | None = None,
    select: str = "auto",
    n_min: int = 1,
    fixed_E: float | str | None = None,
    n_boot: int = 1000,
    level: float = 0.9,
    rng: np.random.Generator | int = 0,
    delta: float = 1e-3,
    maxiter: int = 1000,
) -> pd.DataFrame:
    """Fit `form` ("context", "task" or "joint") to every group of the tidy table.

    One row per group: the group keys, form, parameters (E, A, alpha, B, beta; NaN where the form
    lacks one) with _lo/_hi bounds of the `level` percentile interval, and the diagnostics of
    fit_points. fixed_E is None (fit E), a number, or the name of a column holding each group's
    floor (constant within a group). The bootstrap RNG is `rng` (a Generator or an int seed),
    shared across groups in order.
    """
    spec = form_named(form)
    rng = np.random.default_rng(rng)
    keys = group_keys(table, spec, by)
    carry = [fixed_E] if isinstance(fixed_E, str) else []
    pts = scaling_points(table, spec.axes, keys + carry, select, n_min)
    rows = []
    for key, group in pts.groupby(keys, dropna=False, sort=True):
        floor = _group_floor(group, fixed_E)
        fit = fit_points(
            group, form, fixed_E=floor, n_boot=n_boot, level=level, rng=rng, delta=delta, maxiter=maxiter
        )
        rows.append({**dict(zip(keys, key)), "form": form, **fit})
    return pd.DataFrame(rows)


def _group_floor(group: pd.DataFrame, fixed_E: float | str | None) -> float | None:
    if not isinstance(fixed_E, str):
        return fixed_E
    values = group[fixed_E].unique()
    if len(values) != 1:
        raise ValueError(f"column {fixed_E!r} is not constant within a group: {values}")
    return float(values[0])


def fit_context_scaling(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """err(n) = E + A n^-alpha per (sweep, model, T, predictor); keywords as fit_scaling."""
    return fit_scaling(table, "context", **kwargs)


def fit_task_scaling(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """err(T) = E + B T^-beta per (sweep, model, n, predictor), finite T only; keywords as
    fit_scaling."""
    return fit_scaling(table, "task", **kwargs)


def fit_joint_scaling(table: pd.DataFrame, **kwargs) -> pd.DataFrame:
    """err(n, T) = E + A n^-alpha + B T^-beta per (sweep, model, predictor), finite T."""
    return fit_scaling(table, "joint", **kwargs)


def fit_all(table: pd.DataFrame, forms: tuple[str, ...] = tuple(FORMS), **kwargs) -> pd.DataFrame:
    """The fits of every form in `forms`, stacked (group keys a form lacks are NaN)."""
    return pd.concat([fit_scaling(table, f, **kwargs) for f in forms], ignore_index=True)


WITHIN_CELL = "within cell"  # fit_on of a context fit over a cell's own curve over n (its largest N)


def is_trained(predictor: pd.Series) -> pd.Series:
    """Rows of a trained model (``model`` or a split row ``model|<level>``), not of a baseline."""
    return predictor.astype(str).str.partition("|")[0] == "model"


def within_cell_rows(table: pd.DataFrame, keys: list[str]) -> pd.DataFrame:
    """The rows of each group's cells of the largest N (their curve over every evaluated n)."""
    largest = table.groupby(keys, dropna=False)["N"].transform("max") if keys else table["N"].max()
    return table[table["N"] == largest]


def fit_models(
    table: pd.DataFrame, forms: tuple[str, ...] = tuple(FORMS), n_min_cell: int = 2, **kwargs
) -> pd.DataFrame:
    """The fits a reader gets: every form over the lattice for the trained models (baselines have known
    curves and are not fitted), and, for each (model, T) group whose lattice has fewer than 3 values of N,
    the context form over the curve within its largest-N cells, n >= n_min_cell (``fit_on`` says which;
    the n = 1 point, a prediction from one example, sits off any power law in n).

    Columns as fit_scaling's plus ``fit_on``: "lattice (n = N)" (several N: trained and tested at the same
    length), "lattice (one N: every n)" or "within cell (N = 16: n = 2..16)"."""
    models = table[is_trained(table["predictor"])] if "predictor" in table else table
    if models.empty:
        return pd.DataFrame()
    parts = []
    for form in forms:
        fits = fit_scaling(models, form, **kwargs)
        if fits.empty:
            continue
        spec = form_named(form)
        keys = [k for k in group_keys(models, spec, kwargs.get("by")) if k != "n"]
        several = (
            models.groupby(keys, dropna=False)["N"].nunique().max() > 1 if keys else models["N"].nunique() > 1
        )
        fits.insert(len(keys) + 1, "fit_on", "lattice (n = N)" if several else "lattice (one N: every n)")
        parts.append(fits)
        if form != "context":
            continue
        keys = group_keys(models, spec, kwargs.get("by"))
        few = (
            models.groupby(keys, dropna=False)["N"].transform("nunique") < 3
            if keys
            else pd.Series(models["N"].nunique() < 3, index=models.index)
        )
        rows = within_cell_rows(models[few & (models["N"] > 1)], keys)
        if rows.empty or not several:
            continue
        rows = rows[rows["n"] >= n_min_cell]
        cell = fit_scaling(rows, "context", **{**kwargs, "select": "all"})
        Ns = rows.groupby(keys, dropna=False)["N"].max().rename("_N").reset_index()
        cell = cell.merge(Ns, on=keys, how="left")
        cell.insert(
            len(keys) + 1,
            "fit_on",
            [f"{WITHIN_CELL} (N = {N}: n = {n_min_cell}..{N})" for N in cell.pop("_N")],
        )
        unfitted = fits["message"].str.startswith("not fitted")
        fits.loc[unfitted, "note"] = (
            fits.loc[unfitted, "note"] + "; fitted within cells instead (fit_on: within cell)"
        )
        parts.append(cell)
    return pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
