"""The LLM scan's fast path: a cell's prompts tokenised once, answered once per tau, their shared
beginnings computed once, decoding stopped at the answer.

Fig. 3 answers the same prompts at every tau: the Monte Carlo runs' noisy labels are drawn from
(seed, run) alone, so a cell's prompts do not depend on tau. ``PromptSet`` builds them once per cell
(retrieval once, noise once per run), keeps each distinct prompt once (at noisy ratio 0 every run's
prompts are the same) and tokenises it once.

``generate_token_answers`` answers them greedily. A question's runs carry the same demonstrations and
differ only from the first relabelled one on (and neighbouring questions often retrieve the same first
demonstrations), so the prompts form a prefix tree (``prefix_tree``): each shared beginning is one
segment whose keys and values are computed once and continued by every prompt below it. Segments run
level by level in forward passes grouped by length (``call_groups``: padding against a pass's fixed
cost); rows of a pass carry their past (the ancestors' keys and values) left-padded and their segment
right-aligned, with explicit positions, so every token sees exactly its own prompt before it. A greedy
loop then decodes the prompts in batches from their assembled caches and drops each row once its
answer is complete: the answer is the first non-empty line of the generation (cut before any new
"Support" block, ``llm_icl.answer_from_generation``), so once the generation holds a line break after
some text, or "Support" on its first line, or the end token, more tokens cannot change it. The answers
are those of greedy decoding of each prompt alone (``generate`` one prompt at a time), up to float
rounding of the batched and split matrix products.

The model stays loaded across taus and runs; ``attention_temperature`` patches it in place per tau.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import DynamicCache, PreTrainedModel, PreTrainedTokenizerBase

from papers.temperature.llm_icl import (
    MAX_NEW_TOKENS,
    Retriever,
    SciQItem,
    answer_from_generation,
    exact_match,
    icl_prompts,
    make_retriever,
    query_text,
)
from papers.temperature.patch import attention_temperature

MIN_SHARED = 16  # a shared prompt beginning shorter than this is recomputed per prompt (prefix_tree)
# a forward pass's fixed cost in prompt positions (call_groups): SmolLM2 on this 2-core CPU takes ~70 ms
# a pass plus ~1.8 ms a position
CALL_OVERHEAD = 40
# prompt tokens whose prefix tree (and its keys/values) is held at once: ~0.75 GB of keys and values for
# SmolLM2 in float32, ~8.6 GB for LLaMA-2-7B in bf16 (less where prompts share beginnings)
CHUNK_TOKENS = 16384


def answer_complete(text: str) -> bool:
    """Whether more generated text can no longer change ``answer_from_generation(text)``."""
    stripped = text.lstrip()
    return "\n" in stripped or "Support" in stripped


@dataclass(frozen=True)
class Segment:
    """A node of a prompt prefix tree: tokens [start, stop) of prompt ``source``, computed once for
    every prompt below it. ``parent`` is the node holding tokens [.., start) (-1: none, start = 0);
    ``ends`` are the prompts whose last token is this node's last token."""

    parent: int
    start: int
    stop: int
    source: int
    ends: tuple[int, ...]


def _common_prefix(a: Sequence[int], b: Sequence[int], start: int) -> int:
    stop = min(len(a), len(b))
    while start < stop and a[start] == b[start]:
        start += 1
    return start


def prefix_tree(token_ids: Sequence[Sequence[int]], min_shared: int = 16) -> list[Segment]:
    """The prompts as a tree of token segments, parents before children (depth-first).

    Prompts that begin with the same tokens share them: the shared tokens form one segment, computed
    once, and each prompt continues from it. A shared stretch shorter than ``min_shared`` tokens is not
    split off (its prompts compute it each; a separate segment would cost more than it saves). Identical
    prompts end at the same segment. Every prompt needs at least one token.
    """
    if any(len(ids) == 0 for ids in token_ids):
        raise ValueError("prefix_tree: every prompt needs at least one token; got an empty prompt")
    order = sorted(range(len(token_ids)), key=lambda i: list(token_ids[i]))  # prefixes sort first
    segments: list[Segment] = []
    # (prompt indices, contiguous in lexicographic order; tokens all of them share; the pending
    # segment's start; its parent)
    stack = [(order, 0, 0, -1)] if order else []
    while stack:
        indices, shared, start, parent = stack.pop()
        first, last = token_ids[indices[0]], token_ids[indices[-1]]
        shared = _common_prefix(first, last, shared)  # sorted: the first and last bound every one
        if len(token_ids[indices[-1]]) == shared:  # all identical
            segments.append(Segment(parent, start, shared, indices[0], tuple(indices)))
            continue
        ends = tuple(i for i in indices if len(token_ids[i]) == shared)
        rest = indices[len(ends) :]
        if ends or (shared - start >= min_shared):
            segments.append(Segment(parent, start, shared, indices[0], ends))
            parent, start = len(segments) - 1, shared
        groups, begin = [], 0
        for position in range(1, len(rest) + 1):
            if position == len(rest) or token_ids[rest[position]][shared] != token_ids[rest[begin]][shared]:
                groups.append(rest[begin:position])
                begin = position
        stack.extend((group, shared + 1, start, parent) for group in reversed(groups))
    return segments


