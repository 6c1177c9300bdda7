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
4. Show the progress (scaling.progress): one live view in a terminal, one line per change elsewhere (and
   a heartbeat while cells run), then a summary and the commands to run next.

``run_sweep`` does these in named phases (plan_run, read_store, describe_run or done_already, start,
train, report), each reading and filling in one scaling.sweep_run.SweepRun.

Every check runs before any work: an invalid sweep file, an unusable tracking store or storage, a cell no
node can hold (and, on a `ray up` cluster, no node type of its autoscaler could) end the driver with a
message and exit status 2, with nothing written (no MLflow database, no storage directory).

Several drivers may run the same sweep at once (a relaunch while the first still runs, two people on one
cluster): each cell is trained by at most one trial at a time, whichever driver started it (a lease per
cell, scaling.leases). A driver skips the cells another driver's trials hold, trains the others, then
waits for the held ones and trains any that their holder left unfinished; both drivers end when every
cell is complete, sooner than one alone.

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
from pathlib import Path
from typing import TextIO

from .checkpoints import CheckpointStore
from .cluster import describe, ray_up_head, read_node_types, waiting_for_autoscaler
from .cost import describe_compute, load_gpu_table
from .gpu_plan import describe_gpu
from .guards import GuardError, check_address, check_flags, probe_storage
from .leases import Leases, driver_id
from .packing import gpu_budget, pack_groups, pack_key
from .plan import Plan, SweepError, add_set_argument, load_plan
from .progress import Progress, next_commands, quiet_ray, summary_lines
from .redact import TRACKING_URI_ENV, has_secret, install_log_redaction, redact
from .sweep_run import RunOptions, SweepOutcome, SweepRun
from .tracking import TrackingError
from .tracking.adaptive_waves import read_waves
from .tracking.store_template import preload
from .tracking.tracker import Tracker
from .tracking.uri import database_has_store, is_database, local_store_path, resolve_tracking_uri
from .trial import TrialMember, TrialSpec, spec_in, tune_trainable

log = logging.getLogger(__name__)


def storage_uri(plan: Plan, storage: str | None, default: str | None = None) -> str:
    """Where Tune state and checkpoints go: the flag, the sweep file's run.storage, ``default`` (a `ray up`
    cluster's SCALING_STORAGE), or ./scaling_runs."""
    uri = storage or plan.run.storage or default or "scaling_runs"
    if "://" not in uri:
        uri = str(Path(uri).resolve())
    return f"{uri.rstrip('/')}/{plan.name}"


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
        counts[state.split(" (")[0]] = counts.get(state.split(" (")[0], 0) + 1
    out.write("totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "\n")
    out.write(describe_compute(plan) + "\n")
    out.write(describe_gpu(plan) + "\n")


def start_ray(
    address: str | None,
    num_cpus: int | None = None,
    num_gpus: int | None = None,
    env: dict[str, str] | None = None,
    verbose: bool = False,
) -> None:
    """Join a cluster (``address``) or start the embedded local Ray; ``env`` reaches every trial process
    (the local Ray's processes inherit this one's environment; a cluster's get it as a runtime env).

    Without an address a new local instance is always started (``address="local"``): a plain ``ray.init()``
    would join any cluster already running on this machine (RAY_ADDRESS, or the latest ``ray start``).
    """
    import ray

    if ray.is_initialized():
        return
    level = logging.WARNING if verbose else logging.ERROR
    quiet = dict(include_dashboard=False, log_to_driver=False, logging_level=level)
    os.environ.update(env or {})
    if address:
        ray.init(address=address, runtime_env={"env_vars": env} if env else None, **quiet)
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


def open_tracking(uri: str) -> Tracker | None:
    """The tracker of a store that exists, checked to be an MLflow store that answers (Tracker.existing);
    None for a store not created yet (a local file or folder, MLflow's tables in a database server): it is
    created only once work starts, never by --dry-run."""
    db = local_store_path(uri)
    if db is not None and not db.exists():
        if not db.parent.is_dir():
            raise TrackingError(f"cannot use the MLflow tracking store {uri}: {db.parent} is not a directory")
        return None
    if is_database(uri) and not database_has_store(uri):  # an empty database: MLflow's tables come later
        return None
    return Tracker.existing(uri)


def preload_quietly(tracking: bool) -> None:
    """Import Ray Tune and (``tracking``) tracking.store_template.preload; a failure here is reported where it
    recurs."""
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
    must ask for the same resources; those that do not run alone). Cells that ask for a GPU pack as many
    as fit their share of the GPU measured in the CUDA cost table, when there is one."""
    specs, table = [], load_gpu_table()
    gpu = {p.cell.key: gpu_budget(p.resources.gpu, table) for p in pending}
    for group in pack_groups([p.cell for p in pending], pack, lambda c: None, slots, lambda c: gpu[c.key]):
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
    return [m["key"] for m in spec_in(config)["members"]]


def adaptive_policy(plan: Plan, path: str):
    """The adaptive policy of a sweep run with --adaptive; a SweepError (before any work) when the file has
    no ``adaptive:`` section or its first wave exceeds the budget."""
    if plan.adaptive is None:
        raise SweepError(
            f"{path}: --adaptive needs an `adaptive:` section in the sweep file (a budget and the questions"
            " that matter; see docs/adaptive.md)"
        )
    from .adaptive.policy import Policy  # defers scipy.stats (~2 s): only --adaptive needs it

    policy = Policy(plan)
    problem = policy.first_wave_problem()
    if problem:
        raise SweepError(f"{path}: adaptive: {problem}")
    return policy


def describe_adaptive(policy, out: TextIO) -> None:
    """The --dry-run --adaptive lines: budget, questions, the first wave."""
    lattice, first = policy.lattice, policy.first_wave()
    questions = "; ".join(q.name for q in policy.settings.questions)
    out.write(
        f"adaptive: budget {policy.settings.budget:.0%} of the lattice's estimated compute;"
        f" questions: {questions};"
        f" first wave {len(first)} cells ({lattice.cost(first) / lattice.total_cost:.0%} of the compute),"
        f" then waves of {policy.settings.wave} cells\n"
    )


def check_sweep_name(run: SweepRun) -> None:
    """A sweep name is one sweep file's MLflow experiment: another file of that name is refused."""
    if run.experiment_id is None:
        return
    owner = run.tracker.experiment_tags(run.experiment_id).get("sweep_file")
    if owner and owner != Path(run.path).name:
        raise SweepError(
            f"{run.path}: the sweep name {run.name!r} is already the MLflow experiment of"
            f" {owner}; give this sweep another `name`"
        )


