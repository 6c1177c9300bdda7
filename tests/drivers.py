"""The sweep driver as a subprocess, for tests that kill, interrupt or outlive it."""

from __future__ import annotations

import os
import subprocess
import sys


def start_driver(path, uri, storage, log, *flags, **env):
    """``python -m scaling.sweep PATH`` writing to ``log``; ``flags`` default to an embedded 2-CPU Ray.

    conftest.py puts this checkout first on PYTHONPATH, so the driver and its Ray workers run this code.
    """
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONUNBUFFERED": "1", **env}
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "scaling.sweep",
            str(path),
            "--tracking-uri",
            uri,
            "--storage",
            storage,
            *(flags or ("--num-cpus", "2")),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        cwd=path.parent,
    )
