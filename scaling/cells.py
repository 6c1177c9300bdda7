"""The Cell: the unit of work, and its stable key (docs/design.md, "The Cell is the unit of work").

A cell is everything that defines one result: T (pretraining tasks; inf = a fresh task per prompt), N (the
largest context length, as its kind reads it: scaling.kinds.Kind.context), the seed, its experiment kind
(``job``: a plug-in, scaling.kinds.registry; ``train``, the default, trains and evaluates), the versions of
the plug-ins it runs that declare one (``versions``) and the groups of settings its kind declares (the
training kind's task, model, train and eval; a scan's ``temperature``), held in ``settings`` and written at
the top level of the cell's dict, as if each were a field. Its key is a hash of its canonical form
(settings at their default are left out, so adding a setting with a default keeps old keys); the key is the
MLflow tag that makes sweeps resumable and idempotent. Resources and the sweep's name are not part of a
cell. Nothing here knows a paper's settings: a cell is read through its kind.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import math
from dataclasses import dataclass, field
from typing import Any

from scaling.config import (
    ConfigError,
    canonical,
    check,
    flatten,
    format_T,
    from_dict,
    not_in_key,
    shared,
    unread,
)
from scaling.config import to_dict as plain_dict
from scaling.kinds.registry import DEFAULT_KIND, POINT, kind, kind_names, kind_of_group
from scaling.plugins import Plugin, is_builtin, resolve

# the settings every cell logs as params, whatever its kind, model and task (analysis reads them)
ALWAYS = ("T", "N", "seed", "job", "model.name", "model.arch")
CORE = ("T", "N", "seed", "job", "versions")


@dataclass(frozen=True)
class Cell:
    T: float = math.inf
    N: int = 40
    seed: int = 0
    job: str = DEFAULT_KIND
    # the version of each plug-in the cell runs that declares one (plugin_versions): in its key, so that
    # results of a plug-in's versions never share a run
    versions: dict[str, str] = field(default_factory=dict)
    # the kind's groups of settings, {group: settings}; written at the cell's top level (config.to_dict)
    settings: dict[str, Any] = field(default_factory=dict, metadata={"inline": True})

    def __post_init__(self):
        own = kind(self.job)
        groups = own.all_groups()
        unknown = sorted(set(self.settings) - set(groups))
        if unknown:
            raise ConfigError(
                unknown[0], f"a {self.job} cell has no such settings; it has {', '.join(groups)}"
            )
        built = {name: self.settings.get(name) for name in groups}
        built = {name: group_of(spec, built[name], name) for name, spec in groups.items()}
        object.__setattr__(self, "settings", built)
        object.__setattr__(self, "N", own.context(self))
        check(
            self.T >= 1 and (math.isinf(self.T) or float(self.T).is_integer()),
            "T",
            f"must be a whole number >= 1 or inf, got {self.T}",
        )
        check(self.N >= 1, "N", f"must be >= 1, got {self.N}")
        check(self.seed >= 0, "seed", f"must be >= 0, got {self.seed}")
        own.check(self)
        versions = plugin_versions(self)
        if self.versions and self.versions != versions:
            raise ConfigError(
                "versions",
                f"the cell was planned with plug-in versions {self.versions}; the code declares {versions}",
            )
        object.__setattr__(self, "versions", versions)

    def __getattr__(self, name: str) -> Any:
        """A group of the cell's settings read as an attribute (``cell.task``, ``cell.temperature``)."""
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

    def replaced(self, **groups: Any) -> "Cell":
        """The cell with some groups of settings replaced (``cell.replaced(train=...)``)."""
        return dataclasses.replace(self, settings={**self.settings, **groups})

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
        model.arch always; what the cell's kind reads (scaling.kinds.Kind.reads, less ``Kind.unused``), where
        a group whose settings say which of them apply (``applicable_settings()``: a task family's, a
        model's) stands for those and a name covers the settings under it (``train`` covers ``train.lr``);
        less the settings that go unread under their values (scaling.config.unread: the curriculum while it
        is off, eval.lambdas without a ridge scan)."""
        flat = self.flat() if flat is None else flat
        own = self.kind
        skip = set(own.unused(self))
        names = list(ALWAYS)
        for name in own.reads:
            if name in skip:
                continue
            group = self.settings.get(name)
            if hasattr(group, "applicable_settings"):
                names += [f"{name}.{s}" for s in group.applicable_settings()]
            else:
                names.append(name)
        off = [n for group, value in self.settings.items() for n in unread(value, group)]
        names, off = set(names), set(off)
        return [k for k in flat if under(k, names) and not under(k, off)]

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "") -> "Cell":
        """Build a cell from its dict, each group of settings by its kind's declaration. A group of another
        kind is an error unless it holds only that kind's defaults (cell.yaml files written before kinds
        were plug-ins carry an all-default ``temperature``)."""
        if isinstance(data, cls):
            return data
        if not isinstance(data, dict):
            return from_dict(cls, data, where)
        core = {k: v for k, v in data.items() if k in CORE}
        job = core.get("job", DEFAULT_KIND)
        at = lambda name: f"{where}.{name}" if where else name
        if not isinstance(job, str):
            raise ConfigError(at("job"), f"expected the name of an experiment kind, got {job!r}")
        own = kind(job, at("job"))
        groups = own.all_groups()
        settings = {}
        for group in map(str, data):
            if group in CORE:
                continue
            if group in groups:
                settings[group] = group_of(groups[group], data[group], at(group))
                continue
            owner = kind_of_group(group)
            if owner is None:
                allowed = ", ".join([*(c for c in CORE if c != "versions"), *groups])
                raise ConfigError(at(group), f"unknown setting; allowed: {allowed}")
            if canonical(group_of(owner.all_groups()[group], data[group], at(group))) != {}:
                raise ConfigError(
                    at(group),
                    f"these settings belong to the kinds {', '.join(kinds_of(group))}, not to job {job!r}",
                )
        return from_dict(cls, {**core, "settings": settings}, where)


def group_of(spec: Any, given: Any, where: str) -> Any:
    """A group of settings built from what a cell was given (a dict, None for the defaults, or the
    settings already built), by its kind's declaration: a dataclass, or a scaling.kinds.Polymorphic."""
    if hasattr(spec, "build"):
        return spec.build(given, where)
    if isinstance(given, spec):
        return given
    return shared(spec, given or {}, where)


