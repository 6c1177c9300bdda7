"""Adam as ``torch.optim.Adam(fused=True)`` computes it, without torch.optim.

torch.optim's ``Optimizer`` wraps its methods in ``torch._disable_dynamo`` and its ``step`` in a
graph-break guard, both of which import ``torch._dynamo`` (and sympy) on first use: ~1.1 s of CPU in
every process that builds an optimiser, paid by every trial process (two trials on two cores: a second of
a sweep's start) for a compiler this project never runs in a trial. ``FusedAdam`` calls the same aten
kernel (``torch._fused_adam_``, one kernel per step for all parameters on CPU and CUDA) on the same state,
laid out as torch.optim.Adam lays it out (per parameter: a float32 ``step`` on the parameter's device,
``exp_avg``, ``exp_avg_sq``; one param group with torch's keys), so the updates are bitwise those of
torch.optim.Adam(fused=True) and a state_dict of either loads into the other (tests/test_adam.py).
No weight decay, amsgrad or maximize: the training recipe is plain Adam with a constant learning rate.

``StackedAdam`` is the same update on parameters stacked over the K members of a pack
(papers.context_scaling.stacked), each member with its own learning rate and moments.

``DeviceRates`` holds the learning rates of a schedule on the device, for steps captured as a CUDA graph
(papers.context_scaling.cuda_graphs): the fused kernel takes its rate as a tensor
(``_fused_adam_.tensor_lr``) read at a step counter that lives on the device, so a replayed step follows the
schedule. The rate is the product the host computes, bit for bit (tests/test_adam.py).
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Iterable, Sequence

import torch

# torch.optim.Adam(fused=True)'s param group, less "params" (a state_dict carries these keys)
GROUP_DEFAULTS = {
    "betas": (0.9, 0.999),
    "eps": 1e-8,
    "weight_decay": 0,
    "amsgrad": False,
    "maximize": False,
    "foreach": None,
    "capturable": False,
    "differentiable": False,
    "fused": True,
    "decoupled_weight_decay": False,
}


class FusedAdam:
    """``torch.optim.Adam(params, lr, betas, eps, fused=True)``: the attributes and methods CellTrainer and
    scaling.budget.packing use (param_groups, state, zero_grad, step, state_dict, load_state_dict)."""

    def __init__(
        self,
        params: Iterable[torch.nn.Parameter],
        lr: float,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-8,
    ):
        params = list(params)
        for p in params:
            if not (p.is_floating_point() and p.device.type in ("cpu", "cuda")):
                raise ValueError(
                    f"FusedAdam takes floating-point CPU or CUDA parameters, got {p.dtype} on {p.device}"
                )
        self.param_groups: list[dict[str, Any]] = [
            {**GROUP_DEFAULTS, "lr": float(lr), "betas": tuple(betas), "eps": float(eps), "params": params}
        ]
        self.state: dict[torch.Tensor, dict[str, torch.Tensor]] = defaultdict(dict)

    @property
    def params(self) -> list[torch.nn.Parameter]:
        return self.param_groups[0]["params"]

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.params:
            if set_to_none:
                p.grad = None
            elif p.grad is not None:
                p.grad.detach_().zero_()

    @torch.no_grad()
    def step(self, lr: torch.Tensor | None = None) -> None:
        """One Adam step of every parameter with a gradient (torch.optim.adam._fused_adam), at the group's
        learning rate or at ``lr``, a rate on the parameters' device (DeviceRates.rates)."""
        group = self.param_groups[0]
        beta1, beta2 = group["betas"]
        by_device: dict[tuple, list[list[torch.Tensor]]] = {}
        for p in self.params:
            if p.grad is None:
                continue
            state = self.state[p]
            if not state:
                state["step"] = torch.zeros((), dtype=torch.float32, device=p.device)
                state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            lists = by_device.setdefault((p.device, p.dtype), [[], [], [], [], []])
            for slot, tensor in zip(lists, (p, p.grad, state["exp_avg"], state["exp_avg_sq"], state["step"])):
                slot.append(tensor)
        for params, grads, exp_avgs, exp_avg_sqs, steps in by_device.values():
            torch._foreach_add_(steps, 1)
            torch._fused_adam_(
                params,
                grads,
                exp_avgs,
                exp_avg_sqs,
                [],
                steps,
                amsgrad=False,
                lr=group["lr"] if lr is None else lr,
                beta1=beta1,
                beta2=beta2,
                weight_decay=0.0,
                eps=group["eps"],
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )

    def state_dict(self) -> dict[str, Any]:
        """torch.optim's layout: parameters by index, the state's tensors themselves (not copies)."""
        index = {id(p): i for i, p in enumerate(self.params)}
        group = {k: v for k, v in self.param_groups[0].items() if k != "params"}
        return {
            "state": {index[id(p)]: dict(s) for p, s in self.state.items() if s},
            "param_groups": [{**group, "params": list(range(len(self.params)))}],
        }

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """A state_dict of this class or of torch.optim.Adam over the same parameters (fused or not); its
        tensors are copied."""
        groups = state_dict["param_groups"]
        if len(groups) != 1 or len(groups[0]["params"]) != len(self.params):
            raise ValueError(
                f"optimizer state for {[len(g['params']) for g in groups]} parameters in "
                f"{len(groups)} groups does not fit 1 group of {len(self.params)} parameters"
            )
        position = {saved: p for saved, p in zip(groups[0]["params"], self.params)}
        self.param_groups[0].update({k: groups[0][k] for k in ("lr", "betas", "eps") if k in groups[0]})
        self.state = defaultdict(dict)
        for saved, values in state_dict["state"].items():
            p = position[saved]
            self.state[p] = {
                key: value.to(
                    dtype=torch.float32 if key == "step" else p.dtype, device=p.device, copy=True
                )  # never shared with the dict given
                for key, value in values.items()
            }


