"""``python -m analysis --paper``: one reproduction report for seeds 001, 003 and 004.

Real sweeps (the papers' own sweep files with a tiny profile added, copied to a temporary folder: Fig. 1 of
seed 001, seed 003's GD transformer, seed 004's Fig. 1) run through a real local Ray into a throwaway
SQLite MLflow store; the report then lists every claim of the three papers with a status, the run ones
with their numbers, profile and commands, the others as not run with the commands that would run them.
Bad input (a sweep file that is no paper's, a profile a file lacks, two files for one part) exits 2 and
writes nothing.
"""

import shlex
from pathlib import Path

import pandas as pd
import pytest
import yaml
from temperature_checks import analysis_written, check_fig1_theory

from analysis.__main__ import main as analysis_main
from analysis.paper import Figure, papers, parts, profiles_read
from papers.context_scaling.analysis import claims as claims_context_scaling
from papers.statisticians.analysis import claims as claims_statisticians
from papers.temperature.analysis import claims as claims_temperature
from scaling.sweep.phases import run_sweep

pytestmark = [pytest.mark.e2e, pytest.mark.usefixtures("local_ray")]
SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
STATUSES = {"reproduced", "not reproduced", "inconclusive", "not run"}
TINY = {  # sweep file -> the "tiny" profile added to it
    "fig1.yaml": {
        "defaults": {
            "task": {"d": 4},
            "train": {"steps": 20, "lr": 1.0e-3, "checkpoint_every": 10, "log_every": 10},
            "eval": {"prompts": 32, "bootstrap": 20},
        },
        "models": {
            "gpt2": {"n_layer": 1, "n_head": 1, "n_embd": 16, "resources": {"cpu": 1, "gpu": 0}},
            "mlp": {"width": 16, "resources": {"cpu": 1, "gpu": 0}},
            "mlp_padded": {"width": 16, "resources": {"cpu": 1, "gpu": 0}, "train": {"lengths": [5, 10]}},
        },
        "grid": {"T": [16, "inf"], "N": [10], "seed": [0]},
    },
    "stat_gd.yaml": {
        "defaults": {"task": {"d": 5}, "eval": {"prompts": 32, "n": [5, 10], "bootstrap": 20}, "N": 10},
        "grid": {"construction.steps": [1, 4], "construction.lam": [0]},
    },
    "temp_fig1.yaml": {
        "defaults": {"task": {"d": 10}, "temperature": {"l_over_d": [0.5, 2], "m": 200, "n_prompts": 200}},
    },
    "temp_fig4.yaml": {"defaults": {"task": {"d": 5}}},  # given at its own profile ("own"), never run
}
RUN = ("fig1.yaml", "stat_gd.yaml", "temp_fig1.yaml")


def tiny_copy(folder: Path, name: str) -> str:
    document = yaml.safe_load((SWEEPS / name).read_text())
    document.setdefault("profiles", {})["tiny"] = TINY[name]
    document["profiles"]["own"] = TINY[name]
    path = folder / name
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return str(path)


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    """The store, the tiny sweep files (by name) and the folder: fig1, stat_gd and temp_fig1 run."""
    folder = tmp_path_factory.mktemp("paper")
    uri = f"sqlite:///{folder}/mlflow.db"
    files = {name: tiny_copy(folder, name) for name in TINY}
    for name in RUN:
        assert run_sweep(files[name], "tiny", (), tracking_uri=uri, storage=str(folder / "runs")).ok, name
    return uri, files, folder


@pytest.fixture(scope="module")
def report(store):
    uri, files, folder = store
    out = folder / "report"
    given = [*(files[name] for name in RUN), files["temp_fig4.yaml"] + ":own"]
    options = f"--profile tiny --tracking-uri {uri} --out {out} --bootstrap 20".split()
    code = analysis_main(["--paper", *given, *options])
    assert code == 0
    return pd.read_csv(out / "claims.csv", keep_default_na=False), (out / "report.html").read_text(), files


