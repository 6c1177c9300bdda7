"""Sweep files -> validated cells (pure: no Ray, no MLflow).

A sweep file names an MLflow experiment and declares a lattice of cells::

    name: smoke                      # the MLflow experiment
    defaults:                        # cell settings shared by every cell (scaling.cells.Cell)
      task: {family: linear, d: 4}
      train: {steps: 1500, lr: 1.0e-3}
    models:                          # the `model` axis picks these presets by name
      gpt2: {arch: gpt2, n_layer: 2, n_head: 2, n_embd: 64, resources: {cpu: 1, gpu: 0.25}}
      mlp: {arch: mlp, width: 256, train: {steps: 4000}}   # a preset may set its own training
    grid:                            # the product of the axes gives the cells
      model: [gpt2, mlp]
      T: [16, 256, inf]
      N: [8, 16]
      seed: [0, 1]
      task.noise_std: [0.1, 0.5]     # any dotted cell setting can be an axis
    resources: {cpu: 1}              # per cell, unless the model preset says otherwise
    run: {max_failures: 2}           # how the driver runs the cells (not part of any cell)
    profiles:                        # named variants, deep-merged over the file by --profile NAME
      quick: {defaults: {train: {steps: 200}}}

Precedence: defaults < model preset < grid axis < ``--set`` override. A model preset holds model settings, its
``resources`` and, under ``train``, training settings of its own (a cheap MLP trains longer than a GPT-2).
``--set train.steps=200`` sets a cell setting (and replaces the axis of that name, if any, and the presets'
own value); ``--set grid.T=[16,64]`` or ``--set name=x`` set the file's own keys. Every error names the file,
line and key (or the ``--set`` that caused it), says what is wrong and what is allowed, and is raised before
anything runs. The file itself is checked first (scaling.planning.guards: a UTF-8 text file of at most 1 MB,
YAML nested at most 50 levels, aliases bounded), and a grid of more than ``scaling.planning.guards.MAX_CELLS``
cells is refused from its axes' lengths, before any cell is built, unless ``max_cells`` allows it. A ``grid:``
key with no axes is an error; a file without ``grid:`` is one cell of the defaults. A cell with
``train.device: cuda`` must ask for a GPU in its resources. A cell is planned for the resources it asks for by
its kind (scaling.kinds.Kind.for_resources: the training kind's ``train.precision: auto`` resolves to bfloat16
for a cell whose trial is given a GPU, float32 otherwise; the planned cell, its key, params and cell.yaml hold
the resolved precision). Plug-ins named ``module:Name`` are looked up beside the sweep file first.
"""

from __future__ import annotations

import copy
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from scaling.cells import Cell
from scaling.config import ConfigError, check, from_dict, shared_configs
from scaling.kinds.registry import kind_of_group
from scaling.planning.adaptive_settings import AdaptiveSettings, check_against_lattice
from scaling.planning.guards import GuardError, check_lattice, check_yaml_shape, read_sweep_text
from scaling.planning.locator import Locator, SweepError
from scaling.planning.variants import variant_of, with_variant
from scaling.plugins import search_folder

TOP_LEVEL = ("name", "description", "defaults", "models", "grid", "resources", "run", "adaptive", "profiles")
CELL_FIELDS = ("T", "N", "seed", "job")  # a cell's own fields; the rest of its settings are its kind's groups
PRESET_TRAIN = "train"  # the cell field a model preset may hold settings of its own for (the training)
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$")


