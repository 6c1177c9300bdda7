"""Tests of scaling/judge/verdicts.py and their wording (analysis/verdicts.py): context/task-scaling verdicts
on synthetic tidy tables."""

import math

import numpy as np
import pandas as pd
import pytest
from synthetic_tables import saturating_law, synthetic_table

from analysis.verdicts import answer_line, format_verdicts
from scaling.judge.verdicts import (
    Rule,
    context_verdicts,
    judge_points,
    log_t_interval,
    paired_drops,
    question_named,
    seed_drops,
    task_verdicts,
    trend_p_value,
)

INF = math.inf
NS = [5, 10, 20, 40]
TS = [1e2, 1e3, 1e4, 1e5, INF]


def table(law, model, seeds=range(4), noise=0.01, seed=0):
    return synthetic_table(
        law, ns=NS, Ts=TS, seeds=seeds, rng=np.random.default_rng(seed), noise=noise, model=model
    )


def one(verdicts, **where):
    mask = np.logical_and.reduce([verdicts[k] == v for k, v in where.items()])
    assert mask.sum() == 1
    return verdicts[mask].iloc[0]


def test_paired_drops_and_interval_against_direct_formula():
    wide = pd.DataFrame({5: [1.0, 0.8, 0.5], 10: [0.9, 0.7, 0.5], 40: [0.5, 0.6, np.nan]}, index=[0, 1, 2])
    drops = paired_drops(wide)
    np.testing.assert_allclose(drops, [1 - 0.5 / 1.0, 1 - 0.6 / 0.8])
    ratios = np.array([0.5, 0.75, 0.6])
    centre, lo, hi = log_t_interval(ratios, 0.9)
    logs = np.log(ratios)
    half = 2.919986 * logs.std(ddof=1) / math.sqrt(3)  # t(0.95, 2 degrees of freedom)
    assert centre == pytest.approx(np.exp(logs.mean()))
    assert (lo, hi) == pytest.approx((np.exp(logs.mean() - half), np.exp(logs.mean() + half)), rel=1e-6)
    assert all(math.isnan(v) for v in log_t_interval(ratios[:2], 0.9)[1:])


def test_seed_drops_are_the_per_seed_drops_each_verdict_averages():
    """The per-seed drops behind every trained group's verdict: as many as its seeds, their ratios' geometric
    mean the verdict's drop, between the ends the verdict reads."""
    both = pd.concat(
        [
            table(saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5), "gpt2", seed=1),
            table(saturating_law(E=0.4, B=2.0, beta=0.5), "mlp", seeds=range(3)),
        ]
    )
    for question in ("context", "task"):
        verdicts = (context_verdicts if question == "context" else task_verdicts)(both)
        drops = seed_drops(both, question)
        held = "T" if question == "context" else "n"
        assert len(drops) == sum({"gpt2": 4, "mlp": 3}[m] for m in verdicts["model"])
        for row in verdicts.itertuples():
            mine = drops[(drops["model"] == row.model) & (drops[held] == getattr(row, held))]
            assert len(mine) == row.n_seeds and np.allclose(mine["log_ratio"], np.log1p(-mine["drop"]))
            assert 1 - math.exp(mine["log_ratio"].mean()) == pytest.approx(row.drop)  # the geometric mean
            assert (mine["x_min"] == row.x_min).all() and (mine["x_max"] == row.x_max).all()


def test_page_trend_p_value_for_perfect_order_is_one_over_factorial_power():
    """m seeds each ranking 3 axis values in the predicted order: exact p = (1/3!)^m."""
    wide = pd.DataFrame({5: [1.0, 0.9, 0.8], 10: [0.7, 0.6, 0.65], 40: [0.3, 0.2, 0.25]})
    assert trend_p_value(wide) == pytest.approx((1 / 6) ** 3, rel=1e-6)
    assert math.isnan(trend_p_value(wide[[5, 40]]))
    assert math.isnan(trend_p_value(wide.iloc[:1]))


def test_flat_curve_does_not_context_scale_and_falling_one_does():
    flat = table(saturating_law(E=0.4, B=2.0, beta=0.5), "mlp")
    falling = table(saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5), "gpt2", seed=1)
    verdicts = context_verdicts(pd.concat([flat, falling]))
    assert len(verdicts) == 2 * len(TS)
    assert set(verdicts[verdicts.model == "mlp"].verdict) == {"does not context-scale"}
    assert set(verdicts[verdicts.model == "gpt2"].verdict) == {"context-scales"}
    row = one(verdicts, model="gpt2", T=INF)
    assert (row.x_min, row.x_max, row.n_seeds) == (5, 40, 4)
    assert row.drop_lo > 0.05 and row.trend_p < 0.05


