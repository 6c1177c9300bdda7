"""Packing small cells: several cells of one architecture trained in one process as a batched ensemble.

A pack is K cells whose models have the same shapes (same model settings, task dimension d and N) and
that step in lockstep (same training settings but the learning rate). Each member keeps everything it
would have alone: its own CellTrainer (task pool, model initialised from its own seed, Adam with its own
learning rate), so its batch at step s, its checkpoint (under its own cell key, in the format of an
unpacked cell) and its MLflow run are those of the cell trained alone. Only the forward and backward pass
are shared, in segments between checkpoints (StackedMembers): the members' parameters and Adam moments
are stacked into (K, ...) tensors, the parameter-free features of the K batches are computed as one batch,
each Linear layer of the head is one batched matrix product, and one Adam update (each member's own
learning rate) moves all members; at the segment's end every member gets its slice back. Per training
step a pack therefore costs about what one cell costs, not K times. The loss is the sum of the members'
losses, so member k's gradient is the gradient of its own loss; results equal the unpacked ones up to
floating-point rounding of the batched matrix products.

``PACKABLE_ARCHS`` lists the architectures built as features then a Linear/ReLU head; ``pack_groups``
is the planner's decision (``run.pack``: ``auto`` packs up to ``AUTO_PACK_SIZE`` cells whose estimated cost per training
step is at most ``AUTO_PACK_MAX_FLOPS``, in packs no larger than it takes to fill the cluster's slots
when each part has enough work to pay for its own trial;
an integer K packs up to K cells of a packable architecture of any size; ``off`` or 1 never packs).
"""
from __future__ import annotations

import hashlib
import json
import traceback
from typing import Any, Callable, Sequence

import torch

from .cells import Cell
from .config import canonical, to_dict
from .science.tasks import stacked_batches, stacked_block
from .tracking import CellLog
from .science.train import CellTrainer

PACKABLE_ARCHS = ("mlp", "onelayer", "linear_on_scalar")
AUTO_PACK_SIZE = 8
AUTO_PACK_MAX_FLOPS = 2e8       # estimated multiply-adds of one training step (forward) of one cell
# Splitting auto packs over the cluster's slots: a part becomes its own trial only when it keeps at least
# MIN_SPLIT_SECONDS of estimated training, since a trial's start (a worker process importing torch, Ray
# Tune and MLflow) costs seconds of CPU by itself. The estimate is deliberately on the slow side, so
# packs are split rather than serialised when in doubt: a fixed cost per step (Python, optimizer) plus
# the step's FLOPs (forward and backward: 6 per multiply-add of one member's forward, times the members)
# at a low rate.
MIN_SPLIT_SECONDS = 10.0
PACK_STEP_OVERHEAD_S = 1e-3
PACK_FLOP_RATE = 1e10
# a pack computes its members' features for up to this many numbers' worth of steps at once (16 MiB float32)
FEATURE_BLOCK_NUMBERS = 1 << 22


def pack_signature(cell: Cell) -> str | None:
    """Cells with the same signature can share a pack; None for a cell that never packs.

    Everything that fixes the model's shapes and the lockstep of training must agree: the model
    settings, d, N and the training settings but the learning rate. T, the seed, the learning rate,
    the other task settings and the evaluation may differ. Different widths change shapes: not packed.
    Only training cells pack (``cell.job == "train"``).
    """
    if cell.model.arch not in PACKABLE_ARCHS or cell.job != "train":      # other jobs: temperature_jobs
        return None
    train = to_dict(cell.train)
    train.pop("lr", None)
    shape = {"model": canonical(cell.model), "d": cell.task.d, "N": cell.N, "train": train}
    return json.dumps(shape, sort_keys=True, default=str)


def step_cost(cell: Cell) -> float:
    """Multiply-adds of one forward pass of a cell's batch: parameters x prompts x positions."""
    from .science.models import build_model

    with torch.device("meta"):
        model = build_model(cell.model, cell.task.d, cell.N + 1)
    params = sum(p.numel() for p in model.parameters())
    return float(params) * cell.train.batch_size * (cell.N + 1)


