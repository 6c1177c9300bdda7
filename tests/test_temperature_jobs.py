"""Temperature jobs as cells: registry, validation before anything runs, and each job's curves at tiny
sizes."""

import math
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from mlflow.utils.validation import _validate_metric_name

from papers.temperature.garg import garg_model, to_garg_names
from papers.temperature.jobs import best_tau
from papers.temperature.kind import metric_key, run_job
from papers.temperature.tiny_llm import save_tiny_llama
from scaling.cells import Cell
from scaling.config import ConfigError, canonical
from scaling.kinds.registry import KINDS
from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main
from scaling.tracking.names import curve_metric_key
from tests.conftest import tiny_cell_dict

FIXTURES = Path(__file__).parent / "fixtures"
CONTRACT = {"predictor", "n", "err", "err_lo", "err_hi", "prompts"}
CPU = torch.device("cpu")


def test_unknown_job_fails_listing_known_jobs():
    with pytest.raises(ConfigError, match="job: unknown value 'nope'; known: train, theory_context"):
        Cell.from_dict({"job": "nope"})
    assert set(KINDS) >= {
        "train",
        "theory_context",
        "theory_noise",
        "theory_mean_shift",
        "attention_histograms",
        "gpt2_scan",
        "llm_scan",
    }


def test_training_cells_keep_their_keys_and_params():
    cell = Cell.from_dict(tiny_cell_dict())
    assert "job" not in canonical(cell) and "temperature" not in canonical(cell)
    assert not any(k.startswith("temperature.") for k in cell.params())
    assert cell.params()["job"] == "train"
    scan = Cell.from_dict(
        {**tiny_cell_dict(model={"arch": "gpt2"}), "job": "gpt2_scan", "temperature": {"train_model": True}}
    )
    assert scan.key != cell.key and scan.params()["temperature.train_model"] == "True"


def write_sweep(tmp_path, document) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def test_missing_checkpoint_fails_at_planning_with_file_line_and_key(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = write_sweep(
        tmp_path,
        {
            "name": "scan",
            "defaults": {
                "job": "gpt2_scan",
                "model": {"arch": "gpt2"},
                "temperature": {"checkpoint": "models/nowhere"},
            },
        },
    )
    assert (
        main(
            [str(path), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--storage", str(tmp_path / "s")]
        )
        == 2
    )
    err = capsys.readouterr().err
    line = path.read_text().splitlines().index("    checkpoint: models/nowhere") + 1
    assert (
        f"{path}:{line}: defaults.temperature.checkpoint:"
        f" no Garg et al. checkpoint at {tmp_path}/models/nowhere" in err
    )
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "s").exists()


def test_scan_without_model_source_and_llm_without_paths_fail_naming_the_key(tmp_path):
    path = write_sweep(
        tmp_path, {"name": "scan", "defaults": {"job": "gpt2_scan", "model": {"arch": "gpt2"}}}
    )
    with pytest.raises(
        Exception, match="defaults.temperature.checkpoint: gpt2_scan needs exactly one model source"
    ):
        load_plan(path)
    path = write_sweep(tmp_path, {"name": "llm", "defaults": {"job": "llm_scan", "temperature": {"llm": ""}}})
    line = path.read_text().splitlines().index("    llm: ''") + 1
    with pytest.raises(
        Exception, match=rf"sweep.yaml:{line}: defaults.temperature.llm: the llm_scan job needs a local path"
    ):
        load_plan(path)


def test_relative_paths_become_absolute_from_the_sweep_files_directory(tmp_path, monkeypatch):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "data").mkdir()
    (tmp_path / "elsewhere").mkdir()
    for name in ("sciq_tiny_train.json", "sciq_tiny_test.jsonl"):
        (tmp_path / "data" / name).write_text((FIXTURES / name).read_text())
    save_tiny_llama(tmp_path / "elsewhere" / "llm")
    monkeypatch.chdir(tmp_path / "elsewhere")  # the llm path is relative to the working directory
    path = tmp_path / "sweeps" / "llm.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "llm",
                "defaults": {
                    "job": "llm_scan",
                    "temperature": {
                        "llm": "llm",
                        "sciq_train": "../data/sciq_tiny_train.json",
                        "sciq_test": "../data/sciq_tiny_test.jsonl",
                    },
                },
            }
        )
    )
    cell = load_plan(path).cells[0].cell
    assert cell.temperature.sciq_train == str(tmp_path / "data" / "sciq_tiny_train.json")
    assert cell.temperature.sciq_test == str(tmp_path / "data" / "sciq_tiny_test.jsonl")
    assert cell.temperature.llm == str(tmp_path / "elsewhere" / "llm")


