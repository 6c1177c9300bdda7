"""Every sweeps/figK.yaml of seed 001 plans, full and quick, with the lattice the specification
(../shared/FIGURES.md) gives for it, and ``python -m scaling.sweep sweeps/figK.yaml --dry-run`` lists it
without creating a store."""

import math
from pathlib import Path

import pytest
import yaml

from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main

SWEEPS = Path(__file__).resolve().parent.parent / "sweeps"
FIGURES = [f"fig{k}" for k in range(1, 9)]


def cells(figure, profile=""):
    return [p.cell for p in load_plan(SWEEPS / f"{figure}.yaml", profile).cells]


def tasks(plan):
    """Each task of the plan as (family, d, the family's own setting)."""
    own = {
        "linear": "noise_std",
        "linear_mixed_noise": "noise_stds",
        "sparse_linear": "sparsity",
        "relu_net": "hidden",
        "decision_tree": "depth",
    }
    return {(c.task.family, c.task.d, getattr(c.task, own[c.task.family])) for c in plan}


def models(plan):
    """Each model as (label, arch, the sizes and inputs that define it)."""
    return {
        (
            c.model.label,
            c.model.arch,
            c.model.n_layer if c.model.arch in ("gpt2", "sgpt") else c.model.width,
            c.model.n_head if c.model.arch == "gpt2" else c.model.inputs,
            c.model.feature_map,
        )
        for c in plan
    }


def test_fig1_gpt2_against_the_vectorised_mlp_on_linear_regression():
    plan = cells("fig1")
    assert tasks(plan) == {("linear", 8, 0.22)}
    assert models(plan) == {
        ("gpt2", "gpt2", 8, 8, ""),
        ("mlp", "mlp", 1024, "vectorised", ""),
        ("mlp_padded", "mlp", 1024, "vectorised", ""),
    }
    assert {c.model.n_embd for c in plan if c.model.arch == "gpt2"} == {256}
    assert {c.N for c in plan} == {5, 10, 20, 30, 40}
    # App. A: one MLP per (T, seed) for every length of the figure, zero-padded to the largest
    padded = [c for c in plan if c.model.label == "mlp_padded"]
    assert {(c.N, c.train.lengths) for c in padded} == {(40, (5, 10, 20, 30, 40))}
    assert len(padded) == len({(c.T, c.seed) for c in plan})
    assert {1e5, 1e6} <= {c.T for c in plan} and math.inf in {c.T for c in plan}


def test_fig2_sgpt_gpt2_and_tuned_ridge_with_the_lambda_scan():
    plan = cells("fig2")
    assert tasks(plan) == {("linear", 20, 0.5)}
    assert {(c.model.arch, c.model.n_layer, c.model.n_embd) for c in plan} == {
        ("sgpt", 8, 256),
        ("gpt2", 8, 256),
    }
    assert {c.eval.n for c in plan} == {tuple(range(10, 41, 5))} and {c.N for c in plan} == {40}
    assert all("ridge_tuned" in c.eval.baselines and c.eval.lambda_n for c in plan)


def test_fig3_two_noise_levels_per_level_ridge_and_in_context_validation():
    plan = cells("fig3")
    assert tasks(plan) == {("linear_mixed_noise", 20, (0.1, 0.5))}
    assert {c.eval.n for c in plan} == {()} and {c.N for c in plan} == {40}  # every n in 1..40
    assert all(
        {"ridge_per_level", "ridge_validation"} <= set(c.eval.baselines) and c.eval.lambda_n for c in plan
    )


def test_fig4_three_nonlinear_families_two_million_tasks_and_the_papers_baselines():
    plan = cells("fig4")
    assert tasks(plan) == {("decision_tree", 20, 4), ("relu_net", 20, 100), ("sparse_linear", 20, 3)}
    assert {c.T for c in plan} == {2e6}
    assert {c.model.arch for c in plan} == {"sgpt", "gpt2"}
    assert all({"xgboost", "nn_student", "lasso", "least_squares"} <= set(c.eval.baselines) for c in plan)
    assert {c.eval.n for c in plan} == {(*range(1, 92, 10), 100)}


def test_fig5_one_layer_models_on_the_four_tasks():
    plan = cells("fig5")
    assert {t[:2] for t in tasks(plan)} == {
        (f, 8) for f in ("linear", "sparse_linear", "relu_net", "decision_tree")
    }
    assert {c.N for c in plan} == {10, 20, 30, 40, 50}
    assert {
        (c.model.arch, c.model.n_layer if c.model.arch == "sgpt" else c.model.feature_map) for c in plan
    } == {("sgpt", 1), ("onelayer", "l1_attention")}


def test_fig6_row_and_scalar_forms_of_psi_L_and_psi_H():
    plan = cells("fig6")
    assert tasks(plan) == {("linear", 8, 0.22), ("relu_net", 8, 100)}
    assert {(c.model.arch, c.model.feature_map) for c in plan} == {
        (a, k) for a in ("onelayer", "linear_on_scalar") for k in ("linear", "hilbert")
    }
    assert len({c.T for c in plan}) == 1


