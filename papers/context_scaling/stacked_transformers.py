"""Stacked GPT-2 and SGPT: K transformer cells of one shape trained as one batched model (DESIGN.md, "On a
GPU"; HFTA, Wang et al. MLSys 2021, "horizontally fused" training of many small models).

The members' parameters are stacked into (K, ...) tensors. Every linear layer of every member is one
batched matrix product (``torch.baddbmm`` over (K, B*T, in) x (K, in, out)), layer norms normalise the
(K, B, T, k) stream and scale it by each member's own (K, 1, 1, k) weights, and attention runs once with
the members folded into its batch dimension ((K*B, H, T, d_head) through SDPA for GPT-2; (K*B, L, L) scores
for SGPT's phi). The forward passes follow the members' own modules (papers.context_scaling.gpt2,
models, sgpt) operation for operation, in the same dtypes under the same autocast, so member k's prediction,
loss and gradient equal those of its cell trained alone up to the rounding of the batched products.

The loss is the sum of the members' prefix losses, so member k's gradient is that of its own loss, and a
member that diverges leaves the others untouched. One StackedAdam step moves all members, each with its
own learning rate. ``StackedTransformer`` has the interface of
papers.context_scaling.stacked.StackedMembers (the MLP engine): ``step``, ``train_step() -> losses
(K,)``, ``write_back()``; PackTrainer picks the engine.

What packs: GPT-2 with softmax attention through SDPA (the project's own backbone,
papers.context_scaling.gpt2), on either layout: the stacked one (eq. 2, Figs. 2, 3, 4, 8) passes its
stacked-prefix mask to SDPA as a boolean mask, as the cell alone does; and SGPT with any phi. GPT-2's other
phis and eager attention run transformers' GPT2Model and stay unpacked (``packs``).
"""

from __future__ import annotations

import contextlib
import math
from typing import Callable, Sequence

import torch
from torch import nn

from papers.context_scaling.adam import StackedAdam
from papers.context_scaling.attention import stacked_prefix_mask
from papers.context_scaling.cuda_graphs import compiled_step, next_losses, pack_factors, pack_graph
from papers.context_scaling.feature_maps import query_rows, stacked_rows
from papers.context_scaling.gpt2 import attend
from papers.context_scaling.models import GPT2InContext
from papers.context_scaling.sgpt import SGPT
from papers.context_scaling.tasks import stacked_batches, stacked_block

UNUSED = {GPT2InContext: ("backbone.wte.weight",)}  # parameters no input reads (no gradient, no Adam state)


def packs(model: nn.Module) -> bool:
    """Whether ``model`` (a built member) has a stacked forward here."""
    if isinstance(model, GPT2InContext):
        return model.own_backbone
    return isinstance(model, SGPT)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """Each member's x W + b as one batched product: x (K, M, in), weight (K, in, out), bias (K, out)."""
    if bias is None:
        return torch.bmm(x, weight)
    return torch.baddbmm(bias.unsqueeze(1), x, weight)


def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float) -> torch.Tensor:
    """LayerNorm of x (K, ..., k) with each member's weight and bias (K, k)."""
    shape = (x.shape[0],) + (1,) * (x.dim() - 2) + (x.shape[-1],)
    normed = nn.functional.layer_norm(x, x.shape[-1:], eps=eps)
    return normed * weight.view(shape) + bias.view(shape)


def gpt2_forward(model: GPT2InContext, p: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor):
    """GPT2InContext.forward of K members at once, either layout: xs (K, B, P, d), ys (K, B, P) -> (K, B, P).

    Interleaved, as the model alone (GPT2InContext.forward_interleaved): the final y token is dropped after
    the read-in and the last block keeps the x tokens after its attention. Stacked
    (GPT2InContext.forward_stacked): the P context tokens then the P query tokens under the stacked-prefix
    mask, at positions j and n, every block on every token as the cell alone runs it (GPT2Model's pass,
    bit for bit: skipping the last block's unread context rows would save ~5% of the FLOPs but move its
    weights' gradients by rounding), the predictions read at the query tokens.
    """
    K, B, P = ys.shape
    flat_x, flat_y = xs.flatten(0, 1), ys.flatten(0, 1)
    stacked = model.layout == "stacked"
    if stacked:
        tokens = torch.cat([stacked_rows(flat_x, flat_y), query_rows(flat_x)], dim=1)  # (K*B, 2P, d+1)
        positions, allowed, keep = (
            torch.arange(P, device=xs.device).repeat(2),
            stacked_prefix_mask(P, xs.device),
            None,
        )
    else:
        tokens = model.interleaved_tokens(flat_x, flat_y)  # (K*B, 2P, d)
        positions, allowed, keep = None, None, slice(0, None, 2)
    T = tokens.shape[1]
    embeds = linear(tokens.reshape(K, B * T, -1), p["read_in.weight"].transpose(1, 2), p["read_in.bias"])
    embeds = embeds.view(K, B, T, -1)
    if not stacked:
        embeds = embeds[:, :, :-1]  # (K, B, 2P-1, k): the final y token's, read in as the cell reads it
    hidden = backbone_forward(model.backbone, p, embeds, positions, allowed, keep)
    if stacked:
        hidden = hidden[:, :, P:]  # (K, B, P, k): the query tokens
    Tk = hidden.shape[2]
    out = linear(hidden.reshape(K, B * Tk, -1), p["read_out.weight"].transpose(1, 2), p["read_out.bias"])
    return out.view(K, B, Tk)


