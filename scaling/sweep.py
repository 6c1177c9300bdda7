"""The sweep driver and its CLI: ``python -m scaling.sweep sweeps/smoke.yaml``.

1. Plan the sweep file (validated before anything starts).
2. Ask MLflow which cells are complete (tag ``status=complete`` under their ``cell_key``); only the rest
   run. A finished sweep trains nothing and says so; a sweep edited to add cells runs only the new ones.
3. Run each remaining cell as one Ray Tune trial with the cell's resources (fractional or whole GPUs,
   CPUs), or small cells of one shape as one trial of a batched ensemble (scaling.packing), on a local Ray
   started here (the embedded default), an existing cluster (``--address auto``), or, on the head of a
   `ray up` cluster, that cluster (scaling.cluster: its Ray, MLflow server, storage and node types).
   Trials resume from their per-cell checkpoints, so rerunning the same command after a crash (Ctrl-C,
   SIGKILL of this driver, a lost node) continues where each cell stopped.
4. Print live progress: cells done, running, pending, failed, and an estimate of the time left.

Every check runs before any work: an invalid sweep file, an unusable tracking store or storage, a cell no
node can hold (and, on a `ray up` cluster, no node type of its autoscaler could) end the driver with a
message and exit status 2, with nothing written (no MLflow database, no storage directory).

Exit status: 0 when every cell is complete, 1 when some cell failed, 2 on invalid input, 130 when
interrupted (Ctrl-C: trials stop, checkpoints stay; the same command resumes).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TextIO

from .checkpoints import CheckpointStore
from .cluster import describe, ray_up_head, read_node_types, waiting_for_autoscaler
from .cost import describe_compute
from .packing import pack_groups, pack_key
from .plan import Plan, SweepError, load_plan
from .tracking import STATUS_COMPLETE, Tracker, TrackingError, preload, resolve_tracking_uri
from .trial import TrialMember, TrialSpec, tune_trainable

log = logging.getLogger(__name__)


@dataclass
class SweepOutcome:
    total: int
    skipped: int  # complete before this run
    completed: list[str] = field(default_factory=list)  # cell keys completed by this run
    failed: dict[str, str] = field(default_factory=dict)  # cell key -> error
    interrupted: bool = False

    @property
    def ok(self) -> bool:
        return not self.failed and not self.interrupted


def storage_uri(plan: Plan, storage: str | None, default: str | None = None) -> str:
    """Where Tune state and checkpoints go: the flag, the sweep file's run.storage, ``default`` (a `ray up`
    cluster's SCALING_STORAGE), or ./scaling_runs."""
    uri = storage or plan.run.storage or default or "scaling_runs"
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
    out.write(
        f"sweep {plan.name}: {len(plan.cells)} cells from {plan.source}"
        f"{f' (profile {plan.profile})' if plan.profile else ''}\n"
    )
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
        self.running: dict[str, tuple[int, float]] = {}  # trial -> (its cells, progress in [0, 1])
        self.start = time.monotonic()
        self.last = 0.0

    def __getstate__(self):
        # Tune pickles callbacks into its experiment state; the stream stays behind.
        return {**self.__dict__, "out": None}

    def line(self) -> str:
        todo = self.total - self.skipped
        finished = self.done + self.failed
        running = sum(size for size, _ in self.running.values())
        fraction = (finished + sum(size * part for size, part in self.running.values())) / max(todo, 1)
        elapsed = time.monotonic() - self.start
        eta = format_duration(elapsed * (1 - fraction) / fraction) if fraction > 0.02 else "?"
        pending = todo - finished - running
        return (
            f"[{self.name}] {self.skipped + self.done}/{self.total} done, {running} running, "
            f"{pending} pending, {self.failed} failed | {100 * fraction:.0f}% of this run,"
            f" {format_duration(elapsed)} elapsed, ~{eta} left"
        )

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
                progress.running[trial.trial_id] = (len(trial_keys(trial.config)), 0.0)
                progress.show()

            def on_trial_result(self, iteration, trials, trial, result, **info):
                size = len(trial_keys(trial.config))
                progress.running[trial.trial_id] = (size, float(result.get("progress", 0.0)))
                progress.maybe_show()

            def on_trial_complete(self, iteration, trials, trial, **info):
                progress.running.pop(trial.trial_id, None)
                progress.done += len(trial_keys(trial.config))
                progress.show()

            def on_trial_error(self, iteration, trials, trial, **info):
                progress.running.pop(trial.trial_id, None)
                progress.failed += len(trial_keys(trial.config))
                progress.show()

        return ProgressCallback()


