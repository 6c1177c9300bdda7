"""Seed 003's constructions as experiment kinds (scaling.kinds): transformers whose weights are built
from formulas (papers.statisticians), scored like every predictor of the project, with no training.

Both kinds read their settings from the cell's ``construction`` group (``ConstructionConfig``) and score
on the cell's evaluation prompts (task, seed, N, eval.prompts, eval.shift: the very prompts a training
cell with the same settings is scored on), normalised by E[y^2] with the bootstrap interval and the
per-noise-level rows of papers.context_scaling.evaluate, beside the baselines of ``eval.baselines``.

- ``gd_transformer`` (Sec. 3): the L + 1 layer in-context GD transformer (L = ``steps``, step ``eta``,
  ridge penalty ``lam``; 0 = least squares). Curves: ``constructed`` (the transformer), ``explicit_gd``
  (gradient descent written as gradient descent, same L, eta, lam) and ``gd_limit`` (the closed form
  GD converges to, (G + lam I)^+ b), then the baselines. Summary: ``max_abs_diff``, the largest |transformer -
  explicit GD| over every prompt and context length (exact construction: ~1e-12).
- ``selection_transformer`` (Sec. 4): K = len(``lambdas``) ridge GD-transformers on the first part of
  each prompt, the validation-loss layer on its last ``val_fraction``, the three selection layers with
  ``gamma``. Curves: ``selection``; what sees the same data (each prompt's first part fits, its last
  ``val_fraction`` validates): ``selection_algorithm(lam=<v>)`` (its K algorithms, read from its own
  slots) and ``ridge_selection`` (post-ICL validation with exact ridge at its lambdas, no refit);
  ``gd_ridge(lam=<v>)`` (each of its K algorithms alone, on all the examples: twice the training data),
  ``model`` (with ``train_model: true``: the cell's model trained as a training cell would train it, e.g.
  a GPT-2 with ``attention: relu``), then the baselines (e.g. ``ridge_per_level``, ``ridge``: the Bayes
  mixture posterior, ``ridge_validation``: post-ICL validation with exact ridge on a lambda grid, refitted
  on all the examples). Summary: ``selection_vs_best_single``, the selection's mean error over n over
  that of its best single algorithm on all the examples, and eq. 4.4 checked on every prompt and scored
  prefix (``eq44_checked``, ``eq44_violations``, ``eq44_max_excess``: the selected prediction's
  validation loss less the best algorithm's plus gamma, <= 0 when it holds; ``eq44_mixed``: the fraction
  of prefixes that combine two or more algorithms), also columns of the curves.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from papers.context_scaling.architectures import model_facts
from papers.context_scaling.configs import LINEAR
from papers.statisticians.settings import BOUND
from scaling.budget.cost import CellCost, training_cost
from scaling.config import check, check_choice
from scaling.kinds import Kind
from scaling.tracking.names import curve_metric_key, metric_name

CONSTRUCTED = (
    "constructed",
    "explicit_gd",
    "gd_limit",
    "selection",
    "gd_ridge",
    "selection_algorithm",
    "ridge_selection",
)


@dataclass(frozen=True)
class ConstructionConfig:
    """Settings of the seed-003 constructions (the cell's ``construction`` group)."""

    steps: int = 20  # L: gradient-descent layers (the GD transformer has L + 1, the selection L + 4)
    eta: float = 0.05  # the step: w <- w - (eta / N) [sum_train (<w, x_j> - y_j) x_j + lam w]
    lam: float = 0.0  # gd_transformer: the ridge penalty ((G + lam I)^-1 b; lam = d sigma^2 is Bayes)
    lambdas: tuple[float, ...] = (0.05, 1.25)  # selection_transformer: the K ridge penalties
    gamma: float = 0.05  # selection: keep the algorithms within gamma of the best validation loss
    val_fraction: float = 0.5  # selection: the last fraction of a prompt's examples validate
    bound: float = BOUND  # largest |score| the masks allow (the construction is exact below it)
    train_model: bool = False  # selection: train the cell's model (a training cell's recipe) and score it

    def __post_init__(self):
        check(self.steps >= 1, "steps", f"must be >= 1 (gradient-descent layers), got {self.steps}")
        check(self.eta > 0, "eta", f"must be > 0, got {self.eta}")
        check(self.lam >= 0, "lam", f"must be >= 0, got {self.lam}")
        check(
            bool(self.lambdas) and all(v >= 0 for v in self.lambdas),
            "lambdas",
            f"needs one or more values >= 0, got {list(self.lambdas)}",
        )
        check(
            len(set(self.lambdas)) == len(self.lambdas), "lambdas", f"repeats a value: {list(self.lambdas)}"
        )
        check(self.gamma > 0, "gamma", f"must be > 0, got {self.gamma}")
        check(0 < self.val_fraction < 1, "val_fraction", f"must lie in (0, 1), got {self.val_fraction}")
        check(self.bound > 0, "bound", f"must be > 0, got {self.bound}")


def check_linear(cell) -> None:
    """The constructions run gradient descent on linear regression: linear tasks only."""
    check_choice(cell.task.family, "task.family", LINEAR)


def check_gd(cell) -> None:
    check_linear(cell)
    check(
        not cell.construction.train_model,
        "construction.train_model",
        "the gd_transformer kind scores no trained model; use the selection_transformer kind",
    )


def gd_label(cell) -> str:
    c = cell.construction
    return f"gd L={c.steps} eta={c.eta:g} lam={c.lam:g} seed={cell.seed}"


def selection_label(cell) -> str:
    c = cell.construction
    lams = ",".join(f"{v:g}" for v in c.lambdas)
    trained = f" +{cell.model.label}" if c.train_model else ""
    return f"selection L={c.steps} lambdas={lams} gamma={c.gamma:g} seed={cell.seed}{trained}"


def run_gd(cell, trial) -> dict[str, Any]:
    """The GD transformer beside explicit GD and its closed-form limit (papers.statisticians.runs)."""
    from papers.statisticians.runs import gd_run  # defers torch to the trial

    return gd_run(cell, trial, metric_key)


def run_selection(cell, trial) -> dict[str, Any]:
    """The selection transformer beside what it is compared with (papers.statisticians.runs)."""
    from papers.statisticians.runs import selection_run  # defers torch to the trial

    return selection_run(cell, trial, metric_key)


def metric_key(predictor: str) -> str:
    """The constructions' curves -> construction/<name> (split rows add /<meta>=<value>); the trained
    model and the baselines as a training cell's (scaling.tracking.names.curve_metric_key)."""
    base, _, split = predictor.partition("|")
    if base.split("(")[0] in CONSTRUCTED:
        return metric_name(f"construction/{base}/{split}" if split else f"construction/{base}")
    return curve_metric_key(predictor)


def gd_cost(cell) -> CellCost:
    return CellCost(what="no training (a constructed transformer)")


def selection_cost(cell) -> CellCost:
    """Training cost of the model trained beside it (train_model), else no training."""
    if cell.construction.train_model:
        return training_cost(cell)
    return gd_cost(cell)


def check_selection(cell) -> None:
    check_linear(cell)
    if cell.construction.train_model:  # the trained model's prompt must fit its positions
        model_facts(cell.model.arch).check_positions(cell.model, cell.N)


# the settings each construction reads (scaling.kinds.Kind.reads): its cells log only these as params
GD_READS = ("task", "eval") + tuple(f"construction.{name}" for name in ("steps", "eta", "lam", "bound"))
SELECTION_READS = (
    "task",
    "eval",
    "model",
    "train",
    *(f"construction.{name}" for name in ("steps", "eta", "lambdas", "gamma", "val_fraction", "bound")),
    "construction.train_model",
)


def selection_unused(cell) -> tuple[str, ...]:
    """The model and its training only when the cell trains one (train_model)."""
    return () if cell.construction.train_model else ("model", "train")


GD_TRANSFORMER = Kind(
    name="gd_transformer",
    run=run_gd,
    label=gd_label,
    analysis="papers.statisticians.analysis.plugin:CONSTRUCTIONS",
    settings=ConstructionConfig,
    group="construction",
    check=check_gd,
    cost=gd_cost,
    metric_key=metric_key,
    reads=GD_READS,
)
SELECTION_TRANSFORMER = Kind(
    name="selection_transformer",
    run=run_selection,
    label=selection_label,
    analysis="papers.statisticians.analysis.plugin:CONSTRUCTIONS",
    settings=ConstructionConfig,
    group="construction",
    check=check_selection,
    cost=selection_cost,
    metric_key=metric_key,
    reads=SELECTION_READS,
    unused=selection_unused,
)
