"""The GPU script's kind phases (benchmarks/gpu.py): each kind a GPU runs, on the GPU and on the CPU, and the
LLM scan on a LLaMA-2-7B-shaped model.

``kinds``: training and its evaluation, the GPT-2 temperature scan, seed 003's GD and selection
constructions on the GPU and on the CPU with the same weights and prompts: their answers to fp32 / fp64
rounding. ``llm``: the LLM scan (benchmarks.llm_scan.compare_scan) on a LLaMA-2-7B-shaped model built on
the card from its config with random weights (bf16, ~13.5 GB; nothing downloaded) against a plain
``generate`` loop on the same prompts: answers per second, and Fig. 3b's time at the paper's size.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell

from .common import Result, skipped
from .gpu_common import Check, Run

LLM_SWEEP = Path(__file__).resolve().parents[1] / "sweeps" / "temp_llama_a.yaml"  # the paper-size LLM scan
LLM_TARGET = 5.0
LLAMA2_7B = {  # LLaMA-2-7B's shape (Touvron et al. 2023, Table 1 / its config.json)
    "hidden_size": 4096,
    "intermediate_size": 11008,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 32,
    "max_position_embeddings": 4096,
    "rms_norm_eps": 1e-5,
}
TINY_LLAMA = {**LLAMA2_7B, "hidden_size": 32, "intermediate_size": 64, "num_hidden_layers": 2}
TINY_LLAMA.update(num_attention_heads=4, num_key_value_heads=4)


KIND_CELLS = {  # small cells of the kinds a GPU runs (their sweeps' quick profiles, fewer prompts)
    "train": {
        "task": {"family": "linear", "d": 4, "noise_std": 0.1},
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
        "train": {"steps": 40, "batch_size": 32, "lr": 1e-3},
        "eval": {"prompts": 256, "bootstrap": 100, "baselines": ["zero", "least_squares", "ridge"]},
        "N": 10,
        "T": 16,
    },
    "scan": {
        "job": "gpt2_scan",
        "task": {"family": "linear", "d": 4},
        "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
        "train": {"steps": 40, "batch_size": 32, "lr": 1e-3},
        "eval": {"prompts": 256, "bootstrap": 100, "baselines": ["zero", "least_squares"]},
        "temperature": {"train_model": True, "taus": [0.5, 1, 2]},
        "N": 10,
    },
    "gd": {
        "job": "gd_transformer",
        "task": {"family": "linear", "d": 5, "noise_std": 0.5},
        "construction": {"steps": 16, "eta": 0.1, "lam": 1.25},
        "eval": {"prompts": 256, "n": [5, 10, 20], "bootstrap": 100, "baselines": ["zero", "ridge"]},
        "N": 20,
    },
    "selection": {
        "job": "selection_transformer",
        "task": {"family": "linear_mixed_noise", "d": 5, "noise_stds": [0.1, 0.5]},
        "construction": {
            "steps": 16,
            "eta": 0.1,
            "lambdas": [0.05, 1.25],
            "gamma": 0.02,
            "val_fraction": 0.5,
        },
        "eval": {"prompts": 256, "n": [5, 10, 20], "bootstrap": 100, "baselines": ["zero", "ridge"]},
        "N": 20,
    },
}


class RecordedLog:
    """Where a kind run outside a trial logs: its curves and summary kept (the GPU machine has no MLflow)."""

    def finish(self, cell, curves, weights_path=None, summary=None, metric_key=None, units=None) -> None:
        self.curves, self.summary = curves, summary or {}


@dataclass
class Bench:
    """The parts of scaling.trial.run.TrialContext a kind's run reads, without MLflow or checkpoints."""

    device: torch.device
    log: RecordedLog = field(default_factory=RecordedLog)
    tracking_uri: str = ""
    sweep_model: None = None  # no store here: a from_sweep scan is not benched

    def progress(self, values: dict) -> None:
        pass


def curves_apart(a, b) -> float:
    """The largest relative difference of two runs' err columns (same rows in the same order)."""
    if list(a["predictor"]) != list(b["predictor"]) or list(a["n"]) != list(b["n"]):
        return float("inf")
    x, y = torch.tensor(a["err"].to_numpy()), torch.tensor(b["err"].to_numpy())
    return float(((x - y).abs() / y.abs().clamp_min(1e-12)).max())


