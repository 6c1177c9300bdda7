"""GPT-2's transformer (Radford et al. 2019) as the in-context models use it, without transformers.

Hugging Face's ``GPT2Model`` costs every process that builds it ~4.5 s of CPU at import (transformers
pulls in torch.distributed.tensor, torch._dynamo, sympy and scipy), more than a short cell's training and
paid by every trial process. ``GPT2Backbone`` is the same network on the same parameters, so the two are
interchangeable through ``state_dict``: learned position embeddings, pre-norm blocks (LayerNorm,
causal multi-head softmax attention, residual; LayerNorm, 4x MLP with the tanh GELU, residual), a final
LayerNorm. Parameter names, shapes and order are those of ``GPT2Model(vocab_size=1)`` (weights stored
(in, out), a one-row token embedding no input reads), so checkpoints and weights of either load into the
other and an Adam state written by one resumes in the other; the initialisation follows GPT-2's scheme
(N(0, 0.02), residual output projections N(0, 0.02 / sqrt(2 layers)), norms 1 and 0).

Each attention module keeps its softmax scale in the float ``scaling`` (d_head^-1/2), the attribute
papers.temperature.patch divides by tau, and reports its pre-softmax scores to a recorder attached
under ``SCORE_RECORDER`` (papers.temperature.patch.recording_score_moments). tests/test_gpt2.py checks
outputs, gradients, temperature and recorded moments against transformers' GPT2Model.
"""

from __future__ import annotations

import math

import torch
from torch import nn

SCORE_RECORDER = "_score_moment_recorder"  # attribute of an attention module: a ScoreMomentRecorder


class GPT2Linear(nn.Module):
    """x W + b with W stored (in, out), as GPT-2 checkpoints store it."""

    def __init__(self, fan_in: int, fan_out: int):
        super().__init__()
        self.weight = nn.Parameter(torch.empty(fan_in, fan_out))
        self.bias = nn.Parameter(torch.zeros(fan_out))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = torch.addmm(self.bias, x.reshape(-1, x.shape[-1]), self.weight)
        return out.view(*x.shape[:-1], out.shape[-1])


def explicit_attention(q: torch.Tensor, key: torch.Tensor, v: torch.Tensor, scale: float) -> torch.Tensor:
    """Causal softmax attention as eager mixed precision computes it: scores in q's dtype, softmax in float32.

    The scale is applied to q (B*H*T*d_head numbers, not B*H*T*T). For bf16 on the CPU: PyTorch's CPU
    flash-attention backward in bf16 is ~3x slower than its float32 one (Fig. 1 GPT-2 size, ~60 ms a
    layer, a third of the step), while these batched matmuls run on the CPU's bf16 units (fwd + bwd
    ~25 ms a layer against ~85 ms for SDPA).
    """
    T = q.shape[-2]
    scores = torch.matmul(q * scale, key.transpose(-1, -2))
    future = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    weights = torch.softmax(scores.masked_fill(future, float("-inf")), dim=-1, dtype=torch.float32)
    return torch.matmul(weights.to(v.dtype), v)


def attend(
    q: torch.Tensor, key: torch.Tensor, v: torch.Tensor, scale: float, allowed: torch.Tensor | None = None
) -> torch.Tensor:
    """Softmax attention of (..., H, T, d_head) heads through SDPA: causal, or over the (T, T) boolean mask
    ``allowed`` of (query, key) pairs. Causal bf16 on a CPU runs explicit_attention (its speed); a masked
    pass always runs SDPA, as transformers' GPT2Model ran it, so a stacked-layout cell keeps its numbers."""
    if allowed is not None:
        return nn.functional.scaled_dot_product_attention(q, key, v, attn_mask=allowed, scale=scale)
    if q.dtype == torch.bfloat16 and q.device.type == "cpu":
        return explicit_attention(q, key, v, scale)
    return nn.functional.scaled_dot_product_attention(q, key, v, is_causal=True, scale=scale)


class CausalSelfAttention(nn.Module):
    """Multi-head causal softmax attention through SDPA (explicit_attention for bf16 on a CPU), scale
    ``scaling``."""

    def __init__(self, width: int, heads: int, layer_idx: int):
        super().__init__()
        if width % heads:
            raise ValueError(f"n_embd {width} is not divisible by n_head {heads}")
        self.c_attn = GPT2Linear(width, 3 * width)
        self.c_proj = GPT2Linear(width, width)
        self.heads, self.head_dim, self.layer_idx = heads, width // heads, layer_idx
        self.scaling = float(self.head_dim) ** -0.5

    def mix(self, x: torch.Tensor, allowed: torch.Tensor | None = None) -> torch.Tensor:
        """The heads' attention outputs before the output projection: (B, T, k) -> (B, T, k); causal, or
        over the (T, T) boolean mask ``allowed``."""
        B, T, k = x.shape
        q, key, v = (
            t.view(B, T, self.heads, self.head_dim).transpose(1, 2) for t in self.c_attn(x).split(k, dim=2)
        )
        recorder = getattr(self, SCORE_RECORDER, None)
        if recorder is not None:
            scores = torch.matmul(q.float(), key.float().transpose(-1, -2)) * self.scaling  # (B, H, T, T)
            seen = torch.ones(T, T, dtype=torch.bool, device=x.device).tril() if allowed is None else allowed
            mask = torch.zeros(T, T, device=x.device).masked_fill(~seen, float("-inf"))
            recorder.add(self.layer_idx, scores, mask[None, None])
        return attend(q, key, v, self.scaling, allowed).transpose(1, 2).reshape(B, T, k)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(self.mix(x))