def test_the_report_lists_every_claim_of_the_three_papers_with_a_status(report):
    table, page, _ = report
    every = claims_context_scaling.CLAIMS + claims_statisticians.CLAIMS + claims_temperature.CLAIMS
    assert len(table) == len(every) == sum(len(p.claims) for p in papers())
    assert list(table["claim"]) == [c.text for c in every]
    assert set(table["status"]) <= STATUSES
    assert set(table["paper"].astype(str).str.zfill(3)) == {"001", "003", "004"}
    for claim in every:
        assert claim.text.replace("'", "&#x27;") in page, claim.text
    for seed in ("001", "003", "004"):
        assert f'id="seed-{seed}"' in page


def test_a_claim_whose_sweep_ran_shows_its_numbers_profile_and_commands(report, store):
    table, page, files = report
    uri = store[0]
    gd = table[table["figure"] == "stat-gd"].iloc[0]
    assert gd["status"] == "reproduced"
    assert "equals explicit GD: max |difference|" in gd["evidence"] and "over 2 cells" in gd["evidence"]
    assert gd["experiment"] == "stat-gd-tiny" and gd["profile"] == "tiny"
    tail = ["--profile", "tiny", "--tracking-uri", uri]
    assert shlex.split(gd["sweep_command"]) == ["python", "-m", "scaling.sweep", files["stat_gd.yaml"], *tail]
    assert shlex.split(gd["analysis_command"]) == ["python", "-m", "analysis", files["stat_gd.yaml"], *tail]
    fig1 = table[table["figure"] == "fig1"]
    assert len(fig1) == 6 and "not run" not in set(fig1["status"])
    assert all("err/zero" in e or "drop" in e or "interval" in e for e in fig1["evidence"]), fig1["evidence"]
    # each row names its size beside the paper's, for the models it reads
    assert all(s.startswith("d 4 (paper not stated in Fig. 1; App. C 8); N 10 (paper ") for s in fig1["size"])
    padded = fig1[fig1["claim"].str.contains("zero-padded")]
    assert len(padded) == 2 and all("N 10 (paper 40)" in s for s in padded["size"]), padded["size"]
    gpt2 = fig1[fig1["claim"].str.startswith("GPT-2")]
    assert all("width gpt2 16 (paper 256)" in s and "mlp" not in s for s in gpt2["size"]), gpt2["size"]
    fig1 = table[table["figure"] == "temp-fig1"]
    assert set(fig1["status"]) <= {"reproduced", "not reproduced", "inconclusive"}  # every row judged
    shifts = fig1[fig1["claim"].str.startswith("tau_opt (Thm 4.7) gives")]
    assert list(shifts["panel"]) == ["1a", "1b", "1c"]
    assert all("tau_opt = " in e and "90% interval" in e for e in shifts["evidence"])
    agree = fig1[fig1["claim"].str.startswith("Thm. 4.6 matches Monte Carlo")]
    assert list(agree["panel"]) == ["1a", "1b", "1c"] and agree["evidence"].str.contains("points agree").all()
    assert "fig1-tiny" in page and "stat-gd-tiny" in page and "data:image/png;base64," in page
    # temp_fig4 was given at its own profile but has no runs: the numbers are all the tiny profile's
    assert "<h1>Reproduction report: seeds 001, 003 and 004 (tiny profile)</h1>" in page


