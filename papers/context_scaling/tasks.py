"""Task families and seeded task pools (seed 001, Sec. 3 and App. A).

A task family draws task parameters (e.g. the weight vector beta of a linear regression) and labels
inputs with them. A cell pretrains on a finite pool of T tasks, drawn once from the cell's seed and
sampled with replacement (so T may be smaller than the batch), or on a fresh task per prompt when
T = inf. Test prompts always use fresh tasks.

All randomness flows from explicit ``torch.Generator``s derived from (seed, purpose, step) by
``generator``: the batch at step s of a cell is the same batch after a restart (training batches are
drawn a block of steps at a time, from (seed, 'batch-block', block); TaskPool.batch), and the pool of
T tasks is the same pool. Pools are *nested*: task i is the same for every T > i, so a task-scaling
lattice uses common random numbers.

Families (registry FAMILIES; seed 001 Sec. 4, Garg et al. 2022): ``linear``, ``linear_mixed_noise``
(per-prompt noise level, Bai et al. 2023), ``sparse_linear``, ``relu_net``, ``decision_tree``. Each states
E[y^2] (analytic, or a deterministic Monte Carlo) so that errors are normalised with the zero predictor at
1. ``ShiftConfig`` is an evaluation-time distribution shift (seed 004); a family built without one is the
training distribution, so training never sees a shift.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from typing import Callable, Sequence

import torch

from papers.context_scaling.configs import FAMILY_SETTINGS, ShiftConfig, TaskConfig
from scaling.config import check, check_choice


def derive_seed(seed: int, purpose: str, step: int = 0) -> int:
    """A 63-bit seed for (seed, purpose, step), stable across processes and platforms."""
    digest = hashlib.blake2b(f"{seed}/{purpose}/{step}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") & ((1 << 63) - 1)


def generator(seed: int, purpose: str, step: int = 0, device: str | torch.device = "cpu") -> torch.Generator:
    """The generator for one purpose ('pool', 'batch-block', 'eval', 'init', ...) of one seed and step."""
    gen = torch.Generator(device=device)
    gen.manual_seed(derive_seed(seed, purpose, step))
    return gen


NO_SHIFT = ShiftConfig()


@dataclass
class Prompts:
    """A batch of prompts: N in-context pairs and a query per prompt, with per-prompt metadata."""

    xs: torch.Tensor  # (B, N+1, d)
    ys: torch.Tensor  # (B, N+1)
    meta: dict[str, torch.Tensor]  # name -> (B,) per-prompt values (e.g. the noise level)

    def __len__(self) -> int:
        return self.xs.shape[0]

    def slice(self, start: int, stop: int) -> "Prompts":
        return Prompts(
            self.xs[start:stop], self.ys[start:stop], {k: v[start:stop] for k, v in self.meta.items()}
        )

    def select(self, mask: torch.Tensor) -> "Prompts":
        """The prompts where ``mask`` (B,) is true."""
        return Prompts(self.xs[mask], self.ys[mask], {k: v[mask] for k, v in self.meta.items()})

    def to(self, device: torch.device | str) -> "Prompts":
        return Prompts(
            self.xs.to(device), self.ys.to(device), {k: v.to(device) for k, v in self.meta.items()}
        )


class TaskFamily:
    """Base class: draw task parameters, sample inputs, label them. Subclasses set the maths.

    Subclasses implement ``draw_tasks`` (unshifted parameters), ``signal`` (the noiseless label f(x))
    and name in ``GAUSSIAN`` the parameters a task shift moves. Labels are y = f(x) + sigma * eps with
    sigma per prompt from ``noise_levels``; E[y^2] = E[f(x)^2] + E[sigma^2] (noise independent of f).
    """

    GAUSSIAN: tuple[str, ...] = ()
    # the TaskConfig settings the family reads (family is every task's), as the planner reads them without
    # torch (papers.context_scaling.configs.FAMILY_SETTINGS)
    SETTINGS: tuple[str, ...] = ()
    default_split: tuple[str, ...] = ()  # meta names evaluation splits by when EvalConfig.split_by is empty

    def __init__(self, config: TaskConfig, shift: ShiftConfig | None = None):
        self.config = config
        self.shift = shift or NO_SHIFT

    def draw_tasks(self, count: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        raise NotImplementedError

    def signal(self, params: dict[str, torch.Tensor], xs: torch.Tensor) -> torch.Tensor:
        """Noiseless labels f(x): params with leading dim B, xs (B, P, d) -> (B, P)."""
        raise NotImplementedError

    def draw(self, count: int, gen: torch.Generator) -> dict[str, torch.Tensor]:
        """Parameters of ``count`` tasks, each tensor with leading dimension ``count`` (shift applied)."""
        params = self.draw_tasks(count, gen)
        if self.shift.moves_tasks:
            for key in self.GAUSSIAN:
                params[key] = self.shift.task_mean + self.shift.task_scale * params[key]
        return params

    def inputs(self, count: int, points: int, gen: torch.Generator) -> torch.Tensor:
        """Inputs x ~ N(x_mean, x_scale^2 I_d) (N(0, I_d) unshifted): (count, points, d)."""
        z = torch.randn(count, points, self.config.d, generator=gen, device=gen.device)
        if self.shift.moves_inputs:
            return self.shift.x_mean + self.shift.x_scale * z
        return z

    def levels(self) -> tuple[float, ...]:
        """The noise levels a prompt's sigma is drawn from, uniformly."""
        if self.shift.noise_std is not None:
            return (self.shift.noise_std,)
        return (self.config.noise_std,)

    def noise_levels(self, count: int, gen: torch.Generator) -> torch.Tensor:
        """Per-prompt sigma: (count,)."""
        levels = self.levels()
        if len(levels) == 1:
            return torch.full((count,), levels[0], device=gen.device)
        levels = torch.tensor(levels, device=gen.device)
        return levels[torch.randint(len(levels), (count,), generator=gen, device=gen.device)]

    def label(self, params: dict[str, torch.Tensor], xs: torch.Tensor, gen: torch.Generator) -> Prompts:
        """Labels for inputs ``xs`` (B, P, d) under the tasks ``params`` (leading dim B)."""
        return self.labelled(params, xs, *self.label_noise(xs.shape[0], xs.shape[1], gen))

    def label_noise(self, count: int, points: int, gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        """The random part of labelling: per-prompt sigma (count,) and standard noise (count, points)."""
        sigma = self.noise_levels(count, gen)
        return sigma, torch.randn((count, points), generator=gen, device=gen.device)

    def labelled(
        self, params: dict[str, torch.Tensor], xs: torch.Tensor, sigma: torch.Tensor, noise: torch.Tensor
    ) -> Prompts:
        """The deterministic part: y = f(x) + sigma * noise (any number of prompts, one family)."""
        ys = self.signal(params, xs)  # (B, P)
        return Prompts(xs, ys + sigma.unsqueeze(1) * noise, {"noise_std": sigma})

    def params_per_task(self) -> int:
        """How many numbers one task's parameters hold (sets how a large pool is stored)."""
        probe = self.draw(1, generator(0, "probe"))
        return sum(v.numel() for v in probe.values())

    def signal_second_moment(self) -> float:
        """E[f(x)^2] under the (possibly shifted) task and input distributions."""
        return self.monte_carlo_signal_moment()

    def monte_carlo_signal_moment(self, tasks: int = 1 << 14, points: int = 16, chunk: int = 1024) -> float:
        """Deterministic Monte Carlo E[f(x)^2]: a fixed generator, ``tasks`` x ``points`` samples."""
        gen = generator(0, "second-moment")
        total = 0.0
        for _ in range(tasks // chunk):
            params = self.draw(chunk, gen)
            total += float(self.signal(params, self.inputs(chunk, points, gen)).double().pow(2).mean())
        return total / (tasks // chunk)

    def y_second_moment(self) -> float:
        """E[y^2] of the (test) distribution: the zero predictor's error, used to normalise errors."""
        levels = self.levels()
        return self.signal_second_moment() + sum(s**2 for s in levels) / len(levels)

    def group_second_moment(self, name: str, value: float) -> float:
        """E[y^2] over the prompts whose meta ``name`` equals ``value`` (normalises split rows)."""
        if name == "noise_std":
            return self.signal_second_moment() + value**2
        return self.y_second_moment()

    def input_moments(self) -> tuple[float, float]:
        """(E[x_i^2], E[x_i x_j]) for i != j under the input distribution."""
        m, s = self.shift.x_mean, self.shift.x_scale
        return m * m + s * s, m * m


class LinearRegression(TaskFamily):
    """y = beta^T x + sigma * eps, beta ~ N(0, I_d / d) (seed 001 Sec. 3; E[y^2] = 1 + sigma^2).

    Under a shift, beta ~ N(mu 1, t^2 I/d) and x ~ N(m 1, s^2 I) give
    E[(beta^T x)^2] = s^2 (t^2 + d mu^2) + m^2 (t^2 + d^2 mu^2).
    """

    SETTINGS = FAMILY_SETTINGS["linear"]
    GAUSSIAN = ("beta",)

    def draw_tasks(self, count, gen):
        d = self.config.d
        return {"beta": torch.randn(count, d, generator=gen, device=gen.device) / math.sqrt(d)}

    def signal(self, params, xs):
        return torch.bmm(xs, params["beta"].unsqueeze(-1)).squeeze(-1)  # (B, P)

    def signal_second_moment(self):
        d, mu, t = self.config.d, self.shift.task_mean, self.shift.task_scale
        m, s = self.shift.x_mean, self.shift.x_scale
        return s * s * (t * t + d * mu * mu) + m * m * (t * t + d * d * mu * mu)


class LinearMixedNoise(LinearRegression):
    """Linear regression whose noise level is drawn per prompt from ``noise_stds`` with equal probability
    (seed 001 Sec. 4 "multiple noise levels"; Bai et al. 2023). The level is in meta["noise_std"], and
    evaluation splits by it by default. E[y^2] = 1 + mean(sigma_l^2); given the level, 1 + sigma_l^2.
    """

    SETTINGS = FAMILY_SETTINGS["linear_mixed_noise"]
    default_split = ("noise_std",)

    def levels(self):
        if self.shift.noise_std is not None:
            return (self.shift.noise_std,)
        return tuple(self.config.noise_stds)


class SparseLinear(TaskFamily):
    """y = beta^T x + sigma eps with beta ~ N(0, I_d) and all but ``sparsity`` coordinates zeroed, the
    support uniform per task (seed 001 eq. 8; Garg et al.'s scale, no 1/d): E[y^2] = s + sigma^2.

    Stored compactly as the kept values (count, s) and their coordinates (count, s). Under a shift the
    values are N(mu, t^2): E[f^2] = s (mu^2 + t^2) E[x_i^2] + s (s - 1) mu^2 E[x_i x_j].
    """

    SETTINGS = FAMILY_SETTINGS["sparse_linear"]
    GAUSSIAN = ("values",)

    def draw_tasks(self, count, gen):
        d, s = self.config.d, self.config.sparsity
        support = torch.rand(count, d, generator=gen, device=gen.device).argsort(dim=1)[:, :s]
        return {"values": torch.randn(count, s, generator=gen, device=gen.device), "support": support}

    def signal(self, params, xs):
        support = params["support"].unsqueeze(1).expand(-1, xs.shape[1], -1)  # (B, P, s)
        return (xs.gather(2, support) * params["values"].unsqueeze(1)).sum(-1)  # (B, P)

    def signal_second_moment(self):
        s, mu, t = self.config.sparsity, self.shift.task_mean, self.shift.task_scale
        diag, off = self.input_moments()
        return s * (mu * mu + t * t) * diag + s * (s - 1) * mu * mu * off


class ReluNet(TaskFamily):
    """y = sqrt(2 / r) sum_j a_j relu(w_j^T x) + sigma eps, w_j ~ N(0, I_d), a_j ~ N(0, 1), r = ``hidden``
    (seed 001 Sec. 4; Garg et al.'s relu_2nn_regression). Unshifted, E[f^2] = (2/r) r E[relu(w^T x)^2]
    = E||x||^2 = d exactly, so E[y^2] = d + sigma^2. That holds for any input distribution, so an input
    shift gives d (m^2 + s^2); a task shift falls back to a deterministic Monte Carlo.
    """

    SETTINGS = FAMILY_SETTINGS["relu_net"]
    GAUSSIAN = ("w1", "w2")

    def draw_tasks(self, count, gen):
        d, r = self.config.d, self.config.hidden
        return {
            "w1": torch.randn(count, d, r, generator=gen, device=gen.device),
            "w2": torch.randn(count, r, generator=gen, device=gen.device),
        }

    def signal(self, params, xs):
        hidden = torch.relu(torch.bmm(xs, params["w1"]))  # (B, P, r)
        return torch.einsum("bpr,br->bp", hidden, params["w2"]) * math.sqrt(2 / self.config.hidden)

    def signal_second_moment(self):
        if self.shift.moves_tasks:
            return self.monte_carlo_signal_moment()
        return self.config.d * self.input_moments()[0]


class DecisionTree(TaskFamily):
    """Depth-``depth`` binary trees (seed 001 eq. 7; Garg et al.): internal node k splits on a uniform
    coordinate c_k, going right when x[c_k] > 0; leaves carry N(0, 1) values. Nodes are in heap order
    (children of k are 2k+1, 2k+2). The leaf value is independent of the path, so E[y^2] = 1 + sigma^2
    (mu^2 + t^2 + sigma^2 with shifted leaves), whatever the input distribution.
    """

    SETTINGS = FAMILY_SETTINGS["decision_tree"]
    GAUSSIAN = ("leaves",)

    def draw_tasks(self, count, gen):
        d, depth = self.config.d, self.config.depth
        coords = torch.randint(d, (count, 2**depth - 1), generator=gen, device=gen.device)
        return {"coords": coords, "leaves": torch.randn(count, 2**depth, generator=gen, device=gen.device)}

    def signal(self, params, xs):
        B, P, _ = xs.shape
        node = torch.zeros(B, P, dtype=torch.long, device=xs.device)  # (B, P)
        for _ in range(self.config.depth):
            coord = params["coords"].gather(1, node)  # (B, P)
            right = xs.gather(2, coord.unsqueeze(-1)).squeeze(-1) > 0
            node = 2 * node + 1 + right.long()
        return params["leaves"].gather(1, node - (2**self.config.depth - 1))  # (B, P)

    def signal_second_moment(self):
        return self.shift.task_mean**2 + self.shift.task_scale**2


FAMILIES: dict[str, Callable[..., TaskFamily]] = {
    "linear": LinearRegression,
    "linear_mixed_noise": LinearMixedNoise,
    "sparse_linear": SparseLinear,
    "relu_net": ReluNet,
    "decision_tree": DecisionTree,
}


def make_family(config: TaskConfig, shift: ShiftConfig | None = None) -> TaskFamily:
    """The family of ``config``, with an evaluation-time ``shift`` (None: the training distribution)."""
    check_choice(config.family, "family", FAMILIES)
    return FAMILIES[config.family](config, shift)


class TaskPool:
    """The T pretraining tasks of a cell and its training batches, all pure functions of the seed.

    Task i lives in chunk i // chunk_size, drawn from generator(seed, 'pool', chunk). Pools of up to
    ``max_resident`` numbers (2^27: 512 MiB of float32, e.g. 1e5 ReLU teachers at d = 8) are drawn once,
    chunk after chunk, and held in memory; larger ones regenerate the chunks a batch needs (about 16 ms
    a batch of 64 on a CPU core, against 1 ms held), so T = 2e6 ReLU teachers at d = 20 cost no memory.
    T = inf draws a fresh task per prompt.
    """

    def __init__(
        self,
        family: TaskFamily,
        T: float,
        seed: int,
        device: torch.device | str = "cpu",
        max_resident: int = 1 << 27,
    ):
        check(T >= 1, "T", f"must be >= 1 or inf, got {T}")
        self.family, self.T, self.seed, self.device = family, T, seed, torch.device(device)
        self.finite = not math.isinf(T)
        per_task = family.params_per_task()
        self.chunk_size = max(1, min(1 << 14, (1 << 15) // max(per_task, 1)))
        self._resident = None
        self._cached_block: tuple | None = None
        if self.finite and int(T) * per_task <= max_resident:
            self._resident = self._whole(int(T))

    def _whole(self, T: int) -> dict[str, torch.Tensor]:
        """Tasks 0..T-1: every chunk once, in order (the same tasks as ``_gather``, in linear time)."""
        chunks = [self._chunk(c) for c in range(-(-T // self.chunk_size))]
        return {k: torch.cat([chunk[k] for chunk in chunks])[:T] for k in chunks[0]}

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

    def batch(
        self, step: int, batch_size: int, points: int, dims: int | None = None, max_points: int | None = None
    ) -> Prompts:
        """The training batch of ``step``: batch_size prompts of ``points`` (x, y) pairs each.

        Batches are drawn ``block_steps`` steps at a time, each block from its own generator
        (seed, 'batch-block', block) at ``max_points`` (default ``points``) points per prompt: a few
        tensor operations per block instead of a dozen per step, which is most of a tiny model's step.
        Step s's batch is a pure function of (seed, batch_size, max_points, s), whatever was asked before.
        ``points`` < ``max_points`` (a curriculum on the prompt length) reads the first ``points`` pairs
        of the full batch; ``dims`` zeroes the input coordinates from ``dims`` on before labelling
        (Garg et al.'s curriculum on d). The tasks and random numbers of step s stay those of the full
        batch. The tensors returned may be views of the block: read them, do not write them.
        """
        max_points = max_points or points
        if points > max_points:
            raise ValueError(f"points {points} exceed max_points {max_points}")
        steps = self.block_steps(batch_size, max_points)
        block = self._block(step // steps, steps, batch_size, max_points)
        j = step % steps
        xs = block["xs"][j, :, :points]
        if dims is None:
            return Prompts(xs, block["ys"][j, :, :points], {"noise_std": block["sigma"][j]})
        xs = xs.clone()
        xs[..., dims:] = 0
        params = {k: v[j] for k, v in block["params"].items()}
        return self.family.labelled(params, xs, block["sigma"][j], block["noise"][j, :, :points])

    BLOCK_NUMBERS = 1 << 20  # at most ~2^20 input numbers per block (4 MiB of float32)
    MAX_BLOCK_STEPS = 32

    def block_steps(self, batch_size: int, points: int) -> int:
        """Steps per block: a power of two up to MAX_BLOCK_STEPS, fewer for large batches (memory)."""
        per_step = batch_size * points * (self.family.config.d + 2)
        steps = 1
        while steps < self.MAX_BLOCK_STEPS and 2 * steps * per_step <= self.BLOCK_NUMBERS:
            steps *= 2
        return steps

    def _block(self, index: int, steps: int, batch_size: int, points: int) -> dict:
        """Block ``index``: ``steps`` batches drawn at once (cached: consecutive steps share it)."""
        key = (index, steps, batch_size, points)
        if self._cached_block is not None and self._cached_block[0] == key:
            return self._cached_block[1]
        gen = generator(self.seed, "batch-block", index, self.device)
        count = steps * batch_size
        if self.finite:
            params = self.tasks(torch.randint(int(self.T), (count,), generator=gen, device=self.device))
        else:
            params = self.family.draw(count, gen)
        xs = self.family.inputs(count, points, gen)  # (S*B, P, d)
        sigma, noise = self.family.label_noise(count, points, gen)
        ys = self.family.labelled(params, xs, sigma, noise).ys
        block = {
            "xs": xs.view(steps, batch_size, points, -1),
            "ys": ys.view(steps, batch_size, points),
            "sigma": sigma.view(steps, batch_size),
            "noise": noise.view(steps, batch_size, points),
            "params": {k: v.view(steps, batch_size, *v.shape[1:]) for k, v in params.items()},
        }
        self._cached_block = (key, block)
        return block


def stacked_batches(
    pools: Sequence[TaskPool],
    step: int,
    batch_size: int,
    points: int,
    dims: int | None = None,
    max_points: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each pool's ``batch`` of ``step``, stacked: xs (K, B, P, d), ys (K, B, P) (scaling.budget.packing's
    members)."""
    batches = [pool.batch(step, batch_size, points, dims, max_points) for pool in pools]
    return torch.stack([b.xs for b in batches]), torch.stack([b.ys for b in batches])


def stacked_block(
    pools: Sequence[TaskPool], step: int, batch_size: int, points: int
) -> tuple[range, torch.Tensor, torch.Tensor] | None:
    """The block holding ``step`` of every pool, stacked: (its steps, xs (K, S, B, P, d), ys (K, S, B, P));
    xs[:, j], ys[:, j] are stacked_batches(pools, steps[j], batch_size, points). None when the pools
    block their batches differently (then ask stacked_batches step by step)."""
    sizes = {pool.block_steps(batch_size, points) for pool in pools}
    if len(sizes) != 1:
        return None
    steps = sizes.pop()
    index = step // steps
    blocks = [pool._block(index, steps, batch_size, points) for pool in pools]
    return (
        range(index * steps, (index + 1) * steps),
        torch.stack([b["xs"] for b in blocks]),
        torch.stack([b["ys"] for b in blocks]),
    )


def fresh_prompts(
    family: TaskFamily,
    count: int,
    points: int,
    seed: int,
    purpose: str = "eval",
    device: torch.device | str = "cpu",
) -> Prompts:
    """``count`` prompts with fresh (unseen) tasks: the evaluation set of a cell, moved to ``device``.

    Drawn on the CPU whatever the device: CUDA's generator is another stream than the CPU's, and a cell's
    evaluation prompts (and so its errors, a scan's or a construction's answers) must not depend on where
    it ran. Training batches are drawn on the training device (TaskPool): another sample there, of the same
    distributions."""
    gen = generator(seed, purpose, 0, "cpu")
    params = family.draw(count, gen)
    return family.label(params, family.inputs(count, points, gen), gen).to(device)
