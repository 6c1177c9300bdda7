"""The ``--dry-run`` table: where the cells' states were read, whether the sweep runs here (the nodes a run
would have: this machine's local Ray, or the --address cluster's), each model's cells, trials and cost,
every cell with its resources and state, the compute, an adaptive sweep's plan."""

from __future__ import annotations

import os
import sys
import textwrap
from dataclasses import dataclass
from typing import TextIO

from scaling.budget.cards import Card, Cards, run_cards, type_cards
from scaling.budget.cost import format_hours, load_gpu_table, load_table
from scaling.budget.cpu_plan import cpu_estimate, describe_compute
from scaling.budget.gpu_plan import describe_gpu, gpu_cells, gpu_packs, is_training
from scaling.budget.gpu_plan import pack_seconds as gpu_pack_seconds
from scaling.budget.packing import pack_groups
from scaling.cluster import read_node_types
from scaling.planning.plan import Plan
from scaling.redact import redact
from scaling.sweep.node_fit import fits, node_shape
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.leases import Leases

LINE_WIDTH = 110  # the dry run's lines are wrapped to this width (the cell rows fit it by their columns)
NAME_WIDTH = (40, 64)  # the cell column's width: at least, and at most (a longer name gets its own line)


def describe_plan(
    plan: Plan,
    status: dict[str, str],
    out: TextIO,
    gpus: tuple[int | None, str] = (None, ""),
    cards: Cards | None = None,
    cpus: tuple[int, str] = (1, "one CPU"),
    said: tuple[str, ...] = (),
) -> None:
    """The --dry-run table: the sweep, the lines ``said`` (where the states come from, whether it runs
    here), each model's cells, trials and cost, one line per cell with its resources and state, then the
    compute on a CPU and on the measured GPU (its wall time on ``gpus``: a count and where it comes from;
    None: unknown; its packs planned for the memory of ``cards``: None, the table's card) and the CPU
    trials' wall time on ``cpus`` (a count and where it comes from). Every line but a cell's row is wrapped
    at LINE_WIDTH."""
    try:
        table = load_table()
    except (OSError, ValueError):  # describe_compute says why
        table = None
    estimate = cpu_estimate(plan, table, cpus[0]) if table is not None else None
    gpu_table, on_gpu = load_gpu_table(), gpu_cells(plan)
    groups = gpu_packs(plan, on_gpu, gpu_table, cards) if gpu_table is not None and on_gpu else []
    head = [
        f"sweep {plan.name}: {len(plan.cells)} cells from {plan.source}"
        f"{f' (profile {plan.profile})' if plan.profile else ''}",
        *said,
        *model_lines(plan, estimate, [[on_gpu[i].cell for i in group] for group in groups], gpu_table),
    ]
    out.write("".join(wrapped(line) for text in head for line in text.splitlines()))
    out.write("".join(cell_rows(plan, status)))
    counts: dict[str, int] = {}
    for state in status.values():
        counts[state.split(" (")[0]] = counts.get(state.split(" (")[0], 0) + 1
    tail = [
        "totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())),
        describe_compute(plan, *cpus, estimate=estimate),
        describe_gpu(plan, gpus=gpus[0], gpus_from=gpus[1], cards=cards, groups=groups or None),
    ]
    out.write("".join(wrapped(line) for text in tail for line in text.splitlines()))


def wrapped(line: str, width: int = LINE_WIDTH) -> str:
    """``line`` and a newline, wrapped at ``width`` at spaces, its continuations indented two spaces more
    than it is (a path or URI longer than the width stays whole)."""
    indent = " " * (len(line) - len(line.lstrip()) + 2)
    wrapper = textwrap.TextWrapper(
        width, subsequent_indent=indent, break_long_words=False, break_on_hyphens=False
    )
    return "\n".join(wrapper.wrap(line) or [""]) + "\n"


def cell_rows(plan: Plan, status: dict[str, str]) -> list[str]:
    """One row per cell: its name, CPUs, GPUs, key and state, in columns as wide as the longest name (within
    NAME_WIDTH; a longer name is a line of its own, its columns on the next)."""
    width = min(max([NAME_WIDTH[0], *(len(p.name) for p in plan.cells)]), NAME_WIDTH[1])
    rows = [f"{'cell':{width}}  {'cpu':>4}  {'gpu':>5}  {'key':16}  state\n"]
    for planned in plan.cells:
        cell, res, name = planned.cell, planned.resources, planned.name
        if len(name) > width:
            rows.append(name + "\n")
            name = ""
        rows.append(f"{name:{width}}  {res.cpu:>4g}  {res.gpu:>5g}  {cell.key:16}  {status[cell.key]}\n")
    return rows


@dataclass
class ModelTrials:
    """One model's cells and trials in the dry run's plan, and their estimated training seconds (on the
    CPUs at each trial's threads, or on the CUDA cost table's card)."""

    cells: int = 0
    trials: int = 0
    cpu_seconds: float = 0.0
    gpu_seconds: float = 0.0
    other: str = ""  # what a kind that does not train does, or why there is no estimate

    def cost(self, gpu_card: str) -> str:
        parts = []
        if self.cpu_seconds:
            parts.append(f"about {format_hours(self.cpu_seconds)} of CPU trials")
        if self.gpu_seconds:
            parts.append(f"about {format_hours(self.gpu_seconds)} of GPU trials on the table's {gpu_card}")
        return "; ".join(parts + ([self.other] if self.other else [])) or "not estimated"


