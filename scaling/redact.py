"""Credentials never reach a log, a message or a storage file.

``redact`` hides the password of every URI in a text (``https://user:secret@host`` ->
``https://user:***@host``) and the values of query parameters that carry secrets (``?token=...``). The
driver prints URIs only through it, and ``install_log_redaction`` applies it to every log record of
the process (MLflow's and Ray's messages quote the URIs they fail on).

Trials get the real tracking URI from the environment of their processes (``TRACKING_URI_ENV``, set by
the driver through Ray's runtime environment), never from their Tune config, which Tune writes into its
experiment state in the storage; the config holds the redacted form (``trial_tracking_uri``).
"""

from __future__ import annotations

import logging
import os
import re

TRACKING_URI_ENV = "SCALING_TRACKING_URI"
MASK = "***"
_USERINFO = re.compile(r"(?P<scheme>[A-Za-z][A-Za-z0-9+.\-]*://)(?P<user>[^\s:/@]*):(?P<password>[^\s/@]+)@")
_SECRET_PARAMS = re.compile(
    r"(?i)(?P<name>[?&;](?:password|passwd|pwd|token|access_token|secret|"
    r"api_key|apikey|key|secret_key|access_key|session_token|sig|signature|x-amz-signature|x-amz-credential)=)[^&;#\s'\"]+"
)


def redact(text: str) -> str:
    """``text`` with every URI password and secret query value replaced by ***."""
    if not text:
        return text
    text = _USERINFO.sub(lambda m: f"{m['scheme']}{m['user']}:{MASK}@", text)
    return _SECRET_PARAMS.sub(lambda m: f"{m['name']}{MASK}", text)


def has_secret(uri: str) -> bool:
    return redact(uri) != uri


def from_environment(spec_uri: str, variable: str) -> str:
    """The URI a trial uses: the one in its environment's ``variable`` (set by the driver) when its redacted
    form is the one in the trial's spec, else the spec's own (a URI without credentials travels as it is)."""
    real = os.environ.get(variable, "")
    return real if real and redact(real) == spec_uri else spec_uri


def trial_tracking_uri(spec_uri: str) -> str:
    """The tracking URI a trial uses (from_environment)."""
    return from_environment(spec_uri, TRACKING_URI_ENV)


def install_log_redaction() -> None:
    """Redact every log record this process creates, whatever logger or handler it goes to (MLflow's
    and Ray's messages quote the URIs they fail on): a record factory that cleans the formatted message."""
    previous = logging.getLogRecordFactory()
    if getattr(previous, "redacting", False):
        return

    def factory(*args, **kwargs) -> logging.LogRecord:
        record = previous(*args, **kwargs)
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 - a malformed record is logging's to report
            return record
        cleaned = redact(message)
        if cleaned != message:
            record.msg, record.args = cleaned, None
        if record.exc_info and record.exc_info[1] is not None and has_secret(str(record.exc_info[1])):
            record.exc_info, record.exc_text = None, None
        return record

    factory.redacting = True
    logging.setLogRecordFactory(factory)
