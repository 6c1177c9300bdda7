"""The device a trial trains on, and the GPU memory cap of a trial given a fraction of a GPU.

``train.device: auto`` resolves once per trial: CUDA when the trial was given a GPU (Ray sets
CUDA_VISIBLE_DEVICES of the trial's worker to the GPU it assigned, so that GPU is ``cuda:0`` there) and
torch sees one, else the CPU (a trial given a GPU on a machine without CUDA, as the tests' simulated GPU
nodes are, trains on the CPU and says so). Ray's fractional GPUs only schedule: four trials of
``gpu: 0.25`` share a card as four processes, and nothing stops one from taking the others' memory
(ray-project/ray #20563), so a fractional trial caps its own CUDA allocator to its share
(``torch.cuda.set_per_process_memory_fraction``) and says so in its log.

No Ray and no MLflow here: the GPU benchmark (benchmarks/gpu.py) checks the cap on a real card.
"""

from __future__ import annotations

import logging

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
