"""The Cell: the unit of work, and its stable key (docs/design.md, "The Cell is the unit of work").

A cell is everything that defines one result: the task and its parameters, the model and its size, the
training budget, the evaluation, T (pretraining tasks; inf = a fresh task per prompt), N (the largest
context length trained on: the largest of ``train.lengths`` where they are given, whatever the grid's N, so
that one zero-padded MLP serves a grid's every N, seed 001 App. A) and the seed. Its key is a hash of its
canonical form (fields at their default are left out, so adding a setting with a default keeps old keys);
the key is the MLflow tag that makes sweeps resumable and idempotent. ``job`` names the cell's experiment
kind (scaling.kinds: ``train``, the default, trains and evaluates); a kind with settings of its own reads
them from the group it declares (e.g. ``temperature``), held in ``settings`` and written at the top level
of the cell's dict, as if it were a field. Resources and the sweep's name are not part of a cell.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from papers.context_scaling.architectures import ModelConfig, model_facts
from papers.context_scaling.configs import FAMILY_SETTINGS, EvalConfig, TaskConfig, TrainConfig

from .config import (
    ConfigError,
    canonical,
    check,
    flatten,
    format_T,
    from_dict,
    not_in_key,
    replaced,
    to_dict,
    unread,
)
from .kinds.registry import DEFAULT_KIND, KINDS, kind, kind_of_group

# the settings every cell logs as params, whatever its kind, model and task (analysis reads them)
ALWAYS = ("T", "N", "seed", "job", "model.name", "model.arch")


@dataclass(frozen=True)
class Cell:
    task: TaskConfig = field(default_factory=TaskConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    T: float = math.inf
    N: int = 40
    seed: int = 0
    job: str = DEFAULT_KIND
    # the kind's own settings, {group: settings}; written at the cell's top level (config.to_dict)
    settings: dict[str, Any] = field(default_factory=dict, metadata={"inline": True})

    def __post_init__(self):
        if self.train.lengths:  # one model trained at these lengths, zero-padded to the largest (App. A)
            object.__setattr__(self, "N", self.train.lengths[-1])
        check(
            self.T >= 1 and (math.isinf(self.T) or float(self.T).is_integer()),
            "T",
            f"must be a whole number >= 1 or inf, got {self.T}",
        )
        check(self.N >= 1, "N", f"must be >= 1, got {self.N}")
        check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        own = kind(self.job)
        if own.group is not None and own.group not in self.settings:
            object.__setattr__(self, "settings", {**self.settings, own.group: own.settings()})
        own.check(self)

    def __getattr__(self, name: str) -> Any:
        """A kind's settings group read as an attribute (``cell.temperature``)."""
        if name.startswith("__") or name == "settings":
            raise AttributeError(name)
        try:
            return self.settings[name]
        except KeyError:
            raise AttributeError(f"a {self.job} cell has no setting {name!r}") from None

    @functools.cached_property
    def key(self) -> str:
        """Stable 16-hex-digit key: sha256 of the canonical JSON form (computed once per cell: a 10,000-cell
        plan asks each cell's key several times)."""
        blob = json.dumps(canonical(self), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    @property
    def kind(self):
        """The cell's experiment kind (scaling.kinds.Kind)."""
        return kind(self.job)

    @property
    def name(self) -> str:
        """A readable run name, e.g. 'gpt2 T=65536 N=40 seed=0'."""
        return self.kind.label(self)

    def to_dict(self) -> dict[str, Any]:
        return to_dict(self)

    def flat(self) -> dict[str, str]:
        """Every setting of the cell, flattened, as strings: {'task.d': '8', 'T': 'inf', ...}. T is written
        as in run names ('16', not '16.0'), so the UI's filter ``params.T = '16'`` finds it."""
        tree = self.to_dict()
        params = {k: json.dumps(v) if isinstance(v, list) else str(v) for k, v in flatten(tree).items()}
        return {**params, "T": format_T(self.T)}

    def params(self) -> dict[str, str]:
        """The cell's MLflow params: the settings that apply to it (``applicable``), as ``flat`` writes
        them. An MLP cell has no ``model.n_layer``, a linear task no ``task.hidden``; cell.yaml and the key
        keep every setting."""
        flat = self.flat()
        return {k: flat[k] for k in self.applicable(flat)}

    def applicable(self, flat: dict[str, str] | None = None) -> list[str]:
        """The settings (``flat``'s dotted names) that apply to the cell: T, N, seed, job, model.name and
        model.arch always; what the cell's kind reads (scaling.kinds.Kind.reads, less ``Kind.unused``),
        where ``task`` stands for the family's settings (``FAMILY_SETTINGS``,
        papers.context_scaling.configs) and ``model`` for the architecture's (``ModelFacts.settings``,
        papers.context_scaling.architectures) and a name covers the settings under it (``train``
        covers ``train.lr``); less the settings that go unread under their values (scaling.config.unread:
        the curriculum while it is off, eval.lambdas without a ridge scan)."""
        flat = self.flat() if flat is None else flat
        own = self.kind
        skip = set(own.unused(self))
        names = list(ALWAYS)
        for name in own.reads:
            if name in skip:
                continue
            if name == "task":
                names += ["task.family", *(f"task.{s}" for s in FAMILY_SETTINGS[self.task.family])]
            elif name == "model":
                names += [f"model.{s}" for s in model_facts(self.model.arch).applicable(self.model)]
            else:
                names.append(name)
        off = unread(self) + [n for group, value in self.settings.items() for n in unread(value, group)]
        names, off = set(names), set(off)
        return [k for k in flat if under(k, names) and not under(k, off)]

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> "Cell":
        """Build a cell from its dict; a kind's settings group (e.g. ``temperature``) is coerced to that
        kind's settings. A group of another kind is an error unless it holds only that kind's defaults
        (cell.yaml files written before kinds were plug-ins carry an all-default ``temperature``)."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            return from_dict(cls, data, where)
        names = {f.name for f in dataclasses.fields(cls) if not f.metadata.get("inline")}
        core = {k: v for k, v in data.items() if k in names}
        job = core.get("job", DEFAULT_KIND)
        own = kind(job) if isinstance(job, str) and job in KINDS else None
        settings = {}
        for group in sorted(set(map(str, data)) - names):
            owner = kind_of_group(group)
            at = f"{where}.{group}" if where else group
            if owner is None:
                allowed = ", ".join(sorted(names - {"settings"}) + ([own.group] if own and own.group else []))
                raise ConfigError(at, f"unknown setting; allowed: {allowed}")
            value = from_dict(owner.settings, data[group], at)
            if own is None or owner.group != own.group:
                if canonical(value) != {}:
                    raise ConfigError(
                        at,
                        f"these settings belong to the kinds {', '.join(kinds_of(group))}"
                        f", not to job {job!r}",
                    )
                continue
            settings[group] = value
        return from_dict(cls, {**core, "settings": settings}, where)


def reads_setting(cell: Cell, name: str) -> bool:
    """Whether the cell's kind reads the dotted setting ``name`` (Kind.reads less Kind.unused)."""
    own = cell.kind
    return under(name, set(own.reads)) and not under(name, set(own.unused(cell)))


def resolve_precision(cell: Cell, gpu: float) -> Cell:
    """The cell with ``train.precision: auto`` resolved from the GPUs its trial asks for (``gpu``, a fraction
    or whole GPUs): bfloat16 autocast where the trial trains on a GPU (it asks for one and its
    ``train.device`` is not the CPU) and the cell's kind reads the setting, float32 otherwise. A resolved
    float32 is keyed as the default (scaling.config.canonical), so a CPU cell's key is the one it had before
    ``auto``; a GPU cell's key names bfloat16, and fp32 and bf16 results never share a run."""
    if cell.train.precision != "auto":
        return cell
    on_gpu = gpu > 0 and cell.train.device != "cpu" and reads_setting(cell, "train.precision")
    train = replaced(cell.train, precision="bfloat16" if on_gpu else "float32")
    return dataclasses.replace(cell, train=train)


def kinds_of(group: str) -> list[str]:
    """The kinds whose settings are given under ``group``."""
    return [name for name in KINDS if kind(name).group == group]


@functools.cache
def settings_not_in_key() -> tuple[str, ...]:
    """Dotted names of the settings that are no part of a cell's key (``metadata={"key": False}``: device,
    checkpoint cadence, batch sizes), in the cell's groups and every kind's group."""
    groups = {"task": TaskConfig, "model": ModelConfig, "train": TrainConfig, "eval": EvalConfig}
    groups.update({kind(k).group: kind(k).settings for k in KINDS if kind(k).group})
    return tuple(name for group, cls in groups.items() for name in not_in_key(cls, group))


def under(key: str, names) -> bool:
    """Whether the dotted setting ``key`` is one of ``names`` or lies under one ('train' covers
    'train.curriculum.dims_start'): whether ``key`` or one of its dotted prefixes is a name (a set of
    ``names`` is looked up, not scanned: a plan of 10,000 cells asks ~1 million times)."""
    names = names if isinstance(names, (set, frozenset)) else set(names)
    while key not in names:
        cut = key.rfind(".")
        if cut < 0:
            return False
        key = key[:cut]
    return True
