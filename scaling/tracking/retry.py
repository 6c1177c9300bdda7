"""Retries of tracking calls: exponential backoff with jitter, and MLflow's own HTTP retries turned off
where they would hide or repeat a request (scaling.tracking)."""

from __future__ import annotations

import contextlib
import logging
import os
import random
import sys
import time
from typing import Callable, TypeVar

from ..redact import redact
from . import TrackingError

log = logging.getLogger(__name__)
T = TypeVar("T")

_JITTER = random.Random()  # spreads retries of many trials apart; never the science's generators
_retries = {"count": 0, "said": False}  # this process's retries (a trial is one process)


def retry_count() -> int:
    """How many calls this process has retried so far (retrying)."""
    return _retries["count"]


def retrying(
    call: Callable[[], T], what: str, attempts: int = 8, first_wait: float = 0.5, say: bool = True
) -> T:
    """Run ``call``, retrying transient failures with exponential backoff and jitter (about a minute in all).

    Transient: the store cannot be reached, or answers that it is overloaded (an exhausted database pool's
    400, 429, 503) or failed (5xx); a request it refuses as wrong (a bad value, a run that exists or does
    not) is raised at once. Each wait is drawn from [wait/2, wait], so trials that an overloaded server
    turned away together do not come back together. The first retry of the process is logged as a warning,
    once (a trial's log says that the server was overloaded, not each request it repeated); later ones are
    counted (retry_count) and logged at debug level; with ``say`` False every retry is (the caller says
    what failed itself).
    """
    wait = first_wait
    for attempt in range(attempts):
        try:
            return call()
        except transient_kinds() as err:
            code = getattr(err, "error_code", "")
            if code in ("INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS", "RESOURCE_DOES_NOT_EXIST"):
                raise
            if attempt == attempts - 1:
                raise TrackingError(f"{what} failed after {attempts} attempts: {brief(err)}") from None
            _retries["count"] += 1
            level = logging.DEBUG if _retries["said"] or not say else logging.WARNING
            log.log(
                level,
                "%s failed (%s); retrying with backoff%s",
                what,
                brief(err),
                "" if _retries["said"] else " (said once: later retries of this process are not logged)",
            )
            _retries["said"] = _retries["said"] or say
            time.sleep(wait * _JITTER.uniform(0.5, 1.0))
            wait = min(wait * 2, 15.0)
    raise AssertionError("unreachable")


def transient_kinds() -> tuple[type[BaseException], ...]:
    """The errors ``retrying`` may retry: MLflow's (when it is imported: a call that raised one imported it),
    a database's operational errors met without MLflow (scaling.tracking.database; the ones MLflow's store
    turns into its TEMPORARILY_UNAVAILABLE), and the system's. Asked when an error is met, so that a reading
    command that never imports MLflow does not import it to catch its errors (~1 s)."""
    kinds: list[type[BaseException]] = [OSError, ConnectionError]
    if "mlflow.exceptions" in sys.modules:
        kinds.append(sys.modules["mlflow.exceptions"].MlflowException)
    if "sqlalchemy.exc" in sys.modules:
        kinds.append(sys.modules["sqlalchemy.exc"].OperationalError)
    return tuple(kinds)


# what an HTTP client's error says when a server cannot be reached, in words (urllib3's are ~600 characters)
UNREACHABLE = (
    ("Connection refused", "connection refused: no server listens there"),
    ("Name or service not known", "unknown host"),
    ("nodename nor servname", "unknown host"),
    ("Failed to resolve", "unknown host"),
    ("Temporary failure in name resolution", "unknown host"),
    ("No route to host", "no route to host"),
    ("Network is unreachable", "network unreachable"),
    ("timed out", "no answer within the request's timeout"),
    ("Connection reset", "the connection was reset"),
)


def brief(err: Exception | str) -> str:
    """An error in one short line: an unreachable server's reason in words (with its HTTP status when it
    answered), else the error's first line, redacted, at most 300 characters."""
    text = redact(str(err))
    for needle, words in UNREACHABLE:
        if needle in text:
            return words
    first = text.strip().splitlines()[0] if text.strip() else type(err).__name__
    return first if len(first) <= 300 else first[:297] + "..."


@contextlib.contextmanager
def mlflow_http(**settings: str):
    """MLflow's REST client under ``settings`` (MLflow's ``MLFLOW_HTTP_REQUEST_*`` environment variables, read
    at each request) inside the block; the process's own values back after it."""
    saved = {key: os.environ.get(key) for key in settings}
    os.environ.update(settings)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


# seconds a reading request waits for a server's answer (quick_http); tests of a silent server shorten it
QUICK_TIMEOUT_S = 10


def quick_http():
    """MLflow's REST client without its own retries (urllib3 backoff of up to minutes) and a short timeout."""
    return mlflow_http(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0", MLFLOW_HTTP_REQUEST_TIMEOUT=str(QUICK_TIMEOUT_S))


def no_http_retries():
    """MLflow's REST client without its own retries (its timeout unchanged): for a request that must not be
    sent twice unseen (a create: ``retrying`` re-sends it and the caller knows)."""
    return mlflow_http(MLFLOW_HTTP_REQUEST_MAX_RETRIES="0")