def to_dict(cell: Cell) -> dict[str, Any]:
    """The cell's plain, YAML-safe form (scaling.config.to_dict), its empty ``versions`` left out."""
    out = plain_dict(cell)
    if not out.get("versions"):
        out.pop("versions", None)
    return out


def researchers_plugins(cell: Cell) -> list[Plugin]:
    """The plug-ins the cell names (its kind, and its kind's ``plugins``) that are not this project's
    built-ins: a researcher's ``module:Name``, or another distribution's registered name. The built-ins are
    versioned by the project itself: a change to what one computes changes its keys, through a setting or
    through the version its point declares for it (plugin_versions)."""
    named = [(POINT, cell.job), *cell.kind.plugins(cell)]
    return [resolve(point, name) for point, name in named if not is_builtin(point, name)]


def plugin_versions(cell: Cell) -> dict[str, str]:
    """The versions in the cell's key: name -> version of each of the researcher's plug-ins the cell names
    that declares one, and '<point>.<name>' -> version of each of this project's built-ins that declares one
    through its point (``Point.builtin_version``: nothing imported)."""
    out = {p.name: p.version for p in researchers_plugins(cell) if p.version}
    for point, name in [(POINT, cell.job), *cell.kind.plugins(cell)]:
        version = point.builtin_version(name) if is_builtin(point, name) else ""
        if version:
            out[f"{point.name}.{name}"] = version
    return out


def plugin_sources(cell: Cell) -> list[dict[str, str]]:
    """What a cell's run records of the researcher's plug-ins it ran with: point, name, version and a hash of
    the source (scaling.plugins.Plugin.provenance)."""
    return [p.provenance() for p in researchers_plugins(cell)]


def reads_setting(cell: Cell, name: str) -> bool:
    """Whether the cell's kind reads the dotted setting ``name`` (Kind.reads less Kind.unused)."""
    own = cell.kind
    return under(name, set(own.reads)) and not under(name, set(own.unused(cell)))


def kinds_of(group: str) -> list[str]:
    """The registered kinds whose settings are given under ``group``."""
    return [name for name in kind_names() if group in kind(name).all_groups()]


@functools.cache
def settings_not_in_key() -> tuple[str, ...]:
    """Dotted names of the settings that are no part of a cell's key (``metadata={"key": False}``: device,
    checkpoint cadence, batch sizes), in every registered kind's groups (a polymorphic group's default
    dataclass)."""
    found: dict[str, None] = {}
    for name in kind_names():
        for group, spec in kind(name).all_groups().items():
            cls = type(group_of(spec, None, group))
            found.update(dict.fromkeys(not_in_key(cls, group)))
    return tuple(found)


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
