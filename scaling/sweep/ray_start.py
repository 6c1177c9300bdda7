"""Ray started or joined for a sweep, and every cell checked to fit one of its nodes before a trial starts."""

from __future__ import annotations

import logging
import os
import threading

import ray

from scaling.planning.plan import SweepError
from scaling.plugins import modules_to_ship
from scaling.sweep.node_fit import refusal
from scaling.sweep.progress import quiet_ray

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
    (the local Ray's processes inherit this one's environment; a cluster's get it as a runtime env), and so
    do the modules of the sweep's own plug-ins (scaling.plugins.modules_to_ship, as Ray's ``py_modules``).

    Without an address a new local instance is always started (``address="local"``): a plain ``ray.init()``
    would join any cluster already running on this machine (RAY_ADDRESS, or the latest ``ray start``).
    """
    if ray.is_initialized():
        return
    level = logging.WARNING if verbose else logging.ERROR
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=level)
    os.environ.update(env or {})
    # the sweep's own plug-in modules (module:Name beside the sweep file) reach every worker, on any node
    shipped = modules_to_ship()
    runtime_env = {"py_modules": shipped} if shipped else {}
    if address:
        runtime_env = {**runtime_env, "env_vars": env} if env else runtime_env
        ray.init(address=address, runtime_env=runtime_env or None, **quiet)
    else:  # "local": a new Ray of our own, never another process's instance on this machine
        local = dict(num_cpus=num_cpus, num_gpus=num_gpus, runtime_env=runtime_env or None)
        ray.init(address="local", **local, **quiet)


def cluster_nodes(address: str, verbose: bool = False) -> list[dict[str, float]]:
    """The resources of the nodes alive in the Ray cluster at ``address``, for --dry-run: joined, read and
    left (a Ray this process has joined already is read and kept); a SweepError when it cannot be joined."""
    joined = not ray.is_initialized()
    quiet_ray(verbose)
    try:
        start_ray(address, verbose=verbose)
    except (ConnectionError, RuntimeError, ValueError) as err:
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise SweepError(
            f"cannot join a Ray cluster at --address {address}: {reason}; start one there (ray start --head),"
            " or leave out --address for a local Ray"
        ) from None
    try:
        return [dict(n["Resources"]) for n in ray.nodes() if n.get("Alive")]
    finally:
        if joined:
            ray.shutdown()


def check_feasible(
    plan_cells, autoscaling: bool, node_types=(), hint: str = "", where: str = "this cluster"
) -> list[str]:
    """Fail before any trial starts when some cell fits no node alive in Ray (scaling.sweep.node_fit.refusal:
    a cell that only a node type of the autoscaler could hold waits for it); returns the cells that wait."""
    if autoscaling:
        return []
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    waiting, refused = refusal(plan_cells, nodes, autoscaling, node_types, hint, where)
    if refused:
        raise SweepError(refused)
    return waiting