def call_groups(lengths: Sequence[int], max_rows: int, call_overhead: float) -> list[list[int]]:
    """Rows (by index) grouped into forward calls: sorted by length, cut where the padding a longer
    group would compute outweighs a call's fixed cost.

    A call on rows of lengths l_1 <= ... <= l_B costs ``call_overhead + B * l_B`` token positions; the
    partition of the sorted rows into consecutive groups of at most ``max_rows`` that minimises the
    sum is found by dynamic programming."""
    order = sorted(range(len(lengths)), key=lambda i: (lengths[i], i))
    best = [0.0] + [math.inf] * len(order)  # best[j]: cost of the first j sorted rows
    cut = [0] * (len(order) + 1)
    for j in range(1, len(order) + 1):
        for i in range(max(0, j - max_rows), j):
            cost = best[i] + call_overhead + (j - i) * lengths[order[j - 1]]
            if cost < best[j]:
                best[j], cut[j] = cost, i
    groups, j = [], len(order)
    while j > 0:
        groups.append(order[cut[j] : j])
        j = cut[j]
    return groups[::-1]


def _forward(model: PreTrainedModel, cache: DynamicCache, **inputs):
    """model(**inputs) with a key/value cache, whose argument is ``cache`` in newer transformers and
    ``past_key_values`` before; returns the logits of the last position (B, V) and the updated cache."""
    name = "cache" if "cache" in inspect.signature(model.forward).parameters else "past_key_values"
    output = model(**inputs, **{name: cache}, use_cache=True, logits_to_keep=1)
    return output.logits[:, -1], output[name]


def _kv_cache(model: PreTrainedModel, layers: list[tuple[torch.Tensor, torch.Tensor]] | None) -> DynamicCache:
    return (
        DynamicCache(ddp_cache_data=layers, config=model.config)
        if layers
        else DynamicCache(config=model.config)
    )


class _PrefixKV:
    """Key/value tensors of a prefix tree's segments, and their assembly into left-padded batch caches."""

    def __init__(self, segments: Sequence[Segment]):
        self.segments = segments
        self.kv: dict[int, list[tuple[torch.Tensor, torch.Tensor]]] = {}  # per layer (H, s, D)

    def path(self, node: int) -> list[int]:
        nodes = []
        while node >= 0:
            nodes.append(node)
            node = self.segments[node].parent
        return nodes[::-1]

    def batch(self, nodes: Sequence[int], width: int, device) -> tuple[list, torch.Tensor]:
        """Per layer (keys, values) (B, H, width, D) holding each node's whole prefix (its segment and
        its ancestors') right-aligned, zeros on the left, and the matching mask (B, width)."""
        mask = torch.zeros((len(nodes), width), dtype=torch.long, device=device)
        layers = None
        for row, node in enumerate(nodes):
            if node < 0:  # no prefix: an all-padding row
                continue
            offset = width - self.segments[node].stop
            mask[row, offset:] = 1
            for part in self.path(node):
                seg = self.segments[part]
                kv = self.kv[part]
                if layers is None:
                    layers = [
                        tuple(t.new_zeros((len(nodes), t.shape[0], width, t.shape[2])) for t in pair)
                        for pair in kv
                    ]
                for (keys, values), (k, v) in zip(layers, kv):
                    keys[row, :, offset + seg.start : offset + seg.stop] = k
                    values[row, :, offset + seg.start : offset + seg.stop] = v
        return layers, mask


