"""The driver-to-trial contract (scaling.trial.run runs it): the cells of one trial and where they log and
checkpoint, carried in Tune's config as one JSON text. Its own module, without torch, so the driver's
planning and progress view (scaling.sweep.progress) read it without loading the trial's code."""

from __future__ import annotations

import dataclasses
import functools
import json
from dataclasses import dataclass
from typing import Any

from scaling.cells import Cell


@dataclass(frozen=True)
class TrialMember:
    """One cell of a trial: its dict (scaling.cells.Cell.to_dict), key and run name."""

    cell: dict[str, Any]
    key: str
    name: str


@dataclass(frozen=True)
class TrialSpec:
    """The driver-to-trial contract: the cells of one trial and where they log and checkpoint.

    ``members`` holds one cell, or the cells of a pack; ``key`` and ``name`` name the trial (a cell's own,
    or scaling.budget.packing.pack_key's); ``resources`` are Tune's (``{"cpu": 1, "gpu": 0.25, ...}``);
    ``tracking_uri`` is redacted when it holds credentials (the trial's environment has the real one);
    ``driver`` names the driver in the cells' leases.
    """

    members: tuple[TrialMember, ...]
    key: str
    name: str
    resources: dict[str, float]
    tracking_uri: str
    experiment_id: str
    sweep: str
    storage: str
    parent_run_id: str | None = None
    driver: str = ""

    @property
    def is_pack(self) -> bool:
        return len(self.members) > 1

    @property
    def keys(self) -> list[str]:
        return [m.key for m in self.members]

    def cells(self) -> list[Cell]:
        return [Cell.from_dict(m.cell) for m in self.members]

    def to_dict(self) -> dict[str, Any]:
        """Plain form for Tune's param space (and its experiment state)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> "TrialSpec":
        members = tuple(TrialMember(**m) for m in data["members"])
        return cls(**{**data, "members": members})

    def config(self) -> dict[str, str]:
        """The trial's Tune config: the spec as JSON text, one leaf. Tune's variant generator deep-copies
        the whole unresolved search space for every trial it makes, so a grid over the specs' dicts cost
        O(trials^2) (1,250 packs of 10,000 cells: minutes before the first trial started); a list of
        preset points whose one value is a string costs O(trials)."""
        return {"spec": json.dumps(self.to_dict())}


@functools.lru_cache(maxsize=4096)
def _parsed(text: str) -> dict[str, Any]:
    return json.loads(text)


def spec_in(config: dict[str, Any]) -> dict[str, Any]:
    """The spec dict of a trial's Tune config (TrialSpec.config), parsed once per text (the driver's
    callbacks ask at every result); callers must not change it."""
    return _parsed(config["spec"])
