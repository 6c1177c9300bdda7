"""Run documented commands' python invocations in one process, in order, for
tests/test_documented_commands.py: each as `python -m MODULE ARGS` / `python SCRIPT ARGS` would run it
(runpy, as __main__, with sys.argv set), its exit status and output recorded. One process saves each
command the interpreter's start and the imports of torch, Ray and MLflow (~5 s a command on 2 cores).

    python tests/documented_runner.py WORKDIR RESULTS.jsonl < invocations.json

An invocation is {"argv": [...], "mode": "run" | "parse"}: `parse` only parses the arguments with the
tool's own parser (benchmarks, which take minutes). The environment is restored after each one. Each
result is appended as a line as soon as it is known, so a command that ends the process is found out.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import runpy
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TAIL = 4000


def redirected(fd: int, into) -> int:
    saved = os.dup(fd)
    os.dup2(into.fileno(), fd)
    return saved


def entry_module(argv: list[str]):
    """The module `python ARGV[1:]` runs as __main__ (a package's __main__, a script), imported as such."""
    if argv[1] == "-m":
        spec = importlib.util.find_spec(argv[2])
        if spec is None:
            raise SystemExit(f"{sys.executable}: No module named {argv[2]}")
        name = f"{argv[2]}.__main__" if spec.submodule_search_locations else argv[2]
        return importlib.import_module(name)
    spec = importlib.util.spec_from_file_location(Path(argv[1]).stem, argv[1])
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


def run_one(argv: list[str], mode: str) -> int:
    """The exit status of `python ARGV[1:]`, run in this process: the entry point's main(args) (every
    tool of the project is a thin main; their `__main__` blocks only exit with its status, some through
    os._exit), or the module as __main__ where it has no main."""
    args = argv[3:] if argv[1] == "-m" else argv[2:]
    module = entry_module(argv)
    if mode == "parse":
        module.parse_args(args)
        return 0
    if hasattr(module, "main"):
        sys.argv = [module.__file__, *args]
        return module.main(args) or 0
    sys.argv = [module.__file__, *args]
    runpy.run_module(module.__name__, run_name="__main__", alter_sys=True)
    return 0


def main() -> int:
    workdir = sys.argv[1]
    os.chdir(workdir)
    sys.path.insert(0, str(ROOT))
    invocations = json.load(sys.stdin)
    path = Path(sys.argv[2])
    environ = dict(os.environ)
    for item in invocations:
        with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
            sys.stdout.flush(), sys.stderr.flush()
            saved = redirected(1, out), redirected(2, err)
            start = time.monotonic()
            try:
                code = run_one(item["argv"], item["mode"])
            except SystemExit as exit:
                code = exit.code if isinstance(exit.code, int) else (0 if exit.code is None else 1)
            except BaseException:  # noqa: BLE001 - a traceback is a failed command
                traceback.print_exc()
                code = 1
            finally:
                sys.stdout.flush(), sys.stderr.flush()
                os.dup2(saved[0], 1), os.dup2(saved[1], 2)
                os.close(saved[0]), os.close(saved[1])
                os.environ.clear()
                os.environ.update(environ)
                os.chdir(workdir)
            out.seek(0), err.seek(0)
            output = {"stdout": out.read()[-TAIL:], "stderr": err.read()[-TAIL:]}
            output["seconds"] = round(time.monotonic() - start, 2)
            with path.open("a") as results:
                results.write(json.dumps({"call": item, "code": code, **output}) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
