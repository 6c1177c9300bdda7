"""What an experiment kind is: the ``Kind`` record of a kind's functions (docs/design.md, "Plug-ins";
docs/extending.md, "A kind of your own").

Training a cell is one kind; each seed-004 scan is another. A kind says which groups of settings its cells
have (``groups``, and its own ``group``) and how they are validated (``check``), how its cell runs inside a
trial (``run``), what it logs (the curves and summary it hands to the trial's log, and ``metric_key``), what
it costs (``steps``, ``step``, ``cost``, for ``--dry-run`` and the packer), whether its cells pack, and how
analysis reads and draws it (``analysis``, "module:OBJECT" of its analysis plug-in, an
``analysis.plugin.Analysis``; analysis loads it, this package never imports analysis). The generic core (the
Cell, the planner, costing, packing, the trial and its log) reads a cell only through these hooks. A kind
is named by a cell's ``job``: a registered name or a researcher's ``module:NAME`` (scaling.kinds.registry).
"""

from __future__ import annotations

from dataclasses import dataclass, field, is_dataclass
from typing import Any, Callable

from scaling.budget.cost import CellCost, Step
from scaling.config import shared


@dataclass(frozen=True)
class Polymorphic:
    """A group of settings whose dataclass one of its settings chooses: a task's by its family, a model's by
    its architecture, each a plug-in with settings of its own. ``choose(given, where)`` -> the dataclass,
    from the group's settings as given (a dict, maybe empty: the default)."""

    choose: Callable[[dict, str], type]

    def build(self, given: Any, where: str) -> Any:
        """The group's settings object from ``given`` (a dict, None for the default, or built already)."""
        if is_dataclass(given) and not isinstance(given, type):
            return given
        return shared(self.choose(given if isinstance(given, dict) else {}, where), given or {}, where)


def default_model_label(cell) -> str:
    """The model a cell's run names: its ``model`` group's label where it has one, else its kind."""
    model = cell.settings.get("model")
    return getattr(model, "label", None) or cell.job


@dataclass(frozen=True)
class Kind:
    """One experiment kind. ``run(cell, trial) -> dict`` runs a cell inside a trial; ``trial`` gives the
    device, the cell's checkpoint store and MLflow log, the progress report and the tracking URI
    (scaling.trial.run.TrialContext). ``groups``: the cell's groups of settings, name -> a dataclass or a
    ``Polymorphic`` (the training kind's task, model, train, eval); ``settings`` / ``group``: the dataclass
    of the kind's own settings and the cell key under which a sweep file gives them (None: the kind has
    none). ``check(cell)`` raises ConfigErrors naming the setting; ``label(cell)`` is the run name;
    ``cost(cell)`` a CellCost or None (not estimated); ``packable(cell)`` whether cells of this kind may
    share a trial (scaling.budget.packing), ``pack_shape(cell)`` what two such cells must agree on to share
    one, and ``run_pack(members, pack) -> finishes`` how such a trial runs them: it trains the (cell, log)
    members together (``pack``: device, their checkpoint store, progress; scaling.trial.run.PackContext) and
    returns one function per member that finishes it, which the trial calls in turn so that one failure
    fails that member alone; ``path_fields``: settings of the group that are local paths, made absolute at
    planning.

    What the generic core asks of a cell: ``context(cell)``, its N (the training kind's: the largest of
    ``train.lengths`` where given); ``steps(cell)``, the training steps it takes (0: none); ``step(cell)``,
    one step's cost facts (scaling.budget.cost.Step; None: not estimated); ``model_label(cell)``;
    ``runs_on(cell)``, its (device, precision) settings; ``for_resources(cell, gpu)``, the cell as planned for
    a trial given ``gpu`` GPUs (the training kind resolves ``train.precision: auto``); ``check_resources(cell,
    gpu)``, a ConfigError where the cell cannot run on what it asks for; ``check_planned(cell)``, one where a
    whole cell breaks a limit (a prompt longer than its model's positions); and ``plugins(cell)``, the (point,
    name) of each plug-in it names, whose versions are in its key (scaling.cells.Cell.versions).

    ``reads``: the cell's settings the kind reads, which its cells log as MLflow params
    (scaling.cells.Cell.params; cell.yaml keeps every setting): a whole group (``train``, ``construction``;
    a group whose settings say which of them apply, ``applicable_settings()``, logs those: a task family's,
    a model's) or one setting (``task.d``, ``temperature.taus``); ``unused(cell)`` names the entries of
    ``reads`` that this cell leaves unread (e.g. ``train`` for a scan of a given model). T, N, seed, job,
    model.name and model.arch are every cell's."""

    name: str
    run: Callable[..., dict[str, Any]]
    label: Callable[[Any], str]
    analysis: str  # "module:OBJECT" of its analysis plug-in (an analysis.plugin.Analysis record)
    settings: type | None = None
    group: str | None = None
    groups: dict[str, Any] = field(default_factory=dict)
    version: str = ""  # a researcher's kind declares one (scaling.plugins); in its cells' keys
    check: Callable[[Any], None] = lambda cell: None
    cost: Callable[[Any], CellCost | None] = lambda cell: None
    packable: Callable[[Any], bool] = lambda cell: False
    pack_shape: Callable[[Any], dict] = lambda cell: {}
    run_pack: Callable[..., list[Callable[[], Any]]] | None = None  # None: the kind never packs
    metric_key: Callable[[str], str] | None = None  # None: scaling.tracking.names.curve_metric_key
    path_fields: tuple[str, ...] = ()
    reads: tuple[str, ...] = ()
    unused: Callable[[Any], tuple[str, ...]] = lambda cell: ()
    # summary metrics of its cells' runs that the MLflow UI's lattice view shows as columns
    # (scaling.tracking.views; the training kind's final err/zero)
    shown: tuple[str, ...] = ()
    context: Callable[[Any], int] = lambda cell: cell.N
    steps: Callable[[Any], int] = lambda cell: 0
    step: Callable[[Any], Step | None] = lambda cell: None
    model_label: Callable[[Any], str] = default_model_label
    runs_on: Callable[[Any], tuple[str, str]] = lambda cell: ("auto", "float32")
    for_resources: Callable[[Any, float], Any] = lambda cell, gpu: cell
    check_resources: Callable[[Any, float], None] = lambda cell, gpu: None
    # limits a whole cell can break that its groups alone do not (a prompt within the model's positions):
    # checked on each planned cell, never on a grid axis's value over the defaults
    check_planned: Callable[[Any], None] = lambda cell: None
    plugins: Callable[[Any], list] = lambda cell: []

    def all_groups(self) -> dict[str, Any]:
        """Every group of its cells' settings: ``groups`` and its own ``group``."""
        own = {self.group: self.settings} if self.group is not None else {}
        return {**self.groups, **own}
