"""How the seed-003 construction kinds (papers.statisticians.kind) run a cell: the constructed
transformers and what they are compared with, scored on the cell's evaluation prompts, logged with the kind's
``metric_key``. Imported by the kinds' ``run`` when a trial runs, so that planning and analysis load the
kinds without torch.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pandas as pd
import torch

from papers.context_scaling.baselines import applicable_baselines, ridge_validation
from papers.context_scaling.evaluate import context_grid, evaluate
from papers.context_scaling.tasks import fresh_prompts, make_family
from papers.context_scaling.train import CellTrainer
from papers.statisticians.constructions import gd_transformer, selection_transformer
from papers.statisticians.predictors import SelectionReader, transformer_predictor
from papers.statisticians.reference import prefix_gd_weights, prefix_ridge_weights


class Recorded:
    """A predictor that keeps what it returned (evaluate calls it on the prompts in order)."""

    def __init__(self, predict):
        self.predict, self.outputs = predict, []

    def __call__(self, prompts) -> torch.Tensor:
        out = self.predict(prompts)
        self.outputs.append(out.detach().cpu())
        return out

    def all(self) -> torch.Tensor:
        return torch.cat(self.outputs)


def weights_predictor(weights_of):
    """``predict(prompts)``: <w_n, x_n> with ``weights_of(xs, ys) -> (B, P, d)``."""

    def predict(prompts) -> torch.Tensor:
        return (weights_of(prompts.xs, prompts.ys) * prompts.xs.double()).sum(-1)

    return predict


def cell_prompts(cell, device):
    family = make_family(cell.task, cell.eval.shift)
    return family, fresh_prompts(family, cell.eval.prompts, cell.N + 1, cell.seed, device=device)


def scored(cell, predictors: dict, family, prompts, trial) -> pd.DataFrame:
    """The curves of ``predictors`` and the cell's baselines on its evaluation prompts."""
    baselines, skipped = applicable_baselines(cell.eval.baselines, cell.task)
    curves = evaluate(
        {**predictors, **baselines},
        prompts,
        family.y_second_moment(),
        cell.eval,
        cell.N,
        cell.seed,
        family=family,
    )
    curves.attrs["skipped_baselines"] = skipped
    trial.progress({"step": 0, "progress": 0.95})
    return curves


def gd_run(cell, trial, metric_key) -> dict[str, Any]:
    """The GD transformer beside explicit GD and its closed-form limit; logs curves and max_abs_diff."""
    c = cell.construction
    family, prompts = cell_prompts(cell, trial.device)
    grid = context_grid(cell.eval, cell.N)
    model = gd_transformer(cell.task.d, c.steps, c.eta, c.lam, c.bound).to(trial.device)
    constructed = Recorded(transformer_predictor(model, "f", bound=c.bound, positions=grid))
    explicit = weights_predictor(lambda xs, ys: prefix_gd_weights(xs, ys, c.steps, c.eta, c.lam))
    limit = weights_predictor(lambda xs, ys: prefix_ridge_weights(xs, ys, c.lam))
    curves = scored(
        cell,
        {"constructed": constructed, "explicit_gd": explicit, "gd_limit": limit},
        family,
        prompts,
        trial,
    )
    diff = float((constructed.all() - explicit(prompts).cpu())[:, grid].abs().max())
    summary = {"max_abs_diff": diff}
    trial.log.finish(cell, curves.assign(L=c.steps, max_abs_diff=diff), None, summary, metric_key=metric_key)
    return {"step": 0, "progress": 1.0, "finished": 1, **summary}


def trained_model(cell, trial):
    """The cell's model trained as a training cell trains it (same data, steps and seed), its weights."""
    trainer = CellTrainer(cell, trial.device)
    every = max(1, cell.train.steps // 10)
    while not trainer.done_training:
        trainer.train_until(trainer.step + every)
        trial.progress({"step": trainer.step, "progress": 0.5 * trainer.step / cell.train.steps})
    return trainer.model_predictor(), trainer.model.state_dict()


def same_data_predictors(cell, selection) -> dict:
    """The predictors that see what the selection transformer sees, each prompt's first part to fit and
    its last ``val_fraction`` to validate (``selection``: its SelectionReader): the transformer's own K
    algorithms (``selection_algorithm(lam=<v>)``, its f_k slots) and post-ICL validation with exact ridge
    at its lambdas on the same split, no refit (``ridge_selection``: the construction without GD's
    early stopping)."""
    c = cell.construction
    out = {
        f"selection_algorithm(lam={lam:g})": selection.predictor(f"f{k}") for k, lam in enumerate(c.lambdas)
    }
    options = {"lambdas": c.lambdas, "val_fraction": c.val_fraction, "refit": False}
    return out | {"ridge_selection": ridge_validation(cell.task, options)}


def selection_run(cell, trial, metric_key) -> dict[str, Any]:
    """The selection transformer beside its K algorithms on the same training part, exact-ridge post-ICL
    validation on the same split, each algorithm alone on all the examples, the baselines and
    (train_model) the cell's trained model, on the same prompts; checks eq. 4.4 on every prompt and
    scored prefix; logs curves (and the model's weights)."""
    c, d = cell.construction, cell.task.d
    grid = context_grid(cell.eval, cell.N)
    family, prompts = cell_prompts(cell, trial.device)
    predictors, weights = {}, None
    if c.train_model:
        predictors["model"], weights = trained_model(cell, trial)
    model = selection_transformer(d, c.steps, c.eta, c.lambdas, c.gamma, c.bound).to(trial.device)
    reads = ["fhat"] + [f"f{k}" for k in range(len(c.lambdas))]
    selection = SelectionReader(model, reads, c.gamma, c.val_fraction, c.bound, grid)
    predictors["selection"] = selection.predictor("fhat")
    predictors |= same_data_predictors(cell, selection)
    for lam in c.lambdas:
        single = gd_transformer(d, c.steps, c.eta, lam, c.bound).to(trial.device)
        predictors[f"gd_ridge(lam={lam:g})"] = transformer_predictor(
            single, "f", bound=c.bound, positions=grid
        )
    curves = scored(cell, predictors, family, prompts, trial)
    whole = curves[~curves["predictor"].str.contains("|", regex=False)]
    means = whole.groupby("predictor")["err"].mean()
    singles = means[[f"gd_ridge(lam={lam:g})" for lam in c.lambdas]]
    eq44 = {f"eq44_{name}": value for name, value in selection.checks().items()}
    summary = {"selection_vs_best_single": float(means["selection"] / singles.min()), **eq44}
    with tempfile.TemporaryDirectory() as tmp:
        path = None
        if weights is not None:
            path = Path(tmp) / "model.pt"
            torch.save(weights, path)
        trial.log.finish(cell, curves.assign(L=c.steps, **eq44), path, summary, metric_key=metric_key)
    return {"step": 0, "progress": 1.0, "finished": 1, **summary}