def test_the_theory_sweeps_own_analysis_draws_fig1_with_tau_opt_and_its_gain(store, capsys):
    """``python -m analysis`` on one of the report's sweeps alone (seed 004's Fig. 1, theory): the figure as
    PNG and SVG, a verdict per shift with tau_opt, the gain's interval and the finite-l gap to the theory,
    each verdict in the report."""
    uri, files, folder = store
    out = folder / "temp-fig1"
    path = files["temp_fig1.yaml"]
    assert analysis_main([path, "--profile", "tiny", "--tracking-uri", uri, "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "tuned tau vs tau = 1" in printed or "descriptive" in printed
    check_fig1_theory(analysis_written(out, ["fig1"]))


def test_the_title_names_the_parts_read_at_a_profile_of_their_own():
    """``--paper sweeps/fig1.yaml:repro sweeps/fig2.yaml --profile quick``: the numbers of Fig. 1 are the
    repro profile's, and the title and the printed tally say so; a part given so but not run is not named."""
    fig1, fig2, temp = (Figure(parts()[key][1]) for key in ("fig1", "fig2", "temp-fig4"))
    fig1.profile, fig1.result = "repro", object()
    fig2.profile, fig2.result = "quick", object()
    temp.profile = "own"
    figures = {f.name: f for f in (fig1, fig2, temp)}
    assert profiles_read(figures, "quick") == " (quick profile; fig1 at repro)"
    assert profiles_read(figures, "") == " (fig1 at repro; fig2 at quick)"
    assert profiles_read({"fig2": fig2}, "quick") == " (quick profile)"
    assert profiles_read({}, "") == ""


def test_a_claim_whose_sweep_did_not_run_says_so_with_the_command_to_run_it(report, store):
    table, page, files = report
    fig2 = table[table["figure"] == "fig2"]
    assert set(fig2["status"]) == {"not run"}
    assert set(fig2["evidence"]) == {"no sweep file given for it"}
    # the real fig2.yaml has no "tiny" profile: the command runs it at its own settings
    (command,) = set(fig2["sweep_command"])
    assert shlex.split(command) == [
        "python",
        "-m",
        "scaling.sweep",
        "sweeps/fig2.yaml",
        "--tracking-uri",
        store[0],
    ]
    assert all(s.startswith("d 20 (= paper); N 40 (= paper)") for s in fig2["size"])
    assert all(c.startswith("estimated training compute: ") for c in fig2["cost"])
    given = table[table["figure"] == "temp-fig4"].iloc[0]
    assert given["status"] == "not run"
    assert given["profile"] == "own" and "no MLflow experiment named 'temp-fig4-own'" in given["evidence"]
    assert given["sweep_command"].startswith(
        f"python -m scaling.sweep {files['temp_fig4.yaml']} --profile own"
    )
    selection = table[table["figure"] == "stat-selection"]
    assert set(selection["status"]) == {"not run"} and len(selection) == 5  # eq. 4.4, 2 levels x 2
    assert "to run: <code>python -m scaling.sweep sweeps/stat_selection.yaml" in page


@pytest.mark.parametrize(
    "bad,message",
    [
        (lambda files: [files["fig1.yaml"], str(SWEEPS / "smoke.yaml")], "is not one of the papers' sweeps"),
        (lambda files: [files["fig1.yaml"], files["fig1.yaml"]], "a second sweep file for fig1"),
        (lambda files: [files["stat_gd.yaml"], str(SWEEPS / "fig2.yaml")], "unknown profile 'tiny'"),
        (lambda files: [files["stat_gd.yaml"], "sweeps/no_such.yaml"], "no_such.yaml"),
        (lambda files: [files["stat_gd.yaml"] + ":nope"], "unknown profile 'nope'"),
    ],
    ids=["not a paper's sweep", "one part twice", "a profile the file lacks", "no such file", "own profile"],
)
def test_bad_input_exits_2_and_writes_nothing(bad, message, store, capsys):
    uri, files, folder = store
    out = folder / "bad"
    code = analysis_main(
        ["--paper", *bad(files), "--profile", "tiny", "--tracking-uri", uri, "--out", str(out)]
    )
    assert code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err and "Traceback" not in err
    assert not out.exists()


def test_a_sweep_no_paper_runs_is_refused_with_each_papers_file_named_once(tmp_path, capsys):
    """temp_llama_a.yaml and temp_llama_b.yaml are each two parts (LLaMA, and SmolLM2 at smollm): one file."""
    code = analysis_main(["--paper", str(SWEEPS / "smoke.yaml"), "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err
    assert code == 2 and "is not one of the papers' sweeps (" in err
    named = err.split("(", 1)[1].split(")", 1)[0].split(", ")
    assert len(named) == len(set(named)) and "sweeps/temp_llama_a.yaml" in named
    assert set(named) == {part.sweep for paper in papers() for part in paper.parts}
