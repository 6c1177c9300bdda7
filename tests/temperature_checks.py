"""What ``python -m analysis`` must write for a seed 004 sweep, checked alike by every test that analyses
one (tests/test_temperature_analysis.py at the quick profiles, slow; in the default run
tests/test_temperature_protocols.py and tests/test_paper_report.py on the sweeps they run anyway)."""

from __future__ import annotations

import html
import math
from pathlib import Path

import pandas as pd


def analysis_written(out: Path, stems: list[str]) -> pd.DataFrame:
    """The analysis in ``out``: each figure of ``stems`` as PNG and SVG, verdicts.csv with rows, each
    verdict in report.html; the verdicts."""
    for stem in stems:
        assert (out / f"{stem}.png").stat().st_size > 1000 and (out / f"{stem}.svg").is_file()
    verdicts = pd.read_csv(out / "verdicts.csv", dtype={"figure": str, "panel": str})
    report = (out / "report.html").read_text()
    assert len(verdicts) and all(html.escape(v) in report for v in verdicts["verdict"])
    return verdicts


def check_fig1_theory(verdicts: pd.DataFrame) -> None:
    """Fig. 1 of the theory: a row per shift, each with tau_opt, the gain's interval and the theory gap."""
    assert set(zip(verdicts["figure"], verdicts["panel"])) == {
        ("1", "none"),
        ("1", "input_covariance"),
        ("1", "task"),
    }
    assert (verdicts["best_tau"] > 0).all() and (verdicts["theory_gap"] >= 0).all()
    assert ((verdicts["gain_lo"] <= verdicts["gain"]) & (verdicts["gain"] <= verdicts["gain_hi"])).all()
    assert verdicts["verdict"].str.contains("finite-l").all()


def check_fig2_theory(verdicts: pd.DataFrame) -> None:
    """Fig. 2 of the theory: the test-noise rows and panel (b) among them."""
    assert set(verdicts["figure"] + verdicts["panel"]) >= {"2noise(sigma=10)", "2b"}


def check_fig3_llama(verdicts: pd.DataFrame) -> None:
    """Fig. 3 (b) at noisy ratios 0 and 0.6, taus 0.5, 1, 2: a pooled row and one per noisy ratio, exact
    match in [0, 1], the heuristic tau defined or said to be undefined."""
    pooled = verdicts[verdicts["x"].isna()]
    assert set(zip(pooled["figure"], pooled["panel"])) == {("3", "noisy_ratio")}
    assert sorted(verdicts["x"].dropna()) == [0.0, 0.6]
    assert verdicts["at_tau1"].between(0, 1).all() and verdicts["best_tau"].isin([0.5, 1.0, 2.0]).all()
    defined = verdicts["tau_heuristic"].map(math.isfinite)  # else undefined, said with its moments
    undefined = verdicts["verdict"].str.contains("heuristic tau (App. J) undefined", regex=False)
    assert (defined | undefined).all()
