"""Plug-ins: how a name in a sweep file becomes code (docs/extending.md).

A plug-in point is one kind of thing a cell names, each with a small interface of its own, declared by the
code that uses it (``Point``): an experiment kind (``job``: scaling.kinds), and for the training kind a task
family (``task.family``), a model (``model.arch``), a feature map (``model.feature_map``) and a baseline (an
entry of ``eval.baselines``: papers/context_scaling/plugins.py). A name is either

- ``module:Name``: the object ``Name`` of ``module``, a module in the folder of the sweep file that names it
  (``search_folder``) or on the Python path: a researcher's own file, or
- a registered name (``linear``, ``gpt2``, ``train``): an entry point of the group ``icl_scaling.<point>``
  of an installed distribution, whose value is a ``module:Name``. This project registers its own built-ins
  that way, in pyproject.toml (read from there when the project runs from a checkout that is not installed).

A plug-in is imported the first time a name asks for it (never while modules are imported, so the core
imports no paper's code) and checked against its point's interface; a missing module or attribute, an import
that raises, or an object of the wrong kind is a ConfigError that names the plug-in and what is wrong, raised
while planning, before anything is written. A plug-in named by ``module:Name`` declares a ``version``
(a string): the version is part of its cells' keys (scaling.cells.Cell.versions) and the hash of its module's
source is recorded on their runs, so results of different code are never mixed (scaling.provenance). A
built-in whose numbers change declares a version through its point (``Point.builtin_version``, read without
importing it), which its cells' keys hold too.
"""

from __future__ import annotations

import functools
import hashlib
import importlib
import importlib.metadata
import re
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

from scaling.config import ConfigError

GROUP = "icl_scaling.{point}"  # the entry-point group of a point's registered names
PROJECT = "icl-scaling"  # this project's distribution, whose built-ins pyproject.toml registers
ROOT = Path(__file__).resolve().parents[1]  # the checkout (or site-packages) the project runs from
OWN_PACKAGES = ("scaling", "analysis", "papers")  # this project's, which every worker runs
REFERENCE = re.compile(r"^([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)*):([A-Za-z_]\w*)$")


@dataclass(frozen=True)
class Point:
    """A plug-in point: ``name`` (its entry-point group is ``icl_scaling.<name>``), ``what`` it is in words
    ('task family'), ``interface``: what an object must be to be one, in words for errors, ``check``: the
    object's problem as a point's user sees it ('' when it is one), and ``builtin_version``: the version this
    project declares for one of its own built-ins, read without importing it ('' for none: the default)."""

    name: str
    what: str
    interface: str
    check: Callable[[Any], str] = lambda obj: ""
    builtin_version: Callable[[str], str] = lambda name: ""


@dataclass(frozen=True)
class Plugin:
    """A loaded plug-in: the name a cell gives it, the ``module:Name`` it is, the object, the version it
    declares ('' for none), its module's file and a hash of its source, whether an installed distribution
    registered it (``registered``; else a sweep named its module) and whether that is this project
    (``builtin``)."""

    point: str
    name: str
    reference: str
    obj: Any
    version: str
    path: str
    source: str
    registered: bool
    builtin: bool

    def provenance(self) -> dict[str, str]:
        """What a run records of the plug-in it ran with."""
        return {"point": self.point, "name": self.name, "version": self.version, "source": self.source}


_folders: list[Path] = []  # folders of the sweep files planned in this process, searched first
_loaded: dict[tuple[str, str], Plugin] = {}


def refresh() -> None:
    """Forget the registered names and the plug-ins loaded (a package installed while this process runs)."""
    _entries.cache_clear()
    _project_entries.cache_clear()
    _loaded.clear()


def search_folder(folder: str | Path) -> None:
    """Look for ``module:Name`` modules in ``folder`` (a sweep file's) before the Python path and before the
    folders of the sweeps planned earlier in this process."""
    folder = Path(folder).resolve()
    if folder in _folders:
        _folders.remove(folder)
    _folders.insert(0, folder)


def registered(point: Point) -> dict[str, str]:
    """The point's registered names and their ``module:Name`` (this project's first, then each installed
    distribution's, in their order); a name registered twice to different objects is an error when used."""
    return {name: refs[0][0] for name, refs in _entries(point.name).items()}