def cell_states(plan: Plan, complete: set[str], store_uri: str) -> dict[str, str]:
    """The --dry-run state of every cell: complete, partial (step s/S) from its checkpoint, pending, or
    checkpoint damaged (and what a run will do about it); cells another driver trains now say by whom."""
    store, leases = CheckpointStore(store_uri), Leases(store_uri)
    status = {}
    for planned in plan.cells:
        key, steps = planned.cell.key, planned.cell.train.steps
        if key in complete:
            status[key] = "complete"
            continue
        step, damaged = store.inspect(key)
        if damaged:
            status[key] = (
                "checkpoint damaged ("
                + (f"resumes from step {step}/{steps}" if step is not None else "trains from scratch")
                + ")"
            )
        else:
            status[key] = f"partial (step {step}/{steps})" if step is not None else "pending"
        holder = leases.holder(key)
        if holder is not None:
            status[key] += f", training now in {holder.describe()}"
    return status


def start_cluster(
    address: str | None,
    num_cpus: int | None,
    num_gpus: int | None,
    new_store: bool,
    env: dict[str, str] | None = None,
    verbose: bool = False,
) -> None:
    """Start (or join) Ray, with Ray Tune's import and, for a new SQLite store, MLflow's in a thread that
    overlaps Ray's start (which waits on the processes it starts and leaves ~3 of its ~8 CPU-seconds on 2
    cores idle: ~2 s less per sweep)."""
    preloading = threading.Thread(target=preload_quietly, args=(new_store,), name="preload", daemon=True)
    preloading.start()
    start_ray(address, num_cpus, num_gpus, env, verbose)
    preloading.join()


