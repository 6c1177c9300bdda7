"""Training throughput (prompts per second) of the project's GPT-2 and SGPT step against a reference.

Reference side. With a local checkout of Garg et al.'s implementation (``--reference PATH`` or
``$ICL_REFERENCE``; github dtsip/in-context-learning), its own ``TransformerModel`` is imported from
``PATH/src`` in place and trained with its data samplers when they import (data drawn on the CPU, then
moved). Without one, a plain loop of the same model written as that implementation does: Hugging Face
GPT2Model with the default configuration (full 50257-token vocabulary, tanh GELU as separate ops, eager
attention), a linear read-in and read-out on interleaved x/y tokens, data drawn on the CPU, fp32, Adam.
Its step: zero_grad, forward, mean squared error, backward, Adam step.

Ours: ``papers.context_scaling.train.CellTrainer.train_step`` of a cell of the same size (SDPA
attention, fused GELU and
Adam, data from the explicit generators on the training device), in float32 and under bfloat16 autocast.
Size: the paper's Fig. 1 GPT-2 (8 layers, 8 heads, width 256, d = 8, N = 40, batch 64).

For SGPT the reference has no model; the reference side is a plain loop of the same SGPT module (fp32,
for-loop Adam, data on the CPU), so the ratio isolates the step's own costs.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn
from transformers import GPT2Config, GPT2Model

from papers.context_scaling.architectures import StepShape, step_flops
from papers.context_scaling.sgpt import SGPT
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell

from .common import Result, interleaved_medians, skipped

FIG1 = {"d": 8, "N": 40, "n_layer": 8, "n_head": 8, "n_embd": 256, "batch": 64}
QUICK = {"d": 8, "N": 10, "n_layer": 2, "n_head": 2, "n_embd": 64, "batch": 16}
TINY = {"d": 2, "N": 4, "n_layer": 1, "n_head": 1, "n_embd": 8, "batch": 4}  # the code path, in a second
SHAPES = {"full": FIG1, "quick": QUICK, "tiny": TINY}
TARGET_CPU, TARGET_GPU = 1.5, 2.0
PEAK_BF16_FLOPS = {"H100": 989e12, "H200": 989e12, "A100": 312e12, "L4": 121e12, "A10": 125e12}


class PlainGPT2(nn.Module):
    """Garg et al.'s in-context GPT-2 as their code builds it (library defaults, eager attention)."""

    def __init__(self, d: int, points: int, width: int, layers: int, heads: int):
        super().__init__()
        config = GPT2Config(
            n_positions=2 * points,
            n_embd=width,
            n_layer=layers,
            n_head=heads,
            resid_pdrop=0.0,
            embd_pdrop=0.0,
            attn_pdrop=0.0,
            use_cache=False,
        )
        config._attn_implementation = "eager"
        self.read_in, self.backbone, self.read_out = (
            nn.Linear(d, width),
            GPT2Model(config),
            nn.Linear(width, 1),
        )

    def forward(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        B, P, d = xs.shape
        y_wide = torch.cat([ys.view(B, P, 1), torch.zeros(B, P, d - 1, device=ys.device)], dim=2)
        tokens = torch.stack([xs, y_wide], dim=2).view(B, 2 * P, d)  # (B, 2P, d)
        hidden = self.backbone(inputs_embeds=self.read_in(tokens)).last_hidden_state
        return self.read_out(hidden)[:, ::2, 0]  # (B, P)


class PlainSGPT(nn.Module):
    def __init__(self, d: int, points: int, width: int, layers: int):
        super().__init__()
        self.net = SGPT(d, points, layers, width)

    def forward(self, xs, ys):
        return self.net(xs, ys)


def reference_checkout() -> Path | None:
    path = os.environ.get("ICL_REFERENCE", "")
    return Path(path) if path else None


def checkout_model(path: Path, size: dict) -> nn.Module:
    """TransformerModel of the checkout's src/models.py, imported in place."""
    src = str(path / "src")
    if src not in sys.path:
        sys.path.insert(0, src)
    import models  # the reference's own module

    return models.TransformerModel(
        n_dims=size["d"],
        n_positions=size["N"] + 1,
        n_embd=size["n_embd"],
        n_layer=size["n_layer"],
        n_head=size["n_head"],
    )


def checkout_data(size: dict):
    """The checkout's own Gaussian sampler and linear-regression task, or None when they do not import."""
    try:
        import samplers
        import tasks
    except ImportError:
        return None
    sampler = samplers.get_data_sampler("gaussian", n_dims=size["d"])
    task_sampler = tasks.get_task_sampler("linear_regression", size["d"], size["batch"])

    def draw():
        xs = sampler.sample_xs(size["N"] + 1, size["batch"])
        return xs, task_sampler().evaluate(xs)

    return draw


def plain_data(size: dict, gen: torch.Generator):
    """Linear regression drawn on the CPU, as the reference's train loop does: xs, w ~ N(0, I), y = x.w."""

    def draw():
        xs = torch.randn(size["batch"], size["N"] + 1, size["d"], generator=gen)
        w = torch.randn(size["batch"], size["d"], 1, generator=gen)
        return xs, (xs @ w)[..., 0]

    return draw


def reference_step(model: nn.Module, draw, device: torch.device, bf16: bool = False):
    """The reference's training step; ``bf16``: its forward under bfloat16 autocast (the same loop in the
    dtype a bfloat16 cell trains in: the same-dtype comparison of the GPU script)."""
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)

    def step():
        xs, ys = draw()
        xs, ys = xs.to(device), ys.to(device)
        optimizer.zero_grad()
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            pred = model(xs, ys)
        loss = (pred.float() - ys).square().mean()
        loss.backward()
        optimizer.step()
        float(loss.detach())

    return step


