"""Baselines fitted per prompt and prefix with a library or a small trained network (Garg et al. 2022, Sec. 4
and App. A; seed 001 Fig. 4): Lasso, XGBoost, decision trees and a 2-layer ReLU student.

Column n of a prompt's prediction is a model fitted on pairs 0..n-1 and evaluated at x_n; column 0 is 0
(no data), as in Garg et al.'s code. The scikit-learn and XGBoost fits are plain functions of one prompt,
run over a process pool by ``baseline_cache.map_prompts``; the NN student trains one network per (prompt,
prefix), all of them at once as batched matrices, with Garg et al.'s recipe (hidden 100, Adam lr 5e-3,
batch 100, 100 steps).
"""

from __future__ import annotations

import math

import numpy as np
import torch

from papers.context_scaling.tasks import Prompts, generator

# Garg et al.'s XGBoost baseline (github.com/dtsip/in-context-learning, src/models.py, XGBoostModel) is
# ``xgb.XGBRegressor()``: the defaults of xgboost 1.6.1, which their environment.yml pins. They are written
# out here because xgboost >= 2 has other defaults (tree_method "hist", base_score fitted to the labels);
# under 1.6.1, tree_method "auto" chose "exact" for fewer than 2^22 rows on one machine. With these, xgboost
# 3 predicts what 1.6.1's ``XGBRegressor()`` does (the same floats on prefixes of 1 to 40 points, d = 20).
GARG_XGBOOST = dict(
    booster="gbtree",
    objective="reg:squarederror",
    tree_method="exact",
    base_score=0.5,
    n_estimators=100,
    learning_rate=0.3,
    max_depth=6,
    min_child_weight=1.0,
    gamma=0.0,
    max_delta_step=0.0,
    subsample=1.0,
    colsample_bytree=1.0,
    colsample_bylevel=1.0,
    colsample_bynode=1.0,
    reg_lambda=1.0,
    reg_alpha=0.0,
    grow_policy="depthwise",
    max_leaves=0,
    num_parallel_tree=1,
    random_state=0,
)


def sklearn_model(kind: str, options: dict):
    """A fresh estimator: 'lasso' (alpha, max_iter), 'xgboost' (Garg et al.'s settings, GARG_XGBOOST, on one
    thread), 'tree' (max_depth)."""
    if kind == "lasso":
        from sklearn.linear_model import Lasso

        return Lasso(
            alpha=options.get("alpha", 0.01), fit_intercept=False, max_iter=options.get("max_iter", 100000)
        )
    if kind == "xgboost":
        from xgboost import XGBRegressor

        return XGBRegressor(n_jobs=1, **GARG_XGBOOST)
    if kind == "tree":
        from sklearn.tree import DecisionTreeRegressor

        return DecisionTreeRegressor(
            max_depth=options.get("max_depth", 4), random_state=options.get("seed", 0)
        )
    raise ValueError(f"unknown estimator kind {kind!r}; known: lasso, xgboost, tree")


def prefix_fits(
    xs: np.ndarray, ys: np.ndarray, kind: str, options: dict, positions: list[int] | None = None
) -> np.ndarray:
    """One prompt: xs (P, d), ys (P,) -> (P,) predictions, column n fitted on pairs < n. With ``positions``
    only those columns are fitted and the others are NaN: each column is a fit of its own, and an
    evaluation reads a few of them (6 of 21 in fig4's quick profile)."""
    import warnings

    from sklearn.exceptions import ConvergenceWarning

    if positions is None:
        pred, columns = np.zeros(len(ys)), range(1, len(ys))
    else:
        pred, columns = np.full(len(ys), np.nan), sorted({n for n in positions if 0 < n < len(ys)})
        pred[0] = 0.0  # no pairs, no fit: known without asking
    for n in columns:
        model = sklearn_model(kind, options)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ConvergenceWarning)
            model.fit(xs[:n], ys[:n])
        pred[n] = float(model.predict(xs[n : n + 1])[0])
    return pred