@dataclass(frozen=True)
class Resources:
    """What one cell's trial asks of one node: CPUs, a GPU fraction or whole GPUs, and custom resources.

    ``custom`` names Ray custom resources a node advertises (``ray start --resources``), e.g.
    ``{"accelerator_type:A10G": 0.25}`` to pin a cell to a kind of GPU. A fraction of a GPU also caps the
    trial's CUDA memory to that fraction (scaling.trial.devices.cap_gpu_memory).
    """

    cpu: float = 1.0
    gpu: float = 0.0
    custom: dict[str, float] = field(default_factory=dict)

    def __post_init__(self):
        check(self.cpu > 0, "cpu", f"must be > 0, got {self.cpu}")
        check(self.gpu >= 0, "gpu", f"must be >= 0, got {self.gpu}")
        check(
            self.gpu <= 1 or float(self.gpu).is_integer(),
            "gpu",
            f"a fraction must be at most 1 (or whole GPUs: 1, 2, ...), got {self.gpu}",
        )
        for name, amount in self.custom.items():
            check(
                name.lower() not in ("cpu", "gpu", "memory", "object_store_memory"),
                f"custom.{name}",
                "is a built-in resource; use the cpu and gpu settings",
            )
            check(amount > 0, f"custom.{name}", f"must be > 0, got {amount}")

    def as_tune(self) -> dict[str, float]:
        return {"cpu": self.cpu, "gpu": self.gpu, **self.custom}

    def as_ray(self) -> dict[str, float]:
        """The request in Ray's resource names, as nodes advertise them."""
        return {"CPU": self.cpu, "GPU": self.gpu, **self.custom}


@dataclass(frozen=True)
class RunConfig:
    """How the driver runs a sweep; none of it changes a result."""

    max_failures: int = 2  # retries of a trial that dies, from its last checkpoint
    max_concurrent: int = 0  # 0 = as many as the resources allow
    storage: str = ""  # Tune state and per-cell checkpoints; "" = ./scaling_runs
    # cells trained together as one batched ensemble (scaling.budget.packing): auto (small cells, up to 8),
    # off, or K (up to K cells of a packable architecture); results equal those of unpacked cells
    pack: bool | int | str = "auto"
    # seconds between the heartbeat lines (each running cell's step, the time left) that a driver whose
    # output is not a terminal prints while cells run (scaling.sweep.progress)
    heartbeat: float = 60.0

    def __post_init__(self):
        if isinstance(self.pack, bool):  # YAML reads a bare `off` as false, `on` as true
            object.__setattr__(self, "pack", "auto" if self.pack else "off")
        check(self.max_failures >= 0, "max_failures", f"must be >= 0, got {self.max_failures}")
        check(self.max_concurrent >= 0, "max_concurrent", f"must be >= 0, got {self.max_concurrent}")
        check(self.heartbeat > 0, "heartbeat", f"must be > 0 seconds, got {self.heartbeat}")
        check(
            self.pack in ("auto", "off") or (type(self.pack) is int and self.pack >= 1),
            "pack",
            f"must be auto, off or a whole number >= 1, got {self.pack!r}",
        )


@dataclass(frozen=True)
class PlannedCell:
    cell: Cell
    resources: Resources
    axes: dict[str, Any] = field(default_factory=dict, compare=False)  # the grid values that made it
    variant: str = field(default="", compare=False)  # what the plan's variant changed in it (variants.py)

    @property
    def name(self) -> str:
        """The cell's run name: its kind's label, and what a variant changed in it
        (scaling.planning.variants)."""
        return f"{self.cell.name} {self.variant}" if self.variant else self.cell.name


@dataclass(frozen=True)
class Plan:
    name: str  # the MLflow experiment
    description: str
    source: str  # the sweep file
    profile: str
    run: RunConfig
    cells: tuple[PlannedCell, ...]
    document: dict = field(compare=False, default_factory=dict)  # the resolved sweep document
    # the `adaptive:` section (scaling.planning.adaptive_settings), checked
    adaptive: AdaptiveSettings | None = None
    # the --set that change cells (scaling.planning.variants): () for the file's own
    variant: tuple[str, ...] = ()


# ---------------------------------------------------------------- YAML with line numbers


def _node_lines(node: yaml.Node, path: tuple = (), out: dict | None = None, source: str = "") -> dict:
    """Map every key path of a composed YAML tree to its line (1-based); duplicate keys are errors."""
    out = {} if out is None else out
    out.setdefault(path, node.start_mark.line + 1)
    if isinstance(node, yaml.MappingNode):
        seen = set()
        for key_node, value_node in node.value:
            key = key_node.value
            if key in seen:
                raise SweepError(
                    f"{source}:{key_node.start_mark.line + 1}: {'.'.join(map(str, path + (key,)))}:"
                    f" duplicate key"
                )
            seen.add(key)
            out[path + (key,)] = key_node.start_mark.line + 1
            _node_lines(value_node, path + (key,), out, source)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            _node_lines(item, path + (i,), out, source)
    return out


