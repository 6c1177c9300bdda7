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
    "train": "papers.context_scaling.kind:TRAIN",
    "theory_context": "papers.temperature.kind:THEORY_CONTEXT",
    "theory_noise": "papers.temperature.kind:THEORY_NOISE",
    "theory_mean_shift": "papers.temperature.kind:THEORY_MEAN_SHIFT",
    "attention_histograms": "papers.temperature.kind:ATTENTION_HISTOGRAMS",
    "gpt2_scan": "papers.temperature.kind:GPT2_SCAN",
    "llm_scan": "papers.temperature.kind:LLM_SCAN",
    "gd_transformer": "papers.statisticians.kind:GD_TRANSFORMER",
    "selection_transformer": "papers.statisticians.kind:SELECTION_TRANSFORMER",
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
