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
stack through scaling.papers.context_scaling.stacked_transformers (the same segments, StackedAdam and
write-back; a transformer's forward and backward instead of features and a head); ``stack`` picks the engine.
Which cells pack is scaling.packing's decision; the pack's trial is scaling.trial.run_pack.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch

from .adam import StackedAdam
from .stacked_transformers import StackedTransformer, packs
from .tasks import stacked_batches, stacked_block
from .train import CellTrainer

# a pack computes its members' features for up to this many numbers' worth of steps at once (16 MiB float32)
FEATURE_BLOCK_NUMBERS = 1 << 22


class StackedMembers:
    """K members (same architecture, all at one step) as one model with (K, ...) parameters.

    A packable model is a parameter-free ``features(xs, ys)`` followed by ``head_layers()`` (Linear and
    ReLU layers). The features of the K members' batches are computed as one batch of K*B prompts; each
    Linear layer becomes one batched matrix product over the members' stacked weights, and so does each
    product of its backward pass, written out here (a tiny model's step is a few dozen tensor operations,
    and autograd's bookkeeping would cost as much as the arithmetic). Member k's gradient is that of its
    own prefix loss (scaling.papers.context_scaling.train.prefix_loss), as autograd computes it; tests compare
    the two.
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
        self.optimizer = StackedAdam(self.params, members)
        self.step = members[0].step
        bf16 = members[0].cell.train.precision == "bfloat16"
        self.dtype = torch.bfloat16 if bf16 else torch.float32  # autocast's matmul dtype
        self._features: tuple[range, torch.Tensor, torch.Tensor] | None = None  # (steps, (K, S, B, P, F), ys)
        self._run_steps: int | None = None

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
    def losses_and_grads(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The members' losses at the current step (K,) and their gradients (name -> (K, ...))."""
        h, ys = self.step_inputs()  # (K, B, P, F), (K, B, P)
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
        diff[:, :, 0] = 0  # column 0: no context, no loss
        count = B * (P - 1)
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

    def train_step(self) -> torch.Tensor:
        losses, grads = self.losses_and_grads()
        self.optimizer.update(grads, self.members[0].cell.train.lr_factor(self.step))
        self.step += 1
        return losses

    @torch.no_grad()
    def write_back(self) -> None:
        """Members' models, Adam states and steps become their slices of the stacked state."""
        for k, member in enumerate(self.members):
            for name, p in member.model.named_parameters():
                p.copy_(self.params[name][k])
            member.step = self.step
        self.optimizer.write_back(self.members)


def stack(members: Sequence[CellTrainer]) -> "StackedMembers | StackedTransformer":
    """The members as one stacked model: the transformer engine for GPT-2 and SGPT
    (scaling.papers.context_scaling.stacked_transformers), the features-then-head engine for the MLP-type
    models."""
    return StackedTransformer(members) if packs(members[0].model) else StackedMembers(members)


class PackTrainer:
    """K CellTrainers trained together in segments: stacked forward/backward and Adam (StackedMembers)."""

    def __init__(self, trainers: Sequence[CellTrainer]):
        self.trainers = list(trainers)

    def train_until(
        self,
        members: Sequence[CellTrainer],
        stop: int,
        on_loss: Callable[[int, int, float], None] | None = None,
    ) -> None:
        """Train ``members`` (all at one step) to step ``stop``; on_loss(member index, step, loss).

        The members' own models and optimisers hold the result afterwards (a checkpoint boundary).
        """
        train = members[0].cell.train
        stop = min(stop, train.steps)
        if members[0].step >= stop:
            return
        stacked = stack(members)
        indices = [self.trainers.index(m) for m in members]
        while stacked.step < stop:
            losses = stacked.train_step()
            step = stacked.step
            if on_loss and (step % train.log_every == 0 or step == train.steps):
                for i, loss in zip(indices, losses.tolist()):
                    on_loss(i, step, loss)
        stacked.write_back()

    @property
    def done_training(self) -> bool:
        return all(t.done_training for t in self.trainers)

    def next_segment(self) -> tuple[list[CellTrainer], int]:
        """The members furthest behind and the step to train them to (the next checkpoint, or the
        step of the next member ahead: members resumed from different checkpoints catch up first)."""
        todo = [t for t in self.trainers if not t.done_training]
        low = min(t.step for t in todo)
        every = todo[0].cell.train.checkpoint_every
        ahead = [t.step for t in todo if t.step > low]
        stop = min([(low // every + 1) * every, todo[0].cell.train.steps] + ahead)
        return [t for t in todo if t.step == low], stop
