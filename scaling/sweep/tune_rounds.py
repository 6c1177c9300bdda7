"""The pending cells as Ray Tune trials: their specs (a cell, or a pack of cells), run in Tune experiments
round after round until each cell is complete, failed or unfinished.

Several drivers may run the same sweep at once (a relaunch while the first still runs, two people on one
cluster): each cell is trained by at most one trial at a time, whichever driver started it (a lease per
cell, scaling.trial.leases). A driver skips the cells another driver's trials hold, trains the others, then
waits for the held ones and trains any that their holder left unfinished; both drivers end when every
cell is complete, sooner than one alone.
"""

from __future__ import annotations

import os
import time

import ray
from ray import tune
from ray.tune.search.basic_variant import BasicVariantGenerator

from scaling.budget.cards import Cards, planned_for
from scaling.budget.cost import load_gpu_table
from scaling.budget.cpu_plan import cell_weights
from scaling.budget.packing import gpu_budget, pack_groups, pack_key
from scaling.sweep.progress import Progress
from scaling.trial import storage as stores
from scaling.trial.leases import Leases
from scaling.trial.spec import TrialMember, TrialSpec, spec_in
from scaling.trial.trainable import tune_trainable

from ..redact import redact
from .run import SweepRun

TUNE_LOGGERS_OFF = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"  # Ray Tune's switch for its default result loggers


def run_cells(run: SweepRun, cells, total: int, skipped: int) -> list:
    """Train ``cells`` (of ``total``, ``skipped`` complete before) as Tune trials with their progress shown;
    the cells left unfinished."""
    specs = trial_specs(
        cells, run.plan.run.pack, run.shared, trial_slots(cells, ray.cluster_resources()), run.cards
    )
    gpu_cells = [p for p in cells if p.resources.gpu > 0]
    if run.cards is not None and gpu_cells:
        run.say(f"[{run.name}] " + planned_for([run.cards.card_for(p.resources.as_ray()) for p in gpu_cells]))
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
        weights=spec_weights(specs, cells),
    )
    with progress:
        return run_rounds(run, cells, progress)


def spec_weights(specs: list[TrialSpec], cells) -> dict[str, float]:
    """Each cell's estimated seconds in the trial it runs in (scaling.budget.cpu_plan.cell_weights), what the
    progress weighs the time left by, so a packed cell is not counted as a whole unpacked cell's work."""
    planned = {p.cell.key: p for p in cells}
    return cell_weights([[planned[m.key] for m in spec.members] for spec in specs])


def describe_trials(specs: list[TrialSpec]) -> str:
    """How the cells to run became trials: "as 10 trials (16 small cells packed into 2, ...)"."""
    packs = [spec for spec in specs if spec.is_pack]
    trials = f"as {len(specs)} trial{'s' if len(specs) != 1 else ''}"
    if not packs:
        return trials
    packed = sum(len(spec.members) for spec in packs)
    return f"{trials} ({packed} small cells packed into {len(packs)}, scaling.budget.packing)"


def trial_slots(pending, cluster: dict[str, float]) -> int:
    """How many trials of the first pending cell's resources the cluster runs at once."""
    request = pending[0].resources.as_ray()
    counts = [cluster.get(name, 0.0) // amount for name, amount in request.items() if amount > 0]
    return max(1, int(min(counts, default=1)))


def trial_specs(
    pending, pack: int | str, shared: dict, slots: int = 1, cards: Cards | None = None
) -> list[TrialSpec]:
    """One TrialSpec per trial: a cell, or a pack of cells chosen by scaling.budget.packing (cells of one pack
    must ask for the same resources; those that do not run alone). Cells that ask for a GPU pack as many
    as fit their share of the card they will run on (``cards``, scaling.budget.cards; None: the CUDA cost
    table's card) under the table's memory fit, when there is a table."""
    specs, table = [], load_gpu_table()
    gpu = {p.cell.key: gpu_budget(p.resources.gpu, table, card_bytes(cards, p)) for p in pending}
    for group in pack_groups([p.cell for p in pending], pack, lambda c: None, slots, lambda c: gpu[c.key]):
        cells = [pending[i] for i in group]
        resources = cells[0].resources.as_tune()
        if len(cells) > 1 and any(p.resources.as_tune() != resources for p in cells):
            specs += [single_spec(p, shared) for p in cells]
        elif len(cells) == 1:
            specs.append(single_spec(cells[0], shared))
        else:
            members = tuple(TrialMember(p.cell.to_dict(), p.cell.key, p.name) for p in cells)
            specs.append(
                TrialSpec(
                    members, pack_key([m.key for m in members]), f"pack of {len(cells)}", resources, **shared
                )
            )
    return specs


def card_bytes(cards: Cards | None, planned) -> float | None:
    """The memory of the card a planned cell will run on; None: the cost table's card."""
    card = cards.card_for(planned.resources.as_ray()) if cards is not None else None
    return card.memory_bytes if card is not None else None


def single_spec(planned, shared: dict) -> TrialSpec:
    cell = planned.cell
    return TrialSpec(
        (TrialMember(cell.to_dict(), cell.key, planned.name),),
        cell.key,
        planned.name,
        planned.resources.as_tune(),
        **shared,
    )


def run_rounds(run: SweepRun, pending, progress: Progress) -> list:
    """Tune experiments until every pending cell is complete, failed or interrupted: each round trains the
    cells no other driver holds; cells held elsewhere are waited for and, if left unfinished, run in the
    next round. The cells left unfinished."""
    leases = Leases(run.store_uri)
    for round_ in range(100):
        specs = trial_specs(
            pending, run.plan.run.pack, run.shared, trial_slots(pending, ray.cluster_resources()), run.cards
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


def make_tuner(run: SweepRun, specs: list[TrialSpec], progress: Progress, round_: int = 0):
    """The Tune experiment: one trial per spec, each with its resources, named by its key; its name is
    unique to this driver and round (two drivers of one sweep share the storage). Tune's own result loggers
    (a CSV, a JSON and a TensorBoard file per trial) are off unless TUNE_DISABLE_AUTO_CALLBACK_LOGGERS is
    set: MLflow is the record, and the TensorBoard logger imports torch into the driver (~2 s a sweep)."""
    os.environ.setdefault(TUNE_LOGGERS_OFF, "1")
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
            **stores.tune_storage(stores.join(run.store_uri, "tune")),
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


def trial_keys(config: dict) -> list[str]:
    """The cell keys a Tune trial's config trains (its spec's members)."""
    return [m["key"] for m in spec_in(config)["members"]]


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
