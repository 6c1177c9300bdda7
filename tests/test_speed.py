"""The speed work: the cost model, the faster training step's numerics, batched least squares, the suite."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import GPT2Config, GPT2Model

from benchmarks.__main__ import SUITES
from papers.context_scaling.baselines import psd_solve, ridge_weights
from papers.context_scaling.models import ModelConfig, build_model
from scaling.budget.cost import (
    StepShape,
    fit_table,
    load_table,
    model_params,
    step_flops,
    step_peak_bytes,
    step_seconds,
    sweep_estimate,
)
from scaling.cells import Cell

ROOT = Path(__file__).resolve().parents[1]
BASE = StepShape("gpt2", N=40, d=8, width=256, layers=8, batch=64)


def shape(**changes) -> StepShape:
    return StepShape(**{**BASE.__dict__, **changes})


def test_flops_linear_in_batch_and_layers_quadratic_in_width():
    assert step_flops(shape(batch=128)) == pytest.approx(2 * step_flops(BASE))
    # the per-layer part is linear in layers: f(8) - f(4) = f(4) - f(2) (the last block, which keeps the x
    # tokens only, is in each)
    assert step_flops(shape(layers=8)) - step_flops(shape(layers=4)) == pytest.approx(
        2 * (step_flops(shape(layers=4)) - step_flops(shape(layers=2)))
    )
    # dense matmuls dominate at large width: 4x the FLOPs for twice the width
    assert step_flops(shape(width=4096)) / step_flops(shape(width=2048)) == pytest.approx(4, rel=0.02)
    # attention makes it superlinear in the context length
    assert step_flops(shape(N=81)) > 2 * step_flops(shape(N=40))


@pytest.mark.parametrize(
    "model",
    [
        {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
        {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 16, "layout": "stacked"},
        {"arch": "sgpt", "n_layer": 3, "n_embd": 24},
        {"arch": "mlp", "width": 20},
    ],
)
def test_params_formula_counts_the_built_model(model):
    config = ModelConfig(**model)
    built = build_model(config, d=5, points=7)
    counted = sum(p.numel() for p in built.parameters() if p.requires_grad)
    width = config.width if config.arch == "mlp" else config.n_embd
    assert model_params(StepShape(config.arch, 6, 5, width, config.n_layer, 1, config.layout)) == counted


def test_time_fit_recovers_a_linear_law():
    rows = [
        {
            "arch": "gpt2",
            "flops": f,
            "seconds": 0.01 + f / 2e11,
            "activations": a,
            "peak_bytes": 16 * p + 1000 + 6 * a,
            "params": p,
        }
        for f, a, p in [(1e9, 1e5, 10), (4e9, 3e5, 20), (2e10, 2e6, 30)]
    ]
    fit = fit_table(rows)["gpt2"]
    assert fit["t0"] == pytest.approx(0.01, rel=1e-6) and fit["rate"] == pytest.approx(2e11, rel=1e-6)
    assert fit["m0"] == pytest.approx(1000, rel=1e-6) and fit["bytes_per_activation"] == pytest.approx(6)


def test_stored_table_estimates_grow_with_size():
    table = load_table()
    assert (
        step_seconds(shape(batch=128), table) > 1.8 * step_seconds(BASE, table) - table["fit"]["gpt2"]["t0"]
    )
    assert step_peak_bytes(shape(batch=128), table) > step_peak_bytes(BASE, table)
    assert step_seconds(shape(arch="sgpt"), table) < step_seconds(BASE, table)


def test_sweep_estimate_adds_cells_up():
    cell = Cell.from_dict(
        {
            "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 32},
            "N": 10,
            "task": {"d": 4},
            "train": {"steps": 100, "batch_size": 8},
        }
    )
    longer = Cell.from_dict({**cell.to_dict(), "train": {"steps": 300, "batch_size": 8}})
    one, both = sweep_estimate([cell]), sweep_estimate([cell, longer])
    assert both.cells == 2 and both.flops == pytest.approx(4 * one.flops)
    assert both.seconds == pytest.approx(4 * one.seconds) and both.peak_bytes == one.peak_bytes
    assert "FLOP" in both.line("cpu")
    assert both.borrowed == () and "not in the cost table" not in both.line("cpu")


def test_an_architecture_the_cost_table_has_not_measured_is_said_to_be_costed_with_gpt2s_fit():
    """The smoke sweep's MLP has no row in the table: its steps are costed at GPT-2's fixed 46 ms a step
    (55 of --dry-run's 72 minutes; at --set train.steps=300 its 18 cells, 17 of them in 3 packs, trained in
    about 35 s of wall time against 4.1 minutes costed): said, as an upper bound."""
    mlp = Cell.from_dict(
        {"model": {"arch": "mlp", "width": 64}, "N": 8, "task": {"d": 3}, "train": {"steps": 100}}
    )
    assert "mlp" not in load_table()["fit"]
    estimate = sweep_estimate([mlp])
    assert estimate.borrowed == ("mlp",)
    assert "mlp: not in the cost table, costed with GPT-2's fit" in estimate.line("cpu")


def test_the_printed_cost_table_says_what_it_is_when_and_where_it_was_measured():
    done = subprocess.run(
        [sys.executable, "-m", "scaling.budget.cost"], cwd=ROOT, capture_output=True, text=True, check=True
    )
    title = done.stdout.splitlines()[0]
    table = load_table()
    assert title.startswith("Cost of one training step, measured ") and table["measured"] in title
    assert table["machine"] in title and table["device"] in title
    assert "python -m benchmarks --only cost --update-cost-table" in done.stdout.split("\n\n")[0]
    assert done.stdout.split("\n\n")[1].startswith("| arch | N |")  # the Markdown table after the title


def test_the_cost_table_read_by_a_closed_pipe_ends_without_a_traceback():
    """`python -m scaling.budget.cost | head -1`: the reader gone, the command ends quietly (exit 0)."""
    read, write = os.pipe()
    os.close(read)  # nobody reads: the first write fails with EPIPE
    try:
        done = subprocess.run(
            [sys.executable, "-m", "scaling.budget.cost"],
            cwd=ROOT,
            stdout=write,
            stderr=subprocess.PIPE,
            text=True,
        )
    finally:
        os.close(write)
    assert done.returncode == 0 and done.stderr == "", done.stderr


def test_fused_gelu_backbone_matches_gelu_new():
    """GPT-2's tanh GELU as one kernel (the project's choice) gives the library default's outputs."""
    outputs = []
    for act in ("gelu_new", "gelu_pytorch_tanh"):
        torch.manual_seed(0)
        config = GPT2Config(
            vocab_size=1, n_positions=16, n_embd=32, n_layer=2, n_head=2, activation_function=act
        )
        model = GPT2Model(config).eval()
        outputs.append(
            model(
                inputs_embeds=torch.randn(3, 16, 32, generator=torch.Generator().manual_seed(1))
            ).last_hidden_state
        )
    assert torch.allclose(outputs[0], outputs[1], atol=1e-5)


