"""Figure layouts (analysis/figures.py) on synthetic tidy tables: the layout chosen by name, the panels
each paper figure has, partial sweeps, split rows per level, and the paper's line conventions."""

import math

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from synthetic_tables import lattice_table

from analysis import figures, plots

FAMILIES = ("linear", "sparse_linear", "relu_net", "decision_tree")


def titles(fig) -> list[str]:
    return [ax.get_title() for ax in fig.axes]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


@pytest.mark.parametrize(
    "experiment, layout",
    [
        ("fig1", "fig1"),
        ("fig1-quick", "fig1"),
        ("fig8", "fig8"),
        ("smoke", "smoke"),
        ("smoke-quick", "smoke"),
        ("fig10", "generic"),
        ("fig9", "generic"),
        ("temp-fig1", "generic"),
        ("tiny", "generic"),
    ],
)
def test_layout_is_chosen_by_the_sweep_name(experiment, layout):
    assert figures.layout_name(experiment) == layout


def test_unknown_layout_name_lists_the_known_ones():
    with pytest.raises(ValueError, match="fig1"):
        figures.layout_named("fig99")


def full_table(layout: str):
    rng = np.random.default_rng(0)
    if layout == "fig1":
        return lattice_table(rng=rng)
    if layout in ("fig7", "fig8"):
        return lattice_table(rng=rng, families=("linear", "relu_net"), all_n=False)
    if layout == "fig2":
        return lattice_table(
            rng=rng,
            models=("sgpt", "gpt2"),
            Ts=(math.inf,),
            Ns=(20,),
            baselines=("zero", "least_squares", "ridge", "ridge_tuned"),
        )
    if layout == "fig3":
        return lattice_table(
            rng=rng,
            models=("sgpt", "gpt2"),
            Ts=(math.inf,),
            Ns=(20,),
            baselines=("zero", "ridge_per_level"),
            levels=("noise_std=0.1", "noise_std=0.5"),
        )
    if layout == "fig4":
        return lattice_table(
            rng=rng,
            models=("sgpt", "gpt2"),
            Ts=(2e6,),
            Ns=(20,),
            families=("decision_tree", "relu_net", "sparse_linear"),
            baselines=("zero", "least_squares", "lasso", "xgboost", "nn_student"),
        )
    if layout == "fig5":
        return lattice_table(
            rng=rng,
            models=("sgpt1", "onelayer"),
            Ts=(math.inf,),
            Ns=(10, 20, 30),
            families=FAMILIES,
            all_n=False,
        )
    if layout == "fig6":
        return lattice_table(
            rng=rng,
            models=("row_psiH", "scalar_psiH"),
            Ts=(1e5,),
            Ns=(10, 20, 40),
            families=("linear", "relu_net"),
            all_n=False,
        )
    return lattice_table(rng=rng, Ts=(16, 256, math.inf), Ns=(8, 16))


EXPECTED = {
    "fig1": {"fig1": ["(A) error vs T, N = 10", "(B) error vs N, T = 1e5", "(B) error vs N, T = 1e6"]},
    "fig2": {"fig2": ["error vs n: all prompts"]},
    "fig3": {"fig3": ["error vs n: noise_std=0.1", "error vs n: noise_std=0.5"]},
    "fig4": {"fig4": [f"error vs n: {f}" for f in ("decision_tree", "relu_net", "sparse_linear")]},
    "fig5": {"fig5": [f"error vs N: {f}" for f in sorted(FAMILIES)]},
    "fig6": {"fig6": ["error vs N: linear", "error vs N: relu_net"]},
    "fig7": {
        "fig7": [
            f"{f}: {p}"
            for f in ("linear", "relu_net")
            for p in ("(A) error vs T, N = 10", "(B) error vs N, T = 1e5")
        ]
    },
    "fig8": {
        "fig8": [
            f"{f}: {p}"
            for f in ("linear", "relu_net")
            for p in ("(A) error vs T, N = 10", "(B) error vs N, T = 1e5", "(B) error vs N, T = 1e6")
        ]
    },
    "smoke": {
        "smoke": ["(A) error vs T, N = 8", "(B) error vs N, T = 256", "(B) error vs N, T = inf"],
        "context_scaling": ["T = 16", "T = 256", "T = inf"],
        "task_scaling": ["n = N = 8", "n = N = 16"],
    },
}


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_each_layout_draws_the_papers_panels(layout):
    drawn = figures.draw(full_table(layout), layout)
    assert {stem: titles(fig) for stem, fig in drawn.figures.items()} == EXPECTED[layout]


