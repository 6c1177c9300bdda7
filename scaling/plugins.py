"""The one loader of plug-ins named by "module:attribute" strings
(docs/design.md, "Experiment kinds are plug-ins"): the kinds of ``KINDS`` (scaling/kinds/registry.py) and
each kind's analysis (``Kind.analysis``, loaded by analysis/pipeline.py). Such a string is an import the
module that loads it makes on first use: tests/test_layout.py counts it as one, from that module to the
named one.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any


@functools.cache
def load(reference: str) -> Any:
    """The object ``reference`` ("module:attribute") names, its module imported on the first ask."""
    module, colon, attribute = reference.partition(":")
    if not (module and colon and attribute):
        raise ValueError(f"a plug-in is named 'module:attribute', got {reference!r}")
    return getattr(importlib.import_module(module), attribute)
