"""Cold analyses of one store by several checkouts of the code, run alternately in one session (machines
differ, and so does one machine's load from hour to hour): each run a new process with a new, empty
``SCALING_CACHE``; the wall and CPU seconds of each (its fit workers included), the machine, its load, and
whether the checkouts' outputs are the same (analysis.same_outputs, run by this checkout).

    python -m benchmarks.cold_analysis --tracking-uri sqlite:///$D/mlflow.db --out /tmp/cold \\
        --code before=/path/to/old/checkout --code after=. --rounds 3

measured docs/results.md's "A sweep of 10,000 cells and its analysis" (the sweep file defaults to
benchmarks/tiny10000.yaml; ``--profile-last NAME`` writes a cProfile of NAME's last run beside its outputs).
Writes OUT/times.json and OUT/<name>-<round>/ (each run's outputs and log).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def cpu_model() -> str:
    """The CPU's model name (lscpu's), else the platform's processor."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def one_run(name: str, code: Path, args: argparse.Namespace, out: Path, profile: bool) -> dict:
    """One cold analysis by the checkout at ``code``: its wall and CPU seconds, exit status and load."""
    out.mkdir(parents=True, exist_ok=True)
    sweep = str(Path(args.sweep).resolve())
    command = [sys.executable]
    if profile:
        command += ["-m", "cProfile", "-o", str(out / "profile.prof")]
    command += ["-m", "analysis", sweep, "--tracking-uri", args.tracking_uri, "--out", str(out / "outputs")]
    command += args.analysis_args
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory(prefix="cold-cache-") as cache, open(out / "log.txt", "w") as log:
        env = {**os.environ, "PYTHONPATH": str(code), "SCALING_CACHE": cache}
        start = time.perf_counter()
        child = subprocess.Popen(command, cwd=out, env=env, stdout=log, stderr=subprocess.STDOUT)
        with LoadSampler() as during:
            _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    return {
        "code": name,
        "wall_s": round(wall, 2),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 2),
        "exit": child.returncode,
        "load_before": round(load, 2),
        **during.summary(),
        "profiled": profile,
    }


class LoadSampler:
    """The machine's 1-minute load average sampled each second while the block runs (the machine is
    shared: what else ran beside a timed run); ``summary()``: its mean and maximum over the block."""

    def __enter__(self) -> "LoadSampler":
        self.samples: list[float] = [os.getloadavg()[0]]
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self.sample, daemon=True)
        self.thread.start()
        return self

    def sample(self) -> None:
        while not self.stop.wait(1.0):
            self.samples.append(os.getloadavg()[0])

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.samples.append(os.getloadavg()[0])

    def summary(self) -> dict:
        mean = sum(self.samples) / len(self.samples)
        return {"load_mean": round(mean, 2), "load_max": round(max(self.samples), 2)}


def same_outputs(first: Path, other: Path) -> str:
    """analysis.same_outputs' last line for two runs' outputs (this checkout's comparison)."""
    done = subprocess.run(
        [sys.executable, "-m", "analysis.same_outputs", str(first), str(other)],
        cwd=HERE,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(HERE)},
    )
    lines = (done.stdout + done.stderr).strip().splitlines()
    return lines[-1] if lines else f"exit {done.returncode}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.cold_analysis", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("--sweep", default=str(HERE / "benchmarks" / "tiny10000.yaml"))
    parser.add_argument("--tracking-uri", required=True)
    parser.add_argument(
        "--code", action="append", required=True, metavar="NAME=DIR", help="a checkout to run"
    )
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", required=True, type=Path)
    parser.add_argument(
        "--profile-last", default="", metavar="NAME", help="cProfile this checkout's last run"
    )
    parser.add_argument("analysis_args", nargs="*", help="more arguments for python -m analysis (after --)")
    args = parser.parse_args(argv)
    codes = [(c.split("=", 1)[0], Path(c.split("=", 1)[1]).resolve()) for c in args.code]
    runs = []
    for round_ in range(args.rounds):
        for name, code in codes:
            profile = name == args.profile_last and round_ == args.rounds - 1
            run = one_run(name, code, args, args.out / f"{name}-{round_}", profile)
            runs.append({**run, "round": round_})
            print(json.dumps(runs[-1]), flush=True)
    first = codes[0][0]
    compared = {
        name: same_outputs(args.out / f"{first}-0" / "outputs", args.out / f"{name}-0" / "outputs")
        for name, _ in codes[1:]
    }
    record = {
        "date": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "cpu": cpu_model(),
        "cores": len(os.sched_getaffinity(0)),
        "command": "python -m analysis " + " ".join([args.sweep, "--tracking-uri", args.tracking_uri]),
        "codes": {name: str(code) for name, code in codes},
        "runs": runs,
        f"same_outputs vs {first}": compared,
    }
    (args.out / "times.json").write_text(json.dumps(record, indent=2))
    print(json.dumps({k: v for k, v in record.items() if k != "runs"}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
