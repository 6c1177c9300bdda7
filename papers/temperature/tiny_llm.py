"""A tiny random LLaMA and a character tokenizer, saved as a local model directory for quick runs.

The LLM sweeps of seed 004 (Fig. 3) need LLaMA-2-7B weights, which are never downloaded here; their
quick profiles and tests use this stand-in instead: ``python -m papers.temperature.tiny_llm DIR``
writes a 2-layer LlamaForCausalLM (hidden size 32, grouped-query attention) with random weights and a
one-token-per-character tokenizer to DIR, loadable by papers.temperature.llm_icl.load_causal_lm.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast


def char_tokenizer() -> PreTrainedTokenizerFast:
    """One token per printable ASCII character and newline; pad, unk and eos specials."""
    chars = [chr(c) for c in range(32, 127)] + ["\n"]
    vocab = {"<pad>": 0, "<unk>": 1, "<eos>": 2, **{c: i + 3 for i, c in enumerate(chars)}}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex(r"[\s\S]"), behavior="isolated")
    backend.decoder = decoders.Fuse()
    return PreTrainedTokenizerFast(
        tokenizer_object=backend, pad_token="<pad>", unk_token="<unk>", eos_token="<eos>"
    )


def save_tiny_llama(directory: str | Path, seed: int = 0) -> Path:
    """Write the tiny random LLaMA and its tokenizer to ``directory``; returns it."""
    directory = Path(directory)
    tokenizer = char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=4096,
        initializer_range=0.2,
        pad_token_id=0,
        bos_token_id=2,
        eos_token_id=2,
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = LlamaForCausalLM(config)
    directory.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(directory)
    tokenizer.save_pretrained(directory)
    return directory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m papers.temperature.tiny_llm", description=__doc__.split("\n\n")[0]
    )
    parser.add_argument("directory", help="where to write the model, e.g. /tmp/scaling-tiny-llama")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    print(save_tiny_llama(args.directory, args.seed))
    return 0


if __name__ == "__main__":
    sys.exit(main())