def start_ray(address: str | None, num_cpus: int | None = None, num_gpus: int | None = None) -> None:
    """Join a cluster (``address``) or start the embedded local Ray.

    Without an address a new local instance is always started (``address="local"``): a plain ``ray.init()``
    would join any cluster already running on this machine (RAY_ADDRESS, or the latest ``ray start``).
    """
    import ray

    if ray.is_initialized():
        return
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=logging.WARNING)
    if address:
        ray.init(address=address, **quiet)
    else:  # "local": a new Ray of our own, never another process's instance on this machine
        ray.init(address="local", num_cpus=num_cpus, num_gpus=num_gpus, **quiet)


def fits(request: dict[str, float], node: dict[str, float]) -> bool:
    """Whether one node has every resource of the request (Ray names: CPU, GPU, custom), all on itself."""
    return all(node.get(name, 0.0) >= amount for name, amount in request.items() if amount > 0)


def unmet_requests(plan_cells, nodes: list[dict[str, float]]) -> list[str]:
    """One line per cell whose resources no single node has (a trial never spans nodes)."""
    shapes = sorted(
        {
            ", ".join(
                f"{k}={v:g}"
                for k, v in sorted(n.items())
                if k in ("CPU", "GPU") or not (k.startswith("node:") or k.endswith("memory"))
            )
            for n in nodes
        }
    )
    problems = []
    for planned in plan_cells:
        request = planned.resources.as_ray()
        if not any(fits(request, node) for node in nodes):
            asked = ", ".join(f"{k}={v:g}" for k, v in request.items() if v > 0)
            problems.append(f"cell {planned.cell.name} ({planned.cell.key}) asks one node for {asked}")
    if problems:
        problems.append("nodes: " + ("; ".join(f"[{shape}]" for shape in shapes) or "(none alive)"))
    return problems


def check_feasible(plan_cells, autoscaling: bool, node_types=()) -> list[str]:
    """Fail before any trial starts when some cell fits no node (Tune would only wait). On a cluster whose
    autoscaler can start ``node_types``, a cell no live node holds passes when one of those types could
    hold it (it waits for that node) and fails when none could; returns the cells that wait."""
    import ray

    if autoscaling:
        return []
    nodes = [n["Resources"] for n in ray.nodes() if n.get("Alive")]
    problems = unmet_requests(plan_cells, nodes)
    if problems and node_types:
        unmet = []
        for planned in plan_cells:
            request = planned.resources.as_ray()
            if not any(fits(request, node) for node in nodes):
                asked = ", ".join(f"{k}={v:g}" for k, v in request.items() if v > 0)
                unmet.append(
                    (f"cell {planned.cell.name} ({planned.cell.key}) asks one node for {asked}", request)
                )
        waiting, never = waiting_for_autoscaler(unmet, list(node_types))
        if not never:
            return waiting
        raise SweepError(
            "no node of this cluster, and no node type its autoscaler can start, can run some cells:\n  "
            + "\n  ".join(never)
            + f"\nnode types: {describe(list(node_types))}\nlower the cells' `resources` (the sweep file's"
            " `resources:` or a model preset's) or add such a node type to the cluster file"
        )
    if problems:
        raise SweepError(
            "no node of this cluster can run some cells:\n  "
            + "\n  ".join(problems)
            + "\nlower the cells' `resources` (the sweep file's `resources:` or a model preset's),"
            " add such a node, or pass --autoscaling on a cluster that starts such nodes"
        )
    return []


def open_tracking(uri: str) -> tuple[Tracker | None, str | None]:
    """The tracker, checked reachable; None for a SQLite file not created yet (created only once work
    starts)."""
    if uri.startswith("sqlite:///"):
        db = Path(uri[len("sqlite:///") :])
        if not db.exists():
            if not db.parent.is_dir():
                raise TrackingError(
                    f"cannot use the MLflow tracking store {uri}: {db.parent} is not a directory"
                )
            return None, None
    tracker = Tracker(uri)
    tracker.check_reachable()
    return tracker, None


