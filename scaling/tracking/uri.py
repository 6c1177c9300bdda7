"""Where a tracking store lives: the URI to use (argument, environment, the cluster's server, else
./mlflow.db), its local file or folder, the checks that one exists, and the addresses of its UI."""

from __future__ import annotations

import contextlib
import os
import shlex
import sqlite3
import urllib.parse
from pathlib import Path
from urllib.request import url2pathname

from scaling.sweep.cluster import ray_up_head

from ..redact import redact
from . import TrackingError


def resolve_tracking_uri(uri: str | None = None, cwd: str | Path | None = None) -> str:
    """The tracking URI to use: the argument, else MLFLOW_TRACKING_URI, else the MLflow server of the `ray up`
    cluster this machine is the head of (scaling.sweep.cluster), else ./mlflow.db (SQLite).

    Relative SQLite paths are made absolute: Tune runs each trial in its own working directory.
    """
    if not uri and not os.environ.get("MLFLOW_TRACKING_URI"):
        head = ray_up_head()
        uri = head.tracking_uri if head else None
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or "sqlite:///mlflow.db"
    check_scheme(uri)
    cwd = Path(cwd or os.getcwd())
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return f"sqlite:///{(cwd / uri[len('sqlite:///') :]).resolve()}"
    if "://" not in uri:  # a bare path: a SQLite file
        return f"sqlite:///{(cwd / uri).resolve()}"
    return uri


# the stores a tracking URI may name, by scheme, as an error lists them
SCHEMES = {
    "sqlite": "sqlite:///PATH (a SQLite file; a bare PATH means the same)",
    "file": "file:///PATH (a folder)",
    "http": "http(s)://HOST:PORT (an MLflow server)",
    "https": "",
    "postgresql": "postgresql://, mysql://, mssql:// (a database server)",
    "mysql": "",
    "mssql": "",
}


def check_scheme(uri: str) -> None:
    """A TrackingError naming the scheme and the ones allowed, for a URI no store answers to (a typo such as
    sqllite:/// would otherwise reach MLflow, whose answer is about its model registry)."""
    scheme = uri.split(":", 1)[0] if ":" in uri.split("/", 1)[0] else ""
    if not scheme or scheme.split("+")[0].lower() in SCHEMES or len(scheme) == 1:  # C:\... is a path
        return
    allowed = "; ".join(text for text in SCHEMES.values() if text)
    raise TrackingError(f"tracking URI {redact(uri)}: unknown scheme {scheme!r}; allowed: {allowed}")


def artifact_root(uri: str) -> str | None:
    """Where a local store keeps artifacts (beside the SQLite file); None lets a server decide."""
    if uri.startswith("sqlite:///"):
        return (Path(uri[len("sqlite:///") :]).parent / "mlartifacts").resolve().as_uri()
    return None


def local_store_path(uri: str) -> Path | None:
    """The file (``sqlite:///``) or folder (``file:``) a local store lives in; None for a server or a database
    elsewhere."""
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :].split("?")[0])
    if uri.startswith("file:"):
        return Path(urllib.parse.unquote(urllib.parse.urlparse(uri).path))
    return None


# what every "no store" message points to: the command that writes a store
WRITES_A_STORE = "a sweep writes one: python -m scaling.sweep SWEEP.yaml --tracking-uri {uri}"
OTHER_STORE = (
    "nothing was read or written; point --tracking-uri at an MLflow store (or, for a sweep, a new file)"
)
MLFLOW_TABLES = {"experiments", "runs", "alembic_version"}
DATABASE_SCHEMES = ("postgresql", "mysql", "mssql")


