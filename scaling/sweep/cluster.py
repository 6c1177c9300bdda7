"""The Ray cluster a driver runs on, when `ray up` started it: its address, MLflow server and node types.

The head start commands of cluster.yaml and cluster/cluster-local.yaml write
``~/.icl-scaling/cluster.env`` on the head (``RAY_ADDRESS``, ``RAY_AUTH_MODE``, ``MLFLOW_TRACKING_URI``,
optionally ``SCALING_STORAGE``), and `ray up` leaves the autoscaler's config in
``~/ray_bootstrap_config.yaml``. A driver on the head (any shell: ``ray exec``, ``ray attach``, tmux, a
Ray Job) reads both, so the plain ``python -m scaling.sweep sweeps/fig1.yaml`` joins the cluster, logs to
its MLflow server, and accepts a cell that only a node type the autoscaler can still start would hold.
The file counts only while its Ray answers at ``RAY_ADDRESS``: after ``ray down`` on a workstation that
was its own cluster, the same command runs the embedded local Ray again. ``$SCALING_CLUSTER_ENV`` names
another file (the tests point it at nothing, so that they never join a cluster they find).
No Ray import here: the tracking module and the CLI read this before Ray starts.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path

import yaml

from scaling.budget.cards import accelerator_of

DEFAULT_CLUSTER_ENV = "~/.icl-scaling/cluster.env"
AUTOSCALING_CONFIG = "~/ray_bootstrap_config.yaml"


@dataclass(frozen=True)
class NodeType:
    """A node type the autoscaler can start: its resources (None: Ray learns them when the node joins,
    as with the local provider's machines), how many it may start, and its GPU as Ray names it (its
    ``accelerator_type:X`` resource or its AWS instance type's card: scaling.budget.cards; None: unknown)."""

    name: str
    resources: dict[str, float] | None
    max_workers: int
    accelerator: str | None = None


@dataclass(frozen=True)
class Head:
    """What the head's cluster.env says (see the module docstring)."""

    ray_address: str
    tracking_uri: str | None = None
    storage: str | None = None
    auth_mode: str | None = None
    source: str = DEFAULT_CLUSTER_ENV


def cluster_env_path() -> Path:
    return Path(os.environ.get("SCALING_CLUSTER_ENV") or DEFAULT_CLUSTER_ENV).expanduser()


def read_env_file(path: Path) -> dict[str, str]:
    """KEY=VALUE lines (blank lines and # comments skipped; surrounding quotes removed)."""
    values = {}
    for line in path.read_text().splitlines():
        line = line.strip()
        if line and not line.startswith("#") and "=" in line:
            key, _, value = line.partition("=")
            values[key.strip()] = value.strip().strip("'\"")
    return values


def answers(address: str, timeout: float = 1.0) -> bool:
    """Whether something accepts TCP connections at host:port (a live GCS)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host, int(port)), timeout=timeout):
            return True
    except (OSError, ValueError):
        return False


def ray_up_head(path: Path | None = None) -> Head | None:
    """The cluster this machine is the head of, while its Ray is up; None elsewhere."""
    path = path or cluster_env_path()
    try:
        values = read_env_file(path)
    except (FileNotFoundError, NotADirectoryError, PermissionError):
        return None
    address = values.get("RAY_ADDRESS")
    if not address or not answers(address):
        return None
    return Head(
        address,
        values.get("MLFLOW_TRACKING_URI") or None,
        values.get("SCALING_STORAGE") or None,
        values.get("RAY_AUTH_MODE") or None,
        str(path),
    )


def node_types(config: dict) -> list[NodeType]:
    """The worker node types of an autoscaling config (`ray up`'s ~/ray_bootstrap_config.yaml)."""
    cap = int(config.get("max_workers", 0) or 0)  # across all worker types
    types = []
    for name, spec in (config.get("available_node_types") or {}).items():
        resources = spec.get("resources") or None
        types.append(
            NodeType(
                name,
                {k: float(v) for k, v in resources.items()} if resources else None,
                min(int(spec.get("max_workers", cap) or 0), cap),
                accelerator_of(resources, (spec.get("node_config") or {}).get("InstanceType", "")),
            )
        )
    return [t for t in types if t.max_workers > 0]


def read_node_types(path: str | Path = AUTOSCALING_CONFIG) -> list[NodeType]:
    """The node types of the autoscaling config at ``path``; none when it is missing or unreadable."""
    try:
        config = yaml.safe_load(Path(path).expanduser().read_text())
    except (OSError, yaml.YAMLError):
        return []
    return node_types(config) if isinstance(config, dict) else []


def describe(types: list[NodeType]) -> str:
    shown = []
    for t in types:
        res = (
            "resources known when it joins"
            if t.resources is None
            else ", ".join(f"{k}={v:g}" for k, v in sorted(t.resources.items()))
        )
        shown.append(f"{t.name} [{res}] x{t.max_workers}")
    return "; ".join(shown) or "(none)"


def could_start(request: dict[str, float], types: list[NodeType]) -> bool:
    """Whether the autoscaler could start a node that holds ``request`` (Ray resource names) on itself;
    a node type whose resources Ray learns only when it joins might."""
    return any(
        t.resources is None
        or all(t.resources.get(name, 0.0) >= amount for name, amount in request.items() if amount > 0)
        for t in types
    )


def waiting_for_autoscaler(
    unmet: list[tuple[str, dict[str, float]]], types: list[NodeType]
) -> tuple[list[str], list[str]]:
    """Split cells that no live node holds (``(label, Ray request)`` pairs) into those a node type of the
    autoscaler could hold (they wait for it) and those none could ever hold (the driver refuses them)."""
    waiting = [label for label, request in unmet if could_start(request, types)]
    never = [label for label, request in unmet if not could_start(request, types)]
    return waiting, never
