#!/usr/bin/env bash
# Start the cluster's MLflow tracking server on the head node (idempotent); or back its database up.
#
#   bash cluster/start_mlflow.sh          start PostgreSQL (if it is the backend) and MLflow, or find them up
#   bash cluster/start_mlflow.sh backup   write $MLFLOW_HOME/backup/mlflow.dump (pg_dump, consistent while
#                                         trials log) or mlflow.db (SQLite's online backup)
#   bash cluster/start_mlflow.sh restore DIR
#                                         replace this head's store by a backup: DIR holds mlflow.dump (or
#                                         mlflow.db) and artifacts/ as docs/cluster.md's backup leaves them.
#                                         Stops the server and its database, moves their data aside to
#                                         $MLFLOW_HOME/replaced-<time>/ (nothing is deleted), starts again
#                                         from the backup, on the address and port the server had
#
# Run by `head_start_ray_commands` in cluster.yaml and cluster/cluster-local.yaml,
# inside the head's container. The server:
#   * binds to the head's private IP only (never 0.0.0.0): workers reach it over
#     the cluster network, people reach it through an SSH tunnel (docs/cluster.md);
#   * proxies artifacts (--serve-artifacts), so workers upload through HTTP and
#     need no shared disk and no cloud credentials for artifacts;
#   * keeps its runs in PostgreSQL on the head: a database cluster of its own in
#     $MLFLOW_HOME/postgres (the head host's disk: the cluster files mount it), listening on a
#     Unix socket in $MLFLOW_HOME/pg only (no TCP port: only the head's user reaches it);
#   * keeps running across `ray stop` / `ray up` restarts (a second call finds it
#     healthy and returns). It runs in its own session; its process-group id is in
#     $MLFLOW_HOME/server.pid (stop it, and PostgreSQL, with:
#     python cluster/stop_ray.py /tmp/ray --mlflow --mlflow-home ~/mlflow).
# It writes the tracking URI to $MLFLOW_HOME/tracking_uri, which the head's
# `ray start` line exports as MLFLOW_TRACKING_URI for every job started there.
#
# Settings (environment variables, all optional):
#   MLFLOW_HOME                  state directory        (default ~/mlflow)
#   MLFLOW_DB                    postgresql (default) or sqlite ($MLFLOW_HOME/mlflow.db). A head whose
#                                $MLFLOW_HOME holds a SQLite store and no PostgreSQL one keeps SQLite
#                                unless MLFLOW_DB says otherwise (its runs are not moved: docs/cluster.md)
#   MLFLOW_BACKEND_URI           a database elsewhere (e.g. postgresql://user:pw@rds-host:5432/mlflow);
#                                overrides MLFLOW_DB, nothing is started for it
#   MLFLOW_ARTIFACTS_DESTINATION where proxied artifacts land (default $MLFLOW_HOME/artifacts;
#                                e.g. s3://bucket/mlflow-artifacts)
#   MLFLOW_HOST                  address to bind        (default: first address of `hostname -I`)
#   MLFLOW_PORT                  port                   (default 5000)
#   MLFLOW_RESTORE_FROM          a backup's mlflow.dump: a new PostgreSQL store starts as its copy
#
# Sizing: the one place it is decided, and why (measured: docs/results.md, "The tracking server under load").
# A cluster's trials each send one request at a time (the MLflow client is synchronous),
# so the server sees at most as many requests at once as trials run: up to 128 on a cluster of 32 GPU
# nodes with four fractional trials each, 256 in the load test (benchmarks/tracking_load.py).
#   MLFLOW_WORKERS=4             uvicorn worker processes: one per vCPU of the head (m5.xlarge: 4);
#                                PostgreSQL's backends share those cores.
#   pool 10 + overflow 30 = 40   database connections a worker may hold at once. Each worker runs MLflow's
#                                request handlers on anyio's thread pool, 40 threads, and a handler holds
#                                one connection: with 40 a handler never waits for a connection, so
#                                MLflow's "QueuePool limit of size 5 overflow 10 reached" (SQLAlchemy's
#                                default pool: a 400 that the client does not retry) cannot happen;
#                                requests beyond 4 x 40 queue for a thread instead, without a timeout.
#                                10 stay open between bursts, the rest close when idle.
#   max_connections              PostgreSQL's: 2 engines per worker (tracking store and model registry)
#                                x 4 workers x 40, plus 20 for backups and psql.
#   worker health check 60 s     uvicorn kills a worker that does not answer its supervisor's ping in 5 s
#                                (its default) and drops every request in flight on it; a worker busy
#                                with 40 requests on a loaded head is slow, not hung (measured: 256 trials
#                                on 2 cores lost 123 requests to such kills at 5 s).
# Overridable (MLFLOW_WORKERS, MLFLOW_SQLALCHEMYSTORE_POOL_SIZE, MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW) for
# measuring other sizes; a larger head wants more workers, and max_connections follows.
#   job execution off            MLflow 3's job runner serves its GenAI features (judges, scorers, trace
#                                rollups), none of which this product uses; on, the server starts a job
#                                runner and 7 huey consumers beside its workers: 10 processes, 2.3 GiB and
#                                54-63 CPU-s in the first 40 s, against 2, 0.5 GiB and 11-12 CPU-s off
#                                (one worker, SQLite; docs/results.md, "The MLflow server's job runner").
#                                MLFLOW_SERVER_ENABLE_JOB_EXECUTION=true turns it back on.
set -euo pipefail

