"""``python -m analysis`` on seed 004's sweeps: each temperature kind's quick profile (sizes cut further by
--set) run through a real local Ray into a throwaway SQLite MLflow store, then analysed: the paper's
figure exists as PNG and SVG, the report holds the verdict table, and the verdicts have the right rows.

Every case is marked slow. The default run checks these analyses on sweeps other tests run anyway: Fig. 1's
in tests/test_paper_report.py, Fig. 2's, the GPT-2 scan's (Fig. 6) and the LLaMA's (Fig. 3) in
tests/test_temperature_protocols.py; the histogram and mean-shift sweeps (Figs. 4, 5) only here."""

from pathlib import Path

import pandas as pd
import pytest
from temperature_checks import analysis_written, check_fig1_theory, check_fig2_theory, check_fig3_llama

from analysis.__main__ import main as analysis_main
from papers.temperature.tiny_llm import save_tiny_llama
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]
SWEEPS = Path(__file__).parent.parent / "sweeps"

THEORY = ("temperature.m=200", "temperature.n_prompts=200")


def check_fig4(verdicts: pd.DataFrame) -> None:
    """Fig. 4: the input-mean rows alone."""
    assert set(zip(verdicts["figure"], verdicts["panel"])) == {("4", "input_mean")}


def check_fig6(verdicts: pd.DataFrame) -> None:
    """Fig. 6: one scan row beside the two precondition rows, its best tau one of those scanned."""
    scan = verdicts[~verdicts["metric"].str.startswith("precondition")]
    assert len(scan) == 1 and len(verdicts) == 3 and scan["best_tau"].iloc[0] in (0.5, 1.0, 2.0)


CASES = {
    # sweep: (overrides, figure stems, the check of its verdicts or None)
    "temp_fig1": ((*THEORY, "temperature.l_over_d=[0.5,2]"), ["fig1"], check_fig1_theory),
    "temp_fig2": (
        (*THEORY, "temperature.l_over_d=[0.5,2]", "temperature.sigma_tests=[0.1,3]"),
        ["fig2a", "fig2bc"],
        check_fig2_theory,
    ),
    "temp_fig4": ((*THEORY, "temperature.ls=[5,20]"), ["fig4"], check_fig4),
    "temp_fig5": (("temperature.hist_l=100",), ["fig5"], None),
    "temp_gpt2_scan": (
        ("train.steps=60", "N=4", "eval.prompts=64", "eval.bootstrap=20", "temperature.taus=[0.5,1,2]"),
        ["fig6"],
        check_fig6,
    ),
    "temp_llama_b": (
        (
            "temperature.n_test=3",
            "temperature.mc_runs=2",
            "temperature.max_new_tokens=4",
            "temperature.taus=[0.5,1,2]",
        ),
        ["fig3"],
        check_fig3_llama,
    ),
}


@pytest.mark.slow
@pytest.mark.parametrize("sweep", list(CASES))
def test_analysis_of_a_quick_temperature_sweep(sweep, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    overrides, stems, check = CASES[sweep]
    if sweep.startswith("temp_llama"):
        overrides = (f"temperature.llm={save_tiny_llama(tmp_path / 'tiny-llama')}", *overrides)
    path = str(SWEEPS / f"{sweep}.yaml")
    assert run_sweep(path, "quick", overrides, tracking_uri=uri, storage=storage).ok
    out = tmp_path / "out"
    sets = [arg for o in overrides for arg in ("--set", o)]  # the cells as the sweep ran them
    assert analysis_main([path, "--profile", "quick", *sets, "--tracking-uri", uri, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    verdicts = analysis_written(out, stems)
    assert "tuned tau vs tau = 1" in printed or "descriptive" in printed
    if check is not None:
        check(verdicts)
