"""Per-cell checkpoints on a local path or object store (any URI ``pyarrow.fs`` understands: a local or
network path, ``s3://``, ``gs://``), written atomically and verified on load.

Checkpoints are keyed by the cell (``<storage>/checkpoints/<cell key>/state.pt``), not by the Tune trial,
so they outlive any one driver: a rerun after a crash, or a sweep edited to add cells, continues each cell
from its own last checkpoint.

Integrity: a checkpoint file is a header line ``scaling-checkpoint sha256=<hex digest>`` and then the
``torch.save`` bytes the digest covers. A save writes a uniquely named temp file, moves the previous
checkpoint to ``previous.pt`` and the temp file into ``state.pt``, so the last good state survives a save
that dies half way. A load verifies the digest; a damaged or unreadable file (a flipped or zeroed block,
a truncated write, a full disk) is reported by name, moved aside to ``<name>.damaged`` and the load falls
back to ``previous.pt``, then to no checkpoint (the cell trains from scratch): never a silently wrong
state. Files written before digests existed (no header) load as before, their damage only detected where
torch cannot read them.
"""

from __future__ import annotations

import hashlib
import io
import logging
import uuid
from pathlib import Path
from typing import Callable

import torch
from pyarrow import fs as pafs

log = logging.getLogger(__name__)

MAGIC = b"scaling-checkpoint sha256="
FILES = ("state.pt", "previous.pt")  # newest first


class CheckpointDamaged(RuntimeError):
    """A checkpoint file fails its digest or cannot be read."""


def encode(state: dict) -> bytes:
    """The checkpoint file's bytes: the digest header, then torch's serialisation of ``state``."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + b"\n" + payload


def decode(blob: bytes) -> dict:
    """The state in a checkpoint file's bytes; CheckpointDamaged when its digest or torch says so."""
    if blob.startswith(MAGIC):
        header, _, payload = blob.partition(b"\n")
        expected = header[len(MAGIC) :].decode("ascii", "replace")
        actual = hashlib.sha256(payload).hexdigest()
        if actual != expected:
            raise CheckpointDamaged(
                f"its sha256 digest {actual[:12]}... differs from the one written"
                f" ({expected[:12]}...), {len(blob)} bytes"
            )
    else:
        payload = blob  # written before digests: torch's own checks only
        if not blob:
            raise CheckpointDamaged("it is empty")
    try:
        state = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001 - any failure to read is damage
        raise CheckpointDamaged(f"torch cannot read it: {str(err).splitlines()[0][:200]}") from None
    if not isinstance(state, dict) or "step" not in state:
        raise CheckpointDamaged("it holds no training state (no 'step')")
    return state


class CheckpointStore:
    """Per-cell checkpoints on a local path or object store (see the module docstring).

    ``guard(key)``, when given, runs before a checkpoint is moved into place and raises to stop a write
    (the trial's lease was taken over: scaling.leases).
    """

    def __init__(self, uri: str, guard: Callable[[str], None] | None = None):
        if "://" not in uri:
            uri = str(Path(uri).resolve())
        self.fs, self.root = pafs.FileSystem.from_uri(uri)
        self.guard = guard
        self.problems: dict[str, list[str]] = {}  # cell key -> damaged files found by the last load

    def _dir(self, key: str) -> str:
        return f"{self.root}/checkpoints/{key}"

    def _path(self, key: str, name: str = "state.pt") -> str:
        return f"{self._dir(key)}/{name}"

    def _exists(self, path: str) -> bool:
        return self.fs.get_file_info(path).type != pafs.FileType.NotFound

    def save(self, key: str, state: dict) -> None:
        blob = encode(state)
        path = self._path(key)
        self.fs.create_dir(self._dir(key), recursive=True)
        temp = f"{path}.{uuid.uuid4().hex}.tmp"  # unique: two writers never share a temp file
        try:
            with self.fs.open_output_stream(temp) as out:
                out.write(blob)
            if self.guard is not None:
                self.guard(key)
        except BaseException:
            self._remove(temp)
            raise
        if self._exists(path):
            self.fs.move(path, self._path(key, "previous.pt"))
        self.fs.move(temp, path)

    def _remove(self, path: str) -> None:
        try:
            if self._exists(path):
                self.fs.delete_file(path)
        except OSError as err:
            log.warning("could not remove %s: %s", path, err)

    def read(self, key: str, discard: bool = True) -> tuple[dict | None, list[str]]:
        """The newest good state of the cell (or None) and one line per damaged file found on the way;
        with ``discard`` each damaged file is moved aside to ``<name>.damaged``."""
        problems = []
        for name in FILES:
            path = self._path(key, name)
            if not self._exists(path):
                continue
            try:
                with self.fs.open_input_stream(path) as stream:
                    blob = stream.read()
                return decode(blob), problems
            except (CheckpointDamaged, OSError) as err:
                problems.append(f"checkpoint {path} is damaged: {err}")
                if discard:
                    self._discard(path)
        return None, problems

    def _discard(self, path: str) -> None:
        try:
            self.fs.move(path, f"{path}.damaged")
        except OSError as err:
            log.warning("could not move the damaged checkpoint %s aside: %s", path, err)

    def load(self, key: str) -> dict | None:
        """The newest good state of the cell, or None; damaged files are reported (logged, and kept in
        ``problems[key]`` for the cell's run), moved aside and skipped."""
        state, problems = self.read(key)
        self.problems[key] = problems
        for problem in problems:
            fallback = f"resuming from step {state['step']}" if state is not None else "training from scratch"
            log.warning("%s; discarded (kept as .damaged), %s", problem, fallback)
        return state

    def step(self, key: str) -> int | None:
        """The step of the cell's checkpoint, or None (for --dry-run)."""
        state, _ = self.read(key, discard=False)
        return None if state is None else int(state["step"])

    def inspect(self, key: str) -> tuple[int | None, list[str]]:
        """(step of the newest good checkpoint or None, damaged files), changing nothing (--dry-run)."""
        state, problems = self.read(key, discard=False)
        return (None if state is None else int(state["step"])), problems

    def clean(self, keys: list[str]) -> None:
        """Remove the temp files that interrupted saves of these cells left behind."""
        for key in keys:
            if not self._exists(self._dir(key)):
                continue
            for info in self.fs.get_file_info(pafs.FileSelector(self._dir(key))):
                if info.base_name.endswith(".tmp"):
                    self._remove(info.path)

    def delete(self, key: str) -> None:
        path = self._dir(key)
        if self._exists(path):
            self.fs.delete_dir(path)