def names(point: Point) -> list[str]:
    return list(registered(point))


def is_registered(point: Point, name: str) -> bool:
    """Whether ``name`` is a registered name of the point (nothing imported)."""
    return name in _entries(point.name)


def is_builtin(point: Point, name: str) -> bool:
    """Whether ``name`` is one of this project's own registered names at the point (nothing imported)."""
    refs = _entries(point.name).get(name, [])
    return len(refs) == 1 and refs[0][1] == PROJECT


def is_reference(name: str) -> bool:
    """Whether ``name`` reads as ``module:Name``."""
    return bool(REFERENCE.match(name))


def known(point: Point, name: str) -> bool:
    """Whether ``name`` could name a plug-in of the point: registered, or written as ``module:Name`` (checked
    when loaded)."""
    return is_registered(point, name) or is_reference(name)


def resolve(point: Point, name: str, where: str = "") -> Plugin:
    """The plug-in ``name`` names at ``point``, imported and checked once per process; a ConfigError at
    ``where`` says what is wrong and what is allowed."""
    key = (point.name, name)
    if key not in _loaded:
        _loaded[key] = _load(point, name, where)
    elif not _loaded[key].registered:  # the sweep planned now may have a module of that name of its own
        _prefer_folders(_loaded[key].reference.split(".")[0].split(":")[0], where)
    return _loaded[key]


def loaded(*, registered_too: bool = False) -> list[Plugin]:
    """The plug-ins loaded in this process, in order (those a sweep named by ``module:Name`` unless
    ``registered_too``)."""
    return [p for p in _loaded.values() if registered_too or not p.registered]


def modules_to_ship() -> list[str]:
    """The files (or package folders) of the modules of the ``module:Name`` plug-ins loaded here that a
    Ray worker on another node may not have: what the driver hands Ray's runtime environment
    (``py_modules``), so the cluster's workers import them with no install (scaling.sweep.ray_start). A
    module of an installed distribution, or of this project's own packages, is every worker's already."""
    shipped: list[str] = []
    for plugin in loaded():
        top = plugin.reference.split(":")[0].split(".")[0]
        file = getattr(sys.modules.get(top), "__file__", None)
        if not file or top in OWN_PACKAGES or _installed(Path(file)):
            continue
        path = Path(file)
        path = str(path.parent if path.name == "__init__.py" else path)
        if path not in shipped:
            shipped.append(path)
    return shipped


def _installed(path: Path) -> bool:
    """Whether a module file is part of an installed distribution (every worker's environment has it)."""
    parts = path.resolve().parts
    return "site-packages" in parts or "dist-packages" in parts


def _load(point: Point, name: str, where: str) -> Plugin:
    refs = _entries(point.name).get(name)
    if refs is not None:
        if len({ref for ref, _ in refs}) > 1:
            twice = ", ".join(f"{ref} ({dist})" for ref, dist in refs)
            raise ConfigError(
                where, f"{point.what} {name!r} is registered twice: {twice}; name it as module:Name"
            )
        (reference, dist), registered_ = refs[0], True
    elif is_reference(name):
        reference, dist, registered_ = name, "", False
    else:
        known_names = ", ".join(_entries(point.name)) or "(none registered)"
        raise ConfigError(
            where, f"unknown {point.what} {name!r}; known: {known_names}; or your own as module:Name"
        )
    obj, path = _import(point, name, reference, where)
    problem = point.check(obj)
    if problem:
        raise ConfigError(where, f"{point.what} {name!r} ({reference}) is not one: {problem}")
    version = getattr(obj, "version", "")
    if not isinstance(version, str) or (not registered_ and not version.strip()):
        raise ConfigError(
            where,
            f"{point.what} {name!r} declares no version: give it version = '1' (a string, part of its cells'"
            " keys; change it when the plug-in computes something else)",
        )
    builtin = dist == PROJECT
    source = "" if builtin else source_hash(path)
    return Plugin(point.name, name, reference, obj, version.strip(), str(path), source, registered_, builtin)