def make_tuner(run: SweepRun, specs: list[TrialSpec], progress: Progress, round_: int = 0):
    """The Tune experiment: one trial per spec, each with its resources, named by its key; its name is
    unique to this driver and round (two drivers of one sweep share the storage)."""
    from ray import tune
    from ray.tune.search.basic_variant import BasicVariantGenerator

    plan = run.plan
    trainable = tune.with_resources(tune_trainable, lambda config: spec_in(config)["resources"])
    return tune.Tuner(
        trainable,
        # one preset point per trial (TrialSpec.config says why not a grid search over the specs)
        param_space={"spec": ""},
        # reuse_actors: a worker process (torch, transformers, MLflow imported once) runs trial after
        # trial; a new process per trial costs seconds, more than a tiny cell's training.
        tune_config=tune.TuneConfig(
            # the generator's own limit: Tune's max_concurrent_trials is not applied to a search_alg given
            search_alg=BasicVariantGenerator(
                points_to_evaluate=[spec.config() for spec in specs],
                max_concurrent=plan.run.max_concurrent or 0,
            ),
            num_samples=len(specs),
            max_concurrent_trials=plan.run.max_concurrent or None,
            reuse_actors=True,
            trial_name_creator=lambda t: spec_in(t.config)["key"],
            trial_dirname_creator=lambda t: spec_in(t.config)["key"],
        ),
        run_config=tune.RunConfig(
            name=f"{plan.name}-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}-{round_}",
            storage_path=f"{run.store_uri}/tune",
            failure_config=tune.FailureConfig(max_failures=plan.run.max_failures),
            callbacks=[progress.callback()],
            verbose=0,
        ),
    )


def collect_outcome(run: SweepRun, results, pending) -> tuple[list, list]:
    """Fill the run's outcome from the trials' results and the store; (the cells left unfinished, the
    unfinished cells whose trials found them held by another driver)."""
    complete = run.complete_now()
    held = set()
    for result in results:
        held |= set(filter(None, str((result.metrics or {}).get("held_keys", "")).split(",")))
    for result in results:
        # A trial still pending when the run was interrupted (Ctrl-C while it waited for a node) has no
        # config in its result; its cells count as unfinished below, by the store.
        for key in trial_keys(result.config) if result.config else []:
            if key in complete:
                run.outcome.completed.append(key)
            elif result.error is not None and key not in held:
                run.outcome.failed[key] = f"{type(result.error).__name__}: {redact(str(result.error))}"
    left = [p for p in pending if p.cell.key not in run.outcome.failed and p.cell.key not in complete]
    return [p for p in left if p.cell.key not in held], [p for p in left if p.cell.key in held]


def wait_for_holders(run: SweepRun, held: list, leases: Leases, poll: float = 2.0) -> None:
    """Wait until no other driver's trial holds any of the ``held`` cells (finished, failed or gone stale)."""
    holders = sorted({h.describe() for h in (leases.holder(p.cell.key) for p in held) if h is not None})
    if holders:
        run.say(
            f"[{run.name}] {len(held)} cells are being trained by another driver: {'; '.join(holders)};"
            f" waiting for them"
        )
    while any(leases.holder(p.cell.key) is not None for p in held):
        time.sleep(poll)


def run_rounds(run: SweepRun, pending, progress: Progress) -> list:
    """Tune experiments until every pending cell is complete, failed or interrupted: each round trains the
    cells no other driver holds; cells held elsewhere are waited for and, if left unfinished, run in the
    next round. The cells left unfinished."""
    import ray

    leases = Leases(run.store_uri)
    for round_ in range(100):
        specs = trial_specs(
            pending, run.plan.run.pack, run.shared, trial_slots(pending, ray.cluster_resources())
        )
        results = make_tuner(run, specs, progress, round_).fit()
        unfinished, held = collect_outcome(run, results, pending)
        if unfinished or not held:
            return unfinished + held
        wait_for_holders(run, held, leases)
        complete = run.complete_now()
        pending = [p for p in held if p.cell.key not in complete]
        run.outcome.completed += [p.cell.key for p in held if p not in pending]
        if not pending:
            return []
    return pending


def run_cells(run: SweepRun, cells, total: int, skipped: int) -> list:
    """Train ``cells`` (of ``total``, ``skipped`` complete before) as Tune trials with their progress shown;
    the cells left unfinished."""
    import ray

    specs = trial_specs(cells, run.plan.run.pack, run.shared, trial_slots(cells, ray.cluster_resources()))
    run.say(
        f"[{run.name}] {len(cells)} of {total} cells to run ({skipped} already complete)"
        f" {describe_trials(specs)}; tracking {redact(run.uri)}"
    )
    run.trials.append(len(specs))
    progress = Progress(
        run.name,
        total,
        skipped,
        run.out,
        live=run.options.live,
        trials=len(specs),
        heartbeat=run.plan.run.heartbeat,
    )
    with progress:
        return run_rounds(run, cells, progress)


