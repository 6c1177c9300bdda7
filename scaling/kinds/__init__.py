"""The registry of experiment kinds: what a cell does (docs/design.md, "Experiment kinds are plug-ins").

Training a cell is one kind; each seed-004 scan is another. A kind is a ``Kind`` object in a module of
this package that says how its settings are validated (``settings``, the dataclass of the cell's
``group`` of settings, and ``check``), how its cell runs inside a trial (``run``), what it logs (the
curves and summary it hands to the trial's log, and ``metric_key``), what it costs (``cost``, for
``--dry-run``) and how analysis reads and draws it (``analysis``, "module:OBJECT" of its analysis
plug-in, an ``analysis.plugin.Analysis``; analysis imports it, this package never imports analysis).

``KINDS`` is the only list of kind names: a cell's ``job`` is one of its keys (the field keeps its name so
that every cell key stays what it was). Each entry is ``"module:attribute"``, imported the first time a
cell of that kind is built, so a sweep of training cells never imports seed-004 code. Adding a kind is
one module and one line here; nothing else branches on a kind's name.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, Callable

from ..config import ConfigError
from ..cost import CellCost

KINDS: dict[str, str] = {
    "train": "scaling.kinds.context_scaling:TRAIN",
    "theory_context": "scaling.kinds.temperature:THEORY_CONTEXT",
    "theory_noise": "scaling.kinds.temperature:THEORY_NOISE",
    "theory_mean_shift": "scaling.kinds.temperature:THEORY_MEAN_SHIFT",
    "attention_histograms": "scaling.kinds.temperature:ATTENTION_HISTOGRAMS",
    "gpt2_scan": "scaling.kinds.temperature:GPT2_SCAN",
    "llm_scan": "scaling.kinds.temperature:LLM_SCAN",
    "gd_transformer": "scaling.kinds.statisticians:GD_TRANSFORMER",
    "selection_transformer": "scaling.kinds.statisticians:SELECTION_TRANSFORMER",
}
DEFAULT_KIND = "train"


@dataclass(frozen=True)
class Kind:
    """One experiment kind. ``run(cell, trial) -> dict`` runs a cell inside a trial; ``trial`` gives the
    device, the cell's checkpoint store and MLflow log, the progress report and the tracking URI
    (scaling.trial.TrialContext). ``settings`` / ``group``: the dataclass of the kind's own settings and the
    cell key under which a sweep file gives them (None: the kind has none). ``check(cell)`` raises
    ConfigErrors naming the setting; ``label(cell)`` is the run name; ``cost(cell)`` a CellCost or None
    (not estimated); ``packable(cell)`` whether cells of this kind may share a trial (scaling.packing);
    ``path_fields``: settings of the group that are local paths, made absolute at planning.

    ``reads``: the cell's settings the kind reads, which its cells log as MLflow params
    (scaling.cells.Cell.params; cell.yaml keeps every setting): ``task`` (the family's settings,
    scaling.papers.context_scaling.tasks), ``model`` (the architecture's,
    scaling.papers.context_scaling.models.ModelFacts), ``train``, ``eval``, a whole group (``construction``)
    or one setting (``task.d``, ``temperature.taus``); ``unused(cell)`` names the entries of ``reads`` that
    this cell leaves unread (e.g. ``train`` for a scan of a given model). T, N, seed, job, model.name and
    model.arch are every cell's."""

    name: str
    run: Callable[..., dict[str, Any]]
    label: Callable[[Any], str]
    analysis: str  # "module:OBJECT" of its analysis plug-in (analysis/plugin.py: the Analysis template)
    settings: type | None = None
    group: str | None = None
    check: Callable[[Any], None] = lambda cell: None
    cost: Callable[[Any], CellCost | None] = lambda cell: None
    packable: Callable[[Any], bool] = lambda cell: False
    metric_key: Callable[[str], str] | None = None  # None: scaling.tracking.names.curve_metric_key
    path_fields: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("task", "model", "train", "eval")
    unused: Callable[[Any], tuple[str, ...]] = lambda cell: ()


_loaded: dict[str, Kind] = {}


def kind(name: str) -> Kind:
    """The kind registered as ``name``; an unknown name is a ConfigError listing the known ones."""
    if name not in KINDS:
        raise ConfigError("job", f"unknown value {name!r}; known: {', '.join(KINDS)}")
    if name not in _loaded:
        module, attribute = KINDS[name].split(":")
        found = getattr(importlib.import_module(module), attribute)
        if found.name != name:
            raise RuntimeError(f"KINDS[{name!r}] points at the kind {found.name!r}")
        _loaded[name] = found
    return _loaded[name]


def kind_of_group(group: str) -> Kind | None:
    """The first kind whose settings are given under ``group`` (importing kinds until one is found)."""
    for name in KINDS:
        found = kind(name)
        if found.group == group:
            return found
    return None
