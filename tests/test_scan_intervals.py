"""The temperature scans' verdict intervals come from the units the cells log (units.parquet): a bootstrap
over questions and Monte Carlo runs for the LLM scan; for the GPT-2 scan Student t over the prompts of one
model or over trained models (papers/temperature/analysis/resample.py, papers/temperature/analysis/scans.py).
Two Monte Carlo runs that agree no longer give a zero-width interval, and a store whose cells logged no units
is still analysed, its gains not judged."""

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from analysis.__main__ import main as analysis_main
from papers.temperature.analysis import resample
from papers.temperature.llm_icl import (
    load_causal_lm,
    load_sciq,
    make_retriever,
    normalize_answer,
    query_text,
)
from papers.temperature.patch import attention_temperature
from papers.temperature.scan import PromptSet, generate_token_answers
from papers.temperature.tiny_llm import save_tiny_llama
from scaling.sweep.phases import run_sweep

ROOT = Path(__file__).parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
SWEEP = str(ROOT / "sweeps" / "temp_llama_a.yaml")


# ----------------------------------------------------------------------------- the resampling itself


def test_crossed_bootstrap_resamples_questions_when_the_runs_agree():
    # two runs, identical answers: a gain on 1 question of 4 (a spread over runs of zero)
    one = np.zeros((1, 2, 4))
    best = one.copy()
    best[0, :, 0] = 1.0
    drawn = resample.crossed({"one": one, "best": best, "gain": best - one}, resamples=1000)
    value, lo, hi = drawn["gain"]
    assert value == 0.25 and lo == 0.0 and hi > 0.25  # P(question 0 not drawn) = (3/4)^4 > 5%
    assert drawn["one"] == (0.0, 0.0, 0.0)  # nothing varies: no width
    assert drawn == resample.crossed({"one": one, "best": best, "gain": best - one}, resamples=1000)


def test_crossed_bootstrap_resamples_runs_too():
    # every question answered alike, the runs disagree: the interval comes from the runs
    gain = np.array([[[1.0] * 5, [0.0] * 5, [1.0] * 5]])
    value, lo, hi = resample.crossed({"gain": gain}, resamples=500)["gain"]
    assert value == pytest.approx(2 / 3) and lo < value < hi


def test_one_model_pools_its_prompt_seeds_and_trained_models_are_the_units():
    rng = np.random.default_rng(1)
    same = [rng.normal(1.0, 0.1, 200)] * 2  # two prompt seeds of one model: their prompts pool
    value, lo, hi = resample.over_prompts({"gain": same})["gain"]
    assert lo < value < hi and hi - lo < 0.05
    apart = [rng.normal(1.0, 0.1, 200), rng.normal(0.0, 0.1, 200), rng.normal(0.5, 0.1, 200)]
    value, lo, hi = resample.over_models({"gain": apart})["gain"]  # three trained models that disagree
    assert value == pytest.approx(0.5, abs=0.02) and lo < -0.3 and hi > 1.3  # t(2) over 3 means: wide


def test_bootstrap_refuses_arrays_that_do_not_line_up():
    with pytest.raises(ValueError, match="one shape"):
        resample.crossed({"a": np.zeros((1, 2, 3)), "b": np.zeros((1, 2, 4))}, 10)
    with pytest.raises(ValueError, match="same cells"):
        resample.over_prompts({"a": [np.zeros(3)], "b": [np.zeros(4)]})


# ----------------------------------------------------------------------------- the LLM scan end to end


def tiny_answers(llm: Path, taus: tuple[float, ...]) -> dict[float, list[str]]:
    """The tiny LLaMA's answers to the quick profile's 4 test questions with 1 clean demonstration."""
    model, tokenizer = load_causal_lm(str(llm), device="cpu")
    train = load_sciq(str(FIXTURES / "sciq_tiny_train.json"))
    test = load_sciq(str(FIXTURES / "sciq_tiny_test.jsonl"))[:4]
    demos = make_retriever("tfidf", train).top_k([query_text(item) for item in test], 1)
    prompts = PromptSet.build(tokenizer, train, test, demos, 0.0, 1, 0)
    out = {}
    for tau in taus:
        with attention_temperature(model, tau):
            out[tau] = generate_token_answers(model, tokenizer, prompts.token_ids, 8, 8, True)
    return out