def broken_sweep(run: SweepRun, err: Exception) -> None:
    """The summary of a sweep whose Tune run raised (storage full, Tune's own failure): what completed and
    what did not; the unfinished cells count as failed."""
    try:
        complete = run.complete_now()
    except TrackingError:
        complete = set()
    reason = f"{type(err).__name__}: {redact(str(err)).strip().splitlines()[0] if str(err).strip() else ''}"
    run.say(f"[{run.name}] the sweep stopped: {reason}")
    for planned in run.pending:
        key = planned.cell.key
        if key in complete:
            run.outcome.completed.append(key)
        else:
            run.outcome.failed[key] = f"unfinished: the sweep stopped ({reason})"
    done = sum(1 for p in run.pending if p.cell.key in run.outcome.completed)
    run.say(
        f"[{run.name}] {done} of {len(run.pending)} cells completed before it stopped; the other"
        f" {len(run.pending) - done} keep their checkpoints"
    )


def clean_temp_files(store_uri: str, keys: list[str]) -> None:
    """Remove checkpoint temp files the cells' trials left (a full disk, a killed trial); cells another
    driver trains now are left alone."""
    store, leases = CheckpointStore(store_uri), Leases(store_uri)
    try:
        store.clean([key for key in keys if leases.holder(key) is None])
    except OSError as err:
        log.warning("could not remove leftover temp files: %s", err)


def describe_trials(specs: list[TrialSpec]) -> str:
    """How the cells to run became trials: "as 10 trials (16 small cells packed into 2, ...)"."""
    packs = [spec for spec in specs if spec.is_pack]
    trials = f"as {len(specs)} trial{'s' if len(specs) != 1 else ''}"
    if not packs:
        return trials
    packed = sum(len(spec.members) for spec in packs)
    return f"{trials} ({packed} small cells packed into {len(packs)}, scaling.packing)"


# ---------------------------------------------------------------- the phases of run_sweep


def plan_run(
    path: str,
    profile: str,
    overrides: tuple[str, ...],
    tracking_uri: str | None,
    storage: str | None,
    out: TextIO,
    options: RunOptions,
) -> SweepRun:
    """Phase 1: the plan, the stores and the Ray the run uses, every one checked before anything is
    written."""
    started = time.monotonic()
    check_flags(options.num_cpus, options.num_gpus, options.max_cells)
    plan = load_plan(path, profile, overrides, options.max_cells)
    run = SweepRun(path, profile, overrides, options, out, started, plan, address=options.address)
    run.policy = adaptive_policy(plan, path) if options.adaptive else None
    run.head = ray_up_head()  # on the head of a `ray up` cluster: its Ray, MLflow server, storage
    if run.head is not None and not run.address:
        run.address = run.head.ray_address
        # Before Ray is imported (it reads its auth mode then): a `ray exec` shell of a head without Docker
        # lacks RAY_AUTH_MODE, and a driver without it cannot join a cluster with token auth.
        if run.head.auth_mode:
            os.environ.setdefault("RAY_AUTH_MODE", run.head.auth_mode)
    run.uri = resolve_tracking_uri(tracking_uri)
    run.store_uri = storage_uri(plan, storage, run.head.storage if run.head else None)
    check_storage(run.store_uri)
    if not options.dry_run:
        check_address(run.address)
        probe_storage(run.store_uri)
    return run


def read_store(run: SweepRun) -> None:
    """Phase 2: which of the plan's cells are complete in the store (nothing is created yet)."""
    run.tracker = open_tracking(run.uri)
    run.experiment_id = run.tracker.experiment_id(run.name) if run.tracker is not None else None
    check_sweep_name(run)
    run.complete = run.complete_now() if run.experiment_id is not None else set()
    run.pending = [p for p in run.plan.cells if p.cell.key not in run.complete]
    run.outcome = SweepOutcome(len(run.plan.cells), len(run.plan.cells) - len(run.pending))


def describe_run(run: SweepRun) -> SweepOutcome:
    """Phase 3 of --dry-run: every cell with its resources and state, the compute, the adaptive plan."""
    describe_plan(run.plan, cell_states(run.plan, run.complete, run.store_uri), run.out)
    if run.policy is not None:
        describe_adaptive(run.policy, run.out)
    return SweepOutcome(len(run.plan.cells), len(run.complete))


