"""Cell leases: a cell is trained by at most one trial at a time, however many drivers run its sweep.

A lease is a small JSON file in the sweep's storage, ``<storage>/leases/<cell key>.json``, naming its owner
(host, process, a random id and the driver that started the trial) and a heartbeat that the owning trial
renews every ``LEASE_HEARTBEAT_S`` seconds. A trial takes a cell's lease before it opens the cell's run
or loads its checkpoint, and gives it back when the cell is finished or has failed. A lease is taken
over only when it is stale: its heartbeat is older than ``LEASE_STALE_S`` seconds, or its owner was a
process on this host that no longer exists (a killed driver's trials: a rerun continues at once).

Every change of a lease (take, renew, release) is a read-modify-write done under an exclusive
``fcntl.flock`` of ``<cell key>.lock`` beside it, and the lease file is replaced atomically (a uniquely
named temp file, then ``os.replace``), so two processes can never both believe they hold a lease. A trial
that goes on to train the cell (it was not complete yet) appends a line to ``<cell key>.log``
(``Lease.record``): the record of who trained each cell.

Leases need the storage to be a filesystem path (local, or a shared mount with POSIX locks, as Ray
clusters use for their storage). On an object store (``s3://``, ``gs://``) there is no lock to hold, and a
lease is only written and read back (best effort: two drivers racing within the same second could both
win); run one driver per sweep there. Its reads and writes ride through the store's outages
(scaling.trial.storage: asked again for up to SCALING_STORAGE_RETRY_S, said once per outage).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

from scaling.trial.storage import retrying

log = logging.getLogger(__name__)

LEASE_HEARTBEAT_S = float(os.environ.get("SCALING_LEASE_HEARTBEAT_S", "5"))
LEASE_STALE_S = float(os.environ.get("SCALING_LEASE_STALE_S", "30"))


class LeaseLost(RuntimeError):
    """This trial's lease was taken over (its heartbeat stalled past the stale limit): it stops writing."""


@dataclass(frozen=True)
class Holder:
    """Who holds a lease: ``owner`` is unique per take; ``driver`` names the sweep driver of the trial."""

    owner: str
    host: str
    pid: int
    driver: str
    heartbeat: float
    taken: float

    def describe(self) -> str:
        age = max(0.0, time.time() - self.heartbeat)
        return (
            f"{self.driver or 'a driver'} (trial process {self.pid} on {self.host}, heartbeat {age:.0f}s ago)"
        )

    def stale(self, now: float | None = None) -> bool:
        now = time.time() if now is None else now
        if now - self.heartbeat > LEASE_STALE_S:
            return True
        return self.host == socket.gethostname() and not process_alive(self.pid)


def process_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # someone else's process: alive
        return True
    return True


def driver_id() -> str:
    """This driver's name in leases: 'driver <pid> on <host> since <time>'."""
    return f"driver {os.getpid()} on {socket.gethostname()} since {time.strftime('%H:%M:%S')}"


def local_root(storage: str) -> Path | None:
    """The storage as a local directory, or None for an object store."""
    if "://" not in storage:
        return Path(storage)
    if storage.startswith("file://"):
        return Path(storage[len("file://") :])
    return None


class Lease:
    """A held lease: renewed by a daemon thread until ``release``; ``check`` raises LeaseLost if lost."""

    def __init__(self, leases: "Leases", key: str, holder: Holder, took_over: str | None = None):
        self.leases, self.key, self.holder, self.took_over = leases, key, holder, took_over
        self.lost = False
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._beat, name=f"lease-{key}", daemon=True)
        self._thread.start()

    def _beat(self) -> None:
        while not self._stop.wait(LEASE_HEARTBEAT_S):
            try:
                if not self.leases.renew(self.key, self.holder.owner):
                    self.lost = True
                    log.error(
                        "the lease of cell %s was taken over by another trial; this trial stops", self.key
                    )
                    return
            except OSError as err:  # a full or blinking disk: try again at the next beat
                log.warning("could not renew the lease of cell %s: %s", self.key, err)

    def record(self) -> None:
        """Log that this trial trains the cell (``<key>.log`` beside the lease: who trained each cell)."""
        self.leases.record(self.key, self.holder, self.took_over)

    def check(self) -> None:
        if self.lost:
            raise LeaseLost(
                f"the lease of cell {self.key} was taken over by another trial (this one stalled"
                f" for more than {LEASE_STALE_S:g}s); it stops without writing"
            )

    def release(self) -> None:
        self._stop.set()
        self._thread.join(timeout=LEASE_HEARTBEAT_S + 5)
        if not self.lost:
            try:
                self.leases.release(self.key, self.holder.owner)
            except OSError as err:  # it goes stale on its own
                log.warning("could not release the lease of cell %s: %s", self.key, err)