def backbone_forward(
    backbone, p: dict, embeds: torch.Tensor, positions, allowed, keep: slice | None
) -> torch.Tensor:
    """papers.context_scaling.gpt2.GPT2Backbone.forward on the members' embeddings (K, B, T, k):
    positions (T,) or None (0..T-1), the boolean mask ``allowed`` (T, T) or None (causal), the last block
    keeping the tokens ``keep`` (None: all); -> final-norm hidden states (K, B, T', k)."""
    T = embeds.shape[2]
    if positions is None and T > backbone.wpe.num_embeddings:
        raise ValueError(f"{T} tokens exceed the model's {backbone.wpe.num_embeddings} positions")
    wpe = p["backbone.wpe.weight"]
    hidden = embeds + (wpe[:, None, :T] if positions is None else wpe[:, None, positions])  # (K, B, T, k)
    last = len(backbone.h) - 1
    for i, block in enumerate(backbone.h):
        hidden = gpt2_block(block, f"backbone.h.{i}.", p, hidden, keep if i == last else None, allowed)
    return layer_norm(hidden, p["backbone.ln_f.weight"], p["backbone.ln_f.bias"], backbone.ln_f.eps)


def gpt2_block(
    block, name: str, p: dict, x: torch.Tensor, keep: slice | None, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """papers.context_scaling.gpt2.Block.forward on the members' stream x (K, B, T, k), causal or
    under the (T, T) boolean mask ``allowed``."""
    K, B, T, k = x.shape
    attn = block.attn
    h = layer_norm(x, p[name + "ln_1.weight"], p[name + "ln_1.bias"], block.ln_1.eps)
    qkv = linear(h.reshape(K, B * T, k), p[name + "attn.c_attn.weight"], p[name + "attn.c_attn.bias"])
    q, key, v = (
        t.reshape(K * B, T, attn.heads, attn.head_dim).transpose(1, 2) for t in qkv.split(k, dim=2)
    )  # (K*B, H, T, d_head): the members folded into attention's batch
    mixed = attend(q, key, v, attn.scaling, allowed).transpose(1, 2).reshape(K, B, T, k)
    if keep is not None:
        mixed, x = mixed[:, :, keep].contiguous(), x[:, :, keep]
        T = x.shape[2]
    x = x + linear(
        mixed.reshape(K, B * T, k), p[name + "attn.c_proj.weight"], p[name + "attn.c_proj.bias"]
    ).view(K, B, T, k)
    h = layer_norm(x, p[name + "ln_2.weight"], p[name + "ln_2.bias"], block.ln_2.eps)
    h = linear(h.reshape(K, B * T, k), p[name + "mlp.c_fc.weight"], p[name + "mlp.c_fc.bias"])
    h = linear(
        nn.functional.gelu(h, approximate="tanh"), p[name + "mlp.c_proj.weight"], p[name + "mlp.c_proj.bias"]
    )
    return x + h.view(K, B, T, k)


def sgpt_forward(model: SGPT, p: dict[str, torch.Tensor], xs: torch.Tensor, ys: torch.Tensor):
    """SGPT.forward of K members at once (read_in: each member's frozen W_0, stacked): -> (K, B, P)."""
    K, B, P, _ = xs.shape
    flat_x = xs.flatten(0, 1)
    tokens = torch.cat([stacked_rows(flat_x, ys.flatten(0, 1)), query_rows(flat_x)], dim=1)  # (K*B, 2P, d+1)
    L = tokens.shape[1]
    allowed = stacked_prefix_mask(P, xs.device)  # (2P, 2P)
    H = torch.bmm(tokens.view(K, B * L, -1), p["read_in"].to(tokens.dtype))  # (K, B*L, k)
    for i in range(len(model.proj)):
        flat = H.view(K * B, L, -1)
        scores = flat @ flat.transpose(1, 2) / math.sqrt(model.width)  # (K*B, L, L)
        mixed = (model.phi(scores, allowed) @ flat).view(K, B * L, -1)
        U = linear(mixed, p[f"proj.{i}.weight"].transpose(1, 2)) + H
        H = nn.functional.gelu(linear(U, p[f"mlp.{i}.weight"].transpose(1, 2))) + U
    out = linear(H.view(K, B, L, -1)[:, :, P:].reshape(K, B * P, -1), p["read_out.weight"].transpose(1, 2))
    return out.view(K, B, P)


FORWARDS: dict[type, Callable] = {GPT2InContext: gpt2_forward, SGPT: sgpt_forward}
FROZEN = {SGPT: ("read_in",)}  # buffers that differ between members (stacked beside the parameters)


class StackedTransformer:
    """K members (same GPT-2 or SGPT shapes, all at one step) as one model with (K, ...) parameters."""

    def __init__(self, members: Sequence):
        self.members = list(members)
        self.template = members[0].model
        if not packs(self.template):
            raise TypeError(f"{type(self.template).__name__} of this configuration has no stacked forward")
        self.forward = FORWARDS[type(self.template)]
        unused = UNUSED.get(type(self.template), ())
        names = [n for n, q in self.template.named_parameters() if q.requires_grad and n not in unused]
        with torch.no_grad():
            self.params = {
                n: torch.stack([dict(m.model.named_parameters())[n] for m in members]).requires_grad_()
                for n in names
            }  # name -> (K, ...)
            frozen = {
                n: torch.stack([dict(m.model.named_buffers())[n] for m in members])
                for n in FROZEN.get(type(self.template), ())
            }
        self.inputs = {**self.params, **frozen}
        self.optimizer = StackedAdam(self.params, members, pack_factors(members))
        self.step = members[0].step
        self.graph = pack_graph(self, members)  # where the members' trainers replay CUDA graphs
        cell = members[0].cell
        self.device = self.params[names[0]].device
        self.bf16 = cell.train.precision == "bfloat16"
        self._block: tuple[range, torch.Tensor, torch.Tensor] | None = None
        # train.compile: the forward and loss as inductor's kernels, one shape (a curriculum's others eager);
        # auto: on for CUDA (1.45x on packed Fig. 1 cells, an H200), compiled once for a trial's engines of
        # one shape (the same code: cuda_graphs.CompiledStep)
        self.compiled = compiled_step(cell.train, self.eager_losses, self.device, auto=True)

    def autocast(self):
        """As CellTrainer's: bf16 autocast without its cast cache (a CUDA graph cannot capture one)."""
        if self.bf16:
            return torch.autocast(self.device.type, dtype=torch.bfloat16, cache_enabled=False)
        return contextlib.nullcontext()

    def step_inputs(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The current step's batches of every member: xs (K, B, P, d), ys (K, B, P), each the member's own
        (from the members' batch blocks, stacked once per block; step by step under a curriculum)."""
        B, points, dims, max_points = self.members[0].batch_shape(self.step)
        pools = [m.pool for m in self.members]
        if dims is not None or points != max_points:
            return stacked_batches(pools, self.step, B, points, dims, max_points)
        if self._block is None or self.step not in self._block[0]:
            self._block = stacked_block(pools, self.step, B, max_points)
            if self._block is None:
                return stacked_batches(pools, self.step, B, points, dims, max_points)
        steps, xs, ys = self._block
        j = self.step - steps.start
        return xs[:, j], ys[:, j]

    def losses(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """Each member's prefix loss (papers.context_scaling.train.prefix_loss) on its batch: (K,);
        compiled at the steady shape where ``train.compile`` is on."""
        steady = self.compiled is not None and self.members[0].steady(self.step)
        return (self.compiled if steady else self.eager_losses)(self.inputs, xs, ys)

    def eager_losses(self, inputs: dict, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        with self.autocast():
            pred = self.forward(self.template, inputs, xs, ys)  # (K, B, P)
        return (pred.float()[:, :, 1:] - ys[:, :, 1:]).pow(2).mean(dim=(1, 2))

    def step_on(self, xs: torch.Tensor, ys: torch.Tensor) -> torch.Tensor:
        """One training step of every member on the batches (xs, ys), the step counter left alone; their
        losses before it (K,), on the device (papers.context_scaling.cuda_graphs captures this)."""
        losses = self.losses(xs, ys)
        grads = torch.autograd.grad(losses.sum(), list(self.params.values()))
        self.optimizer.update(dict(zip(self.params, grads)), self.members[0].cell.train.lr_factor(self.step))
        return losses.detach()

    def train_step(self) -> torch.Tensor:
        """One training step of every member; their losses before it (K,), on the device."""
        losses = next_losses(self)
        self.step += 1
        return losses

    @torch.no_grad()
    def write_back(self) -> None:
        """Members' models, Adam states and steps become their slices of the stacked state."""
        for k, member in enumerate(self.members):
            own = dict(member.model.named_parameters())
            for name, stacked in self.params.items():
                own[name].copy_(stacked[k])
            member.set_step(self.step)
        self.optimizer.write_back(self.members)
