"""Attention temperature for GPT-2 (papers.context_scaling.gpt2 or Hugging Face) and LLaMA models, and
the moment heuristic for
choosing it.

Seed 004 (Demir & Dogan), eq. (1): Attention(Z) = V Z softmax((K Z)^T (Q Z) / tau). The LLM and GPT-2
experiments (Sec. 5.2, App. K.1-K.3, Figs. 3 and 6) set every layer's temperature to tau * sqrt(d_k), so
tau = 1 is the model as trained. Since transformers 5.4 the attention modules of GPT-2 and LLaMA keep
their softmax scale (d_k^-1/2) in the float attribute `scaling` and every backend (eager, SDPA, flash,
flex) receives it, so dividing `scaling` by tau gives softmax(q k^T / (tau sqrt(d_k))) for all of them.

App. J: the optimal temperature of Thm 4.7 is read as a ratio of moments of the pre-softmax scores
s_ij = q_i . k_j / sqrt(d_k): the second moment over off-diagonal entries (i != j) divided by the first
moment over diagonal entries (i = j); undefined (NaN) when that first moment is not positive, as Thm.
4.7's ratio is (its minimiser needs a positive denominator), and the per-layer moments say where it went
negative. In a causal model only the entries a query may attend to exist, so the off-diagonal entries are
j < i inside the causal window (padding excluded). The scores are
read through a registered attention function (SDPA returns no attention weights), with the eager
additive mask registered under the same name so the causal and padding mask stay in force.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch
import transformers
from torch import nn
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask

from papers.context_scaling.gpt2 import SCORE_RECORDER

MIN_TRANSFORMERS = (5, 4)
RECORDING_ATTENTION = "score_moments_recording"
_RECORDER_ATTR = SCORE_RECORDER  # papers.context_scaling.gpt2's attention reports to it itself


def _check_transformers_version() -> None:
    major, minor = (int(part) for part in transformers.__version__.split(".")[:2])
    if (major, minor) < MIN_TRANSFORMERS:
        raise RuntimeError(
            f"attention temperature needs transformers >= {'.'.join(map(str, MIN_TRANSFORMERS))} "
            f"(older GPT-2 ignores the `scaling` attribute); found {transformers.__version__}"
        )


def attention_modules(model: nn.Module) -> list[nn.Module]:
    """The modules of `model` that carry a float softmax scale `scaling` (one per attention layer)."""
    modules = [m for m in model.modules() if isinstance(getattr(m, "scaling", None), float)]
    if not modules:
        raise ValueError(
            f"{type(model).__name__} has no attention module with a float `scaling` attribute; "
            "attention temperature supports Hugging Face GPT-2 and LLaMA models (transformers >= 5.4)"
        )
    return modules


def _checked_tau(tau: float) -> float:
    tau = float(tau)
    if not math.isfinite(tau) or tau <= 0:
        raise ValueError(f"attention temperature tau must be a finite number > 0, got {tau}")
    return tau


@contextmanager
def attention_temperature(model: nn.Module, tau: float) -> Iterator[nn.Module]:
    """Inside the block every attention layer of `model` uses softmax(q k^T / (tau sqrt(d_k))).

    tau = 1 leaves the model bit-for-bit unchanged; the original scales are restored on exit, also
    when the block raises.
    """
    _check_transformers_version()
    tau = _checked_tau(tau)
    modules = attention_modules(model)
    originals = [m.scaling for m in modules]
    try:
        for module, scale in zip(modules, originals):
            module.scaling = scale / tau
        yield model
    finally:
        for module, scale in zip(modules, originals):
            module.scaling = scale


@dataclass(frozen=True)
class ScoreMoments:
    """Moments of the pre-softmax scores s_ij = q_i . k_j * scaling (App. J), pooled and per layer."""

    offdiag_second_moment: float  # mean of s_ij^2 over attended entries j != i
    diag_first_moment: float  # mean of s_ii
    n_offdiag: int
    n_diag: int
    per_layer: tuple[tuple[float, float], ...]  # (offdiag second moment, diag first moment) per layer

    @property
    def heuristic_tau(self) -> float:
        """App. J: second moment of off-diagonal scores over first moment of diagonal ones; NaN (undefined)
        when the diagonal moment is not positive: Thm. 4.7's ratio, which it stands for, needs a positive
        denominator (the tau that minimises a / tau^2 - b / tau exists only for b > 0)."""
        if not self.diag_first_moment > 0:
            return math.nan
        return self.offdiag_second_moment / self.diag_first_moment

    def layers_text(self) -> str:
        """The per-layer moments in words: 'layer 0: off-diagonal E[s^2] 1.2, diagonal E[s] -0.45; ...'."""
        return "; ".join(
            f"layer {k}: off-diagonal E[s^2] {off:.3g}, diagonal E[s] {diag:.3g}"
            for k, (off, diag) in enumerate(self.per_layer)
        )

    def columns(self) -> dict[str, float | str]:
        """What a scan logs beside its curves: the heuristic tau (NaN when undefined), the pooled moments
        and the per-layer ones in words."""
        return {
            "tau_heuristic": self.heuristic_tau,
            "score_offdiag_m2": self.offdiag_second_moment,
            "score_diag_m1": self.diag_first_moment,
            "score_layers": self.layers_text(),
        }

    def summary(self) -> dict[str, float]:
        """The scalars a scan logs as metrics: the moments, and the heuristic tau where it is defined."""
        out = {"score_offdiag_m2": self.offdiag_second_moment, "score_diag_m1": self.diag_first_moment}
        return out | ({"tau_heuristic": self.heuristic_tau} if self.diag_first_moment > 0 else {})


@dataclass
class _LayerSums:
    sq_offdiag: float = 0.0
    n_offdiag: int = 0
    diag: float = 0.0
    n_diag: int = 0


@dataclass
class ScoreMomentRecorder:
    """Accumulates score moments over every forward pass run inside `recording_score_moments`."""

    layers: dict[int, _LayerSums] = field(default_factory=dict)

    def add(self, layer: int, scores: torch.Tensor, attention_mask: torch.Tensor) -> None:
        """scores (B, H, Q, K); attention_mask (B or 1, 1, Q, K) additive, 0 where attention is allowed."""
        q_len, k_len = scores.shape[-2:]
        allowed = (attention_mask == 0).expand(scores.shape[0], 1, q_len, k_len)  # (B, 1, Q, K)
        diag = torch.zeros(q_len, k_len, dtype=torch.bool, device=scores.device)
        rows = torch.arange(q_len, device=scores.device)
        diag[rows, rows + k_len - q_len] = True  # query i is key i + offset
        diag_allowed = allowed & diag  # (B, 1, Q, K)
        real_query = diag_allowed.any(dim=-1, keepdim=True)  # (B, 1, Q, 1): padded queries drop out
        offdiag_allowed = allowed & ~diag & real_query  # (B, 1, Q, K)
        heads = scores.shape[1]
        sums = self.layers.setdefault(layer, _LayerSums())
        zero = scores.new_zeros(())
        sums.sq_offdiag += float(torch.where(offdiag_allowed, scores.square(), zero).sum(dtype=torch.float64))
        sums.n_offdiag += int(offdiag_allowed.sum()) * heads
        sums.diag += float(torch.where(diag_allowed, scores, zero).sum(dtype=torch.float64))
        sums.n_diag += int(diag_allowed.sum()) * heads

    def moments(self) -> ScoreMoments:
        if not self.layers:
            raise RuntimeError("no attention scores were recorded: run a forward pass inside the block")
        layers = [self.layers[k] for k in sorted(self.layers)]
        n_off = sum(l.n_offdiag for l in layers)
        n_diag = sum(l.n_diag for l in layers)
        if n_off == 0 or n_diag == 0:
            raise RuntimeError("no off-diagonal attended entries: prompts need at least two tokens")
        return ScoreMoments(
            offdiag_second_moment=sum(l.sq_offdiag for l in layers) / n_off,
            diag_first_moment=sum(l.diag for l in layers) / n_diag,
            n_offdiag=n_off,
            n_diag=n_diag,
            per_layer=tuple((l.sq_offdiag / l.n_offdiag, l.diag / l.n_diag) for l in layers),
        )


def _recording_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """Record pre-softmax scores, then attend exactly as SDPA does. query (B, H, Q, dh), key (B, Hkv, K,
    dh)."""
    if attention_mask is None:
        raise RuntimeError("score recording received no attention mask; the causal mask would be lost")
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    key_per_head = key.repeat_interleave(query.shape[1] // key.shape[1], dim=1)  # (B, H, K, dh)
    scores = torch.matmul(query.float(), key_per_head.float().transpose(-1, -2)) * scale  # (B, H, Q, K)
    getattr(module, _RECORDER_ATTR).add(module.layer_idx, scores, attention_mask)
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, scaling=scaling, dropout=dropout, **kwargs
    )


def _register_recording_attention() -> None:
    AttentionInterface.register(RECORDING_ATTENTION, _recording_attention)
    AttentionMaskInterface.register(RECORDING_ATTENTION, eager_mask)


def _pretrained_models(model: nn.Module) -> list[PreTrainedModel]:
    """The outermost Hugging Face models inside `model` (itself, or e.g. a wrapper's backbone)."""
    if isinstance(model, PreTrainedModel):
        return [model]
    found = [m for m in model.children() if isinstance(m, PreTrainedModel)]
    for child in model.children():
        if not isinstance(child, PreTrainedModel):
            found.extend(_pretrained_models(child))
    return found


@contextmanager
def recording_score_moments(model: nn.Module) -> Iterator[ScoreMomentRecorder]:
    """Inside the block, forward passes of `model` record the App. J score moments.

    Scores use each layer's current `scaling`, so measure outside `attention_temperature` (tau = 1).
    Attention itself runs through SDPA with the eager additive mask; outputs match the model's own.
    """
    _check_transformers_version()
    _register_recording_attention()
    recorder = ScoreMomentRecorder()
    modules = attention_modules(model)
    hf_models = _pretrained_models(model)
    original_impls = [m.config._attn_implementation for m in hf_models]
    try:
        for hf_model in hf_models:
            hf_model.set_attn_implementation(RECORDING_ATTENTION)
        for module in modules:
            setattr(module, _RECORDER_ATTR, recorder)
        yield recorder
    finally:
        for module in modules:
            if hasattr(module, _RECORDER_ATTR):
                delattr(module, _RECORDER_ATTR)
        for hf_model, impl in zip(hf_models, original_impls):
            hf_model.set_attn_implementation(impl)


def score_moments(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> ScoreMoments:
    """App. J moments over `batches`, each a dict of forward keyword arguments (e.g. input_ids,
    attention_mask)."""
    with recording_score_moments(model) as recorder, torch.no_grad():
        for batch in batches:
            model(**batch)
    return recorder.moments()


def heuristic_tau(model: nn.Module, batches: Iterable[Mapping[str, torch.Tensor]]) -> float:
    """The App. J temperature: off-diagonal second moment / diagonal first moment of the scores."""
    return score_moments(model, batches).heuristic_tau
