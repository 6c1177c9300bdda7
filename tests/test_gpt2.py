"""papers.context_scaling.gpt2 against transformers' GPT2Model: the same network on the same
parameters.

The default GPT-2 cell (interleaved tokens, softmax attention through SDPA) runs
papers.context_scaling.gpt2 and skips
work no prediction reads; ``attn_implementation: eager`` runs transformers' GPT2Model. Loading one's
state_dict into the other must give the same predictions, gradients, temperatures and score moments.
"""

import math
import subprocess
import sys
import textwrap

import pytest
import torch

from papers.context_scaling.attention import additive_mask, stacked_prefix_mask
from papers.context_scaling.gpt2 import GPT2Backbone, explicit_attention
from papers.context_scaling.models import ModelConfig, build_model, hf_gpt2


def pair(layers: int = 2, heads: int = 2, width: int = 16, d: int = 3, points: int = 7, seed: int = 0):
    """(ours, transformers') GPT2InContext with the same parameters."""
    torch.manual_seed(seed)
    ours = build_model(ModelConfig(arch="gpt2", n_layer=layers, n_head=heads, n_embd=width), d, points)
    hf = build_model(
        ModelConfig(arch="gpt2", n_layer=layers, n_head=heads, n_embd=width, attn_implementation="eager"),
        d,
        points,
    )
    assert ours.own_backbone and not hf.own_backbone
    hf.load_state_dict(ours.state_dict())
    return ours, hf


def test_parameters_have_gpt2models_names_shapes_and_order():
    """Checkpoints, weights and Adam states (indexed by parameter order) move between the two."""
    ours, hf = pair(layers=3)
    assert [(n, p.shape) for n, p in ours.named_parameters()] == [
        (n, p.shape) for n, p in hf.named_parameters()
    ]
    assert list(ours.state_dict()) == list(hf.state_dict())
    optimizer = torch.optim.Adam(hf.parameters())
    hf(torch.randn(2, 7, 3), torch.randn(2, 7)).sum().backward()
    optimizer.step()
    torch.optim.Adam(ours.parameters()).load_state_dict(optimizer.state_dict())


@pytest.mark.parametrize("layers", [1, 3])
def test_predictions_and_gradients_equal_gpt2models(layers):
    ours, hf = pair(layers=layers, heads=4, width=32, d=5, points=9, seed=layers)
    xs, ys = torch.randn(6, 9, 5), torch.randn(6, 9)
    results = []
    for model in (ours, hf):
        out = model(xs, ys)
        (out - ys).square().mean().backward()
        results.append((out.detach(), {n: p.grad for n, p in model.named_parameters() if p.grad is not None}))
    (out, grads), (ref, ref_grads) = results
    assert out.shape == (6, 9)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    assert grads.keys() == ref_grads.keys() and len(grads) > 0
    for name in grads:
        torch.testing.assert_close(grads[name], ref_grads[name], rtol=1e-4, atol=1e-6, msg=name)


@pytest.mark.parametrize("dtype, tol", [(torch.float32, 1e-6), (torch.bfloat16, 3e-2)])
def test_explicit_attention_equals_sdpa(dtype, tol):
    """The bf16-on-CPU path (explicit_attention) computes SDPA's causal attention, values and gradients."""
    torch.manual_seed(0)
    q, k, v = (torch.randn(3, 2, 11, 8).to(dtype).requires_grad_() for _ in range(3))
    grad = torch.randn(3, 2, 11, 8).to(dtype)
    results = []
    for attend in (
        lambda: explicit_attention(q, k, v, 0.3),
        lambda: torch.nn.functional.scaled_dot_product_attention(q, k, v, is_causal=True, scale=0.3),
    ):
        out = attend()
        inputs_grad = torch.autograd.grad(out, (q, k, v), grad)
        results.append([out.float(), *(g.float() for g in inputs_grad)])
    for ours, ref in zip(*results):
        torch.testing.assert_close(ours, ref, rtol=tol, atol=tol)
    assert results[0][0].dtype == torch.float32 and explicit_attention(q, k, v, 0.3).dtype == dtype


def test_bfloat16_autocast_follows_float32():
    """Under CPU bf16 autocast (train.precision: bfloat16) predictions and gradients stay near float32's."""
    ours, _ = pair(layers=2, heads=4, width=32, d=5, points=9, seed=3)
    xs, ys = torch.randn(6, 9, 5), torch.randn(6, 9)
    results = []
    for precision in (torch.float32, torch.bfloat16):
        ours.zero_grad()
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == torch.bfloat16):
            out = ours(xs, ys)
            loss = (out.float() - ys).square().mean()
        loss.backward()
        results.append(
            (
                out.detach().float(),
                torch.cat([p.grad.flatten() for p in ours.parameters() if p.grad is not None]),
            )
        )
    (ref, ref_grad), (out, grad) = results
    assert (out - ref).abs().max() < 0.05 * ref.abs().max()
    assert (grad - ref_grad).norm() < 0.05 * ref_grad.norm()
    assert not torch.equal(out, ref)  # bf16 really ran


def test_full_pass_equals_gpt2models_hidden_states():
    """Without the x-token shortcut (every token, every position) the backbone is GPT2Model's."""
    ours, hf = pair(layers=2, width=24, heads=3)
    embeds = torch.randn(3, 14, 24)
    with torch.no_grad():
        torch.testing.assert_close(
            ours.backbone(embeds), hf.backbone(inputs_embeds=embeds).last_hidden_state, rtol=1e-5, atol=1e-5
        )
    with pytest.raises(ValueError, match="15 tokens exceed the model's 14 positions"):
        ours.backbone(torch.randn(1, 15, 24))


