"""``run_sweep`` and its phases: plan the run, read the store, describe it (``--dry-run``) or start it, train,
report; each reads and fills in one scaling.sweep.run.SweepRun.

Every check runs before any work: an invalid sweep file, an unusable tracking store or storage, a cell no
node can hold (and, on a `ray up` cluster, no node type of its autoscaler could) end the driver with a
message and exit status 2, with nothing written (no MLflow database, no storage directory).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import sys
import time
from pathlib import Path
from typing import TextIO

import pyarrow
import yaml
from pyarrow import fs as pafs

from scaling.budget.cards import Cards, parse_memory, run_cards, type_cards
from scaling.budget.cost import load_gpu_table
from scaling.cluster import describe, ray_up_head, read_node_types
from scaling.config import missing_paths_noted
from scaling.planning.guards import check_address, check_flags, check_whole, probe_storage
from scaling.planning.plan import Plan, SweepError, load_plan
from scaling.sweep.node_fit import refusal
from scaling.sweep.plugin_sources import check_plugin_sources
from scaling.sweep.progress import next_commands, quiet_ray, summary_lines
from scaling.trial import storage as stores
from scaling.trial.checkpoints import CheckpointStore, behind
from scaling.trial.leases import Leases, driver_id

from ..redact import TRACKING_URI_ENV, has_secret, redact
from ..tracking import TrackingError, TrackingStore
from ..tracking.backends import existing_store, open_store
from ..tracking.uri import database_has_store, is_database, local_store_path, resolve_tracking_uri
from .dry_run import (
    cards_to_plan,
    cell_states,
    cpus_to_plan,
    describe_adaptive,
    describe_plan,
    gpus_to_plan,
    nodes_here,
    runs_here,
    states_from,
)
from .run import RunOptions, SweepOutcome, SweepRun

log = logging.getLogger(__name__)


def smaller_profiles(run: SweepRun) -> str:
    """A hint for cells too big for this machine: the sweep file's profiles, when it runs at none ('' when
    it has none, or a profile was given)."""
    if run.profile:
        return ""
    try:
        profiles = list((yaml.safe_load(Path(run.path).read_text()) or {}).get("profiles") or {})
    except (OSError, yaml.YAMLError, AttributeError):
        return ""
    if not profiles:
        return ""
    first = "quick" if "quick" in profiles else profiles[0]
    command = shlex.join(
        ["python", "-m", "scaling.sweep", run.path, "--profile", first, *sets(run.overrides)]
    )
    return f"the sweep file has profiles for smaller machines ({', '.join(profiles)}):\n  {command}"


def sets(overrides) -> list[str]:
    return [part for override in overrides for part in ("--set", override)]


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
    """Plan, skip complete cells, run the rest as Tune trials; see scaling.sweep's docstring.

    ``tracking_uri`` and ``storage``: the MLflow store and the checkpoint storage (else their defaults:
    scaling.tracking.uri.resolve_tracking_uri, storage_uri);
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
    say_behind(run)
    run.timeline.since_start("plan")  # the plan, the store read, the checks
    start(run)
    with run.timeline.phase("trials"):
        unfinished = train(run)
    if unfinished is not None:
        report(run, unfinished)
    return run.outcome


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
    check_whole("--gpus", options.gpus, 1)
    check_gpu_memory(options.gpu_memory)
    # a dry run plans a sweep whose local files (weights, data) are missing here, and says which
    with missing_paths_noted() if options.dry_run else contextlib.nullcontext([]) as missing:
        plan = load_plan(path, profile, overrides, options.max_cells)
    run = SweepRun(path, profile, overrides, options, out, started, plan, address=options.address)
    run.missing = tuple(missing)
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
    check_address(run.address)  # a dry run too: it reads the cluster's nodes
    if not options.dry_run:
        probe_storage(run.store_uri)
    return run


def check_gpu_memory(text: str | None) -> None:
    """--gpu-memory must be a size with a unit (scaling.budget.cards.parse_memory)."""
    if text is not None:
        try:
            parse_memory(text)
        except ValueError as err:
            raise SweepError(str(err)) from None


