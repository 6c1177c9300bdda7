"""The stacked training engine: K cells of one packable architecture trained as one batched model.

A pack is K cells whose models have the same shapes (same model settings, task dimension d and N) and
that step in lockstep (same training settings but the learning rate). Each member keeps everything it
would have alone: its own CellTrainer (task pool, model initialised from its own seed, Adam with its own
learning rate), so its batch at step s and its state are those of the cell trained alone. Only the
forward and backward pass are shared, in segments between checkpoints (StackedMembers): the members'
parameters and Adam moments are stacked into (K, ...) tensors, the parameter-free features of the K
batches are computed as one batch, each Linear layer of the head is one batched matrix product, and one
Adam update (each member's own learning rate) moves all members; at the segment's end every member gets
its slice back. Per training step a pack therefore costs about what one cell costs, not K times. The loss
is the sum of the members' losses, so member k's gradient is the gradient of its own loss; results equal
the unpacked ones up to floating-point rounding of the batched matrix products. GPT-2 and SGPT members
stack through papers.context_scaling.stacked_transformers (the same segments, StackedAdam and
write-back; a transformer's forward and backward instead of features and a head); ``stack`` picks the engine.
Which cells pack is scaling.budget.packing's decision; the pack's trial is scaling.trial.run.run_pack.
"""

from __future__ import annotations

import gc
from typing import Callable, Sequence

import torch

from papers.context_scaling.adam import StackedAdam
from papers.context_scaling.cuda_graphs import compiled_step, next_losses, pack_factors, pack_graph
from papers.context_scaling.stacked_transformers import StackedTransformer, packs
from papers.context_scaling.tasks import stacked_batches, stacked_block
from papers.context_scaling.train import CellTrainer

# a pack computes its members' features for up to this many numbers' worth of steps at once (16 MiB float32)
FEATURE_BLOCK_NUMBERS = 1 << 22