def test_attention_temperature_and_score_moments_equal_gpt2models():
    from papers.temperature.patch import attention_temperature, recording_score_moments

    ours, hf = pair(layers=2, seed=1)
    ours.eval(), hf.eval()
    xs, ys = torch.randn(4, 7, 3), torch.randn(4, 7)
    with torch.no_grad():
        plain = ours(xs, ys)
        with attention_temperature(ours, 1e-3), attention_temperature(hf, 1e-3):  # small scores: sharpen
            hot = ours(xs, ys)
            torch.testing.assert_close(hot, hf(xs, ys), rtol=1e-5, atol=1e-6)
        assert not torch.allclose(hot, plain, atol=1e-4)
        torch.testing.assert_close(ours(xs, ys), plain)  # restored
        moments = []
        for model in (ours, hf):
            with recording_score_moments(model) as recorder:
                torch.testing.assert_close(model(xs, ys), plain, rtol=1e-5, atol=1e-6)
            moments.append(recorder.moments())
        assert not ours.backbone.recording
    a, b = moments
    assert (a.n_offdiag, a.n_diag) == (b.n_offdiag, b.n_diag) == (2 * 4 * 2 * 14 * 13 // 2, 2 * 4 * 2 * 14)
    assert a.diag_first_moment == pytest.approx(b.diag_first_moment, rel=1e-5)
    assert a.offdiag_second_moment == pytest.approx(b.offdiag_second_moment, rel=1e-5)
    for ours_layer, hf_layer in zip(a.per_layer, b.per_layer):
        assert ours_layer == pytest.approx(hf_layer, rel=1e-5)


@pytest.mark.parametrize("precision", ["float32", "bfloat16"])
def test_the_stacked_layout_keeps_gpt2models_draws_and_numbers_bit_for_bit(precision):
    """The stacked layout (eq. 2) ran on transformers' GPT2Model with an additive float mask until its cells
    packed; on this backbone with the boolean stacked-prefix mask it starts from the same parameters under a
    seed (GPT2Model's draws, call for call, and the stream left where GPT2Model left it) and computes the
    same hidden states and gradients, bit for bit (float32 and CPU bf16 autocast): its cells' numbers do
    not change."""
    config = ModelConfig(arch="gpt2", layout="stacked", n_layer=3, n_head=2, n_embd=16)
    d, P, B = 3, 7, 5
    torch.manual_seed(4)
    ours = build_model(config, d, P)
    torch.manual_seed(4)
    torch.nn.Linear(d + 1, 16)  # the read-in, built before the backbone
    hf = hf_gpt2(config, P)
    assert torch.equal(ours.read_out.weight, torch.nn.Linear(16, 1).weight)  # built after it
    assert ours.own_backbone and list(ours.backbone.state_dict()) == list(hf.state_dict())
    for name, value in hf.state_dict().items():
        assert torch.equal(ours.backbone.state_dict()[name], value), name
    allowed, positions = stacked_prefix_mask(P), torch.arange(P).repeat(2)
    embeds, grad = torch.randn(B, 2 * P, 16), torch.randn(B, 2 * P, 16)
    results = []
    with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bfloat16", cache_enabled=False):
        for model, run in (
            (ours.backbone, lambda: ours.backbone(embeds, allowed=allowed, positions=positions)),
            (
                hf,
                lambda: (
                    hf(
                        inputs_embeds=embeds,
                        attention_mask=additive_mask(allowed, embeds.dtype),
                        position_ids=positions[None],
                    ).last_hidden_state
                ),
            ),
        ):
            out = run()
            used = [q for n, q in model.named_parameters() if n != "wte.weight"]
            results.append([out, *torch.autograd.grad(out, used, grad.to(out.dtype))])
    with torch.no_grad():
        full = ours.backbone(embeds, allowed=allowed, positions=positions)
    assert torch.equal(results[0][0], full) == (precision == "float32")  # bf16 really ran
    for a, b in zip(*results):
        assert torch.equal(a, b)


def test_initialisation_follows_gpt2s_scheme():
    torch.manual_seed(0)
    layers, width = 4, 256
    backbone = GPT2Backbone(width, layers, 8, positions=64)
    for name, p in backbone.named_parameters():
        norm = ".ln_" in name or name.startswith("ln_f")
        if name.endswith("bias"):
            torch.testing.assert_close(p.detach(), torch.zeros_like(p), msg=name)
        elif norm:
            torch.testing.assert_close(p.detach(), torch.ones_like(p), msg=name)
        elif p.numel() > 1000:  # N(0, std): the residual projections' std scaled down
            std = 0.02 / math.sqrt(2 * layers) if "c_proj" in name else 0.02
            assert p.std().item() == pytest.approx(std, rel=0.1), name
            assert abs(p.mean().item()) < 4 * std / math.sqrt(p.numel()), name


def test_default_gpt2_cell_trains_and_evaluates_without_importing_transformers():
    """The point of papers.context_scaling.gpt2: a trial of a default GPT-2 cell never pays
    transformers' import."""
    code = textwrap.dedent("""
        import sys
        from scaling.cells import Cell
        from papers.context_scaling.train import CellTrainer
        cell = Cell.from_dict({"task": {"d": 3}, "model": {"arch": "gpt2", "n_layer": 1, "n_head": 2,
        "n_embd": 16},
                               "train": {"steps": 3, "batch_size": 4}, "eval": {"prompts": 8, "bootstrap":
                               10},
                               "N": 5, "T": 4})
        trainer = CellTrainer(cell)
        trainer.train_until(3)
        trainer.evaluate()
        print(sorted(m for m in sys.modules if m.split(".")[0] == "transformers"))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.strip().splitlines()[-1] == "[]"
