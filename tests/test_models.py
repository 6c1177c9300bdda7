"""Models: causal (column n never sees y_n or later inputs), vectorised layout, registry."""

import pytest
import torch

from scaling.science.models import ModelConfig, build_model, vectorise


@pytest.mark.parametrize(
    "config",
    [
        ModelConfig(arch="gpt2", n_layer=2, n_head=2, n_embd=16),
        ModelConfig(arch="gpt2", n_layer=1, n_head=2, n_embd=16, attn_implementation="eager"),
        ModelConfig(arch="mlp", width=32),
    ],
)
def test_prediction_at_n_uses_only_the_first_n_pairs_and_query(config):
    torch.manual_seed(0)
    model = build_model(config, d=3, points=7).eval()
    xs, ys = torch.randn(4, 7, 3), torch.randn(4, 7)
    base = model(xs, ys)
    assert base.shape == (4, 7)
    ys2, xs2 = ys.clone(), xs.clone()
    ys2[:, 4:] += 10.0  # labels at and after position 4
    xs2[:, 5:] += 10.0  # inputs after position 4
    with torch.no_grad():
        assert torch.allclose(model(xs2, ys2)[:, :5], base[:, :5], atol=1e-5)
        assert not torch.allclose(model(xs2, ys2)[:, 5:], base[:, 5:], atol=1e-3)


def test_vectorised_prompt_layout():
    xs = torch.arange(1, 7, dtype=torch.float).reshape(1, 3, 2)  # x_0=(1,2), x_1=(3,4), x_2=(5,6)
    ys = torch.tensor([[10.0, 20.0, 30.0]])
    v = vectorise(xs, ys)  # (1, 3, 3*2 + 3)
    assert v[0, 0].tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0]
    assert v[0, 2].tolist() == [1, 2, 3, 4, 5, 6, 10, 20, 0]


def test_mlp_is_eq14_without_biases():
    model = build_model(ModelConfig(arch="mlp", width=64), d=4, points=6)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(64, 6 * 5), (1, 64)]
