"""The code a Ray trial runs to train, timed outside Ray: what the GPU script's "trial path" lines time.

A trial's cells are planned for its device (scaling.cells.resolve_precision: ``train.precision: auto`` is
bfloat16 for a trial given a GPU, float32 on a CPU; ``train.cuda_graphs: auto`` captures the steady step as
a CUDA graph on CUDA), the trial sets TF32 from the precision (scaling.trial.devices.use_precision) and trains
with the kind's own loops (papers.context_scaling.kind: ``CellTrainer.train_until`` for one cell,
``PackTrainer.train_until`` for a pack, a loss read off the device at every ``log_every`` step, as its
``on_loss`` does). ``TrialSteps`` is that, less the checkpoints and the MLflow calls; ``graphs=False`` is the
same loop eager (the same-precision reference lines). The one place where the GPU script meets the trial's
training code.
"""

from __future__ import annotations

import torch

from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell, resolve_precision
from scaling.trial.devices import use_precision

STEPS = 500_000  # a cell's steps (Fig. 1's): more than any timing trains
LOG_EVERY = 100  # sweeps/fig1.yaml's


def cell_of(
    size: dict, precision: str, device: torch.device, arch: str = "gpt2", seed: int = 0, compile: str = "auto"
) -> Cell:
    """A linear-regression cell of ``size`` (d, N, batch and the model's n_layer, n_head, n_embd, or an MLP's
    width) as a sweep plans it for a trial on ``device``: ``precision`` "auto" resolved there (bfloat16 on a
    GPU), ``compile`` its train.compile (auto, as a trial's: the transformers compiled on CUDA); members of
    a pack differ in seed and T, as a sweep's cells do."""
    if arch == "mlp":
        model = {"arch": "mlp", "width": size["width"]}
    else:
        model = {"arch": arch, "n_layer": size["n_layer"], "n_embd": size["n_embd"]}
        if arch == "gpt2":
            model["n_head"] = size["n_head"]
    cell = Cell.from_dict(
        {
            "task": {"family": "linear", "d": size["d"]},
            "model": model,
            "N": size["N"],
            "T": 2 ** (4 + seed % 12),
            "seed": seed,
            "train": {
                "steps": STEPS,
                "batch_size": size["batch"],
                "lr": 1e-4,
                "precision": precision,
                "compile": compile,
                "device": device.type,
                "log_every": LOG_EVERY,
                "checkpoint_every": STEPS,
            },
        }
    )
    return resolve_precision(cell, 1.0 if device.type == "cuda" else 0.0)


class TrialSteps:
    """Training steps of ``cells`` (one, or a pack of one shape) on ``device`` as a trial runs them;
    ``graphs``: None, the trial's own setting (train.cuda_graphs: on CUDA); False, the same loop eager.

    A pack runs PackTrainer's inner loop (``run_engine``) on its stacked engine: a trial writes the members
    back only at its checkpoints (every ``checkpoint_every`` steps), so no timing here pays that copy;
    ``models()`` writes them back."""

    def __init__(self, cells: list[Cell], device: torch.device, graphs: bool | None = None):
        self.device, self.precision = device, cells[0].train.precision
        self.trainers = [CellTrainer(cell, device, graphs=graphs) for cell in cells]
        self.pack = PackTrainer(self.trainers) if len(cells) > 1 else None
        self.engine = self.pack.engine_of(self.trainers) if self.pack is not None else None
        self.losses: list[float] = []

    @property
    def step(self) -> int:
        return self.trainers[0].step if self.engine is None else self.engine.step

    @property
    def graphed(self) -> bool:
        """Whether the steps replay a CUDA graph (the trial's setting on CUDA)."""
        return self.trainers[0].graphs and self.device.type == "cuda"

    @property
    def compiled(self) -> bool:
        """Whether the steady steps run torch.compile's kernels (train.compile)."""
        return (self.trainers[0] if self.engine is None else self.engine).compiled is not None

    @property
    def how(self) -> str:
        """How the steps run, for a line: the precision, graphed or eager, compiled or not."""
        return (
            self.precision
            + (", graphed" if self.graphed else ", eager")
            + (", compiled" if self.compiled else "")
        )

    def __call__(self, steps: int) -> None:
        """Train ``steps`` more steps, the trial's loop and its loss reads; no wait for the device at the
        end (the caller synchronises)."""
        use_precision(self.device, self.precision)
        stop = self.step + steps
        if self.engine is None:
            self.trainers[0].train_until(stop, lambda step, loss: self.losses.append(loss))
        else:
            indices = list(range(len(self.trainers)))
            self.pack.run_engine(self.engine, indices, stop, lambda i, step, loss: self.losses.append(loss))

    def models(self) -> list[torch.nn.Module]:
        """The cells' models, each with its own numbers (a pack's written back first)."""
        if self.engine is not None:
            self.engine.write_back()
        return [t.model for t in self.trainers]