def test_fig7_mlps_on_vectorised_input_features_and_both():
    plan = cells("fig7")
    assert tasks(plan) == {("linear", 8, 0.22), ("relu_net", 8, 100)}
    assert {(c.model.inputs, c.model.feature_map) for c in plan} == {
        ("vectorised", ""),
        *((i, k) for i in ("features", "both") for k in ("linear", "hilbert")),
    }
    assert {5, 10, 20, 30, 40, 60, 80} <= {c.N for c in plan}
    assert {1e5} <= {c.T for c in plan} and len({c.T for c in plan}) >= 5
    padded = {(c.model.inputs, c.model.feature_map) for c in plan if c.model.label.endswith("_padded")}
    assert padded == {(c.model.inputs, c.model.feature_map) for c in plan}, "each MLP has App. A's twin"
    assert {(c.N, c.train.lengths) for c in plan if c.train.lengths} == {(80, (5, 10, 20, 30, 40, 60, 80))}


def test_fig8_gpt2_and_sgpt_on_linear_and_relu_tasks():
    plan = cells("fig8")
    assert tasks(plan) == {("linear", 8, 0.22), ("relu_net", 8, 100)}
    assert {(c.model.arch, c.model.n_layer) for c in plan} == {("gpt2", 8), ("sgpt", 8)}
    assert {1e5, 1e6} <= {c.T for c in plan} and 10 in {c.N for c in plan}


@pytest.mark.parametrize("figure", FIGURES)
def test_full_profile_is_the_reference_recipe_and_quick_runs_on_cpus(figure):
    assert all(
        c.train.steps == 500000 and c.train.lr == 1e-4 and c.train.batch_size == 64 for c in cells(figure)
    )
    plan = load_plan(SWEEPS / f"{figure}.yaml", "quick")
    assert plan.name == f"{figure}-quick"
    assert all(p.resources.gpu == 0 for p in plan.cells), "quick profiles run on CPUs"
    assert all(p.cell.train.steps <= 5000 for p in plan.cells)


@pytest.mark.parametrize("figure, d, seeds", [("fig1", 4, 5), ("fig7", 8, 3)])
def test_repro_profiles_run_on_cpus_with_the_papers_mlp_on_its_own_recipe(figure, d, seeds):
    plan = load_plan(SWEEPS / f"{figure}.yaml", "repro")
    assert plan.name == f"{figure}-repro"
    assert all(p.resources.gpu == 0 for p in plan.cells), "repro profiles run on CPUs"
    mlps = [p.cell for p in plan.cells if p.cell.model.arch == "mlp"]
    assert mlps and all(c.model.width == 1024 and c.model.bias for c in mlps)
    assert all(c.train.schedule == "cosine" and c.train.lr == 3e-3 for c in mlps)
    assert {c.task.d for c in cells(figure, "repro")} == {d}
    assert {5, 10} <= {c.N for c in mlps} and {16, math.inf} <= {c.T for c in mlps}
    assert {c.seed for c in mlps} == set(range(seeds))
    padded = [c for c in mlps if c.train.lengths]
    assert padded and all(c.N == c.train.lengths[-1] and c.train.lengths[0] == 5 for c in padded)


@pytest.mark.parametrize("profile", ["quick", "repro"])
@pytest.mark.parametrize("figure", FIGURES)
def test_every_cpu_profile_has_the_three_seeds_a_verdict_needs(figure, profile):
    if profile not in yaml.safe_load((SWEEPS / f"{figure}.yaml").read_text())["profiles"]:
        pytest.skip(f"{figure} has no {profile} profile")
    assert len({c.seed for c in cells(figure, profile)}) >= 3


@pytest.mark.parametrize("profile", ["", "quick"])
@pytest.mark.parametrize("figure", FIGURES)
def test_dry_run_lists_every_cell_and_creates_nothing(figure, profile, tmp_path, capsys):
    args = [
        str(SWEEPS / f"{figure}.yaml"),
        "--dry-run",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/mlflow.db",
        "--storage",
        str(tmp_path / "storage"),
        "--num-gpus",
        "1",  # a local Ray of one GPU holds the full profiles' cells (tests/test_dry_run.py: none here)
    ] + (["--profile", profile] if profile else [])
    assert main(args) == 0
    out = capsys.readouterr().out
    planned = load_plan(SWEEPS / f"{figure}.yaml", profile).cells
    assert f"totals: {len(planned)} pending" in out
    assert all(p.cell.name in out for p in planned)
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("profile", ["", "quick"])
def test_app_a_lengths_sweep_trains_gpt2_and_sgpt_between_untested_lengths(profile):
    """sweeps/fig4_lengths.yaml: GPT-2 and SGPT on Fig. 4's ReLU task, the loss at lengths 1, 11, ..., 91
    (quick: 1, 6, 11, 16) alone, tested at lengths between them too, 3 seeds."""
    plan = [p.cell for p in load_plan(SWEEPS / "fig4_lengths.yaml", profile).cells]
    assert {c.model.arch for c in plan} == {"gpt2", "sgpt"} and len({c.seed for c in plan}) == 3
    assert {c.task.family for c in plan} == {"relu_net"}
    for c in plan:
        assert c.N == c.train.lengths[-1] and c.train.curriculum.points_start == 0
        untested = set(c.eval.n) - set(c.train.lengths)
        assert untested and all(c.train.lengths[0] < n < c.N for n in untested)
    if not profile:
        assert {(c.task.d, c.T, c.train.steps, c.N) for c in plan} == {(20, 2e6, 500000, 91)}
