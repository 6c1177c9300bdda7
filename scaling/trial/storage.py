"""Where a sweep's checkpoints, leases and Tune state live (``--storage``): a path, or a URI that pyarrow.fs
opens (``s3://bucket/prefix``, ``gs://...``), with pyarrow's options as its query
(``s3://bucket/runs?endpoint_override=host:9000&scheme=http``). Here such URIs are joined (a path goes
before the query), opened, shown without credentials, and retried through an object store's outage.

Credentials: pyarrow reads S3 keys from the URI (``s3://KEY:SECRET@bucket/...``) or from AWS's own
environment variables and files (better: then they are in no URI at all). A URI with a secret is shown
only redacted (scaling.redact), reaches the trials through their processes' environment
(``STORAGE_URI_ENV``, as the tracking URI does), and reaches Ray Tune as an opened filesystem and a path,
so it is in no Tune state, log or MLflow param.

Outages: a remote store that does not answer (a refused or reset connection, a timeout, HTTP 5xx,
throttling: ``transient``) is asked again with backoff for up to ``retry_seconds()``
(``SCALING_STORAGE_RETRY_S``, default 300) before the error is raised. The first failure of an outage is
logged once per process, with what failed and for how long it is retried, and the store's return once;
``on_outage`` callbacks (a trial's report to the driver) hear of the outage once. Any other error (no
permission, a missing file, a full disk) is raised at once, and a local or mounted path is never retried:
its errors do not heal by waiting.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Callable, Iterator, TypeVar

from scaling.redact import from_environment, redact

log = logging.getLogger(__name__)
T = TypeVar("T")

STORAGE_URI_ENV = "SCALING_STORAGE_URI"  # the real storage URI of a sweep whose URI holds a secret
OUTAGE_NOTICE = "storage_outage"  # a trial's report that names an outage it rode through (the driver says it)
DEFAULT_RETRY_S = 300.0
# The URI schemes pyarrow.fs opens (beside a plain path); any other is refused with these named
SCHEMES = ("file://", "s3://", "gs://", "gcs://", "abfs://", "abfss://", "hdfs://", "viewfs://")
# What pyarrow's S3 and GCS filesystems say when the store did not answer, or answered "later"
TRANSIENT = re.compile(
    r"NETWORK_CONNECTION|curlCode|Could not connect|Connection (refused|reset)|timed? ?out|"
    r"HTTP status 5\d\d|SLOW_DOWN|SERVICE_UNAVAILABLE|INTERNAL_FAILURE|THROTTLING|REQUEST_TIMEOUT|"
    r"Unavailable|Broken pipe",
    re.IGNORECASE,
)


def is_local(uri: str) -> bool:
    """Whether the storage is a path of this machine's file system (local, or a mounted share)."""
    return "://" not in uri or uri.startswith("file://")


def resolved(uri: str) -> str:
    """A path made absolute (the trials run in other working directories); a URI as it is."""
    return str(Path(uri).expanduser().resolve()) if "://" not in uri else uri


def join(uri: str, *parts: str) -> str:
    """``uri`` with ``parts`` appended to its path, before any query: ``join("s3://b/runs?x=1", "smoke")``
    is ``s3://b/runs/smoke?x=1``."""
    base, mark, query = uri.partition("?") if not is_local(uri) else (uri, "", "")
    return "/".join([base.rstrip("/"), *(p.strip("/") for p in parts)]) + mark + query


def trial_storage_uri(spec_uri: str) -> str:
    """The storage URI a trial uses: the environment's (set by the driver) when its redacted form is the
    spec's, else the spec's own."""
    return from_environment(spec_uri, STORAGE_URI_ENV)