def nn_student_predictions(
    prompts: Prompts,
    hidden: int = 100,
    lr: float = 5e-3,
    batch: int = 100,
    steps: int = 100,
    seed: int = 0,
    nets: int = 2560,
) -> torch.Tensor:
    """Garg et al.'s NN student: one 2-layer ReLU net per (prompt, prefix n >= 1), trained on pairs < n.

    Each of ``steps`` Adam steps uses a random subset of min(batch, n) of the prefix's pairs (all of them
    when n <= batch). Initialisation is PyTorch's nn.Linear default (uniform +-1/sqrt(fan_in)) from a
    generator seeded by ``seed``. The nets are independent (the summed loss separates and Adam is
    elementwise), about ``nets`` networks at a time. Returns (B, N+1); column 0 is 0.
    """
    chunk = max(1, nets // max(prompts.xs.shape[1] - 1, 1))
    out = torch.zeros(prompts.ys.shape, dtype=torch.float64)
    for start in range(0, len(prompts), chunk):
        part = prompts.slice(start, start + chunk)
        gen = generator(seed, "nn-student", start, part.xs.device)
        out[start : start + len(part)] = train_students(
            part.xs.detach().float(), part.ys.detach().float(), hidden, lr, batch, steps, gen
        ).cpu()
    return out.to(device=prompts.ys.device, dtype=prompts.ys.dtype)


def train_students(
    xs: torch.Tensor, ys: torch.Tensor, hidden: int, lr: float, batch: int, steps: int, gen: torch.Generator
) -> torch.Tensor:
    B, P, d = xs.shape
    device = xs.device
    M = B * (P - 1)  # one net per (prompt, n >= 1)
    n = torch.arange(1, P, device=device).repeat(B)  # (M,) prefix length per net
    data_x = xs.repeat_interleave(P - 1, dim=0)  # (M, P, d)
    data_y = ys.repeat_interleave(P - 1, dim=0)  # (M, P)
    bound0, bound1 = 1 / math.sqrt(d), 1 / math.sqrt(hidden)
    params = [
        (torch.rand(M, d, hidden, generator=gen, device=device) * 2 - 1) * bound0,
        (torch.rand(M, 1, hidden, generator=gen, device=device) * 2 - 1) * bound0,
        (torch.rand(M, hidden, 1, generator=gen, device=device) * 2 - 1) * bound1,
        (torch.rand(M, 1, 1, generator=gen, device=device) * 2 - 1) * bound1,
    ]
    for p in params:
        p.requires_grad_(True)
    optimizer = torch.optim.Adam(params, lr=lr)
    positions = torch.arange(P, device=device).expand(M, P)
    in_prefix = positions < n.unsqueeze(1)  # (M, P)
    for _ in range(steps):
        chosen = in_prefix if P - 1 <= batch else random_subset(in_prefix, batch, gen)
        pred = forward(params, data_x)  # (M, P)
        per_net = ((pred - data_y) ** 2 * chosen).sum(1) / chosen.sum(1)
        optimizer.zero_grad(set_to_none=True)
        per_net.sum().backward()
        optimizer.step()
    with torch.no_grad():
        query = forward(params, data_x).gather(1, n.unsqueeze(1)).squeeze(1)  # (M,) prediction at x_n
    return torch.cat([torch.zeros(B, 1, device=device), query.reshape(B, P - 1)], dim=1).double()


def random_subset(in_prefix: torch.Tensor, batch: int, gen: torch.Generator) -> torch.Tensor:
    """A uniform random subset of min(batch, n) of each row's prefix positions: (M, P) bool."""
    scores = torch.rand(in_prefix.shape, generator=gen, device=in_prefix.device).masked_fill(~in_prefix, 2.0)
    ranks = scores.argsort(dim=1).argsort(dim=1)
    return (ranks < batch) & in_prefix


def forward(params: list[torch.Tensor], xs: torch.Tensor) -> torch.Tensor:
    w0, b0, w1, b1 = params
    return (torch.relu(torch.bmm(xs, w0) + b0) @ w1 + b1).squeeze(-1)  # (M, P)
