"""The LLM scan's fast path: a cell's prompts tokenised once, answered once per tau, stopped at the answer.

Fig. 3 answers the same prompts at every tau: the Monte Carlo runs' noisy labels are drawn from
(seed, run) alone, so a cell's prompts do not depend on tau. ``PromptSet`` builds them once per cell
(retrieval once, noise once per run), keeps each distinct prompt once (at noisy ratio 0 every run's
prompts are the same) and tokenises it once. ``answer`` then runs greedy decoding over batches of
prompts of similar length (sorted by token count, so little padding) and stops each prompt when its
answer is complete: the answer is the first non-empty line of the generation (cut before any new
"Support" block, ``llm_icl.answer_from_generation``), so once the generation holds a line break after
some text, or "Support" on its first line, or the end token, more tokens cannot change it. The answers
are those of the fixed-length decoding of the same batches (the tokens before the stop are computed
identically); only the tokens after the answer are skipped.

The model stays loaded across taus and runs; ``attention_temperature`` patches it in place per tau.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase, StoppingCriteria, StoppingCriteriaList

from scaling.temperature.llm_icl import (
    MAX_NEW_TOKENS,
    MonteCarloResult,
    Retriever,
    SciQItem,
    answer_from_generation,
    exact_match,
    icl_prompts,
    make_retriever,
    query_text,
)
from scaling.temperature.patch import attention_temperature


def answer_complete(text: str) -> bool:
    """Whether more generated text can no longer change ``answer_from_generation(text)``."""
    stripped = text.lstrip()
    return "\n" in stripped or "Support" in stripped


class AnswerComplete(StoppingCriteria):
    """Per-row stop of ``generate`` once the row's answer is complete (see ``answer_complete``)."""

    def __init__(self, tokenizer: PreTrainedTokenizerBase, prompt_length: int):
        self.tokenizer, self.prompt_length = tokenizer, prompt_length

    def __call__(self, input_ids: torch.Tensor, scores, **kwargs) -> torch.Tensor:
        texts = self.tokenizer.batch_decode(input_ids[:, self.prompt_length :], skip_special_tokens=True)
        return torch.tensor([answer_complete(t) for t in texts], dtype=torch.bool, device=input_ids.device)


def left_padded(sequences: Sequence[Sequence[int]], pad_id: int, device) -> dict[str, torch.Tensor]:
    """{input_ids, attention_mask} (B, L) of token id lists, padded on the left to the longest."""
    width = max(len(s) for s in sequences)
    ids = torch.full((len(sequences), width), pad_id, dtype=torch.long)
    mask = torch.zeros((len(sequences), width), dtype=torch.long)
    for row, seq in enumerate(sequences):
        ids[row, width - len(seq) :] = torch.as_tensor(seq, dtype=torch.long)
        mask[row, width - len(seq) :] = 1
    return {"input_ids": ids.to(device), "attention_mask": mask.to(device)}


def length_batches(lengths: Sequence[int], batch_size: int) -> list[np.ndarray]:
    """Indices of the sequences in batches of at most batch_size, by increasing length (ties by index)."""
    order = np.argsort(np.asarray(lengths), kind="stable")
    return [order[start : start + batch_size] for start in range(0, len(order), batch_size)]


def generate_token_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    token_ids: Sequence[Sequence[int]],
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = 16,
    stop_at_answer: bool = True,
    stats: dict | None = None,
) -> list[str]:
    """Greedy answers to pre-tokenised prompts, batched by length; in the prompts' order.

    ``stats``, when given, accumulates ``batches``, ``steps`` (decoding steps, summed over batches) and
    ``prompt_tokens`` (padded prompt positions computed)."""
    if tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer needs a pad token for batched generation (e.g. tokenizer.pad_token = eos)"
        )
    answers: list[str | None] = [None] * len(token_ids)
    with torch.no_grad():
        for rows in length_batches([len(t) for t in token_ids], batch_size):
            batch = left_padded([token_ids[i] for i in rows], tokenizer.pad_token_id, model.device)
            width = batch["input_ids"].shape[1]
            stopping = StoppingCriteriaList([AnswerComplete(tokenizer, width)]) if stop_at_answer else None
            output = model.generate(
                **batch,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
                stopping_criteria=stopping,
            )  # (B, width + new)
            if stats is not None:
                stats["batches"] = stats.get("batches", 0) + 1
                stats["steps"] = stats.get("steps", 0) + output.shape[1] - width
                stats["prompt_tokens"] = stats.get("prompt_tokens", 0) + batch["input_ids"].numel()
            texts = tokenizer.batch_decode(output[:, width:], skip_special_tokens=True)
            for row, text in zip(rows, texts):
                answers[row] = answer_from_generation(text)
    return answers  # type: ignore[return-value]


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
        scores = [
            float(
                np.mean(
                    [
                        exact_match(answers[i], item.correct_answer)
                        for i, item in zip(run, self.test, strict=True)
                    ]
                )
            )
            for run in self.runs
        ]
        std = float(np.std(scores, ddof=1)) if len(scores) > 1 else 0.0
        return MonteCarloResult(mean=float(np.mean(scores)), std=std, scores=tuple(scores))


def scan_exact_match(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    train: Sequence[SciQItem],
    test: Sequence[SciQItem],
    taus: Sequence[float],
    n_demos: int,
    noisy_ratio: float,
    n_runs: int = 12,
    seed: int = 0,
    retriever: str | Retriever = "tfidf",
    batch_size: int = 16,
    max_new_tokens: int = MAX_NEW_TOKENS,
) -> dict[float, MonteCarloResult]:
    """``llm_icl.monte_carlo_exact_match`` at every tau, with retrieval and prompts built once."""
    if isinstance(retriever, str):
        retriever = make_retriever(retriever, train)
    demo_indices = retriever.top_k([query_text(item) for item in test], n_demos)
    prompts = PromptSet.build(tokenizer, train, test, demo_indices, noisy_ratio, n_runs, seed)
    return {
        float(tau): prompts.exact_match(model, tokenizer, tau, max_new_tokens, batch_size) for tau in taus
    }