def tune_storage(uri: str) -> dict:
    """Ray Tune's RunConfig arguments for Tune's state under ``uri``: a local path as it is; a remote one as
    an opened filesystem and a path in it. Tune pickles that filesystem into its state (``tuner.pkl``, the
    search's state), and an S3 filesystem made with keys pickles them: keys in the URI are handed to this
    process's AWS variables instead (only Tune's driver side uses its filesystem), and the filesystem is
    made without them."""
    if is_local(uri):
        return {"storage_path": resolved(uri.removeprefix("file://"))}
    plain, keys = without_keys(uri)
    if keys:
        os.environ["AWS_ACCESS_KEY_ID"], os.environ["AWS_SECRET_ACCESS_KEY"] = keys
    fs, path = filesystem(plain)
    return {"storage_path": path, "storage_filesystem": fs}


def without_keys(uri: str) -> tuple[str, tuple[str, str] | None]:
    """An ``s3://KEY:SECRET@bucket/...`` URI without its keys, and the keys (None: it has none)."""
    found = re.match(r"(?P<scheme>s3://)(?P<key>[^:/@]*):(?P<secret>[^/@]+)@(?P<rest>.*)", uri, re.DOTALL)
    if not found:
        return uri, None
    keys = (urllib.parse.unquote(found["key"]), urllib.parse.unquote(found["secret"]))
    return found["scheme"] + found["rest"], keys


def filesystem(uri: str):
    """(the pyarrow filesystem, the path in it) of a storage URI or path."""
    from pyarrow import fs as pafs

    return pafs.FileSystem.from_uri(resolved(uri))


def transient(err: BaseException) -> bool:
    """Whether an error of a remote store says it did not answer now (worth asking again later)."""
    return isinstance(err, (OSError, ConnectionError, TimeoutError)) and bool(TRANSIENT.search(str(err)))


def retry_seconds() -> float:
    return float(os.environ.get("SCALING_STORAGE_RETRY_S", DEFAULT_RETRY_S))


class Outages:
    """This process's outages of remote stores: one warning when one starts, one line when it ends, and the
    ``listeners`` called once per outage (with the warning's text)."""

    def __init__(self):
        self.lock = threading.Lock()
        self.since: dict[str, float] = {}  # redacted store URI -> when the outage was first seen
        self.listeners: list[Callable[[str], None]] = []

    def failed(self, uri: str, what: str, err: BaseException, limit: float) -> None:
        with self.lock:
            if uri in self.since:
                return
            self.since[uri] = time.monotonic()
            listeners = list(self.listeners)
        text = (
            f"the storage {uri} does not answer ({what}: {redact(str(err)).splitlines()[0][:300]});"
            f" retrying for up to {limit:.0f} s"
        )
        log.warning("%s", text)
        for listener in listeners:
            try:
                listener(text)
            except Exception as problem:  # noqa: BLE001 - telling must never stop the retries
                log.debug("outage listener failed: %s", problem)

    def answered(self, uri: str) -> None:
        with self.lock:
            since = self.since.pop(uri, None)
        if since is not None:
            log.warning("the storage %s answers again after %.0f s", uri, time.monotonic() - since)


OUTAGES = Outages()


@contextlib.contextmanager
def outages_heard(listener: Callable[[str], None]) -> Iterator[None]:
    """``listener`` hears of each outage of a remote store that this process meets meanwhile, once."""
    with OUTAGES.lock:
        OUTAGES.listeners.append(listener)
    try:
        yield
    finally:
        with OUTAGES.lock:
            OUTAGES.listeners.remove(listener)


def retrying(uri: str, call: Callable[[], T], what: str, limit: float | None = None) -> T:
    """``call()``, asked again with backoff (0.5 s doubling to 15 s) while a remote store's error is
    ``transient``, for up to ``limit`` seconds (retry_seconds()); a local path's call runs once."""
    if is_local(uri):
        return call()
    shown = redact(uri.partition("?")[0])
    limit = retry_seconds() if limit is None else limit
    deadline, wait = time.monotonic() + limit, 0.5
    while True:
        try:
            result = call()
        except Exception as err:
            if not transient(err) or time.monotonic() + wait > deadline:
                raise
            OUTAGES.failed(shown, what, err, limit)
            time.sleep(wait)
            wait = min(wait * 2, 15.0)
            continue
        OUTAGES.answered(shown)
        return result