def preload_quietly(tracking: bool) -> None:
    """Import Ray Tune and (``tracking``) tracking.preload; a failure here is reported where it recurs."""
    try:
        import ray.tune  # noqa: F401

        if tracking:
            preload()
    except Exception as err:  # noqa: BLE001 - reported where the module is used or the store opened
        log.debug("preloading failed: %s", err)


def check_storage(uri: str) -> None:
    """Fail before work starts when the checkpoint storage URI cannot be opened."""
    import pyarrow
    from pyarrow import fs as pafs

    try:
        pafs.FileSystem.from_uri(uri)
    except (pyarrow.ArrowException, ValueError, OSError) as err:
        raise SweepError(f"cannot use the storage {uri}: {err}") from None


def trial_slots(pending, cluster: dict[str, float]) -> int:
    """How many trials of the first pending cell's resources the cluster runs at once."""
    request = pending[0].resources.as_ray()
    counts = [cluster.get(name, 0.0) // amount for name, amount in request.items() if amount > 0]
    return max(1, int(min(counts, default=1)))


def trial_specs(pending, pack: int | str, shared: dict, slots: int = 1) -> list[TrialSpec]:
    """One TrialSpec per trial: a cell, or a pack of cells chosen by scaling.packing (cells of one pack
    must ask for the same resources; those that do not run alone)."""
    specs = []
    for group in pack_groups([p.cell for p in pending], pack, lambda c: None, slots):
        cells = [pending[i] for i in group]
        resources = cells[0].resources.as_tune()
        if len(cells) > 1 and any(p.resources.as_tune() != resources for p in cells):
            specs += [single_spec(p, shared) for p in cells]
        elif len(cells) == 1:
            specs.append(single_spec(cells[0], shared))
        else:
            members = tuple(TrialMember(p.cell.to_dict(), p.cell.key, p.cell.name) for p in cells)
            specs.append(
                TrialSpec(
                    members, pack_key([m.key for m in members]), f"pack of {len(cells)}", resources, **shared
                )
            )
    return specs


def single_spec(planned, shared: dict) -> TrialSpec:
    cell = planned.cell
    return TrialSpec(
        (TrialMember(cell.to_dict(), cell.key, cell.name),),
        cell.key,
        cell.name,
        planned.resources.as_tune(),
        **shared,
    )


def trial_keys(config: dict) -> list[str]:
    """The cell keys a Tune trial's config trains (its spec's members)."""
    return [m["key"] for m in config["spec"]["members"]]


def check_sweep_name(tracker: Tracker | None, experiment_id: str | None, plan: Plan, path: str) -> None:
    """A sweep name is one sweep file's MLflow experiment: another file of that name is refused."""
    if experiment_id is None:
        return
    owner = tracker.experiment_tags(experiment_id).get("sweep_file")
    if owner and owner != Path(path).name:
        raise SweepError(
            f"{path}: the sweep name {plan.name!r} is already the MLflow experiment of"
            f" {owner}; give this sweep another `name`"
        )


def cell_states(plan: Plan, complete: set[str], store_uri: str) -> dict[str, str]:
    """The --dry-run state of every cell: complete, partial (step s/S) from its checkpoint, or pending."""
    store = CheckpointStore(store_uri)
    status = {}
    for planned in plan.cells:
        key = planned.cell.key
        step = None if key in complete else store.step(key)
        status[key] = (
            "complete"
            if key in complete
            else f"partial (step {step}/{planned.cell.train.steps})"
            if step is not None
            else "pending"
        )
    return status


def start_cluster(address: str | None, num_cpus: int | None, num_gpus: int | None, new_store: bool) -> None:
    """Start (or join) Ray, with Ray Tune's import and, for a new SQLite store, MLflow's in a thread that
    overlaps Ray's start (which waits on the processes it starts and leaves ~3 of its ~8 CPU-seconds on 2
    cores idle: ~2 s less per sweep)."""
    preloading = threading.Thread(target=preload_quietly, args=(new_store,), name="preload", daemon=True)
    preloading.start()
    start_ray(address, num_cpus, num_gpus)
    preloading.join()


def make_tuner(specs: list[TrialSpec], plan: Plan, store_uri: str, progress: Progress):
    """The Tune experiment: one trial per spec, each with its resources, named by its key."""
    from ray import tune

    trainable = tune.with_resources(tune_trainable, lambda config: config["spec"]["resources"])
    return tune.Tuner(
        trainable,
        param_space={"spec": tune.grid_search([spec.to_dict() for spec in specs])},
        # reuse_actors: a worker process (torch, transformers, MLflow imported once) runs trial after
        # trial; a new process per trial costs seconds, more than a tiny cell's training.
        tune_config=tune.TuneConfig(
            max_concurrent_trials=plan.run.max_concurrent or None,
            reuse_actors=True,
            trial_name_creator=lambda t: t.config["spec"]["key"],
            trial_dirname_creator=lambda t: t.config["spec"]["key"],
        ),
        run_config=tune.RunConfig(
            name=f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}",
            storage_path=f"{store_uri}/tune",
            failure_config=tune.FailureConfig(max_failures=plan.run.max_failures),
            callbacks=[progress.callback()],
            verbose=0,
        ),
    )