def read_document(path: str | Path) -> tuple[dict, dict]:
    """The sweep document and a map key-path -> line; malformed YAML is a SweepError with its line."""
    path = Path(path)
    try:
        text = read_sweep_text(path)
        check_yaml_shape(text, str(path))
    except GuardError as err:
        raise SweepError(str(err)) from None
    try:
        node = yaml.compose(text)
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        mark = getattr(err, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark else str(path)
        raise SweepError(f"{where}: malformed YAML: {getattr(err, 'problem', None) or err}") from None
    if not isinstance(data, dict):
        raise SweepError(f"{path}: a sweep file is a mapping with keys {', '.join(TOP_LEVEL)}")
    return data, _node_lines(node, source=str(path)) if node is not None else {}


# ---------------------------------------------------------------- overrides


def _parse_path(dotted: str) -> list[str]:
    return [p for p in dotted.split(".") if p]


def deep_merge(base: Any, over: Any) -> Any:
    """Mappings merge recursively; anything else in ``over`` replaces ``base``."""
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for key, value in over.items():
            out[key] = deep_merge(base.get(key), value) if key in base else copy.deepcopy(value)
        return out
    return copy.deepcopy(over)


def apply_override(document: dict, assignment: str) -> dict:
    """Apply one ``key=value`` (value in YAML syntax) to the document, as described in the module doc."""
    if "=" not in assignment:
        raise SweepError(f"--set {assignment}: expected key=value, e.g. train.steps=200")
    dotted, raw = assignment.split("=", 1)
    keys = _parse_path(dotted.strip())
    if not keys:
        raise SweepError(f"--set {assignment}: empty key")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as err:  # one line: what YAML found wrong, and at which column of the value
        column = f" at column {err.problem_mark.column + 1}" if getattr(err, "problem_mark", None) else ""
        problem = getattr(err, "problem", None) or err
        raise SweepError(f"--set {assignment}: value is not valid YAML: {problem}{column}") from None
    document = copy.deepcopy(document)
    if keys[0] not in TOP_LEVEL:
        grid = document.get("grid") or {}
        if isinstance(grid, dict):
            grid.pop(".".join(keys), None)
        if keys[0] == PRESET_TRAIN and len(keys) > 1:  # it wins over the presets' own training settings too
            for spec in (document.get("models") or {}).values():
                if isinstance(spec, dict) and isinstance(spec.get(PRESET_TRAIN), dict):
                    _set_dotted(spec, ".".join(keys), value)
        keys = ["defaults"] + keys
    node = document
    for key in keys[:-1]:
        if not isinstance(node.get(key), dict):
            node[key] = {}
        node = node[key]
    node[keys[-1]] = value
    return document


# ---------------------------------------------------------------- planning


def _set_dotted(tree: dict, dotted: str, value: Any) -> None:
    keys = _parse_path(dotted)
    node = tree
    for key in keys[:-1]:
        node = node.setdefault(key, {})
        if not isinstance(node, dict):
            raise ConfigError(dotted, "is not a group of settings")
    node[keys[-1]] = copy.deepcopy(value)


def _model_presets(models: Any, at: Locator) -> dict[str, tuple[dict, Resources | None, dict]]:
    """name -> (model settings, resources or None, training settings of its own: a partial ``train``)."""
    if models is None:
        return {}
    if not isinstance(models, dict):
        raise SweepError(f"{at('models')}: expected a mapping of preset name -> model settings")
    presets = {}
    for name, spec in models.items():
        spec = dict(spec or {})
        resources = spec.pop("resources", None)
        train = spec.pop(PRESET_TRAIN, None) or {}
        if not isinstance(train, dict):
            raise SweepError(f"{at('models', name, 'train')}: expected a mapping of training settings")
        spec.setdefault("name", str(name))
        try:
            resources = None if resources is None else from_dict(Resources, resources)
        except ConfigError as err:
            raise at.error(("models", name), err) from None
        presets[str(name)] = (spec, resources, train)
    return presets


def _axes(grid: Any, presets: dict, at: Locator) -> dict[str, list]:
    if grid is None:
        return {}
    if not isinstance(grid, dict):
        raise SweepError(f"{at('grid')}: expected a mapping of axis -> list of values")
    axes = {}
    for axis, values in grid.items():
        if not isinstance(values, (list, dict)):  # a mapping is one value (an inline model), said as such
            raise SweepError(f"{at('grid', axis)}: {scalar_axis(str(axis), values)}")
        values = values if isinstance(values, list) else [values]
        if not values:
            raise SweepError(f"{at('grid', axis)}: an axis needs at least one value")
        if axis == "model":
            for i, value in enumerate(values):
                if isinstance(value, str) and value not in presets:
                    known = ", ".join(presets) or "(none: add a `models:` section)"
                    raise SweepError(f"{at('grid', axis, i)}: unknown model preset {value!r}; known: {known}")
        axes[str(axis)] = values
    return axes


def scalar_axis(axis: str, value: Any) -> str:
    """Why a grid axis given one value, not a list, is refused (``seed: 3``: one seed, or three?)."""
    text = yaml.safe_dump(value, default_flow_style=True).strip().removesuffix("...").strip()
    count = type(value) is int and axis == "seed" and 2 <= value <= 10  # a count of seeds, perhaps
    many = f", or [{', '.join(map(str, range(value)))}] for {value} seeds" if count else ""
    return f"an axis takes a list of values, got {text}: write [{text}] for that one value{many}"


def _cell_tree(defaults: dict, combo: dict[str, Any], presets: dict) -> tuple[dict, Resources | None]:
    tree = copy.deepcopy(defaults)
    resources = None
    for axis, value in combo.items():
        if axis == "model":
            if isinstance(value, str):
                spec, resources, train = presets[value]
                if train:
                    tree["train"] = deep_merge(tree.get("train") or {}, train)
            else:
                spec = dict(value)
                if "resources" in spec:
                    resources = from_dict(Resources, spec.pop("resources"), "resources")
                if isinstance(spec.get(PRESET_TRAIN), dict):
                    tree["train"] = deep_merge(tree.get("train") or {}, spec.pop(PRESET_TRAIN))
            tree["model"] = deep_merge(tree.get("model") or {}, spec)
    for axis, value in combo.items():
        if axis != "model":
            _set_dotted(tree, axis, value)
    return tree, resources


def absolute_paths(tree: dict[str, Any], bases: list[Path]) -> dict[str, Any]:
    """The cell tree with the relative local paths of kinds' settings (scaling.kinds.Kind.path_fields)
    made absolute: the first base under which the path exists, else the first base (validation then
    names the missing path). Trials run in other directories, so paths they get must be absolute."""
    out = dict(tree)
    jobs = (tree["job"],) if isinstance(tree.get("job"), str) else ()
    for group, settings in tree.items():
        if not isinstance(settings, dict) or group in CELL_FIELDS:
            continue
        owner = kind_of_group(group, jobs)
        if owner is None or not owner.path_fields:
            continue
        settings = dict(settings)
        for name in owner.path_fields:
            value = settings.get(name)
            if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
                candidates = [(base / value).resolve() for base in bases]
                settings[name] = str(next((c for c in candidates if c.exists()), candidates[0]))
            elif isinstance(value, str) and value:
                settings[name] = str(Path(value).expanduser())
        out[group] = settings
    return out


def with_grid_job(tree: dict, grid: Any) -> dict:
    """A partial cell tree (the defaults, or one axis value over them) as validated alone: when the grid
    has a ``job`` axis and the tree names no job, the axis's first kind, whose settings the tree may hold."""
    jobs = grid.get("job") if isinstance(grid, dict) else None
    if "job" in tree or not isinstance(jobs, list) or not jobs or not isinstance(jobs[0], str):
        return tree
    return {**tree, "job": jobs[0]}


def override_path(assignment: str) -> tuple:
    """The key path of the document an override ``key=value`` sets (see apply_override)."""
    keys = tuple(_parse_path(assignment.split("=", 1)[0].strip()))
    return keys if keys and keys[0] in TOP_LEVEL else ("defaults", *keys)


def check_top_level(document: dict, at: Locator) -> str:
    """Only the known top-level keys, and a valid ``name``; the name."""
    unknown = [k for k in document if k not in TOP_LEVEL]
    if unknown:
        raise SweepError(f"{at(unknown[0])}: unknown key; allowed: {', '.join(TOP_LEVEL)}")
    name = document.get("name")
    if not isinstance(name, str) or not NAME_PATTERN.match(name):
        raise SweepError(
            f"{at('name')}: the sweep needs a `name` (letters, digits, '.', '_', '-';"
            f" it names the MLflow experiment), got {name!r}"
        )
    return name


def checked_defaults(document: dict, bases: list[Path], at: Locator) -> dict:
    """The ``defaults:`` mapping, its local paths made absolute, valid as a cell on its own."""
    defaults = document.get("defaults") or {}
    if not isinstance(defaults, dict):
        raise SweepError(f"{at('defaults')}: expected a mapping of cell settings")
    defaults = absolute_paths(defaults, bases)
    try:
        Cell.from_dict(with_grid_job(defaults, document.get("grid")))
    except ConfigError as err:
        raise at.error(("defaults",), err) from None
    return defaults


def checked_section(cls: type, document: dict, key: str, at: Locator):
    """The ``key:`` section of the document as a ``cls`` (Resources, RunConfig), errors located."""
    try:
        return from_dict(cls, document.get(key))
    except ConfigError as err:
        raise at.error((key,), err) from None


def checked_axes(document: dict, presets: dict, at: Locator, max_cells: int | None) -> dict[str, list]:
    """The grid's axes: not empty, model presets known, at most ``max_cells`` cells in their product."""
    if "grid" in document and not document["grid"]:
        raise SweepError(
            f"{at('grid')}: is empty; give at least one axis (e.g. `T: [16, 64]`), or leave"
            f" `grid:` out for a single cell of the defaults"
        )
    axes = _axes(document.get("grid"), presets, at)
    try:
        check_lattice(axes, at("grid"), max_cells)
    except GuardError as err:
        raise SweepError(str(err)) from None
    return axes


@dataclass(frozen=True)
class _Lattice:
    """What a cell of the grid is built from: the defaults, the model presets, the grid (for its job axis)
    and the folders relative paths are taken from."""

    defaults: dict
    presets: dict
    grid: Any
    bases: list[Path]

    def tree(self, combo: dict[str, Any]) -> tuple[dict, Resources | None]:
        """The cell tree of one combination of axis values (paths absolute), and its preset's resources."""
        tree, resources = _cell_tree(self.defaults, combo, self.presets)
        return absolute_paths(tree, self.bases), resources


def check_presets(lattice: _Lattice, at: Locator) -> None:
    """Each model preset over the defaults alone, as its cell's ``model`` (and ``train``) settings, so that
    an error points at the preset (its model's settings are its architecture's: a plug-in's own)."""
    for name in lattice.presets:
        try:
            Cell.from_dict(with_grid_job(lattice.tree({"model": name})[0], lattice.grid))
        except ConfigError as err:
            where = err.where.removeprefix("model.") if err.where.startswith("model.") else err.where
            raise at.error(("models", name), ConfigError(where, str(err)[len(err.where) + 2 :])) from None


def check_each_axis_value(lattice: _Lattice, axes: dict[str, list], at: Locator) -> None:
    """Each value of each axis over the defaults alone, so that an error points at the value."""
    for axis, values in axes.items():
        for i, value in enumerate(values):
            try:
                Cell.from_dict(with_grid_job(lattice.tree({axis: value})[0], lattice.grid))
            except ConfigError as err:
                raise SweepError(f"{at('grid', axis, i)}: {err}") from None


def check_resources(cell: Cell, resources: Resources, at: Locator) -> None:
    """A cell must be able to run on what it asks for (its kind's check: one that trains on CUDA asks for a
    GPU)."""
    try:
        cell.kind.check_resources(cell, resources.gpu)
    except ConfigError as err:
        raise SweepError(
            f"{at('defaults', *err.where.split('.'))}: {str(err)[len(err.where) + 2 :]}"
        ) from None


def expand(lattice: _Lattice, axes: dict[str, list], resources: Resources, at: Locator) -> list[PlannedCell]:
    """The grid's cells in order, each once (``resources``: unless its model preset gives its own)."""
    cells, seen = [], set()
    for combo_values in itertools.product(*axes.values()):
        combo = dict(zip(axes, combo_values))
        tree, own = lattice.tree(combo)
        try:
            cell = Cell.from_dict(tree)
            cell.kind.check_planned(cell)
            cell = cell.kind.for_resources(cell, (own or resources).gpu)
        except ConfigError as err:
            described = ", ".join(f"{k}={v}" for k, v in combo.items())
            raise SweepError(f"{at('grid')}: the cell ({described}) is invalid: {err}") from None
        if cell.key in seen:
            continue
        seen.add(cell.key)
        check_resources(cell, own or resources, at)
        cells.append(PlannedCell(cell, own or resources, combo))
    if not cells:
        raise SweepError(f"{at()}: the sweep has no cells")
    return cells


def plan_document(
    document: dict,
    source: str = "<sweep>",
    lines: dict | None = None,
    profile: str = "",
    overrides: dict | None = None,
    max_cells: int | None = None,
) -> Plan:
    """Validate a sweep document and expand it into its ordered cells (at most ``max_cells``, default
    scaling.planning.guards.MAX_CELLS); ``overrides`` maps key paths set by ``--set`` to their assignment. The
    checks run in the document's order, each naming the file, line and key it found wrong."""
    at = Locator(source, lines or {}, overrides)
    if Path(source).is_file():
        search_folder(Path(source).resolve().parent)  # its plug-ins' modules (module:Name) sit beside it
    name = check_top_level(document, at)
    bases = [Path.cwd(), Path(source).resolve().parent]  # trials run elsewhere: paths become absolute
    defaults = checked_defaults(document, bases, at)
    resources = checked_section(Resources, document, "resources", at)
    run = checked_section(RunConfig, document, "run", at)
    presets = _model_presets(document.get("models"), at)
    axes = checked_axes(document, presets, at, max_cells)
    lattice = _Lattice(defaults, presets, document.get("grid"), bases)
    with shared_configs():  # the lattice's cells share their equal groups of settings
        check_presets(lattice, at)
        check_each_axis_value(lattice, axes, at)
        cells = expand(lattice, axes, resources, at)
    variant = variant_of((overrides or {}).values())
    return Plan(
        name=name,
        description=str(document.get("description") or ""),
        source=source,
        profile=profile,
        run=run,
        cells=tuple(with_variant(cells, variant)),
        document=document,
        adaptive=_adaptive_settings(document, cells, at),
        variant=variant,
    )


def _adaptive_settings(document: dict, cells: list[PlannedCell], at: Locator) -> AdaptiveSettings | None:
    """The checked ``adaptive:`` section (None without one), its first wave filled in from the grid."""
    if document.get("adaptive") is None:
        return None
    grid = document.get("grid") or {}
    lattice = {
        axis: sorted({getattr(p.cell, axis) for p in cells}) for axis in ("T", "N", "seed") if axis in grid
    }
    try:
        return check_against_lattice(from_dict(AdaptiveSettings, document["adaptive"]), lattice)
    except ConfigError as err:
        raise at.error(("adaptive",), err) from None


def load_plan(
    path: str | Path,
    profile: str = "",
    overrides: list[str] | tuple[str, ...] = (),
    max_cells: int | None = None,
) -> Plan:
    """Read, resolve (profile, then overrides) and validate a sweep file."""
    document, lines = resolved_document(path, profile, overrides)
    set_paths = {override_path(a): a for a in overrides}
    return plan_document(document, str(path), lines, profile, set_paths, max_cells)


def resolved_document(
    path: str | Path, profile: str = "", overrides: list[str] | tuple[str, ...] = ()
) -> tuple[dict, dict]:
    """A sweep file's document with its profile, then its overrides, applied (not yet validated), and its
    lines: its ``name`` is the experiment's, known without expanding the cells."""
    document, lines = read_document(path)
    source = str(path)
    if profile:
        profiles = document.get("profiles") or {}
        if profile not in profiles:
            known = ", ".join(profiles) or "(none defined)"
            raise SweepError(f"{source}: unknown profile {profile!r}; known: {known}")
        document = deep_merge(document, profiles[profile])
        document["name"] = f"{document.get('name')}-{profile}"
    document.pop("profiles", None)
    for assignment in overrides:
        document = apply_override(document, assignment)
    return document, lines
