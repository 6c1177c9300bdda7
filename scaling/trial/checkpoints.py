"""Per-cell checkpoints on a local path or object store (any URI ``pyarrow.fs`` understands: a local or
network path, ``s3://``, ``gs://``), written atomically and verified on load.

Checkpoints are keyed by the cell (``<storage>/checkpoints/<cell key>/state.pt``), not by the Tune trial,
so they outlive any one driver: a rerun after a crash, or a sweep edited to add cells, continues each cell
from its own last checkpoint.

Integrity: a checkpoint file is a header line ``scaling-checkpoint sha256=<hex digest> step=<s> logged=<l>``
and then the ``torch.save`` bytes the digest covers. A save writes a uniquely named temp file, moves the
previous checkpoint to ``previous.pt`` and the temp file into ``state.pt``, so the last good state survives
a save that dies half way. A load verifies the digest; a damaged or unreadable file (a flipped or zeroed
block, a truncated write, a full disk) is reported by name, moved aside to ``<name>.damaged`` and the load
falls back to ``previous.pt``, then to no checkpoint (the cell trains from scratch): never a silently wrong
state. Files written before digests existed (no header) load as before, their damage only detected where
torch cannot read them.

Agreement with the tracking store: ``logged`` (the state's ``logged_through``) is the last training step
whose loss the cell's MLflow run held when the checkpoint was written; the losses after it ride in the
checkpoint. A run that now holds fewer (``behind``: the store was restored from a backup older than the
storage) cannot get its whole history from this checkpoint, so the cell is trained again from step 0 and
says so. The header carries the numbers, so the driver reads them for every pending cell (``peek``)
without downloading the states.

An object store that does not answer for a while (scaling.trial.storage: up to SCALING_STORAGE_RETRY_S, 300 s
by default) holds a save or a load up and is asked again, each step on its own (each is safe to repeat), so a
trial rides through the outage and loses nothing; a local path is never retried.
"""

from __future__ import annotations

import hashlib
import io
import logging
import uuid
from typing import Callable

from pyarrow import fs as pafs

from scaling.trial import storage

log = logging.getLogger(__name__)

MAGIC = b"scaling-checkpoint sha256="
FILES = ("state.pt", "previous.pt")  # newest first


class CheckpointDamaged(RuntimeError):
    """A checkpoint file fails its digest or cannot be read."""


def encode(state: dict) -> bytes:
    """The checkpoint file's bytes: the header (digest, step, logged_through), then torch's serialisation of
    ``state``."""
    import torch  # here: the driver reads checkpoints' headers without loading torch (scaling.sweep)

    buffer = io.BytesIO()
    torch.save(state, buffer)
    payload = buffer.getvalue()
    facts = f" step={int(state['step'])} logged={int(state.get('logged_through', -1))}".encode()
    return MAGIC + hashlib.sha256(payload).hexdigest().encode() + facts + b"\n" + payload


def header_facts(header: bytes) -> dict[str, int]:
    """``step`` and ``logged`` of a header line (none in files written before they were added)."""
    words = header[len(MAGIC) :].decode("ascii", "replace").split()[1:]
    facts = dict(word.partition("=")[::2] for word in words)
    return {k: int(v) for k, v in facts.items() if k in ("step", "logged") and v.lstrip("-").isdigit()}


def behind(logged_through: int | None, store_last: int) -> str | None:
    """Why a cell's run cannot continue from its checkpoint, or None: the run holds its losses only to
    ``store_last`` while the checkpoint was written when it held them to ``logged_through``."""
    if logged_through is None or logged_through <= store_last:
        return None
    return (
        f"its MLflow run holds its training losses to step {store_last}, but its checkpoint was written"
        f" when the run held them to step {logged_through} (the tracking store is older than the storage:"
        " restored from a backup?)"
    )


