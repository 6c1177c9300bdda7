"""Reading commands never create a tracking store.

The analysis (a sweep file, ``--experiment``, ``--compare``, ``--paper``) and the adaptive replay, run as a
user runs them (``python -m ...`` in a folder of their own), open the store with Tracker.existing: on a
store that is not there they exit 2 naming its path and the command that writes one, and leave the folder
exactly as it was (listed, with every file's bytes, before and after); a file or folder that is not an
MLflow store, or a database server's database without MLflow's tables, is refused untouched; a server that
does not answer is said within seconds. A sweep's ``--dry-run`` reads a store the same way. On a real store
the same commands still read and write their outputs.
"""

import hashlib
import math
import os
import shlex
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from mlflow.tracking import MlflowClient
from synthetic_tables import lattice_table, write_store

from analysis.__main__ import main as analysis_main
from papers.temperature.analysis.claims import llm_claims
from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main as sweep_main

SWEEPS = Path(__file__).resolve().parents[1] / "sweeps"
SMOKE, FIG1, ADAPTIVE = (str(SWEEPS / name) for name in ("smoke.yaml", "fig1.yaml", "adaptive_mlp.yaml"))

READING = {
    "analysis of a sweep file": ("analysis", SMOKE),
    "analysis of an experiment": ("analysis", "--experiment", "smoke"),
    "comparison": ("analysis", "--compare", SMOKE, FIG1),
    "paper": ("analysis", "--paper", FIG1, "--profile", "quick"),
    "adaptive replay": (
        "scaling.adaptive.replay",
        ADAPTIVE,
        "--tracking-uri",
        "mlflow.db",
        "--out",
        "replay",
    ),
}


def run(cwd: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    """``python -m ARGS`` in ``cwd``, with no MLFLOW_TRACKING_URI (the default store: ./mlflow.db)."""
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout
    )


