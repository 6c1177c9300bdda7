"""The names of a cell's metrics in the store: a curve's predictor -> its metric, and names made safe for
MLflow."""

from __future__ import annotations

import re


def curve_metric_key(predictor: str) -> str:
    """The MLflow metric of a training cell's curve: ``model`` -> eval/err, any other predictor (a
    baseline) -> baseline/<name>; rows split by a prompt meta (``<predictor>|<meta>=<value>``) add
    ``/<meta>=<value>``; characters MLflow names do not allow (``=``, ``|``, ...) are written ``_``.
    Kinds with curves of their own name them with their ``metric_key`` (scaling.kinds)."""
    base, _, split = predictor.partition("|")
    key = "eval/err" if base == "model" else f"baseline/{base}"
    return metric_name(f"{key}/{split}" if split else key)


def metric_name(name: str) -> str:
    """``name`` with the characters MLflow metric names do not allow (``=``, ``|``, brackets) written
    ``_``."""
    return re.sub(r"[^/\w.\- :]", "_", name)
