"""Ray started or joined for a sweep, and every cell checked to fit one of its nodes before a trial starts."""

from __future__ import annotations

import logging
import os
import threading

import ray

from scaling.planning.plan import SweepError
from scaling.sweep.cluster import describe, waiting_for_autoscaler

from ..tracking.store_template import preload

log = logging.getLogger(__name__)


def start_cluster(
    address: str | None,
    num_cpus: int | None,
    num_gpus: int | None,
    new_store: bool,
    env: dict[str, str] | None = None,
    verbose: bool = False,
) -> None:
    """Start (or join) Ray, with Ray Tune's import and, for a new SQLite store, MLflow's in a thread that
    overlaps Ray's start (which waits on the processes it starts and leaves ~3 of its ~8 CPU-seconds on 2
    cores idle: ~2 s less per sweep)."""
    preloading = threading.Thread(target=preload_quietly, args=(new_store,), name="preload", daemon=True)
    preloading.start()
    start_ray(address, num_cpus, num_gpus, env, verbose)
    preloading.join()


def preload_quietly(tracking: bool) -> None:
    """Import Ray Tune and (``tracking``) tracking.store_template.preload; a failure here is reported where it
    recurs."""
    try:
        import ray.tune  # noqa: F401 - the preload itself: imported in this thread while Ray starts

        if tracking:
            preload()
    except Exception as err:  # noqa: BLE001 - reported where the module is used or the store opened
        log.debug("preloading failed: %s", err)


def start_ray(
    address: str | None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    env: dict[str, str] | None = None,
    verbose: bool = False,
) -> None:
    """Join a cluster (``address``) or start the embedded local Ray; ``env`` reaches every trial process
    (the local Ray's processes inherit this one's environment; a cluster's get it as a runtime env).

    Without an address a new local instance is always started (``address="local"``): a plain ``ray.init()``
    would join any cluster already running on this machine (RAY_ADDRESS, or the latest ``ray start``).
    """
    if ray.is_initialized():
        return
    level = logging.WARNING if verbose else logging.ERROR
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=level)
    os.environ.update(env or {})
    if address:
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, **quiet)
    else:  # "local": a new Ray of our own, never another process's instance on this machine
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, **quiet)


def fits(request: dict[str, float], node: dict[str, float]) -> bool:
    """Whether one node has every resource of the request (Ray names: CPU, GPU, custom), all on itself."""
    return all(node.get(name, 0.0) >= amount for name, amount in request.items() if amount > 0)


def unmet_requests(plan_cells, nodes: list[dict[str, float]]) -> list[str]:
    """One line per cell whose resources no single node has (a trial never spans nodes)."""
    shapes = sorted(
        {
            ", ".join(
                f"{k}={v:g}"
                for k, v in sorted(n.items())
                if k in ("CPU", "GPU") or not (k.startswith("node:") or k.endswith("memory"))
            )
            for n in nodes
        }
    )
    unmet: dict[str, list] = {}  # what is asked -> the cells that ask it
    for planned in plan_cells:
        request = planned.resources.as_ray()
        if not any(fits(request, node) for node in nodes):
            asked = ", ".join(f"{k}={v:g}" for k, v in request.items() if v > 0)
            unmet.setdefault(asked, []).append(planned)
    problems = [asking(cells, asked) for asked, cells in unmet.items()]
    if problems:
        problems.append("nodes: " + ("; ".join(f"[{shape}]" for shape in shapes) or "(none alive)"))
    return problems


def asking(cells: list, asked: str, named: int = 2) -> str:
    """One line for the cells that ask a node for the same resources: the cell itself when alone, else how
    many, with the first ``named`` of them."""
    if len(cells) == 1:
        return f"cell {cells[0].name} ({cells[0].cell.key}) asks one node for {asked}"
    more = f", ... and {len(cells) - named} more" if len(cells) > named else ""
    first = ", ".join(p.name for p in cells[:named])
    return f"{len(cells)} cells ask one node for {asked} ({first}{more})"


def check_feasible(plan_cells, autoscaling: bool, node_types=(), hint: str = "") -> list[str]:
    """Fail before any trial starts when some cell fits no node (Tune would only wait), the refusal ending
    with ``hint`` (a smaller profile of the sweep file). On a cluster whose autoscaler can start
    ``node_types``, a cell no live node holds passes when one of those types could hold it (it waits for
    that node) and fails when none could; returns the cells that wait."""
    if autoscaling:
        return []
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    problems = unmet_requests(plan_cells, nodes)
    if problems and node_types:
        unmet = []
        for planned in plan_cells:
            request = planned.resources.as_ray()
            if not any(fits(request, node) for node in nodes):
                asked = ", ".join(f"{k}={v:g}" for k, v in request.items() if v > 0)
                unmet.append((f"cell {planned.name} ({planned.cell.key}) asks one node for {asked}", request))
        waiting, never = waiting_for_autoscaler(unmet, list(node_types))
        if not never:
            return waiting
        raise SweepError(
            "no node of this cluster, and no node type its autoscaler can start, can run some cells:\n  "
            + "\n  ".join(never)
            + f"\nnode types: {describe(list(node_types))}\nlower the cells' `resources` (the sweep file's"
            " `resources:` or a model preset's) or add such a node type to the cluster file"
        )
    if problems:
        raise SweepError(
            "no node of this cluster can run some cells:\n  "
            + "\n  ".join(problems)
            + (f"\n{hint}" if hint else "")
            + "\nor lower the cells' `resources` (the sweep file's `resources:` or a model preset's),"
            " add such a node, or pass --autoscaling on a cluster that starts such nodes"
        )
    return []