def listing(folder: Path) -> dict[str, str]:
    """Every path under ``folder``, hidden ones included, with the digest of a file's bytes."""
    return {
        str(p.relative_to(folder)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "folder"
        for p in sorted(folder.rglob("*"))
    }


@pytest.mark.parametrize("command", READING, ids=list(READING))
def test_a_reading_command_on_a_missing_store_exits_2_and_writes_nothing(command, tmp_path):
    before = listing(tmp_path)
    done = run(tmp_path, *READING[command])
    assert done.returncode == 2, done.stderr
    assert f"error: no MLflow store at {tmp_path / 'mlflow.db'}: no such file" in done.stderr
    assert "a sweep writes one: python -m scaling.sweep SWEEP.yaml --tracking-uri sqlite:///" in done.stderr
    assert "Traceback" not in done.stderr
    assert listing(tmp_path) == before == {}


def test_from_a_folder_below_the_store_a_reading_command_points_at_the_store_that_is_there(tmp_path):
    """The analysis run from the wrong folder (a folder below the quick start's) names the store above it
    to point at, before the sweep that would write a new one, and writes nothing."""
    table = lattice_table(rng=np.random.default_rng(0), Ts=(16, math.inf), Ns=(8,), sweep="smoke")
    write_store(f"sqlite:///{tmp_path}/mlflow.db", table, tmp_path / "mlartifacts")
    elsewhere = tmp_path / "analysis_out"
    elsewhere.mkdir()
    done = run(elsewhere, "analysis", "--experiment", "smoke")
    assert done.returncode == 2 and listing(elsewhere) == {}
    (line,) = done.stderr.strip().splitlines()
    pointed = f"point at the store that is there: --tracking-uri sqlite:///{tmp_path}/mlflow.db"
    assert pointed in line and line.index(pointed) < line.index("a sweep writes one"), line


def not_a_store(folder: Path, what: str) -> Path:
    path = folder / f"{what}.db"
    if what == "empty":
        path.touch()
    elif what == "text":
        path.write_text("not a database\n")
    else:  # a SQLite database of something else
        import sqlite3

        with sqlite3.connect(path) as db:
            db.execute("CREATE TABLE notes (text TEXT)")
            db.execute("INSERT INTO notes VALUES ('mine')")
    return path


@pytest.mark.parametrize("what", ["empty", "text", "other-sqlite"])
def test_a_file_that_is_not_an_mlflow_store_is_refused_untouched(what, tmp_path, capsys):
    path = not_a_store(tmp_path, what)
    before = listing(tmp_path)
    assert analysis_main([SMOKE, "--tracking-uri", f"sqlite:///{path}", "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert f"error: {path} is not an MLflow store" in err and "nothing was read or written" in err
    assert listing(tmp_path) == before


def test_a_dry_run_reads_a_store_as_the_analysis_does(tmp_path, capsys):
    """A sweep's --dry-run on a missing store plans every cell pending and creates nothing; on a file that
    is not an MLflow store it exits 2 and leaves it as it was (MLflow would have created its tables in it)."""
    args = ["--dry-run", "--storage", str(tmp_path / "runs")]
    before = listing(tmp_path)
    assert sweep_main([SMOKE, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", *args]) == 0
    assert f"{len(load_plan(SMOKE).cells)} pending" in capsys.readouterr().out
    assert listing(tmp_path) == before
    path = not_a_store(tmp_path, "empty")
    before = listing(tmp_path)
    assert sweep_main([SMOKE, "--tracking-uri", f"sqlite:///{path}", *args]) == 2
    assert f"{path} is not an MLflow store: a SQLite file without MLflow's tables" in capsys.readouterr().err
    assert listing(tmp_path) == before


def test_a_missing_file_store_folder_is_said_and_not_created(tmp_path):
    before = listing(tmp_path)
    done = run(tmp_path, "analysis", SMOKE, "--tracking-uri", (tmp_path / "mlruns").as_uri())
    assert done.returncode == 2, done.stderr
    assert f"error: no MLflow store at {tmp_path / 'mlruns'}: no such folder" in done.stderr
    assert listing(tmp_path) == before


def test_a_tracking_server_that_never_answers_is_said_in_seconds(tmp_path, capsys, monkeypatch):
    """A server that accepts the connection and never answers (a hung or firewalled one): MLflow's own
    retries waited more than 400 s here; the analysis says so after its 3 tries of QUICK_TIMEOUT_S each (10 s
    as shipped, about half a minute; 2 s here, so the test does not wait it out)."""
    monkeypatch.setattr("scaling.tracking.retry.QUICK_TIMEOUT_S", 2)
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(16)
        uri = f"http://127.0.0.1:{silent.getsockname()[1]}"
        started = time.monotonic()
        code = analysis_main([SMOKE, "--tracking-uri", uri, "--out", str(tmp_path / "out")])
        took = time.monotonic() - started
    assert code == 2
    assert f"error: cannot use the MLflow tracking store {uri}" in capsys.readouterr().err
    assert took < 20, f"took {took:.0f} s"  # 3 tries of 2 s each, past the imports
    assert listing(tmp_path) == {}


@pytest.fixture(scope="module")
def analysed_store(tmp_path_factory):
    """A real store with a small fig1-quick experiment, as the sweep driver fills one."""
    folder = tmp_path_factory.mktemp("store")
    uri = f"sqlite:///{folder}/mlflow.db"
    table = lattice_table(rng=np.random.default_rng(0), Ts=(100, math.inf), Ns=(5, 10), sweep="fig1-quick")
    write_store(uri, table, folder / "artifacts")
    return uri


def test_the_analysis_still_reads_a_real_store_and_logs_into_it(analysed_store, tmp_path):
    out = tmp_path / "out"
    done = run(
        tmp_path,
        "analysis",
        *("--experiment", "fig1-quick", "--tracking-uri", analysed_store, "--out", str(out)),
        *("--bootstrap", "20"),
    )
    assert done.returncode == 0, done.stderr
    assert (out / "report.html").is_file() and (out / "verdicts.csv").is_file()
    client = MlflowClient(analysed_store)
    experiment = client.get_experiment_by_name("fig1-quick").experiment_id
    assert client.search_runs([experiment], "tags.kind = 'analysis'")


@pytest.mark.parametrize("profile", ["quick", ""], ids=["quick", "no-profile"])
def test_every_claim_in_the_quick_starts_folder_lists_what_it_cannot_run_and_why(tmp_path, profile):
    """The README's "every claim" command, run as written in a folder like the quick start's (its store
    holds only the smoke sweep; the papers' sweep files as shipped, their local model not built here):
    it exits 0 and writes the report, each claim not run with its reason; a part whose local model is
    missing says how to build it (the quick profile's tiny LLaMA), or, at the files' own settings, which
    --set gives the paper's model (LLaMA-2-7B's weights, Garg et al.'s checkpoint: no longer exit 2).
    Nothing outside analysis_out/ is written."""
    sweeps = tmp_path / "sweeps"
    sweeps.mkdir()
    missing = tmp_path / "tiny-llama"  # where the sweep files say the tiny LLaMA is: not built here
    for path in SWEEPS.glob("*.yaml"):
        (sweeps / path.name).write_text(path.read_text().replace("/tmp/scaling-tiny-llama", str(missing)))
    smoke = lattice_table(rng=np.random.default_rng(0), Ts=(16, math.inf), Ns=(8,), sweep="smoke")
    write_store(f"sqlite:///{tmp_path}/mlflow.db", smoke, tmp_path / "mlartifacts")
    before = listing(tmp_path)
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    command = "python -m analysis --paper sweeps/fig*.yaml sweeps/stat_*.yaml sweeps/temp_*.yaml"
    command += f" --profile {profile}" if profile else ""
    done = subprocess.run(
        ["bash", "-c", command.replace("python", shlex.quote(sys.executable), 1)],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    folder = tmp_path / "analysis_out" / ("paper-quick" if profile else "paper")
    claims = pd.read_csv(folder / "claims.csv", keep_default_na=False)
    # every claim is not run, with its reason, but those a closed form checks without runs (App. B)
    assert set(claims["status"]) <= {"not run", "reproduced"} and all(claims["evidence"])
    assert (claims["status"] == "not run").sum() > 0.9 * len(claims)
    llama = claims[claims["figure"].isin(["temp-llama-a", "temp-llama-b"])]
    assert len(llama) == len(llm_claims("", "LLaMA"))  # Fig. 3's claims on LLaMA, each with the reason
    needs = (
        [f"python -m papers.temperature.tiny_llm {missing}"]
        if profile
        else [f"--set temperature.{key}=PATH" for key in ("llm", "sciq_train", "sciq_test")]
    )
    for evidence in llama["evidence"]:
        assert "no MLflow experiment named 'temp-llama-" in evidence
        assert all(need in evidence for need in needs), evidence
    if not profile:  # Fig. 6's GPT-2 at its own settings is Garg et al.'s checkpoint, given with --set
        for evidence in claims[claims["figure"] == "temp-gpt2-scan"]["evidence"]:
            assert "--set temperature.checkpoint=PATH" in evidence, evidence
    page = (folder / "report.html").read_text()
    assert needs[0] in page
    assert not missing.exists()
    after = {k: v for k, v in listing(tmp_path).items() if not k.startswith("analysis_out")}
    assert after == before  # the store and the sweep files as they were
    lines = done.stdout.strip().splitlines()
    assert len(lines) <= 12 and max(map(len, lines)) <= 160, done.stdout
    assert lines[-3:] == [
        "next:",
        f"  python -m scaling.sweep sweeps/fig1.yaml{f' --profile {profile}' * bool(profile)}"
        "   # Figure 1, not run",
        f"  open {folder / 'report.html'}",
    ]


def test_the_replay_still_reads_a_real_store(tmp_path, tiny_sweep):
    """The replay on a store holding an adaptive sweep's whole lattice (18 cells, logged as the driver logs
    them: params, tags, curves.parquet)."""
    from test_adaptive import lattice_sweep, write

    path = write(tmp_path, lattice_sweep(tiny_sweep))
    rows = []
    for planned in load_plan(path).cells:
        cell = planned.cell
        params = {f"param.{k}": v for k, v in cell.params().items()}
        err = (0.6 if math.isinf(cell.T) else 0.8) * (1 - 0.3 * (cell.N == 8)) * (1 + 0.01 * cell.seed)
        for predictor, value in (("model", err), ("zero", 1.0)):
            rows.append(
                dict(sweep="adaptive", cell_key=cell.key, model=cell.model.label, T=cell.T, N=cell.N,
                     seed=cell.seed, predictor=predictor, n=cell.N, err=value, err_lo=value, err_hi=value,
                     prompts=128, **params)
            )  # fmt: skip
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    write_store(uri, pd.DataFrame(rows), tmp_path / "artifacts")
    done = run(
        tmp_path,
        "scaling.adaptive.replay",
        *(str(path), "--tracking-uri", uri, "--out", str(tmp_path / "replay")),
        *("--policy-seeds", "1", "--random-seeds", "1"),
    )
    assert done.returncode == 0, done.stderr
    frame = pd.read_csv(tmp_path / "replay" / "replay.csv")
    assert set(frame["method"]) >= {"adaptive", "random"}, set(frame["method"])


@pytest.fixture
def postgres_server():
    """A throwaway PostgreSQL on a Unix socket of its own (run as user postgres when root), with two
    databases: ``empty``, and ``store``, which holds MLflow's tables; yields its URI prefix."""
    import shutil

    from test_cluster_yaml import postgres_missing, reachable_dir

    missing = postgres_missing()
    if missing:
        pytest.skip(missing)
    home = reachable_dir()
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    if as_user:
        shutil.chown(home, "postgres")
    data = home / "data"
    subprocess.run([*as_user, "initdb", "-D", str(data), "-A", "trust"], check=True, capture_output=True)
    options = f"-k {home} -c listen_addresses=''"
    start = [*as_user, "pg_ctl", "-D", str(data), "-o", options, "-l", str(home / "log"), "-w", "start"]
    subprocess.run(start, check=True, capture_output=True)
    try:
        user = "postgres" if as_user else os.environ.get("USER", "")
        for name in ("empty", "store"):
            subprocess.run([*as_user, "createdb", "-h", str(home), name], check=True, capture_output=True)
        prefix = f"postgresql+psycopg2://{user}@/"
        MlflowClient(f"{prefix}store?host={home}").search_experiments()  # MLflow creates its tables
        yield prefix, home
    finally:
        subprocess.run([*as_user, "pg_ctl", "-D", str(data), "-m", "immediate", "stop"], capture_output=True)
        shutil.rmtree(home, ignore_errors=True)


def tables(home: Path, database: str) -> str:
    as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
    query = [*as_user, "psql", "-h", str(home), "-d", database, "-Atc", "\\dt"]
    return subprocess.run(query, check=True, capture_output=True, text=True).stdout


def test_a_database_without_mlflow_tables_is_refused_by_readers_and_left_empty(
    postgres_server, tmp_path, capsys
):
    """MLflow creates its tables in an empty database it opens: the analysis refuses one, a --dry-run
    plans every cell pending, and neither writes a table; a database with MLflow's tables is read."""
    prefix, home = postgres_server
    empty, store = f"{prefix}empty?host={home}", f"{prefix}store?host={home}"
    assert analysis_main([SMOKE, "--tracking-uri", empty, "--out", str(tmp_path / "out")]) == 2
    assert f"error: {empty} holds no MLflow store: no MLflow tables" in capsys.readouterr().err
    dry = ["--dry-run", "--tracking-uri", empty, "--storage", str(tmp_path / "runs")]
    assert sweep_main([SMOKE, *dry]) == 0
    assert f"{len(load_plan(SMOKE).cells)} pending" in capsys.readouterr().out
    assert tables(home, "empty") == ""
    assert analysis_main([SMOKE, "--tracking-uri", store, "--out", str(tmp_path / "out")]) == 2
    assert "error: no MLflow experiment named 'smoke'" in capsys.readouterr().err
    assert listing(tmp_path) == {}
