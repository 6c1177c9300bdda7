"""The experiment kinds as a plug-in point (scaling.plugins): a cell's ``job`` names its kind, a registered
name (this project's, in pyproject.toml's ``icl_scaling.kinds``: ``train``, the default, the temperature
scans, the constructions) or a researcher's own ``module:NAME``. Nothing here lists the kinds' names: the
registry is the entry points, and nothing else branches on a kind's name.
"""

from __future__ import annotations

from scaling.config import ConfigError
from scaling.kinds import Kind
from scaling.plugins import Point, names, resolve

DEFAULT_KIND = "train"
POINT = Point(
    "kinds",
    "experiment kind",
    "a scaling.kinds.Kind",
    check=lambda obj: "" if isinstance(obj, Kind) else f"a {type(obj).__name__}, not a scaling.kinds.Kind",
)


def kind(name: str, where: str = "job") -> Kind:
    """The kind ``name`` names; an unknown one is a ConfigError listing the known ones."""
    found = resolve(POINT, name, where).obj
    if ":" not in name and found.name != name:
        raise RuntimeError(f"the kind registered as {name!r} calls itself {found.name!r}")
    return found


def kind_names() -> list[str]:
    """The registered kinds' names."""
    return names(POINT)


def kind_of_group(group: str, jobs: tuple[str, ...] = ()) -> Kind | None:
    """The first kind whose own settings are given under ``group``: among ``jobs`` (a cell's or a sweep's
    kinds, which may be a researcher's own), then the registered ones."""
    for name in (*jobs, *kind_names()):
        try:
            found = kind(name)
        except ConfigError:  # a cell's unknown job: its own validation says so, where it is written
            continue
        if found.group == group:
            return found
    return None