export MLFLOW_SERVER_ENABLE_JOB_EXECUTION="${MLFLOW_SERVER_ENABLE_JOB_EXECUTION:-false}"

MLFLOW_WORKERS="${MLFLOW_WORKERS:-4}"
export MLFLOW_SQLALCHEMYSTORE_POOL_SIZE="${MLFLOW_SQLALCHEMYSTORE_POOL_SIZE:-10}"
export MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW="${MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW:-30}"
PG_MAX_CONNECTIONS=$((2 * MLFLOW_WORKERS * (MLFLOW_SQLALCHEMYSTORE_POOL_SIZE + MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW) + 20))

MLFLOW_HOME="${MLFLOW_HOME:-$HOME/mlflow}"
fail() { echo "start_mlflow.sh: $*" >&2; exit 1; }
if [ "${1:-}" = restore ]; then
  RESTORE_DIR="${2:-}"
  [ -n "$RESTORE_DIR" ] && [ -d "$RESTORE_DIR" ] || fail "restore: no backup folder '${RESTORE_DIR}'"
  if [ -z "${MLFLOW_DB:-}" ]; then  # the backup's kind of store
    if [ -f "$RESTORE_DIR/mlflow.dump" ]; then MLFLOW_DB=postgresql
    elif [ -f "$RESTORE_DIR/mlflow.db" ]; then MLFLOW_DB=sqlite
    else fail "restore: $RESTORE_DIR holds neither mlflow.dump nor mlflow.db"; fi
  fi
  if [ -f "$MLFLOW_HOME/tracking_uri" ]; then  # the address and port the server had (its start command's)
    KNOWN="$(sed 's|^http://||' "$MLFLOW_HOME/tracking_uri")"
    MLFLOW_HOST="${MLFLOW_HOST:-${KNOWN%:*}}"
    MLFLOW_PORT="${MLFLOW_PORT:-${KNOWN##*:}}"
  fi
fi
MLFLOW_ARTIFACTS_DESTINATION="${MLFLOW_ARTIFACTS_DESTINATION:-$MLFLOW_HOME/artifacts}"
MLFLOW_HOST="${MLFLOW_HOST:-$(hostname -I | awk '{print $1}')}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"
PGDATA="$MLFLOW_HOME/postgres"
PGSOCKET="$MLFLOW_HOME/pg"
PG_USER=mlflow  # the database's owner and MLflow's login (trust over the socket, which only the owner reaches)

case "$MLFLOW_HOST" in
  ""|0.0.0.0|::|"[::]"|\*)
    fail "refusing to bind MLflow to '$MLFLOW_HOST'; set MLFLOW_HOST to the head's private IP" ;;
esac

if [ -z "${MLFLOW_DB:-}" ]; then
  if [ -f "$MLFLOW_HOME/mlflow.db" ] && [ ! -d "$PGDATA" ]; then
    MLFLOW_DB=sqlite
    echo "keeping this head's SQLite store $MLFLOW_HOME/mlflow.db (MLFLOW_DB=postgresql starts an empty" \
      "PostgreSQL one; docs/cluster.md says how to move runs)"
  else
    MLFLOW_DB=postgresql
  fi
fi
case "$MLFLOW_DB" in
  postgresql) LOCAL_URI="postgresql+psycopg2://$PG_USER@/mlflow?host=$PGSOCKET" ;;
  sqlite) LOCAL_URI="sqlite:///$MLFLOW_HOME/mlflow.db" ;;
  *) fail "MLFLOW_DB must be postgresql or sqlite, not '$MLFLOW_DB'" ;;
