"""A seed 001 cell's groups of settings (task, model, train, eval) and what the generic core asks of a cell
that has them (scaling.kinds.Kind's hooks): every kind that trains or evaluates such a model declares these
(the training kind, seed 004's scans, seed 003's constructions). Without torch.

The task's dataclass is its family's (``task.family``), the model's its architecture's (``model.arch``):
plug-ins, registered or a researcher's own (papers.context_scaling.plugins).
"""

from __future__ import annotations

from papers.context_scaling.architectures import ModelConfig, StepShape, step_of
from papers.context_scaling.configs import EvalConfig, TrainConfig, parse_baseline
from papers.context_scaling.plugins import (
    BASELINES,
    DEFAULT_ARCH,
    DEFAULT_FAMILY,
    FAMILIES,
    FEATURE_MAPS,
    MODELS,
    family,
    model_facts,
)
from scaling.budget.cost import Step
from scaling.cells import reads_setting
from scaling.config import ConfigError, canonical, replaced, to_dict
from scaling.kinds import Polymorphic


def _at(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


TASK = Polymorphic(
    lambda given, where: family(given.get("family", DEFAULT_FAMILY), _at(where, "family")).Settings
)
MODEL = Polymorphic(
    lambda given, where: (
        model_facts(given.get("arch", DEFAULT_ARCH), _at(where, "arch")).Settings or ModelConfig
    )
)
GROUPS = {"task": TASK, "model": MODEL, "train": TrainConfig, "eval": EvalConfig}
READS = ("task", "model", "train", "eval")


def context(cell) -> int:
    """N: the largest of ``train.lengths`` where given (one model trained at those lengths, zero-padded to the
    largest: seed 001 App. A), so that one padded MLP serves a grid's every N; else the cell's own."""
    return cell.train.lengths[-1] if cell.train.lengths else cell.N


def steps(cell) -> int:
    return cell.train.steps


def step(cell) -> Step | None:
    """One training step's cost facts, from the model's own counts (None: a model that counts nothing)."""
    facts = model_facts(cell.model.arch)
    if facts.Settings is ModelConfig:
        return step_of(StepShape.of_cell(cell), facts, cell.model)
    if facts.counts is None:
        return None
    points, batch = cell.N + 1, cell.train.batch_size
    params, flops = facts.counts(cell.model, cell.task.d, points, batch)
    return Step(cell.model.arch, flops, params, 0.0, float(params) * batch * points, facts.cpu_packing_pays)


def pack_shape(cell) -> dict:
    """What cells must agree on to train as one stacked model: everything that fixes the model's shapes and
    the lockstep of training (the model's settings, d, N, the training but its learning rate)."""
    train = to_dict(cell.train)
    train.pop("lr", None)
    return {"model": canonical(cell.model), "d": cell.task.d, "N": cell.N, "train": train}


def runs_on(cell) -> tuple[str, str]:
    return cell.train.device, cell.train.precision


def resolve_precision(cell, gpu: float):
    """The cell with ``train.precision: auto`` resolved from the GPUs its trial asks for (``gpu``, a fraction
    or whole GPUs): bfloat16 autocast where the trial trains on a GPU (it asks for one and its
    ``train.device`` is not the CPU) and the cell's kind reads the setting, float32 otherwise. A resolved
    float32 is keyed as the default (scaling.config.canonical), so a CPU cell's key is the one it had before
    ``auto``; a GPU cell's key names bfloat16, and fp32 and bf16 results never share a run."""
    if cell.train.precision != "auto":
        return cell
    on_gpu = gpu > 0 and cell.train.device != "cpu" and reads_setting(cell, "train.precision")
    return cell.replaced(train=replaced(cell.train, precision="bfloat16" if on_gpu else "float32"))


def check_device(cell, gpu: float) -> None:
    """A cell to train on CUDA must ask for a GPU."""
    if cell.train.device.startswith("cuda") and gpu <= 0:
        raise ConfigError(
            "train.device",
            f"train.device: {cell.train.device} needs a GPU, and the cell {cell.name} asks for none; give it"
            " `resources: {gpu: 1}` (or a fraction), or use device: auto",
        )


def plugins(cell) -> list:
    """The (point, name) of each plug-in the cell names: its family, its model, its feature map, its
    baselines."""
    named = [(FAMILIES, cell.task.family), (MODELS, cell.model.arch)]
    feature_map = getattr(cell.model, "feature_map", "")
    if feature_map:
        named.append((FEATURE_MAPS, feature_map))
    return named + [(BASELINES, parse_baseline(name)[0]) for name in cell.eval.baselines]


def check_positions(cell) -> None:
    """A prompt must fit the model's positions."""
    model_facts(cell.model.arch).check_positions(cell.model, cell.N)


# the hooks of a kind whose cells have these groups (scaling.kinds.Kind)
HOOKS = dict(
    groups=GROUPS,
    context=context,
    steps=steps,
    step=step,
    runs_on=runs_on,
    for_resources=resolve_precision,
    check_resources=check_device,
    check_planned=check_positions,
    plugins=plugins,
)