@pytest.mark.parametrize("layout", sorted(EXPECTED))
def test_each_layout_draws_a_partial_sweep(layout, tmp_path):
    table = full_table(layout)
    rng = np.random.default_rng(1)
    cells = table["cell_key"].unique()
    kept = rng.choice(cells, size=max(1, len(cells) // 2), replace=False)
    partial = table[table["cell_key"].isin(kept) & (table["T"] != 1e6)]
    drawn = figures.draw(partial, layout)
    stem, fig = next(iter(drawn.figures.items()))
    paths = plots.save(fig, tmp_path / stem)
    assert [p.suffix for p in paths] == [".png", ".svg"] and all(p.stat().st_size > 0 for p in paths)


def test_fig1_without_the_wanted_T_says_which_it_drew():
    table = lattice_table(rng=np.random.default_rng(0), Ts=(100, 1e5))
    drawn = figures.draw(table, "fig1-quick")
    assert titles(drawn.figures["fig1"]) == ["(A) error vs T, N = 10", "(B) error vs N, T = 1e5"]
    assert any("drawn at T = 1e5" in note for note in drawn.notes)


def test_empty_panel_says_so_instead_of_failing():
    table = lattice_table(rng=np.random.default_rng(0), families=("linear", "relu_net"), all_n=False)
    table = table[~((table["param.task.family"] == "relu_net") & (table["predictor"] == "model"))]
    fig = figures.draw(table, "fig8").figures["fig8"]
    texts = [t.get_text() for ax in fig.axes for t in ax.texts]
    assert texts.count("no complete cells") == 3


def lines_by_label(ax) -> dict:
    return {line.get_label(): line for line in ax.get_lines()}


def test_theory_baselines_and_zero_line_follow_the_paper():
    fig = figures.draw(full_table("fig1"), "fig1").figures["fig1"]
    lines = lines_by_label(fig.axes[1])
    theory, ols, zero = (
        lines["Bayes ridge (theory)"],
        lines["OLS"],
        lines["zero predictor (= 1)"],
    )
    assert theory.get_color() == "k" and theory.get_linestyle() == "-."
    assert ols.get_linestyle() == "--" and ols.get_color() == "0.35"
    assert list(zero.get_ydata()) == [1.0, 1.0] and zero.get_linestyle() == ":"
    assert fig.axes[1].get_yscale() == "log"


def test_diagonal_panel_plots_the_mean_over_seeds_at_n_equal_N():
    table = full_table("fig1")
    fig = figures.draw(table, "fig1").figures["fig1"]
    gpt2 = lines_by_label(fig.axes[1])["gpt2"]
    rows = table[
        (table["model"] == "gpt2")
        & (table["T"] == 1e5)
        & (table["predictor"] == "model")
        & (table["n"] == table["N"])
    ]
    expected = [rows[rows["N"] == N]["err"].mean() for N in (5, 10, 20)]
    assert list(gpt2.get_xdata()) == [5, 10, 20]
    np.testing.assert_allclose(gpt2.get_ydata(), expected)


def test_figures_plot_the_verdicts_measure_err_over_the_zero_predictors_err_on_the_same_prompts():
    table = full_table("fig1")
    harder = table["cell_key"] == table["cell_key"].iloc[0]  # one cell's prompts: 1.25 x E[y^2] for everyone
    table = table.assign(err=table["err"].where(~harder, table["err"] * 1.25))
    fig = figures.draw(table, "fig1").figures["fig1"]
    ax = fig.axes[1]  # (B) error vs N at T = 1e5
    assert ax.get_ylabel() == "err / zero predictor's err"
    rows = table[(table["model"] == "gpt2") & (table["T"] == 1e5) & (table["n"] == table["N"])]
    zero = rows[rows["predictor"] == "zero"].set_index(["cell_key", "n"])["err"]
    model = rows[rows["predictor"] == "model"].set_index(["cell_key", "n"])
    ratio = (model["err"] / zero).groupby(model["N"]).mean()
    np.testing.assert_allclose(lines_by_label(ax)["gpt2"].get_ydata(), ratio.to_numpy())
    assert list(lines_by_label(ax)["zero predictor (= 1)"].get_ydata()) == [1.0, 1.0]
    without = figures.draw(table[table["predictor"] != "zero"], "fig1").figures["fig1"]  # no zero rows
    assert without.axes[1].get_ylabel() == "error / E[y\u00b2]"


def test_a_baseline_wholly_off_the_frame_is_named_at_the_foot_and_not_in_the_legend():
    table = full_table("fig1")
    low = table["predictor"] == "least_squares"
    table = table.assign(err=table["err"].where(~low, 1e-6))  # OLS far below every model
    fig = figures.draw(table, "fig1").figures["fig1"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert "OLS" not in legend and "Bayes ridge (theory)" in legend
    feet = [t.get_text() for t in fig.axes[1].texts]
    assert any(t.startswith("below the frame: OLS 1e-06") for t in feet), feet


def test_split_rows_are_drawn_per_level_and_never_in_the_overall_lines():
    table = full_table("fig3")
    fig = figures.draw(table, "fig3").figures["fig3"]
    for ax, level in zip(fig.axes, ("noise_std=0.1", "noise_std=0.5")):
        sgpt = lines_by_label(ax)["sgpt"]
        rows = table[table["predictor"] == f"model|{level}"]
        zero = table[table["predictor"] == f"zero|{level}"]["err"].unique()  # the level's own zero predictor
        rows = rows[rows["model"] == "sgpt"].groupby("n")["err"].mean() / zero.item()
        np.testing.assert_allclose(sgpt.get_ydata(), rows.to_numpy())
    overall = figures.draw(table, "fig2").figures["fig2"]
    labels = set(lines_by_label(overall.axes[0]))
    assert not any("|" in label for label in labels)
    sgpt = lines_by_label(overall.axes[0])["sgpt"]
    rows = table[(table["predictor"] == "model") & (table["model"] == "sgpt")].groupby("n")["err"].mean()
    np.testing.assert_allclose(sgpt.get_ydata(), rows.to_numpy())


def test_fig2_notes_the_ridge_lambda_panel_it_cannot_draw():
    drawn = figures.draw(full_table("fig2"), "fig2")
    assert any("ridge error vs lambda" in note for note in drawn.notes)


def test_task_panel_draws_inf_at_the_right_edge_past_a_break():
    fig = figures.draw(full_table("fig1"), "fig1").figures["fig1"]
    ax = fig.axes[0]
    gpt2 = lines_by_label(ax)["gpt2"]
    assert list(gpt2.get_xdata()) == [100, 1e5, 1e6]  # the finite T, joined
    fresh = [line for line in ax.get_lines() if list(line.get_xdata()) == [8e6]]
    assert fresh and fresh[0].get_markerfacecolor() == "white"  # T = inf: an open marker, apart
    assert [t.get_text() for t in ax.get_xticklabels()] == ["100", "1e5", "1e6", "\u221e\n(fresh)"]


def test_close_T_are_labelled_apart_down_from_the_largest():
    """T = 1, 2, 4, ... 256 on a panel 4 inches wide: labelled every other T from 256 down, no two labels
    touching once drawn (before, "128" and "256" ran together); every T keeps its tick."""
    Ts = tuple(2.0**k for k in range(9)) + (math.inf,)
    table = lattice_table(rng=np.random.default_rng(0), models=("mlp",), Ts=Ts, Ns=(4, 8), all_n=False)
    fig = plots.task_scaling_figure(table)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()
    for ax in fig.axes:
        labels = ax.get_xticklabels()
        assert len(ax.get_xticks()) == len(Ts)
        expected = ["1", "", "4", "", "16", "", "64", "", "256", "\u221e\n(fresh)"]
        assert [t.get_text() for t in labels] == expected
        boxes = [t.get_window_extent(renderer) for t in labels if t.get_text()]
        assert all(a.x1 < b.x0 for a, b in zip(boxes, boxes[1:])), [(b.x0, b.x1) for b in boxes]


def test_a_foot_note_breaks_between_the_lines_it_names_never_inside_one():
    table = full_table("fig1")
    low = table["predictor"].isin(["least_squares", "ridge"])
    table = table.assign(err=table["err"].where(~low, 1e-6))  # OLS and Bayes ridge below every model
    fig = figures.draw(table, "fig1").figures["fig1"]
    foot = next(t.get_text() for t in fig.axes[1].texts if t.get_text().startswith("below the frame"))
    assert foot.split("\n") == ["below the frame: OLS 1e-06;", "  Bayes ridge (theory) 1e-06"]


def scan_table(task, models=("sgpt", "gpt2"), n=5, N=20):
    """Ridge-vs-lambda rows as cells log them (papers.context_scaling.train.lambda_scan on real
    prompts), per model's cell."""
    from papers.context_scaling.evaluate import EvalConfig, lambda_scan
    from papers.context_scaling.tasks import fresh_prompts, make_family

    family = make_family(task)
    prompts = fresh_prompts(family, 600, N + 1, seed=0)
    config = EvalConfig(prompts=600, bootstrap=20, lambda_n=(n,), lambdas=(0.01, 0.1, 1.0, 10.0, 100.0))
    scan = lambda_scan(prompts, family.y_second_moment(), config, N, 0, family)
    return pd.concat(
        [
            scan.assign(
                sweep="s",
                cell_key=f"linear-{m}-Tinf-N{N}-s0",
                run_id=f"run-{m}",
                model=m,
                T=math.inf,
                N=N,
                seed=0,
            )
            for m in models
        ],
        ignore_index=True,
    )


def test_fig2_draws_ridge_error_vs_lambda_beside_the_models():
    from papers.context_scaling.tasks import TaskConfig

    table = full_table("fig2")
    drawn = figures.draw(table, "fig2", scans=scan_table(TaskConfig(d=5, noise_std=0.5)))
    fig = drawn.figures["fig2"]
    assert titles(fig) == ["error vs n: all prompts", "ridge error vs lambda, n = 5"]
    lines = lines_by_label(fig.axes[1])
    assert {"ridge vs lambda", "best lambda", "sgpt", "gpt2"} <= set(lines)
    curve = lines["ridge vs lambda"]
    lam, err = curve.get_xdata(), curve.get_ydata()
    assert (
        list(lam) == [0.01, 0.1, 1.0, 10.0, 100.0] and lam[np.argmin(err)] == 1.0
    )  # Bayes: d sigma^2 = 1.25
    model_at_5 = table[(table["model"] == "gpt2") & (table["predictor"] == "model") & (table["n"] == 5)][
        "err"
    ].mean()
    assert lines["gpt2"].get_ydata()[0] == pytest.approx(model_at_5)
    assert fig.axes[1].get_xscale() == "log"
    assert not any("omitted" in note for note in drawn.notes)


def test_fig3_draws_one_lambda_panel_with_a_curve_per_noise_level():
    from papers.context_scaling.tasks import TaskConfig

    scans = scan_table(TaskConfig(family="linear_mixed_noise", d=5, noise_stds=(0.1, 0.5)))
    fig = figures.draw(full_table("fig3"), "fig3", scans=scans).figures["fig3"]
    assert titles(fig) == [
        "error vs n: noise_std=0.1",
        "error vs n: noise_std=0.5",
        "ridge error vs lambda, n = 5",
    ]
    lines = lines_by_label(fig.axes[2])
    assert {
        "ridge vs lambda (noise_std=0.1)",
        "ridge vs lambda (noise_std=0.5)",
        "gpt2 (noise_std=0.1)",
    } <= set(lines)
    low, high = (lines[f"ridge vs lambda (noise_std={s})"] for s in ("0.1", "0.5"))
    assert low.get_xdata()[np.argmin(low.get_ydata())] < high.get_xdata()[np.argmin(high.get_ydata())]


def test_lambda_panel_is_noted_when_absent_and_a_figure_of_its_own_in_other_layouts():
    from papers.context_scaling.tasks import TaskConfig

    drawn = figures.draw(full_table("fig2"), "fig2")
    assert titles(drawn.figures["fig2"]) == ["error vs n: all prompts"]
    assert any("no cell scanned lambda" in note for note in drawn.notes)
    scans = scan_table(TaskConfig(d=5, noise_std=0.5), models=("gpt2", "mlp"), n=8, N=10)
    other = figures.draw(full_table("fig1"), "fig1", scans=scans)
    assert titles(other.figures["ridge_lambda"]) == ["ridge error vs lambda, n = 8"]
