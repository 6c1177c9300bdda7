"""Answers a reader can trust (issue 18): the "at chance" rule, baselines judged once, the answer in words
with numbers, the fits' fallback on each cell's own curve over n, override provenance through a real MLflow
store, and the figure conventions that can be checked in code."""

import math
import re
from pathlib import Path

import matplotlib.pyplot as plt
import numpy as np
import pandas as pd
import pytest
from synthetic_tables import lattice_table, write_store

from analysis import plots
from analysis.report import fits_html
from analysis.verdicts import answer_line, rule_text
from papers.context_scaling.analysis import figures
from scaling.judge.fit import fit_models
from scaling.judge.verdicts import AT_CHANCE, Rule, context_verdicts, task_verdicts

INF = math.inf
REPO = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def chance_table(seeds=range(3)) -> pd.DataFrame:
    """Two models and the zero predictor on the same prompts, a cell per (model, T, N = n, seed).
    mlp: from 1.10 of the zero predictor's error (worse than predicting zero) at T = 16 to 0.99 at T = inf,
    and flat in n at 0.99-1.00; gpt2: 0.50 -> 0.30 in T, and falling with n."""
    rng = np.random.default_rng(0)
    ratios = {"mlp": {16: 1.10, 256: 1.00, INF: 0.99}, "gpt2": {16: 0.50, 256: 0.38, INF: 0.30}}
    rows = []
    for model, by_T in ratios.items():
        for T, ratio in by_T.items():
            for N in (8, 16):
                for seed in seeds:
                    key = f"{model}-T{T}-N{N}-s{seed}"
                    zero = 1.0 + 0.03 * rng.normal()  # the zero predictor's sampled error
                    own = ratio * (1.0 if model == "mlp" else (8 / N) ** 0.5)
                    cell = dict(
                        sweep="s",
                        cell_key=key,
                        run_id=f"run-{key}",
                        model=model,
                        T=T,
                        N=N,
                        seed=seed,
                        n=N,
                        prompts=512,
                    )
                    for predictor, err in (
                        ("zero", zero),
                        ("model", own * zero * (1 + 0.005 * rng.normal())),
                        ("ridge", 0.05 * zero * 8 / N),
                    ):
                        rows.append(
                            dict(cell, predictor=predictor, err=err, err_lo=0.9 * err, err_hi=1.1 * err)
                        )
    return pd.DataFrame(rows)


def row(verdicts, **where):
    mask = np.logical_and.reduce([verdicts[k] == v for k, v in where.items()])
    assert mask.sum() == 1, verdicts
    return verdicts[mask].iloc[0]


def test_a_model_going_from_worse_than_zero_to_zero_is_at_chance_not_task_scaling():
    table = chance_table()
    task = task_verdicts(table)
    mlp = row(task, model="mlp", predictor="model", n=8)
    assert mlp["drop"] > 0.05 and mlp["drop_lo"] > 0.05  # its error does fall by a resolved amount...
    assert mlp["verdict"] == AT_CHANCE  # ...but ends at the zero predictor's
    assert mlp["x_max"] == INF  # T = inf judged as the largest T
    assert row(task, model="gpt2", predictor="model", n=8)["verdict"] == "task-scales"
    context = context_verdicts(table)
    assert set(context[context.model == "mlp"]["verdict"]) == {AT_CHANCE}
    assert row(context, model="gpt2", predictor="model", T=INF)["verdict"] == "context-scales"
    line = answer_line(context[context.predictor == "model"], task[task.predictor == "model"])
    assert "mlp does not task-scale: at chance" in line and "mlp does not context-scale: at chance" in line
    assert "gpt2 task-scales at n = 8, 16 (at n = 16: err/zero 0.35 -> 0.21 from T = 16 to inf" in line
    assert "%" in line and "[" in line  # the drop with its interval


def test_baselines_are_judged_once_per_group_not_once_per_model():
    context = context_verdicts(chance_table())
    ridge = context[context.predictor == "ridge"]
    assert len(ridge) == 1 and ridge.iloc[0]["model"] == "" and math.isnan(ridge.iloc[0]["T"])
    assert ridge.iloc[0]["verdict"] == "context-scales"
    task = task_verdicts(chance_table())
    assert "ridge" not in set(task.predictor)  # its error does not depend on T: no task verdict


