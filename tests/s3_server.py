"""A real S3 API server on loopback for the storage tests: moto's standalone server (``moto[server]``, in the
test extra) behind a TCP relay of this test on another loopback port. The sweep talks to the relay; the
tests stop the relay to play the endpoint's outage (connections refused, open ones reset) and start it
again on the same port, while the server behind it keeps its objects (moto keeps them in memory: a
stopped moto would come back empty, unlike a real store).

Credentials: moto takes any key pair; the tests put theirs in the URI (``s3://KEY:SECRET@bucket/...``), the
way that must never leak, and check that the secret is nowhere.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import threading
import time
from dataclasses import dataclass

import pytest

ACCESS_KEY = "AKIAICLSCALINGTEST"
SECRET_KEY = "s3cret-Key-of-the-test-0123456789"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


class Relay:
    """Forwards TCP connections from 127.0.0.1:``port`` to 127.0.0.1:``target``; ``stop`` closes the port and
    every open connection, ``start`` opens the same port again."""

    def __init__(self, target: int):
        self.target, self.port = target, free_port()
        self.listener: socket.socket | None = None
        self.open: set[socket.socket] = set()
        self.lock = threading.Lock()

    def start(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self.listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
            except OSError:
                return  # stopped
            try:
                server = socket.create_connection(("127.0.0.1", self.target))
            except OSError:
                client.close()
                continue
            with self.lock:
                self.open |= {client, server}
            for a, b in ((client, server), (server, client)):
                threading.Thread(target=self._pipe, args=(a, b), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        finally:
            for s in (source, sink):
                with contextlib.suppress(OSError):
                    s.shutdown(socket.SHUT_RDWR)
                s.close()
            with self.lock:
                self.open -= {source, sink}

    def stop(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
        with self.lock:
            connections, self.open = list(self.open), set()
        for s in connections:
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            s.close()


@dataclass
class S3:
    """The server behind its relay: ``uri(prefix)`` is a storage URI through the relay, with credentials."""

    relay: Relay
    bucket: str = "icl-runs"

    def uri(self, prefix: str = "runs", credentials: bool = True) -> str:
        who = f"{ACCESS_KEY}:{SECRET_KEY}@" if credentials else ""
        return (
            f"s3://{who}{self.bucket}/{prefix}?endpoint_override=127.0.0.1:{self.relay.port}&scheme=http"
            "&region=us-east-1"
        )

    def filesystem(self):
        from pyarrow import fs as pafs

        return pafs.S3FileSystem(
            access_key=ACCESS_KEY,
            secret_key=SECRET_KEY,
            endpoint_override=f"127.0.0.1:{self.relay.target}",  # the server itself, never through the relay
            scheme="http",
            region="us-east-1",
            allow_bucket_creation=True,
        )

    def objects(self, prefix: str = "") -> dict[str, bytes]:
        """Every object of the bucket under ``prefix``, read from the server directly."""
        from pyarrow import fs as pafs

        fs = self.filesystem()
        where = f"{self.bucket}/{prefix}".rstrip("/")
        found = fs.get_file_info(pafs.FileSelector(where, recursive=True, allow_not_found=True))
        out = {}
        for info in found:
            if info.type == pafs.FileType.File:
                with fs.open_input_stream(info.path) as stream:
                    out[info.path] = stream.read()
        return out


@contextlib.contextmanager
def s3_server(log_path=None):
    """moto's S3 server on a free loopback port with one bucket, behind a started Relay."""
    if sys.modules.get("moto") is None:
        pytest.importorskip("moto.server", reason="needs moto[server] (pip install -e '.[test]')")
    port = free_port()
    out = open(log_path, "w") if log_path else subprocess.DEVNULL
    server = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], stdout=out, stderr=out
    )
    relay = Relay(port)
    try:
        deadline = time.monotonic() + 60
        while not answers(port):
            assert server.poll() is None and time.monotonic() < deadline, "moto's S3 server did not start"
            time.sleep(0.1)
        relay.start()
        s3 = S3(relay)
        s3.filesystem().create_dir(s3.bucket)
        yield s3
    finally:
        relay.stop()
        server.terminate()
        server.wait(timeout=30)
        if log_path:
            out.close()