def test_metric_keys_are_valid_mlflow_names_and_training_keys_unchanged():
    assert curve_metric_key("model") == "eval/err" and curve_metric_key("ridge") == "baseline/ridge"
    assert metric_key("tau=1.5") == "temperature/tau_1.5"  # the temperature kinds' own curves
    assert metric_key("simulation/tau=1") == "temperature/simulation/tau_1"
    assert curve_metric_key("model|noise_std=0.5") == "eval/err/noise_std_0.5"
    assert metric_key("tau=2|noise_std=0.5") == "temperature/tau_2/noise_std_0.5"
    assert metric_key("ridge") == "baseline/ridge"  # their baselines as a training cell's
    for name in (
        "tau=0.25",
        "b/theory/tau_opt",
        "softmax/tau=10",
        "simulation/bayes_ridge",
        "ridge|noise_std=0.1",
    ):
        _validate_metric_name(metric_key(name))  # raises on an invalid name


def unique_steps(curves) -> bool:
    step = "step" if "step" in curves else "n"
    return not curves.duplicated(["predictor", step]).any()


def test_theory_context_matches_closed_form_tau_opt_under_covariance_shift():
    # Population Lemma 4.1 parameters, sigma = 0, Sigma_x test = c I: tau_opt = c (1 + d / l) (module doc of
    # temperature_theory, a consequence of eq. 15).
    cell = Cell.from_dict(
        {
            "job": "theory_context",
            "task": {"d": 4, "noise_std": 0.0},
            "temperature": {
                "shift": "input_covariance",
                "shift_kwargs": {"scale": 2.0},
                "l_over_d": [1, 2, 4],
                "params_source": "population",
                "n_prompts": 400,
            },
        }
    )
    result = run_job(cell, CPU)
    curves = result.curves
    assert CONTRACT | {"panel", "curve", "x", "tau", "source", "step"} <= set(curves.columns)
    assert sorted(curves["n"].unique()) == [3, 7, 15] and unique_steps(curves)
    assert result.summary["tau_opt"] == pytest.approx(2.0 * (1 + 4 / 16), rel=1e-9)
    sim = curves[curves["source"] == "simulation"]
    assert (
        (sim["err_lo"] < sim["err"]).all()
        and (sim["err"] < sim["err_hi"]).all()
        and (sim["prompts"] == 400).all()
    )
    theory = curves[curves["source"] == "theory"].set_index(["x", "curve"])["err"]
    assert all(theory[(x, "tau_opt")] <= theory[(x, "tau=1")] for x in (1, 2, 4))


def test_theory_noise_and_mean_shift_and_histograms_have_one_point_per_step():
    noise = run_job(
        Cell.from_dict(
            {
                "job": "theory_noise",
                "task": {"d": 4, "noise_std": 0.1},
                "temperature": {"sigma_tests": [0.1, 3.0], "m": 100, "n_prompts": 200},
            }
        ),
        CPU,
    ).curves
    assert set(noise["panel"]) == {"b", "c"} and unique_steps(noise) and noise["n"].dtype.kind == "i"
    tau_theory = noise[(noise["panel"] == "c") & (noise["source"] == "theory")]["tau"].to_numpy()
    assert tau_theory[1] > tau_theory[0]  # more test noise -> a larger optimal temperature
    mean = run_job(
        Cell.from_dict(
            {
                "job": "theory_mean_shift",
                "task": {"d": 4, "noise_std": 0.1},
                "temperature": {"shift": "input_mean", "ls": [5, 10], "n_prompts": 200},
            }
        ),
        CPU,
    ).curves
    assert set(mean["curve"]) == {"linear", "linearized", "bayes_ridge"} and unique_steps(mean)
    hist = run_job(
        Cell.from_dict(
            {"job": "attention_histograms", "temperature": {"taus": [0.5, 2.0], "hist_l": 200, "bins": 10}}
        ),
        CPU,
    ).curves
    assert unique_steps(hist) and len(hist) == 10 * (1 + 3 * 2)
    mass = (hist["density"] * hist["bin_width"]).groupby(hist["predictor"]).sum()
    assert np.allclose(mass, 1.0)
    assert set(hist["predictor"]) >= {"input", "softmax/tau=0.5", "linear/tau=2"}


