"""The tracking server under a cluster's load (issue 36): many trial processes logging at once, as trials do.

    python -m benchmarks.tracking_load --db postgresql --trials 256          # the shipped configuration
    python -m benchmarks.tracking_load --db sqlite --pool mlflow-default  # as shipped before

A real server on loopback, started by ``cluster/start_mlflow.sh`` as the cluster's head starts it (its own
PostgreSQL in a temporary MLFLOW_HOME, or SQLite), then ``--trials`` processes that all begin at once.
Each lives a cell's life through the project's own tracking code (scaling.tracking.cell_log), the calls a
training trial makes (papers.context_scaling.kind): open the cell's run under the sweep's parent run (search
by key, create with tags, params), log its training losses checkpoint by checkpoint (``--points`` points in
``--batches`` flushes: a long cell's flushes, one per checkpoint), then ``finish`` (cell.yaml,
curves.parquet and model.pt, the eval curves, tags, status=complete, end). The cells are real cells of a
GPT-2 sweep (their params are what a sweep logs), the curves and weights those of one of them evaluated
untrained.

Processes, not threads: each trial has its own HTTP connection pool and retries, as on a cluster. They are
forked from one process that has imported MLflow, torch and the project once (256 interpreters importing
them would take this 2-core machine minutes and ~75 GB); each then opens its own HTTP session.

Counted on the client, by instrumenting each process's HTTP stack (never guessed): ``requests`` are the
HTTP requests sent on the wire (urllib3's, so the MLflow client's own retries count), ``retried`` those
that repeat an earlier one (urllib3's retries plus the tracking layer's), ``http_errors`` answers >= 400,
latency the wire time of each request. Then every cell's run is read back through the server: complete
and FINISHED, its params, each training step exactly once, each curve point, its three artifacts.
"""

from __future__ import annotations

import argparse
import json
import logging
import multiprocessing
import os
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
START_MLFLOW = ROOT / "cluster" / "start_mlflow.sh"
SWEEP = "load"
# SQLAlchemy's pool defaults, which MLflow keeps unless told (what start_mlflow.sh shipped before)
MLFLOW_DEFAULT_POOL = {"MLFLOW_SQLALCHEMYSTORE_POOL_SIZE": "5", "MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW": "10"}


def load_sweep(trials: int) -> dict:
    """A sweep of ``trials`` GPT-2 cells (2 layers, width 64: the quick profiles' size), T x seed."""
    Ts = [1, 4, 16, 64, 256, 1024, 4096, "inf"]
    return {
        "name": SWEEP,
        "defaults": {
            "task": {"family": "linear", "d": 5, "noise_std": 0.1},
            "train": {"steps": 2000, "batch_size": 64, "lr": 1e-3, "checkpoint_every": 100, "device": "cpu"},
            "eval": {"prompts": 64, "bootstrap": 20},
            "N": 40,
        },
        "models": {"gpt2": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 64}},
        "grid": {"model": ["gpt2"], "T": Ts, "seed": list(range(-(-trials // len(Ts))))},
    }


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_server(home: Path, db: str, pool: str) -> str:
    """The tracking server of start_mlflow.sh on loopback; its URI."""
    env = {
        **os.environ,
        "MLFLOW_HOME": str(home),
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(free_port()),
        "MLFLOW_DB": db,
        **(MLFLOW_DEFAULT_POOL if pool == "mlflow-default" else {}),
    }
    done = subprocess.run(["bash", str(START_MLFLOW)], env=env, capture_output=True, text=True, timeout=600)
    if done.returncode != 0:
        raise RuntimeError(f"start_mlflow.sh failed:\n{done.stdout}{done.stderr}")
    return (home / "tracking_uri").read_text().strip()


def stop_server(home: Path) -> None:
    """Stop what start_mlflow.sh started in ``home`` (cluster/stop_ray.py's --mlflow, without a Ray)."""
    pid_file = home / "server.pid"
    if pid_file.exists():
        try:
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)
        except ProcessLookupError:
            pass
    subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "stop_ray.py"), str(home / "no-ray"), "--mlflow"],
        env={**os.environ, "MLFLOW_HOME": str(home)},
        capture_output=True,
        timeout=120,
    )