def kinds_phase(run: Run, seconds: float) -> None:
    """Each kind a GPU runs, on the GPU and on the CPU, on the same weights and evaluation prompts (drawn on
    the CPU whatever the device: papers.context_scaling.tasks.fresh_prompts): their answers agree to
    fp32 (GPT-2) or fp64 (constructions) rounding. A cell trained on each device (CUDA draws its own batches)
    is INFO."""
    from papers.temperature.jobs import scan_gpt2

    cpu, gpu = torch.device("cpu"), run.device
    train = Cell.from_dict(KIND_CELLS["train"])
    trained = CellTrainer(train, cpu)
    trained.train_until(train.train.steps)
    moved = CellTrainer(train, gpu)
    moved.load_state_dict(trained.state_dict())
    apart = curves_apart(moved.evaluate(), trained.evaluate())
    run.add(
        Check(
            "kind_train_eval[cuda vs cpu]",
            "PASS" if apart <= 1e-4 else "FAIL",
            f"{gpu} vs cpu, the same"
            f" weights: evaluation errors (model and baselines) apart by {apart:.1e} relative (bound 1e-4)",
        )
    )
    on_gpu = CellTrainer(train, gpu)
    on_gpu.train_until(train.train.steps)
    a, b = (
        frame[frame["predictor"] == "model"].iloc[-1] for frame in (on_gpu.evaluate(), trained.evaluate())
    )
    half = (b["err_hi"] - b["err_lo"]) / 2
    text = (
        f"trained {train.train.steps} steps on each (CUDA draws its own batches): err at n={int(a['n'])}"
        f" {a['err']:.4f} on {gpu}, {b['err']:.4f} on cpu (CI half-width {half:.4f})"
    )
    run.add(Check("kind_train_trained[cuda vs cpu]", "INFO", text))
    scan = Cell.from_dict(KIND_CELLS["scan"])
    model = CellTrainer(scan, cpu)
    model.train_until(scan.train.steps)
    there = CellTrainer(scan, gpu)
    there.load_state_dict(model.state_dict())
    cpu_scan = scan_gpt2(scan, model.model.eval(), cpu)
    gpu_scan = scan_gpt2(scan, there.model.eval(), gpu)
    apart = curves_apart(gpu_scan.curves, cpu_scan.curves)
    same_tau = gpu_scan.summary["tau_best"] == cpu_scan.summary["tau_best"]
    run.add(
        Check(
            "kind_gpt2_scan[cuda vs cpu]",
            "PASS" if apart <= 1e-4 and same_tau else "FAIL",
            f"the same weights: errors at every tau apart by {apart:.1e} relative (bound 1e-4); tau_best"
            f" {gpu_scan.summary['tau_best']:g} vs {cpu_scan.summary['tau_best']:g}",
        )
    )
    for construction in ("gd", "selection"):
        cell = Cell.from_dict(KIND_CELLS[construction])
        job, here, there = cell.job, Bench(cpu), Bench(gpu)
        cell.kind.run(cell, here)  # the kind's own run, as a trial runs it
        cell.kind.run(cell, there)
        apart = curves_apart(there.log.curves, here.log.curves)
        run.add(
            Check(
                f"kind_{job}[cuda vs cpu]",
                "PASS" if apart <= 1e-9 else "FAIL",
                f"float64 constructions: errors apart by {apart:.1e} relative (bound 1e-9);"
                f" summary {there.log.summary} vs {here.log.summary}",
            )
        )


# ---- phase 6: the LLM scan on a LLaMA-2-7B-shaped model ---------------------------------------------------


def llm_phase(run: Run, seconds: float) -> None:
    from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

    from papers.temperature.tiny_llm import char_tokenizer

    from .llm_scan import FIG3_ANSWERS, compare_scan

    if not run.cuda and not run.smoke:
        run.add(skipped("llm_scan_7b", "no CUDA device"))
        return
    if run.tokenizer:
        tokenizer = AutoTokenizer.from_pretrained(run.tokenizer, local_files_only=True)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
    else:
        tokenizer = char_tokenizer()
    shape = TINY_LLAMA if run.smoke else LLAMA2_7B
    config = LlamaConfig(
        vocab_size=max(32000, len(tokenizer)),
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **shape,
    )
    dtype = torch.bfloat16 if run.cuda else torch.float32
    run.free()
    start = time.perf_counter()
    default = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.random.fork_rng(devices=[]), torch.device(run.device):
            torch.manual_seed(0)
            model = LlamaForCausalLM(config).eval()
    finally:
        torch.set_default_dtype(default)
    run.sync()
    params = sum(p.numel() for p in model.parameters())
    run.say(
        f"llm: {params / 1e9:.2f}e9 random parameters in {dtype} built in {time.perf_counter() - start:.1f} s"
    )
    # 24 questions x 2 runs: 48 distinct prompts, as many as one decoding batch of the paper's sweep holds
    n_test, runs, taus = (2, 1, (1.0,)) if run.smoke else (24, 2, (1.0,))
    batch = scan_batch_size()
    m = compare_scan(model, tokenizer, n_test, runs, taus, batch)
    per_answer = m["fast_s"] / m["answers"]
    fig3_hours = FIG3_ANSWERS * per_answer / 3600
    peak = run.peak_bytes()
    run.add(
        Result(
            "llm_scan_7b" if not run.smoke else "llm_scan_tiny",
            "plain generate: 1 prompt, 30 new tokens",
            f"scan: shared prefixes once, batches of {batch}, stop at answer",
            "answers/s",
            m["answers"] / m["plain_s"],
            m["answers"] / m["fast_s"],
            None if run.smoke else LLM_TARGET,
            note=f"{'LLaMA-2-7B-shaped' if not run.smoke else 'tiny LLaMA'} random weights, {dtype},"
            f" {params / 1e9:.2f}e9 params, tokenizer {run.tokenizer or 'one token per character'};"
            f" {m['answers']} answers; answers agree {m['agree']:.0%};"
            f" {m['prompt_tokens'] / m['answers']:.0f} prompt tokens and"
            f" {m['plain_new_tokens'] / m['answers']:.1f} new tokens per plain answer;"
            f" {m['decode_steps_per_batch']:.1f} decoding steps per batch of {batch}"
            + (f"; peak {peak / 2**30:.1f} GiB" if peak else "")
            + f". Fig. 3b at the paper's size ({FIG3_ANSWERS} answers) at ours' rate: {fig3_hours:.1f} h"
            " on this device (random weights rarely stop early: an upper bound for the real model's answers)",
            extra={**m, "fig3b_hours": fig3_hours, "params": params},
        ).judged()
    )
    del model


def scan_batch_size(sweep: Path = LLM_SWEEP) -> int:
    """The decoding batch of the paper-size LLM scan (``temperature.batch_size`` of the sweep file's
    defaults, one whole GPU per cell), so that this line times what a cell of that sweep runs."""
    import yaml

    return int(yaml.safe_load(sweep.read_text())["defaults"]["temperature"]["batch_size"])