def storage_uri(plan: Plan, storage: str | None, default: str | None = None) -> str:
    """Where Tune state and checkpoints go: the flag, the sweep file's run.storage, ``default`` (a `ray up`
    cluster's SCALING_STORAGE), or ./scaling_runs."""
    return stores.join(stores.resolved(storage or plan.run.storage or default or "scaling_runs"), plan.name)


def check_storage(uri: str) -> None:
    """Fail before work starts when the checkpoint storage URI cannot be opened."""
    try:
        pafs.FileSystem.from_uri(uri)
    except (pyarrow.ArrowException, ValueError, OSError) as err:
        if "Unrecognized filesystem type" in str(err):
            scheme = uri.split("://", 1)[0]
            err = f"unknown scheme {scheme}://; give a path or a URI of {', '.join(stores.SCHEMES)}"
        raise SweepError(f"cannot use the storage {uri}: {err}") from None


def adaptive_policy(plan: Plan, path: str):
    """The adaptive policy of a sweep run with --adaptive; a SweepError (before any work) when the file has
    no ``adaptive:`` section or its first wave exceeds the budget."""
    if plan.adaptive is None:
        raise SweepError(
            f"{path}: --adaptive needs an `adaptive:` section in the sweep file (a budget and the questions"
            " that matter; see docs/adaptive.md)"
        )
    from ..adaptive.policy import Policy  # defers scipy.stats (~2 s): only --adaptive needs it

    policy = Policy(plan)
    problem = policy.first_wave_problem()
    if problem:
        raise SweepError(f"{path}: adaptive: {problem}")
    return policy


def read_store(run: SweepRun) -> None:
    """Phase 2: which of the plan's cells are complete in the store (nothing is created yet)."""
    run.tracker = open_tracking(run.uri)
    run.experiment_id = run.tracker.experiment_id(run.name) if run.tracker is not None else None
    check_sweep_name(run)
    run.complete = run.complete_now() if run.experiment_id is not None else set()
    check_plugin_sources(run)
    run.pending = [p for p in run.plan.cells if p.cell.key not in run.complete]
    run.outcome = SweepOutcome(len(run.plan.cells), len(run.plan.cells) - len(run.pending))


def behind_the_storage(run: SweepRun) -> dict[str, str]:
    """The pending cells whose checkpoint is ahead of their MLflow run (scaling.trial.checkpoints.behind: a
    tracking store restored from a backup older than the storage) -> why. One listing of the storage; a
    checkpoint's header and its run's history are read only for cells that have both a checkpoint and
    losses logged before it."""
    store = CheckpointStore(run.store_uri)
    found = store.with_checkpoints() & {p.cell.key for p in run.pending}
    logged = {key: store.peek(key).get("logged", -1) for key in sorted(found)}
    candidates = {key: value for key, value in logged.items() if value > 0}
    if not candidates:
        return {}
    records = run.tracker.cell_records(run.experiment_id) if run.experiment_id is not None else {}
    whys = {
        key: behind(value, run.tracker.last_loss_step(records[key].run_id) if key in records else 0)
        for key, value in candidates.items()
    }
    return {key: why for key, why in whys.items() if why}


def say_behind(run: SweepRun) -> None:
    """Name the cells the sweep trains again from step 0 because the tracking store is behind the storage."""
    found = behind_the_storage(run)
    if not found:
        return
    names = ", ".join(p.name for p in run.pending if p.cell.key in found)
    run.say(
        f"[{run.name}] the tracking store is behind the storage for {len(found)} cell"
        f"{'s' if len(found) != 1 else ''} (their checkpoints hold training that their MLflow runs lost: a"
        f" store restored from an older backup?); trained again from step 0: {names}"
    )


