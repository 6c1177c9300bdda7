"""Seed 004's own protocols on tiny real runs (real local Ray, a throwaway SQLite MLflow store, the papers'
sweep files cut by --set or copied with a tiny profile), read back by the analysis and the claims:

- Fig. 6 (sweeps/temp_gpt2_scan.yaml): the scan checks its precondition (the shift degrades tau = 1, its
  error non-monotone in n <= 2d) on per-n units, the gain's claim is judged only where the shift degrades the
  model, and the intervals say what they cover: trained models (a GPT-2 trained per cell, Student t over
  them) or the prompts of one model (its prompt seeds pooled);
- the theory claims (Thm. 4.6 against Monte Carlo, the trends of Figs. 1-2, Sec. 4.4's special case) on
  sweeps/temp_fig2.yaml and sweeps/temp_sec44.yaml;
- Fig. 3 on a part pinned to a profile (SmolLM2's ``smollm``; here a copy of temp_llama_b.yaml whose smollm
  profile runs the tiny random LLaMA): the reproduction report analyses it whenever its file is given.
"""

from pathlib import Path

import pandas as pd
import pytest
import yaml

from analysis.__main__ import main as analysis_main
from analysis.claims import evaluate
from analysis.papers.temperature import claims as claims_temperature
from analysis.papers.temperature.fig6 import DEGRADED, NON_MONOTONE
from analysis.pipeline import analyse
from analysis.plugin import Request
from scaling.papers.temperature.tiny_llm import save_tiny_llama
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]
SWEEPS = Path(__file__).parent.parent / "sweeps"
STATUSES = {"reproduced", "not reproduced", "inconclusive"}
SMALL = ("train.steps=60", "N=4", "eval.prompts=64", "eval.bootstrap=20", "temperature.taus=[0.5,1,2]")


def claims_of(result, part: str) -> pd.DataFrame:
    mine = [c for c in claims_temperature.CLAIMS if c.figure == part]
    return evaluate({part: result}, claims=mine).set_index("claim")


@pytest.fixture
def store(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    return f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")


def test_fig6_checks_its_precondition_and_says_what_its_intervals_cover(store, tmp_path):
    uri, storage = store
    path = str(SWEEPS / "temp_gpt2_scan.yaml")
    assert run_sweep(path, "quick", SMALL, tracking_uri=uri, storage=storage).ok  # 3 trained models
    trained = analyse(Request(path, profile="quick", overrides=SMALL, tracking_uri=uri, out=tmp_path / "a"))
    v = trained.verdicts
    scan = v[~v["metric"].str.startswith("precondition")].iloc[0]
    assert (
        "Student t interval over 3 trained models" in scan["verdict"]
        and "covers retraining" in scan["verdict"]
    )
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
    assert run_sweep(path, "quick", one, tracking_uri=uri, storage=storage).ok
    pooled = analyse(Request(path, profile="quick", overrides=one, tracking_uri=uri, out=tmp_path / "b"))
    scan = pooled.verdicts[~pooled.verdicts["metric"].str.startswith("precondition")].iloc[0]
    assert "over the 192 prompts of one model (3 prompt seeds x 64)" in scan["verdict"]
    assert "not retraining" in scan["verdict"]


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


def test_a_part_pinned_to_a_profile_is_analysed_when_its_file_is_given(store, tmp_path):
    """SmolLM2's Fig. 3 is temp_llama_b.yaml at its smollm profile, its own part of the report (here the
    profile of a copy runs the tiny random LLaMA): given the file at any profile, the report analyses it."""
    uri, storage = store
    llm = save_tiny_llama(tmp_path / "tiny-llama")
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
    path = tmp_path / "temp_llama_b.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    assert run_sweep(str(path), "smollm", (), tracking_uri=uri, storage=storage).ok
    out = tmp_path / "paper"
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