def our_cell(
    arch: str, size: dict, precision: str, device: torch.device, seed: int = 0, T: float | str = "inf"
) -> Cell:
    """A linear-regression cell of ``size`` (an MLP's: its ``width``) for ``arch``."""
    if arch == "mlp":
        model = {"arch": "mlp", "width": size["width"]}
    else:
        model = {"arch": arch, "n_layer": size["n_layer"], "n_embd": size["n_embd"]}
        if arch == "gpt2":
            model["n_head"] = size["n_head"]
    return Cell.from_dict(
        {
            "task": {"family": "linear", "d": size["d"]},
            "model": model,
            "N": size["N"],
            "T": T,
            "seed": seed,
            "train": {"batch_size": size["batch"], "lr": 1e-4, "precision": precision, "device": device.type},
        }
    )


def our_step(arch: str, size: dict, precision: str, device: torch.device):
    trainer = CellTrainer(our_cell(arch, size, precision, device), device)
    return lambda: trainer.train_step()


def peak_flops(device: torch.device) -> float | None:
    name = torch.cuda.get_device_name(device)
    return next((v for k, v in PEAK_BF16_FLOPS.items() if k in name), None)


def bf16_matmul_slowdown(device: torch.device, size: int = 256, repeats: int = 5) -> float:
    """Seconds of a size x size bf16 matmul over the fp32 one on `device` (median of `repeats`)."""
    times = {}
    for dtype in (torch.float32, torch.bfloat16):
        a = torch.randn(size, size, device=device).to(dtype)
        runs = []
        for _ in range(repeats + 1):
            start = time.perf_counter()
            a @ a
            if device.type == "cuda":
                torch.cuda.synchronize(device)
            runs.append(time.perf_counter() - start)
        times[dtype] = statistics.median(runs[1:])
    return times[torch.bfloat16] / times[torch.float32]