def done_already(run: SweepRun) -> bool:
    """Phase 3: whether there is nothing to train (every cell complete, or an adaptive sweep that ended
    with the cells now complete), said so."""
    if not run.pending:
        total = len(run.plan.cells)
        run.say(f"[{run.name}] all {total} cells are complete in {redact(run.uri)}; nothing to train.")
        return True
    if run.policy is not None and run.experiment_id is not None:
        from .adaptive.driver import ended_already  # defers scipy.stats (~2 s): only --adaptive

        run.waves = read_waves(run.tracker, run.experiment_id, run.name)
        return ended_already(run)
    return False


def start(run: SweepRun) -> None:
    """Phase 4: Ray started or joined and every cell checked to fit a node; the MLflow experiment (and a new
    SQLite store) and the sweep's parent run created; what every trial is told."""
    options = run.options
    secret = has_secret(run.uri)
    env = {TRACKING_URI_ENV: run.uri} if secret else {}  # credentials travel outside Tune's state
    quiet_ray(options.verbose)
    new_store = run.tracker is None
    start_cluster(
        run.address, options.num_cpus, options.num_gpus, new_store, env=env, verbose=options.verbose
    )
    node_types = read_node_types() if run.head is not None else []
    autoscaling = options.autoscaling or bool(run.address and os.environ.get("SCALING_AUTOSCALING"))
    waiting = check_feasible(run.pending, autoscaling, node_types)
    if run.head is not None:
        run.say(f"[{run.name}] on the `ray up` cluster of {run.head.source} (Ray at {run.address})")
    if waiting:
        run.say(
            f"[{run.name}] {len(waiting)} cells wait for a node the autoscaler starts"
            f" (node types: {describe(node_types)})"
        )
    run.tracker = run.tracker or Tracker(run.uri)
    sweep_file = Path(run.path).name
    run.experiment_id = run.tracker.experiment_id(run.name, create=True, tags={"sweep_file": sweep_file})
    run.parent = run.tracker.sweep_run(run.experiment_id, run.name, run.plan.document)
    run.shared = {
        "tracking_uri": redact(run.uri),
        "experiment_id": run.experiment_id,
        "sweep": run.name,
        "parent_run_id": run.parent,
        "storage": run.store_uri,
        "driver": driver_id(),
    }


def train(run: SweepRun) -> list | None:
    """Phase 5: the pending cells trained (or the adaptive driver's waves); the cells left unfinished, or
    None when the sweep was interrupted or broke (its parent run is then ended, its outcome final)."""
    total, skipped = len(run.plan.cells), len(run.plan.cells) - len(run.pending)
    try:
        if run.policy is None:
            return run_cells(run, run.pending, total, skipped)
        from .adaptive.driver import run_adaptive  # defers scipy.stats (~2 s)

        unfinished = run_adaptive(run, lambda cells: run_cells(run, cells, len(cells), 0))["unfinished"]
        outcome = run.outcome
        outcome.total = outcome.skipped + len(outcome.completed) + len(outcome.failed) + len(unfinished)
        return unfinished
    except KeyboardInterrupt:
        run.outcome.interrupted = True
        run.say(f"[{run.name}] interrupted; rerun the same command to resume.")
        run.tracker.end_sweep_run(run.parent, "KILLED")
    except Exception as err:  # noqa: BLE001 - any failure of Tune itself: summarise, end the run, exit 1
        broken_sweep(run, err)
        clean_temp_files(run.store_uri, [p.cell.key for p in run.pending])
        run.tracker.end_sweep_run(run.parent, "FAILED")
    return None


def report(run: SweepRun, unfinished: list) -> None:
    """Phase 6: the closing summary (scaling.progress.summary_lines), how to resume what is unfinished;
    leftover temp files removed and the sweep's parent run ended."""
    commands = next_commands(
        run.path,
        run.profile,
        run.overrides,
        redact(run.uri),
        run.name,
        run.experiment_id,
        default_uri=resolve_tracking_uri(None),
    )
    lines = summary_lines(run.summary(len(unfinished), commands))
    if unfinished:
        run.outcome.interrupted = True
        lines.append(
            f"[{run.name}] {len(unfinished)} cells unfinished (interrupted); rerun the same command"
            f" to resume them from their checkpoints."
        )
    run.say("\n".join(lines))
    clean_temp_files(run.store_uri, [p.cell.key for p in run.pending])
    outcome = run.outcome
    run.tracker.end_sweep_run(
        run.parent, "FINISHED" if outcome.ok else "FAILED" if outcome.failed else "KILLED"
    )


