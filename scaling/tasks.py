"""Task families and seeded task pools (seed 001, Sec. 3 and App. A).

A task family draws task parameters (e.g. the weight vector beta of a linear regression) and labels
inputs with them. A cell pretrains on a finite pool of T tasks, drawn once from the cell's seed and
sampled with replacement (so T may be smaller than the batch), or on a fresh task per prompt when
T = inf. Test prompts always use fresh tasks.

All randomness flows from explicit ``torch.Generator``s derived from (seed, purpose, step) by
``generator``: the batch at step s of a cell is the same batch after a restart, and the pool of T
tasks is the same pool. Pools are *nested*: task i is the same for every T > i, so a task-scaling
lattice uses common random numbers.
"""
from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable

import torch

from .config import check, check_choice


def derive_seed(seed: int, purpose: str, step: int = 0) -> int:
    """A 63-bit seed for (seed, purpose, step), stable across processes and platforms."""
    digest = hashlib.blake2b(f"{seed}/{purpose}/{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def generator(seed: int, purpose: str, step: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
    """The generator for one purpose ('pool', 'batch', 'eval', 'init', ...) of one seed and step."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, purpose, step))
    return gen


@dataclass(frozen=True)
class TaskConfig:
    """A task family and its parameters. Each family reads the fields it needs."""

    family: str = "linear"
    d: int = 8                   # input dimension
    noise_std: float = 0.0       # sigma of the label noise

    def __post_init__(self):
        check_choice(self.family, "family", FAMILIES)
        check(self.d >= 1, "d", f"must be >= 1, got {self.d}")
        check(self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}")


@dataclass
class Prompts:
    """A batch of prompts: N in-context pairs and a query per prompt, with per-prompt metadata."""

    xs: torch.Tensor                       # (B, N+1, d)
    ys: torch.Tensor                       # (B, N+1)
    meta: dict[str, torch.Tensor]          # name -> (B,) per-prompt values (e.g. the noise level)

    def __len__(self) -> int:
        return self.xs.shape[0]

    def slice(self, start: int, stop: int) -> "Prompts":
        return Prompts(self.xs[start:stop], self.ys[start:stop],
                       {k: v[start:stop] for k, v in self.meta.items()})

    def to(self, device: torch.device | str) -> "Prompts":
        return Prompts(self.xs.to(device), self.ys.to(device), {k: v.to(device) for k, v in self.meta.items()})


class TaskFamily:
    """Base class: draw task parameters, sample inputs, label them. Subclasses set the maths."""

    def __init__(self, config: TaskConfig):
        self.config = config

    def draw(self, count: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Parameters of ``count`` tasks, each tensor with leading dimension ``count``."""
        raise NotImplementedError

    def inputs(self, count: int, points: int, gen: torch.Generator) -> torch.Tensor:
        """Inputs x ~ N(0, I_d): (count, points, d)."""
        return torch.randn(count, points, self.config.d, generator=gen, device=gen.device)

    def label(self, params: dict[str, torch.Tensor], xs: torch.Tensor, gen: torch.Generator) -> Prompts:
        """Labels for inputs ``xs`` (B, P, d) under the tasks ``params`` (leading dim B)."""
        raise NotImplementedError

    def params_per_task(self) -> int:
        """How many numbers one task's parameters hold (sets how a large pool is stored)."""
        probe = self.draw(1, generator(0, "probe"))
        return sum(v.numel() for v in probe.values())

    def y_second_moment(self) -> float:
        """E[y^2] under the task distribution: the zero predictor's error, used to normalise errors."""
        gen = generator(0, "second-moment")
        params = self.draw(4096, gen)
        return float(self.label(params, self.inputs(4096, 8, gen), gen).ys.pow(2).mean())


class LinearRegression(TaskFamily):
    """y = beta^T x + sigma * eps, beta ~ N(0, I_d / d) (seed 001 Sec. 3; E[y^2] = 1 + sigma^2)."""

    def draw(self, count, gen):
        d = self.config.d
        return {"beta": torch.randn(count, d, generator=gen, device=gen.device) / math.sqrt(d)}

    def label(self, params, xs, gen):
        ys = torch.einsum("bpd,bd->bp", xs, params["beta"])            # (B, P)
        noise = torch.randn(ys.shape, generator=gen, device=gen.device)
        sigma = torch.full((xs.shape[0],), self.config.noise_std, device=xs.device)
        return Prompts(xs, ys + self.config.noise_std * noise, {"noise_std": sigma})

    def y_second_moment(self):
        return 1.0 + self.config.noise_std ** 2


FAMILIES: dict[str, Callable[[TaskConfig], TaskFamily]] = {
    "linear": LinearRegression,
}


def make_family(config: TaskConfig) -> TaskFamily:
    return FAMILIES[config.family](config)


class TaskPool:
    """The T pretraining tasks of a cell and its training batches, all pure functions of the seed.

    Task i lives in chunk i // chunk_size, drawn from generator(seed, 'pool', chunk). Small pools are
    held in memory; large ones (T x parameters beyond ``max_resident`` numbers) regenerate the chunks
    a batch needs, so T = 2e6 ReLU teachers cost no memory. T = inf draws a fresh task per prompt.
    """

    def __init__(self, family: TaskFamily, T: float, seed: int, device: torch.device | str = "cpu",
                 max_resident: int = 1 << 26):
        check(T >= 1, "T", f"must be >= 1 or inf, got {T}")
        self.family, self.T, self.seed, self.device = family, T, seed, torch.device(device)
        self.finite = not math.isinf(T)
        per_task = family.params_per_task()
        self.chunk_size = max(1, min(1 << 14, (1 << 15) // max(per_task, 1)))
        self._resident = None
        if self.finite and int(T) * per_task <= max_resident:
            self._resident = self._gather(torch.arange(int(T), device=self.device))

    def _chunk(self, index: int) -> dict[str, torch.Tensor]:
        return self.family.draw(self.chunk_size, generator(self.seed, "pool", index, self.device))

    def _gather(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        """Parameters of tasks ``idx`` (B,), drawn chunk by chunk."""
        chunks = idx // self.chunk_size
        out: dict[str, torch.Tensor] = {}
        for c in torch.unique(chunks).tolist():
            where = (chunks == c).nonzero().squeeze(1)
            params = self._chunk(c)
            for k, v in params.items():
                if k not in out:
                    out[k] = torch.empty((len(idx),) + v.shape[1:], dtype=v.dtype, device=self.device)
                out[k][where] = v[idx[where] % self.chunk_size]
        return out

    def tasks(self, idx: torch.Tensor) -> dict[str, torch.Tensor]:
        if self._resident is not None:
            return {k: v[idx] for k, v in self._resident.items()}
        return self._gather(idx)

    def batch(self, step: int, batch_size: int, points: int) -> Prompts:
        """The training batch of ``step``: batch_size prompts of ``points`` (x, y) pairs each."""
        gen = generator(self.seed, "batch", step, self.device)
        if self.finite:
            idx = torch.randint(int(self.T), (batch_size,), generator=gen, device=self.device)
            params = self.tasks(idx)
        else:
            params = self.family.draw(batch_size, gen)
        return self.family.label(params, self.family.inputs(batch_size, points, gen), gen)


def fresh_prompts(family: TaskFamily, count: int, points: int, seed: int, purpose: str = "eval",
                  device: torch.device | str = "cpu") -> Prompts:
    """``count`` prompts with fresh (unseen) tasks: the evaluation set of a cell."""
    gen = generator(seed, purpose, 0, device)
    params = family.draw(count, gen)
    return family.label(params, family.inputs(count, points, gen), gen)
