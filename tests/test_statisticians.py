"""Seed 003 constructions (papers.statisticians): the GD transformer is gradient descent, exactly; the
selection transformer outputs eq. 4.5's convex combination of the algorithms within gamma of the best
validation loss (checked against numpy written from eqs. 4.4-4.5 directly)."""

import numpy as np
import pytest
import torch

from papers.context_scaling.tasks import Prompts
from papers.statisticians.constructions import gd_transformer, selection_transformer
from papers.statisticians.predictors import (
    OutOfBound,
    SelectionReader,
    prefix_predictions,
    selection_readout,
)
from papers.statisticians.reference import (
    explicit_gd,
    indicators,
    prefix_gd_weights,
    prefix_ridge_weights,
    validation_split,
)
from papers.statisticians.transformer import Slots, embed, parallel, tokens


def prompts(B, n, d, seed):
    gen = torch.Generator().manual_seed(seed)
    xs = torch.randn(B, n + 1, d, generator=gen, dtype=torch.float64)
    beta = torch.randn(B, d, 1, generator=gen, dtype=torch.float64) / d**0.5
    ys = (xs @ beta).squeeze(-1) + 0.3 * torch.randn(B, n + 1, generator=gen, dtype=torch.float64)
    return xs, ys


@pytest.mark.parametrize("lam", [0.0, 0.4])
@pytest.mark.parametrize("steps,d,n", [(1, 1, 1), (2, 3, 4), (5, 8, 17), (20, 4, 9), (40, 2, 30)])
def test_gd_transformer_is_explicit_gradient_descent(steps, d, n, lam):
    xs, ys = prompts(6, n, d, seed=steps * 100 + d * 10 + n)
    model = gd_transformer(d, steps, eta=0.1, lam=lam)
    assert len(model.layers) == steps + 1
    out = model(tokens(model.slots, xs, ys, indicators(n)))  # (B, n+1, D)
    w = explicit_gd(xs[:, :n], ys[:, :n], torch.ones(n, dtype=torch.bool), steps, 0.1, lam)
    assert torch.allclose(
        out[:, :, model.slots["w"]], w.unsqueeze(1).expand(-1, n + 1, -1), rtol=0, atol=1e-10
    )
    expected = (w.unsqueeze(1) * xs).sum(-1)  # <w, x_i> on every token
    assert torch.allclose(out[:, :, model.slots.at("f")], expected, rtol=0, atol=1e-10)
    assert (out[:, :, model.slots["y"]].squeeze(-1)[:, n] == 0).all()  # the test label is hidden


def test_gd_transformer_on_every_prefix_and_its_limit():
    xs, ys = prompts(5, 12, 3, seed=7)
    for lam in (0.0, 0.5):
        model = gd_transformer(3, 30, eta=0.2, lam=lam)
        preds = prefix_predictions(model, xs, ys, read="f")  # (B, P)
        w = prefix_gd_weights(xs, ys, 30, 0.2, lam)
        assert torch.allclose(preds, (w * xs).sum(-1), rtol=0, atol=1e-10)
        assert (preds[:, 0] == 0).all()
    many = prefix_gd_weights(xs, ys, 3000, 0.2, 0.5)  # GD converges to (G + lam I)^-1 b
    assert torch.allclose(many[:, 1:], prefix_ridge_weights(xs, ys, 0.5)[:, 1:], atol=1e-9)


def test_gd_uses_only_training_examples_with_the_attention_normaliser():
    xs, ys = prompts(4, 10, 3, seed=3)
    train, val = validation_split(10, 0.3)
    assert (train, val) == (7, 3)
    model = gd_transformer(3, 6, eta=0.3, lam=0.2)
    out = model(tokens(model.slots, xs, ys, indicators(10, 0.3)))
    mask = torch.arange(10) < train
    w = explicit_gd(xs[:, :10], ys[:, :10], mask, 6, 0.3, 0.2)  # gradient sum over 7, divided by 10
    assert torch.allclose(out[:, -1, model.slots["w"]], w, rtol=0, atol=1e-10)


