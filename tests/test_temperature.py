"""Attention temperature on tiny random GPT-2 / LLaMA models, App. J moments, Garg checkpoint loading."""

import math

import pandas as pd
import pytest
import torch
from torch import nn
from transformers import GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

from papers.temperature.analysis import scans
from papers.temperature.garg import garg_model, load_garg_gpt2, to_garg_names
from papers.temperature.patch import (
    attention_modules,
    attention_temperature,
    heuristic_tau,
    recording_score_moments,
    score_moments,
)

VOCAB = 40
SEQ = 12


def tiny_gpt2(attn_implementation: str) -> GPT2LMHeadModel:
    torch.manual_seed(0)
    config = GPT2Config(
        vocab_size=VOCAB,
        n_embd=32,
        n_layer=2,
        n_head=4,
        n_positions=64,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
        attn_implementation=attn_implementation,
    )
    return GPT2LMHeadModel(config).eval()


def tiny_llama(attn_implementation: str) -> LlamaForCausalLM:
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        initializer_range=0.2,
        bos_token_id=0,
        eos_token_id=0,
        pad_token_id=0,
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(config).eval()


BUILDERS = {"gpt2": tiny_gpt2, "llama": tiny_llama}
CASES = [(arch, impl) for arch in BUILDERS for impl in ("eager", "sdpa")]


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, VOCAB, (3, SEQ), generator=generator)
    attention_mask = torch.ones(3, SEQ, dtype=torch.long)
    attention_mask[2, :4] = 0  # left padding on the last prompt
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def logits(model, **extra) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch(), **extra).logits


@pytest.mark.parametrize("arch,impl", CASES)
def test_tau_one_is_bit_for_bit(arch, impl):
    model = BUILDERS[arch](impl)
    reference = logits(model)
    with attention_temperature(model, 1.0):
        patched = logits(model)
    assert torch.equal(patched, reference)


@pytest.mark.parametrize("arch,impl", CASES)
def test_tau_changes_logits_and_restores_exactly(arch, impl):
    model = BUILDERS[arch](impl)
    reference = logits(model)
    scales = [m.scaling for m in attention_modules(model)]
    with attention_temperature(model, 3.0):
        hot = logits(model)
        assert [m.scaling for m in attention_modules(model)] == pytest.approx([s / 3.0 for s in scales])
    assert not torch.allclose(hot, reference, atol=1e-4)
    assert torch.equal(logits(model), reference)


def test_restores_on_exception():
    model = tiny_llama("sdpa")
    scales = [m.scaling for m in attention_modules(model)]
    with pytest.raises(KeyError):
        with attention_temperature(model, 5.0):
            raise KeyError("boom")
    assert [m.scaling for m in attention_modules(model)] == scales


@pytest.mark.parametrize("arch", BUILDERS)
def test_eager_and_sdpa_agree_under_temperature(arch):
    eager, sdpa = BUILDERS[arch]("eager"), BUILDERS[arch]("sdpa")
    real = batch()["attention_mask"].bool()  # padded positions attend to nothing: backends differ there
    with attention_temperature(eager, 2.5), attention_temperature(sdpa, 2.5):
        assert torch.allclose(logits(eager)[real], logits(sdpa)[real], atol=1e-5)


@pytest.mark.parametrize("arch", BUILDERS)
def test_weights_tend_to_uniform_over_causal_window(arch):
    model = BUILDERS[arch]("eager")
    ones = torch.ones(SEQ, SEQ).tril()
    uniform = ones / ones.sum(-1, keepdim=True)  # (Q, K): 1/(i+1) on j <= i
    inputs = {"input_ids": batch()["input_ids"][:2]}
    distances = []
    for tau in (1.0, 10.0, 1e3, 1e6):
        with attention_temperature(model, tau), torch.no_grad():
            weights = model(**inputs, output_attentions=True).attentions
        distances.append(max(float((w - uniform).abs().max()) for w in weights))
    assert distances == sorted(distances, reverse=True)
    assert distances[0] > 0.05
    assert distances[-1] < 1e-5


@pytest.mark.parametrize("tau", [0.0, -1.0, float("nan"), float("inf")])
def test_rejects_bad_tau(tau):
    with pytest.raises(ValueError, match="tau"):
        with attention_temperature(tiny_gpt2("eager"), tau):
            pass


def test_rejects_model_without_scaling():
    with pytest.raises(ValueError, match="scaling"):
        with attention_temperature(nn.Sequential(nn.Linear(3, 3)), 2.0):
            pass


def direct_moments(per_layer_qk, attention_mask: torch.Tensor) -> tuple[float, float]:
    """Independent reference: pooled E[s_ij^2] over real j < i and E[s_ii] over real i, s = q.k / sqrt(dh)."""
    real = attention_mask.bool()  # (B, L)
    lower = torch.ones(SEQ, SEQ, dtype=torch.bool).tril(-1)
    off_mask = real[:, :, None] & real[:, None, :] & lower  # (B, L, L)
    sq_sum = diag_sum = 0.0
    n_off = n_diag = 0
    for q, k in per_layer_qk:  # (B, H, L, dh) each
        s = torch.einsum("bhid,bhjd->bhij", q.double(), k.double()) / math.sqrt(q.shape[-1])
        sq_sum += float((s.square() * off_mask[:, None]).sum())
        n_off += int(off_mask.sum()) * q.shape[1]
        diagonal = s.diagonal(dim1=-2, dim2=-1)  # (B, H, L)
        diag_sum += float((diagonal * real[:, None]).sum())
        n_diag += int(real.sum()) * q.shape[1]
    return sq_sum / n_off, diag_sum / n_diag


