"""Scaling-law fits of normalised ICL error against context length n and number of tasks T.

Seed 001 (Abedsoltan et al., Sec. 1 and Figs. 1, 7, 8) asks whether error falls with the context
length n at fixed T (context-scaling) and with the number of pretraining tasks T at fixed n
(task-scaling). This file fits three saturating power laws to the project's tidy table, choosing the
rows each is fitted to and the groups it is fitted per:

    context:  err(n)    = E + A n^-alpha                 per (sweep, model, T, predictor)
    task:     err(T)    = E + B T^-beta                  per (sweep, model, n, predictor)
    joint:    err(n, T) = E + A n^-alpha + B T^-beta     per (sweep, model, predictor)

T = inf (a fresh task for every prompt) enters the task and joint forms with its task term 0: it pins E.
When a lattice has too few values of N for the context form over n = N (the smoke sweep has two), the
fits fall back on each cell's own curve over n = 1..N (``fit_models``: the cells of the largest N, every
evaluated n), and say so in the ``fit_on`` column; a row that cannot be fitted says why in ``note``.

Each group's law is fitted by scaling.judge.power_law (log space, intervals from each seed's own fit).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from .power_law import FORMS, Form, fit_points, form_named

SELECTIONS = ("auto", "diagonal", "all")


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


def fit_scaling(
    table: pd.DataFrame,
    form: str,
    *,
    by: tuple[str, ...] | None = None,
    select: str = "auto",
    n_min: int = 1,
    fixed_E: float | str | None = None,
    level: float = 0.9,
    delta: float = 1e-3,
    maxiter: int = 1000,
) -> pd.DataFrame:
    """Fit `form` ("context", "task" or "joint") to every group of the tidy table.

    One row per group: the group keys, form, parameters (E, A, alpha, B, beta; NaN where the form
    lacks one) with _lo/_hi bounds of the `level` interval over seeds, and the diagnostics of
    fit_points. fixed_E is None (fit E), a number, or the name of a column holding each group's
    floor (constant within a group).
    """
    spec = form_named(form)
    keys = group_keys(table, spec, by)
    carry = [fixed_E] if isinstance(fixed_E, str) else []
    pts = scaling_points(table, spec.axes, keys + carry, select, n_min)
    rows = []
    for key, group in pts.groupby(keys, dropna=False, sort=True):
        fit = fit_points(
            group, form, fixed_E=_group_floor(group, fixed_E), level=level, delta=delta, maxiter=maxiter
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