class Wire:
    """This process's HTTP requests as sent (urllib3) and as asked (requests' adapter), with latencies."""

    def __init__(self):
        import requests.adapters
        import urllib3.connectionpool

        self.sent: list[tuple[float, int, str]] = []  # (seconds, status, "METHOD path")
        self.asked = 0
        make, send = (
            urllib3.connectionpool.HTTPConnectionPool._make_request,
            requests.adapters.HTTPAdapter.send,
        )
        wire = self

        def timed_make(pool, conn, method, url, *args, **kwargs):
            start = time.perf_counter()
            status = 0
            try:
                response = make(pool, conn, method, url, *args, **kwargs)
                status = response.status
                return response
            finally:
                wire.sent.append((time.perf_counter() - start, status, f"{method} {url.split('?')[0]}"))

        def counted_send(adapter, *args, **kwargs):
            wire.asked += 1
            return send(adapter, *args, **kwargs)

        urllib3.connectionpool.HTTPConnectionPool._make_request = timed_make
        requests.adapters.HTTPAdapter.send = counted_send


class RetryNote(logging.Handler):
    """What the tracking layer says in the trial's log when it retries (scaling.tracking.retry.retrying): the
    lines, to check that it is said once, not per request."""

    def __init__(self):
        super().__init__(logging.DEBUG)
        self.warnings: list[str] = []

    def emit(self, record):
        if record.levelno >= logging.WARNING and "retrying" in record.getMessage():
            self.warnings.append(record.getMessage()[:300])


def trial(uri, experiment_id, parent, cell, curves, weights, points, batches, barrier, out):
    """One trial process: a cell's life through scaling.tracking, counted; its stats into ``out``."""
    # (MLflow keys its HTTP sessions by process id: this process opens its own connections)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the parent's unwinding is the parent's: a trial just ends
    wire, said = Wire(), RetryNote()
    logging.getLogger("scaling.tracking").addHandler(said)
    logging.getLogger("scaling.tracking").setLevel(logging.WARNING)
    from scaling.tracking.backends import open_cell_log
    from scaling.tracking.retry import retry_count

    barrier.wait()
    start, error = time.perf_counter(), ""
    try:
        log = open_cell_log(uri, experiment_id, cell, SWEEP, parent)
        log.flush_every = 0.0  # flush at every checkpoint, as a long cell does (one per 30 s)
        rng = random.Random(cell.seed)
        per = points // batches
        for b in range(batches):
            losses = [(step, rng.random()) for step in range(b * per + 1, (b + 1) * per + 1)]
            log.log_losses(losses, final=b == batches - 1)
        log.finish(cell, curves, weights)
    except Exception:  # noqa: BLE001 - a failed trial is what is counted
        error = traceback.format_exc().strip().splitlines()[-1][:500]
    out.put(
        {
            "key": cell.key,
            "seconds": time.perf_counter() - start,
            "error": error,
            "sent": wire.sent,
            "asked": wire.asked,
            "layer_retries": retry_count(),
            "retry_lines": said.warnings,
        }
    )


def representative(cell, tmp: Path):
    """Curves and weights of ``cell`` evaluated untrained: what a trial of it logs, in size and shape."""
    import torch

    from papers.context_scaling.train import CellTrainer

    trainer = CellTrainer(cell)
    curves = trainer.evaluate()
    weights = tmp / "model.pt"
    torch.save(trainer.model.state_dict(), weights)
    return curves, weights