def collect_outcome(results, pending, tracker: Tracker, experiment_id: str, outcome: SweepOutcome) -> list:
    """Fill ``outcome`` from the trials' results and the store; the cells left unfinished."""
    final = tracker.cell_records(experiment_id)
    for result in results:
        # A trial still pending when the run was interrupted (Ctrl-C while it waited for a node) has no
        # config in its result; its cells count as unfinished below, by the store.
        for key in trial_keys(result.config) if result.config else []:
            if key in final and final[key].status == STATUS_COMPLETE:
                outcome.completed.append(key)
            elif result.error is not None:
                outcome.failed[key] = f"{type(result.error).__name__}: {result.error}"
    return [
        p
        for p in pending
        if p.cell.key not in outcome.failed
        and (p.cell.key not in final or final[p.cell.key].status != STATUS_COMPLETE)
    ]


def report_outcome(plan: Plan, pending, outcome: SweepOutcome, unfinished: list, out: TextIO) -> None:
    for key, error in outcome.failed.items():
        name = next(p.cell.name for p in pending if p.cell.key == key)
        out.write(f"[{plan.name}] FAILED {name} ({key}): {error.strip().splitlines()[-1] if error else ''}\n")
    if unfinished:
        outcome.interrupted = True
        out.write(
            f"[{plan.name}] {len(unfinished)} cells unfinished (interrupted); rerun the same command"
            f" to resume them from their checkpoints.\n"
        )