esac
MLFLOW_BACKEND_URI="${MLFLOW_BACKEND_URI:-$LOCAL_URI}"
OWN_POSTGRES=$([ "$MLFLOW_BACKEND_URI" = "$LOCAL_URI" ] && [ "$MLFLOW_DB" = postgresql ] && echo 1 || echo 0)

# PostgreSQL refuses to run as root: as root (a head without Docker run by root, the tests) its server runs
# as the system account `postgres`, which must reach $MLFLOW_HOME.
as_db_owner() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}

pg_bin() {  # Debian and Ubuntu keep initdb and pg_ctl out of PATH, in /usr/lib/postgresql/<major>/bin
  local found
  found="$(command -v "$1" 2>/dev/null || ls -d /usr/lib/postgresql/*/bin/"$1" 2>/dev/null | sort -V | tail -n 1)"
  [ -n "$found" ] || fail "PostgreSQL's $1 is not installed (Debian/Ubuntu: apt-get install postgresql;" \
    "the cluster files install it on the head) - or choose MLFLOW_DB=sqlite"
  echo "$found"
}

start_postgres() {
  mkdir -p "$PGSOCKET"
  chmod 700 "$PGSOCKET"
  touch "$MLFLOW_HOME/postgres.log"
  if [ "$(id -u)" = 0 ]; then
    chown postgres "$PGSOCKET" "$MLFLOW_HOME/postgres.log"
    runuser -u postgres -- test -x "$MLFLOW_HOME" ||
      fail "as root, PostgreSQL runs as user postgres, who cannot reach $MLFLOW_HOME; choose a" \
        "MLFLOW_HOME it can reach (every folder above it searchable), or run as another user"
  fi
  local fresh=0
  if [ ! -f "$PGDATA/PG_VERSION" ]; then
    fresh=1
    mkdir -p "$PGDATA"
    [ "$(id -u)" = 0 ] && chown postgres "$PGDATA"
    as_db_owner "$(pg_bin initdb)" -D "$PGDATA" -U "$PG_USER" --auth=trust --encoding=UTF8 >"$MLFLOW_HOME/initdb.log" 2>&1 ||
      fail "initdb failed; see $MLFLOW_HOME/initdb.log"
  fi
  local initdb_major
  initdb_major="$("$(pg_bin initdb)" --version | awk '{print $3}' | cut -d. -f1)"
  [ "$(cat "$PGDATA/PG_VERSION")" = "$initdb_major" ] ||
    fail "$PGDATA was made by PostgreSQL $(cat "$PGDATA/PG_VERSION"), this head runs $initdb_major:" \
      "restore a backup into a new MLFLOW_HOME (docs/cluster.md)"
  if ! as_db_owner "$(pg_bin pg_ctl)" -D "$PGDATA" status >/dev/null 2>&1; then
    as_db_owner "$(pg_bin pg_ctl)" -D "$PGDATA" -l "$MLFLOW_HOME/postgres.log" -w -t 120 start \
      -o "-c listen_addresses='' -c unix_socket_directories='$PGSOCKET' -c max_connections=$PG_MAX_CONNECTIONS" \
      >/dev/null || fail "PostgreSQL did not start; see $MLFLOW_HOME/postgres.log"
  fi
  if [ "$fresh" = 1 ]; then
    as_db_owner createdb -h "$PGSOCKET" -U "$PG_USER" mlflow
    if [ -n "${MLFLOW_RESTORE_FROM:-}" ]; then
      [ -f "$MLFLOW_RESTORE_FROM" ] || fail "MLFLOW_RESTORE_FROM: no file $MLFLOW_RESTORE_FROM"
      pg_restore -h "$PGSOCKET" -U "$PG_USER" -d mlflow --no-owner --exit-on-error "$MLFLOW_RESTORE_FROM" ||
        fail "restoring $MLFLOW_RESTORE_FROM failed"
      echo "restored $MLFLOW_RESTORE_FROM into $PGDATA"
    fi
  elif [ -n "${MLFLOW_RESTORE_FROM:-}" ]; then
    fail "MLFLOW_RESTORE_FROM restores only into a new store, and $PGDATA exists"
  fi
}

backup() {
  mkdir -p "$MLFLOW_HOME/backup"
  if [ "$MLFLOW_DB" = postgresql ]; then
    [ "$OWN_POSTGRES" = 1 ] || fail "backup: the database is $MLFLOW_BACKEND_URI, not this head's; back it up there"
    pg_dump -h "$PGSOCKET" -U "$PG_USER" -Fc -f "$MLFLOW_HOME/backup/mlflow.dump.tmp" mlflow
    mv "$MLFLOW_HOME/backup/mlflow.dump.tmp" "$MLFLOW_HOME/backup/mlflow.dump"
    echo "wrote $MLFLOW_HOME/backup/mlflow.dump"
  else
    python - "$MLFLOW_HOME/mlflow.db" "$MLFLOW_HOME/backup/mlflow.db" <<'EOF'
import sqlite3, sys
source, target = sqlite3.connect(sys.argv[1]), sqlite3.connect(sys.argv[2])
source.backup(target)
EOF
    echo "wrote $MLFLOW_HOME/backup/mlflow.db"
  fi
}

