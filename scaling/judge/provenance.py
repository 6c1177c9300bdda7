"""Which cells may be pooled into one curve: cells of one analysis differ only along the sweep's grid axes
(the analysis reads cells by these rules; the adaptive driver splits its answers by ``setting_columns``).

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

A cell logs only the settings that apply to it (scaling.cells.Cell.params): an MLP cell has no
``model.n_layer``, a linear task no ``task.hidden``. A setting absent from some cells (NaN in the table) does
not apply to them, and is never a difference: only the values of the cells that have it are compared
(``values``), and ``select`` keeps the cells a ``--set`` setting does not apply to.
"""

from __future__ import annotations

import pandas as pd
import yaml

from ..cells import settings_not_in_key, under

DEFAULT_AXES = ("model", "T", "N", "seed", "task")
# settings that say how a cell ran, not what it computes: never a reason to split or refuse (the precision
# is not one of them: fp32 and bf16 cells are never pooled)
BOOKKEEPING = (
    "train.device",
    "train.checkpoint_every",
    "train.log_every",
    "train.cuda_graphs",
    "train.compile",
    "eval.bootstrap",
    "eval.batch_size",
)
OWN_COLUMNS = ("T", "N", "seed")  # the table's own columns; their params never split anything


class PoolingError(ValueError):
    """Cells that differ in settings beyond the grid axes would be pooled; the message names them."""


def values(column: pd.Series) -> pd.Series:
    """A setting's logged values (strings) in the cells it applies to: a cell without it (NaN) is left out,
    the setting does not apply to it (its model, task or kind reads no such setting)."""
    return column.dropna().astype(str)


def cell_settings(table: pd.DataFrame) -> pd.DataFrame:
    """One row per cell: its model and every ``param.*`` setting (as logged: strings)."""
    cols = ["cell_key", "model"] + sorted(c for c in table.columns if c.startswith("param."))
    return table[[c for c in cols if c in table]].drop_duplicates("cell_key")


def varying(cells: pd.DataFrame) -> list[str]:
    """The settings (without 'param.') whose values differ between the cells they apply to."""
    return [
        c[len("param.") :] for c in cells.columns if c.startswith("param.") and values(cells[c]).nunique() > 1
    ]


def by_model(cells: pd.DataFrame, setting: str) -> bool:
    """Whether a setting is constant within each model (it comes with the model preset; a model it does not
    apply to has none)."""
    return bool((cells.groupby("model")[f"param.{setting}"].agg(lambda v: values(v).nunique()) <= 1).all())


def differing_settings(table: pd.DataFrame, axes) -> dict[str, list[str]]:
    """Setting -> its values, for the settings outside ``axes`` (and not bookkeeping, nor fixed by the
    model preset) that differ between the table's cells."""
    cells = cell_settings(table)
    out = {}
    for setting in varying(cells):
        if (
            setting in OWN_COLUMNS
            or under(setting, axes)  # an axis or under one ('task' covers 'task.d')
            or setting in BOOKKEEPING
            or by_model(cells, setting)
        ):
            continue
        out[setting] = sorted(values(cells[f"param.{setting}"]).unique())
    return out


def whole_variants(table: pd.DataFrame, differ: dict[str, list[str]], axes) -> list[str]:
    """The ``KEY=VALUE`` picks (``select``) that keep a cell of every model of the table and leave nothing
    to refuse: a pick that drops a model (its preset sets KEY otherwise: the MLP's own train.steps) is no
    variant of the whole sweep."""
    models = set(table["model"])
    picks = [f"{key}={value}" for key, values in differ.items() for value in values]
    return [
        pick
        for pick in picks
        if set((chosen := select(table, [pick]))["model"]) == models and not differing_settings(chosen, axes)
    ]


def check_poolable(table: pd.DataFrame, axes, experiment: str, sweep_file: str = "SWEEP.yaml") -> None:
    """Raise PoolingError when cells differ in settings beyond ``axes``, naming them and saying how to pick
    one variant: by the sweep file (``sweep_file``: the file the experiment ran) and the ``--set`` it ran
    with, or by a ``--set`` of a setting that picks a whole variant (every model kept)."""
    differ = differing_settings(table, axes)
    if not differ:
        return
    listed = "; ".join(f"{k} = {' / '.join(v)}" for k, v in differ.items())
    picks = whole_variants(table, differ, axes)
    pick = f", or pick one by a setting: --set {' / --set '.join(picks)}" if picks else ""
    raise PoolingError(
        f"experiment {experiment!r} holds cells that differ in settings beyond the sweep's grid "
        f"axes ({listed}): they are variants of the sweep (made with --set) and are not pooled. "
        f"Analyse one variant by its sweep file and the --set it ran with: python -m analysis "
        f"{sweep_file} [--set KEY=VALUE ...]{pick}"
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
    """The rows of the cells whose settings equal every ``KEY=VALUE`` of ``overrides`` (a cell the setting
    does not apply to is kept: ``--set model.n_layer=4`` picks the GPT-2 cells with 4 layers and every MLP
    cell); an unknown key raises PoolingError listing the known settings."""
    for assignment in overrides:
        key, sep, value = assignment.partition("=")
        col = f"param.{key.strip()}"
        if not sep or col not in table:
            known = ", ".join(sorted(c[len("param.") :] for c in table if c.startswith("param.")))
            raise PoolingError(f"--set {assignment}: no cell setting {key.strip()!r}; known: {known}")
        want = parse_value(value.strip())
        table = table[table[col].isna() | (table[col].map(parse_value) == want)]
    return table


def drop_repeats(table: pd.DataFrame) -> tuple[pd.DataFrame, list[str]]:
    """The table with one cell of each set of cells that log the same settings, and a note when any was
    dropped. Such cells are one computation under several keys: the key holds every setting, the params only
    those that apply (an MLP cell of a sweep run with and without ``--set model.n_layer=4`` has two keys and
    one result). The first by cell key stays; settings that are no part of the key are not compared."""
    if "cell_key" not in table or not any(c.startswith("param.") for c in table.columns):
        return table, []
    cells = cell_settings(table).sort_values("cell_key")
    exempt = settings_not_in_key()  # cells differing only in them are one computation
    same = [c for c in cells.columns if c != "cell_key" and c.removeprefix("param.") not in exempt]
    keep = set(cells.astype(str).drop_duplicates(same)["cell_key"])
    if len(keep) == len(cells):
        return table, []
    note = (
        f"{len(cells) - len(keep)} complete cells repeat the settings of others (their keys differ only in"
        " settings that do not apply to them, e.g. model.n_layer of an MLP); each is counted once"
    )
    return table[table["cell_key"].isin(keep)], [note]


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
        theirs = set(values(both.loc[~both["cell_key"].isin(mine), col]))
        ours = set(values(both.loc[both["cell_key"].isin(mine), col]))
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
        and (s.startswith("task.") or under(s, beyond))
        and not by_model(cells, s)
    }