@pytest.fixture
def garg_checkpoint(tmp_path):
    torch.manual_seed(0)
    model = garg_model(n_dims=3, n_positions=16, n_embd=16, n_layer=2, n_head=2).eval()
    run_dir = tmp_path / "linear_regression" / "pretrained"
    run_dir.mkdir(parents=True)
    torch.save(
        {"model_state_dict": to_garg_names(model.state_dict()), "optimizer_state_dict": {}, "train_step": 1},
        run_dir / "state.pt",
    )
    return model, run_dir


def test_gpt2_scan_of_a_checkpoint_scores_tau_one_as_the_model_itself(garg_checkpoint):
    from papers.context_scaling.tasks import ShiftConfig, fresh_prompts, make_family

    original, run_dir = garg_checkpoint
    shift = {"x_scale": math.sqrt(3), "task_scale": math.sqrt(3)}  # Sigma_x = 3 I; beta ~ N(0, I_3) as Garg's
    cell = Cell.from_dict(
        {
            "job": "gpt2_scan",
            "task": {"d": 3, "noise_std": 0.0},
            "N": 5,
            "model": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16},
            "eval": {"prompts": 64, "bootstrap": 20, "baselines": ["zero"], "shift": shift},
            "temperature": {"checkpoint": str(run_dir), "n_positions": 16, "taus": [0.5, 1, 2]},
        }
    )
    result = run_job(cell, CPU)
    curves = result.curves
    assert CONTRACT | {"tau", "x", "panel", "step"} <= set(curves.columns)
    assert set(curves["predictor"]) == {"tau=0.5", "tau=1", "tau=2", "zero", "unshifted/tau=1"}
    assert unique_steps(curves)
    assert curves["panel"].iloc[0] == "x_scale=1.73205,task_scale=1.73205"
    # The cell's evaluation prompts scored by the model itself, normalised by E[y^2] = Tr(3 I) = 9.
    prompts = fresh_prompts(make_family(cell.task, ShiftConfig(**shift)), 64, 6, 0)
    assert prompts.xs.var().item() == pytest.approx(3.0, rel=0.15)
    with torch.no_grad():
        sq = (original(prompts.xs, prompts.ys).double() - prompts.ys.double()) ** 2  # (64, 6)
    got = curves[curves["predictor"] == "tau=1"].sort_values("n")["err"].to_numpy()
    assert np.allclose(got, (sq.mean(0) / 9.0)[1:].numpy(), rtol=1e-5)
    zero = curves[curves["predictor"] == "zero"]["err"].to_numpy()
    assert np.allclose(zero, (prompts.ys[:, 1:].double() ** 2).mean(0).numpy() / 9.0, rtol=1e-5)
    means = curves[curves["predictor"].str.startswith("tau=")].groupby("tau")["err"].mean()
    assert result.summary["tau_best"] == means.idxmin() == best_tau(curves)
    assert ("tau_heuristic" in result.summary) == (result.summary["score_diag_m1"] > 0)  # App. J's tau
    assert result.weights is None
    # units.parquet: each prompt's error averaged over n, per tau; their mean is the curve's mean over n
    assert list(result.units.columns) == ["tau", "prompt", "err", "n", "shifted"]
    units = result.units[result.units["n"].isna()]
    assert len(units) == 3 * 64 and units["shifted"].all()
    # and Fig. 6's precondition: tau = 1's error per prompt and n, under the shift (the curve) and without it
    per_n = result.units[result.units["n"].notna()]
    assert len(per_n) == 2 * 64 * 5 and (per_n["tau"] == 1.0).all()
    shifted = per_n[per_n["shifted"]].groupby("n")["err"].mean().to_numpy()
    assert np.allclose(shifted, curves[curves["predictor"] == "tau=1"].sort_values("n")["err"], rtol=1e-9)
    plain = per_n[~per_n["shifted"]].groupby("n")["err"].mean().to_numpy()
    unshifted = curves[curves["predictor"] == "unshifted/tau=1"].sort_values("n")
    assert np.allclose(plain, unshifted["err"], rtol=1e-9) and unshifted["tau"].isna().all()
    assert np.allclose(units.groupby("tau")["err"].mean(), means.sort_index(), rtol=1e-9)
    one = units[units["tau"] == 1.0].sort_values("prompt")["err"].to_numpy()
    assert np.allclose(one, (sq[:, 1:] / 9.0).mean(1).numpy(), rtol=1e-5)