def run_sweep(
    path: str,
    profile: str = "",
    overrides: tuple[str, ...] = (),
    dry_run: bool = False,
    address: str | None = None,
    tracking_uri: str | None = None,
    storage: str | None = None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    autoscaling: bool = False,
    out: TextIO | None = None,
) -> SweepOutcome:
    """Plan, skip complete cells, run the rest as Tune trials; see the module docstring."""
    out = out or sys.stdout
    plan = load_plan(path, profile, overrides)
    head = ray_up_head()  # on the head of a `ray up` cluster: its Ray, MLflow server, storage
    if head is not None and not address:
        address = head.ray_address
        # Before Ray is imported (it reads its auth mode then): a `ray exec` shell of a head without Docker
        # lacks RAY_AUTH_MODE, and a driver without it cannot join a cluster with token auth.
        if head.auth_mode:
            os.environ.setdefault("RAY_AUTH_MODE", head.auth_mode)
    uri = resolve_tracking_uri(tracking_uri)
    store_uri = storage_uri(plan, storage, head.storage if head else None)
    check_storage(store_uri)
    tracker, _ = open_tracking(uri)  # nothing is created before the checks below pass
    experiment_id = tracker.experiment_id(plan.name) if tracker is not None else None
    check_sweep_name(tracker, experiment_id, plan, path)
    records = tracker.cell_records(experiment_id) if experiment_id is not None else {}
    complete = {k for k, r in records.items() if r.status == STATUS_COMPLETE}
    pending = [p for p in plan.cells if p.cell.key not in complete]
    if dry_run:
        describe_plan(plan, cell_states(plan, complete, store_uri), out)
        return SweepOutcome(len(plan.cells), len(complete))
    outcome = SweepOutcome(len(plan.cells), len(plan.cells) - len(pending))
    if not pending:
        out.write(f"[{plan.name}] all {len(plan.cells)} cells are complete in {uri}; nothing to train.\n")
        return outcome

    import ray

    start_cluster(address, num_cpus, num_gpus, new_store=tracker is None)
    node_types = read_node_types() if head is not None else []
    waiting = check_feasible(
        pending, autoscaling or bool(address and os.environ.get("SCALING_AUTOSCALING")), node_types
    )
    if head is not None:
        out.write(f"[{plan.name}] on the `ray up` cluster of {head.source} (Ray at {address})\n")
    if waiting:
        out.write(
            f"[{plan.name}] {len(waiting)} cells wait for a node the autoscaler starts"
            f" (node types: {describe(node_types)})\n"
        )
    tracker = tracker or Tracker(uri)
    experiment_id = tracker.experiment_id(plan.name, create=True, tags={"sweep_file": Path(path).name})
    parent = tracker.sweep_run(experiment_id, plan.name, plan.document)
    out.write(
        f"[{plan.name}] {len(pending)} of {len(plan.cells)} cells to run"
        f" ({len(plan.cells) - len(pending)} already complete); tracking {uri}\n"
    )
    out.flush()
    shared = {
        "tracking_uri": uri,
        "experiment_id": experiment_id,
        "sweep": plan.name,
        "parent_run_id": parent,
        "storage": store_uri,
    }
    specs = trial_specs(pending, plan.run.pack, shared, trial_slots(pending, ray.cluster_resources()))
    progress = Progress(plan.name, len(plan.cells), outcome.skipped, out)
    try:
        results = make_tuner(specs, plan, store_uri, progress).fit()
    except KeyboardInterrupt:
        outcome.interrupted = True
        out.write(f"[{plan.name}] interrupted; rerun the same command to resume.\n")
        tracker.end_sweep_run(parent, False)
        return outcome
    unfinished = collect_outcome(results, pending, tracker, experiment_id, outcome)
    progress.show()
    report_outcome(plan, pending, outcome, unfinished, out)
    tracker.end_sweep_run(parent, outcome.ok)
    return outcome


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m scaling.sweep", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", help="the sweep file, e.g. sweeps/smoke.yaml")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the cells, their resources and state; run nothing"
    )
    parser.add_argument(
        "--set",
        dest="overrides",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a setting, e.g. --set train.steps=200 or --set grid.T=[16,64] (repeatable)",
    )
    parser.add_argument("--profile", default="", help="a named profile of the sweep file, e.g. quick")
    parser.add_argument("--address", default=None, help="join an existing Ray cluster ('auto' or host:port)")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="checkpoints and Tune state: a path or URI reachable by every node (default ./scaling_runs)",
    )
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the embedded local Ray")
    parser.add_argument("--num-gpus", type=int, default=None, help="GPUs of the embedded local Ray")
    parser.add_argument(
        "--autoscaling",
        action="store_true",
        help="the cluster adds nodes on demand: skip the check that every cell fits a node",
    )
    return parser.parse_args(argv)


EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    resume = f"resume with the same command: python -m scaling.sweep {shlex.join(argv)}"
    try:
        outcome = run_sweep(
            args.sweep,
            args.profile,
            tuple(args.overrides),
            args.dry_run,
            args.address,
            args.tracking_uri,
            args.storage,
            args.num_cpus,
            args.num_gpus,
            args.autoscaling,
        )
    except (SweepError, TrackingError) as err:
        print(f"error: {err}", file=sys.stderr)
        return EXIT_INVALID
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the trials started
        print(f"interrupted; {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if outcome.failed:
        print(
            f"{len(outcome.failed)} cells failed (their errors are above and in MLflow, tag `error`);"
            f" fix the cause and {resume} (complete cells are skipped)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if outcome.interrupted:
        print(f"interrupted; {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def exit_now(code: int) -> None:
    """End the CLI process without the interpreter's teardown (~1.5 s of freeing torch, Ray and MLflow
    modules, per sweep): output flushed, logging closed and Ray shut down first; every MLflow write and
    checkpoint is already committed by then (the sweep run is ended before main returns)."""
    import ray

    if ray.is_initialized():
        ray.shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
