"""In a virtual environment made by exactly the README's install line (tests/readme_env.py, cached; ~4-6
minutes the first time on 2 cores), every module of the project imports and every documented entry point
answers --help: what a user who followed the README has (issue 35). Slow: the default run checks the
same with the undeclared distributions hidden (tests/test_declared_dependencies.py)."""

from __future__ import annotations

import os
import subprocess

import pytest
from doc_commands import documented_entry_points
from readme_env import ROOT, install_line, readme_venv, user_env

pytestmark = [pytest.mark.slow]


@pytest.fixture(scope="module")
def python():
    return readme_venv()


def run(python, *args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    env = {**user_env(), "PYTHONPATH": str(ROOT), "VIRTUAL_ENV": str(python.parent.parent)}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    return subprocess.run(
        [str(python), *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout
    )


def test_the_readme_venv_holds_no_test_extra(python):
    listed = run(python, "-m", "pip", "list", "--format=freeze").stdout.lower()
    for extra_only in ("pytest", "playwright", "gguf", "accelerate", "ruff"):
        assert f"\n{extra_only}==" not in f"\n{listed}", f"{extra_only} in the README's venv"


def test_every_module_of_the_project_imports_in_the_readme_venv(python):
    done = run(python, "tests/hide_packages.py", "--import-all", timeout=600)
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("entry", documented_entry_points(), ids=lambda e: " ".join(e))
def test_every_documented_entry_point_answers_help_in_the_readme_venv(python, entry):
    done = run(python, *entry, "--help")
    assert done.returncode == 0 and "usage:" in done.stdout, done.stdout[-2000:] + done.stderr[-3000:]


def readme_first_command() -> str:
    from doc_commands import fenced_commands

    line = install_line()
    return next(c.text for c in fenced_commands(ROOT / "README.md") if c.text.startswith(line))


def test_the_readme_first_command_runs_in_its_venv_at_a_smoke_sized_setting(python, tmp_path):
    """What follows the install in the README's first command (the smoke sweep, then its analysis), as
    written, in the venv the install made, with a smaller `--set` added to each (24 cells of 20 steps;
    tests/test_ray_up.py runs it at full size on the cluster)."""
    rest = readme_first_command()[len(install_line()) :].lstrip(" &")
    assert rest.startswith("python -m scaling.sweep"), rest
    for entry in ROOT.iterdir():
        if entry.name in ("sweeps", "data", "tests"):
            (tmp_path / entry.name).symlink_to(entry)
    smaller = "--set train.steps=20 --set eval.prompts=64"
    wrapper = f'python() {{ command python "$@" {smaller}; }}\n'  # the --set after the command's arguments
    env = {**user_env(), "PYTHONPATH": str(ROOT), "VIRTUAL_ENV": str(python.parent.parent)}
    env["PATH"] = f"{python.parent}{os.pathsep}{env['PATH']}"
    done = subprocess.run(
        ["bash", "-c", wrapper + rest], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1800
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "24 cells" in done.stdout or "24/24" in done.stdout, done.stdout[-3000:]
    assert (tmp_path / "analysis_out" / "smoke" / "report.html").is_file()


def test_every_documented_install_resolves_in_the_readme_venv(python):
    """pip resolves each documented `pip install` beyond the README's own (the extras, SmolLM2's file)
    in the venv the README makes, without installing anything (--dry-run)."""
    from doc_commands import documented_commands, trace

    installs = set()
    for command in documented_commands():
        if "pip install" in command.text:
            for argv in trace(command.text, ROOT)[0]:
                if argv[:2] == ["pip", "install"] and argv[2:] != ["-e", "."]:
                    installs.add(tuple(argv[2:]))
    assert installs, "no documented pip install beyond the README's"
    for args in sorted(installs):
        if any("ray[default]" in a for a in args):
            continue  # the AWS launcher's machine (docs/cluster.md), not this venv
        done = subprocess.run(
            [str(python.parent / "pip"), "install", "--dry-run", "-q", *args],
            cwd=python.parent.parent.parent,  # the venv's own copy of the project (for `-e .[extra]`)
            env=user_env(),
            capture_output=True,
            text=True,
            timeout=900,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])