def test_dense_weights_follow_eq_2_1():
    xs, ys = prompts(3, 6, 2, seed=1)
    model = gd_transformer(2, 1, eta=0.3, lam=0.1)
    H = tokens(model.slots, xs, ys, indicators(6))
    layer = model.layers[0]
    Q, K, V = layer.attention.dense()  # (M, D, D) each
    assert Q.shape == (4, model.slots.dim, model.slots.dim)  # 2 gradient + 2 weight-decay heads
    scores = torch.einsum("mde,bie,mdf,bjf->bmij", Q, H, K, H)
    update = torch.einsum("bmij,mde,bje->bid", torch.relu(scores) / 6, V, H)
    assert torch.allclose(layer.attention(H, 6), H + update, rtol=0, atol=1e-12)


def selection_numpy(f_tokens, ys, t, gamma):
    """Eqs. 4.4-4.5 written directly: f_tokens (K, N+1) predictions of each algorithm, t the indicators."""
    N = len(t) - 1
    val = t == -1
    losses = ((f_tokens[:, val] - ys[val]) ** 2).sum(1) / N  # what the attention layer averages
    c = np.array(
        [sum(max(lk - lp, 0.0) for p, lp in enumerate(losses) if p != k) for k, lk in enumerate(losses)]
    )
    u = np.maximum(1 - c / gamma, 0.0)
    s = np.maximum(1 - np.concatenate([[0.0], np.cumsum(u)]), 0.0)  # s_k = relu(1 - u_1 - .. - u_{k-1})
    weights = s[:-1] - s[1:]  # lambda_1..lambda_K
    return losses, weights, weights @ f_tokens[:, -1]


@pytest.mark.parametrize("seed", range(4))
def test_selection_is_a_convex_combination_of_the_near_best(seed):
    d, n, steps, eta = 4, 16, 12, 0.15
    lambdas = [1e-3, 0.03, 0.1, 0.3, 1.0, 3.0]
    xs, ys = prompts(3, n, d, seed)
    t = indicators(n, 0.5)
    for gamma in (1e-3, 0.02, 0.1, 1.0):
        model = selection_transformer(d, steps, eta, lambdas, gamma)
        states = model(tokens(model.slots, xs, ys, t))
        slots = model.slots
        for b in range(xs.shape[0]):
            mask = t[:-1] == 1
            f = np.stack(
                [
                    (explicit_gd(xs[b : b + 1, :n], ys[b : b + 1, :n], mask, steps, eta, lam) * xs[b])
                    .sum(-1)
                    .numpy()
                    for lam in lambdas
                ]
            )  # (K, n+1) from explicit GD
            losses, weights, fhat = selection_numpy(f, ys[b].numpy(), t.numpy(), gamma)
            assert np.allclose(states[b, -1, slots["val"]].numpy(), losses, rtol=0, atol=1e-10)
            assert abs(float(states[b, -1, slots.at("fhat")]) - fhat) < 1e-9
            assert weights.min() >= 0 and abs(weights.sum() - 1) < 1e-12
            assert np.all(losses[weights > 0] <= losses.min() + gamma)
            u = states[b, -1, slots["u"]].numpy()  # the weights from the tokens
            s = np.maximum(1 - np.concatenate([[0.0], np.cumsum(u)]), 0.0)
            assert np.allclose(s[:-1] - s[1:], weights, atol=1e-12)


def test_selection_weights_are_not_trivial_somewhere():
    """Across gammas the selection keeps one algorithm, then several: the check above is not vacuous."""
    d, n = 4, 16
    xs, ys = prompts(8, n, d, seed=11)
    lambdas = [1e-3, 0.1, 1.0, 10.0]
    counts = set()
    for gamma in (1e-4, 0.05, 10.0):
        model = selection_transformer(d, 10, 0.15, lambdas, gamma)
        u = model(tokens(model.slots, xs, ys, indicators(n, 0.5)))[:, -1, model.slots["u"]]
        counts |= set((u > 0).sum(-1).tolist())
    assert 1 in counts and max(counts) == len(lambdas)