def pack_seconds(cell: Cell, members: int, cost: float | None = None) -> float:
    """Estimated training seconds of a pack of ``members`` cells like ``cell`` (see MIN_SPLIT_SECONDS);
    ``cost``: the cell's step_cost, when already known."""
    cost = step_cost(cell) if cost is None else cost
    return cell.train.steps * (PACK_STEP_OVERHEAD_S + 6 * members * cost / PACK_FLOP_RATE)


def auto_parts(cell: Cell, count: int, slots: int) -> int:
    """Into how many packs ``count`` auto-packable cells like ``cell`` go on ``slots`` trial slots: one
    per slot, fewer when a part would train for less than MIN_SPLIT_SECONDS (8 cells of a few seconds
    each are faster as one trial than as two that each start a worker process)."""
    parts, cost = max(1, min(slots, count)), step_cost(cell)
    while parts > 1 and pack_seconds(cell, -(-count // parts), cost) < MIN_SPLIT_SECONDS:
        parts -= 1
    return parts


def pack_limit(pack: str | int, cell: Cell) -> int:
    """How many cells like ``cell`` one pack may hold under the setting ``run.pack``."""
    if pack_signature(cell) is None or pack in ("off", 1, 0):
        return 1
    if pack == "auto":
        return AUTO_PACK_SIZE if step_cost(cell) <= AUTO_PACK_MAX_FLOPS else 1
    return int(pack)


def pack_groups(cells: Sequence, pack: str | int, resources_of: Callable = lambda c: None,
                slots: int = 1) -> list[list[int]]:
    """Indices of ``cells`` grouped into packs (in plan order); a group of one is an unpacked cell.

    ``cells`` are Cells; cells pack only with cells of the same signature and the same resources. Under
    ``auto`` the packs of a signature are made small enough that there are ``slots`` of them (the trials
    the cluster runs at once), so packing leaves no slot idle, unless the parts would be too short to pay
    for their own trial (``auto_parts``): 8 cells of a minute on 2 slots make 2 packs of 4, 8 cells of
    a second one pack of 8.
    """
    signatures = [(pack_signature(c), repr(resources_of(c))) for c in cells]
    open_groups: dict[tuple, list[int]] = {}
    groups: list[list[int]] = []
    parts: dict[tuple, int] = {}         # per signature: the same shapes and steps, so the same answer
    for i, cell in enumerate(cells):
        limit = pack_limit(pack, cell)
        if pack == "auto" and limit > 1:
            count = signatures.count(signatures[i])
            if signatures[i] not in parts:
                parts[signatures[i]] = auto_parts(cell, count, slots)
            limit = min(limit, max(1, -(-count // parts[signatures[i]])))
        if limit <= 1:
            groups.append([i])
            continue
        sig = signatures[i]
        group = open_groups.get(sig)
        if group is None or len(group) >= limit:
            group = open_groups[sig] = []
            groups.append(group)
        group.append(i)
    return groups


def pack_key(keys: Sequence[str]) -> str:
    """A trial name for a pack: 'pack-' and a hash of its members' keys."""
    return "pack-" + hashlib.sha256(",".join(keys).encode()).hexdigest()[:11]


class StackedAdam:
    """torch.optim.Adam's update (no weight decay, no amsgrad) on parameters stacked over K members.

    Each member keeps its own learning rate (a (K, 1, ...) tensor) and its own moments, so member k's
    slice moves exactly as its own Adam would move it alone. Moments and the step count are read from the
    members' torch Adam states and written back to them (``write_back``): a member's checkpoint stays that
    of an unpacked cell, and a segment may start from members resumed from checkpoints.
    """

    def __init__(self, params: dict[str, torch.Tensor], members: Sequence[CellTrainer]):
        group = members[0].optimizer.param_groups[0]
        self.beta1, self.beta2 = group["betas"]
        self.eps = group["eps"]
        self.params = params
        owned = [dict(m.model.named_parameters()) for m in members]
        states = {name: [m.optimizer.state.get(own[name], {}) for m, own in zip(members, owned)]
                  for name in params}                                   # name -> each member's Adam state
        self.exp_avg = {name: self._stack(states[name], "exp_avg", p) for name, p in params.items()}
        self.exp_avg_sq = {name: self._stack(states[name], "exp_avg_sq", p) for name, p in params.items()}
        steps = {int(st.get("step", 0)) for per_param in states.values() for st in per_param}
        if len(steps) != 1:
            raise ValueError(f"members' optimisers are at different steps {sorted(steps)}; they cannot step as one")
        self.step = steps.pop()
        lr = torch.tensor([m.optimizer.param_groups[0]["lr"] for m in members], dtype=torch.float32)
        self.lr = {name: lr.to(p.device).view(-1, *[1] * (p.dim() - 1)) for name, p in params.items()}

    @staticmethod
    def _stack(states: list[dict], key: str, like: torch.Tensor) -> torch.Tensor:
        return torch.stack([st[key] if key in st else torch.zeros_like(like[0]) for st in states])

    @torch.no_grad()
    def update(self, grads: dict[str, torch.Tensor]) -> None:
        """One Adam step of every member from the stacked gradients (name -> (K, ...))."""
        self.step += 1
        names = list(self.params)
        params, grads = [self.params[n] for n in names], [grads[n] for n in names]
        m, v = [self.exp_avg[n] for n in names], [self.exp_avg_sq[n] for n in names]
        torch._foreach_lerp_(m, grads, 1 - self.beta1)
        torch._foreach_mul_(v, self.beta2)
        torch._foreach_addcmul_(v, grads, grads, 1 - self.beta2)
        denom = torch._foreach_sqrt(v)
        torch._foreach_div_(denom, (1 - self.beta2 ** self.step) ** 0.5)
        torch._foreach_add_(denom, self.eps)
        steps = torch._foreach_div(m, denom)
        torch._foreach_mul_(steps, [self.lr[n] for n in names])
        torch._foreach_div_(steps, 1 - self.beta1 ** self.step)
        torch._foreach_sub_(params, steps)

    def write_back(self, members: Sequence[CellTrainer]) -> None:
        """Each member's torch Adam state becomes its slice of the stacked moments and the step count."""
        for k, member in enumerate(members):
            own = dict(member.model.named_parameters())
            for name in self.params:
                member.optimizer.state[own[name]] = {
                    "step": torch.tensor(float(self.step), dtype=torch.float32, device=own[name].device),
                    "exp_avg": self.exp_avg[name][k].clone(), "exp_avg_sq": self.exp_avg_sq[name][k].clone()}


class StackedMembers:
    """K members (same architecture, all at one step) as one model with (K, ...) parameters.

    A packable model is a parameter-free ``features(xs, ys)`` followed by ``head_layers()`` (Linear and
    ReLU layers). The features of the K members' batches are computed as one batch of K*B prompts; each
    Linear layer becomes one batched matrix product over the members' stacked weights, and so does each
    product of its backward pass, written out here (a tiny model's step is a few dozen tensor operations,
    and autograd's bookkeeping would cost as much as the arithmetic). Member k's gradient is that of its
    own prefix loss (scaling.science.train.prefix_loss), as autograd computes it; tests compare the two.
    """

    def __init__(self, members: Sequence[CellTrainer]):
        self.members = list(members)
        self.template = members[0].model
        names = {id(p): name for name, p in self.template.named_parameters()}
        self.layers = []                                 # ("linear", weight name, bias name | None) | ("relu",)
        for layer in self.template.head_layers():
            if isinstance(layer, torch.nn.Linear):
                self.layers.append(("linear", names[id(layer.weight)],
                                    None if layer.bias is None else names[id(layer.bias)]))
            elif isinstance(layer, torch.nn.ReLU):
                self.layers.append(("relu",))
            else:
                raise TypeError(f"cannot pack a head layer {type(layer).__name__}; packable: Linear, ReLU")
        with torch.no_grad():
            self.params = {name: torch.stack([dict(m.model.named_parameters())[name] for m in members])
                           for name in names.values()}                        # name -> (K, ...)
        self.optimizer = StackedAdam(self.params, members)
        self.step = members[0].step
        bf16 = members[0].cell.train.precision == "bfloat16"
        self.dtype = torch.bfloat16 if bf16 else torch.float32                # autocast's matmul dtype
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
        block = stacked_block(pools, self.step, B, max_points) if dims is None and points == max_points else None
        if block is None:                                   # a curriculum step: this step's batches alone
            xs, ys = stacked_batches(pools, self.step, B, points, dims, max_points)
            K = ys.shape[0]
            return self.template.features(xs.flatten(0, 1), ys.flatten(0, 1)).unflatten(0, (K, B)), ys
        steps, xs, ys = block
        K, S = ys.shape[:2]
        if self._run_steps is None:                          # steps per feature run: from one step's size
            per_step = self.template.features(xs[:, 0].flatten(0, 1), ys[:, 0].flatten(0, 1)).numel()
            run = S
            while run > 1 and run * per_step > FEATURE_BLOCK_NUMBERS:
                run //= 2
            self._run_steps = run
        run = self._run_steps
        first = (self.step - steps.start) // run * run                       # runs are aligned in the block
        xs, ys = xs[:, first:first + run], ys[:, first:first + run]
        h = self.template.features(xs.flatten(0, 2), ys.flatten(0, 2)).unflatten(0, (K, run, B))
        self._features = (range(steps.start + first, steps.start + first + run), h, ys)
        j = self.step - steps.start - first
        return h[:, j], ys[:, j]

    @torch.no_grad()
    def losses_and_grads(self) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The members' losses at the current step (K,) and their gradients (name -> (K, ...))."""
        h, ys = self.step_inputs()                                              # (K, B, P, F), (K, B, P)
        K, B, P = ys.shape
        inputs = []                                                             # each layer's input
        h = h.reshape(K, B * P, -1).to(self.dtype)                              # (K, B*P, F)
        for layer in self.layers:
            inputs.append(h)
            if layer[0] == "relu":
                h = torch.relu(h)
            elif layer[2] is None:
                h = torch.bmm(h, self.params[layer[1]].to(self.dtype).transpose(1, 2))
            else:
                h = torch.baddbmm(self.params[layer[2]].to(self.dtype).unsqueeze(1), h,
                                  self.params[layer[1]].to(self.dtype).transpose(1, 2))
        diff = h.reshape(K, B, P).float() - ys                                  # (K, B, P)
        diff[:, :, 0] = 0                                                       # column 0: no context, no loss
        count = B * (P - 1)
        losses = diff.pow(2).sum(dim=(1, 2)) / count                            # prefix_loss per member
        grad = (diff * (2 / count)).reshape(K, B * P, 1).to(self.dtype)         # d loss_k / d output
        grads = {}
        for i in reversed(range(len(self.layers))):
            layer = self.layers[i]
            if layer[0] == "relu":
                grad = grad * (inputs[i] > 0)                                   # relu's backward
                continue
            weight = self.params[layer[1]]
            grads[layer[1]] = torch.bmm(grad.transpose(1, 2), inputs[i]).float()   # (K, out, in)
            if layer[2] is not None:
                grads[layer[2]] = grad.sum(dim=1).float()                          # (K, out)
            if i > 0:
                grad = torch.bmm(grad, weight.to(self.dtype))                      # (K, B*P, in)
        return losses, grads

    def train_step(self) -> torch.Tensor:
        losses, grads = self.losses_and_grads()
        self.optimizer.update(grads)
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


class PackTrainer:
    """K CellTrainers trained together in segments: stacked forward/backward and Adam (StackedMembers)."""

    def __init__(self, trainers: Sequence[CellTrainer]):
        self.trainers = list(trainers)

    def train_until(self, members: Sequence[CellTrainer], stop: int,
                    on_loss: Callable[[int, int, float], None] | None = None) -> None:
        """Train ``members`` (all at one step) to step ``stop``; on_loss(member index, step, loss).

        The members' own models and optimisers hold the result afterwards (a checkpoint boundary).
        """
        train = members[0].cell.train
        stop = min(stop, train.steps)
        if members[0].step >= stop:
            return
        stacked = StackedMembers(members)
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


def run_pack(config: dict[str, Any], report=None) -> dict[str, Any]:
    """Train, evaluate and log a pack's members as scaling.trial.run_cell does each cell alone.

    Members whose run is complete already (a retried trial) are skipped; the others resume from their
    own checkpoints. A member that fails (e.g. diverges to NaN) is marked failed in its run and does
    not stop the others; the trial then raises, naming it, so Tune retries the pack (from checkpoints).
    """
    from .trial import CheckpointStore, cap_gpu_memory, finish_trained, trial_device

    cells = [Cell.from_dict(m["cell"]) for m in config["members"]]
    torch.set_num_threads(max(1, int(config["resources"].get("cpu", 1))))
    device = trial_device(config, cells[0])
    cap_gpu_memory(device, float(config["resources"].get("gpu", 0)))
    store = CheckpointStore(config["storage"])
    logs = [CellLog.open(config["tracking_uri"], config["experiment_id"], cell, config["sweep"],
                         config.get("parent_run_id")) for cell in cells]
    todo = [(cell, log) for cell, log in zip(cells, logs) if not log.complete]
    errors: dict[str, str] = {}
    if todo:
        try:
            trainers = train_members(todo, store, device, report)
        except Exception:
            for _, log in todo:
                log.fail(traceback.format_exc())
            raise
        for trainer, (cell, log) in zip(trainers, todo):
            try:
                finish_trained(trainer, cell, log)
            except Exception:
                log.fail(traceback.format_exc())
                errors[cell.key] = f"{cell.name} ({cell.key}): {traceback.format_exc().strip().splitlines()[-1]}"
    if errors:
        raise PackMemberError("; ".join(errors.values()))
    final = {"step": max(c.train.steps for c in cells), "progress": 1.0, "finished": 1}
    if report:
        report(final)
    return final


class PackMemberError(RuntimeError):
    """Some members of a pack failed (their runs say why); the others are complete."""


def train_members(todo, store, device, report) -> list[CellTrainer]:
    """The members' trainers, trained to their last step with checkpoints and losses as unpacked cells."""
    trainers = [CellTrainer(cell, device) for cell, _ in todo]
    for trainer, (cell, log) in zip(trainers, todo):
        state = store.load(cell.key)
        if state is not None:
            trainer.load_state_dict(state)
            log.log_metrics("trial/resumed_from", [(trainer.step, trainer.step)])
            log.log_losses(state.get("unlogged_losses", []))
    pack = PackTrainer(trainers)
    losses: list[list] = [[] for _ in trainers]
    steps = sum(c.train.steps for c, _ in todo)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop, lambda i, s, v: losses[i].append((s, v)))
        for trainer in active:
            i = trainers.index(trainer)
            cell, log = todo[i]
            if trainer.step % cell.train.checkpoint_every == 0 or trainer.done_training:
                log.log_losses(losses[i])
                store.save(cell.key, {**trainer.state_dict(), "unlogged_losses": log.pending})
                losses[i] = []
        if report:
            report({"step": min(t.step for t in trainers), "progress": sum(t.step for t in trainers) / steps,
                    "loss": float("nan")})
    return trainers
