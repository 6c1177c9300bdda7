"""One saturating power law fitted to one group's points, with intervals from the seeds' own fits.

The laws (``FORMS``: seed 001's context, task and joint forms) are err = E + sum_k C_k x_k^-s_k over one or
two axes x_k (n, T); T = inf (fresh tasks) makes its term 0. ``fit_points`` fits one group's rows
(scaling.judge.fit chooses the rows and the groups of a sweep's table).

The fit is done in log space with a log-sum-exp parametrisation, as in Hoffmann et al. 2022
(Chinchilla, Sec. 3.3 and App. D.2):

    log err_hat = LSE(e, a - alpha log n, b - beta log T),   E = exp(e), A = exp(a), B = exp(b),

minimising the Huber loss (delta = 1e-3, summed over points) of log err_hat - log err with
scipy.optimize L-BFGS-B from a grid of starting points, keeping the best. E can be fixed at a known
floor (e.g. the noise level's normalised error); E = 0 drops the constant term.

With 2 seeds or more, the estimates and intervals come from the seeds' own fits (``seed_interval``): the
law is fitted to each seed's rows alone, and each parameter is the mean of the seeds' values with a Student
t interval (E, A, B on the log scale); the pooled fit over every seed starts them. With one seed the pooled
fit is the estimate and no interval is given (NaN and a note).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from functools import cached_property

import numpy as np
import pandas as pd
import scipy.stats
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
        "level": level,
        "note": "",
    }


def too_few_points(problem: Problem, spec: Form, weights: np.ndarray | None = None) -> str:
    """Why the law cannot be fitted to these points, or to the rows of nonzero ``weights`` (fewer distinct
    points than parameters, or one value on an axis); empty when it can."""
    logx = problem.logx if weights is None else problem.logx[weights > 0]
    distinct = len(np.unique(logx, axis=0))
    per_axis = min(len(np.unique(col)) for col in logx.T)
    if distinct >= problem.n_free and per_axis >= 2:
        return ""
    return (
        f"not fitted: {distinct} distinct points ({per_axis} values of "
        f"{'/'.join(spec.axes)} on the sparsest axis) for {problem.n_free} parameters"
    )


def fit_points(
    points: pd.DataFrame,
    form: str,
    *,
    fixed_E: float | None = None,
    level: float = 0.9,
    delta: float = 1e-3,
    maxiter: int = 1000,
) -> dict:
    """Fit one group's points (columns seed, err and the form's axes): the law over every seed's rows, then
    each parameter's estimate and ``level`` interval from the seeds' own fits (``seed_interval``).
    ``fixed_E``: E held at this value (0 drops the constant term); ``delta``: the Huber loss' threshold;
    ``maxiter``: L-BFGS-B's iterations.

    Returns a flat dict: the parameters with _lo/_hi interval bounds, n_points, n_seeds, E_fixed,
    converged, message, loss, level and a note saying why an interval or a fit is missing.
    """
    spec = form_named(form)
    if fixed_E is not None and not fixed_E >= 0:
        raise ValueError(f"fixed_E must be >= 0, got {fixed_E}")
    if fixed_E == 0 and "T" in spec.axes:  # no constant term: T = inf would predict an error of 0
        points = points[np.isfinite(points["T"])]
    problem = log_problem(points, spec, fixed_E, delta)
    out = unfitted(points, fixed_E, level)
    out["message"] = out["note"] = too_few_points(problem, spec)
    if out["message"]:
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
        bounds = seed_interval(problem, spec, theta, points["seed"].to_numpy(), level, maxiter)
    _add_note(out, bounds.pop("note", ""))
    out.update(bounds)
    if fixed_E is not None:
        out["E"] = out["E_lo"] = out["E_hi"] = float(fixed_E)
    return out


# Parameters whose seed-to-seed spread is multiplicative (positive scales): their intervals are taken on logs
LOG_SCALE = ("E", "A", "B")


def seed_interval(
    problem: Problem, form: Form, theta: np.ndarray, seeds: np.ndarray, level: float, maxiter: int
) -> dict:
    """Each parameter's estimate and ``level`` interval from the law fitted to each seed's rows alone: the
    mean of the S seeds' values plus or minus Student t's quantile (S - 1 degrees of freedom) times their
    standard error (sample sd over sqrt(S)); E, A and B on the log scale (their geometric mean). A seed's
    rows hold its own prompts' noise and its own training, so the seeds' spread carries both. Each seed's
    fit starts at the pooled optimum ``theta`` (the starting grid where that fails). Simulated at a nominal
    90%, the exponent's interval covers 88-92% at 3, 5 and 8 seeds (tests/fit_coverage_study.py); the same
    half-width about the pooled fit covered 80-87%, and the percentile bootstrap over seeds 77-87%. Needs
    2 seeds or more, each with enough points of its own for the law; otherwise only a note."""
    unique, codes = np.unique(seeds, return_inverse=True)
    codes = codes.reshape(-1)
    if len(unique) < 2:
        return {"note": "single seed: no interval"}
    values = []
    for s in range(len(unique)):
        w = (codes == s).astype(float)
        if too_few_points(problem, form, w):
            return {"note": f"seed {unique[s]} has too few points for a fit of its own: no interval"}
        t, _, ok, _ = minimise(problem, theta, w, maxiter)
        if not ok:
            t, _, ok, _ = best_fit(problem, w, maxiter)
        if not ok:
            return {"note": f"the fit of seed {unique[s]} alone did not converge: no interval"}
        values.append(named_params(problem, t, form))
    quantile = float(scipy.stats.t.ppf(0.5 + level / 2, len(values) - 1))
    out = {}
    for p in PARAMS:
        vals = np.array([v[p] for v in values])
        log = p in LOG_SCALE
        if not np.all(np.isfinite(vals)) or (log and not np.all(vals > 0)):
            continue
        vals = np.log(vals) if log else vals
        centre, half = vals.mean(), quantile * vals.std(ddof=1) / math.sqrt(len(vals))
        bounds = (centre, centre - half, centre + half)
        out[p], out[f"{p}_lo"], out[f"{p}_hi"] = (math.exp(b) for b in bounds) if log else bounds
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