class MLP(nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.c_fc = GPT2Linear(width, 4 * width)
        self.c_proj = GPT2Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.c_proj(nn.functional.gelu(self.c_fc(x), approximate="tanh"))


class Block(nn.Module):
    def __init__(self, width: int, heads: int, layer_idx: int, eps: float):
        super().__init__()
        self.ln_1 = nn.LayerNorm(width, eps=eps)
        self.attn = CausalSelfAttention(width, heads, layer_idx)
        self.ln_2 = nn.LayerNorm(width, eps=eps)
        self.mlp = MLP(width)

    def forward(
        self, x: torch.Tensor, keep: slice | None = None, allowed: torch.Tensor | None = None
    ) -> torch.Tensor:
        """The block on tokens x (B, T, k), causal or under the (T, T) boolean mask ``allowed``; ``keep`` (a
        slice of the tokens) drops the others after attention."""
        mixed = self.attn.mix(self.ln_1(x), allowed)
        if keep is not None:
            mixed, x = mixed[:, keep].contiguous(), x[:, keep]
        x = x + self.attn.c_proj(mixed)
        return x + self.mlp(self.ln_2(x))


class GPT2Backbone(nn.Module):
    """GPT-2's transformer on input embeddings: (B, T, k) -> final-norm hidden states.

    ``draws="gpt2model"`` initialises with transformers' GPT2Model's random draws, call for call (its
    constructor's, then its ``post_init``'s), so a model built on this backbone under a seed starts with
    the parameters GPT2Model started with under it: the stacked layout moved here from GPT2Model with
    its numbers unchanged. ``draws="own"`` (the interleaved layout's, since it moved) draws each parameter
    once."""

    def __init__(
        self,
        width: int,
        layers: int,
        heads: int,
        positions: int,
        eps: float = 1e-5,
        init_std: float = 0.02,
        draws: str = "own",
    ):
        super().__init__()
        self.wte = nn.Embedding(
            1, width
        )  # GPT2Model(vocab_size=1)'s: no input reads it; kept for its state_dict
        self.wpe = nn.Embedding(positions, width)
        self.h = nn.ModuleList(Block(width, heads, i, eps) for i in range(layers))
        self.ln_f = nn.LayerNorm(width, eps=eps)
        if draws == "gpt2model":
            self.reset_as_gpt2model(init_std)
        elif draws == "own":
            self.reset_parameters(init_std)
        else:
            raise ValueError(f"unknown draws {draws!r}; known: own, gpt2model")

    @torch.no_grad()
    def reset_parameters(self, std: float) -> None:
        """GPT-2's initialisation; the residual branches' output projections scaled by 1/sqrt(2 layers)."""
        residual_std = std / math.sqrt(2 * len(self.h))
        for name, module in self.named_modules():
            if isinstance(module, (GPT2Linear, nn.Embedding)):
                module.weight.normal_(0.0, residual_std if name.endswith("c_proj") else std)
                if isinstance(module, GPT2Linear):
                    module.bias.zero_()
            elif isinstance(module, nn.LayerNorm):
                module.weight.fill_(1.0)
                module.bias.zero_()

    @torch.no_grad()
    def reset_as_gpt2model(self, std: float) -> None:
        """The same scheme in GPT2Model's draws (transformers 4.x-5.x, tests/test_gpt2.py checks it): its
        Conv1D layers draw N(0, std) as they are built (the embeddings' N(0, 1) were drawn in __init__ here
        too), then ``post_init`` visits the modules children first: the embeddings and each block's
        projections N(0, std) again, and each attention and MLP module draws its c_proj once more with the
        residual std."""
        residual_std = std / math.sqrt(2 * len(self.h))
        for block in self.h:
            for linear in (block.attn.c_attn, block.attn.c_proj, block.mlp.c_fc, block.mlp.c_proj):
                linear.weight.normal_(0.0, std)
        self.wte.weight.normal_(0.0, std)
        self.wpe.weight.normal_(0.0, std)
        for block in self.h:
            for first, projection in (
                (block.attn.c_attn, block.attn.c_proj),
                (block.mlp.c_fc, block.mlp.c_proj),
            ):
                first.weight.normal_(0.0, std)
                projection.weight.normal_(0.0, std)
                projection.weight.normal_(0.0, residual_std)

    def forward(
        self,
        embeds: torch.Tensor,
        keep_last: slice | None = None,
        allowed: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """Hidden states after the final norm. Attention is causal, or over the (T, T) boolean mask
        ``allowed``; token t sits at position t, or at ``positions[t]`` ((T,) indices); ``keep_last`` keeps
        only those tokens from the last block's attention on (work no caller reads at the other tokens is
        skipped)."""
        T = embeds.shape[1]
        if T > self.wpe.num_embeddings and positions is None:
            raise ValueError(f"{T} tokens exceed the model's {self.wpe.num_embeddings} positions")
        hidden = embeds + (self.wpe.weight[:T] if positions is None else self.wpe.weight[positions])
        last = len(self.h) - 1
        for i, block in enumerate(self.h):
            hidden = block(hidden, keep_last if i == last else None, allowed)
        return self.ln_f(hidden)

    @property
    def recording(self) -> bool:
        """Whether a score recorder is attached (papers.temperature.patch.recording_score_moments)."""
        return any(getattr(block.attn, SCORE_RECORDER, None) is not None for block in self.h)