def run_sweep(
    path: str,
    profile: str = "",
    overrides: tuple[str, ...] = (),
    *,
    tracking_uri: str | None = None,
    storage: str | None = None,
    out: TextIO | None = None,
    options: RunOptions | None = None,
) -> SweepOutcome:
    """Plan, skip complete cells, run the rest as Tune trials; see the module docstring.

    ``tracking_uri`` and ``storage``: the MLflow store and the checkpoint storage (else the defaults above);
    ``out``: where the progress and the summary go (stdout); ``options``: the CLI's other flags.
    """
    run = plan_run(
        path, profile, overrides, tracking_uri, storage, out or sys.stdout, options or RunOptions()
    )
    read_store(run)
    if run.options.dry_run:
        return describe_run(run)
    if done_already(run):
        return run.outcome
    start(run)
    unfinished = train(run)
    if unfinished is not None:
        report(run, unfinished)
    return run.outcome


DESCRIPTION = """\
Run a sweep: each cell of the sweep file (model x T x N x seed x ...) as a
Ray Tune trial that logs to MLflow. Cells already complete in MLflow are
skipped; the others resume from their last checkpoint, so the same command
continues a sweep after a crash or Ctrl-C. Every input is checked before any
work starts. In a terminal the progress is one live view (cells done,
running, pending, failed; each running cell's step; time taken and left);
elsewhere it is one line per trial started, done or failed. Both end with a
summary and the commands to run next (the analysis, the MLflow UI)."""

EPILOG = """\
examples:
  python -m scaling.sweep sweeps/smoke.yaml             local Ray, ./mlflow.db
  python -m scaling.sweep sweeps/smoke.yaml --dry-run   cells, state; no run
  python -m scaling.sweep sweeps/smoke.yaml --set train.steps=200 \\
      --set grid.T=[16,64]
  python -m scaling.sweep sweeps/fig1.yaml --profile quick
  python -m scaling.sweep sweeps/adaptive_mlp.yaml --adaptive    waves until
      the file's questions are settled or its budget is spent
  python -m scaling.sweep sweeps/fig1.yaml --address auto \\
      --tracking-uri http://mlflow:5000 --storage s3://bucket/runs

exit status:
  0    every cell is complete
  1    some cell failed (each is listed with its error; rerun to retry)
  2    invalid input (sweep file, tracking store, storage, a cell that no
       node can hold); nothing was written
  130  interrupted (Ctrl-C); checkpoints are kept, the same command resumes"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scaling.sweep",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", help="the sweep file, e.g. sweeps/smoke.yaml")
    parser.add_argument(
        "--dry-run", action="store_true", help="print the cells, their resources and state; run nothing"
    )
    add_set_argument(
        parser, "override a setting, e.g. --set train.steps=200 or --set grid.T=[16,64] (repeatable)"
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
        "--max-cells",
        type=int,
        default=None,
        help="allow a grid of up to this many cells (default: the cap of scaling.guards.MAX_CELLS)",
    )
    parser.add_argument(
        "--autoscaling",
        action="store_true",
        help="the cluster adds nodes on demand: skip the check that every cell fits a node",
    )
    parser.add_argument(
        "--adaptive",
        action="store_true",
        help="run the lattice in waves that settle the file's `adaptive:` questions within its budget",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="also show Ray's and Ray Tune's own messages and banners"
    )
    return parser.parse_args(argv)


EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    install_log_redaction()
    args = parse_args(argv)
    resume = f"resume with the same command: python -m scaling.sweep {redact(shlex.join(argv))}"
    try:
        options = RunOptions(
            dry_run=args.dry_run,
            adaptive=args.adaptive,
            max_cells=args.max_cells,
            address=args.address,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            autoscaling=args.autoscaling,
            verbose=args.verbose,
        )
        outcome = run_sweep(
            args.sweep,
            args.profile,
            tuple(args.overrides),
            tracking_uri=args.tracking_uri,
            storage=args.storage,
            options=options,
        )
    except (SweepError, TrackingError, GuardError) as err:
        print(f"error: {redact(str(err))}", file=sys.stderr)
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
