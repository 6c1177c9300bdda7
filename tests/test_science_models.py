"""Seed 001 models: stacked GPT-2, SGPT (eq. 13), the one-layer model (eq. 9), feature MLPs, Fig. 6's
linear-on-scalar: causality, equality with one forward pass per prefix, frozen parts, training."""

import math

import pytest
import torch

from papers.context_scaling.attention import ATTENTIONS, causal_mask
from papers.context_scaling.models import ModelConfig, build_model
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.config import ConfigError

CONFIGS = {
    "gpt2_stacked": dict(arch="gpt2", layout="stacked", n_layer=2, n_head=2, n_embd=16),
    "gpt2_stacked_eager": dict(
        arch="gpt2", layout="stacked", n_layer=1, n_head=2, n_embd=16, attn_implementation="eager"
    ),
    "gpt2_interleaved_relu": dict(arch="gpt2", attention="relu", n_layer=2, n_head=2, n_embd=16),
    "gpt2_stacked_l1": dict(arch="gpt2", layout="stacked", attention="l1", n_layer=2, n_head=2, n_embd=16),
    "gpt2_interleaved_identity": dict(arch="gpt2", attention="identity", n_layer=1, n_head=2, n_embd=16),
    "sgpt": dict(arch="sgpt", n_layer=2, n_embd=16),
    "sgpt_softmax": dict(arch="sgpt", attention="softmax", n_layer=2, n_embd=16),
    "sgpt_relu": dict(arch="sgpt", attention="relu", n_layer=1, n_embd=16),
    "onelayer_hilbert": dict(arch="onelayer", feature_map="hilbert", width=32),
    "onelayer_l1": dict(arch="onelayer", feature_map="l1_attention", width=32),
    "mlp_features_linear": dict(arch="mlp", inputs="features", feature_map="linear", width=32),
    "mlp_both_hilbert": dict(arch="mlp", inputs="both", feature_map="hilbert", width=32),
    "linear_on_scalar": dict(arch="linear_on_scalar", feature_map="hilbert"),
}


def prompt(B=3, P=7, d=3, seed=0):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, P, d, generator=gen), torch.randn(B, P, generator=gen)


@pytest.mark.parametrize("name", list(CONFIGS))
def test_column_n_uses_only_pairs_before_n_and_query(name):
    torch.manual_seed(0)
    model = build_model(ModelConfig(**CONFIGS[name]), d=3, points=7).eval()
    xs, ys = prompt()
    xs2, ys2 = xs.clone(), ys.clone()
    ys2[:, 4:] = torch.randn(3, 3)  # labels at and after position 4
    xs2[:, 5:] = torch.randn(3, 2, 3)  # inputs after position 4
    with torch.no_grad():
        base, changed = model(xs, ys), model(xs2, ys2)
    assert base.shape == (3, 7)
    assert torch.allclose(changed[:, :5], base[:, :5], atol=1e-5)
    assert not torch.allclose(changed[:, 5:], base[:, 5:], atol=1e-4)


def stacked_prefix(xs, ys, n):
    """A_n of eq. 2 for one prompt batch: (B, n+1, d+1), the query's y set to 0."""
    A = torch.cat([xs[:, : n + 1], ys[:, : n + 1, None]], dim=-1).clone()
    A[:, n, -1] = 0
    return A


@pytest.mark.parametrize("attn", ["sdpa", "eager"])
def test_stacked_gpt2_equals_one_causal_pass_per_prefix(attn):
    torch.manual_seed(1)
    model = build_model(
        ModelConfig(arch="gpt2", layout="stacked", n_layer=2, n_head=2, n_embd=16, attn_implementation=attn),
        d=3,
        points=6,
    ).eval()
    xs, ys = prompt(P=6)
    with torch.no_grad():
        batched = model(xs, ys)
        for n in range(6):
            embeds = model.read_in(stacked_prefix(xs, ys, n))
            if model.own_backbone:  # sdpa: papers.context_scaling.gpt2, causal by default
                hidden = model.backbone(embeds)
            else:
                hidden = model.backbone(inputs_embeds=embeds).last_hidden_state
            assert torch.allclose(batched[:, n], model.read_out(hidden[:, -1]).squeeze(-1), atol=1e-5)


def plain_sgpt(model, A, phi):
    """Eq. 13 on one prefix A (B, L, d+1) with a causal mask, written from the paper."""
    H = A @ model.read_in
    allowed = causal_mask(A.shape[1])
    for proj, mlp in zip(model.proj, model.mlp):
        g = ATTENTIONS[phi](H @ H.transpose(1, 2) / math.sqrt(H.shape[-1]), allowed) @ H
        U = g @ proj.weight.T + H
        H = torch.nn.functional.gelu(U @ mlp.weight.T) + U
    return (H[:, -1] @ model.read_out.weight.T).squeeze(-1)