def test_gpt2_scan_takes_no_theory_shift():
    with pytest.raises(
        ConfigError, match="temperature.shift: gpt2_scan shifts its test prompts by eval.shift"
    ):
        Cell.from_dict(
            {
                "job": "gpt2_scan",
                "model": {"arch": "gpt2"},
                "temperature": {"train_model": True, "shift": "input_covariance"},
            }
        )


def test_gpt2_scan_trains_its_own_model_when_asked():
    cell = Cell.from_dict(
        {
            **tiny_cell_dict(model={"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8}, N=4),
            "job": "gpt2_scan",
            "temperature": {"train_model": True, "taus": [1, 2]},
        }
    )
    result = run_job(cell, CPU)
    assert set(result.weights) >= {"read_in.weight", "read_out.bias"}
    assert set(result.curves["predictor"]) == {"tau=1", "tau=2", "zero", "least_squares", "ridge"}


@pytest.fixture(scope="module")
def tiny_llm(tmp_path_factory):
    return save_tiny_llama(tmp_path_factory.mktemp("tiny_llama"))


def test_llm_scan_on_the_tiny_model_and_fixture(tiny_llm):
    cell = Cell.from_dict(
        {
            "job": "llm_scan",
            "seed": 1,
            "temperature": {
                "llm": str(tiny_llm),
                "sciq_train": str(FIXTURES / "sciq_tiny_train.json"),
                "sciq_test": str(FIXTURES / "sciq_tiny_test.jsonl"),
                "n_test": 3,
                "taus": [0.5, 2],
                "panel": "noisy_ratio",
                "n_demos": [2],
                "noisy_ratios": [0.0, 1.0],
                "mc_runs": 2,
                "max_new_tokens": 4,
            },
        }
    )
    result = run_job(cell, CPU)
    curves = result.curves
    assert CONTRACT | {"em", "em_std", "tau", "x", "noisy_ratio", "tau_heuristic", "panel", "step"} <= set(
        curves.columns
    )
    assert len(curves) == 4 and unique_steps(curves)
    assert sorted(curves["step"].unique()) == [0, 1] and (curves["n"] == 2).all()
    assert np.allclose(curves["err"], 1 - curves["em"]) and (curves["prompts"] == 6).all()
    assert np.allclose(curves["err_hi"] - curves["err"], curves["em_std"])
    assert result.summary["tau_best"] in (0.5, 2.0)
    assert ("tau_heuristic" in result.summary) == (result.summary["score_diag_m1"] > 0)  # App. J's tau
    # units.parquet: whether each run answered each question; their mean is the curves' exact match
    units = result.units
    assert list(units.columns) == ["tau", "x", "run", "question", "correct"] and len(units) == 2 * 2 * 2 * 3
    em = units.groupby(["tau", "x"])["correct"].mean()
    assert np.allclose(em.to_numpy(), curves.set_index(["tau", "x"])["em"].loc[em.index].to_numpy())