class DeviceRates:
    """The learning rates ``lrs`` under a schedule, held on the device: the update made at step s (0-based)
    reads ``lr * factors[s]`` for each lr, ``factors`` being the schedule's factor of every step computed on
    the host (TrainConfig.lr_factor, a float64 tensor on the device), at ``index``, a step counter on the
    device that each update advances (``advance``): a step replayed from a CUDA graph follows the schedule.

    The product is taken on the device in float64, as Python's float takes it for a host-side rate (the same
    IEEE product, bit for bit), and handed to the fused kernel as float64 on the CPU (whose kernel reads a
    double: the host-side update exactly) and float32 on CUDA (whose kernel reads a float).
    """

    def __init__(self, lrs: Sequence[float], factors: torch.Tensor, step: int):
        device = factors.device
        self.lrs = torch.tensor([float(lr) for lr in lrs], dtype=torch.float64, device=device)  # (G,)
        self.factors = factors  # (steps,) float64
        self.index = torch.tensor([step], dtype=torch.long, device=device)  # (1,)
        self.dtype = torch.float32 if device.type == "cuda" else torch.float64

    def seek(self, step: int) -> None:
        """Read the rates of ``step`` next (a resumed trainer, a new segment)."""
        self.index.fill_(step)

    def rates(self) -> list[torch.Tensor]:
        """Each lr's rate of the current step: 0-d tensors on the device (no synchronisation)."""
        rates = (self.lrs * self.factors.index_select(0, self.index)).to(self.dtype)  # (G,)
        return [rates[g] for g in range(rates.shape[0])]

    def advance(self) -> None:
        self.index.add_(1)


