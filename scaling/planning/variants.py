"""A sweep's variants: the ``--set`` overrides that change its cells, and what each cell's run name carries
of them (scaling.planning.plan.PlannedCell.name), so two variants' cells, logged into one experiment, are told
apart by name as they are by key (docs/sweeps.md).

A variant is a sweep run with ``--set`` overrides that change cells (``train.steps=200``,
``grid.T=[16,64]``, ``models.gpt2.n_layer=3``); a new ``name``, ``resources`` or ``run`` settings change
none. A cell's run name adds each override that sets one of its settings and its label does not show
already ('gpt2 T=16 N=8 seed=0 train.steps=200'; an MLP cell gets nothing of models.gpt2.n_layer).
"""

from __future__ import annotations

import dataclasses


def keys_of(dotted: str) -> list[str]:
    """The key path of a dotted setting name ('train.steps' -> ['train', 'steps'])."""
    return [part for part in dotted.split(".") if part]


# top-level keys a --set may change that say how the sweep runs or what it is called, not what a cell is
NOT_CELLS = ("name", "description", "resources", "run", "adaptive", "profiles")
LABELLED_AXES = ("model", "T", "N", "seed")  # grid axes every training cell's label shows
# the cell field a model preset may hold settings of its own for (scaling.planning.plan)
PRESET_TRAIN = "train"


def variant_of(assignments) -> tuple[str, ...]:
    """The ``--set`` overrides that change cells, as given (not a new name, resources or how the sweep
    runs): a sweep run with them is a variant of the sweep, with cells of its own."""
    out = []
    for assignment in assignments:
        keys = keys_of(assignment.split("=", 1)[0].strip())
        if not keys or keys[0] in NOT_CELLS or (keys[0] == "models" and keys[2:3] == ["resources"]):
            continue
        out.append(assignment.strip())
    return tuple(out)


def own_setting(keys: list[str], cell) -> str | None:
    """The cell setting an override's key path sets in ``cell`` ('train.steps'), None when it sets none
    there (another model's preset; a grid axis is handled by the caller)."""
    if keys[0] == "defaults":
        keys = keys[1:]
    if keys and keys[0] == "models":
        if len(keys) < 3 or keys[1] != cell.model.name:
            return None
        keys = keys[2:] if keys[2] == PRESET_TRAIN else ["model", *keys[2:]]
    return ".".join(keys) or None


def variant_label(planned, variant: tuple[str, ...]) -> str:
    """What of the variant a planned cell carries, for its run name: each override that sets one of the cell's
    settings (``KEY=VALUE`` as given) that its label does not show already, and the value of a ``--set
    grid.AXIS`` the label does not show."""
    applies, shown = set(planned.cell.params()), set(planned.cell.name.split())
    parts = []
    for assignment in variant:
        dotted, _, value = (part.strip() for part in assignment.partition("="))
        keys = keys_of(dotted)
        if keys[0] == "grid":
            axis = ".".join(keys[1:])
            if axis not in LABELLED_AXES and axis in planned.axes:
                parts.append(f"{axis}={planned.axes[axis]}")
            continue
        setting = own_setting(keys, planned.cell)
        if not setting or f"{setting.rpartition('.')[2]}={value}" in shown:  # shown already: 'd=4'
            continue
        if any(name == setting or name.startswith(setting + ".") for name in applies):
            parts.append(f"{setting}={value}")
    return " ".join(parts)


def with_variant(cells: list, variant: tuple[str, ...]) -> list:
    """The planned cells (scaling.planning.plan.PlannedCell), each naming what the variant changed in it."""
    if not variant:
        return cells
    return [dataclasses.replace(p, variant=variant_label(p, variant)) for p in cells]


def add_set_argument(parser, help: str) -> None:
    """The repeatable ``--set KEY=VALUE`` option of every command that plans a sweep file (collected in
    ``overrides``, applied by scaling.planning.plan.load_plan)."""
    parser.add_argument(
        "--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE", help=help
    )