def _import(point: Point, name: str, reference: str, where: str) -> tuple[Any, Path]:
    """The object ``reference`` names and its module's file, the sweep files' folders searched first."""
    module_name, _, attribute = reference.partition(":")
    _prefer_folders(module_name.split(".")[0], where)
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as err:
        if err.name and module_name.startswith(err.name):
            looked = ", ".join(str(f) for f in _folders) + (" and " if _folders else "") + "the Python path"
            raise ConfigError(
                where, f"{point.what} {name!r}: no module {module_name!r} in {looked}"
            ) from None
        raise ConfigError(where, f"{point.what} {name!r}: importing {module_name} failed: {err}") from None
    except Exception as err:  # a plug-in's own import raised: say so, before anything runs
        raise ConfigError(
            where, f"{point.what} {name!r}: importing {module_name} raised {type(err).__name__}: {err}"
        ) from None
    if not hasattr(module, attribute):
        public = [
            n
            for n, v in vars(module).items()
            if not n.startswith("_") and getattr(v, "__module__", None) == module.__name__
        ]
        hint = f"; it has {', '.join(public[:8])}" if public else ""
        raise ConfigError(where, f"{point.what} {name!r}: module {module_name} has no {attribute!r}{hint}")
    return getattr(module, attribute), Path(getattr(module, "__file__", "") or "")


def _prefer_folders(top: str, where: str = "") -> None:
    """Put the first sweep folder holding module ``top`` (``top.py`` or ``top/``) at the front of the Python
    path, so the sweep's own module is the one imported."""
    for folder in _folders:
        if (folder / f"{top}.py").is_file() or (folder / top / "__init__.py").is_file():
            if str(folder) in sys.path:
                sys.path.remove(str(folder))
            sys.path.insert(0, str(folder))
            cached = sys.modules.get(top)
            if cached is not None and not str(getattr(cached, "__file__", "")).startswith(str(folder)):
                raise ConfigError(
                    where,
                    f"module {top!r} is already imported from {cached.__file__}, not from {folder}: rename"
                    " the sweep folder's module",
                )
            return


def source_hash(path: str | Path) -> str:
    """A hash of a plug-in's source: its module's file, or every .py file of its package."""
    path = Path(path)
    files = sorted(path.parent.rglob("*.py")) if path.name == "__init__.py" else [path]
    digest = hashlib.sha256()
    for file in files:
        if file.is_file():
            digest.update(str(file.relative_to(path.parent)).encode() + b"\0" + file.read_bytes() + b"\0")
    return digest.hexdigest()[:16]


@functools.cache
def _entries(point: str) -> dict[str, list[tuple[str, str]]]:
    """name -> (the ``module:Name``, the distribution) of each registration of it, this project's first."""
    found: dict[str, list[tuple[str, str]]] = {}
    own = _project_entries()
    for name, reference in (own or {}).get(GROUP.format(point=point), {}).items():
        found.setdefault(name, []).append((reference, PROJECT))
    for entry in importlib.metadata.entry_points(group=GROUP.format(point=point)):
        dist = getattr(entry, "dist", None)
        dist_name = PROJECT if dist is not None and _normal(dist.name) == _normal(PROJECT) else ""
        dist_name = dist_name or (dist.name if dist is not None else "")
        if own is not None and dist_name == PROJECT:
            continue  # the checkout's own pyproject.toml, read above, is the newer word
        found.setdefault(entry.name, []).append((entry.value, dist_name))
    return found


@functools.cache
def _project_entries() -> dict[str, dict[str, str]] | None:
    """The entry points this project's pyproject.toml declares, where the project runs from its checkout;
    None when it runs installed (its distribution's metadata says them)."""
    pyproject = ROOT / "pyproject.toml"
    if not pyproject.is_file():
        return None
    project = tomllib.loads(pyproject.read_text()).get("project", {})
    if _normal(project.get("name", "")) != _normal(PROJECT):
        return None
    return project.get("entry-points", {})


def _normal(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def load(reference: str) -> Any:
    """The object ``reference`` ("module:attribute") names, its module imported on the first ask (an
    analysis plug-in of a kind: scaling.kinds.Kind.analysis)."""
    module, colon, attribute = reference.partition(":")
    if not (module and colon and attribute):
        raise ValueError(f"a plug-in is named 'module:attribute', got {reference!r}")
    _prefer_folders(module.split(".")[0])
    return getattr(importlib.import_module(module), attribute)
