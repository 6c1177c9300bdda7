"""Scaling of cost: time and peak memory of one training step against N, d, width, layers and batch.

Measures a grid around a base size (one factor at a time), fits scaling.budget.cost's formula to it, and
reports how well the stored table (scaling/budget/cost_table.json) predicts the new measurements (the line's
ratio is predicted / measured seconds, median over the grid). ``--update-cost-table`` writes the new table.

Peak memory on the CPU is 16 bytes per parameter (fp32 weights, gradients, Adam moments) plus the bytes
of the tensors autograd saves for backward (counted once per storage with saved-tensor hooks): the
memory a step holds at its peak, the start of backward, without the allocator's transient workspace.
On CUDA it is torch.cuda.max_memory_allocated.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import statistics
import time
from pathlib import Path

import torch

from papers.context_scaling.architectures import StepShape, activation_elements, model_params, step_flops
from papers.context_scaling.train import CellTrainer, prefix_loss
from scaling.budget.cost import (
    ADAM_BYTES_PER_PARAM,
    TABLE,
    fit_table,
    load_table,
    step_peak_bytes,
    step_seconds,
)
from scaling.cells import Cell

from .common import Result

BASE = {"gpt2": StepShape("gpt2", 40, 8, 256, 8, 8), "sgpt": StepShape("sgpt", 40, 8, 256, 8, 8)}
QUICK_BASE = {"gpt2": StepShape("gpt2", 10, 4, 32, 2, 8), "sgpt": StepShape("sgpt", 10, 4, 32, 2, 8)}
VARY = {"N": (10, 80), "d": (20,), "width": (128,), "layers": (4,), "batch": (32,)}
QUICK_VARY = {"N": (20,), "width": (64,), "batch": (16,)}
TINY_BASE = {"gpt2": StepShape("gpt2", 4, 2, 8, 1, 2), "sgpt": StepShape("sgpt", 4, 2, 8, 1, 2)}
TINY_VARY = {"N": (6,), "width": (16,)}
GRIDS = {"full": (BASE, VARY), "quick": (QUICK_BASE, QUICK_VARY), "tiny": (TINY_BASE, TINY_VARY)}


def grid(base: StepShape, vary: dict) -> list[StepShape]:
    shapes = [base]
    for field, values in vary.items():
        shapes += [StepShape(**{**base.__dict__, field: v}) for v in values if v != getattr(base, field)]
    return shapes


def cell_of(s: StepShape) -> Cell:
    model = {"arch": s.arch, "n_layer": s.layers, "n_embd": s.width}
    if s.arch == "gpt2":
        model["n_head"] = 8 if s.width % 8 == 0 else 1
    return Cell.from_dict(
        {
            "task": {"d": s.d},
            "model": model,
            "N": s.N,
            "T": "inf",
            "train": {"batch_size": s.batch, "device": "cpu"},
        }
    )


def saved_bytes(trainer: CellTrainer) -> int:
    """Bytes of the tensors saved for backward by one forward pass (each storage once)."""
    storages: dict[int, int] = {}

    def pack(t: torch.Tensor):
        storage = t.untyped_storage()
        storages[storage.data_ptr()] = storage.nbytes()
        return t

    batch = trainer.train_batch(trainer.step)
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = prefix_loss(trainer.model(batch.xs, batch.ys).float(), batch.ys)
    loss.backward()
    trainer.optimizer.step()  # a full warm-up step
    trainer.optimizer.zero_grad(set_to_none=True)
    return sum(storages.values())


def measure(s: StepShape, repeats: int) -> dict:
    trainer = CellTrainer(cell_of(s), "cpu")
    peak = ADAM_BYTES_PER_PARAM * sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    peak += saved_bytes(trainer)  # also the warm-up step
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        trainer.train_step()
        times.append(time.perf_counter() - start)
    params = sum(p.numel() for p in trainer.model.parameters() if p.requires_grad)
    return {
        **s.__dict__,
        "seconds": statistics.median(times),
        "flops": step_flops(s),
        "params": params,
        "params_formula": model_params(s),
        "activations": activation_elements(s),
        "peak_bytes": peak,
    }


def machine() -> str:
    """This machine in a few words, for the table's title: the CPU's model, its cores, the system."""
    try:
        model = next(
            line.split(":", 1)[1].strip()
            for line in Path("/proc/cpuinfo").read_text().splitlines()
            if line.startswith("model name")
        )
    except (OSError, StopIteration):
        model = platform.processor() or platform.machine()
    return f"{model}, {os.cpu_count()} cores ({platform.system()} {platform.machine()})"


def run(size: str = "full", update_table: bool = False) -> list[Result]:
    """The cost model's row at ``size`` (full, quick, tiny: the code path only); ``update_table``: write
    the table measured (not at tiny size)."""
    (bases, vary), repeats = GRIDS[size], 1
    shapes = [
        s
        for arch in ("gpt2", "sgpt")
        for s in grid(
            bases[arch], vary if arch == "gpt2" else {"N": vary["N"][-1:], "width": vary["width"][-1:]}
        )
    ]
    rows = [measure(s, repeats) for s in shapes]
    try:
        stored = load_table()
    except (OSError, ValueError):
        stored = None
    new = {
        "device": f"cpu ({torch.get_num_threads()} threads)",
        "measured": datetime.date.today().isoformat(),
        "machine": machine(),
        "rows": rows,
        "fit": fit_table(rows),
    }
    if update_table:
        TABLE.write_text(json.dumps(new, indent=1) + "\n")
    table = stored or new
    shapes_of = [StepShape(**{k: r[k] for k in StepShape.__dataclass_fields__}) for r in rows]
    time_ratio = statistics.median(
        step_seconds(s.step(), table) / r["seconds"] for s, r in zip(shapes_of, rows)
    )
    mem_ratio = statistics.median(
        step_peak_bytes(s.step(), table) / r["peak_bytes"] for s, r in zip(shapes_of, rows)
    )
    source = "stored table" if stored else "fit of this run"
    # reported only: the ratio of predicted to measured seconds, the table's accuracy on this machine now
    return [
        Result(
            "cost_model_time",
            "measured step",
            f"predicted ({source})",
            "",
            1.0,
            time_ratio,
            None,
            note=f"median predicted/measured over {len(rows)} shapes;"
            f" memory predicted/measured {mem_ratio:.2f}",
            extra={"rows": rows, "fit": new["fit"]},
        ).judged()
    ]