class StackedAdam:
    """FusedAdam's update of parameters stacked over K members: member k's slice moves exactly as its own
    FusedAdam would move it (the same kernel, ``torch._fused_adam_``, on the slices of the (K, ...) tensors,
    one call per distinct learning rate), each member with its own learning rate (its cell's ``train.lr``,
    times the schedule's factor of the step that ``update`` is given, common to a pack) and moments.

    Moments and the step count are read from the members' torch Adam states and written back to them
    (``write_back``): a member's checkpoint stays that of an unpacked cell, and a segment may start from
    members resumed from checkpoints. The step count lives on the device, and with ``factors`` (the
    schedule's factor of every step, float64 on the device) so do the learning rates (DeviceRates): the update
    then launches no Python-dependent arithmetic, and a step can be captured in a CUDA graph
    (papers.context_scaling.cuda_graphs). An update allocates what it needs before it changes any
    state, so an out-of-memory error leaves the members' state as the last whole step left it.
    """

    def __init__(
        self, params: dict[str, torch.Tensor], members: Sequence, factors: torch.Tensor | None = None
    ):
        group = members[0].optimizer.param_groups[0]
        self.beta1, self.beta2 = group["betas"]
        self.eps = group["eps"]
        self.params = params
        owned = [dict(m.model.named_parameters()) for m in members]
        states = {
            name: [m.optimizer.state.get(own[name], {}) for m, own in zip(members, owned)] for name in params
        }  # name -> each member's Adam state
        self.exp_avg = {name: self._stack(states[name], "exp_avg", p) for name, p in params.items()}
        self.exp_avg_sq = {name: self._stack(states[name], "exp_avg_sq", p) for name, p in params.items()}
        steps = {int(st.get("step", 0)) for per_param in states.values() for st in per_param}
        if len(steps) != 1:
            raise ValueError(
                f"members' optimisers are at different steps {sorted(steps)}; they cannot step as one"
            )
        step = steps.pop()
        device = next(iter(params.values())).device
        self.step_count = torch.tensor(float(step), dtype=torch.float32, device=device)
        lrs = [float(m.cell.train.lr) for m in members]  # the optimisers hold the last scheduled rate
        self.by_lr = {lr: [k for k, own in enumerate(lrs) if own == lr] for lr in dict.fromkeys(lrs)}
        self.rates = None if factors is None else DeviceRates(list(self.by_lr), factors, step)

    @staticmethod
    def _stack(states: list[dict], key: str, like: torch.Tensor) -> torch.Tensor:
        return torch.stack([st[key] if key in st else torch.zeros_like(like[0]) for st in states])

    @torch.no_grad()
    def update(self, grads: dict[str, torch.Tensor], factor: float = 1.0) -> None:
        """One Adam step of every member from the stacked gradients (name -> (K, ...)), at ``factor`` times
        each member's learning rate (TrainConfig.lr_factor of the step), or at the device-held rates."""
        names = list(self.params)
        grads = {n: grads[n].contiguous() for n in names}  # the layout of the (contiguous) stacked params
        rates = self.rates.rates() if self.rates is not None else [lr * factor for lr in self.by_lr]

        def slices(tensors: dict[str, torch.Tensor], members: list[int]) -> list[torch.Tensor]:
            return [tensors[n][k] for k in members for n in names]

        calls = [
            (rate, [slices(t, members) for t in (self.params, grads, self.exp_avg, self.exp_avg_sq)])
            for rate, members in zip(rates, self.by_lr.values())
        ]
        self.step_count += 1  # all allocated: from here on the state changes
        for rate, (params, grad, exp_avg, exp_avg_sq) in calls:
            torch._fused_adam_(
                params,
                grad,
                exp_avg,
                exp_avg_sq,
                [],
                [self.step_count] * len(params),
                amsgrad=False,
                lr=rate,
                beta1=self.beta1,
                beta2=self.beta2,
                weight_decay=0.0,
                eps=self.eps,
                maximize=False,
                grad_scale=None,
                found_inf=None,
            )
        if self.rates is not None:
            self.rates.advance()

    def write_back(self, members: Sequence) -> None:
        """Each member's torch Adam state becomes its slice of the stacked moments and the step count."""
        for k, member in enumerate(members):
            own = dict(member.model.named_parameters())
            for name in self.params:
                member.optimizer.state[own[name]] = {
                    "step": self.step_count.detach().clone().to(own[name].device),
                    "exp_avg": self.exp_avg[name][k].clone(),
                    "exp_avg_sq": self.exp_avg_sq[name][k].clone(),
                }