def throughput(arch: str, device: torch.device, scale: str, repeats: int, budget_s: float) -> list[Result]:
    size = SHAPES[scale]
    batch = size["batch"]
    checkout = reference_checkout() if arch == "gpt2" else None
    gen = torch.Generator().manual_seed(0)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        if checkout:
            model, draw = checkout_model(checkout, size), checkout_data(size) or plain_data(size, gen)
            ref_label = f"{checkout} TransformerModel, fp32, data on CPU"
        elif arch == "gpt2":
            model, draw = (
                PlainGPT2(size["d"], size["N"] + 1, size["n_embd"], size["n_layer"], size["n_head"]),
                plain_data(size, gen),
            )
            ref_label = "plain GPT-2 loop: eager attn, full vocab, fp32, data on CPU"
        else:
            model, draw = (
                PlainSGPT(size["d"], size["N"] + 1, size["n_embd"], size["n_layer"]),
                plain_data(size, gen),
            )
            ref_label = "plain SGPT loop: fp32, for-loop Adam, data on CPU"
    sides = {
        "reference": reference_step(model.to(device), draw, device),
        "float32": our_step(arch, size, "float32", device),
    }
    slow_bf16 = bf16_matmul_slowdown(device)
    if slow_bf16 <= 2.0:  # CPUs without bf16 units (AVX2 only) run bf16 matmuls ~100x slower
        sides["bfloat16"] = our_step(arch, size, "bfloat16", device)
    medians = interleaved_medians(sides, repeats, warmup=1, budget_s=budget_s)
    rates = {k: batch / v for k, v in medians.items()}
    flops = step_flops(StepShape(arch, size["N"], size["d"], size["n_embd"], size["n_layer"], batch))
    where = "cpu" if device.type == "cpu" else "gpu"
    target = (
        None if scale != "full" else TARGET_CPU if device.type == "cpu" else TARGET_GPU
    )  # targets are for Fig. 1 size
    best = max(("float32", "bfloat16"), key=lambda k: rates.get(k, 0.0))
    shape = f"{size['n_layer']}L/{size['n_head']}H/w{size['n_embd']} d={size['d']} N={size['N']} B={batch}"
    note = f"{shape}; ours {flops * rates[best] / batch / 1e9:.1f} GFLOP/s"
    if "bfloat16" not in sides:
        note += f"; bf16 not run: a bf16 matmul is {slow_bf16:.0f}x slower than fp32 here"
    if device.type == "cuda":
        peak = peak_flops(device)
        note += f", MFU {flops * rates[best] / batch / peak:.1%}" if peak else ", MFU n/a (unknown GPU peak)"
    unit = "prompts/s"
    return [
        Result(
            f"{arch}_train_{where}_fp32",
            ref_label,
            f"{arch} train_step fp32",
            unit,
            rates["reference"],
            rates["float32"],
            None,
            note=shape,
        ).judged(),
        Result(
            f"{arch}_train_{where}_best",
            ref_label,
            f"{arch} train_step {best}",
            unit,
            rates["reference"],
            rates[best],
            target if arch == "gpt2" else None,
            note=note,
            extra={"seconds": medians, "flops_per_step": flops},
        ).judged(),
    ]


def run(size: str = "full") -> list[Result]:
    """The rows at ``size`` (full: Fig. 1's and its targets; quick; tiny: the code path only)."""
    repeats = {"full": 5, "quick": 2, "tiny": 1}[size]
    budget = {"full": 150.0, "quick": 30.0, "tiny": 1.0}[size]
    budgets = {"gpt2": budget, "sgpt": min(budget, 60.0)}  # SGPT has no target
    results = []
    for arch in ("gpt2", "sgpt"):
        results += throughput(arch, torch.device("cpu"), size, repeats, budgets[arch])
    if torch.cuda.is_available():
        for arch in ("gpt2", "sgpt"):
            results += throughput(arch, torch.device("cuda"), size, repeats, budgets[arch])
    else:
        results += [skipped(f"{arch}_train_gpu_best", "no CUDA device: skipped") for arch in ("gpt2", "sgpt")]
    return results