def gpt2_qk(model, inputs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    captured = []

    def hook(module, args, output):
        q, k, _ = output.split(model.config.n_embd, dim=-1)  # (B, L, E) each
        heads = model.config.n_head
        split = lambda t: t.reshape(*t.shape[:2], heads, -1).transpose(1, 2)  # (B, H, L, dh)
        captured.append((split(q), split(k)))

    handles = [block.attn.c_attn.register_forward_hook(hook) for block in model.transformer.h]
    with torch.no_grad():
        model(**inputs)
    for handle in handles:
        handle.remove()
    return captured


def llama_qk(model, inputs) -> list[tuple[torch.Tensor, torch.Tensor]]:
    config = model.config
    head_dim = config.hidden_size // config.num_attention_heads
    groups = config.num_attention_heads // config.num_key_value_heads
    rotary, projections = {}, {}
    handles = [model.model.rotary_emb.register_forward_hook(lambda m, a, out: rotary.update(cs=out))]
    for i, layer in enumerate(model.model.layers):
        for name in ("q_proj", "k_proj"):
            handles.append(
                getattr(layer.self_attn, name).register_forward_hook(
                    lambda m, a, out, key=(i, name): projections.update({key: out})
                )
            )
    with torch.no_grad():
        model(**inputs)
    for handle in handles:
        handle.remove()
    cos, sin = rotary["cs"]
    captured = []
    for i in range(config.num_hidden_layers):
        q = projections[i, "q_proj"].reshape(*inputs["input_ids"].shape, -1, head_dim).transpose(1, 2)
        k = projections[i, "k_proj"].reshape(*inputs["input_ids"].shape, -1, head_dim).transpose(1, 2)
        q, k = apply_rotary_pos_emb(q, k, cos, sin)
        captured.append((q, k.repeat_interleave(groups, dim=1)))
    return captured


@pytest.mark.parametrize("arch,capture", [("gpt2", gpt2_qk), ("llama", llama_qk)])
def test_moments_match_direct_computation(arch, capture):
    model = BUILDERS[arch]("sdpa")
    inputs = batch()
    expected_second, expected_first = direct_moments(capture(model, inputs), inputs["attention_mask"])
    moments = score_moments(model, [inputs])
    assert moments.offdiag_second_moment == pytest.approx(expected_second, rel=1e-5)
    assert moments.diag_first_moment == pytest.approx(expected_first, rel=1e-5)
    if expected_first > 0:
        assert moments.heuristic_tau == pytest.approx(expected_second / expected_first, rel=1e-5)
        assert heuristic_tau(model, [inputs]) == pytest.approx(moments.heuristic_tau, rel=1e-9)
    else:  # undefined: Thm. 4.7's ratio needs a positive diagonal moment
        assert math.isnan(moments.heuristic_tau) and math.isnan(heuristic_tau(model, [inputs]))
    real = int(inputs["attention_mask"].sum())
    assert moments.n_diag == real * 4 * 2  # real tokens x heads x layers
    assert len(moments.per_layer) == 2


def test_recording_keeps_outputs_and_restores_implementation():
    model = tiny_llama("sdpa")
    reference = logits(model)
    real = batch()["attention_mask"].bool()
    with recording_score_moments(model):
        assert torch.allclose(logits(model)[real], reference[real], atol=1e-5)
    assert model.config._attn_implementation == "sdpa"
    assert torch.equal(logits(model), reference)


GARG_SIZES = dict(n_dims=5, n_positions=22, n_embd=16, n_layer=2, n_head=2)


def prompts(batch_size=4, points=8, d=5):
    generator = torch.Generator().manual_seed(3)
    xs = torch.randn(batch_size, points, d, generator=generator)
    ys = torch.randn(batch_size, points, generator=generator)
    return xs, ys


@pytest.fixture
def garg_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = garg_model(**GARG_SIZES).eval()
    state = to_garg_names(model.state_dict())  # the released checkpoints' names and vocabulary
    for i in range(GARG_SIZES["n_layer"]):
        state[f"_backbone.h.{i}.attn.bias"] = torch.ones(1, 1, 22, 22).tril()
        state[f"_backbone.h.{i}.attn.masked_bias"] = torch.tensor(-1e4)
    run_dir = tmp_path / "linear_regression" / "pretrained"
    run_dir.mkdir(parents=True)
    torch.save(
        {"model_state_dict": state, "optimizer_state_dict": {}, "train_step": 500000}, run_dir / "state.pt"
    )
    return model, run_dir


def test_garg_checkpoint_loads_strictly_and_predicts(garg_checkpoint):
    original, run_dir = garg_checkpoint
    loaded = load_garg_gpt2(run_dir, **GARG_SIZES)
    xs, ys = prompts()
    predictions = loaded.predict(xs, ys)
    assert predictions.shape == (4, 8)
    assert torch.equal(predictions, original.predict(xs, ys))


def test_garg_prediction_is_causal(garg_checkpoint):
    _, run_dir = garg_checkpoint
    model = load_garg_gpt2(run_dir / "state.pt", **GARG_SIZES)
    xs, ys = prompts()
    base = model.predict(xs, ys)
    changed_ys = ys.clone()
    changed_ys[:, 5] += 10.0
    changed = model.predict(xs, changed_ys)
    assert torch.equal(changed[:, :6], base[:, :6])  # column 5 never sees ys[:, 5]
    assert not torch.allclose(changed[:, 6:], base[:, 6:])


def test_garg_tokens_interleave_and_pad():
    model = garg_model(**GARG_SIZES)
    xs, ys = torch.arange(6.0).reshape(1, 2, 3), torch.tensor([[7.0, 8.0]])
    tokens = model.interleaved_tokens(xs, ys)
    expected = torch.tensor([[[0, 1, 2, 0, 0], [7, 0, 0, 0, 0], [3, 4, 5, 0, 0], [8, 0, 0, 0, 0]]]).float()
    assert torch.equal(tokens, expected)


def test_heuristic_tau_is_undefined_when_the_diagonal_moment_is_not_positive():
    """A GPT-2 whose keys are its queries negated scores every token against itself below zero (s_ii =
    -|q_i|^2): App. J's tau, standing for Thm. 4.7's ratio that needs a positive denominator, is undefined
    (NaN, not a negative temperature), and the per-layer moments show where; the analysis says so in
    words, as it does for cells that logged only a negative tau (before the moments)."""
    model = tiny_gpt2("sdpa")
    width = model.config.n_embd
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, width : 2 * width] = -block.attn.c_attn.weight[:, :width]
            block.attn.c_attn.bias[width : 2 * width] = -block.attn.c_attn.bias[:width]
    moments = score_moments(model, [batch()])
    assert moments.diag_first_moment < 0 and all(diag < 0 for _, diag in moments.per_layer)
    assert math.isnan(moments.heuristic_tau) and math.isnan(moments.columns()["tau_heuristic"])
    assert "tau_heuristic" not in moments.summary() and moments.summary()["score_diag_m1"] < 0
    assert (
        moments.layers_text().startswith("layer 0: off-diagonal E[s^2] ")
        and "layer 1:" in moments.layers_text()
    )

    rows = pd.DataFrame([{"run_id": "r", "x": 1.0, **moments.columns()}])
    value, said = scans.heuristic_tau(rows)
    assert math.isnan(value) and said.startswith(
        "heuristic tau (App. J) undefined: the diagonal scores' mean"
    )
    assert "per layer: layer 0: off-diagonal" in said
    value, said = scans.heuristic_tau(pd.DataFrame({"tau_heuristic": [-4.85]}))  # logged before the moments
    assert math.isnan(value) and "undefined: the cells logged -4.85" in said and "rerun" in said
    positive = pd.DataFrame({"run_id": ["r"], "x": [1.0], "score_diag_m1": [0.5], "score_offdiag_m2": [2.0]})
    assert scans.heuristic_tau(positive) == (4.0, "heuristic tau (App. J) = 4")