def decode(blob: bytes) -> dict:
    """The state in a checkpoint file's bytes; CheckpointDamaged when its digest or torch says so."""
    if blob.startswith(MAGIC):
        header, _, payload = blob.partition(b"\n")
        expected = header[len(MAGIC) :].decode("ascii", "replace").split(" ")[0]
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
    import torch

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
    (the trial's lease was taken over: scaling.trial.leases).
    """

    def __init__(self, uri: str, guard: Callable[[str], None] | None = None):
        self.uri = storage.resolved(uri)
        self.fs, self.root = storage.filesystem(self.uri)
        self.guard = guard
        self.problems: dict[str, list[str]] = {}  # cell key -> damaged files found by the last load

    def _dir(self, key: str) -> str:
        return f"{self.root}/checkpoints/{key}"

    def _path(self, key: str, name: str = "state.pt") -> str:
        return f"{self._dir(key)}/{name}"

    def _retrying(self, call, what: str):
        return storage.retrying(self.uri, call, what)

    def _exists(self, path: str) -> bool:
        return self._retrying(lambda: self.fs.get_file_info(path).type != pafs.FileType.NotFound, "a look")

    def _write(self, path: str, blob: bytes) -> None:
        with self.fs.open_output_stream(path) as out:
            out.write(blob)

    def save(self, key: str, state: dict) -> None:
        blob = encode(state)
        path = self._path(key)
        what = f"saving the checkpoint of cell {key}"
        self._retrying(lambda: self.fs.create_dir(self._dir(key), recursive=True), what)
        temp = f"{path}.{uuid.uuid4().hex}.tmp"  # unique: two writers never share a temp file
        try:
            self._retrying(lambda: self._write(temp, blob), what)
            if self.guard is not None:
                self.guard(key)
        except BaseException:
            self._remove(temp)
            raise
        self._retrying(lambda: self._rotate(temp, path, self._path(key, "previous.pt")), what)

    def _rotate(self, temp: str, path: str, previous: str) -> None:
        """The new file into place and the last one kept as ``previous``: asked again after a failure part
        way, it moves only what is still to move."""
        if self.fs.get_file_info(temp).type == pafs.FileType.NotFound:
            return  # moved into place by an earlier try whose answer was lost
        if self.fs.get_file_info(path).type != pafs.FileType.NotFound:
            self.fs.move(path, previous)
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
                blob = self._retrying(lambda: self._read_bytes(path), f"reading {name} of cell {key}")
                return decode(blob), problems
            except (CheckpointDamaged, OSError) as err:
                problems.append(f"checkpoint {path} is damaged: {err}")
                if discard:
                    self._discard(path)
        return None, problems

    def _read_bytes(self, path: str) -> bytes:
        with self.fs.open_input_stream(path) as stream:
            return stream.read()

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

    def with_checkpoints(self) -> set[str]:
        """The keys of the cells that have a checkpoint (one listing of the storage)."""
        selector = pafs.FileSelector(f"{self.root}/checkpoints", recursive=True, allow_not_found=True)
        listing = self._retrying(lambda: self.fs.get_file_info(selector), "listing the checkpoints")
        return {info.path.rsplit("/", 2)[-2] for info in listing if info.base_name == FILES[0]}

    def peek(self, key: str) -> dict[str, int]:
        """The newest checkpoint's header facts (``step``, ``logged``), reading its first bytes only; {}
        when the cell has none, or its file predates them."""
        path = self._path(key)

        def first_line() -> bytes:
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                return b""
            with self.fs.open_input_file(path) as stream:
                return stream.read_at(256, 0).partition(b"\n")[0]

        line = self._retrying(first_line, f"reading the checkpoint header of cell {key}")
        return header_facts(line) if line.startswith(MAGIC) else {}

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
            selector = pafs.FileSelector(self._dir(key))
            for info in self._retrying(lambda: self.fs.get_file_info(selector), "a listing"):
                if info.base_name.endswith(".tmp"):
                    self._remove(info.path)

    def delete(self, key: str) -> None:
        path = self._dir(key)
        if self._exists(path):
            self.fs.delete_dir(path)
