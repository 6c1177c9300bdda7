"""A profile's size against the paper's: the reproduction report's "size" column (analysis/paper.py).

Each row of the report names the size it ran at beside the paper's, e.g. ``d 4 (paper 8); steps 3000
(paper 500000)``: the input dimension d, the largest context length N, the pretraining tasks T, the model's
width, its training steps and its layers (``SIZES``), read from the planned cells of the sweep file at the
row's profile and at none. A sweep file's own settings (no profile) are the paper's experiment, and where the
paper is silent the setting its file's header names (for seed 001 mostly Garg et al.'s recipe: 500,000
steps); a part of the report may say what the paper states instead (``Part.paper``, a text per size). Only
the settings a cell's kind reads count (scaling.cells.Cell.params: a constructed transformer has no training
steps, a scan of a given model no width), and a row that names its models (``Claim.models``) is sized from
those models' cells alone: GPT-2's width is not the MLP's.
"""

from __future__ import annotations

import functools
import math
from pathlib import Path
from typing import Callable, Iterable

from scaling.budget.cost import load_table, sweep_estimate
from scaling.config import format_T
from scaling.planning.plan import SweepError, load_plan

# size name -> its value in a cell's params (scaling.cells.Cell.params), None where the cell's kind does not
# read it; in the order the column names them (``llm``: a seed-004 scan's local language model, by its folder)
SIZES: dict[str, Callable[[dict[str, str]], str | None]] = {
    "d": lambda p: p.get("task.d"),
    "N": lambda p: p.get("N"),
    "T": lambda p: p.get("T"),
    "width": lambda p: p.get("model.n_embd") or p.get("model.width"),
    "steps": lambda p: p.get("train.steps"),
    "layers": lambda p: p.get("model.n_layer"),
    "llm": lambda p: Path(p["temperature.llm"]).name if p.get("temperature.llm") else None,
}
TRAINED = ("d", "N", "T", "width", "steps", "layers")  # a trained model's sizes: a part's default
PER_MODEL = ("width", "steps", "layers")  # sizes a model has of its own (GPT-2's width is not the MLP's)
LISTED = 3  # at most this many values are listed; more are written as a range with their count


@functools.lru_cache(maxsize=64)
def planned_params(sweep: str, profile: str) -> tuple[dict[str, str], ...] | str:
    """The params of every cell of ``sweep`` at ``profile`` ('' = the file's own settings), or why the file
    cannot be planned."""
    try:
        plan = load_plan(sweep, profile)
    except (SweepError, OSError) as err:
        return str(err)
    return tuple(p.cell.params() for p in plan.cells)


@functools.lru_cache(maxsize=64)
def estimated_cost(sweep: str, profile: str) -> str:
    """--dry-run's estimate of the sweep's training at ``profile`` (scaling.budget.cost, one cell at a time),
    in words; '' where there is none."""
    try:
        plan = load_plan(sweep, profile)
        table = load_table()
        estimate = sweep_estimate([p.cell for p in plan.cells], table)
    except (SweepError, OSError, ValueError):
        return ""
    return estimate.line(table.get("device", "machine")).replace("\n", "; ")


def number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        return math.nan


def values_text(values: Iterable[str]) -> str:
    """'8'; '5, 10, 20'; '100-inf, 6 values': the distinct values, ascending."""
    distinct = sorted(set(values), key=lambda v: (number(v), v))
    if len(distinct) <= LISTED:
        return ", ".join(distinct)
    return f"{distinct[0]}-{distinct[-1]}, {len(distinct)} values"


def size_values(params: Iterable[dict[str, str]], size: str, models: tuple[str, ...]) -> dict[str, str]:
    """{model label or '': the values' text} of one size over the cells of ``models`` (all when empty):
    per model for PER_MODEL sizes, else one entry ''. Cells whose kind does not read the size are left out."""
    out: dict[str, list[str]] = {}
    for p in params:
        model = p.get("model.name", "")
        if models and model not in models:
            continue
        value = SIZES[size](p)
        if value is None:
            continue
        if size == "T":
            value = format_T(float(value))
        out.setdefault(model if size in PER_MODEL else "", []).append(value)
    return {model: values_text(v) for model, v in out.items()}


def one_size(size: str, ours: dict[str, str], paper: dict[str, str], stated: str | None) -> str:
    """'d 4 (paper 8)', 'd 8 (= paper)', 'width gpt2 64 (paper 256), mlp 1024 (= paper)'; what the paper
    states of a size (``stated``) is said once: 'steps gpt2 3000, mlp 12000 (paper not stated; ...)'."""
    named = [f"{model} {text}" if model else text for model, text in ours.items()]
    if stated is not None:
        return f"{size} {', '.join(named)} (paper {stated})"
    parts = []
    for (model, text), said in zip(ours.items(), named):
        theirs = paper.get(model, "not in the paper's sweep")
        parts.append(f"{said} (= paper)" if theirs == text else f"{said} (paper {theirs})")
    return f"{size} " + ", ".join(parts)


def sizes_text(ours, paper, models: tuple[str, ...], stated: dict[str, str], sizes: tuple[str, ...]) -> str:
    """The ``sizes`` of the cells of ``models`` (all when empty) beside the paper's."""
    parts = []
    for size in sizes:
        mine = size_values(ours, size, models)
        if mine:
            parts.append(one_size(size, mine, size_values(paper, size, models), stated.get(size)))
    return "; ".join(parts)


def size_text(
    sweep: str,
    profile: str,
    models: tuple[str, ...] = (),
    stated: dict[str, str] | None = None,
    sizes: tuple[str, ...] = TRAINED,
) -> str:
    """The row's ``sizes`` at ``profile`` beside the paper's (the file's own settings, or ``stated``: what
    the paper says of a size where the file holds something else or cannot be planned here), for the cells
    of ``models`` (all when empty); '' when the profile cannot be planned. Models the profile does not train
    are said to be missing, with the paper's size of them."""
    ours, paper = planned_params(sweep, profile), planned_params(sweep, "")
    if isinstance(ours, str):
        return ""
    stated = stated or {}
    if isinstance(paper, str):  # e.g. a file whose own settings need a checkpoint or weights given
        missing = {size: stated.get(size, "not planned here") for size in sizes}
        return sizes_text(ours, (), models, missing, sizes)
    if models and not any(p.get("model.name", "") in models for p in ours):
        return f"{', '.join(models)} not in this profile; the paper's: " + sizes_text(
            paper, paper, models, stated, sizes
        ).replace(" (= paper)", "")
    return sizes_text(ours, paper, models, stated, sizes)
