"""Stop this cluster's Ray on this host, and nothing else (``ray stop`` stops every Ray on the host).

Run by the cluster files' start commands before ``ray start`` (a repeated ``ray up`` restarts Ray), and
by hand before ``ray down`` on clusters without Docker (docs/cluster.md, "On-premises cluster"):

    python cluster/stop_ray.py /tmp/ray-icl             # the Ray started with --temp-dir=/tmp/ray-icl
    python cluster/stop_ray.py /tmp/ray-icl --mlflow    # and start_mlflow.sh's MLflow and PostgreSQL

A Ray node's processes name its temp dir on their command lines (the GCS and raylet through their
session's log and socket paths, the dashboard, monitor and log monitor through --temp-dir or
--logs-dir); its workers rename themselves (``ray::IDLE``) but are the raylet's children; Ray's client
server (``python -m ray.util.client.server --address=... --port=10001``, started where Ray's client is
installed) names neither, is nobody's child once ``ray start`` returns, and writes its output into the
session's logs. So: every process whose command line names ``TEMP_DIR/`` or that holds a file open under
it, with its descendants, gets SIGTERM, then SIGKILL after a grace period. Processes of other Rays (other
temp dirs) and of other users are never touched.
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from pathlib import Path

try:
    import psutil
except ImportError:
    # psutil is no dependency of the project: use Ray's copy (ray/thirdparty_files), which `import ray`
    # puts on sys.path. Imported by name so that no import sorter can move it after the psutil import.
    importlib.import_module("ray")
    import psutil


def names(cmdline, marker: str) -> bool:
    """Whether a command line names the folder ``marker`` (``DIR/``): a path under it, or ``--x=DIR``."""
    return any(marker in arg or arg.endswith("=" + marker.rstrip("/")) for arg in cmdline)


def holds_open(proc: psutil.Process, marker: str) -> bool:
    """Whether the process has a file under the folder ``marker`` open (its output redirected there)."""
    try:
        return any(f.path.startswith(marker) for f in proc.open_files())
    except (psutil.AccessDenied, psutil.ZombieProcess):
        return False


def ray_processes(temp_dir: str) -> list[psutil.Process]:
    """This user's processes of the Ray whose temp dir is ``temp_dir``, with their descendants."""
    marker = temp_dir.rstrip("/") + "/"
    me = psutil.Process()
    spared, found = {me.pid, *(p.pid for p in me.parents())}, {}  # the shell that runs this script names it
    for proc in psutil.process_iter(["pid", "cmdline", "uids"]):
        try:
            if proc.pid in spared or proc.info["uids"] is None or proc.info["uids"].real != os.getuid():
                continue
            if names(proc.info["cmdline"] or (), marker) or holds_open(proc, marker):
                found[proc.pid] = proc
                for child in proc.children(recursive=True):
                    found[child.pid] = child
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return [proc for pid, proc in found.items() if pid not in spared]


def mlflow_group(mlflow_home: Path) -> list[psutil.Process]:
    """The MLflow server that start_mlflow.sh started (its process group, from server.pid)."""
    pid_file = mlflow_home / "server.pid"
    if not pid_file.exists():
        return []
    group = int(pid_file.read_text().strip())
    members = []
    for proc in psutil.process_iter(["pid"]):
        try:
            if os.getpgid(proc.pid) == group and proc.uids().real == os.getuid():
                members.append(proc)
        except (ProcessLookupError, psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    return members


def stop_postgres(mlflow_home: Path, grace: float) -> int:
    """Stop the PostgreSQL that start_mlflow.sh started in ``mlflow_home/postgres`` (a fast shutdown:
    open transactions roll back, nothing committed is lost); 1 if one was running, else 0."""
    pid_file = mlflow_home / "postgres" / "postmaster.pid"
    if not pid_file.exists():
        return 0
    try:
        postmaster = psutil.Process(int(pid_file.read_text().split()[0]))
        postmaster.send_signal(signal.SIGINT)
        postmaster.wait(timeout=grace + 20)
    except (psutil.NoSuchProcess, ValueError, IndexError):
        return 0
    except psutil.TimeoutExpired:
        postmaster.kill()
    return 1


def stop(processes: list[psutil.Process], grace: float) -> int:
    """SIGTERM, wait up to ``grace`` seconds, SIGKILL what is left; the number of processes stopped."""
    for proc in processes:
        try:
            proc.send_signal(signal.SIGTERM)
        except psutil.NoSuchProcess:
            pass
    _, alive = psutil.wait_procs(processes, timeout=grace)
    for proc in alive:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(alive, timeout=5)
    return len(processes)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "temp_dir", help="the --temp-dir of this cluster's `ray start` (Ray's default: /tmp/ray)"
    )
    parser.add_argument(
        "--mlflow", action="store_true", help="also stop the MLflow server of start_mlflow.sh"
    )
    parser.add_argument(
        "--mlflow-home",
        default=os.environ.get("MLFLOW_HOME", "~/mlflow"),
        help="start_mlflow.sh's state directory (default $MLFLOW_HOME or ~/mlflow)",
    )
    parser.add_argument("--grace", type=float, default=10.0, help="seconds between SIGTERM and SIGKILL")
    args = parser.parse_args(argv)
    count = stop(ray_processes(os.path.abspath(os.path.expanduser(args.temp_dir))), args.grace)
    print(f"stopped {count} Ray processes of {args.temp_dir}")
    if args.mlflow:
        home = Path(args.mlflow_home).expanduser()
        print(f"stopped {stop(mlflow_group(home), args.grace)} MLflow processes of {home}")
        if stop_postgres(home, args.grace):
            print(f"stopped the PostgreSQL of {home / 'postgres'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
