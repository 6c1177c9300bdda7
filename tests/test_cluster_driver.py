"""The plain `python -m scaling.sweep` on the head of a `ray up` cluster (scaling.sweep.cluster), without `ray
up`: a real Ray head started by `ray start` (as the cluster files' start commands do), the head's
~/.icl-scaling/cluster.env as those commands write it, and ~/ray_bootstrap_config.yaml as `ray up` leaves it
(cluster.yaml through Ray's own prepare_config: GPU spot workers from zero). The head has no GPU.

- A GPU cell passes the fit check (a GPU worker type could hold it), the driver joins the head's Ray and
  logs to the cluster's tracking store and storage, its packs planned for the smallest card of those
  types; Ctrl-C then stops it (no GPU node will come here).
- A cell no node type could hold ends the driver with exit status 2 before anything is written (a flag's
  storage included).
"""

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def head(tmp_path_factory):
    """A HOME that is a ray-up head's: cluster.env naming a live Ray head with token auth (its token in
    ~/.ray/auth_token, as `ray up` copies it), the autoscaler's config. The drivers' environment has no
    RAY_AUTH_MODE, like a `ray exec` shell of a head without Docker: they must take it from cluster.env."""
    tmp = tmp_path_factory.mktemp("head")
    home, temp_dir, port = tmp / "home", f"/tmp/ray-drvtest-{uuid.uuid4().hex[:6]}", free_port()
    (home / ".icl-scaling").mkdir(parents=True)
    env = {**os.environ, "RAY_AUTH_MODE": "token", "HOME": str(home)}
    env.pop("SCALING_CLUSTER_ENV")  # conftest's "never a cluster": this test is the head of one
    env.pop("RAY_ADDRESS", None)
    subprocess.run(
        [RAY, "get-auth-token", "--generate"], env=env, check=True, capture_output=True, timeout=60
    )
    subprocess.run(
        [
            RAY,
            "start",
            "--head",
            f"--port={port}",
            "--node-ip-address=127.0.0.1",
            f"--temp-dir={temp_dir}",
            "--num-cpus=2",
            "--num-gpus=0",
            "--include-dashboard=false",
            "--disable-usage-stats",
        ],
        env=env,
        check=True,
        capture_output=True,
        timeout=120,
    )
    try:
        (home / ".icl-scaling" / "cluster.env").write_text(
            f"RAY_ADDRESS=127.0.0.1:{port}\nRAY_AUTH_MODE=token\n"
            f"MLFLOW_TRACKING_URI=sqlite:///{tmp}/cluster-mlflow.db\nSCALING_STORAGE={tmp}/cluster-storage\n"
        )
        bootstrap = prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text()))
        (home / "ray_bootstrap_config.yaml").write_text(yaml.safe_dump(bootstrap))
        env.pop("RAY_AUTH_MODE")
        yield tmp, env
    finally:
        subprocess.run(
            [sys.executable, str(ROOT / "cluster" / "stop_ray.py"), temp_dir, "--grace", "5"],
            check=False,
            capture_output=True,
            timeout=60,
        )


def sweep(env, *args, **popen):
    return subprocess.Popen(
        [sys.executable, "-m", "scaling.sweep", "sweeps/smoke.yaml", "--set", "grid.model=[mlp]", *args],
        cwd=ROOT,
        env=env,
        text=True,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        **popen,
    )


def test_gpu_cell_waits_for_an_autoscaled_node_on_the_cluster_of_the_head(head):
    tmp, env = head
    driver = sweep(env, "--set", "models.mlp.resources={cpu: 1, gpu: 0.25}")
    lines = []
    try:
        for line in driver.stdout:  # until the trials are submitted (they wait for a GPU node)
            lines.append(line)
            if "cells to run" in line:
                break
        time.sleep(2)
        driver.send_signal(signal.SIGINT)
        out, err = driver.communicate(timeout=120)
    finally:
        if driver.poll() is None:
            driver.kill()
    text = "".join(lines) + out
    assert "on the `ray up` cluster of" in text and "(Ray at 127.0.0.1:" in text, text + err
    assert "18 cells wait for a node the autoscaler starts" in text and "gpu.a10g.spot" in text, text + err
    # packs planned for the smallest card a GPU node type of cluster.yaml has (scaling.budget.cards)
    assert "GPU packs planned for 21.9 GiB cards (L4, the autoscaler's node type gpu.l4.spot)" in text
    assert f"tracking sqlite:///{tmp}/cluster-mlflow.db" in text
    assert (tmp / "cluster-mlflow.db").exists() and (tmp / "cluster-storage" / "smoke").is_dir()
    assert driver.returncode == 130, err


def test_cell_no_node_type_could_hold_exits_2_and_writes_nothing(head):
    tmp, env = head
    env = {**env, "HOME": str(tmp / "home")}
    (tmp / "cluster-mlflow.db").unlink(missing_ok=True)
    driver = sweep(env, "--set", "models.mlp.resources={cpu: 1, gpu: 2}", "--storage", str(tmp / "flagged"))
    out, err = driver.communicate(timeout=300)
    assert driver.returncode == 2, out + err
    assert "no node type its autoscaler can start" in err and "asks one node for CPU=1, GPU=2" in err
    assert "gpu.a10g.spot [CPU=8, GPU=1] x8" in err
    assert not (tmp / "cluster-mlflow.db").exists() and not (tmp / "flagged").exists()