def model_lines(plan: Plan, estimate, gpu_trials: list[list], gpu_table: dict | None) -> list[str]:
    """Each model's cells, trials (the packs the driver forms, as the lines below the rows count them:
    ``estimate``'s on the CPUs, ``gpu_trials`` on the GPUs) and cost (its trials' training one after
    another): a model's cells by its label, a kind's that trains none by the kind."""
    models: dict[str, ModelTrials] = {}
    counted: set[str] = set()
    if estimate is not None:
        for trial, seconds in zip(estimate.trials, estimate.seconds):
            model = models.setdefault(trial[0].kind.model_label(trial[0]), ModelTrials())
            model.cells, model.trials, model.cpu_seconds = (
                model.cells + len(trial),
                model.trials + 1,
                model.cpu_seconds + seconds,
            )
            counted.update(c.key for c in trial)
    for trial in gpu_trials:
        model = models.setdefault(trial[0].kind.model_label(trial[0]), ModelTrials())
        model.cells, model.trials, model.gpu_seconds = (
            model.cells + len(trial),
            model.trials + 1,
            model.gpu_seconds + gpu_pack_seconds(trial, gpu_table),
        )
        counted.update(c.key for c in trial)
    rest = [p.cell for p in plan.cells if p.cell.key not in counted]
    for group in pack_groups(rest, plan.run.pack):
        cell = rest[group[0]]
        training = is_training(cell)
        model = models.setdefault(cell.kind.model_label(cell) if training else cell.job, ModelTrials())
        model.cells, model.trials = model.cells + len(group), model.trials + 1
        cost = cell.kind.cost(cell)
        model.other = "no cost table for it" if training else cost.what if cost else "cost not estimated"
    if not models:
        return []
    width = max(len("model"), *map(len, models))
    card = gpu_table["device"] if gpu_table else ""
    heading = "estimated training time, its trials one after another"
    lines = [f"{'model':{width}}  {'cells':>5}  {'trials':>6}  {heading}"]
    for label, model in models.items():
        lines.append(f"{label:{width}}  {model.cells:>5}  {model.trials:>6}  {model.cost(card)}")
    return lines


def states_from(run) -> str:
    """Where the dry run read the cells' states: the tracking store (or that it has none of them yet) and
    the checkpoints' storage."""
    if run.tracker is None:
        found = " (no store there yet: no cell is complete)"
    elif run.experiment_id is None:
        found = f" (no experiment {run.name} in it yet)"
    else:
        found = ""
    return (
        f"cell states read from the tracking store {redact(run.uri)}{found}\n"
        f"  and the checkpoints in {redact(run.store_uri)}"
    )


def runs_here(run, nodes: list[dict[str, float]], where: str, refused: str | None, autoscaling: bool) -> str:
    """Whether the real run would start here: every pending cell fits one of ``nodes`` (those of ``where``:
    scaling.sweep.node_fit, the check the run makes) and every local file the plan names exists; if not,
    why (the refusal itself ends the dry run)."""
    shapes = "; ".join(sorted({f"[{node_shape(n)}]" for n in nodes})) or "(none alive)"
    unfit = [p for p in run.pending if not any(fits(p.resources.as_ray(), n) for n in nodes)]
    reasons = [f"{len(unfit)} cells fit no node of {where} {shapes}"] if refused else []
    if run.missing:
        files = "local files" if len(run.missing) > 1 else "local file"
        reasons.append(f"{len(run.missing)} {files} it needs missing here")
    if reasons:
        return f"runs here: no (the error below): {'; '.join(reasons)}"
    if not run.pending:
        return "runs here: nothing to train, every cell is complete"
    if autoscaling:
        return f"runs here: yes, on nodes the cluster starts on demand (--autoscaling; nodes now: {shapes})"
    waiting = f"; {len(unfit)} cells wait for a node its autoscaler starts" if unfit else ""
    return f"runs here: yes, every pending cell fits a node of {where} {shapes}{waiting}"


def nodes_here(run) -> tuple[list[dict[str, float]], str]:
    """The nodes a run would check its cells against, and whose they are: the live nodes of the cluster at
    the run's address (joined to read them), else the local Ray a run starts on this machine."""
    if run.address:
        from scaling.sweep.ray_start import (
            cluster_nodes,  # imports Ray: only a dry run that names a cluster joins it
        )

        return cluster_nodes(run.address, run.options.verbose), f"the Ray cluster at {run.address}"
    return [local_node(run.options)], "this machine"


