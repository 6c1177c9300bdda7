"""The Cell: the unit of work, and its stable key (DESIGN.md, "The Cell is the unit of work").

A cell is everything that defines one result: the task and its parameters, the model and its size, the
training budget, the evaluation, T (pretraining tasks; inf = a fresh task per prompt), N (the largest
context length trained on) and the seed. Its key is a hash of its canonical form (fields at their
default are left out, so adding a setting with a default keeps old keys); the key is the MLflow tag
that makes sweeps resumable and idempotent. ``job`` says what the cell does: ``train`` (the default)
trains and evaluates; the temperature jobs of scaling.kinds.temperature (seed 004) read ``temperature``. Resources and the sweep's name are not part of a cell.
"""
from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from .config import canonical, check, flatten, from_dict, to_dict
from .science.models import ModelConfig
from .science.tasks import TaskConfig
from .kinds.temperature import TemperatureConfig, check_job, job_label
from .science.train import EvalConfig, TrainConfig


@dataclass(frozen=True)
class Cell:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    T: float = math.inf
    N: int = 40
    seed: int = 0
    job: str = "train"
    temperature: TemperatureConfig = field(default_factory=TemperatureConfig)

    def __post_init__(self):
        check(self.T >= 1 and (math.isinf(self.T) or float(self.T).is_integer()), "T",
              f"must be a whole number >= 1 or inf, got {self.T}")
        check(self.N >= 1, "N", f"must be >= 1, got {self.N}")
        check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        check_job(self)

    @property
    def key(self) -> str:
        """Stable 16-hex-digit key: sha256 of the canonical JSON form."""
        blob = json.dumps(canonical(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def name(self) -> str:
        """A readable run name, e.g. 'gpt2 T=65536 N=40 seed=0'."""
        if self.job != "train":
            return job_label(self)
        return f"{self.model.label} T={format_T(self.T)} N={self.N} seed={self.seed}"

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def params(self) -> dict[str, str]:
        """The flattened cell as MLflow params: {'task.d': '8', 'T': 'inf', ...}."""
        tree = self.to_dict()
        if self.job == "train":
            tree.pop("temperature")              # a training cell's params stay as they were
        return {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in flatten(tree).items()}

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> "Cell":
        return from_dict(cls, data, where)


def format_T(T: float) -> str:
    return "inf" if math.isinf(T) else str(int(T))