class StackedMembers:
    """K members (same architecture, all at one step) as one model with (K, ...) parameters.

    A packable model is a parameter-free ``features(xs, ys)`` followed by ``head_layers()`` (Linear and
    ReLU layers). The features of the K members' batches are computed as one batch of K*B prompts; each
    Linear layer becomes one batched matrix product over the members' stacked weights, and so does each
    product of its backward pass, written out here (a tiny model's step is a few dozen tensor operations,
    and autograd's bookkeeping would cost as much as the arithmetic). Member k's gradient is that of its
    own prefix loss (papers.context_scaling.train.prefix_loss, or lengths_loss under
    ``train.lengths``), as autograd computes it; tests compare the two.
    """

    def __init__(self, members: Sequence[CellTrainer]):
        self.members = list(members)
        self.template = members[0].model
        names = {id(p): name for name, p in self.template.named_parameters()}
        self.layers = []  # ("linear", weight name, bias name | None) | ("relu",)
        for layer in self.template.head_layers():
            if isinstance(layer, torch.nn.Linear):
                self.layers.append(
                    ("linear", names[id(layer.weight)], None if layer.bias is None else names[id(layer.bias)])
                )
            elif isinstance(layer, torch.nn.ReLU):
                self.layers.append(("relu",))
            else:
                raise TypeError(f"cannot pack a head layer {type(layer).__name__}; packable: Linear, ReLU")
        with torch.no_grad():
            self.params = {
                name: torch.stack([dict(m.model.named_parameters())[name] for m in members])
                for name in names.values()
            }  # name -> (K, ...)
        self.optimizer = StackedAdam(self.params, members, pack_factors(members))
        self.step = members[0].step
        self.kept = kept_columns(members[0])  # None: the prefix loss
        self.graph = pack_graph(self, members)
        bf16 = members[0].cell.train.precision == "bfloat16"
        self.dtype = torch.bfloat16 if bf16 else torch.float32  # autocast's matmul dtype
        self._features: tuple[range, torch.Tensor, torch.Tensor] | None = None  # (steps, (K, S, B, P, F), ys)
        self._run_steps: int | None = None
        # train.compile: the written-out forward and backward as inductor's kernels at the steady shape (on;
        # auto leaves the MLPs' few matmuls uncompiled: not measured faster)
        self.compiled = compiled_step(members[0].cell.train, self.losses_and_grads, members[0].device)

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current step's features (K, B, P, F) and labels (K, B, P) of every member.

        Without a curriculum they come from features computed for several steps at once (a run of steps
        of the members' batch blocks, cached; FEATURE_BLOCK_NUMBERS bounds its size): the features are
        parameter-free, so a step's rows are those the model would compute from its batch alone.
        """
        B, points, dims, max_points = self.members[0].batch_shape(self.step)
        pools = [m.pool for m in self.members]
        cached = self._features
        if cached is not None and self.step in cached[0]:
            j = self.step - cached[0].start
            return cached[1][:, j], cached[2][:, j]
        block = (
            stacked_block(pools, self.step, B, max_points) if dims is None and points == max_points else None
        )
        if block is None:  # a curriculum step: this step's batches alone
            xs, ys = stacked_batches(pools, self.step, B, points, dims, max_points)
            K = ys.shape[0]
            return self.template.features(xs.flatten(0, 1), ys.flatten(0, 1)).unflatten(0, (K, B)), ys
        steps, xs, ys = block
        K, S = ys.shape[:2]
        if self._run_steps is None:  # steps per feature run: from one step's size
            per_step = self.template.features(xs[:, 0].flatten(0, 1), ys[:, 0].flatten(0, 1)).numel()
            run = S
            while run > 1 and run * per_step > FEATURE_BLOCK_NUMBERS:
                run //= 2
            self._run_steps = run
        run = self._run_steps
        first = (self.step - steps.start) // run * run  # runs are aligned in the block
        xs, ys = xs[:, first : first + run], ys[:, first : first + run]
        h = self.template.features(xs.flatten(0, 2), ys.flatten(0, 2)).unflatten(0, (K, run, B))
        self._features = (range(steps.start + first, steps.start + first + run), h, ys)
        j = self.step - steps.start - first
        return h[:, j], ys[:, j]

    @torch.no_grad()
    def losses_and_grads(
        self, h: torch.Tensor, ys: torch.Tensor
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The members' losses on their features h (K, B, P, F) and labels ys (K, B, P): (K,), and their
        gradients (name -> (K, ...))."""
        K, B, P = ys.shape
        inputs = []  # each layer's input
        h = h.reshape(K, B * P, -1).to(self.dtype)  # (K, B*P, F)
        for layer in self.layers:
            inputs.append(h)
            if layer[0] == "relu":
                h = torch.relu(h)
            elif layer[2] is None:
                h = torch.bmm(h, self.params[layer[1]].to(self.dtype).transpose(1, 2))
            else:
                h = torch.baddbmm(
                    self.params[layer[2]].to(self.dtype).unsqueeze(1),
                    h,
                    self.params[layer[1]].to(self.dtype).transpose(1, 2),
                )
        diff = h.reshape(K, B, P).float() - ys  # (K, B, P)
        if self.kept is None:
            diff[:, :, 0] = 0  # column 0: no context, no loss
            count = B * (P - 1)
        else:  # train.lengths: the loss at those columns alone (lengths_loss)
            diff = diff * self.kept
            count = B * len(self.members[0].cell.train.lengths)
        losses = diff.pow(2).sum(dim=(1, 2)) / count  # prefix_loss per member
        grad = (diff * (2 / count)).reshape(K, B * P, 1).to(self.dtype)  # d loss_k / d output
        grads = {}
        for i in reversed(range(len(self.layers))):
            layer = self.layers[i]
            if layer[0] == "relu":
                grad = grad * (inputs[i] > 0)  # relu's backward
                continue
            weight = self.params[layer[1]]
            grads[layer[1]] = torch.bmm(grad.transpose(1, 2), inputs[i]).float()  # (K, out, in)
            if layer[2] is not None:
                grads[layer[2]] = grad.sum(dim=1).float()  # (K, out)
            if i > 0:
                grad = torch.bmm(grad, weight.to(self.dtype))  # (K, B*P, in)
        return losses, grads

    def step_on(self, h: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """One training step of every member on its features and labels, the step counter left alone; their
        losses before it (K,), on the device (papers.context_scaling.cuda_graphs captures this)."""
        steady = self.compiled is not None and self.members[0].steady(self.step)
        losses, grads = (self.compiled if steady else self.losses_and_grads)(h, ys)
        self.optimizer.update(grads, self.members[0].cell.train.lr_factor(self.step))
        return losses

    def train_step(self) -> torch.Tensor:
        """One training step of every member; their losses before it (K,), on the device."""
        losses = next_losses(self)
        self.step += 1
        return losses

    @torch.no_grad()
    def write_back(self) -> None:
        """Members' models, Adam states and steps become their slices of the stacked state."""
        for k, member in enumerate(self.members):
            for name, p in member.model.named_parameters():
                p.copy_(self.params[name][k])
            member.set_step(self.step)
        self.optimizer.write_back(self.members)


def kept_columns(member: CellTrainer) -> torch.Tensor | None:
    """(P,) 1 at the columns of ``train.lengths`` and 0 elsewhere, on the member's device (the pack's members
    share their training settings: scaling.budget.packing.pack_signature); None for the prefix loss."""
    if member.columns is None:
        return None
    kept = torch.zeros(member.points, device=member.device)
    kept[member.columns] = 1.0
    return kept


def stack(members: Sequence[CellTrainer]) -> "StackedMembers | StackedTransformer":
    """The members as one stacked model: the transformer engine for GPT-2 and SGPT
    (papers.context_scaling.stacked_transformers), the features-then-head engine for the MLP-type
    models."""
    return StackedTransformer(members) if packs(members[0].model) else StackedMembers(members)


class PackTrainer:
    """K CellTrainers trained together in segments: stacked forward/backward and Adam (``stack``'s engine).

    At most ``limit`` members are stacked at once (default: all; the trial's device memory sets it): the first
    ``limit`` members still training are trained first. ``guard(engine)``, called before each step, may raise
    torch.OutOfMemoryError (a device of stated memory: scaling.trial.devices.TrialMemory). A pack that runs
    out of memory is split: its members keep every step the engine finished (nothing lost, nothing trained
    twice), the limit halves, ``on_split(indices, text)`` says so (the indices of the members that were
    stacked), and ``train_until`` returns early; ``next_segment`` goes on with the smaller packs. The engine
    of a segment is kept for the next one while the same members train (a CUDA graph is captured once, not per
    checkpoint).
    """

    def __init__(
        self,
        trainers: Sequence[CellTrainer],
        limit: int | None = None,
        guard: Callable[[object], None] | None = None,
        on_split: Callable[[list[int], str], None] | None = None,
    ):
        self.trainers = list(trainers)
        self.limit = len(self.trainers) if limit is None else max(1, limit)
        self.guard, self.on_split = guard, on_split
        self._engine: tuple[tuple[int, ...], object] | None = None  # (members' ids, their engine)
        self._replayed = 0  # steps the engines given up replayed from their CUDA graphs

    def train_until(
        self,
        members: Sequence[CellTrainer],
        stop: int,
        on_loss: Callable[[int, int, float], None] | None = None,
    ) -> None:
        """Train ``members`` (all at one step) to step ``stop``; on_loss(member index, step, loss).

        The members' own models and optimisers hold the result afterwards (a checkpoint boundary), or, after
        a split, the result of the last step the engine finished.
        """
        stop = min(stop, members[0].cell.train.steps)
        if members[0].step >= stop:
            return
        engine = self.engine_of(members)
        try:
            self.run_engine(engine, [self.trainers.index(m) for m in members], stop, on_loss)
        except torch.OutOfMemoryError as error:
            what = str(error).strip().splitlines()[0] if str(error).strip() else "out of memory"
        else:
            engine.write_back()
            if all(m.done_training for m in members):
                self.drop_engine()
            return
        self.split(engine, what)  # outside the except block: the failed step's tensors are freed

    def run_engine(self, engine, indices: list[int], stop: int, on_loss) -> None:
        train = engine.members[0].cell.train
        while engine.step < stop:
            if self.guard is not None:
                self.guard(engine)
            losses = engine.train_step()
            step = engine.step
            if on_loss and (step % train.log_every == 0 or step == train.steps):
                for i, loss in zip(indices, losses.tolist()):
                    on_loss(i, step, loss)

    def engine_of(self, members: Sequence[CellTrainer]):
        """The stacked engine of ``members``: the last segment's while the same members train at its step."""
        ids = tuple(id(m) for m in members)
        if self._engine is not None and self._engine[0] == ids and self._engine[1].step == members[0].step:
            return self._engine[1]
        self.drop_engine()  # its memory is given back before the next engine is stacked
        engine = stack(members)
        self._engine = (ids, engine)
        return engine

    def split(self, engine, what: str) -> None:
        """After an out-of-memory error: the members take the engine's last finished step, and the pack
        splits in two (a member alone that does not fit raises)."""
        self.drop_engine()
        engine.graph = engine.compiled = None  # (an engine not the current one has them too: both hold it)
        members = engine.members
        if len(members) == 1:
            raise torch.OutOfMemoryError(f"{members[0].cell.name} alone does not fit the device: {what}")
        release_memory(engine.members[0].device)
        engine.write_back()
        self.limit = max(1, len(members) // 2)
        if self.on_split is not None:
            self.on_split(
                [self.trainers.index(m) for m in members],
                f"out of memory with {len(members)} members stacked, at step {engine.step} ({what}): the pack"
                f" goes on in packs of at most {self.limit}, each member from its step {engine.step}",
            )

    def drop_engine(self) -> None:
        """Let the current engine go, with its memory: its CUDA graph (which holds the engine: a cycle the
        collector would free only later) is cut loose, so its private memory pool is given back before the
        next engine is stacked. Kept, the pools of finished packs filled a capped card until a member alone
        no longer fitted (an H200, 2026-11-28)."""
        if self._engine is None:
            return
        engine = self._engine[1]
        self._engine = None
        engine.compiled = None  # torch.compile of its bound method holds it too
        if engine.graph is not None:
            self._replayed += engine.graph.replays
            engine.graph = None
            release_memory(engine.members[0].device)

    @property
    def replayed(self) -> int:
        """Steps of the pack's engines replayed from CUDA graphs so far (on a CPU: run on static inputs)."""
        graph = self._engine[1].graph if self._engine is not None else None
        return self._replayed + (graph.replays if graph is not None else 0)

    @property
    def done_training(self) -> bool:
        return all(t.done_training for t in self.trainers)

    def next_segment(self) -> tuple[list[CellTrainer], int]:
        """The members furthest behind among the first ``limit`` still training, and the step to train them
        to (the next checkpoint, or the step of the next member ahead: members resumed from different
        checkpoints catch up first)."""
        todo = [t for t in self.trainers if not t.done_training][: self.limit]
        low = min(t.step for t in todo)
        every = todo[0].cell.train.checkpoint_every
        ahead = [t.step for t in todo if t.step > low]
        stop = min([(low // every + 1) * every, todo[0].cell.train.steps] + ahead)
        return [t for t in todo if t.step == low], stop


def release_memory(device: torch.device) -> None:
    """Give the memory of a failed step back to the device (its tensors are garbage by now)."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