class Leases:
    """The leases of one sweep's storage (see the module docstring)."""

    def __init__(self, storage: str):
        self.storage = storage
        root = local_root(storage)
        self.root = None if root is None else root / "leases"
        if root is None:
            from pyarrow import fs as pafs

            self.fs, remote = pafs.FileSystem.from_uri(storage)
            self.remote = f"{remote}/leases"

    # ------------------------------------------------------------ files

    def _read(self, key: str) -> Holder | None:
        if self.root is None:
            return self._read_remote(key)
        try:
            data = json.loads((self.root / f"{key}.json").read_text())
            return Holder(**data)
        except FileNotFoundError:
            return None
        except (ValueError, TypeError) as err:  # a torn or foreign file: treated as stale
            log.warning("unreadable lease %s (%s): treated as stale", self.root / f"{key}.json", err)
            return Holder("?", "?", 0, "?", 0.0, 0.0)

    def _write(self, key: str, holder: Holder) -> None:
        if self.root is None:
            return self._write_remote(key, holder)
        path = self.root / f"{key}.json"
        temp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
        temp.write_text(json.dumps(asdict(holder)))
        os.replace(temp, path)

    @contextlib.contextmanager
    def _locked(self, key: str):
        if self.root is None:
            yield
            return
        self.root.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{key}.lock", "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)

    def _read_remote(self, key: str) -> Holder | None:
        from pyarrow import fs as pafs

        path = f"{self.remote}/{key}.json"

        def read() -> bytes | None:
            if self.fs.get_file_info(path).type == pafs.FileType.NotFound:
                return None
            with self.fs.open_input_stream(path) as stream:
                return stream.read()

        blob = retrying(self.storage, read, f"reading the lease of cell {key}")
        try:
            return None if blob is None else Holder(**json.loads(blob))
        except (ValueError, TypeError):
            return Holder("?", "?", 0, "?", 0.0, 0.0)

    def _write_remote(self, key: str, holder: Holder) -> None:
        path = f"{self.remote}/{key}.json"
        temp = f"{path}.{uuid.uuid4().hex}.tmp"

        def write() -> None:
            self.fs.create_dir(self.remote, recursive=True)
            with self.fs.open_output_stream(temp) as out:
                out.write(json.dumps(asdict(holder)).encode())
            self.fs.move(temp, path)

        retrying(self.storage, write, f"writing the lease of cell {key}")

    # ------------------------------------------------------------ API

    def holder(self, key: str) -> Holder | None:
        """The live holder of the cell's lease, or None (free, released or stale)."""
        found = self._read(key)
        return None if found is None or found.stale() else found

    def acquire(self, key: str, driver: str = "") -> Lease | Holder:
        """Take the cell's lease: a Lease (renewed until released), or the live Holder that has it."""
        now = time.time()
        mine = Holder(
            f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:12]}",
            socket.gethostname(),
            os.getpid(),
            driver,
            now,
            now,
        )
        with self._locked(key):
            current = self._read(key)
            if current is not None and not current.stale(now):
                return current
            self._write(key, mine)
            if self.root is None:  # no lock: read back after a moment (best effort)
                time.sleep(1.0)
                if (self._read(key) or mine).owner != mine.owner:
                    return self._read(key)
        return Lease(self, key, mine, None if current is None else current.owner)

    def renew(self, key: str, owner: str) -> bool:
        """Refresh the heartbeat of a lease ``owner`` holds; False when it is no longer theirs."""
        with self._locked(key):
            current = self._read(key)
            if current is None or current.owner != owner:
                return False
            self._write(key, Holder(**{**asdict(current), "heartbeat": time.time()}))
            return True

    def release(self, key: str, owner: str) -> None:
        """Give back a lease ``owner`` holds (someone else's is left alone)."""
        with self._locked(key):
            current = self._read(key)
            if current is None or current.owner != owner:
                return
            if self.root is None:
                path = f"{self.remote}/{key}.json"
                retrying(self.storage, lambda: self.fs.delete_file(path), f"releasing cell {key}")
            else:
                (self.root / f"{key}.json").unlink()

    def record(self, key: str, holder: Holder, took_over: str | None) -> None:
        """Append a line for ``holder`` to the cell's ``<key>.log`` (filesystem storage only)."""
        if self.root is None:
            return
        with self._locked(key), open(self.root / f"{key}.log", "a") as history:
            history.write(json.dumps({**asdict(holder), "took_over": took_over}) + "\n")

    def history(self, key: str) -> list[dict]:
        """The trials that trained the cell (each Lease.record), oldest first (filesystem storage only)."""
        if self.root is None or not (self.root / f"{key}.log").exists():
            return []
        return [json.loads(line) for line in (self.root / f"{key}.log").read_text().splitlines() if line]