def test_flat_in_T_does_not_task_scale_and_falling_one_does():
    flat = table(saturating_law(E=0.1, A=1.0, alpha=0.8), "feature-map")
    falling = table(saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5), "mlp", seed=1)
    verdicts = task_verdicts(pd.concat([flat, falling]))
    assert len(verdicts) == 2 * len(NS), "one verdict per (model, n)"
    assert set(verdicts.x_max) == {INF}, "T = inf counts as the largest T"
    left_out = task_verdicts(pd.concat([flat, falling]), rule=Rule(inf_T="left out"))
    assert set(left_out.x_max) == {1e5} and set(left_out.verdict) == set(verdicts.verdict)
    assert set(verdicts[verdicts.model == "feature-map"].verdict) == {"does not task-scale"}
    assert set(verdicts[verdicts.model == "mlp"].verdict) == {"task-scales"}


def test_rising_error_does_not_context_scale():
    rising = table(lambda n, T: 0.2 * n**0.3, "mlp")
    assert set(context_verdicts(rising).verdict) == {"does not context-scale"}


def test_single_seed_and_noisy_borderline_are_inconclusive():
    falling = saturating_law(E=0.05, A=1.0, alpha=0.8)
    single = context_verdicts(table(falling, "gpt2", seeds=[0]))
    assert set(single.verdict) == {"inconclusive"}
    assert single.note.str.contains("seeds").all()
    drops = [0.0, 0.1, 0.02, 0.08]  # mean drop 5%, the threshold
    points = pd.DataFrame(
        {
            "seed": np.repeat(range(4), 3),
            "n": [5, 10, 40] * 4,
            "err": [v for d in drops for v in (0.5, 0.5 - d / 4, 0.5 - d / 2)],
        }
    )
    borderline = judge_points(points, "context")
    assert borderline["drop_lo"] < 0.05 < borderline["drop_hi"]
    assert borderline["verdict"] == "inconclusive"


def test_a_resolved_drop_scales_and_the_trend_test_is_reported_not_required():
    points = pd.DataFrame({"seed": np.repeat(range(3), 3), "n": [5, 10, 40] * 3, "err": [1.0, 0.5, 0.8] * 3})
    verdict = judge_points(points, "context")
    assert verdict["drop_lo"] > 0.05 and verdict["trend_p"] > 0.01
    assert verdict["verdict"] == "context-scales"
    assert (verdict["start"], verdict["end"], verdict["low"]) == (1.0, 0.8, 0.5)


def test_answer_names_models_and_splits_mixed_ones():
    gpt2 = table(saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5), "gpt2")
    mlp = table(saturating_law(E=0.3, B=2.0, beta=0.5), "mlp", seed=1)
    context = context_verdicts(pd.concat([gpt2, mlp]))
    task = task_verdicts(pd.concat([gpt2, mlp]))
    line = answer_line(context, task)
    assert line.startswith(
        "Context scaling: gpt2 context-scales at T = 100, 1000, 1e4, 1e5, inf (at T = inf: error 0.3"
    )
    assert (
        "| mlp does not context-scale at T = 100, 1000, 1e4, 1e5, inf (at T = inf: error 0.30 -> 0.30" in line
    )
    assert (
        "Task scaling: gpt2 task-scales at n = 5, 10, 20, 40" in line and "| mlp task-scales at n = 5" in line
    )
    assert "drop 68% [68%, 69%]" in line
    mixed = context.copy()
    mixed.loc[(mixed.model == "mlp") & (mixed["T"] == INF), "verdict"] = "context-scales"
    assert "| mlp context-scales at T = inf (error 0.30 -> 0.30" in answer_line(mixed, task)
    assert (
        "; does not context-scale at T = 100, 1000, 1e4, 1e5 (at T = 1e5: error 0.31 -> 0.30"
        in answer_line(mixed, task)
    )
    text = format_verdicts(context, task)
    assert text.splitlines()[0] == line and "Task scaling:" in text and "Rule: " in text


