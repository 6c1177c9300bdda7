"""The sweep driver and its CLI: ``python -m scaling.sweep sweeps/smoke.yaml``.

1. Plan the sweep file (validated before anything starts).
2. Ask MLflow which cells are complete (tag ``status=complete`` under their ``cell_key``); only the rest
   run. A finished sweep trains nothing and says so; a sweep edited to add cells runs only the new ones.
3. Run each remaining cell as one Ray Tune trial with the cell's resources (fractional or whole GPUs,
   CPUs), on a local Ray started here (the embedded default) or an existing cluster (``--address auto``).
   Trials resume from their per-cell checkpoints, so rerunning the same command after a crash (Ctrl-C,
   SIGKILL of this driver, a lost node) continues where each cell stopped.
4. Print live progress: cells done, running, pending, failed, and an estimate of the time left.

Exit status: 0 when every cell is complete, 1 when some cell failed, 2 on invalid input.
"""
from __future__ import annotations

import argparse
import logging
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .cost import describe_compute
from .plan import Plan, SweepError, load_plan
from .tracking import STATUS_COMPLETE, Tracker, TrackingError, resolve_tracking_uri
from .trial import CheckpointStore, tune_trainable


@dataclass
class SweepOutcome:
    total: int
    skipped: int                     # complete before this run
    completed: list[str] = field(default_factory=list)     # cell keys completed by this run
    failed: dict[str, str] = field(default_factory=dict)   # cell key -> error
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