def test_the_rule_is_stated_with_its_margins_level_method_seeds_and_inf():
    text = rule_text(Rule(threshold=0.05, chance_margin=0.05, level=0.9))
    head = "Practical margin 5% (--margin), chance margin 5%, 90% intervals, at least 3 seeds"
    assert text.startswith(head)
    for part in ("0.95", "Student t", "too few seeds", "scales weakly", "at chance", "T = inf", "largest T"):
        assert part in text
    assert rule_text(Rule(threshold=0.02)).startswith("Practical margin 2% (--margin)")
    with pytest.raises(ValueError, match="inf_T"):
        Rule(inf_T="sometimes")


def two_N_table() -> pd.DataFrame:
    """gpt2 cells at N = 8 and 16 (two values of N: too few for err(N) over the lattice), each evaluated at
    every n = 1..N on err = 0.1 + 0.8 n^-0.7, 3 seeds."""
    table = lattice_table(
        rng=np.random.default_rng(1),
        models=("gpt2",),
        Ts=(INF,),
        Ns=(8, 16),
        seeds=(0, 1, 2),
        baselines=("zero",),
    )
    own = table["predictor"] == "model"
    law = 0.1 + 0.8 * table["n"].astype(float) ** -0.7
    noise = np.exp(0.01 * np.random.default_rng(2).normal(size=len(table)))
    table.loc[own, "err"] = (law * noise)[own]
    return table


def test_fits_fall_back_on_each_cells_curve_over_n_and_every_row_says_what_it_is():
    fits = fit_models(two_N_table())
    lattice = fits[(fits.form == "context") & fits.fit_on.str.startswith("lattice")]
    assert len(lattice) == 1 and "not fitted: 2 distinct points" in lattice.iloc[0]["note"]
    assert "within cell" in lattice.iloc[0]["note"]
    within = fits[fits.fit_on.str.startswith("within cell")]
    assert len(within) == 1
    fit = within.iloc[0]
    assert "N = 16" in fit["fit_on"] and fit["converged"]
    assert fit["alpha_lo"] <= fit["alpha"] <= fit["alpha_hi"] and abs(fit["alpha"] - 0.7) < 0.1
    for _, r in fits.iterrows():  # parameters with an interval, or a reason in plain view
        assert (r["converged"] and not math.isnan(r["alpha" if r["form"] != "task" else "beta"])) or r["note"]
    page = fits_html(fits)
    assert "np.float64" not in page and "within cell (N = 16" in page and "Not fitted" in page
    assert (
        f"{fit['alpha']:.4g} [{fit['alpha_lo']:.4g},\u00a0{fit['alpha_hi']:.4g}]" in page
    )  # kept on one line


@pytest.mark.parametrize(
    "param, value, lo, hi, shown",
    [
        ("B", 0.23, 0.23, 1.1e7, "0.23 [0.23,\u00a0\u221e)"),  # an upper end 5e7 times the estimate
        ("E", 0.7305, 7.5e-8, 0.7883, "0.7305 [0,\u00a00.7883]"),  # a floor the data let fall to 0
        ("beta", 0.335, 0.0, 10.0, "0.335 [0,\u00a0\u221e)"),  # the exponent's bound: 10
        ("B", 0.4347, 0.4347, 8.602, "0.4347 [0.4347,\u00a08.602]"),
        ("alpha", 0.0, 0.0, 0.0, "0 [0,\u00a00]"),
    ],
)
def test_a_fit_interval_the_data_leave_open_is_shown_open(param, value, lo, hi, shown):
    from analysis.report import interval_text

    assert interval_text(value, lo, hi, param) == shown


def panel_lines_above(ax) -> list[float]:
    top = ax.get_ylim()[1]
    return [
        y
        for line in ax.get_lines()
        for y in np.asarray(line.get_ydata(), float)
        if np.isfinite(y) and y > top
    ]


def test_the_error_axis_follows_the_models_and_baselines_are_clipped_at_the_frame():
    table = lattice_table(
        rng=np.random.default_rng(0), Ts=(INF,), Ns=(16,), baselines=("zero", "least_squares")
    )
    ols = table["predictor"] == "least_squares"
    table.loc[ols, "err"] = np.where(
        table.loc[ols, "n"] == 4, 50.0, 0.01
    )  # the interpolation peak near n = d
    fig, ax = plt.subplots()
    plots.draw_context(ax, table, plots.model_colors(table), diagonal=False, title="t")
    models = table[table["predictor"] == "model"]
    low, high = ax.get_ylim()
    assert low > 0.01 * 1.5 and low <= models["err"].min()  # OLS at 0.01 does not set the range
    assert high < 50 and high >= max(1.0, models["err_hi"].max())  # nor does its peak
    assert not panel_lines_above(ax)
    assert "E[y" in ax.get_ylabel()  # what the error is divided by
    ticks = [t for t in ax.get_xticks() if low <= t]
    assert all(float(t).is_integer() for t in ax.get_xticks())
    assert ticks