def test_garg_model_takes_temperature_and_moments(garg_checkpoint):
    _, run_dir = garg_checkpoint
    model = load_garg_gpt2(run_dir, **GARG_SIZES)
    xs, ys = prompts()
    base = model.predict(xs, ys)
    with attention_temperature(model, 4.0):
        assert not torch.allclose(model.predict(xs, ys), base)
    assert torch.equal(model.predict(xs, ys), base)
    moments = score_moments(model, [{"xs": xs, "ys": ys}])
    assert moments.n_diag == 4 * 16 * 2 * 2  # prompts x tokens x heads x layers
    assert math.isfinite(moments.heuristic_tau) == (moments.diag_first_moment > 0)  # else undefined


def test_garg_strict_load_rejects_missing_weights(garg_checkpoint, tmp_path):
    _, run_dir = garg_checkpoint
    state = torch.load(run_dir / "state.pt", weights_only=True)
    del state["model_state_dict"]["_read_out.bias"]
    torch.save(state, tmp_path / "broken.pt")
    with pytest.raises(RuntimeError, match="_read_out.bias"):
        load_garg_gpt2(tmp_path / "broken.pt", **GARG_SIZES)
    with pytest.raises(FileNotFoundError):
        load_garg_gpt2(tmp_path / "nowhere", **GARG_SIZES)


def test_the_shifts_are_the_ones_the_planner_knows_without_torch():
    """papers.temperature.settings.SHIFT_NAMES (what temperature.shift accepts, without torch) is the
    theory's registry, in order (the order of an unknown name's error)."""
    from papers.temperature.settings import SHIFT_NAMES
    from papers.temperature.theory import SHIFTS

    assert tuple(SHIFTS) == SHIFT_NAMES
