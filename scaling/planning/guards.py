"""Checks on what a user hands the driver, run before anything is written (pure, no Ray, no MLflow).

- the sweep file: a regular file, at most ``MAX_SWEEP_BYTES``, UTF-8 text; its YAML nested at most
  ``MAX_YAML_DEPTH`` levels and its aliases expanding to at most ``MAX_YAML_VALUES`` values (a few hundred
  bytes of nested aliases would otherwise build gigabytes while the planner maps keys to lines);
- the lattice: at most ``MAX_CELLS`` cells unless ``--max-cells`` allows more, sized from the axes'
  lengths before any cell is built;
- resource flags in range; ``--address host:port`` answering within seconds (Ray itself retries for a
  minute and more);
- the storage writable: a small file is written and deleted where the sweep's storage will live (the
  nearest existing parent of a local path that does not exist yet, so nothing is left behind).

Each failure is a ``GuardError`` whose message says what, where and what is allowed.
"""

from __future__ import annotations

import difflib
import math
import socket
import uuid
from pathlib import Path
from typing import Any

import yaml

MAX_SWEEP_BYTES = 1 << 20
MAX_YAML_DEPTH = 50
MAX_YAML_VALUES = 100_000
MAX_CELLS = 10_000
ADDRESS_TIMEOUT_S = 5.0


class GuardError(ValueError):
    """Bad input caught before any work; the message says what, where and what is allowed."""


def read_sweep_text(path: str | Path) -> str:
    """The sweep file's text: a regular file of at most 1 MB of UTF-8 without NUL bytes."""
    path = Path(path)
    if path.is_dir():
        raise GuardError(f"{path}: is a directory; give a sweep file (e.g. sweeps/smoke.yaml)")
    if not path.is_file():
        raise GuardError(f"{path}: no such sweep file{did_you_mean(path)}")
    size = path.stat().st_size
    if size > MAX_SWEEP_BYTES:
        raise GuardError(
            f"{path}: {size / (1 << 20):.1f} MB; a sweep file is at most {MAX_SWEEP_BYTES >> 20} MB of"
            f" YAML (list long axes as ranges of a few values, or split the sweep)"
        )
    blob = path.read_bytes()
    try:
        text = blob.decode("utf-8")
    except UnicodeDecodeError as err:
        raise GuardError(
            f"{path}: not a text file (byte 0x{blob[err.start]:02x} at offset {err.start} is not"
            f" UTF-8); a sweep file is YAML text"
        ) from None
    if "\x00" in text:
        raise GuardError(
            f"{path}: not a text file (it holds NUL bytes at offset {text.index(chr(0))});"
            f" a sweep file is YAML text"
        )
    return text


def did_you_mean(path: Path) -> str:
    """'; did you mean sweeps/smoke.yaml?' for the sweep file nearest in spelling to a missing ``path``
    among the YAML files of its nearest existing folder and of the folders in it (sweeps/smok.yaml,
    sweep/smoke.yaml), else one of its name in those folders (smoke.yaml); '' when none is near."""
    folder = nearest_existing(path.parent)
    found = [p for pattern in ("*.y*ml", "*/*.y*ml") for p in sorted(folder.glob(pattern))]
    near = difflib.get_close_matches(str(path), [str(p) for p in found], n=1, cutoff=0.75)
    near = near or [str(p) for p in found if p.name == path.name]
    return f"; did you mean {near[0]}?" if near else ""