@pytest.mark.e2e
@pytest.mark.usefixtures("local_ray")
def test_two_monte_carlo_runs_that_agree_no_longer_give_a_zero_width_interval(tmp_path, monkeypatch, capsys):
    """The quick profile of temp_llama_a on the real tiny LLaMA, at noisy ratio 0 (the two Monte Carlo runs
    share their prompts, so they agree exactly). The random model answers no SciQ question, so the test
    split is the fixture's first 4 questions with one answer key set to what the model says at tau = 0.5
    (and not at tau = 1 or 2): a gain of 1 question in 4 whose spread over runs is zero. The old interval
    (over runs only) was zero wide and called it resolved; the bootstrap over questions is not zero wide,
    and with 1 question in 4 it includes zero."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("SCALING_CACHE", str(tmp_path / "cache"))
    llm = save_tiny_llama(tmp_path / "tiny-llama")
    taus = (0.5, 1.0, 2.0)
    answers = tiny_answers(llm, taus)
    said = {tau: [normalize_answer(a) for a in answers[tau]] for tau in taus}
    question = next(
        q for q, a in enumerate(said[0.5]) if a and a != said[1.0][q] and a != said[2.0][q]
    )  # an answer only tau = 0.5 gives
    records = [json.loads(line) for line in (FIXTURES / "sciq_tiny_test.jsonl").read_text().splitlines()][:4]
    records[question]["correct_answer"] = answers[0.5][question]
    split = tmp_path / "test_keyed.jsonl"
    split.write_text("".join(json.dumps(r) + "\n" for r in records))

    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "runs")
    overrides = (
        f"temperature.llm={llm}",
        f"temperature.sciq_test={split}",
        "temperature.noisy_ratios=[0]",
        "temperature.n_demos=[1]",
        "temperature.taus=[0.5,1,2]",
    )
    assert run_sweep(SWEEP, "quick", overrides, tracking_uri=uri, storage=storage).ok
    sets = [arg for o in overrides for arg in ("--set", o)]
    out = tmp_path / "out"
    args = [SWEEP, "--profile", "quick", *sets, "--tracking-uri", uri, "--out", str(out)]
    assert analysis_main(args) == 0

    table = pd.read_parquet(out / "table.parquet")
    assert (table["param.temperature.mc_runs"] == "2").all()
    assert (table["em_std"] == 0).all() and (table["err_hi"] == table["err_lo"]).all()  # the runs agree
    em = table.set_index("tau")["em"]
    assert em[0.5] == 0.25 and em[1.0] == 0.0 and em[2.0] == 0.0
    verdicts = pd.read_csv(out / "verdicts.csv", dtype={"figure": str, "panel": str})
    pooled = verdicts[verdicts["x"].isna()].iloc[0]
    assert pooled["best_tau"] == 0.5 and pooled["gain"] == 0.25
    assert pooled["gain_hi"] - pooled["gain_lo"] > 0  # no longer zero wide
    assert (pooled["gain_lo"], pooled["gain_hi"]) == (0.0, 0.75) and not pooled["resolved"]  # 1 question in 4
    assert pooled["at_best_lo"] < 0.25 < pooled["at_best_hi"] and pooled["at_tau1_hi"] == 0.0
    assert "includes 0" in pooled["verdict"]

    # a store from before the cells logged their units: analysed, its gain not judged, and said why
    logged = list(tmp_path.glob("mlartifacts/**/units.parquet"))
    assert len(logged) == 1 and pd.read_parquet(logged[0]).shape == (3 * 2 * 4, 5)
    logged[0].unlink()
    for cached in (tmp_path / "cache").glob("*.units.parquet"):
        cached.unlink()
    capsys.readouterr()
    assert analysis_main(args) == 0
    printed = capsys.readouterr().out
    assert "1 scan cells logged no units.parquet" in printed
    pooled = pd.read_csv(out / "verdicts.csv").query("x != x").iloc[0]
    assert np.isnan(pooled["gain_lo"]) and not pooled["resolved"] and pooled["gain"] == 0.25
    assert pooled["verdict"].startswith("not judged") and "rerun them" in pooled["verdict"]
