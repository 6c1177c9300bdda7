"""cluster/stop_ray.py stops the Ray of one temp dir and leaves every other Ray on the machine running
(the cluster files' start commands run it where `ray stop` would stop everyone's Ray): two real
`ray start --head` nodes with temp dirs of their own, one stopped, the other still answering. In the slow
suite, as the real `ray up` (tests/test_ray_up.py) that runs it."""

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).parent / "ray")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def answers(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex(("127.0.0.1", port)) == 0


def processes_of(temp_dir: str) -> list[str]:
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if temp_dir + "/" in line]


def stop_ray(temp_dir: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, str(ROOT / "cluster" / "stop_ray.py"), temp_dir, "--grace", "5"],
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.fixture
def two_rays():
    """Two head nodes of this test (short temp dirs: Ray's socket paths must stay under 108 bytes)."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    rays = []
    try:
        for _ in range(2):
            temp_dir, port = f"/tmp/ray-stoptest-{uuid.uuid4().hex[:6]}", free_port()
            rays.append((temp_dir, port))
            subprocess.run(
                [
                    RAY,
                    "start",
                    "--head",
                    f"--port={port}",
                    f"--temp-dir={temp_dir}",
                    "--num-cpus=1",
                    "--include-dashboard=false",
                    "--disable-usage-stats",
                ],
                env=env,
                check=True,
                capture_output=True,
                timeout=120,
            )
        yield rays
    finally:
        for temp_dir, _ in rays:
            stop_ray(temp_dir)


@pytest.mark.slow  # two `ray start --head` nodes, 30 s: the cluster files' path, as the real ray up
def test_stops_only_the_ray_of_its_temp_dir(two_rays):
    (a_dir, a_port), (b_dir, b_port) = two_rays
    assert answers(a_port) and answers(b_port) and processes_of(a_dir) and processes_of(b_dir)
    done = stop_ray(a_dir)
    assert done.returncode == 0, done.stderr
    time.sleep(1)
    assert processes_of(a_dir) == [] and not answers(a_port)
    assert answers(b_port) and processes_of(b_dir), "the other Ray was touched"
    assert stop_ray(b_dir).returncode == 0
    time.sleep(1)
    assert processes_of(b_dir) == [] and not answers(b_port)


def ray_client_site() -> Path:
    """A folder holding grpcio, Ray's client (cached): with it on PYTHONPATH `ray start --head` starts Ray's
    client server, as it does in a user's environment with `ray[default]` (docs/cluster.md, section 1).
    The project does not declare it: every test's `ray start` would otherwise start one on port 10001."""
    site = Path(os.environ.get("SCALING_GRPC_SITE") or Path.home() / ".cache" / "icl-scaling" / "grpcio-site")
    if not (site / "grpc" / "__init__.py").is_file():
        done = subprocess.run(
            [sys.executable, "-m", "pip", "install", "-q", "--target", str(site), "grpcio>=1.42"],
            capture_output=True,
            text=True,
            timeout=600,
        )
        if done.returncode != 0:
            pytest.skip(f"could not install grpcio (Ray's client): {done.stderr[-500:]}")
    return site


@pytest.mark.slow  # a second Ray; test_stops_only_the_ray_of_its_temp_dir is the default run's check
def test_stops_the_ray_client_server_that_names_no_temp_dir():
    """Ray's client server (`python -m ray.util.client.server --address=... --port=...`) names only the GCS
    address and outlives `ray start`, which started it (issue 43: it was left listening after the
    documented teardown); stop_ray.py finds it by its log files, open in the temp dir's session."""
    env = {**os.environ, "RAY_AUTH_MODE": "disabled", "PYTHONPATH": str(ray_client_site())}
    env.pop("RAY_ADDRESS", None)
    temp_dir, port, client_port = f"/tmp/ray-stoptest-{uuid.uuid4().hex[:6]}", free_port(), free_port()
    try:
        subprocess.run(
            [
                RAY,
                "start",
                "--head",
                f"--port={port}",
                f"--temp-dir={temp_dir}",
                f"--ray-client-server-port={client_port}",
                "--num-cpus=1",
                "--include-dashboard=false",
                "--disable-usage-stats",
            ],
            env=env,
            check=True,
            capture_output=True,
            timeout=120,
        )
        deadline = time.monotonic() + 30
        while not answers(client_port) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert answers(client_port), "Ray's client server did not start"
    finally:
        done = stop_ray(temp_dir)
    assert done.returncode == 0, done.stderr
    time.sleep(1)
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    assert not [line for line in out.splitlines() if f":{port} " in f"{line} " or temp_dir + "/" in line]
    assert not answers(client_port) and not answers(port)