def check_yaml_shape(text: str, source: str) -> None:
    """Refuse YAML nested deeper than MAX_YAML_DEPTH or whose aliases expand past MAX_YAML_VALUES values,
    from the parser's event stream (nothing is built, no alias is expanded)."""
    loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
    depth, total = 0, 0
    sizes: dict[str, int] = {}
    open_anchors: list[tuple[str | None, int]] = []
    try:
        for event in yaml.parse(text, Loader=loader):
            if isinstance(event, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
                depth += 1
                total += 1
                if depth > MAX_YAML_DEPTH:
                    raise GuardError(
                        f"{source}:{event.start_mark.line + 1}: YAML nested deeper than"
                        f" {MAX_YAML_DEPTH} levels; a sweep file needs a handful"
                    )
                open_anchors.append((event.anchor, total))
            elif isinstance(event, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
                depth -= 1
                anchor, start = open_anchors.pop()
                if anchor:
                    sizes[anchor] = total - start + 1
            elif isinstance(event, yaml.ScalarEvent):
                total += 1
                if event.anchor:
                    sizes[event.anchor] = 1
            elif isinstance(event, yaml.AliasEvent):
                total += sizes.get(event.anchor, 1)
            if total > MAX_YAML_VALUES:
                line = event.start_mark.line + 1 if event.start_mark else "?"
                raise GuardError(
                    f"{source}:{line}: YAML aliases expand to more than {MAX_YAML_VALUES} values"
                    f" (an alias bomb?); write the values out, or use fewer aliases"
                )
    except yaml.YAMLError as err:
        if "nesting" in str(getattr(err, "problem", "")):  # libyaml's own limit (1000 levels)
            mark = getattr(err, "problem_mark", None)
            line = f":{mark.line + 1}" if mark else ""
            raise GuardError(
                f"{source}{line}: YAML nested deeper than {MAX_YAML_DEPTH} levels; a sweep file"
                f" needs a handful"
            ) from None
        return  # other malformed YAML: the planner's parser reports it with its line


def lattice_size(axes: dict[str, list]) -> int:
    return math.prod(len(values) for values in axes.values())


def check_lattice(axes: dict[str, list], where: str, max_cells: int | None) -> None:
    """Refuse a grid of more than ``max_cells`` (default MAX_CELLS) cells before any is built."""
    cap = MAX_CELLS if max_cells is None else max_cells
    size = lattice_size(axes)
    if size > cap:
        shape = " x ".join(f"{axis} {len(values)}" for axis, values in axes.items())
        raise GuardError(
            f"{where}: the grid makes {size} cells ({shape}), more than the cap of {cap};"
            f" pass --max-cells {size} to run it anyway"
        )


def check_whole(flag: str, value: Any, minimum: int) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < minimum):
        raise GuardError(f"{flag}: must be a whole number >= {minimum}, got {value}")


def check_flags(num_cpus: Any, num_gpus: Any, max_cells: Any) -> None:
    check_whole("--num-cpus", num_cpus, 1)
    check_whole("--num-gpus", num_gpus, 0)
    check_whole("--max-cells", max_cells, 1)


def address_endpoint(address: str) -> tuple[str, int] | None:
    """(host, port) of an ``--address`` to probe; None for ``auto`` and ``ray://`` client addresses."""
    if address == "auto" or "://" in address:
        return None
    host, sep, port = address.rpartition(":")
    if not sep or not host or not port.isdigit() or (":" in host and not host.startswith("[")):
        raise GuardError(
            f"--address {address}: expected 'auto' or host:port (e.g. 10.0.0.5:6379), or"
            f" leave it out for a local Ray"
        )
    return host.strip("[]"), int(port)


def check_address(address: str | None, timeout: float = ADDRESS_TIMEOUT_S) -> None:
    """A host:port address must accept a TCP connection within ``timeout`` seconds."""
    endpoint = address_endpoint(address) if address else None
    if endpoint is None:
        return
    try:
        with socket.create_connection(endpoint, timeout=timeout):
            pass
    except OSError as err:
        reason = "no answer" if isinstance(err, socket.timeout) else err.strerror or str(err)
        raise GuardError(
            f"cannot reach a Ray cluster at {address}: {reason} within {timeout:g}s; start one"
            f" there (ray start --head), or leave out --address for a local Ray"
        ) from None


def nearest_existing(path: Path) -> Path:
    while not path.exists() and path != path.parent:
        path = path.parent
    return path


def probe_storage(uri: str) -> None:
    """Write and delete a small file where the storage lives; GuardError when that fails."""
    from pyarrow import fs as pafs

    try:
        if "://" not in uri or uri.startswith("file://"):
            local = Path(uri[len("file://") :] if uri.startswith("file://") else uri)
            base = nearest_existing(local)
            if not base.is_dir():
                raise GuardError(f"cannot use the storage {uri}: {base} is not a directory")
            probe = base / f".scaling-probe-{uuid.uuid4().hex}"
            probe.write_bytes(b"probe")
            probe.unlink()
            return
        filesystem, root = pafs.FileSystem.from_uri(uri)
        probe = f"{root}/.scaling-probe-{uuid.uuid4().hex}"
        with filesystem.open_output_stream(probe) as out:
            out.write(b"probe")
        filesystem.delete_file(probe)
    except GuardError:
        raise
    except Exception as err:  # noqa: BLE001 - any failure to write means unusable storage
        raise GuardError(f"cannot write to the storage {uri}: {err}") from None
