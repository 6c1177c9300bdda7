"""Feature maps psi_L and psi_K (seed 001 eq. 10-12, App. B) against plain per-prefix formulas."""

import pytest
import torch

from papers.context_scaling.feature_maps import FEATURE_MAPS, feature_rows, feature_scalar


def prompt(B=3, P=7, d=4, seed=0, dtype=torch.float32):
    gen = torch.Generator().manual_seed(seed)
    return torch.randn(B, P, d, generator=gen, dtype=dtype), torch.randn(B, P, generator=gen, dtype=dtype)


def plain_gd_row(xs, ys, n):
    """Row n of (A A^T) A for A = [[x_0, y_0], .., [x_{n-1}, y_{n-1}], [x_n, 0]], written out."""
    A = torch.cat([xs[: n + 1], ys[: n + 1, None]], dim=1).clone()
    A[n, -1] = 0
    return ((A @ A.T) @ A)[n]


def plain_smoother_row(xs, ys, n, kernel):
    """Eq. 11 in float64 with the kernel evaluated directly (no log space)."""
    xs, ys = xs.double(), ys.double()
    if n == 0:
        return torch.zeros(xs.shape[1] + 1, dtype=torch.float64)
    k = torch.stack([kernel(xs[n], xs[j]) for j in range(n)])
    rows = torch.cat([xs[:n], ys[:n, None]], dim=1)
    return (k[:, None] * rows).sum(0) / k.sum()


def hilbert(x, z):
    return (x - z).norm() ** -x.shape[0]


def exponential(x, z):
    return torch.exp(x @ z)


def test_psi_L_last_entry_is_x_N_X_T_y():
    xs, ys = prompt(B=4, P=6, d=3)
    raw = feature_scalar("linear_sum", xs, ys)
    for b in range(4):
        for n in range(6):
            assert raw[b, n].item() == pytest.approx(float(xs[b, n] @ xs[b, :n].T @ ys[b, :n]), abs=1e-4)


def test_psi_L_rows_are_A_At_A_and_normalised_version_divides_by_rows():
    xs, ys = prompt(B=2, P=6, d=3)
    raw, normalised = feature_rows("linear_sum", xs, ys), feature_rows("linear", xs, ys)
    for b in range(2):
        for n in range(6):
            row = plain_gd_row(xs[b], ys[b], n)
            assert torch.allclose(raw[b, n], row, atol=1e-4)
            assert torch.allclose(normalised[b, n], row / (n + 1), atol=1e-5)


@pytest.mark.parametrize("name, kernel", [("hilbert", hilbert), ("exponential", exponential)])
@pytest.mark.parametrize("d", [2, 5])
def test_kernel_smoother_matches_plain_formula(name, kernel, d):
    xs, ys = prompt(B=2, P=8, d=d, seed=d)
    rows = feature_rows(name, xs, ys)
    for b in range(2):
        for n in range(8):
            assert torch.allclose(rows[b, n].double(), plain_smoother_row(xs[b], ys[b], n, kernel), atol=1e-5)


@pytest.mark.parametrize("name, kernel", [("hilbert", hilbert), ("exponential", exponential)])
def test_kernel_smoother_at_d_50_is_finite_and_exact(name, kernel):
    xs, ys = prompt(B=2, P=12, d=50, seed=3)
    if name == "exponential":
        xs = xs / 2  # exp(x^T x') stays inside float64 for the plain formula
    rows = feature_rows(name, xs, ys)
    assert torch.isfinite(rows).all()
    for b in range(2):
        for n in range(12):
            assert torch.allclose(rows[b, n].double(), plain_smoother_row(xs[b], ys[b], n, kernel), atol=1e-4)


def test_exponential_kernel_survives_huge_inner_products():
    xs, ys = prompt(B=1, P=5, d=3)
    rows = feature_rows("exponential", 100 * xs, ys)
    assert torch.isfinite(rows).all()


def test_hilbert_at_coincident_points_gives_the_kernel_limit():
    # x_4 coincides with x_1 and x_2: the Hilbert weights of the coincident points dominate every other
    # point, so the estimate at x_4 is the mean of y_1 and y_2 (and the smoothed x is x_4 itself).
    xs, ys = prompt(B=1, P=6, d=3, seed=5)
    xs[0, 2] = xs[0, 1]
    xs[0, 4] = xs[0, 1]
    rows = feature_rows("hilbert", xs, ys)
    assert torch.isfinite(rows).all()
    assert rows[0, 4, -1].item() == pytest.approx(float(ys[0, 1:3].mean()), abs=1e-5)
    assert torch.allclose(rows[0, 4, :-1], xs[0, 1], atol=1e-5)
    # at x_2 only x_1 coincides among the context points
    assert rows[0, 2, -1].item() == pytest.approx(float(ys[0, 1]), abs=1e-5)


def test_l1_attention_matches_plain_formula():
    xs, ys = prompt(B=1, P=5, d=3)
    rows = feature_rows("l1_attention", xs, ys)
    for n in range(5):
        A = torch.cat([xs[0, : n + 1], ys[0, : n + 1, None]], dim=1).clone()
        A[n, -1] = 0
        scores = (A @ A.T)[n]
        assert torch.allclose(rows[0, n], scores @ A / scores.abs().sum(), atol=1e-5)


@pytest.mark.parametrize("name", list(FEATURE_MAPS))
def test_row_n_never_sees_y_n_or_later_points(name):
    xs, ys = prompt(B=2, P=8, d=3)
    base = feature_rows(name, xs, ys)
    xs2, ys2 = xs.clone(), ys.clone()
    ys2[:, 4:] = torch.randn(2, 4)
    xs2[:, 5:] = torch.randn(2, 3, 3)
    changed = feature_rows(name, xs2, ys2)
    assert torch.allclose(changed[:, :5], base[:, :5])
    assert not torch.allclose(changed[:, 5:], base[:, 5:])


def test_no_context_row_of_smoothers_is_zero():
    xs, ys = prompt()
    assert feature_rows("hilbert", xs, ys)[:, 0].abs().max() == 0


def test_unknown_feature_map_lists_known():
    with pytest.raises(KeyError, match="hilbert"):
        feature_rows("gaussian", *prompt())
