"""The environment a user makes by following the README: a virtual environment made by the README's own
install line (`python3 -m venv .venv && . .venv/bin/activate && pip install -e .`, no extras), not the
developers' environment with its test extras (which brought psutil, say, through accelerate: the user's
`ray up` then failed where the tests passed, issue 35).

The line is read from README.md (the first documented command that installs the project), so the venv
follows the README when it changes. Making one takes ~4 minutes (a download of ~2 GB of wheels on a cold
pip cache), so it is cached and shared by checkouts and sessions of this machine: under
``$SCALING_README_VENV_CACHE`` (default ``~/.cache/icl-scaling/readme-venv``), one folder per hash of
the install line, pyproject.toml and the Python version, i.e. made again when the line or the declared
dependencies change. The line runs in that folder on a copy of what ``pip install -e .`` reads (the
packaging files and the packages), so the editable install points at that copy: tests put the checkout
under test first on PYTHONPATH, as the cluster files put the synced checkout.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
INSTALL = re.compile(r"\bpip install -e \.(?=\s|$)")
# what setuptools reads for `pip install -e .` (pyproject's readme, packages.find and package-data)
PACKAGING = ("pyproject.toml", "README.md")
PACKAGES = ("scaling", "analysis")
KEEP_DAYS = 14  # other cached venvs unused this long are removed when one is made


def install_line(readme: Path = ROOT / "README.md") -> str:
    """The README's install commands: the first documented command that installs the project without
    extras, cut after its last `pip install` (what follows it uses the environment)."""
    from doc_commands import fenced_commands  # tests/ is on sys.path under pytest

    for command in fenced_commands(readme):
        if INSTALL.search(command.text):
            parts = [part.strip() for part in command.text.split("&&")]
            last = max(i for i, part in enumerate(parts) if part.startswith("pip install"))
            return " && ".join(parts[: last + 1])
    raise AssertionError(f"{readme} documents no `pip install -e .` (the user's install line)")


def cache_root() -> Path:
    return Path(
        os.environ.get("SCALING_README_VENV_CACHE") or Path.home() / ".cache" / "icl-scaling" / "readme-venv"
    )


def venv_key(line: str) -> str:
    """A hash of the install line, what pip resolves from pyproject.toml (the build system, the
    dependencies and extras) and the user's python3 (its version); not the tools' settings there."""
    python3 = subprocess.run(
        ["python3", "-c", "import sys; print(sys.version)"], env=user_env(), capture_output=True, text=True
    ).stdout
    pyproject = tomllib.loads((ROOT / "pyproject.toml").read_text())
    project = pyproject["project"]
    resolved = [pyproject["build-system"], project["dependencies"], project.get("optional-dependencies")]
    digest = hashlib.sha256(line.encode())
    digest.update(json.dumps(resolved, sort_keys=True).encode())
    digest.update(python3.encode())
    return digest.hexdigest()[:16]


def user_env(home: str | None = None) -> dict[str, str]:
    """A login-like environment without the developers' venv, PYTHONPATH or pip's user settings."""
    env = {
        k: v
        for k, v in os.environ.items()
        if k in ("HOME", "USER", "LANG", "LC_ALL", "TMPDIR") or k.startswith(("PIP_", "PYENV_"))
    }
    venv_bin = str(Path(sys.prefix) / "bin")  # the developers' venv, when the tests run in one
    env["PATH"] = os.pathsep.join(p for p in os.environ.get("PATH", "").split(os.pathsep) if p != venv_bin)
    if home:
        env["HOME"] = home
    return env


def readme_venv(log=print) -> Path:
    """The python of a virtual environment made by exactly the README's install line (cached)."""
    line = install_line()
    root = cache_root()
    folder = root / venv_key(line)
    python = folder / ".venv" / "bin" / "python"
    done = folder / "made-by.txt"
    root.mkdir(parents=True, exist_ok=True)
    with open(root / f"{folder.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another test or checkout making the same venv: wait for it
        if done.is_file() and python.is_file():
            os.utime(done)
            return python
        shutil.rmtree(folder, ignore_errors=True)  # a half-made one (a killed build)
        folder.mkdir()
        for name in PACKAGING:
            shutil.copy2(ROOT / name, folder / name)
        for name in PACKAGES:
            shutil.copytree(ROOT / name, folder / name, ignore=shutil.ignore_patterns("__pycache__"))
        log(f"making the README's venv in {folder}: {line}")
        start = time.monotonic()
        made = subprocess.run(
            ["bash", "-c", line], cwd=folder, env=user_env(), capture_output=True, text=True, timeout=1800
        )
        if made.returncode != 0 or not python.is_file():
            raise AssertionError(
                f"the README's install line failed ({made.returncode}) in {folder}: {line}\n"
                f"{made.stdout[-3000:]}\n{made.stderr[-3000:]}"
            )
        done.write_text(f"{line}\n{time.monotonic() - start:.0f} s\n")
    prune(root, keep=folder)
    return python


def prune(root: Path, keep: Path) -> None:
    """Remove cached venvs of older install lines or dependencies that nobody used for KEEP_DAYS."""
    for other in root.iterdir():
        if other == keep or not other.is_dir():
            continue
        stamp = other / "made-by.txt"
        age = time.time() - (stamp.stat().st_mtime if stamp.exists() else other.stat().st_mtime)
        if age < KEEP_DAYS * 86400:
            continue
        with open(root / f"{other.name}.lock", "w") as lock:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                continue
            shutil.rmtree(other, ignore_errors=True)
