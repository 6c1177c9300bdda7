"""The device a trial trains on, and the GPU memory cap of a trial given a fraction of a GPU.

``train.device: auto`` resolves once per trial: CUDA when the trial was given a GPU (Ray sets
CUDA_VISIBLE_DEVICES of the trial's worker to the GPU it assigned, so that GPU is ``cuda:0`` there) and
torch sees one, else the CPU (a trial given a GPU on a machine without CUDA, as the tests' simulated GPU
nodes are, trains on the CPU and says so). Ray's fractional GPUs only schedule: four trials of
``gpu: 0.25`` share a card as four processes, and nothing stops one from taking the others' memory
(ray-project/ray #20563), so a fractional trial caps its own CUDA allocator to its share
(``torch.cuda.set_per_process_memory_fraction``) and says so in its log.

A trial's packs are sized to the memory of the device it holds (``trial_memory``: its share of the real
card, measured there), and on CUDA its matmuls follow the cell's precision (``use_precision``: TF32 for what
a bf16 cell keeps in float32, none for a float32 cell). A CPU trial can be given a device of stated memory
(the environment's SCALING_STATED_MEMORY): its packs are sized to it and a pack's step past it raises
torch.OutOfMemoryError, as the card's allocator would, so the CPU tests run the path a GPU's packs take.

No Ray and no MLflow here: the GPU benchmark (benchmarks/gpu.py) checks the cap on a real card.
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass

import torch

log = logging.getLogger(__name__)


def trial_device(setting: str, gpu: float) -> torch.device:
    """The device of a trial whose cell says ``train.device: setting`` and that holds ``gpu`` GPUs."""
    if setting != "auto":
        return torch.device(setting)
    if gpu <= 0:
        return torch.device("cpu")
    if not torch.cuda.is_available():
        log.warning("the trial holds gpu %g but torch sees no CUDA device: training on the CPU", gpu)
        return torch.device("cpu")
    return torch.device("cuda", 0)  # the GPU Ray assigned: the first (only) one visible to this worker


def cap_gpu_memory(device: torch.device, gpu: float) -> str | None:
    """Cap this process's CUDA allocator to ``gpu`` (a fraction) of the device's memory; the log line
    saying so, or None (a CPU, or a whole GPU: no cap)."""
    if device.type != "cuda" or not 0 < gpu < 1:
        return None
    torch.cuda.set_per_process_memory_fraction(gpu, device)
    total = torch.cuda.get_device_properties(device).total_memory
    text = (
        f"CUDA memory capped to {gpu:g} of {torch.cuda.get_device_name(device)}'s"
        f" {total / 2**30:.1f} GiB ({gpu * total / 2**30:.1f} GiB): the trial's share of the GPU"
    )
    log.warning(text)
    return text


def use_precision(device: torch.device, precision: str) -> None:
    """On CUDA, TF32 matmuls for a bfloat16 cell (what autocast leaves in float32) and none for a float32
    cell, whose numbers are float32's; the CPU has nothing to set."""
    if device.type == "cuda":
        on = precision == "bfloat16"
        torch.backends.cuda.matmul.allow_tf32 = on
        torch.backends.cudnn.allow_tf32 = on


STATED_MEMORY = "SCALING_STATED_MEMORY"  # "PLAN" or "PLAN,LIMIT", in bytes: a device of stated memory


@dataclass(frozen=True)
class TrialMemory:
    """The memory of the device a trial holds: ``plan``, the bytes its packs are sized to (its share of the
    card), and, for a device of stated memory, ``limit``, the bytes past which a pack's step raises
    torch.OutOfMemoryError (None on a card: its allocator does); ``source`` says where the figures come
    from (the trial's log)."""

    plan: float
    limit: float | None = None
    source: str = ""


def trial_memory(device: torch.device, gpu: float) -> TrialMemory | None:
    """The memory of the trial's device: a stated one (STATED_MEMORY), else on CUDA its share (``gpu``, a
    fraction; a whole GPU for 1 or more) of the card's memory, at most what is free on it now; None on a
    CPU (nothing to size packs by)."""
    stated = os.environ.get(STATED_MEMORY, "").strip()
    if stated:
        return stated_memory(stated)
    if device.type != "cuda":
        return None
    total = torch.cuda.get_device_properties(device).total_memory
    free, _ = torch.cuda.mem_get_info(device)
    share = min(gpu, 1.0) if gpu > 0 else 1.0
    plan = min(share * total, free)
    return TrialMemory(
        plan,
        None,
        f"{share:g} of {torch.cuda.get_device_name(device)}'s {total / 2**30:.1f} GiB, {free / 2**30:.1f} GiB"
        f" free: {plan / 2**30:.2f} GiB",
    )


def stated_memory(text: str) -> TrialMemory:
    """A device of stated memory from STATED_MEMORY's value: "PLAN" or "PLAN,LIMIT" bytes (LIMIT: PLAN)."""
    try:
        figures = [float(part) for part in text.split(",")]
    except ValueError:
        figures = []
    if len(figures) not in (1, 2) or not all(0 < f < float("inf") for f in figures):
        raise ValueError(
            f"{STATED_MEMORY}={text!r}: give PLAN or PLAN,LIMIT, bytes > 0 (e.g. 2e8 or 2e8,1e8)"
        )
    plan, limit = figures[0], figures[-1]
    return TrialMemory(plan, limit, f"stated ({STATED_MEMORY}): {plan:.3g} bytes, {limit:.3g} allowed")
