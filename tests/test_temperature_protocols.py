"""Seed 004's own protocols on tiny real runs (real local Ray, a throwaway SQLite MLflow store, the papers'
sweep files cut by --set or copied with a tiny profile), read back by the analysis and the claims:

- Fig. 6 (sweeps/temp_gpt2_scan.yaml): each cell logs every tau's curve, the baselines and its trained
  model; the scan checks its precondition (the shift degrades tau = 1, its error non-monotone in n <= 2d)
  on per-n units, the gain's claim is judged only where the shift degrades the model, and the intervals
  say what they cover: trained models (a GPT-2 trained per cell, Student t over them) or the prompts of
  one model (its prompt seeds pooled);
- the theory claims (Thm. 4.6 against Monte Carlo, the trends of Figs. 1-2, Sec. 4.4's special case) on
  sweeps/temp_fig2.yaml and sweeps/temp_sec44.yaml, with Fig. 2's figures and verdicts;
- Fig. 3 on a part pinned to a profile (SmolLM2's ``smollm``; here a copy of temp_llama_b.yaml whose smollm
  profile runs the tiny random LLaMA at the quick profile's sizes): the reproduction report analyses it
  whenever its file is given, and its own analysis draws Fig. 3 with a verdict per noisy ratio.

The Fig. 6 scan and the LLaMA sweep each run once per module (module fixtures) and serve two tests each.
"""

from pathlib import Path

import pandas as pd
import pytest
import yaml
from mlflow.tracking import MlflowClient
from temperature_checks import analysis_written, check_fig2_theory, check_fig3_llama

from analysis.__main__ import main as analysis_main
from analysis.claims import evaluate
from analysis.pipeline import analyse
from analysis.plugin import Request
from papers.temperature.analysis import claims as claims_temperature
from papers.temperature.analysis.fig6 import DEGRADED, NON_MONOTONE
from papers.temperature.tiny_llm import save_tiny_llama
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]
SWEEPS = Path(__file__).parent.parent / "sweeps"
STATUSES = {"reproduced", "not reproduced", "inconclusive"}
SCAN = str(SWEEPS / "temp_gpt2_scan.yaml")
SMALL = ("train.steps=60", "N=4", "eval.prompts=64", "eval.bootstrap=20", "temperature.taus=[0.5,1,2]")


def claims_of(result, part: str) -> pd.DataFrame:
    mine = [c for c in claims_temperature.CLAIMS if c.figure == part]
    return evaluate({part: result}, claims=mine).set_index("claim")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")


def ran(folder: Path, path: str, profile: str, sets: tuple[str, ...]) -> tuple[str, str]:
    """The sweep file run at ``profile`` with ``sets``, every cell completed, into the store in ``folder``
    (made by the first run; ``folder`` is the working folder while it runs); its (tracking URI, storage)."""
    uri, storage = f"sqlite:///{folder}/mlflow.db", str(folder / "storage")
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(folder)
        outcome = run_sweep(path, profile, sets, tracking_uri=uri, storage=storage)
    assert outcome.ok and len(outcome.completed) == outcome.total, outcome
    return uri, storage


@pytest.fixture(scope="module")
def scan(tmp_path_factory):
    """Fig. 6's quick profile cut by SMALL, run once for this module: 3 seeds, each a GPT-2 trained in its
    cell; (tracking URI, storage, folder)."""
    folder = tmp_path_factory.mktemp("scan")
    return (*ran(folder, SCAN, "quick", SMALL), folder)


def test_the_scans_cells_log_every_tau_the_models_baselines_and_artifacts(scan):
    uri = scan[0]
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name("temp-gpt2-scan-quick").experiment_id
    runs = client.search_runs([experiment], "tags.kind = 'cell'")
    assert sorted(r.data.params["seed"] for r in runs) == ["0", "1", "2"]
    run = next(r for r in runs if r.data.params["seed"] == "0")
    assert run.data.tags["status"] == "complete" and run.info.run_name.startswith(
        "gpt2_scan gpt2 shift=x_scale=1.73205 N=4"
    )
    assert run.data.params["job"] == "gpt2_scan" and run.data.params["temperature.train_model"] == "True"
    for tau in ("0.5", "1", "2"):
        steps = [m.step for m in client.get_metric_history(run.info.run_id, f"temperature/tau_{tau}")]
        assert steps == [1, 2, 3, 4]
    assert len(client.get_metric_history(run.info.run_id, "baseline/least_squares")) == 4
    assert run.data.metrics["tau_best"] in (0.5, 1.0, 2.0)
    assert ("tau_heuristic" in run.data.metrics) == (run.data.metrics["score_diag_m1"] > 0)  # App. J
    assert float(run.data.tags["tau_best"]) == run.data.metrics["tau_best"]
    assert {a.path for a in client.list_artifacts(run.info.run_id)} == {
        "cell.yaml",
        "curves.parquet",
        "model.pt",
        "units.parquet",  # each prompt's error averaged over n, per tau: what the analysis resamples
    }
    curves = pd.read_parquet(client.download_artifacts(run.info.run_id, "curves.parquet"))
    assert {"predictor", "n", "err", "err_lo", "err_hi", "prompts", "tau", "x", "panel"} <= set(
        curves.columns
    )