@pytest.mark.parametrize("case", ["gaussian", "rank_deficient", "repeated_points"])
def test_least_squares_matches_numpy_pinv_every_prefix(case):
    gen = torch.Generator().manual_seed(3)
    xs = torch.randn(6, 15, 5, generator=gen, dtype=torch.float64)
    ys = torch.randn(6, 15, generator=gen, dtype=torch.float64)
    if case == "rank_deficient":
        xs[..., 3:] = 0
    if case == "repeated_points":
        xs[:, 7:] = xs[:, :8]
    w = ridge_weights(xs, ys, 0.0).numpy()
    for b in range(6):
        for n in range(15):
            expected = (
                np.linalg.pinv(xs[b, :n].numpy(), rcond=1e-10) @ ys[b, :n].numpy() if n else np.zeros(5)
            )
            np.testing.assert_allclose(w[b, n] @ xs[b, n].numpy(), expected @ xs[b, n].numpy(), atol=1e-6)


def test_psd_solve_falls_back_to_pinv_on_singular_matrices():
    A = torch.tensor([[[2.0, 0.0], [0.0, 0.0]], [[2.0, 1.0], [1.0, 2.0]]], dtype=torch.float64)
    b = torch.tensor([[4.0, 3.0], [3.0, 3.0]], dtype=torch.float64)
    out = psd_solve(A, b)
    assert torch.allclose(out[0], torch.tensor([2.0, 0.0], dtype=torch.float64))
    assert torch.allclose(out[1], torch.tensor([1.0, 1.0], dtype=torch.float64))


@pytest.mark.slow
def test_benchmark_suite_quick_runs(tmp_path):
    out = tmp_path / "results.json"
    done = subprocess.run(
        [sys.executable, "-m", "benchmarks", "--quick", "--json", str(out)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    written = json.loads(out.read_text())
    results = written["results"]
    assert list(written["suite_seconds"]) == list(SUITES) and all(
        v > 0 for v in written["suite_seconds"].values()
    )
    names = {r["name"] for r in results}
    assert {"gpt2_train_cpu_best", "least_squares_batched", "ridge_batched", "cost_model_time"} <= names
    assert all(r["status"] in ("PASS", "INFO", "SKIP") for r in results)
    assert "ratio" in done.stdout
