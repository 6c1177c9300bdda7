"""What an experiment kind is: the ``Kind`` record of a kind's functions
(docs/design.md, "Experiment kinds are plug-ins").

Training a cell is one kind; each seed-004 scan is another. A kind is a ``Kind`` object in a module of
this package that says how its settings are validated (``settings``, the dataclass of the cell's
``group`` of settings, and ``check``), how its cell runs inside a trial (``run``), what it logs (the
curves and summary it hands to the trial's log, and ``metric_key``), what it costs (``cost``, for
``--dry-run``) and how analysis reads and draws it (``analysis``, "module:OBJECT" of its analysis
plug-in, an ``analysis.plugin.Analysis``; analysis loads it, this package never imports analysis). The
kinds' names are listed once, in ``KINDS`` (scaling/kinds/registry.py); the kinds' modules import this
file, which imports none of them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable

from scaling.budget.cost import CellCost


@dataclass(frozen=True)
class Kind:
    """One experiment kind. ``run(cell, trial) -> dict`` runs a cell inside a trial; ``trial`` gives the
    device, the cell's checkpoint store and MLflow log, the progress report and the tracking URI
    (scaling.trial.run.TrialContext). ``settings`` / ``group``: the dataclass of the kind's own settings and
    the cell key under which a sweep file gives them (None: the kind has none). ``check(cell)`` raises
    ConfigErrors naming the setting; ``label(cell)`` is the run name; ``cost(cell)`` a CellCost or None
    (not estimated); ``packable(cell)`` whether cells of this kind may share a trial (scaling.budget.packing),
    and ``run_pack(members, pack) -> finishes`` how such a trial runs them: it trains the (cell, log) members
    together (``pack``: device, their checkpoint store, progress; scaling.trial.run.PackContext) and returns
    one function per member that finishes it, which the trial calls in turn so that one failure fails that
    member alone; ``path_fields``: settings of the group that are local paths, made absolute at planning.

    ``reads``: the cell's settings the kind reads, which its cells log as MLflow params
    (scaling.cells.Cell.params; cell.yaml keeps every setting): ``task`` (the family's settings,
    papers.context_scaling.tasks), ``model`` (the architecture's,
    papers.context_scaling.architectures.ModelFacts), ``train``, ``eval``, a whole group
    (``construction``) or one setting (``task.d``, ``temperature.taus``); ``unused(cell)`` names the
    entries of ``reads`` that this cell leaves unread (e.g. ``train`` for a scan of a given model). T, N,
    seed, job, model.name and model.arch are every cell's."""

    name: str
    run: Callable[..., dict[str, Any]]
    label: Callable[[Any], str]
    analysis: str  # "module:OBJECT" of its analysis plug-in (an analysis.plugin.Analysis record)
    settings: type | None = None
    group: str | None = None
    check: Callable[[Any], None] = lambda cell: None
    cost: Callable[[Any], CellCost | None] = lambda cell: None
    packable: Callable[[Any], bool] = lambda cell: False
    run_pack: Callable[..., list[Callable[[], Any]]] | None = None  # None: the kind never packs
    metric_key: Callable[[str], str] | None = None  # None: scaling.tracking.names.curve_metric_key
    path_fields: tuple[str, ...] = ()
    reads: tuple[str, ...] = ("task", "model", "train", "eval")
    unused: Callable[[Any], tuple[str, ...]] = lambda cell: ()
    # summary metrics of its cells' runs that the MLflow UI's lattice view shows as columns
    # (scaling.tracking.views; the training kind's final err/zero)
    shown: tuple[str, ...] = ()
