"""Which cells may be pooled into one curve: cells of one analysis differ only along the sweep's grid axes.

``python -m scaling.sweep SWEEP --set train.steps=60`` logs its cells into the same experiment as the plain
sweep (the cell key covers every setting, so the two never share a run). Analysis keeps the variants apart:

- with a sweep file it reads exactly the cells the file plans; ``python -m analysis SWEEP --set KEY=VALUE``
  plans the cells of the sweep run with that ``--set``. The experiment's other complete cells are left out,
  with a note naming the settings they differ in (``other_variants``);
- with ``--experiment NAME`` the settings that may differ between cells are the grid axes of the sweep
  file the experiment was last run with (its parent run's ``sweep.yaml``; model, T, N, seed and task when it
  has none) and the settings of the model presets (constant within each model). Cells that differ in any
  other setting are never pooled: analysis stops and names the settings and their values
  (``check_poolable``); ``--set KEY=VALUE`` picks the cells of one variant (``select``).

Grid axes other than model, T, N and seed (``task.d: [2, 4]``, ``train.steps: [...]``) become columns of the
analysis view (``setting_columns``), so fits, verdicts and figures split by them instead of pooling.
"""

from __future__ import annotations

import pandas as pd
import yaml

DEFAULT_AXES = ("model", "T", "N", "seed", "task")
# settings that say how a cell ran, not what it computes: never a reason to split or refuse
BOOKKEEPING = (
    "train.device",
    "train.checkpoint_every",
    "train.log_every",
    "eval.bootstrap",
    "eval.batch_size",
    "train.precision",
)
OWN_COLUMNS = ("T", "N", "seed")  # the table's own columns; their params never split anything


class PoolingError(ValueError):
    """Cells that differ in settings beyond the grid axes would be pooled; the message names them."""


def covered(setting: str, axes) -> bool:
    """Whether ``setting`` (e.g. 'task.d') is an axis or lies under one ('task' covers 'task.d')."""
    return any(setting == a or setting.startswith(a + ".") for a in axes)


def cell_settings(table: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its model and every ``param.*`` setting (as logged: strings)."""
    cols = ["cell_key", "model"] + sorted(c for c in table.columns if c.startswith("param."))
    return table[[c for c in cols if c in table]].drop_duplicates("cell_key")


def varying(cells: pd.DataFrame) -> list[str]:
    """The settings (without 'param.') whose values differ between cells."""
    return [
        c[len("param.") :]
        for c in cells.columns
        if c.startswith("param.") and cells[c].astype(str).nunique() > 1
    ]


def by_model(cells: pd.DataFrame, setting: str) -> bool:
    """Whether a setting is constant within each model (it comes with the model preset)."""
    return bool(
        (cells.groupby("model")[f"param.{setting}"].agg(lambda v: v.astype(str).nunique()) <= 1).all()
    )


def differing_settings(table: pd.DataFrame, axes) -> dict[str, list[str]]:
    """Setting -> its values, for the settings outside ``axes`` (and not bookkeeping, nor fixed by the
    model preset) that differ between the table's cells."""
    cells = cell_settings(table)
    out = {}
    for setting in varying(cells):
        if (
            setting in OWN_COLUMNS
            or covered(setting, axes)
            or setting in BOOKKEEPING
            or by_model(cells, setting)
        ):
            continue
        out[setting] = sorted(cells[f"param.{setting}"].astype(str).unique())
    return out


def check_poolable(table: pd.DataFrame, axes, experiment: str) -> None:
    """Raise PoolingError when cells differ in settings beyond ``axes``, naming them and saying how to pick
    one variant."""
    differ = differing_settings(table, axes)
    if not differ:
        return
    listed = "; ".join(f"{k} = {' / '.join(v)}" for k, v in differ.items())
    key, values = next(iter(differ.items()))
    raise PoolingError(
        f"experiment {experiment!r} holds cells that differ in settings beyond the sweep's grid "
        f"axes ({listed}): they are variants of the sweep (e.g. made with --set) and are not "
        f"pooled. Analyse one variant: add --set {key}={values[0]}, or give the sweep file with "
        f"the --set it ran with"
    )


def parse_value(text) -> object:
    """A logged param or a --set value as YAML reads it ('60' and '60.0' -> 60.0, 'inf' -> inf)."""
    try:
        value = yaml.safe_load(str(text))
    except yaml.YAMLError:
        return str(text)
    if isinstance(value, str) and value.lower() in ("inf", "infinity"):
        return float("inf")
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


def select(table: pd.DataFrame, overrides) -> pd.DataFrame:
    """The rows of the cells whose settings equal every ``KEY=VALUE`` of ``overrides``; an unknown key
    raises PoolingError listing the known settings."""
    for assignment in overrides:
        key, sep, value = assignment.partition("=")
        col = f"param.{key.strip()}"
        if not sep or col not in table:
            known = ", ".join(sorted(c[len("param.") :] for c in table if c.startswith("param.")))
            raise PoolingError(f"--set {assignment}: no cell setting {key.strip()!r}; known: {known}")
        want = parse_value(value.strip())
        table = table[table[col].map(parse_value) == want]
    return table


def other_variants(others: pd.DataFrame, planned: pd.DataFrame) -> str:
    """A sentence on the experiment's complete cells that the sweep file (with its --set) does not plan:
    how many, and the settings in which they differ from the planned cells."""
    if others.empty:
        return ""
    cells = others.drop_duplicates("cell_key")
    both = cell_settings(pd.concat([planned, others], ignore_index=True))
    mine = set(planned["cell_key"])
    differ = []
    for setting in varying(both):
        col = f"param.{setting}"
        theirs = set(both.loc[~both["cell_key"].isin(mine), col].astype(str))
        ours = set(both.loc[both["cell_key"].isin(mine), col].astype(str))
        if theirs - ours and setting not in BOOKKEEPING:
            differ.append(f"{setting} = {' / '.join(sorted(theirs - ours))}")
    what = f" (they have {'; '.join(differ)})" if differ else ""
    return (
        f"{len(cells)} complete cells of the experiment are not cells of this sweep file as given{what}; "
        f"left out (analyse them with the --set they were made with)"
    )


def setting_columns(table: pd.DataFrame, axes) -> dict[str, str]:
    """View column -> its ``param.*`` column, for the settings that vary between cells and are grid axes or
    task settings (the analysis splits by them): 'task.d' -> 'param.task.d'."""
    cells = cell_settings(table)
    beyond = [a for a in axes if a not in ("model", *OWN_COLUMNS)]
    return {
        s: f"param.{s}"
        for s in varying(cells)
        if s not in OWN_COLUMNS
        and s not in BOOKKEEPING
        and (s.startswith("task.") or covered(s, beyond))
        and not by_model(cells, s)
    }
