"""Results never mix code versions: cells of a sweep whose runs were trained (complete, or partly) with
another source of one of the researcher's plug-ins at the version the code declares now. A plug-in's
version is in its cells' keys (scaling.cells.Cell.versions), so a new version trains new cells; a source
changed under the same version would be silently counted as current, so the driver refuses to run it until
the version changes or the change is accepted (``--accept-plugin-changes``), naming the plug-in and the
cells (docs/extending.md, "Versions and sources")."""

from __future__ import annotations

import json

from scaling.cells import plugin_sources
from scaling.planning.plan import SweepError
from scaling.tracking.cell_log import PLUGINS_TAG

SHOWN = 5  # the cells a message names before it counts the rest


def changed_sources(plan, recorded: dict[str, tuple[str, str]]) -> dict[tuple[str, str], list[str]]:
    """(plug-in, version) -> the names of the plan's cells whose runs recorded another source of it, from
    ``recorded``: cell key -> (status, the run's plugins tag)."""
    changed: dict[tuple[str, str], list[str]] = {}
    for planned in plan.cells:
        cell = planned.cell
        if cell.key not in recorded:
            continue
        now = {(p["name"], p["version"]): p["source"] for p in plugin_sources(cell)}
        try:
            then = {(p["name"], p["version"]): p["source"] for p in json.loads(recorded[cell.key][1])}
        except (ValueError, KeyError, TypeError):
            continue  # a tag this code did not write: nothing to compare
        for plugin, source in now.items():
            if plugin in then and then[plugin] != source:
                changed.setdefault(plugin, []).append(planned.name)
    return changed


def check_plugin_sources(run) -> None:
    """Refuse (SweepError, before anything is written) a sweep some of whose cells were trained with another
    source of a plug-in at the same version, unless ``--accept-plugin-changes``; then say so."""
    if run.experiment_id is None or not any(plugin_sources(p.cell) for p in run.plan.cells):
        return
    changed = changed_sources(run.plan, run.tracker.cell_tag(run.experiment_id, PLUGINS_TAG))
    if not changed:
        return
    lines = []
    for (name, version), cells in changed.items():
        shown = ", ".join(cells[:SHOWN]) + (f" and {len(cells) - SHOWN} more" if len(cells) > SHOWN else "")
        lines.append(f"plug-in {name} version {version}: its source changed since these cells ran: {shown}")
    if run.options.accept_plugin_changes:
        for line in lines:
            print(f"[{run.name}] note: {line}; counted as current (--accept-plugin-changes)", file=run.out)
        return
    raise SweepError(
        f"[{run.name}] "
        + "; ".join(lines)
        + ". Give the plug-in a new version to train them anew (new cells),"
        " or run with --accept-plugin-changes to count them as current"
    )