def open_tracking(uri: str) -> TrackingStore | None:
    """The tracker of a store that exists, checked to be an MLflow store that answers (existing_store);
    None for a store not created yet (a local file or folder, MLflow's tables in a database server): it is
    created only once work starts, never by --dry-run."""
    db = local_store_path(uri)
    if db is not None and not db.exists():
        if not db.parent.is_dir():
            raise TrackingError(f"cannot use the MLflow tracking store {uri}: {db.parent} is not a directory")
        return None
    if is_database(uri) and not database_has_store(uri):  # an empty database: MLflow's tables come later
        return None
    return existing_store(uri)


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


def describe_run(run: SweepRun) -> SweepOutcome:
    """Phase 3 of --dry-run: where the cells' states come from, whether the sweep runs here, every cell with
    its resources and state, the compute, the adaptive plan; then, where the real run would refuse the
    sweep here (a cell no node holds, a local file missing), that refusal (SweepError: exit status 2)."""
    behind = frozenset(behind_the_storage(run))
    states = cell_states(run.plan, run.complete, run.store_uri, behind)
    nodes, where = nodes_here(run)
    _, refused = refusal(run.pending, nodes, autoscales(run), node_types(run), smaller_profiles(run), where)
    said = (states_from(run), runs_here(run, nodes, where, refused, autoscales(run)))
    cards = cards_to_plan(run)
    describe_plan(run.plan, states, run.out, gpus_to_plan(run), cards, cpus_to_plan(run), said)
    if run.policy is not None:
        describe_adaptive(run.policy, run.out)
    run.out.flush()
    problems = [refused] if refused else []
    if run.missing:  # one on the same line: a line that names an extra's install line stays whole
        files, sep = ("a local file", " ") if len(run.missing) == 1 else ("local files", "\n  ")
        problems.append(f"{run.path}: this machine lacks {files} the run needs:{sep}" + sep.join(run.missing))
    if problems:
        raise SweepError("\n".join(problems))
    return SweepOutcome(len(run.plan.cells), len(run.complete))


def autoscales(run: SweepRun) -> bool:
    """Whether the run's cluster adds nodes on demand (--autoscaling, or a cluster that says so): no cell is
    then refused for fitting no node."""
    return run.options.autoscaling or bool(run.address and os.environ.get("SCALING_AUTOSCALING"))


def node_types(run: SweepRun) -> list:
    """The node types the autoscaler of the `ray up` cluster this machine heads can start (none elsewhere)."""
    return read_node_types() if run.head is not None else []


def done_already(run: SweepRun) -> bool:
    """Phase 3: whether there is nothing to train (every cell complete, or an adaptive sweep that ended
    with the cells now complete), said so."""
    if not run.pending:
        total = len(run.plan.cells)
        said = f"[{run.name}] all {total} cells are complete in {redact(run.uri)}; nothing to train."
        show_lattice(run)  # the link below opens on it (a store from before the view had none)
        run.say("\n".join([said, "next:", *(f"  {command}" for command in commands_next(run))]))
        return True
    if run.policy is not None and run.experiment_id is not None:
        from scaling.sweep.waves import ended_already  # defers scipy.stats (~2 s): only --adaptive

        run.waves = run.tracker.read_waves(run.experiment_id, run.name)
        return ended_already(run)
    return False