def _prefill(model, store: _PrefixKV, token_ids, nodes: Sequence[int], pad_id: int) -> torch.Tensor:
    """Computes the segments ``nodes`` (their ancestors already computed) in one forward pass, stores
    their keys/values; returns the greedy next token after each segment (B,)."""
    segments, device = store.segments, model.device
    past = max(segments[n].start for n in nodes)
    width = max(segments[n].stop - segments[n].start for n in nodes)
    ids = torch.full((len(nodes), width), pad_id, dtype=torch.long)
    positions = torch.zeros((len(nodes), width), dtype=torch.long)
    new_mask = torch.zeros((len(nodes), width), dtype=torch.long)
    for row, node in enumerate(nodes):
        seg = segments[node]
        length = seg.stop - seg.start
        ids[row, width - length :] = torch.as_tensor(token_ids[seg.source][seg.start : seg.stop])
        positions[row, width - length :] = torch.arange(seg.start, seg.stop)
        new_mask[row, width - length :] = 1
    if past:
        # a root segment (start 0) in a batch with a past gets an all-padding past
        layers, past_mask = store.batch([segments[n].parent for n in nodes], past, device)
    else:
        layers, past_mask = None, torch.zeros((len(nodes), 0), dtype=torch.long, device=device)
    logits, cache = _forward(
        model,
        _kv_cache(model, layers),
        input_ids=ids.to(device),
        attention_mask=torch.cat([past_mask, new_mask.to(device)], dim=1),
        position_ids=positions.to(device),
    )
    total = past + width
    for row, node in enumerate(nodes):
        length = segments[node].stop - segments[node].start
        store.kv[node] = [
            (layer.keys[row, :, total - length :].clone(), layer.values[row, :, total - length :].clone())
            for layer in cache.layers
        ]
    return logits.argmax(dim=-1).cpu()


def _decode(
    model,
    tokenizer,
    store: _PrefixKV,
    nodes: Sequence[int],
    first: Sequence[int],
    max_new_tokens: int,
    stop_at_answer: bool,
) -> tuple[list[str], int]:
    """Greedy decoding of the prompts ending at ``nodes`` from their first generated tokens ``first``,
    one batch; a row leaves the batch at the end token, at max_new_tokens, or (stop_at_answer) once its
    answer is complete. Returns the generated texts and the number of tokens the longest row took."""
    device, eos = model.device, tokenizer.eos_token_id
    generated = [[int(t)] for t in first]

    def finished(row: int) -> bool:
        tokens = generated[row]
        if tokens[-1] == eos or len(tokens) >= max_new_tokens:
            return True
        return stop_at_answer and answer_complete(tokenizer.decode(tokens, skip_special_tokens=True))

    active = [row for row in range(len(nodes)) if not finished(row)]
    if active:
        width = max(store.segments[nodes[row]].stop for row in active)
        layers, mask = store.batch([nodes[row] for row in active], width, device)
        cache = _kv_cache(model, layers)
        positions = torch.tensor([store.segments[nodes[row]].stop for row in active], device=device)
        while active:
            tokens = torch.tensor([generated[row][-1] for row in active], device=device)
            mask = torch.cat([mask, mask.new_ones((len(active), 1))], dim=1)
            logits, cache = _forward(
                model, cache, input_ids=tokens[:, None], attention_mask=mask, position_ids=positions[:, None]
            )
            positions = positions + 1
            for row, token in zip(active, logits.argmax(dim=-1).tolist()):
                generated[row].append(token)
            keep = [i for i, row in enumerate(active) if not finished(row)]
            if len(keep) < len(active):
                index = torch.tensor(keep, dtype=torch.long, device=device)
                for layer in cache.layers:
                    layer.keys, layer.values = layer.keys[index], layer.values[index]
                mask, positions = mask[index], positions[index]
                active = [active[i] for i in keep]
    texts = tokenizer.batch_decode(generated, skip_special_tokens=True)
    return texts, max(len(tokens) for tokens in generated)


def _chunks(token_ids: Sequence[Sequence[int]], chunk_tokens: int) -> list[list[int]]:
    """The prompts' indices in lexicographic token order (prompts that share a beginning come together),
    cut into chunks of at most ``chunk_tokens`` prompt tokens (at least one prompt each)."""
    chunks: list[list[int]] = []
    size = chunk_tokens
    for index in sorted(range(len(token_ids)), key=lambda i: list(token_ids[i])):
        if size + len(token_ids[index]) > chunk_tokens:
            chunks.append([])
            size = 0
        chunks[-1].append(index)
        size += len(token_ids[index])
    return chunks


