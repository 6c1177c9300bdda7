"""The cards of the GPU nodes alive in Ray (scaling.budget.cards): each node's card memory read there, by a
task that holds no CPU and no GPU (so busy nodes answer too) and creates no CUDA context (NVML, which Ray
ships), else its ``accelerator_type:X`` resource through scaling.budget.cards.KNOWN_CARDS."""

from __future__ import annotations

import ray
from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

from scaling.budget.cards import Card, accelerator_of, known_card

PROBE_TIMEOUT_S = 30.0


def node_card_memory() -> tuple[float, str] | None:
    """(bytes, name) of the smallest GPU of the node this runs on, read through NVML; None without one."""
    try:
        import ray._private.thirdparty.pynvml as pynvml

        pynvml.nvmlInit()
    except Exception:  # noqa: BLE001 - no NVIDIA driver here: the node's accelerator_type says instead
        return None
    try:
        found = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            name = pynvml.nvmlDeviceGetName(handle)
            name = name.decode() if isinstance(name, bytes) else str(name)
            found.append((float(pynvml.nvmlDeviceGetMemoryInfo(handle).total), name))
        return min(found) if found else None
    finally:
        pynvml.nvmlShutdown()


def live_cards(timeout: float = PROBE_TIMEOUT_S) -> list[Card]:
    """The card of every GPU node alive in Ray whose card can be read or is known (a node whose card is
    neither is left out: its trials size their packs on it)."""
    nodes = [n for n in ray.nodes() if n.get("Alive") and n["Resources"].get("GPU", 0) > 0]
    if not nodes:
        return []
    probe = ray.remote(num_cpus=0)(node_card_memory)
    refs = [
        probe.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote()
        for n in nodes
    ]
    ready, _ = ray.wait(refs, num_returns=len(refs), timeout=timeout)
    cards = []
    for node, ref in zip(nodes, refs):
        where, resources = f"node {node['NodeManagerAddress']}", dict(node["Resources"])
        measured = read(ref) if ref in ready else None
        if measured is not None:
            cards.append(Card(measured[0], measured[1], f"read on {where}", resources))
            continue
        card = known_card(accelerator_of(resources) or "", where, resources)
        if card is not None:
            cards.append(card)
    return cards


def read(ref) -> tuple[float, str] | None:
    """A probe's answer; None when it failed."""
    try:
        return ray.get(ref)
    except Exception:  # noqa: BLE001 - a probe that failed: the node's accelerator_type says instead
        return None