def start(run: SweepRun) -> None:
    """Phase 4: Ray started or joined and every cell checked to fit a node; the MLflow experiment (and a new
    SQLite store) and the sweep's parent run created; what every trial is told."""
    from .ray_start import check_feasible, start_cluster  # defers Ray (~1 s): --dry-run never starts it

    options = run.options
    # credentials travel in the trials' environment, outside Tune's state
    env = {TRACKING_URI_ENV: run.uri} if has_secret(run.uri) else {}
    env |= {stores.STORAGE_URI_ENV: run.store_uri} if has_secret(run.store_uri) else {}
    quiet_ray(options.verbose)
    new_store = run.tracker is None
    with run.timeline.phase("ray"):
        start_cluster(
            run.address, options.num_cpus, options.num_gpus, new_store, env=env, verbose=options.verbose
        )
        types = node_types(run)
        where = f"the Ray cluster at {run.address}" if run.address else "this machine"  # as --dry-run says
        waiting = check_feasible(run.pending, autoscales(run), types, smaller_profiles(run), where)
    with run.timeline.phase("cards"):
        run.cards = gpu_cards(run, types)
    if run.head is not None:
        run.say(f"[{run.name}] on the `ray up` cluster of {run.head.source} (Ray at {run.address})")
    if waiting:
        run.say(
            f"[{run.name}] {len(waiting)} cells wait for a node the autoscaler starts"
            f" (node types: {describe(types)})"
        )
    with run.timeline.phase("store"):
        run.tracker = run.tracker or open_store(run.uri)
        sweep_file = Path(run.path).name
        tags = {"sweep_file": sweep_file}
        run.experiment_id = run.tracker.experiment_id(run.name, create=True, tags=tags)
        run.parent = run.tracker.sweep_run(
            run.experiment_id, run.name, run.plan.document, " ".join(run.plan.variant)
        )
        show_lattice(run)
    run.shared = {
        "tracking_uri": redact(run.uri),
        "experiment_id": run.experiment_id,
        "sweep": run.name,
        "parent_run_id": run.parent,
        "storage": redact(run.store_uri),
        "driver": driver_id(),
    }


def gpu_cards(run: SweepRun, node_types) -> Cards | None:
    """The cards the pending GPU cells plan their packs for (scaling.budget.cards): --gpu-memory, else the GPU
    nodes alive in Ray and the autoscaler's node types, else the cost table's card; None when no pending
    cell asks for a GPU or no CUDA cost table is measured."""
    table = load_gpu_table()
    if table is None or not any(p.resources.gpu > 0 for p in run.pending):
        return None
    if run.options.gpu_memory:
        return run_cards(run.options.gpu_memory, [], table)
    from .card_probe import live_cards  # Ray is started by now

    return run_cards(None, live_cards() + type_cards(node_types), table)


def train(run: SweepRun) -> list | None:
    """Phase 5: the pending cells trained (or the adaptive driver's waves); the cells left unfinished, or
    None when the sweep was interrupted or broke (its parent run is then ended, its outcome final)."""
    total, skipped = len(run.plan.cells), len(run.plan.cells) - len(run.pending)
    try:
        from .tune_rounds import run_cells  # defers Ray Tune (~2 s): --dry-run and a finished sweep skip it

        if run.policy is None:
            return run_cells(run, run.pending, total, skipped)
        from scaling.sweep.waves import run_adaptive  # defers scipy.stats (~2 s)

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


def show_lattice(run: SweepRun) -> None:
    """The MLflow UI's view of the sweep as its lattice (scaling.tracking.views): each cell a row, with
    model.name, T, N, seed and the file's other grid axes, and its kinds' summary (err/zero) as columns."""
    axes = dict.fromkeys(["model.name", "T", "N", "seed"])
    for planned in run.plan.cells:
        axes.update(dict.fromkeys("model.name" if axis == "model" else axis for axis in planned.axes))
    shown = dict.fromkeys(name for p in run.plan.cells for name in p.cell.kind.shown)
    run.tracker.show_lattice(run.experiment_id, list(axes), list(shown), [p.name for p in run.plan.cells])


def commands_next(run: SweepRun) -> list[str]:
    """What to run after this sweep (scaling.sweep.progress.next_commands): its analysis, the MLflow UI."""
    return next_commands(
        run.path,
        run.profile,
        run.overrides,
        redact(run.uri),
        run.name,
        run.experiment_id,
        default_uri=resolve_tracking_uri(None),
    )


def report(run: SweepRun, unfinished: list) -> None:
    """Phase 6: the closing summary (scaling.sweep.progress.summary_lines), how to resume what is unfinished;
    leftover temp files removed and the sweep's parent run ended."""
    lines = summary_lines(run.summary(len(unfinished), commands_next(run)))
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
        run.parent,
        "FINISHED" if outcome.ok else "FAILED" if outcome.failed else "KILLED",
        run.timeline.metrics(),
    )