def check_runs(uri: str, experiment_id: str, cells: list, curves, points: int) -> list[str]:
    """What is wrong with the cells' runs as stored (empty: every run complete, every point once)."""
    from scaling.tracking.backends import open_store
    from scaling.tracking.names import curve_metric_key

    tracker = open_store(uri)
    records = tracker.cell_records(experiment_id)
    runs = {r.run_id: r for r in tracker.runs_of_sweep(SWEEP)}
    by_key: dict[str, int] = {}
    for run in runs.values():
        by_key[run.cell_key] = by_key.get(run.cell_key, 0) + 1
    rows = curves[curves["err"].notna()]
    curve_points = {(curve_metric_key(p), int(n)) for p, n in zip(rows["predictor"], rows["n"])}
    problems = []
    for cell in cells:
        record = records.get(cell.key)
        if record is None:
            problems.append(f"{cell.name}: no run")
            continue
        if by_key[cell.key] != 1:
            problems.append(f"{cell.name}: {by_key[cell.key]} runs")
        run = runs[record.run_id]
        if record.status != "complete" or run.state != "FINISHED":
            problems.append(f"{cell.name}: status {record.status}, run {run.state}")
            continue
        if dict(run.params) != cell.params():
            problems.append(f"{cell.name}: params differ")
        steps = sorted(step for step, _ in tracker.metric_history(record.run_id, "train/loss"))
        if steps != list(range(1, points + 1)):
            problems.append(f"{cell.name}: {len(steps)} loss points, {len(set(steps))} distinct steps")
        stored = {k for k in run.metrics if k != "train/loss"}
        if stored != {k for k, _ in curve_points}:
            problems.append(f"{cell.name}: curve metrics {sorted(stored)}")
        history = tracker.metric_history(record.run_id, "eval/err")
        if sorted(step for step, _ in history) != sorted(n for k, n in curve_points if k == "eval/err"):
            problems.append(f"{cell.name}: eval/err points {len(history)}")
        files = sorted(tracker.artifact_names(record.run_id))
        if files != ["cell.yaml", "curves.parquet", "model.pt"]:
            problems.append(f"{cell.name}: artifacts {files}")
    return problems


def gather(out, trials: int, began: float, every_s: float = 30.0) -> list[dict]:
    """The trials' reports as they end, with a line on stderr every ``every_s`` seconds saying how many have
    ended (a run that takes long says where it is instead of nothing until its report)."""
    import queue

    results: list[dict] = []
    said = began
    while len(results) < trials:
        try:
            results.append(out.get(timeout=1.0))
        except queue.Empty:
            pass
        now = time.perf_counter()
        if now - said >= every_s or len(results) == trials:
            failed = sum(1 for r in results if r["error"])
            ended = f"{len(results)} of {trials} trials ended ({failed} failed)"
            print(f"# {now - began:.0f} s: {ended}", file=sys.stderr)
            said = now
        if now - began > 3600:
            raise TimeoutError(f"{trials - len(results)} of {trials} trials still running after an hour")
    return results


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else float("nan")