def local_node(options) -> dict[str, float]:
    """The resources of the local Ray a run starts on this machine (``ray.init(address="local")``):
    --num-cpus, else this machine's CPUs (os.cpu_count(); in a container with a CPU quota Ray counts the
    quota); --num-gpus, else the GPUs torch finds, with the ``accelerator_type:X`` Ray gives an NVIDIA
    card."""
    cuda = local_cuda()
    found = cuda.device_count() if cuda is not None else 0
    gpus = found if options.num_gpus is None else options.num_gpus
    node = {"CPU": float(options.num_cpus or os.cpu_count() or 1)}
    if gpus:  # as Ray lists a node's resources: none of a kind it has none of
        node["GPU"] = float(gpus)
    accelerator = nvidia_accelerator() if found else None
    if accelerator:
        node[f"accelerator_type:{accelerator}"] = 1.0
    return node


def nvidia_accelerator() -> str | None:
    """This machine's NVIDIA card as Ray names it (its ``accelerator_type:X`` resource), None if unknown."""
    try:
        from ray._private.accelerators import NvidiaGPUAcceleratorManager  # only with a GPU here

        return NvidiaGPUAcceleratorManager.get_current_node_accelerator_type()
    except Exception:  # noqa: BLE001 - not an NVIDIA card, or no NVML: Ray names none either
        return None


# A GPU driver's device files on Linux (NVIDIA's, ROCm's, WSL's): without any, torch finds no GPU here.
GPU_DEVICE_FILES = ("/dev/nvidiactl", "/dev/kfd", "/dev/dxg")


def local_cuda():
    """torch.cuda where torch finds a GPU on this machine, else None. Without a GPU driver's device file
    (Linux) torch is not asked: it would find none, and a dry run plans without loading it (about 1 s)."""
    if sys.platform.startswith("linux") and not any(os.path.exists(f) for f in GPU_DEVICE_FILES):
        return None
    import torch

    return torch.cuda if torch.cuda.is_available() else None


def cards_to_plan(run) -> Cards | None:
    """The cards --dry-run plans the GPU packs for (scaling.budget.cards; no Ray started): --gpu-memory, the
    `ray up` cluster's node types, this machine's GPUs, else (None or the fallback) the cost table's card."""
    table = load_gpu_table()
    if table is None or run.options.gpu_memory:
        return run_cards(run.options.gpu_memory, [], table)
    found = type_cards(read_node_types()) if run.head is not None else []
    cuda = local_cuda() if not found else None
    if cuda is not None:
        found = [machine_card(cuda)]
    return run_cards(None, found, table)


def machine_card(cuda) -> Card:
    """The smallest of this machine's CUDA cards, its memory read as a run reads a live node's (NVML: the
    same plan), else as torch reports it."""
    from .card_probe import node_card_memory  # imports Ray: only on a machine with CUDA

    measured = node_card_memory()
    if measured is not None:
        return Card(measured[0], measured[1], "this machine's GPU")
    cards = range(cuda.device_count())
    memory, index = min((cuda.get_device_properties(i).total_memory, i) for i in cards)
    return Card(float(memory), cuda.get_device_name(index), "this machine's GPU")


def cpus_to_plan(run) -> tuple[int, str]:
    """The CPUs --dry-run gives the CPU wall time on, and where the count comes from: --num-cpus, the CPUs
    the `ray up` cluster's autoscaler may start, this machine's."""
    if run.options.num_cpus:
        return run.options.num_cpus, "--num-cpus"
    if run.head is not None:
        types = read_node_types()
        count = sum(int(t.resources.get("CPU", 0)) * t.max_workers for t in types if t.resources)
        if count:
            return count, "the CPUs the cluster's autoscaler may start"
    return os.cpu_count() or 1, "this machine's CPUs"


def gpus_to_plan(run) -> tuple[int | None, str]:
    """The GPUs --dry-run gives the wall time on, and where the count comes from: --gpus, --num-gpus, the
    GPUs the `ray up` cluster's autoscaler may start, this machine's; (None, "") when none is known."""
    options = run.options
    if options.gpus:
        return options.gpus, "--gpus"
    if options.num_gpus:
        return options.num_gpus, "--num-gpus"
    if run.head is not None:
        types = read_node_types()
        count = sum(int(t.resources.get("GPU", 0)) * t.max_workers for t in types if t.resources)
        if count:
            return count, "the GPUs the cluster's autoscaler may start"
    cuda = local_cuda()
    if cuda is not None:
        return cuda.device_count(), "this machine's GPUs"
    return None, ""


def cell_states(
    plan: Plan, complete: set[str], store_uri: str, behind: frozenset[str] = frozenset()
) -> dict[str, str]:
    """The --dry-run state of every cell: complete, partial (step s/S) from its checkpoint, pending,
    checkpoint damaged (and what a run will do about it), or ``behind`` the tracking store (its checkpoint
    is ahead of its run: trained again from step 0); cells another driver trains now say by whom."""
    store, leases = CheckpointStore(store_uri), Leases(store_uri)
    status = {}
    for planned in plan.cells:
        key, steps = planned.cell.key, planned.cell.kind.steps(planned.cell)
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
        elif key in behind:
            status[key] = f"behind the tracking store (checkpoint {step}/{steps}; trains again from 0)"
        else:
            status[key] = f"partial (step {step}/{steps})" if step is not None else "pending"
        holder = leases.holder(key)
        if holder is not None:
            status[key] += f", training now in {holder.describe()}"
    return status


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
