"""L-BFGS-B with box bounds as ``scipy.optimize.minimize(method="L-BFGS-B", jac=True)`` runs it, the same
iterates bit for bit, without the wrappers scipy builds around every call.

An analysis runs thousands of small minimisations (scaling.judge.power_law: every group's starting grid
and each seed's own fit, three to five parameters, tens of iterations each); scipy's own driver spends more
time in its Python wrappers (ScalarFunction, MemoizeJac, bounds standardisation, the inverse-Hessian
operator of the result) than in the loss. Here the
same compiled routine (scipy's ``setulb``) is driven by the loop of scipy's ``_minimize_lbfgsb``: the same
first evaluation at the clipped start, the same reuse of the last value where the routine asks again at the
same point, the same stopping rules and messages. Only scipy versions whose driver this copies use it
(OWN_DRIVER_SCIPY), and only after it agreed with ``minimize`` on a problem of its own (``agrees``); any other
scipy runs ``minimize`` itself.
"""

from __future__ import annotations

import functools
from typing import Callable

import numpy as np

# the scipy versions (major, minor) whose _minimize_lbfgsb loop and setulb signature ``minimise`` copies
OWN_DRIVER_SCIPY = ((1, 17),)
MAXCOR, MAXLS, MAXFUN = 10, 20, 15000  # scipy's defaults


def minimise(
    fun_and_grad: Callable,
    x0: np.ndarray,
    args: tuple,
    bounds: list[tuple[float, float]],
    maxiter: int,
    ftol: float,
    gtol: float,
) -> tuple[np.ndarray, float, bool, str]:
    """Minimise ``fun_and_grad(x, *args) -> (float, gradient)`` from ``x0`` within finite ``bounds``:
    (x, f, success, message) as scipy.optimize.minimize's L-BFGS-B returns them."""
    if own_driver():
        return _driven(fun_and_grad, x0, args, bounds, maxiter, ftol, gtol)
    return _scipy(fun_and_grad, x0, args, bounds, maxiter, ftol, gtol)


def _scipy(fun_and_grad, x0, args, bounds, maxiter, ftol, gtol) -> tuple[np.ndarray, float, bool, str]:
    from scipy.optimize import minimize

    res = minimize(
        fun_and_grad,
        x0,
        args=args,
        jac=True,
        method="L-BFGS-B",
        bounds=bounds,
        options={"maxiter": maxiter, "ftol": ftol, "gtol": gtol},
    )
    return res.x, float(res.fun), bool(res.success), str(res.message)


def _driven(fun_and_grad, x0, args, bounds, maxiter, ftol, gtol) -> tuple[np.ndarray, float, bool, str]:
    """scipy 1.17's _minimize_lbfgsb loop over its setulb, for finite bounds, no callback."""
    from scipy.optimize import _lbfgsb
    from scipy.optimize._lbfgsb_py import status_messages, task_messages

    low, high = (np.array(side, np.float64) for side in zip(*bounds))
    x = np.clip(np.asarray(x0, np.float64).ravel(), low, high)
    n, m = len(x), MAXCOR
    evaluated = x.copy()  # ScalarFunction evaluates the start first, and again only at a new point
    f_at, g_at = fun_and_grad(evaluated.copy(), *args)
    nfev = 1
    f, g = np.array(0.0), np.zeros(n)
    work = np.zeros(2 * m * n + 5 * n + 11 * m * m + 8 * m)
    iwork = np.zeros(3 * n, np.int32)
    task, ln_task, lsave = np.zeros(2, np.int32), np.zeros(2, np.int32), np.zeros(4, np.int32)
    isave, dsave = np.zeros(44, np.int32), np.zeros(29)
    bounded = np.full(n, 2, np.int32)  # both bounds finite
    factr, iterations = ftol / np.finfo(float).eps, 0
    while True:
        g = g.astype(np.float64)
        state = (work, iwork, task, lsave, isave, dsave, MAXLS, ln_task)
        _lbfgsb.setulb(m, x, low, high, bounded, f, g, factr, gtol, *state)
        if task[0] == 3:  # f and g wanted at x
            if not np.array_equal(x, evaluated):
                evaluated = x.copy()
                f_at, g_at = fun_and_grad(evaluated.copy(), *args)
                nfev += 1
            f, g = f_at, g_at
        elif task[0] == 1:  # a new iterate
            iterations += 1
            if iterations >= maxiter:
                task[:] = 5, 504
            elif nfev > MAXFUN:
                task[:] = 5, 502
        else:
            break
    return x, float(f), bool(task[0] == 4), status_messages[task[0]] + ": " + task_messages[task[1]]


@functools.cache
def own_driver() -> bool:
    """Whether this scipy is one whose driver ``_driven`` copies, and it gives minimize's results."""
    import scipy

    version = tuple(int(p) for p in scipy.__version__.split(".")[:2] if p.isdigit())
    return version in OWN_DRIVER_SCIPY and agrees()


def agrees() -> bool:
    """``_driven`` and scipy's minimize give the same result, bit for bit, on a small curve fit."""
    x = np.linspace(0.0, 2.0, 9)
    y = 0.3 + 1.7 * np.exp(-1.3 * x)

    def loss(theta, weights):
        pred = theta[0] + theta[1] * np.exp(-theta[2] * x)
        r = pred - y
        d = np.exp(-theta[2] * x)
        return float(weights @ (r * r)), 2 * np.array(
            [weights @ r, weights @ (r * d), -(weights @ (r * theta[1] * x * d))]
        )

    bounds = [(-5.0, 5.0), (0.0, 5.0), (0.0, 10.0)]
    try:
        ours = _driven(loss, np.array([1.0, 1.0, 0.5]), (np.ones(9),), bounds, 1000, 1e-12, 1e-10)
    except Exception:  # noqa: BLE001 - a scipy whose routine takes other arguments: use minimize
        return False
    theirs = _scipy(loss, np.array([1.0, 1.0, 0.5]), (np.ones(9),), bounds, 1000, 1e-12, 1e-10)
    return np.array_equal(ours[0], theirs[0]) and ours[1:] == theirs[1:]