def run(
    db: str, pool: str, trials: int, points: int = 2000, batches: int = 20, keep: Path | None = None
) -> dict:
    """One load test; its report (a dict, also what ``--json`` writes)."""
    import gc

    from scaling.planning.plan import plan_document
    from scaling.tracking.backends import open_store

    # as root, start_mlflow.sh runs PostgreSQL as user postgres, who must reach MLFLOW_HOME
    tmp = Path(tempfile.mkdtemp(prefix="tracking-load-", dir=keep))
    tmp.chmod(0o755)
    home = tmp / "mlflow"
    procs: list = []
    try:
        started = time.perf_counter()
        uri = start_server(home, db, pool)
        server_start = time.perf_counter() - started
        document = load_sweep(trials)
        cells = [planned.cell for planned in plan_document(document).cells][:trials]
        curves, weights = representative(cells[0], tmp)
        tracker = open_store(uri)
        experiment_id = tracker.experiment_id(SWEEP, create=True)
        parent = tracker.sweep_run(experiment_id, SWEEP, document)

        context = multiprocessing.get_context("fork")
        barrier, out = context.Barrier(trials + 1), context.Queue()
        gc.collect()
        gc.freeze()  # the forked trials share the parent's objects instead of copying them on first touch
        procs = [
            context.Process(
                target=trial,
                args=(uri, experiment_id, parent, cell, curves, weights, points, batches, barrier, out),
            )
            for cell in cells
        ]
        for proc in procs:
            proc.start()
        barrier.wait(timeout=600)
        began = time.perf_counter()
        results = gather(out, len(procs), began)
        wall = time.perf_counter() - began
        for proc in procs:
            proc.join()
        gc.unfreeze()
        print(f"# every trial ended after {wall:.0f} s; reading back {len(cells)} runs", file=sys.stderr)
        problems = check_runs(uri, experiment_id, cells, curves, points)
        sent = [s for r in results for s in r["sent"]]
        asked = sum(r["asked"] for r in results)
        layer = sum(r["layer_retries"] for r in results)
        latencies = [s[0] for s in sent]
        errors: dict[str, int] = {}
        for _, status, what in sent:
            if status >= 400 or status == 0:
                label = f"{status} {what.split(' ')[0]} {what.split('/')[-1]}"
                errors[label] = errors.get(label, 0) + 1
        failed = [r for r in results if r["error"]]
        retried = (len(sent) - asked) + layer
        return {
            "db": db,
            "pool": pool,
            "trials": trials,
            "points": points,
            "batches": batches,
            "server_start_s": round(server_start, 1),
            "wall_s": round(wall, 1),
            "trial_s_p50": round(statistics.median(r["seconds"] for r in results), 1),
            "trial_s_max": round(max(r["seconds"] for r in results), 1),
            "failed_trials": len(failed),
            "failures": sorted({r["error"] for r in failed})[:5],
            "requests": len(sent),
            "requests_per_cell": round(len(sent) / trials, 2),
            "retried": retried,
            "retried_pct": round(100 * retried / max(1, len(sent)), 2),
            "http_errors": errors,
            "retry_lines_per_trial_max": max(len(r["retry_lines"]) for r in results),
            "first_retry_said": next((r["retry_lines"][0] for r in results if r["retry_lines"]), None),
            "latency_p50_ms": round(1000 * percentile(latencies, 0.5), 1),
            "latency_p99_ms": round(1000 * percentile(latencies, 0.99), 1),
            "latency_max_ms": round(1000 * max(latencies, default=float("nan")), 1),
            "runs_checked": len(cells),
            "run_problems": len(problems),
            "problems": problems[:10],
            "requests_by_call": count_calls(sent, trials),
        }
    finally:
        for proc in procs:  # a run stopped early (SIGTERM, an error) leaves no trial behind
            if proc.is_alive():
                proc.kill()
        stop_server(home)
        if keep is None:
            shutil.rmtree(tmp, ignore_errors=True)


def count_calls(sent: list, trials: int) -> dict[str, float]:
    """Requests per cell by endpoint (e.g. ``POST runs/log-batch``)."""
    counts: dict[str, int] = {}
    for _, _, what in sent:
        method, path = what.split(" ", 1)
        name = "artifacts PUT/GET" if "/mlflow-artifacts/" in path else "/".join(path.split("/")[-2:])
        counts[f"{method} {name}"] = counts.get(f"{method} {name}", 0) + 1
    return {k: round(v / trials, 2) for k, v in sorted(counts.items())}


def unwind(signum, frame) -> None:
    """SIGTERM (``timeout``, a scheduler) unwinds like Ctrl-C, so that ``run``'s cleanup stops the server
    and the trials: Python's default would end the process with both left running. Once: a second SIGTERM
    (``timeout`` signals the process and its group) must not cut the cleanup short."""
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise KeyboardInterrupt(f"signal {signum}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.tracking_load", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--db", choices=("postgresql", "sqlite"), default="postgresql")
    parser.add_argument(
        "--pool",
        choices=("shipped", "mlflow-default"),
        default="shipped",
        help="start_mlflow.sh's pool sizes, or MLflow's defaults (5 + 10 overflow)",
    )
    parser.add_argument("--trials", type=int, default=256)
    parser.add_argument("--points", type=int, default=2000, help="training-loss points per cell")
    parser.add_argument("--batches", type=int, default=20, help="flushes of them (checkpoints)")
    parser.add_argument("--json", type=Path, help="also write the report here")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, unwind)
    if args.trials < 1 or args.batches < 1 or args.points % args.batches:
        parser.error("--trials and --batches >= 1, --points a multiple of --batches")
    try:
        report = run(args.db, args.pool, args.trials, args.points, args.batches)
    except KeyboardInterrupt as stop:
        print(
            f"stopped ({stop or 'Ctrl-C'}): the server and the trials were stopped, nothing kept",
            file=sys.stderr,
        )
        return 130
    text = json.dumps(report, indent=1)
    print(text)
    if args.json:
        args.json.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