def storage_uri(plan: Plan, storage: str | None) -> str:
    """Where Tune state and checkpoints go: the flag, the sweep file's run.storage, or ./scaling_runs."""
    uri = storage or plan.run.storage or "scaling_runs"
    if "://" not in uri:
        uri = str(Path(uri).resolve())
    return f"{uri.rstrip('/')}/{plan.name}"


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def describe_plan(plan: Plan, status: dict[str, str], out: TextIO) -> None:
    """The --dry-run table: one line per cell with its resources and state."""
    out.write(f"sweep {plan.name}: {len(plan.cells)} cells from {plan.source}"
              f"{f' (profile {plan.profile})' if plan.profile else ''}\n")
    out.write(f"{'key':16}  {'cell':40}  {'cpu':>4}  {'gpu':>5}  state\n")
    for planned in plan.cells:
        cell, res = planned.cell, planned.resources
        out.write(f"{cell.key:16}  {cell.name:40}  {res.cpu:>4g}  {res.gpu:>5g}  {status[cell.key]}\n")
    counts: dict[str, int] = {}
    for state in status.values():
        counts[state.split(" ")[0]] = counts.get(state.split(" ")[0], 0) + 1
    out.write("totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "\n")
    out.write(describe_compute(plan) + "\n")


class Progress:
    """Sweep progress, printed as one line whenever the state changes (or every 15 s while training)."""

    def __init__(self, name: str, total: int, skipped: int, out: TextIO, every: float = 15.0):
        self.name, self.total, self.skipped, self.out, self.every = name, total, skipped, out, every
        self.done = self.failed = 0
        self.running: dict[str, float] = {}
        self.start = time.monotonic()
        self.last = 0.0

    def __getstate__(self):
        # Tune pickles callbacks into its experiment state; the stream stays behind.
        return {**self.__dict__, "out": None}

    def line(self) -> str:
        todo = self.total - self.skipped
        finished = self.done + self.failed
        fraction = (finished + sum(self.running.values())) / max(todo, 1)
        elapsed = time.monotonic() - self.start
        eta = format_duration(elapsed * (1 - fraction) / fraction) if fraction > 0.02 else "?"
        pending = todo - finished - len(self.running)
        return (f"[{self.name}] {self.skipped + self.done}/{self.total} done, {len(self.running)} running, "
                f"{pending} pending, {self.failed} failed | {100 * fraction:.0f}% of this run,"
                f" {format_duration(elapsed)} elapsed, ~{eta} left")

    def show(self) -> None:
        self.last = time.monotonic()
        out = self.out or sys.stdout
        out.write(self.line() + "\n")
        out.flush()

    def maybe_show(self) -> None:
        if time.monotonic() - self.last >= self.every:
            self.show()

    def callback(self):
        """The Ray Tune callback that feeds this progress."""
        from ray.tune import Callback

        progress = self

        class ProgressCallback(Callback):
            def on_trial_start(self, iteration, trials, trial, **info):
                progress.running[trial.trial_id] = 0.0
                progress.show()

            def on_trial_result(self, iteration, trials, trial, result, **info):
                progress.running[trial.trial_id] = float(result.get("progress", 0.0))
                progress.maybe_show()

            def on_trial_complete(self, iteration, trials, trial, **info):
                progress.running.pop(trial.trial_id, None)
                progress.done += 1
                progress.show()

            def on_trial_error(self, iteration, trials, trial, **info):
                progress.running.pop(trial.trial_id, None)
                progress.failed += 1
                progress.show()

        return ProgressCallback()


def start_ray(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Join a cluster (``address``) or start the embedded local Ray."""
    import ray

    if ray.is_initialized():
        return
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if address:
        ray.init(address=address, **quiet)
    else:
        ray.init(num_cpus=num_cpus, num_gpus=num_gpus, **quiet)


def check_feasible(plan_cells, autoscaling: bool) -> None:
    """Fail before any trial starts when a cell asks for more than the biggest node has (Tune only waits)."""
    import ray

    if autoscaling:
        return
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    best_cpu = max((n.get("CPU", 0) for n in nodes), default=0)
    best_gpu = max((n.get("GPU", 0) for n in nodes), default=0)
    for planned in plan_cells:
        res = planned.resources
        if res.cpu > best_cpu or res.gpu > best_gpu:
            raise SweepError(f"cell {planned.cell.name} asks for cpu={res.cpu:g}, gpu={res.gpu:g}, but the largest"
                             f" node has CPU={best_cpu:g}, GPU={best_gpu:g}; lower the model's `resources`, or"
                             f" pass --autoscaling on a cluster that adds such nodes")


def run_sweep(path: str, profile: str = "", overrides: tuple[str, ...] = (), dry_run: bool = False,
              address: str | None = None, tracking_uri: str | None = None, storage: str | None = None,
              num_cpus: int | None = None, num_gpus: int | None = None, autoscaling: bool = False,
              out: TextIO | None = None) -> SweepOutcome:
    """Plan, skip complete cells, run the rest as Tune trials; see the module docstring."""
    out = out or sys.stdout
    plan = load_plan(path, profile, overrides)
    uri = resolve_tracking_uri(tracking_uri)
    store_uri = storage_uri(plan, storage)
    source = Path(path).name
    if dry_run and uri.startswith("sqlite:///") and not Path(uri[len("sqlite:///"):]).exists():
        tracker, experiment_id = None, None        # nothing tracked yet; do not create the database
    else:
        tracker = Tracker(uri)
        tracker.check_reachable()
        experiment_id = tracker.experiment_id(plan.name)
    if experiment_id is not None:
        owner = tracker.experiment_tags(experiment_id).get("sweep_file")
        if owner and owner != source:
            raise SweepError(f"{path}: the sweep name {plan.name!r} is already the MLflow experiment of"
                             f" {owner}; give this sweep another `name`")
    records = tracker.cell_records(experiment_id) if experiment_id is not None else {}
    complete = {k for k, r in records.items() if r.status == STATUS_COMPLETE}
    pending = [p for p in plan.cells if p.cell.key not in complete]

    if dry_run:
        store = CheckpointStore(store_uri)
        status = {}
        for planned in plan.cells:
            key = planned.cell.key
            step = None if key in complete else store.step(key)
            status[key] = ("complete" if key in complete else
                           f"partial (step {step}/{planned.cell.train.steps})" if step is not None else "pending")
        describe_plan(plan, status, out)
        return SweepOutcome(len(plan.cells), len(complete))

    outcome = SweepOutcome(len(plan.cells), len(plan.cells) - len(pending))
    if not pending:
        out.write(f"[{plan.name}] all {len(plan.cells)} cells are complete in {uri}; nothing to train.\n")
        return outcome

    from ray import tune

    start_ray(address, num_cpus, num_gpus)
    check_feasible(pending, autoscaling or bool(address and os.environ.get("SCALING_AUTOSCALING")))
    experiment_id = tracker.experiment_id(plan.name, create=True, tags={"sweep_file": source})
    parent = tracker.sweep_run(experiment_id, plan.name, plan.document)
    out.write(f"[{plan.name}] {len(pending)} of {len(plan.cells)} cells to run"
              f" ({len(plan.cells) - len(pending)} already complete); tracking {uri}\n")
    out.flush()

    shared = {"tracking_uri": uri, "experiment_id": experiment_id, "sweep": plan.name,
              "parent_run_id": parent, "storage": store_uri}
    configs = [{**shared, "cell": p.cell.to_dict(), "key": p.cell.key, "name": p.cell.name,
                "resources": p.resources.as_tune()} for p in pending]
    progress = Progress(plan.name, len(plan.cells), outcome.skipped, out)
    trainable = tune.with_resources(tune_trainable, lambda config: config["cell_config"]["resources"])
    tuner = tune.Tuner(
        trainable,
        param_space={"cell_config": tune.grid_search(configs)},
        tune_config=tune.TuneConfig(max_concurrent_trials=plan.run.max_concurrent or None,
                                    trial_name_creator=lambda t: t.config["cell_config"]["key"],
                                    trial_dirname_creator=lambda t: t.config["cell_config"]["key"]),
        run_config=tune.RunConfig(
            name=f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}", storage_path=f"{store_uri}/tune",
            failure_config=tune.FailureConfig(max_failures=plan.run.max_failures),
            callbacks=[progress.callback()], verbose=0),
    )
    try:
        results = tuner.fit()
    except KeyboardInterrupt:
        outcome.interrupted = True
        out.write(f"[{plan.name}] interrupted; rerun the same command to resume.\n")
        tracker.end_sweep_run(parent, False)
        return outcome
    for result in results:
        key = result.config["cell_config"]["key"]
        if result.error is not None:
            outcome.failed[key] = f"{type(result.error).__name__}: {result.error}"
        elif result.metrics.get("done"):
            outcome.completed.append(key)
    final = tracker.cell_records(experiment_id)
    unfinished = [p for p in pending if p.cell.key not in outcome.failed
                  and (p.cell.key not in final or final[p.cell.key].status != STATUS_COMPLETE)]
    progress.show()
    for key, error in outcome.failed.items():
        name = next(p.cell.name for p in pending if p.cell.key == key)
        out.write(f"[{plan.name}] FAILED {name} ({key}): {error.strip().splitlines()[-1] if error else ''}\n")
    if unfinished:
        outcome.interrupted = True
        out.write(f"[{plan.name}] {len(unfinished)} cells unfinished (interrupted); rerun the same command"
                  f" to resume them from their checkpoints.\n")
    tracker.end_sweep_run(parent, outcome.ok)
    return outcome


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scaling.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="the sweep file, e.g. sweeps/smoke.yaml")
    parser.add_argument("--dry-run", action="store_true", help="print the cells, their resources and state; run nothing")
    parser.add_argument("--set", dest="overrides", action="append", default=[], metavar="KEY=VALUE",
                        help="override a setting, e.g. --set train.steps=200 or --set grid.T=[16,64] (repeatable)")
    parser.add_argument("--profile", default="", help="a named profile of the sweep file, e.g. quick")
    parser.add_argument("--address", default=None, help="join an existing Ray cluster ('auto' or host:port)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
    parser.add_argument("--storage", default=None,
                        help="checkpoints and Tune state: a path or URI reachable by every node (default ./scaling_runs)")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the embedded local Ray")
    parser.add_argument("--num-gpus", type=int, default=None, help="GPUs of the embedded local Ray")
    parser.add_argument("--autoscaling", action="store_true",
                        help="the cluster adds nodes on demand: skip the check that every cell fits a node")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        outcome = run_sweep(args.sweep, args.profile, tuple(args.overrides), args.dry_run, args.address,
                            args.tracking_uri, args.storage, args.num_cpus, args.num_gpus, args.autoscaling)
    except (SweepError, TrackingError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    return 0 if outcome.ok else 1


if __name__ == "__main__":
    sys.exit(main())
