"""Models: causal (column n never sees y_n or later inputs), vectorised layout, registry."""
import pytest
import torch

from scaling.models import ModelConfig, build_model, vectorise


@pytest.mark.parametrize("config", [ModelConfig(arch="gpt2", n_layer=2, n_head=2, n_embd=16),
                                    ModelConfig(arch="gpt2", n_layer=1, n_head=2, n_embd=16,
                                                attn_implementation="eager"),
                                    ModelConfig(arch="mlp", width=32)])
def test_prediction_at_n_uses_only_the_first_n_pairs_and_query(config):
    torch.manual_seed(0)
    model = build_model(config, d=3, points=7).eval()
    xs, ys = torch.randn(4, 7, 3), torch.randn(4, 7)
    base = model(xs, ys)
    assert base.shape == (4, 7)
    ys2, xs2 = ys.clone(), xs.clone()
    ys2[:, 4:] += 10.0      # labels at and after position 4
    xs2[:, 5:] += 10.0      # inputs after position 4
    with torch.no_grad():
        assert torch.allclose(model(xs2, ys2)[:, :5], base[:, :5], atol=1e-5)
        assert not torch.allclose(model(xs2, ys2)[:, 5:], base[:, 5:], atol=1e-3)


def test_vectorised_prompt_layout():
    xs = torch.arange(1, 7, dtype=torch.float).reshape(1, 3, 2)   # x_0=(1,2), x_1=(3,4), x_2=(5,6)
    ys = torch.tensor([[10.0, 20.0, 30.0]])
    v = vectorise(xs, ys)                                           # (1, 3, 3*2 + 3)
    assert v[0, 0].tolist() == [1, 2, 0, 0, 0, 0, 0, 0, 0]
    assert v[0, 2].tolist() == [1, 2, 3, 4, 5, 6, 10, 20, 0]


def test_mlp_is_eq14_without_biases():
    model = build_model(ModelConfig(arch="mlp", width=64), d=4, points=6)
    shapes = [tuple(p.shape) for p in model.parameters()]
    assert shapes == [(64, 6 * 5), (1, 64)]


def backbone_forward(model, xs, ys):
    """GPT2InContext's interleaved forward through the Hugging Face backbone itself."""
    from scaling.models import interleaved_tokens

    hidden = model.backbone(inputs_embeds=model.read_in(interleaved_tokens(xs, ys))).last_hidden_state
    return model.read_out(hidden[:, 0::2]).squeeze(-1)


@pytest.mark.parametrize("layers", [1, 3])
def test_gpt2_own_blocks_match_the_backbone_in_outputs_and_gradients(layers):
    """x_token_hidden (the last block skips the y tokens) computes what GPT2Model computes."""
    torch.manual_seed(0)
    model = build_model(ModelConfig(arch="gpt2", n_layer=layers, n_head=4, n_embd=32), d=5, points=9)
    assert model.runs_own_blocks
    xs, ys = torch.randn(6, 9, 5), torch.randn(6, 9)
    grads = []
    for forward in (model, lambda a, b: backbone_forward(model, a, b)):
        model.zero_grad()
        out = forward(xs, ys)
        (out - ys).square().mean().backward()
        grads.append((out.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    (ours, ours_grads), (ref, ref_grads) = grads
    assert ours.shape == (6, 9)
    torch.testing.assert_close(ours, ref, rtol=1e-5, atol=1e-6)
    assert len(ours_grads) == len(ref_grads) > 0
    for a, b in zip(ours_grads, ref_grads):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-6)


def test_gpt2_own_blocks_follow_attention_temperature_and_step_aside_for_other_attention():
    from scaling.temperature import attention_temperature, recording_score_moments

    torch.manual_seed(1)
    model = build_model(ModelConfig(arch="gpt2", n_layer=2, n_head=2, n_embd=16), d=3, points=7).eval()
    xs, ys = torch.randn(4, 7, 3), torch.randn(4, 7)
    with torch.no_grad():
        plain = model(xs, ys)
        with attention_temperature(model, 1e-3):   # initial scores are small: sharpen them
            hot = model(xs, ys)
            torch.testing.assert_close(hot, backbone_forward(model, xs, ys), rtol=1e-5, atol=1e-6)
        assert not torch.allclose(hot, plain, atol=1e-4)
        with recording_score_moments(model) as recorder:    # swaps the attention: the backbone runs
            assert not model.runs_own_blocks
            torch.testing.assert_close(model(xs, ys), plain, rtol=1e-5, atol=1e-6)
        assert recorder.moments() is not None
        assert model.runs_own_blocks
    relu = build_model(ModelConfig(arch="gpt2", n_layer=1, n_head=2, n_embd=16, attention="relu"), d=3, points=7)
    assert not relu.runs_own_blocks
