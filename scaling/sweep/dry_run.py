"""The ``--dry-run`` table: every cell with its resources and state, the compute, an adaptive sweep's plan."""

from __future__ import annotations

import os
import sys
from typing import TextIO

from scaling.budget.cards import Card, Cards, run_cards, type_cards
from scaling.budget.cost import load_gpu_table
from scaling.budget.cpu_plan import describe_compute
from scaling.budget.gpu_plan import describe_gpu
from scaling.planning.plan import Plan
from scaling.sweep.cluster import read_node_types
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.leases import Leases


def describe_plan(
    plan: Plan,
    status: dict[str, str],
    out: TextIO,
    gpus: tuple[int | None, str] = (None, ""),
    cards: Cards | None = None,
    cpus: tuple[int, str] = (1, "one CPU"),
) -> None:
    """The --dry-run table: one line per cell with its resources and state, then the compute on a CPU and
    on the measured GPU (its wall time on ``gpus``: a count and where it comes from; None: unknown; its
    packs planned for the memory of ``cards``: None, the table's card) and the CPU trials' wall time on
    ``cpus`` (a count and where it comes from)."""
    out.write(
        f"sweep {plan.name}: {len(plan.cells)} cells from {plan.source}"
        f"{f' (profile {plan.profile})' if plan.profile else ''}\n"
    )
    out.write(f"{'key':16}  {'cell':40}  {'cpu':>4}  {'gpu':>5}  state\n")
    for planned in plan.cells:
        cell, res = planned.cell, planned.resources
        out.write(f"{cell.key:16}  {planned.name:40}  {res.cpu:>4g}  {res.gpu:>5g}  {status[cell.key]}\n")
    counts: dict[str, int] = {}
    for state in status.values():
        counts[state.split(" (")[0]] = counts.get(state.split(" (")[0], 0) + 1
    out.write("totals: " + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + "\n")
    out.write(describe_compute(plan, *cpus) + "\n")
    out.write(describe_gpu(plan, gpus=gpus[0], gpus_from=gpus[1], cards=cards) + "\n")


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
