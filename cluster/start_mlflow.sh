#!/usr/bin/env bash
# Start the cluster's MLflow tracking server on the head node (idempotent).
#
# Run by `head_start_ray_commands` in cluster.yaml and cluster/cluster-local.yaml,
# inside the head's container. The server:
#   * binds to the head's private IP only (never 0.0.0.0): workers reach it over
#     the cluster network, people reach it through an SSH tunnel (docs/cluster.md);
#   * proxies artifacts (--serve-artifacts), so workers upload through HTTP and
#     need no shared disk and no cloud credentials for artifacts;
#   * keeps running across `ray stop` / `ray up` restarts (a second call finds it
#     healthy and returns). It runs in its own session; its process-group id is in
#     $MLFLOW_HOME/server.pid (stop it with: kill -- -"$(cat ~/mlflow/server.pid)").
# It writes the tracking URI to $MLFLOW_HOME/tracking_uri, which the head's
# `ray start` line exports as MLFLOW_TRACKING_URI for every job started there.
#
# Settings (environment variables, all optional):
#   MLFLOW_HOME                  state directory        (default ~/mlflow)
#   MLFLOW_BACKEND_URI           runs/metrics database  (default sqlite:///$MLFLOW_HOME/mlflow.db;
#                                e.g. postgresql://user:pw@host:5432/mlflow)
#   MLFLOW_ARTIFACTS_DESTINATION where proxied artifacts land (default $MLFLOW_HOME/artifacts;
#                                e.g. s3://bucket/mlflow-artifacts)
#   MLFLOW_HOST                  address to bind        (default: first address of `hostname -I`)
#   MLFLOW_PORT                  port                   (default 5000)
set -euo pipefail

MLFLOW_HOME="${MLFLOW_HOME:-$HOME/mlflow}"
MLFLOW_BACKEND_URI="${MLFLOW_BACKEND_URI:-sqlite:///$MLFLOW_HOME/mlflow.db}"
MLFLOW_ARTIFACTS_DESTINATION="${MLFLOW_ARTIFACTS_DESTINATION:-$MLFLOW_HOME/artifacts}"
MLFLOW_HOST="${MLFLOW_HOST:-$(hostname -I | awk '{print $1}')}"
MLFLOW_PORT="${MLFLOW_PORT:-5000}"

case "$MLFLOW_HOST" in
  ""|0.0.0.0|::|"[::]"|\*)
    echo "start_mlflow.sh: refusing to bind MLflow to '$MLFLOW_HOST'; set MLFLOW_HOST to the head's private IP" >&2
    exit 1 ;;
esac

URI="http://$MLFLOW_HOST:$MLFLOW_PORT"
mkdir -p "$MLFLOW_HOME"
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
  > "$MLFLOW_HOME/server.log" 2>&1 < /dev/null &
echo $! > "$MLFLOW_HOME/server.pid"

# First start creates the database schema; allow a few minutes on a small head.
for _ in $(seq 1 180); do
  if is_healthy; then
    echo "MLflow serving at $URI (log: $MLFLOW_HOME/server.log)"
    exit 0
  fi
  sleep 1
done
echo "start_mlflow.sh: MLflow did not become healthy within 180 s; see $MLFLOW_HOME/server.log" >&2
tail -n 30 "$MLFLOW_HOME/server.log" >&2 || true
exit 1
