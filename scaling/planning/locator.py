"""Where in a sweep file a setting is written: a key path of the document as 'file:line: a.b.c', or as the
``--set`` that set it, for errors that say where (scaling.planning.plan)."""

from __future__ import annotations

from typing import Any

from scaling.config import ConfigError


class SweepError(ValueError):
    """A sweep file (or an override of it) is invalid; the message says where and what."""


class Locator:
    """Turns a key path of the document into 'file:line: a.b.c', or '--set k=v: a.b.c' for a path that an
    override set (``overrides``: key path -> the assignment)."""

    def __init__(self, source: str, lines: dict, overrides: dict | None = None):
        self.source, self.lines, self.overrides = source, lines, overrides or {}

    def __call__(self, *path: Any) -> str:
        path = tuple(p for p in path if p != "")
        for keys, assignment in self.overrides.items():
            if path[: len(keys)] == keys or (len(path) >= 2 and keys[: len(path)] == path):
                dotted = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")
                return f"--set {assignment}: {dotted}"
        for cut in range(len(path), -1, -1):
            if path[:cut] in self.lines:
                line = self.lines[path[:cut]]
                break
        else:
            line = None
        dotted = ".".join(f"[{p}]" if isinstance(p, int) else str(p) for p in path).replace(".[", "[")
        where = f"{self.source}:{line}" if line else self.source
        return f"{where}: {dotted}" if dotted else where

    def error(self, path: tuple, err: Exception) -> SweepError:
        if isinstance(err, ConfigError) and err.where:
            message = str(err)[len(err.where) + 2 :]
            return SweepError(f"{self(*path, *err.where.split('.'))}: {message}")
        return SweepError(f"{self(*path)}: {err}")
