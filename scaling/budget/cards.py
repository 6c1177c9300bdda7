"""The GPU memory the driver plans a cell's pack for: the card the cell's trial will run on.

A trial sizes its pack again to the device it holds (scaling.trial.devices.trial_memory); the driver plans the
packs, the trial count and --dry-run's hours for the memory of that card, from, in order:

1. ``--gpu-memory SIZE`` (``parse_memory``: 24GiB, 80GB, ...), for every GPU cell;
2. what the cluster says: the GPU nodes alive in Ray (their card's memory read there, else their
   ``accelerator_type:X`` resource through ``KNOWN_CARDS``) and the node types the autoscaler of a
   `ray up` cluster can start (their ``accelerator_type:X`` resource, which `ray up` fills in on AWS, or
   their AWS instance type through ``INSTANCE_CARDS``); a cell plans for the smallest card among those
   whose resources hold it (``Cards.card_for``);
3. the card the CUDA cost table was measured on, said as such (``table_card``).

No Ray here (scaling.sweep.card_probe reads the live nodes; --dry-run never starts Ray).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

GIB = 2**30

# The memory torch reports (total_memory) for cards Ray names by `accelerator_type:X` (its NVIDIA names:
# ray.util.accelerators), rounded down. A name that covers several sizes has the smallest, with the others
# said (the packs are then planned for the smallest; --gpu-memory plans for the one the cluster has).
KNOWN_CARDS: dict[str, tuple[float, str]] = {
    "T4": (14.7 * GIB, ""),
    "A10G": (22.0 * GIB, ""),
    "L4": (21.9 * GIB, ""),
    "L40S": (44.3 * GIB, ""),
    "V100": (15.7 * GIB, "V100 is a 16 or 32 GB card"),
    "A100": (39.3 * GIB, "A100 is a 40 or 80 GB card"),
    "A100-40G": (39.3 * GIB, ""),
    "A100-80G": (79.1 * GIB, ""),
    "H100": (79.1 * GIB, ""),
    "H200": (139.7 * GIB, ""),
}

# AWS instance families -> their card (as Ray names it), for a node type whose resources do not say it.
INSTANCE_CARDS = {
    "g4dn": "T4",
    "g5": "A10G",
    "g6": "L4",
    "g6e": "L40S",
    "p3": "V100",
    "p4d": "A100-40G",
    "p4de": "A100-80G",
    "p5": "H100",
    "p5e": "H200",
    "p5en": "H200",
}

UNITS = {
    "b": 1,
    "kb": 1e3,
    "mb": 1e6,
    "gb": 1e9,
    "tb": 1e12,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}
SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]+)\s*$", re.I)


@dataclass(frozen=True)
class Card:
    """One card a cell may run on: its memory, its name, where that came from, and the resources of the
    node (type) that has it (None: any cell's)."""

    memory_bytes: float
    name: str
    where: str
    resources: dict[str, float] | None = None
    note: str = ""

    def describe(self) -> str:
        """The plan line's words: '22.0 GiB cards (A10G, the autoscaler's node type gpu.a10g.spot)'."""
        note = f"; {self.note}" if self.note else ""
        return f"{self.memory_bytes / GIB:.1f} GiB cards ({self.name}, {self.where}{note})"


def parse_memory(text: str, flag: str = "--gpu-memory") -> float:
    """The bytes of a size such as 24GiB or 80GB; a ValueError that says what is allowed."""
    match = SIZE.match(str(text))
    unit = UNITS.get(match.group(2).lower()) if match else None
    value = float(match.group(1)) * unit if unit else 0.0
    if not 0 < value < float("inf"):
        raise ValueError(
            f"{flag} {text!r}: give the GPU's memory as a number > 0 with a unit, e.g. 24GiB or 80GB"
            " (units: B, KB, MB, GB, TB, KiB, MiB, GiB, TiB)"
        )
    return value


def stated_card(text: str) -> Card:
    """The card of ``--gpu-memory``."""
    return Card(parse_memory(text), "as stated", f"--gpu-memory {text}")


def known_card(accelerator: str, where: str, resources: dict[str, float] | None) -> Card | None:
    """The card Ray names ``accelerator`` (KNOWN_CARDS), on a node (type) ``where``; None if unknown."""
    if accelerator not in KNOWN_CARDS:
        return None
    memory, note = KNOWN_CARDS[accelerator]
    if note:
        note += ": planned for the smaller; pass --gpu-memory if yours are larger"
    return Card(memory, accelerator, where, resources, note)


def accelerator_of(resources: dict[str, float] | None, instance_type: str = "") -> str | None:
    """The card a node (type) has: its ``accelerator_type:X`` resource (of several, one of a single size
    first: the A100-80G a user added beside Ray's A100), else its AWS instance family's."""
    named = [name.split(":", 1)[1] for name in resources or {} if name.startswith("accelerator_type:")]
    named.sort(key=lambda card: (card not in KNOWN_CARDS, bool(KNOWN_CARDS.get(card, (0, ""))[1])))
    if named:
        return named[0]
    return INSTANCE_CARDS.get(str(instance_type).split(".")[0]) if instance_type else None


def type_card(node_type) -> Card | None:
    """The card of an autoscaler node type (scaling.sweep.cluster.NodeType) with a GPU; None if it has none or
    its card is unknown."""
    resources = node_type.resources
    if resources is not None and resources.get("GPU", 0) <= 0:
        return None
    accelerator = node_type.accelerator
    if accelerator is None:
        return None
    return known_card(accelerator, f"the autoscaler's node type {node_type.name}", resources)


def table_card(table: dict) -> Card:
    """The card the CUDA cost table was measured on: what packs are planned for when nothing else is known."""
    return Card(
        float(table["memory_bytes"]),
        table["device"],
        "the cost table's card: no other card known here; pass --gpu-memory SIZE for yours",
    )


def fits(request: dict[str, float], resources: dict[str, float] | None) -> bool:
    """Whether a node (type) with ``resources`` (None: learnt when it joins) holds a Ray request."""
    return resources is None or all(
        resources.get(name, 0.0) >= amount for name, amount in request.items() if amount > 0
    )


@dataclass(frozen=True)
class Cards:
    """The cards the run's GPU cells may land on, and the one planned for where none is known."""

    cards: tuple[Card, ...]
    fallback: Card | None

    def card_for(self, request: dict[str, float]) -> Card | None:
        """The smallest card among those whose node (type) holds ``request``; else the fallback."""
        held = [card for card in self.cards if fits(request, card.resources)]
        return min(held, key=lambda card: card.memory_bytes) if held else self.fallback


def planned_for(cards: list[Card]) -> str:
    """The line that says which memory the GPU packs were planned for (each card used once)."""
    shown = list(dict.fromkeys(card.describe() for card in cards))
    return "GPU packs planned for " + "; ".join(shown)


def type_cards(node_types) -> list[Card]:
    """The known cards of the autoscaler's GPU node types (scaling.sweep.cluster.NodeType)."""
    return [card for card in map(type_card, node_types) if card is not None]


def run_cards(stated: str | None, found: list[Card], table: dict | None) -> Cards | None:
    """The cards a run plans its GPU packs for: ``stated`` (--gpu-memory) for every cell, else the cards
    ``found`` on the cluster, else (for a cell none of them holds) the table's card; None without a table
    (nothing sizes GPU packs)."""
    if table is None:
        return None
    if stated:
        return Cards((stated_card(stated),), None)
    return Cards(tuple(found), table_card(table))
