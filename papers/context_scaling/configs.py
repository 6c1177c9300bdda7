"""The settings of a seed 001 cell's task, training and evaluation, without torch: ``TaskConfig`` (the
built-in families' settings), ``ShiftConfig``, ``TrainConfig`` and its ``Curriculum``, ``EvalConfig`` (and
``parse_baseline``, ``DEFAULT_LAMBDAS``).

The planner, the cost model and analysis build and check these without importing torch (~1.5 s of start);
what they configure is torch's side: the families in papers.context_scaling.tasks, training in train.py,
evaluation in evaluate.py and the baselines in baselines.py, each of which imports its configs from here. The
names of families and baselines are plug-ins' (papers.context_scaling.plugins): registered ones, or a
researcher's ``module:Name``.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import yaml

from papers.context_scaling.plugins import BASELINES, FAMILIES, TaskSettings, family
from scaling.config import ConfigError, check, check_choice
from scaling.plugins import is_reference, is_registered, names, resolve

LINEAR = ("linear", "linear_mixed_noise")  # the linear-regression families (the ridge baselines')
DEFAULT_LAMBDAS = tuple(float(v) for v in np.logspace(-4, 3, 29))  # 4 per decade


@dataclass(frozen=True)
class TaskConfig(TaskSettings):
    """The settings of seed 001's task families (papers.context_scaling.builtins): one dataclass for all,
    each family reading the fields it needs."""

    family: str = "linear"
    noise_stds: tuple[float, ...] = ()  # linear_mixed_noise: the levels, each with equal probability
    sparsity: int = 3  # sparse_linear: coordinates of beta kept
    hidden: int = 100  # relu_net: width r of the teacher
    depth: int = 4  # decision_tree: depth of the trees

    def __post_init__(self):
        super().__post_init__()
        check(
            is_registered(FAMILIES, self.family) and family(self.family).Settings is TaskConfig,
            "family",
            f"unknown value {self.family!r}; known: {', '.join(names(FAMILIES))}; or your own as module:Name",
        )
        check(math.isfinite(self.noise_std), "noise_std", f"must be finite, got {self.noise_std}")
        check(
            all(s >= 0 for s in self.noise_stds),
            "noise_stds",
            f"must all be >= 0, got {list(self.noise_stds)}",
        )
        check(
            self.family != "linear_mixed_noise" or len(self.noise_stds) >= 1,
            "noise_stds",
            "linear_mixed_noise needs at least one level, e.g. [0.1, 0.5]",
        )
        check(self.sparsity >= 1, "sparsity", f"must be >= 1, got {self.sparsity}")
        check(
            self.family != "sparse_linear" or self.sparsity <= self.d,
            "sparsity",
            f"must be <= d = {self.d}, got {self.sparsity}",
        )
        check(self.hidden >= 1, "hidden", f"must be >= 1, got {self.hidden}")
        check(self.depth >= 1, "depth", f"must be >= 1, got {self.depth}")


@dataclass(frozen=True)
class ShiftConfig:
    """A distribution shift applied at evaluation only (seed 004 Sec. 4; Garg et al. Sec. 4).

    Test inputs are x = x_mean * 1 + x_scale * z with z ~ N(0, I_d), so Sigma_x = x_scale^2 I.
    Every Gaussian task parameter theta (beta, the ReLU teacher's weights, the tree's leaves) becomes
    task_mean + task_scale * theta; discrete parts (sparse supports, split coordinates) are unchanged.
    ``noise_std`` replaces the label noise level of every prompt (None keeps the task's). The defaults
    are no shift. Because the shift is an affine map of the same random draws, a shifted evaluation set
    uses the same random numbers as the unshifted one.
    """

    x_mean: float = 0.0
    x_scale: float = 1.0
    task_mean: float = 0.0
    task_scale: float = 1.0
    noise_std: float | None = None

    def __post_init__(self):
        check(self.x_scale > 0, "x_scale", f"must be > 0, got {self.x_scale}")
        check(self.task_scale >= 0, "task_scale", f"must be >= 0, got {self.task_scale}")
        check(
            self.noise_std is None or self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}"
        )

    @property
    def moves_inputs(self) -> bool:
        return self.x_mean != 0.0 or self.x_scale != 1.0

    @property
    def moves_tasks(self) -> bool:
        return self.task_mean != 0.0 or self.task_scale != 1.0


@dataclass(frozen=True)
class Curriculum:
    """Garg et al.'s curriculum: the input dimension and the prompt length grow in steps during training.

    At step s the batch has min(d, dims_start + dims_inc * (s // dims_every)) live input coordinates (the
    others are zeroed before labelling, as Garg et al. do) and min(N+1, points_start + points_inc *
    (s // points_every)) points (pairs plus query). A start of 0 turns that curriculum off (the default).
    Garg et al.: dims 5 -> 20, +1 every 2000 steps; points 11 -> 41, +2 every 2000 (linear tasks) and
    26 -> 101, +5 every 2000 (ReLU-network and tree tasks). Evaluation always uses the full d and N.
    """

    # the starts are the switches (0 = off), always settings; the steps of a half that is off go unread
    # (left out of the cell's MLflow params, scaling.config.unread: their absence is said by the switch)
    dims_start: int = 0
    dims_inc: int = field(default=1, metadata={"applies": lambda c: c.dims_start > 0})
    dims_every: int = field(default=2000, metadata={"applies": lambda c: c.dims_start > 0})
    points_start: int = 0
    points_inc: int = field(default=2, metadata={"applies": lambda c: c.points_start > 0})
    points_every: int = field(default=2000, metadata={"applies": lambda c: c.points_start > 0})

    def __post_init__(self):
        for name in ("dims_start", "points_start"):
            check(getattr(self, name) >= 0, name, f"must be >= 0 (0 = off), got {getattr(self, name)}")
        check(self.points_start != 1, "points_start", "a prompt needs at least 2 points (a pair and a query)")
        for name in ("dims_inc", "dims_every", "points_inc", "points_every"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")

    def dims(self, step: int, d: int) -> int:
        """Live input coordinates at ``step`` for a task of dimension d."""
        if not self.dims_start:
            return d
        return min(d, self.dims_start + self.dims_inc * (step // self.dims_every))

    def points(self, step: int, points: int) -> int:
        """Points per prompt (pairs plus the query) at ``step`` for a cell of ``points`` = N+1."""
        if not self.points_start:
            return points
        return min(points, self.points_start + self.points_inc * (step // self.points_every))


@dataclass(frozen=True)
class TrainConfig:
    steps: int = 1000
    batch_size: int = 64
    lr: float = 1e-4
    # steps between checkpoints (and metric flushes); not part of the cell key
    checkpoint_every: int = field(default=200, metadata={"key": False})
    log_every: int = field(default=10, metadata={"key": False})  # steps between train/loss points
    # auto | float32 | bfloat16 (autocast). auto resolves at planning from the cell's resources
    # (papers.context_scaling.cell_groups.resolve_precision): bfloat16 for a trial given a GPU, float32 on the
    # CPU; a resolved float32 is keyed as the default, so CPU cells keep the keys they had before auto
    # existed, and a cell never planned (no resources) trains in float32
    precision: str = field(default="auto", metadata={"keyed_as_default": ("float32",)})
    device: str = field(default="auto", metadata={"key": False})  # auto | cpu | cuda | cuda:K
    # a training step captured once as a CUDA graph and replayed (papers.context_scaling.cuda_graphs),
    # its learning rate read on the device: auto | on | off; auto = on where the trial trains on CUDA. The
    # replayed steps are the eager ones bit for bit: how, not what, so not part of the key
    cuda_graphs: str = field(default="auto", metadata={"key": False})
    # the training step's forward and loss compiled by torch.compile (inductor's fused kernels) at the steady
    # shape, inside the captured step: a cell's model, a transformer pack's stacked forward, an MLP pack's
    # written-out step: auto | on | off; auto = on for the project's own transformers (GPT-2, SGPT; alone or
    # packed) where the trial trains on CUDA and a C compiler is found (1.45x for packed Fig. 1 cells on an
    # H200; about 20 s of compile per pack size), off for MLPs and on the CPU. Like packing it moves numbers
    # by rounding only (tests/test_pack_compile.py): how, not what, so not keyed
    compile: str = field(default="auto", metadata={"key": False})
    curriculum: Curriculum = field(default_factory=Curriculum)  # off unless a start is set
    # the learning rate over the steps: constant (Garg et al.'s, the default), or cosine: a linear warm-up
    # from lr / w to lr over the first w = warmup * steps steps, then a cosine decay to 0 at the last step.
    # Measured on the vectorised MLP (d = 4, T = inf, N = 10): cosine at lr 3e-3 reaches err/zero 0.61 in
    # 6000 steps, constant lr 1e-3 0.71 in 10000 (sweeps/fig1.yaml's repro profile says more).
    schedule: str = "constant"
    warmup: float = field(default=0.05, metadata={"applies": lambda t: t.schedule != "constant"})
    # the context lengths the loss is taken at (seed 001 App. A: "we always trained a single MLP for all
    # context lengths by zero-padding to the largest context length", Fig. 1's "trained and tested on the same
    # set of context lengths: 5, 10, 20, 30, and 40"): one model trained on prompts of each of these lengths,
    # an MLP's vectorised input zero-padded to the largest, which is the cell's N (scaling.cells.Cell), and
    # tested at them unless eval.n says otherwise (App. A's GPT-2, "trained on context lengths from 1 to 100
    # with a step size of 10", tested between them: sweeps/fig4_lengths.yaml). Empty (the default): every
    # prefix 1..N, the loss of eq. 2
    lengths: tuple[int, ...] = ()

    def __post_init__(self):
        for name in ("steps", "batch_size", "checkpoint_every", "log_every"):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(self.lr > 0, "lr", f"must be > 0, got {self.lr}")
        check(math.isfinite(self.lr), "lr", f"must be finite, got {self.lr}")
        check_choice(self.precision, "precision", ("auto", "float32", "bfloat16"))
        check_choice(self.cuda_graphs, "cuda_graphs", ("auto", "on", "off"))
        check_choice(self.compile, "compile", ("auto", "on", "off"))
        check_choice(self.schedule, "schedule", ("constant", "cosine"))
        check(0 <= self.warmup < 1, "warmup", f"must be a fraction of the steps in [0, 1), got {self.warmup}")
        check(
            all(n >= 1 for n in self.lengths) and list(self.lengths) == sorted(set(self.lengths)),
            "lengths",
            f"context lengths >= 1, increasing, each once (empty: every prefix), got {list(self.lengths)}",
        )
        check(
            not (self.lengths and self.curriculum.points_start),
            "lengths",
            "a model trained at given context lengths takes no points curriculum (points_start: 0)",
        )
        check(
            self.device in ("auto", "cpu", "cuda") or self.device.startswith("cuda:"),
            "device",
            f"must be auto, cpu, cuda or cuda:K, got {self.device!r}",
        )

    def lr_factor(self, step: int) -> float:
        """The learning rate of the update made at ``step`` (0-based), as a fraction of ``lr``."""
        if self.schedule == "constant":
            return 1.0
        warm = int(self.warmup * self.steps)
        if step < warm:
            return (step + 1) / warm
        return 0.5 * (1 + math.cos(math.pi * (step - warm) / max(1, self.steps - warm)))


NAME = re.compile(r"^\s*([A-Za-z_][\w.]*(?::[A-Za-z_]\w*)?)\s*(?:\((.*)\))?\s*$")


def parse_baseline(name: str) -> tuple[str, dict[str, Any]]:
    """'lasso(alpha=0.1, max_iter=500)' -> ('lasso', {'alpha': 0.1, 'max_iter': 500}); values are YAML, 'none'
    is None. The name is a registered baseline's or a researcher's ``module:Name`` (checked when loaded)."""
    match = NAME.match(name)
    if not match:
        raise ValueError(f"cannot read baseline {name!r}; write name or name(key=value, ...)")
    base, body = match.group(1), match.group(2)
    options: dict[str, Any] = {}
    for item in filter(str.strip, (body or "").split(",")):
        key, _, value = item.partition("=")
        if not _:
            raise ValueError(f"baseline {name!r}: option {item.strip()!r} needs key=value")
        value = value.strip()
        options[key.strip()] = None if value.lower() == "none" else yaml.safe_load(value)
    if is_reference(base):
        resolve(BASELINES, base)  # a researcher's baseline: imported and checked now, at planning
    elif not is_registered(BASELINES, base):
        known = ", ".join(names(BASELINES))
        raise KeyError(f"unknown baseline {base!r}; known: {known}; or your own as module:Name")
    return base, options


@dataclass(frozen=True)
class EvalConfig:
    prompts: int = 1280  # fresh test prompts (Garg et al.: 1280)
    n: tuple[int, ...] = ()  # context lengths to score; empty = every n in 1..N
    baselines: tuple[str, ...] = ("zero", "least_squares", "ridge")
    bootstrap: int = 1000  # resamples of prompts for the interval
    ci: float = 0.9  # interval coverage
    batch_size: int = field(default=256, metadata={"key": False})  # prompts per forward pass
    shift: ShiftConfig = field(default_factory=ShiftConfig)  # test-time distribution shift; none by default
    # per-prompt meta names to split errors by (rows named f"{predictor}|{name}={value:g}"); empty means
    # the family's default (linear_mixed_noise: noise_std; others: none)
    split_by: tuple[str, ...] = ()
    # context lengths at which to scan ridge regression's error against lambda on the evaluation prompts
    # (seed 001 Figs. 2-3, right panels: rows ``ridge_lambda`` with a ``lam`` column); empty: no scan
    lambda_n: tuple[int, ...] = ()
    # the scan's grid (1e-4 .. 1e3, 4 per decade); a setting only where there is a scan
    lambdas: tuple[float, ...] = field(
        default=DEFAULT_LAMBDAS, metadata={"applies": lambda e: bool(e.lambda_n)}
    )

    def __post_init__(self):
        check(self.prompts >= 2, "prompts", f"must be >= 2, got {self.prompts}")
        check(all(n >= 1 for n in self.n), "n", f"context lengths must be >= 1, got {list(self.n)}")
        check(
            all(n >= 1 for n in self.lambda_n),
            "lambda_n",
            f"context lengths must be >= 1, got {list(self.lambda_n)}",
        )
        check(
            len(self.lambdas) >= 1 and all(lam > 0 for lam in self.lambdas),
            "lambdas",
            f"must be one or more values > 0, got {list(self.lambdas)}",
        )
        check(0 < self.ci < 1, "ci", f"must be in (0, 1), got {self.ci}")
        check(self.bootstrap >= 1, "bootstrap", f"must be >= 1, got {self.bootstrap}")
        check(self.batch_size >= 1, "batch_size", f"must be >= 1, got {self.batch_size}")
        for i, name in enumerate(self.baselines):
            try:
                parse_baseline(name)
            except (KeyError, ValueError) as err:
                raise ConfigError(f"baselines[{i}]", str(err).strip("'\"")) from None
