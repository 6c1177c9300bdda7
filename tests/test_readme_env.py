"""In a virtual environment made by exactly the README's install line (tests/readme_env.py, cached; ~4-6
minutes the first time on 2 cores), every module of the project imports and every documented entry point
answers --help: what a user who followed the README has (issue 35). Slow: the default run checks the
same with the undeclared distributions hidden (tests/test_declared_dependencies.py)."""

from __future__ import annotations

import os
import subprocess

import pytest
from doc_commands import documented_entry_points
from readme_env import ROOT, readme_venv, user_env

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