def test_parallel_rejects_shared_writes_and_bounds_are_enforced():
    slots = Slots([("x", 2), ("y", 1), ("w", 2), ("f", 1), ("e", 1), ("one", 1), ("t", 1)])
    one = embed(gd_transformer(2, 1, 0.1), slots)
    with pytest.raises(ValueError, match="same coordinates"):
        parallel([one, one])
    with pytest.raises(ValueError, match="not a slot"):
        embed(gd_transformer(2, 1, 0.1), slots, {"w": "nope"})
    xs, ys = prompts(2, 5, 2, seed=0)
    with pytest.raises(OutOfBound):
        prefix_predictions(gd_transformer(2, 60, eta=5.0), xs, ys, read="f")


def test_padded_prefix_batches_equal_each_prefix_alone():
    """Prefixes run as padded batches; zero tokens are inert, so padding changes nothing."""
    xs, ys = prompts(3, 14, 3, seed=5)
    for model, read, fraction in (
        (gd_transformer(3, 8, 0.1, lam=0.3), "f", 0.0),
        (selection_transformer(3, 6, 0.1, [0.01, 1.0, 10.0], 0.05), "fhat", 0.5),
    ):
        padded = prefix_predictions(model, xs, ys, read, fraction)  # one padded batch
        alone = prefix_predictions(model, xs, ys, read, fraction, memory=0)  # each prefix alone
        assert torch.allclose(padded, alone, rtol=0, atol=1e-12)
        for n in (0, 1, 7, 14):  # and eq. 2.2 by hand
            H = tokens(model.slots, xs[:, : n + 1], ys[:, : n + 1], indicators(n, fraction))
            assert torch.allclose(model(H)[:, n, model.slots.at(read)], alone[:, n], rtol=0, atol=1e-12)


def test_eq44_holds_on_every_prefix_and_the_check_can_fail():
    """selection_readout checks eq. 4.4 on every prefix (the selected prediction's validation loss within
    gamma of the best algorithm's, the weights on the near-best alone); its own algorithms' slots are GD on
    the training part. Checked with a smaller gamma than the transformer keeps, the same outputs break
    eq. 4.4 where two algorithms apart are combined: the check is not vacuous."""
    d, n, steps, eta, lambdas = 4, 16, 12, 0.15, [1e-3, 0.1, 1.0, 10.0]
    xs, ys = prompts(8, n, d, seed=3)
    model = selection_transformer(d, steps, eta, lambdas, gamma=0.5)
    reads = ["fhat", "f0", "f3"]
    out = selection_readout(model, xs, ys, reads, gamma=0.5, val_fraction=0.5)
    assert torch.equal(out.slots["fhat"], prefix_predictions(model, xs, ys, "fhat", 0.5))
    train, _ = validation_split(n, 0.5)
    w = explicit_gd(xs[:, :n], ys[:, :n], indicators(n, 0.5)[:-1] == 1, steps, eta, lambdas[3])
    assert torch.allclose(out.slots["f3"][:, n], (w * xs[:, n]).sum(-1), rtol=0, atol=1e-10)
    assert out.holds.all() and out.excess[:, 2:].max() <= 0 and out.excess[:, 0].isnan().all()
    assert (out.kept[:, 2:] >= 2).any()  # some prefixes combine algorithms
    strict = selection_readout(model, xs, ys, reads, gamma=1e-6, val_fraction=0.5)
    broken = ~strict.holds[out.kept >= 2]  # (where two algorithms tie within 1e-6, it still holds)
    assert broken.sum() >= 10 and broken.double().mean() > 0.9 and strict.holds[out.kept == 1].all()

    reader = SelectionReader(model, reads, 0.5, 0.5)
    whole = Prompts(xs, ys, {})
    for start in (0, 4, 0):  # batches as evaluate slices them; a batch seen again is not rerun
        part = whole.slice(start, start + 4)
        assert torch.equal(reader.predictor("f0")(part), out.slots["f0"][start : start + 4])
    checks = reader.checks()
    assert len(reader.readouts) == 2 and checks["violations"] == 0 and checks["checked"] == 8 * n
    assert checks["max_excess"] <= 0 and 0 < checks["mixed"] < 1