restore() {
  [ "$MLFLOW_BACKEND_URI" = "$LOCAL_URI" ] ||
    fail "restore: the database is $MLFLOW_BACKEND_URI, not this head's; restore it there"
  python "$(dirname "$0")/stop_ray.py" "$MLFLOW_HOME/no-ray" --mlflow --mlflow-home "$MLFLOW_HOME" >/dev/null ||
    fail "restore: could not stop the running MLflow server and its database"
  local aside name
  aside="$MLFLOW_HOME/replaced-$(date +%Y%m%d-%H%M%S)"
  mkdir -p "$aside"
  for name in postgres mlflow.db artifacts server.pid; do
    if [ -e "$MLFLOW_HOME/$name" ]; then mv "$MLFLOW_HOME/$name" "$aside/"; fi
  done
  echo "moved the store it replaces to $aside"
  case "$MLFLOW_ARTIFACTS_DESTINATION" in
    *://*) ;;  # an object store: its artifacts never lived on the head
    *) if [ -d "$RESTORE_DIR/artifacts" ]; then cp -a "$RESTORE_DIR/artifacts" "$MLFLOW_ARTIFACTS_DESTINATION"; fi ;;
  esac
  if [ "$MLFLOW_DB" = sqlite ]; then
    [ -f "$RESTORE_DIR/mlflow.db" ] || fail "restore: no $RESTORE_DIR/mlflow.db"
    cp "$RESTORE_DIR/mlflow.db" "$MLFLOW_HOME/mlflow.db"
  else
    [ -f "$RESTORE_DIR/mlflow.dump" ] || fail "restore: no $RESTORE_DIR/mlflow.dump"
    MLFLOW_RESTORE_FROM="$RESTORE_DIR/mlflow.dump"  # start_postgres restores it into the new store
  fi
}

URI="http://$MLFLOW_HOST:$MLFLOW_PORT"
mkdir -p "$MLFLOW_HOME"

case "${1:-}" in
  backup) backup; exit 0 ;;
  restore) restore ;;
  "") ;;
  *) fail "unknown argument '$1' (none starts the server; 'backup' backs its database up, 'restore DIR'"\
       "replaces it by a backup)" ;;
esac

echo "$URI" > "$MLFLOW_HOME/tracking_uri"

is_healthy() {
  python - "$URI/health" <<'EOF'
import sys, urllib.request
try:
    urllib.request.urlopen(sys.argv[1], timeout=2)
except Exception:
    sys.exit(1)
EOF
}

if [ "$OWN_POSTGRES" = 1 ]; then
  start_postgres  # also when MLflow is up: a server whose database went away is not healthy for long
fi

if is_healthy; then
  echo "MLflow already serving at $URI"
  exit 0
fi

case "$MLFLOW_ARTIFACTS_DESTINATION" in
  *://*) ;;
  *) mkdir -p "$MLFLOW_ARTIFACTS_DESTINATION" ;;
esac

nohup setsid mlflow server \
  --backend-store-uri "$MLFLOW_BACKEND_URI" \
  --artifacts-destination "$MLFLOW_ARTIFACTS_DESTINATION" \
  --serve-artifacts \
  --host "$MLFLOW_HOST" \
  --port "$MLFLOW_PORT" \
  --workers "$MLFLOW_WORKERS" \
  --uvicorn-opts "--timeout-worker-healthcheck 60" \
  > "$MLFLOW_HOME/server.log" 2>&1 < /dev/null &
echo $! > "$MLFLOW_HOME/server.pid"

# First start creates the database schema; allow a few minutes on a small head.
for _ in $(seq 1 180); do
  kill -0 "$(cat "$MLFLOW_HOME/server.pid")" 2>/dev/null || break  # it died: no use waiting
  if is_healthy; then
    echo "MLflow serving at $URI ($MLFLOW_DB; log: $MLFLOW_HOME/server.log)"
    exit 0
  fi
  sleep 1
done
fail "MLflow did not become healthy (it stopped, or 180 s passed); see $MLFLOW_HOME/server.log
$(tail -n 30 "$MLFLOW_HOME/server.log" 2>/dev/null || true)"