def _first_tokens(
    model, store: _PrefixKV, token_ids, batch_size: int, call_overhead: float, pad_id: int, stats: dict
) -> dict[int, int]:
    """The greedy token after each segment of ``store``'s prefix tree, by node: the segments computed
    level by level (parents first), each level in forward passes of at most ``batch_size`` rows grouped
    by length (``call_groups``). Adds to ``stats`` its ``prefill_calls`` and ``prompt_tokens``."""
    segments = store.segments
    depth: list[int] = []
    for seg in segments:  # parents come first
        depth.append(depth[seg.parent] + 1 if seg.parent >= 0 else 0)
    first: dict[int, int] = {}
    for level in range(max(depth) + 1):
        nodes = [n for n, d in enumerate(depth) if d == level]
        lengths = [segments[n].stop - segments[n].start for n in nodes]
        for group in call_groups(lengths, batch_size, call_overhead):
            rows = [nodes[i] for i in group]
            tokens = _prefill(model, store, token_ids, rows, pad_id)
            first.update(zip(rows, tokens.tolist()))
            stats["prefill_calls"] += 1
            stats["prompt_tokens"] += len(rows) * max(lengths[i] for i in group)
    return first


def _generated_texts(
    model,
    tokenizer,
    store: _PrefixKV,
    first: dict[int, int],
    batch_size: int,
    max_new_tokens: int,
    stop_at_answer: bool,
    stats: dict,
) -> dict[int, str]:
    """The text generated for each prompt of the prefix tree (by its index there): the segments where
    prompts end, shortest first, decoded in batches of ``batch_size`` from their first tokens ``first``.
    Adds to ``stats`` its decoding ``batches`` and their ``steps``."""
    segments = store.segments
    ends = sorted((n for n, seg in enumerate(segments) if seg.ends), key=lambda n: segments[n].stop)
    texts: dict[int, str] = {}
    for start in range(0, len(ends), batch_size):
        batch = ends[start : start + batch_size]
        generated, steps = _decode(
            model, tokenizer, store, batch, [first[n] for n in batch], max_new_tokens, stop_at_answer
        )
        stats["batches"] += 1
        stats["steps"] += steps
        for node, text in zip(batch, generated):
            texts.update(dict.fromkeys(segments[node].ends, text))
    return texts


def generate_token_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    token_ids: Sequence[Sequence[int]],
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = 16,
    stop_at_answer: bool = True,
    stats: dict | None = None,
    min_shared: int = MIN_SHARED,
    call_overhead: float = CALL_OVERHEAD,
    chunk_tokens: int = CHUNK_TOKENS,
) -> list[str]:
    """Greedy answers to pre-tokenised prompts (at most max_new_tokens each), in the prompts' order.

    The prompts are taken in lexicographic token order (prompts that share a beginning come together),
    in chunks of at most ``chunk_tokens`` prompt tokens (at least one prompt each); each chunk's shared
    prefixes are computed once (``prefix_tree``), its segments in forward passes of at most
    ``batch_size`` rows grouped by length (``call_groups``), then its prompts decoded in batches of
    ``batch_size``, each row until its answer is complete (or the end token, or max_new_tokens).
    ``stats``, when given, accumulates ``batches`` and ``steps`` (decoding batches and the tokens
    generated by each one's longest row), ``prompt_tokens`` (prompt positions
    computed, padding included) and ``prefill_calls``."""
    if tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer needs a pad token for batched generation (e.g. tokenizer.pad_token = eos)"
        )
    if min(max_new_tokens, batch_size, chunk_tokens) < 1:
        raise ValueError(
            "max_new_tokens, batch_size and chunk_tokens must be >= 1, got"
            f" {max_new_tokens}, {batch_size}, {chunk_tokens}"
        )
    stats = {} if stats is None else stats
    for key in ("batches", "steps", "prompt_tokens", "prefill_calls"):
        stats.setdefault(key, 0)
    answers: list[str | None] = [None] * len(token_ids)
    with torch.inference_mode():
        for prompts in _chunks(token_ids, chunk_tokens):
            ids = [token_ids[i] for i in prompts]
            store = _PrefixKV(prefix_tree(ids, min_shared))
            first = _first_tokens(model, store, ids, batch_size, call_overhead, tokenizer.pad_token_id, stats)
            texts = _generated_texts(
                model, tokenizer, store, first, batch_size, max_new_tokens, stop_at_answer, stats
            )
            for i, text in texts.items():
                answers[prompts[i]] = answer_from_generation(text)
    return answers  # type: ignore[return-value]


