"""The registry of experiment kinds: ``KINDS``, the only list of kind names, and the lookup of a kind.

A cell's ``job`` is one of KINDS' keys (the field keeps its name so that every cell key stays what it
was). Each entry is ``"module:attribute"`` (scaling.plugins.load), imported the first time a cell of that
kind is built, so a sweep of training cells never imports seed-004 code. Adding a kind is one module and
one line here; nothing else branches on a kind's name. This registry sits above the kinds' modules, not
in their package's ``__init__``, which they import: the loads are arrows of the import graph
(tests/test_layout.py).
"""

from __future__ import annotations

from ..config import ConfigError
from ..plugins import load
from . import Kind

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


def kind(name: str) -> Kind:
    """The kind registered as ``name``; an unknown name is a ConfigError listing the known ones."""
    if name not in KINDS:
        raise ConfigError("job", f"unknown value {name!r}; known: {', '.join(KINDS)}")
    found = load(KINDS[name])
    if found.name != name:
        raise RuntimeError(f"KINDS[{name!r}] points at the kind {found.name!r}")
    return found


def kind_of_group(group: str) -> Kind | None:
    """The first kind whose settings are given under ``group`` (importing kinds until one is found)."""
    for name in KINDS:
        found = kind(name)
        if found.group == group:
            return found
    return None
