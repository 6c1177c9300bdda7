"""Models: causal (column n never sees y_n or later inputs), vectorised layout, registry."""

import pytest
import torch

from papers.context_scaling.architectures import ATTENTION_NAMES, FEATURE_MAP_NAMES, MODELS
from papers.context_scaling.attention import ATTENTIONS
from papers.context_scaling.feature_maps import FEATURE_MAPS
from papers.context_scaling.models import BUILDERS, ModelConfig, build_model, vectorise


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


def test_mlp_is_eq14_with_biases_and_without_them_as_printed():
    model = build_model(ModelConfig(arch="mlp", width=64), d=4, points=6)
    assert [tuple(p.shape) for p in model.parameters()] == [(64, 6 * 5), (64,), (1, 64), (1,)]
    printed = build_model(ModelConfig(arch="mlp", width=64, bias=False), d=4, points=6)
    assert [tuple(p.shape) for p in printed.parameters()] == [(64, 6 * 5), (1, 64)]


def odd_part(model, xs, ys):
    """f(v) - f(-v) of the model on the prompt v = (xs, ys)."""
    with torch.no_grad():
        return model(xs, ys) - model(-xs, -ys)


def test_a_bias_free_mlp_is_linear_in_its_odd_part_and_the_default_mlp_is_not():
    # relu(z) - relu(-z) = z: without biases f(v) - f(-v) = v W_0 W_1, linear in the prompt, so on tasks
    # whose best predictor is odd in (x, y) (all of them here) the bias-free MLP is at best linear
    torch.manual_seed(0)
    xs, ys = torch.randn(8, 5, 3), torch.randn(8, 5)
    for bias, linear in ((False, True), (True, False)):
        model = build_model(ModelConfig(arch="mlp", width=32, bias=bias), d=3, points=5)
        with torch.no_grad():
            for p in model.parameters():
                p.normal_()  # biases as large as the weights: far from linear unless there are none
        once, twice = odd_part(model, xs, ys), odd_part(model, 2 * xs, 2 * ys)
        assert torch.allclose(twice, 2 * once, rtol=1e-4, atol=1e-3) == linear, bias


def test_the_vectorised_mlp_learns_in_context_only_with_biases():
    # fresh tasks (T = inf), d = 1, N = 3, 400 steps: the default MLP predicts y from the context (mean
    # err/zero 0.37 over n = 1..3, measured); eq. 14 as printed, without biases, stays at the zero
    # predictor's error (0.94), as its odd part is linear (above) and E[y | prompt] is odd in the prompt
    from papers.context_scaling.evaluate import EvalConfig
    from papers.context_scaling.tasks import TaskConfig
    from papers.context_scaling.train import CellTrainer, TrainConfig
    from scaling.cells import Cell

    errors = {}
    for bias in (True, False):
        cell = Cell(
            task=TaskConfig(family="linear", d=1, noise_std=0.1),
            model=ModelConfig(arch="mlp", width=64, bias=bias),
            train=TrainConfig(steps=400, batch_size=64, lr=1e-2),
            eval=EvalConfig(prompts=2048, baselines=("zero",), bootstrap=10),  # y = beta x: heavy tails
            N=3,
        )
        trainer = CellTrainer(cell)
        trainer.train_until(cell.train.steps)
        curves = trainer.evaluate()
        errors[bias] = curves[curves["predictor"] == "model"]["err"]
    assert errors[True].mean() < 0.5, errors[True].tolist()
    assert errors[False].mean() > 0.85, errors[False].tolist()


def test_every_architecture_has_a_builder_and_the_names_are_the_functions():
    """The torch-free registries (papers.context_scaling.architectures) name exactly what the
    torch side builds and computes, in order."""
    assert list(BUILDERS) == list(MODELS)
    assert ATTENTION_NAMES == tuple(ATTENTIONS)
    assert FEATURE_MAP_NAMES == tuple(FEATURE_MAPS)


@pytest.mark.parametrize(
    "model",
    [
        {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16},
        {"arch": "gpt2", "n_layer": 1, "n_head": 4, "n_embd": 8, "layout": "stacked"},
        {"arch": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "attention": "l1"},
        {"arch": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "layout": "stacked", "attention": "relu"},
        {"arch": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 8, "attn_implementation": "eager"},
        {"arch": "mlp", "width": 12},
        {"arch": "mlp", "width": 12, "bias": False},
        {"arch": "mlp", "width": 12, "inputs": "features", "feature_map": "hilbert"},
        {"arch": "mlp", "width": 12, "inputs": "both", "feature_map": "linear", "bias": False},
        {"arch": "sgpt", "n_layer": 3, "n_embd": 8},
        {"arch": "sgpt", "n_layer": 1, "n_embd": 8, "attention": "softmax"},
        {"arch": "onelayer", "width": 12, "feature_map": "exponential"},
        {"arch": "linear_on_scalar", "feature_map": "l1_attention"},
    ],
)
def test_the_parameter_count_without_torch_is_the_built_models(model):
    """ModelFacts.parameters (the packer's step cost, planned without torch) is the count of the model
    built on the meta device, which the packer counted before."""
    config = ModelConfig(**model)
    for d, points in ((3, 5), (8, 41)):
        with torch.device("meta"):
            built = build_model(config, d, points)
        assert MODELS[config.arch].parameters(config, d, points) == sum(p.numel() for p in built.parameters())