def test_fig6_checks_its_precondition_and_says_what_its_intervals_cover(scan):
    uri, _, folder = scan
    trained = analyse(Request(SCAN, profile="quick", overrides=SMALL, tracking_uri=uri, out=folder / "a"))
    assert (folder / "a" / "fig6.png").stat().st_size > 1000 and (folder / "a" / "fig6.svg").is_file()
    v = trained.verdicts
    row = v[~v["metric"].str.startswith("precondition")].iloc[0]
    assert "Student t interval over 3 trained models" in row["verdict"]
    assert "covers retraining" in row["verdict"]
    pre = v.set_index("metric")
    assert {DEGRADED, NON_MONOTONE} <= set(pre.index)
    assert (
        pre.loc[DEGRADED, "verdict"].startswith("the shift ") and "without it" in pre.loc[DEGRADED, "verdict"]
    )
    assert "at l <= 2d = 8" in pre.loc[NON_MONOTONE, "verdict"]
    rows = claims_of(trained, "temp-gpt2-scan")
    assert set(rows["status"]) <= STATUSES
    gain = rows.iloc[1]
    if not pre.loc[DEGRADED, "resolved"]:  # the claim is not judged where the shift does no harm
        assert gain["status"] == "inconclusive" and gain["evidence"].startswith(
            "the shift does not degrade this model"
        )
    elif not pre.loc[NON_MONOTONE, "resolved"]:  # degraded, not non-monotone: half the precondition
        assert (
            gain["status"] != "not reproduced" and "the precondition holds only in part" in gain["evidence"]
        )
    table = trained.table
    assert "unshifted/tau=1" in set(table["predictor"])  # the model without the shift, drawn beside

    # one model (the quick scan's seed-0 GPT-2) on three prompt seeds: its prompts pool
    one = (
        *SMALL,
        "name=temp-gpt2-one-model",
        "temperature.train_model=false",
        "temperature.from_sweep=temp-gpt2-scan-quick",
        "temperature.from_params={seed: '0'}",
    )
    ran(folder, SCAN, "quick", one)  # into the scan's store, whose seed-0 model it reads
    pooled = analyse(Request(SCAN, profile="quick", overrides=one, tracking_uri=uri, out=folder / "b"))
    row = pooled.verdicts[~pooled.verdicts["metric"].str.startswith("precondition")].iloc[0]
    assert "over the 192 prompts of one model (3 prompt seeds x 64)" in row["verdict"]
    assert "not retraining" in row["verdict"]


def test_theory_claims_read_the_theory_sweeps(store, tmp_path):
    uri, storage = store
    theory = ("temperature.m=200", "temperature.n_prompts=300")
    fig2 = (*theory, "temperature.l_over_d=[0.5,4]", "temperature.sigma_tests=[0.1,10]")
    sec44 = ("temperature.n_prompts=300", "temperature.l_over_d=[1,16]")
    results = {}
    for part, name, sets in (("temp-fig2", "temp_fig2", fig2), ("temp-sec44", "temp_sec44", sec44)):
        path = str(SWEEPS / f"{name}.yaml")
        assert run_sweep(path, "quick", sets, tracking_uri=uri, storage=storage).ok
        request = Request(path, profile="quick", overrides=sets, tracking_uri=uri, out=tmp_path / name)
        results[part] = claims_of(analyse(request), part)
    check_fig2_theory(analysis_written(tmp_path / "temp_fig2", ["fig2a", "fig2bc"]))  # as the CLI writes it
    fig2 = results["temp-fig2"]
    assert set(fig2["status"]) <= STATUSES and len(fig2) == 7
    agree = fig2.loc["Thm. 4.6 matches Monte Carlo (Fig. 2b)", "evidence"]
    assert "points agree (within 10% of Thm. 4.6 or inside the Monte Carlo 90% interval)" in agree
    rises = fig2.loc["tau_opt rises with sigma_test", "evidence"]
    assert rises.startswith("Thm. 4.7's tau_opt over sigma_test 0.1, 10: ") and "(increasing)" in rises
    gap = fig2.loc["the model (tau = 1) diverges further from Bayes ridge as sigma_test grows (l / d = 1)"]
    assert "raw error (eq. 8)" in gap["evidence"]
    sec = results["temp-sec44"]
    tau, counter = sec["status"].iloc[0], sec.iloc[1]
    assert tau == "reproduced" and "1.06c at l/d = 16" in sec["evidence"].iloc[0]  # c (1 + d/l) -> c
    assert "2c at l/d = 1" in sec["evidence"].iloc[0]
    assert counter["status"] == "reproduced" and "largest difference 0.0%" in counter["evidence"]