def test_integer_ticks_a_style_per_N_a_break_before_inf_and_the_band_named():
    table = lattice_table(rng=np.random.default_rng(0), Ts=(16, 256, INF), Ns=(8, 16))
    drawn = figures.draw(table, "smoke")
    fig = drawn.figures["smoke"]
    task_ax, *context_axes = fig.axes[:3]
    labels = [t.get_text() for t in task_ax.get_xticklabels()]
    assert labels[:2] == ["16", "256"] and labels[-1].startswith("\u221e")
    for ax in context_axes:
        assert [t.get_text() for t in ax.get_xticklabels()] == ["8", "16"]
    legend = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any(t.startswith("band: min-max over 2 seeds") for t in legend)
    context = drawn.figures["context_scaling"].axes[0]
    styles = {line.get_label(): line.get_linestyle() for line in context.get_lines()}
    assert styles["gpt2 (N=8)"] != styles["gpt2 (N=16)"]
    assert all(float(t).is_integer() for t in context.get_xticks())


@pytest.fixture(scope="module")
def variants_store(tmp_path_factory):
    """A real SQLite MLflow store holding the smoke sweep's cells twice, as the sweep logs them: once
    plain and once run with --set train.steps=60 (same experiment, other cell keys)."""
    from scaling.planning.plan import load_plan

    tmp = tmp_path_factory.mktemp("variants")
    uri = f"sqlite:///{tmp}/mlflow.db"
    sweep = str(REPO / "sweeps" / "smoke.yaml")
    rng = np.random.default_rng(4)
    rows = []
    for overrides in ((), ("train.steps=60",)):
        for planned in load_plan(sweep, "", overrides).cells:
            cell = planned.cell
            params = {f"param.{k}": v for k, v in cell.params().items()}
            for n in range(1, cell.N + 1):
                for predictor, err in (("model", 0.5 + 0.05 * rng.normal()), ("zero", 1.0)):
                    rows.append(
                        dict(
                            sweep="smoke",
                            cell_key=cell.key,
                            run_id=cell.key,
                            model=params["param.model.name"],
                            T=float(cell.T),
                            N=cell.N,
                            seed=cell.seed,
                            predictor=predictor,
                            n=n,
                            err=err,
                            err_lo=err,
                            err_hi=err,
                            prompts=64,
                            **params,
                        )
                    )
    write_store(uri, pd.DataFrame(rows), tmp / "a")
    return uri, sweep


def test_two_set_variants_are_never_pooled_silently(variants_store, tmp_path):
    from analysis.pipeline import analyse
    from analysis.plugin import AnalysisError, Request
    from scaling.planning.plan import load_plan

    uri, sweep = variants_store
    own = {p.cell.params()["train.steps"] for p in load_plan(sweep).cells}  # the sweep file's own (by model)
    plain = analyse(Request(sweep, tracking_uri=uri, out=tmp_path / "plain", bootstrap=20, log=False))
    assert set(plain.table["param.train.steps"]) == own and "60" not in own
    assert any("train.steps = 60" in note for note in plain.notes)
    short = analyse(
        Request(
            sweep,
            tracking_uri=uri,
            out=tmp_path / "short",
            bootstrap=20,
            log=False,
            overrides=("train.steps=60",),
        )
    )
    assert set(short.table["param.train.steps"]) == {"60"}
    assert (
        short.table["cell_key"].nunique() == plain.table["cell_key"].nunique() == len(load_plan(sweep).cells)
    )
    with pytest.raises(AnalysisError, match="no complete cells of this sweep file") as caught:
        analyse(
            Request(sweep, tracking_uri=uri, out=tmp_path / "none", log=False, overrides=("train.steps=7",))
        )
    named = re.search(r"train\.steps = ([^;)]*)", str(caught.value)).group(1)
    assert set(named.split(" / ")) == own | {"60"}, named  # every variant it left out, by its steps
    # by experiment name alone, the MLP's own steps (its preset's) read as one more variant
    refused = r"train\.steps = ([0-9]+ / )+60\).*--set train\.steps="
    with pytest.raises(AnalysisError, match=refused) as caught:
        analyse(Request(None, "smoke", tracking_uri=uri, out=tmp_path / "pooled", bootstrap=20, log=False))
    # what it suggests keeps every model: the sweep file with its --set, or the one setting that picks the
    # whole variant (60: GPT-2 and MLP alike), never the steps of one model's preset (GPT-2's 1000 drops
    # the MLP, which trains 4000)
    suggested = re.findall(r"--set (train\.steps=\d+)", str(caught.value))
    assert suggested == ["train.steps=60"], str(caught.value)
    assert "by its sweep file and the --set it ran with: python -m analysis" in str(caught.value)
    picked = analyse(
        Request(
            None,
            "smoke",
            tracking_uri=uri,
            out=tmp_path / "picked",
            bootstrap=20,
            log=False,
            overrides=("train.steps=60",),
        )
    )
    assert set(picked.table["cell_key"]) == set(short.table["cell_key"])
    gpt2_only = analyse(  # GPT-2's own steps: the MLP (4000, its preset's) is left out, and said so
        Request(
            None,
            "smoke",
            tracking_uri=uri,
            out=tmp_path / "gpt2",
            bootstrap=20,
            log=False,
            overrides=("train.steps=1000",),
        )
    )
    assert set(gpt2_only.table["model"]) == {"gpt2"}
    assert "no cell of mlp has train.steps=1000: left out" in gpt2_only.notes