def test_units_carry_the_task_settings_that_vary():
    law = saturating_law(E=0.05, A=1.0, alpha=0.8, B=2.0, beta=0.5)
    linear = table(law, "sgpt").assign(**{"task.name": "linear"})
    relu = table(saturating_law(E=0.4), "sgpt", seed=1).assign(**{"task.name": "relu"})
    context = context_verdicts(pd.concat([linear, relu]))
    assert len(context) == 2 * len(TS)
    line = answer_line(context, task_verdicts(pd.concat([linear, relu])))
    assert line.startswith("Context scaling: sgpt name=linear context-scales at T = 100")
    assert "| sgpt name=relu does not context-scale at T = 100" in line


def test_baselines_are_left_out_of_the_answer_by_default():
    gpt2 = table(saturating_law(E=0.05, A=1.0, alpha=0.8), "gpt2")
    ridge = table(saturating_law(E=0.05, A=1.0, alpha=0.8), "gpt2", seed=3).assign(predictor="ridge")
    both = pd.concat([gpt2, ridge])
    context = context_verdicts(both)
    assert set(context.predictor) == {"model", "ridge"}
    text = format_verdicts(context, task_verdicts(both))
    answer, tables = text.split("\nRule: ")
    assert "ridge" not in answer and "ridge" in tables


def test_unknown_question_lists_known():
    with pytest.raises(ValueError, match="context"):
        question_named("depth")


def tracking_zero_table(drop_zero_of: str | None = None) -> pd.DataFrame:
    """A model that predicts nothing: its error is the zero predictor's on the same prompts (to 0.1%),
    and the zero predictor's sampled error happens to fall 20% from N = 5 to 40 (query-label noise)."""
    rng = np.random.default_rng(3)
    rows = []
    for N, z in zip(NS, [1.1, 1.0, 0.95, 0.88]):
        for seed in range(4):
            key = f"mlp-N{N}-s{seed}"
            zero = z * (1 + 0.01 * rng.normal())
            for level, scale in (("", 1.0), ("|noise_std=0.5", 1.3)):
                for predictor, err in (("zero", zero * scale), ("model", 0.999 * zero * scale)):
                    if key == drop_zero_of and predictor == "zero" and not level:
                        continue
                    rows.append(
                        dict(
                            sweep="s",
                            cell_key=key,
                            model="mlp",
                            T=1e5,
                            N=N,
                            seed=seed,
                            predictor=predictor + level,
                            n=N,
                            err=err,
                        )
                    )
    return pd.DataFrame(rows)


def test_verdicts_judge_error_relative_to_the_zero_predictor_on_the_same_prompts():
    table = tracking_zero_table()
    raw = context_verdicts(table, against_zero=False)
    assert one(raw, predictor="model").verdict == "context-scales" and set(raw.measure) == {"err"}
    paired = context_verdicts(table)
    assert set(paired.measure) == {"err/zero"}
    assert len(paired) == 2  # the model, plain and per noise level (the zero predictor is the yardstick)
    assert set(paired.verdict) == {"at chance"}  # within 0.1% of the zero predictor at every n
    assert abs(one(paired, predictor="model|noise_std=0.5")["drop"]) < 1e-3


def test_a_group_missing_a_zero_partner_keeps_the_plain_error():
    paired = context_verdicts(tracking_zero_table(drop_zero_of="mlp-N20-s1"))
    assert one(paired, predictor="model").measure == "err"
    assert one(paired, predictor="model").verdict == "context-scales"
    assert one(paired, predictor="model|noise_std=0.5").measure == "err/zero"


@pytest.mark.parametrize(
    "drops, verdict, note",
    [
        ([0.30, 0.32, 0.31], "context-scales", ""),
        ([0.035, 0.04, 0.045], "context-scales weakly", "under the 5% margin"),  # resolved above 0, under 5%
        ([-0.01, 0.02, 0.01], "does not context-scale", ""),  # under 5%, not resolved above 0
        ([-0.05, -0.06, -0.04], "does not context-scale", ""),  # a resolved rise
        ([0.03, 0.07, 0.05], "inconclusive", "not on either side of the 5% margin"),
        ([-0.05, 0.2, 0.08], "inconclusive", "drop not resolved above 5%"),
    ],
)
def test_the_margin_splits_scaling_weak_scaling_and_none(drops, verdict, note):
    """Three seeds, err/zero 0.5 at n = 5 falling by each seed's drop at n = 40 (well below chance)."""
    rows = [(s, n, 0.5 * (1 - d if n == 40 else 1)) for s, d in enumerate(drops) for n in (5, 40)]
    v = judge_points(pd.DataFrame(rows, columns=["seed", "n", "err"]), "context")
    assert (v["verdict"], note in v["note"]) == (verdict, True), v