def check_store_exists(uri: str) -> None:
    """Refuse, with a TrackingError naming the path (or URI) and the command that writes a store, a store
    that is not there: a missing SQLite file or ``file:`` folder, a file that is not an MLflow store (not
    SQLite, or without MLflow's tables), a folder without MLflow's layout, a database server without MLflow's
    tables or that does not answer. Only reads: MLflow itself would create the store, or its tables."""
    path = local_store_path(uri)
    if path is None:
        if is_database(uri) and not database_has_store(uri):
            raise TrackingError(f"{redact(uri)} holds no MLflow store: no MLflow tables; {OTHER_STORE}")
        return
    path, writes = path.resolve(), WRITES_A_STORE.format(uri=shlex.quote(uri))
    what = "folder" if uri.startswith("file:") else "file"
    if not path.exists():
        near = nearby_stores(path)
        existing = (
            f"point at the store that is there: --tracking-uri {shlex.quote(f'sqlite:///{near[0]}')}"
            f" (or run from {near[0].parent}); "
            if near
            else "give the --tracking-uri of an existing store (or set MLFLOW_TRACKING_URI), or "
        )
        raise TrackingError(
            f"no MLflow store at {path}: no such {what} (nothing was read or written); {existing}{writes}"
        )
    if what == "folder":
        if not (path / ".trash").is_dir() and not any(path.glob("*/meta.yaml")):
            raise TrackingError(
                f"{path} is not an MLflow store: a folder without MLflow's layout; {OTHER_STORE}"
            )
        return
    if not path.is_file():
        raise TrackingError(f"{path} is not an MLflow store: not a file; {OTHER_STORE}")
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            tables = {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error as err:  # not SQLite at all; else unreadable (permissions, locked past 5 s)
        if "not a database" in str(err):
            raise TrackingError(f"{path} is not an MLflow store: {err}; {OTHER_STORE}") from None
        raise TrackingError(f"cannot read the MLflow store {path}: {err}") from None
    if not MLFLOW_TABLES <= tables:
        raise TrackingError(
            f"{path} is not an MLflow store: a SQLite file without MLflow's tables; {OTHER_STORE}"
        )


def nearby_stores(path: Path) -> list[Path]:
    """The SQLite MLflow stores of the same name as ``path`` in the folders above it (three) and below its
    own (one level): where a command run from the wrong folder was meant to read."""
    folder = path.parent
    candidates = [up / path.name for up in list(folder.parents)[:3]]
    with contextlib.suppress(OSError):
        candidates += sorted(folder.glob(f"*/{path.name}"))[:20]
    return [c for c in candidates if c.is_file() and sqlite_tables(c) >= MLFLOW_TABLES]


def sqlite_tables(path: Path) -> set[str]:
    """The tables of a SQLite file, read only (none when it is not one, or cannot be read)."""
    try:
        with contextlib.closing(sqlite3.connect(f"{path.as_uri()}?mode=ro", uri=True)) as db:
            return {row[0] for row in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
    except sqlite3.Error:
        return set()


def is_database(uri: str) -> bool:
    """Whether ``uri`` names a database server MLflow opens itself (``postgresql://``, ``mysql+pymysql://``)."""
    return uri.split("://")[0].split("+")[0] in DATABASE_SCHEMES


def database_has_store(uri: str) -> bool:
    """Whether a database server's database holds MLflow's tables (MLflow creates them in one that does not:
    what a sweep does, never a reading command); TrackingError when it does not answer within seconds."""
    import sqlalchemy

    try:
        engine = sqlalchemy.create_engine(
            uri, connect_args={"connect_timeout": 10} if uri.startswith("postgresql") else {}
        )
        try:
            tables = set(sqlalchemy.inspect(engine).get_table_names())
        finally:
            engine.dispose()
    except Exception as err:  # noqa: BLE001 - any failure here means unusable
        why = " ".join(str(err).split("(Background on this error")[0].split())  # SQLAlchemy's, on one line
        raise TrackingError(f"cannot use the MLflow tracking store {redact(uri)}: {redact(why)}") from None
    return MLFLOW_TABLES <= tables


# MLflow 3.17 shows an experiment's pages (its runs table, a run) as GenAI, not model training, unless the
# URL says otherwise (or the sidebar's switch was last set so in this browser): every printed link says it
TRAINING_VIEW = "workflowType=machine_learning"


def experiment_ui_link(
    uri: str, experiment_id: str, ui: str = "http://127.0.0.1:5000", view: str | None = "lattice"
) -> str:
    """The address of an experiment's runs table in the MLflow UI: ``uri`` itself for a tracking server,
    else ``ui`` (where ``mlflow ui`` listens by default), opened on the shared ``view`` (views.py: the
    sweep's lattice; None: the table as the browser last left it). MLflow 3.17 opens an experiment on its
    GenAI overview unless the URL's ``workflowType`` (or the sidebar switch the browser last chose) says
    model training, whatever the experiment's EXPERIMENT_KIND tag."""
    base = uri.rstrip("/") if uri.startswith(("http://", "https://")) else ui
    shared = f"&viewStateShareKey={view}" if view else ""
    return f"{base}/#/experiments/{experiment_id}/runs?{TRAINING_VIEW}{shared}"


UI_ENV = "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false"  # no GenAI job runner: nothing a sweep logs uses it


def ui_command(uri: str) -> str | None:
    """The command that serves the MLflow UI for a store (None for a tracking server, which is one): one
    worker, without MLflow 3's GenAI job runner (2 processes and ~0.5 GiB instead of 15 and 2.5-2.9 GiB,
    and ~14 CPU-s to start instead of 70-72; docs/results.md, "The MLflow server's job runner")."""
    if uri.startswith(("http://", "https://")):
        return None
    return shlex.join([UI_ENV, "mlflow", "ui", "--workers", "1", "--backend-store-uri", uri])


def local_artifact_root(artifact_uri: str | None) -> Path | None:
    """The folder of a run's artifacts when they live on this machine's file system (a plain path or file://
    URI, as the embedded default and a cluster's shared disk have them), else None (a server's
    mlflow-artifacts:, S3, ...: MLflow downloads them)."""
    if not artifact_uri:
        return None
    parsed = urllib.parse.urlparse(artifact_uri)
    if parsed.scheme not in ("", "file") or (
        parsed.scheme == "file" and parsed.netloc not in ("", "localhost")
    ):
        return None
    return Path(url2pathname(parsed.path))


def local_artifact(artifact_uri: str | None, name: str) -> Path | None:
    """The file of artifact ``name`` when the run's artifacts live on this machine (local_artifact_root) and
    it is there, else None (downloaded). Read in place: copying it into a cache first would only add a
    write."""
    root = local_artifact_root(artifact_uri)
    path = None if root is None else root / name
    return path if path is not None and path.is_file() else None