@dataclass(frozen=True)
class MonteCarloResult:
    mean: float
    std: float  # sample standard deviation over runs (0 for a single run)
    scores: tuple[float, ...]
    # correct[r][q]: whether run r answered test question q exactly (what a bootstrap over questions needs)
    correct: tuple[tuple[bool, ...], ...] = ()


@dataclass
class PromptSet:
    """A cell's prompts for every Monte Carlo run, each distinct prompt tokenised once.

    ``runs[r]`` holds, for each test question in order, the index of run r's prompt in ``prompts``.
    """

    test: Sequence[SciQItem]
    prompts: list[str]
    token_ids: list[list[int]]
    runs: list[list[int]]

    @classmethod
    def build(
        cls,
        tokenizer: PreTrainedTokenizerBase,
        train: Sequence[SciQItem],
        test: Sequence[SciQItem],
        demo_indices: np.ndarray,
        noisy_ratio: float,
        n_runs: int,
        seed: int,
    ) -> PromptSet:
        """Run r's prompts draw their noise from numpy Generator (seed, r), as monte_carlo_exact_match."""
        index: dict[str, int] = {}
        runs = []
        for run in range(n_runs):
            texts = icl_prompts(train, test, demo_indices, noisy_ratio, np.random.default_rng([seed, run]))
            runs.append([index.setdefault(text, len(index)) for text in texts])
        prompts = list(index)
        token_ids = tokenizer(prompts, add_special_tokens=True)["input_ids"] if prompts else []
        return cls(test, prompts, [list(t) for t in token_ids], runs)

    def run_prompts(self, run: int) -> list[str]:
        return [self.prompts[i] for i in self.runs[run]]

    def exact_match(
        self,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        tau: float,
        max_new_tokens: int = MAX_NEW_TOKENS,
        batch_size: int = 16,
        stop_at_answer: bool = True,
    ) -> MonteCarloResult:
        """Exact match of every run at temperature tau (each distinct prompt answered once)."""
        with attention_temperature(model, tau):
            answers = generate_token_answers(
                model, tokenizer, self.token_ids, max_new_tokens, batch_size, stop_at_answer
            )
        correct = tuple(
            tuple(
                bool(exact_match(answers[i], item.correct_answer))
                for i, item in zip(run, self.test, strict=True)
            )
            for run in self.runs
        )
        scores = [float(np.mean(run)) for run in correct]
        std = float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0
        return MonteCarloResult(mean=float(np.mean(scores)), std=std, scores=tuple(scores), correct=correct)


def monte_carlo_exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[SciQItem],
    test: Sequence[SciQItem],
    tau: float,
    *,
    n_demos: int,
    noisy_ratio: float,
    n_runs: int = 12,
    seed: int = 0,
    retriever: str | Retriever = "tfidf",
    batch_size: int = 8,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> MonteCarloResult:
    """Exact match over n_runs draws of the noisy labels, every attention layer at temperature tau.

    Retrieval is deterministic and done once; run r draws its noise from numpy Generator (seed, r).
    Decoding is the scan's fast path (papers.temperature.scan: each distinct prompt tokenised and
    answered once, shared prompt beginnings computed once, stopped when the answer is complete); a scan over
    several taus should call ``scan_exact_match``, which builds the prompts once for all of them.
    """
    return scan_exact_match(
        model,
        tokenizer,
        train,
        test,
        (tau,),
        n_demos=n_demos,
        noisy_ratio=noisy_ratio,
        n_runs=n_runs,
        seed=seed,
        retriever=retriever,
        batch_size=batch_size,
        max_new_tokens=max_new_tokens,
    )[float(tau)]


def scan_exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[SciQItem],
    test: Sequence[SciQItem],
    taus: Sequence[float],
    *,
    n_demos: int,
    noisy_ratio: float,
    n_runs: int = 12,
    seed: int = 0,
    retriever: str | Retriever = "tfidf",
    batch_size: int = 16,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> dict[float, MonteCarloResult]:
    """``monte_carlo_exact_match`` at every tau, with retrieval and prompts built once."""
    if isinstance(retriever, str):
        retriever = make_retriever(retriever, train)
    demo_indices = retriever.top_k([query_text(item) for item in test], n_demos)
    prompts = PromptSet.build(tokenizer, train, test, demo_indices, noisy_ratio, n_runs, seed)
    return {
        float(tau): prompts.exact_match(model, tokenizer, tau, max_new_tokens, batch_size) for tau in taus
    }
