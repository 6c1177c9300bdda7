"""A researcher's plug-ins reach a multi-node cluster's workers with no install step (slow, e2e).

A real two-node Ray cluster on this machine (``ray start --head`` with no CPUs, so every trial runs on the
worker; ``ray start --address`` for the worker), neither of whose environments can import the example's
module: it exists only beside the sweep file, in a folder that is neither node's Python path nor the
driver's working directory (which Ray adds to its workers' path). The driver, run by the documented command
with ``--address``, ships the module through Ray's runtime environment (scaling.plugins.modules_to_ship, as
``py_modules``): every cell of the example's tiny profile completes.

    python -m pytest -m slow -n 0 tests/test_plugins_cluster.py
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def stop(temp_dir: str) -> None:
    """This test's Ray nodes alone (never a bare ``ray stop``: other Rays run on this machine)."""
    subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "stop_ray.py"), temp_dir, "--grace", "5"],
        check=False,
        capture_output=True,
        timeout=120,
    )


@pytest.fixture
def cluster(tmp_path):
    """A head without CPUs and a worker with two, each in its own temp dir, with the project (and nothing
    of the example) on their Python path; yields the address and the nodes' environment."""
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    port, tag = free_port(), uuid.uuid4().hex[:6]
    head, worker = f"/tmp/ray-pl-{tag}", f"/tmp/ray-plw-{tag}"
    nodes = tmp_path / "nodes"
    nodes.mkdir()
    common = ["--node-ip-address=127.0.0.1", "--num-gpus=0", "--disable-usage-stats"]
    try:
        subprocess.run(
            [RAY, "start", "--head", f"--port={port}", f"--temp-dir={head}", "--num-cpus=0",
             "--include-dashboard=false", *common],
            env=env, cwd=nodes, check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        subprocess.run(
            [RAY, "start", f"--address=127.0.0.1:{port}", f"--temp-dir={worker}", "--num-cpus=2", *common],
            env=env, cwd=nodes, check=True, capture_output=True, timeout=180,
        )  # fmt: skip
        yield f"127.0.0.1:{port}", env
    finally:
        stop(worker)
        stop(head)


def test_the_examples_module_reaches_a_worker_that_cannot_import_it(cluster, tmp_path):
    address, env = cluster
    experiment = tmp_path / "experiment"  # the module's only copy: beside the sweep file
    experiment.mkdir()
    for name in ("quadratic.py", "quadratic.yaml"):
        shutil.copy(ROOT / "examples" / name, experiment / name)
    elsewhere = tmp_path / "elsewhere"  # the driver's working directory, which Ray puts on workers' paths
    elsewhere.mkdir()
    cannot = subprocess.run(
        [sys.executable, "-c", "import quadratic"], env=env, cwd=elsewhere, capture_output=True, text=True
    )
    assert cannot.returncode != 0 and "No module named 'quadratic'" in cannot.stderr
    done = subprocess.run(
        [
            sys.executable, "-m", "scaling.sweep", str(experiment / "quadratic.yaml"), "--profile", "tiny",
            "--address", address, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db",
            "--storage", str(tmp_path / "storage"),
        ],
        env=env, cwd=elsewhere, capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    assert "0 failed; 12/12 cells complete" in done.stdout, done.stdout[-3000:]