@pytest.mark.parametrize("phi", ["l1", "softmax", "relu"])
def test_sgpt_equals_eq13_on_every_prefix(phi):
    torch.manual_seed(2)
    model = build_model(ModelConfig(arch="sgpt", n_layer=2, n_embd=16, attention=phi), d=3, points=6).eval()
    xs, ys = prompt(P=6)
    with torch.no_grad():
        batched = model(xs, ys)
        for n in range(6):
            assert torch.allclose(batched[:, n], plain_sgpt(model, stacked_prefix(xs, ys, n), phi), atol=1e-5)


def test_sgpt_l1_attention_is_eq6_without_scale():
    H = torch.randn(1, 4, 5)
    allowed = causal_mask(4)
    S = (H @ H.transpose(1, 2)) * allowed
    assert torch.allclose(ATTENTIONS["l1"](S / 7.0, allowed), S / S.abs().sum(-1, keepdim=True))


def test_sgpt_has_no_key_query_value_and_frozen_read_in():
    cell = Cell.from_dict(
        {
            "task": {"d": 3},
            "model": {"arch": "sgpt", "n_layer": 2, "n_embd": 16},
            "N": 5,
            "train": {"steps": 3, "batch_size": 8, "lr": 1e-2, "device": "cpu"},
        }
    )
    trainer = CellTrainer(cell)
    names = {name for name, _ in trainer.model.named_parameters()}
    assert names == {"proj.0.weight", "proj.1.weight", "mlp.0.weight", "mlp.1.weight", "read_out.weight"}
    assert all(p.shape == (16, 16) for n, p in trainer.model.named_parameters() if n != "read_out.weight")
    before = trainer.model.read_in.clone()
    trainer.train_until(3)
    assert torch.equal(trainer.model.read_in, before)
    assert "read_in" in trainer.model.state_dict()  # saved with checkpoints, so resume restores it


@pytest.mark.parametrize("name", list(CONFIGS) + ["gpt2_interleaved", "mlp"])
def test_every_model_trains_a_few_steps_on_cpu(name):
    model = CONFIGS.get(
        name,
        {
            "gpt2_interleaved": dict(arch="gpt2", n_layer=1, n_head=1, n_embd=8),
            "mlp": dict(arch="mlp", width=16),
        }.get(name),
    )
    cell = Cell.from_dict(
        {
            "task": {"d": 3, "noise_std": 0.1},
            "model": model,
            "N": 6,
            "T": 16,
            "train": {"steps": 4, "batch_size": 8, "lr": 1e-2, "device": "cpu"},
        }
    )
    trainer = CellTrainer(cell)
    start = [p.detach().clone() for p in trainer.model.parameters()]
    losses = []
    trainer.train_until(4, lambda step, loss: losses.append(loss))
    assert trainer.step == 4 and all(math.isfinite(v) for v in losses)
    assert any(not torch.equal(a, b) for a, b in zip(start, trainer.model.parameters()))


def test_onelayer_is_eq9_relu_of_feature_row():
    model = build_model(ModelConfig(arch="onelayer", feature_map="linear", width=8), d=2, points=4)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(8, 3), (1, 8)]


def test_both_inputs_concatenate_vectorised_prompt_and_feature_row():
    model = build_model(ModelConfig(arch="mlp", inputs="both", feature_map="hilbert", width=8), d=2, points=4)
    assert model.net[0].weight.shape == (8, 4 * 3 + 3)


@pytest.mark.parametrize(
    "data, message",
    [
        ({"arch": "onelayer"}, "required"),
        ({"arch": "mlp", "inputs": "features"}, "required"),
        ({"arch": "mlp", "feature_map": "hilbert"}, "not used"),
        ({"arch": "mlp", "attention": "l1"}, "only gpt2, sgpt"),
        ({"arch": "gpt2", "attention": "cosine"}, "unknown value"),
        ({"arch": "gpt2", "layout": "diagonal"}, "unknown value"),
        ({"arch": "onelayer", "feature_map": "gaussian"}, "unknown value"),
        ({"arch": "gpt2", "bias": False}, "only mlp"),
    ],
)
def test_invalid_model_settings_say_why(data, message):
    with pytest.raises(ConfigError, match=message):
        ModelConfig(**data)


def test_defaults_keep_existing_cell_keys():
    assert (
        Cell.from_dict({"model": {"arch": "gpt2", "layout": "interleaved", "attention": ""}}).key
        == Cell().key
    )


def test_an_mlp_cell_keyed_before_the_biases_is_not_taken_for_one_with_them():
    # the MLP gained biases (ModelConfig.bias, default true): its key names the setting even at the default,
    # so a store's bias-free MLP result is never read as the biased model's; other models keep their keys
    mlp = Cell(model=ModelConfig(arch="mlp", width=16))
    assert mlp.key != "7c65039ddc491095"  # its key before, when the model had no biases
    assert mlp.key != Cell(model=ModelConfig(arch="mlp", width=16, bias=False)).key
    assert Cell(model=ModelConfig(arch="gpt2")).key == Cell().key