@pytest.fixture(scope="module")
def pinned(tmp_path_factory):
    """A copy of temp_llama_b.yaml whose smollm profile (SmolLM2's Fig. 3, a part of the report pinned to
    that profile) runs the tiny random LLaMA with the quick profile's sizes, run once for this module;
    (tracking URI, the copy's path, folder)."""
    folder = tmp_path_factory.mktemp("pinned")
    llm = save_tiny_llama(folder / "tiny-llama")
    document = yaml.safe_load((SWEEPS / "temp_llama_b.yaml").read_text())
    fixtures = SWEEPS.parent / "tests" / "fixtures"
    document["profiles"]["smollm"] = {
        "defaults": {
            "temperature": {
                "llm": str(llm),
                "sciq_train": str(fixtures / "sciq_tiny_train.json"),
                "sciq_test": str(fixtures / "sciq_tiny_test.jsonl"),
                "n_test": 3,
                "taus": [0.5, 1, 2],
                "mc_runs": 2,
                "max_new_tokens": 4,
            }
        },
        "grid": {"temperature.noisy_ratios": [0.0, 0.6], "seed": [0]},
        "resources": {"cpu": 1, "gpu": 0},
    }
    quick = document["profiles"]["quick"]["defaults"]["temperature"]  # its paths, from the copy's folder
    quick.update(llm=str(llm), sciq_train=str(fixtures / "sciq_tiny_train.json"))
    quick.update(sciq_test=str(fixtures / "sciq_tiny_test.jsonl"))
    path = folder / "temp_llama_b.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    uri, _ = ran(folder, str(path), "smollm", ())
    return uri, path, folder


def test_a_part_pinned_to_a_profile_is_analysed_when_its_file_is_given(pinned):
    """Given the file at any profile, the reproduction report analyses its pinned part."""
    uri, path, folder = pinned
    out = folder / "paper"
    assert (
        analysis_main(["--paper", str(path), "--profile", "quick", "--tracking-uri", uri, "--out", str(out)])
        == 0
    )
    table = pd.read_csv(out / "claims.csv", keep_default_na=False)
    pinned = table[table["figure"] == "temp-llama-b-smollm"]
    assert len(pinned) == 3 and set(pinned["status"]) <= STATUSES, pinned["evidence"].tolist()
    assert (pinned["profile"] == "smollm").all() and (pinned["experiment"] == "temp-llama-b-smollm").all()
    assert pinned["sweep_command"].str.contains("--profile smollm").all()
    quick = table[table["figure"] == "temp-llama-b"]
    assert (quick["status"] == "not run").all()  # its quick experiment is not in the store
    heuristic = pinned[pinned["claim"].str.contains("heuristic")].iloc[0]
    assert heuristic["evidence"].startswith("heuristic tau (App. J)")


def test_the_llama_sweeps_analysis_draws_fig3_with_a_row_per_noisy_ratio(pinned, capsys):
    """``python -m analysis`` on the LLaMA sweep alone: Fig. 3 drawn, a pooled verdict and one per noisy
    ratio, exact match in [0, 1], the heuristic tau defined or said to be undefined."""
    uri, path, folder = pinned
    out = folder / "alone"
    assert analysis_main([str(path), "--profile", "smollm", "--tracking-uri", uri, "--out", str(out)]) == 0
    assert "tuned tau vs tau = 1" in capsys.readouterr().out
    check_fig3_llama(analysis_written(out, ["fig3"]))