def test_a_set_variant_is_analysed_into_its_own_folder_and_leaves_the_sweeps_report_as_it_was(
    variants_store, tmp_path, monkeypatch
):
    from analysis.pipeline import analyse
    from analysis.plugin import Request

    uri, sweep = variants_store
    monkeypatch.chdir(tmp_path)  # the default output folders, analysis_out/<...>, go here
    plain = analyse(Request(sweep, tracking_uri=uri, bootstrap=20, log=False))
    assert plain.out == tmp_path / "analysis_out" / "smoke"
    before = {p.name: p.read_bytes() for p in plain.out.iterdir()}
    steps = ("train.steps=60",)
    variant = analyse(Request(sweep, tracking_uri=uri, bootstrap=20, log=False, overrides=steps))
    assert variant.out == tmp_path / "analysis_out" / "smoke+train.steps=60"
    assert {p.name: p.read_bytes() for p in plain.out.iterdir()} == before  # byte for byte
    page = (variant.out / "report.html").read_text()
    assert "<h1>Sweep smoke [train.steps=60]</h1>" in page
    by_name = analyse(
        Request(None, "smoke", tracking_uri=uri, bootstrap=20, log=False, overrides=("train.steps=60",))
    )
    assert by_name.out == variant.out  # the same variant, by its experiment and setting


def test_run_ids_link_to_the_mlflow_ui():
    from types import SimpleNamespace

    from analysis.report import run_link

    table = pd.DataFrame({"run_id": ["abc"]})
    table.attrs["experiment_id"] = "7"
    local = SimpleNamespace(table=table, tracking_uri="sqlite:///mlflow.db", ui_url="")
    # a local store's UI is where `mlflow ui` serves it (the report says so beside the links)
    assert (
        run_link(local, "abc")
        == '<a href="http://127.0.0.1:5000/#/experiments/7/runs/abc?workflowType=machine_learning">'
        "<code>abc</code></a>"
    )
    assert run_link(local, None) == "-"
    for ui, uri in (("http://ui:5000/", "sqlite:///mlflow.db"), ("", "http://ui:5000")):
        result = SimpleNamespace(table=table, tracking_uri=uri, ui_url=ui)
        assert (
            run_link(result, "abc")
            == '<a href="http://ui:5000/#/experiments/7/runs/abc?workflowType=machine_learning">'
            "<code>abc</code></a>"
        )


@pytest.mark.parametrize("margin", ["1.5", "-0.1", "five"])
def test_a_margin_outside_zero_to_one_exits_2_naming_it_and_writing_nothing(margin, tmp_path, capsys):
    from analysis.__main__ import main as analysis_main

    out = tmp_path / "out"
    with pytest.raises(SystemExit) as exit_:
        analysis_main(["sweeps/smoke.yaml", "--margin", margin, "--out", str(out), "--no-log"])
    assert exit_.value.code == 2 and not out.exists()
    assert "--margin" in capsys.readouterr().err
