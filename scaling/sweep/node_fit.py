"""Whether every cell fits one node: the check a run makes on Ray's live nodes before any trial starts, and
--dry-run on the nodes it would have (this machine's, or the cluster's). Pure: no Ray here."""

from __future__ import annotations

from scaling.cluster import describe, waiting_for_autoscaler


def fits(request: dict[str, float], node: dict[str, float]) -> bool:
    """Whether one node has every resource of the request (Ray names: CPU, GPU, custom), all on itself."""
    return all(node.get(name, 0.0) >= amount for name, amount in request.items() if amount > 0)


def node_shape(node: dict[str, float]) -> str:
    """A node's resources as the refusal shows them: CPU, GPU and custom ones, without Ray's own."""
    own = [k for k in node if k.startswith("node:") or k.endswith("memory")]  # Ray's, on every node
    shown = sorted((k, v) for k, v in node.items() if k in ("CPU", "GPU") or k not in own)
    return ", ".join(f"{k}={v:g}" for k, v in shown)


def unmet_requests(plan_cells, nodes: list[dict[str, float]]) -> list[str]:
    """One line per cell whose resources no single node has (a trial never spans nodes)."""
    shapes = sorted({node_shape(n) for n in nodes})
    unmet: dict[str, list] = {}  # what is asked -> the cells that ask it
    for planned in plan_cells:
        request = planned.resources.as_ray()
        if not any(fits(request, node) for node in nodes):
            unmet.setdefault(asked_text(request), []).append(planned)
    problems = [asking(cells, asked) for asked, cells in unmet.items()]
    if problems:
        problems.append("nodes: " + ("; ".join(f"[{shape}]" for shape in shapes) or "(none alive)"))
    return problems


def asked_text(request: dict[str, float]) -> str:
    return ", ".join(f"{k}={v:g}" for k, v in request.items() if v > 0)


def asking(cells: list, asked: str, named: int = 2) -> str:
    """One line for the cells that ask a node for the same resources: the cell itself when alone, else how
    many, with the first ``named`` of them."""
    if len(cells) == 1:
        return f"cell {cells[0].name} ({cells[0].cell.key}) asks one node for {asked}"
    more = f", ... and {len(cells) - named} more" if len(cells) > named else ""
    first = ", ".join(p.name for p in cells[:named])
    return f"{len(cells)} cells ask one node for {asked} ({first}{more})"


def refusal(
    plan_cells,
    nodes: list[dict[str, float]],
    autoscaling: bool,
    node_types=(),
    hint: str = "",
    where: str = "this cluster",
) -> tuple[list[str], str | None]:
    """(the cells that wait for a node the autoscaler starts, the refusal or None) for ``plan_cells`` on
    ``nodes``, those of ``where`` (this machine, this cluster): a cell that fits no node is refused (Tune
    would only wait), the refusal ending with ``hint`` (a smaller profile of the sweep file). On a cluster
    whose autoscaler can start ``node_types``, a cell no node holds waits when one of those types could
    hold it and is refused when none could. ``autoscaling``: the cluster adds nodes on demand, nothing is
    checked."""
    if autoscaling:
        return [], None
    problems = unmet_requests(plan_cells, nodes)
    if not problems:
        return [], None
    if node_types:
        unmet = [
            (f"cell {p.name} ({p.cell.key}) asks one node for {asked_text(p.resources.as_ray())}", request)
            for p in plan_cells
            for request in [p.resources.as_ray()]
            if not any(fits(request, node) for node in nodes)
        ]
        waiting, never = waiting_for_autoscaler(unmet, list(node_types))
        if not never:
            return waiting, None
        return waiting, (
            f"no node of {where}, and no node type its autoscaler can start, can run some cells:\n  "
            + "\n  ".join(never)
            + f"\nnode types: {describe(list(node_types))}\nlower the cells' `resources` (the sweep file's"
            " `resources:` or a model preset's) or add such a node type to the cluster file"
        )
    return [], (
        f"no node of {where} can run some cells:\n  "
        + "\n  ".join(problems)
        + (f"\n{hint}" if hint else "")
        + "\nor lower the cells' `resources` (the sweep file's `resources:` or a model preset's), add such a"
        " node,\nor pass --autoscaling on a cluster that starts such nodes"
    )
