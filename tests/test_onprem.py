"""cluster/onprem.py writes the on-premises cluster file from cluster/cluster-local.yaml and a user's settings
(docs/cluster.md, "On-premises cluster"): the template is its own output, every written file passes Ray's
offline validation, and the settings land where `ray up` uses them."""

import copy
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
TEMPLATE = ROOT / "cluster" / "cluster-local.yaml"
SCRIPT = ROOT / "cluster" / "onprem.py"


def write(tmp_path, *args):
    out = tmp_path / "my-cluster.yaml"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), *args, "-o", str(out)], capture_output=True, text=True, timeout=60
    )
    return done, (yaml.safe_load(out.read_text()) if out.exists() else None)


def ray_start(commands):
    (command,) = [c for c in commands if "ray start" in c]
    return shlex.split(command.split("ray start", 1)[1])


def test_template_is_the_scripts_output_for_its_own_settings(tmp_path):
    done, written = write(
        tmp_path,
        "--head-ip",
        "10.0.0.10",
        "--worker-ip",
        "10.0.0.11",
        "--worker-ip",
        "10.0.0.12",
        "--ssh-user",
        "researcher",
        "--ssh-key",
        "~/.ssh/id_ed25519",
    )
    assert done.returncode == 0, done.stderr
    assert written == yaml.safe_load(TEMPLATE.read_text())


def test_one_machine_without_docker(tmp_path):
    python = "/opt/venv/bin/python"
    done, config = write(
        tmp_path,
        "--head-ip",
        "127.0.0.1",
        "--ssh-user",
        "me",
        "--ssh-key",
        "~/.ssh/k",
        "--no-docker",
        "--python",
        python,
        "--storage",
        "/srv/runs",
        "--ports",
        "47000",
        "--temp-dir",
        "/tmp/ray-mine",
        "--cluster-name",
        "desk",
    )
    assert done.returncode == 0, done.stderr
    validate_config(prepare_config(copy.deepcopy(config)))
    assert "docker" not in config and config["cluster_name"] == "desk"
    assert config["provider"]["worker_ips"] == [] and config["min_workers"] == config["max_workers"] == 0
    assert config["auth"] == {"ssh_user": "me", "ssh_private_key": "~/.ssh/k"}
    assert config["initialization_commands"] == ["mkdir -p /srv/runs"]  # no NFS mount check on one machine
    head = config["head_start_ray_commands"]
    assert all(c.startswith("export PATH=/opt/venv/bin:$PATH ") for c in head[:3])
    flags = ray_start(head)
    assert (
        "--port=47000" in flags
        and "--dashboard-port=47001" in flags
        and "--dashboard-agent-listen-port=47003" in flags
    )
    assert "--temp-dir=/tmp/ray-mine" in flags and "--node-ip-address=127.0.0.1" in flags
    assert "--num-cpus=0" not in flags, "a one-machine cluster runs its trials on the head"
    # Ray's client server on this cluster's port where the head's Python has Ray's client (else none: `ray
    # start` refuses the flag), never on Ray's default 10001
    assert "$(python -c 'import grpc' 2>/dev/null && echo --ray-client-server-port=47002)" in head[2]
    assert "MLFLOW_DB=sqlite" in head[1] and config["head_setup_commands"] == [], "one machine: SQLite"
    assert "MLFLOW_PORT=47004" in head[1] and "stop_ray.py /tmp/ray-mine" in head[0]
    assert "RAY_ADDRESS=%s" in head[3] and "127.0.0.1:47000" in head[3] and "/srv/runs/icl-scaling" in head[3]
    assert not any(c.strip().startswith("ray stop") for c in head + config["worker_start_ray_commands"])


def test_the_mlflow_database_is_sqlite_on_one_machine_and_postgresql_with_workers(tmp_path):
    base = ["--head-ip", "10.0.0.1", "--ssh-user", "me", "--ssh-key", "k", "--no-docker", "--python", "/p/py"]
    for extra, db in (
        ([], "sqlite"),
        (["--worker-ip", "10.0.0.2"], "postgresql"),
        (["--mlflow-db", "postgresql"], "postgresql"),
        (["--worker-ip", "10.0.0.2", "--mlflow-db", "sqlite"], "sqlite"),
    ):
        done, config = write(tmp_path, *base, *extra)
        assert done.returncode == 0, done.stderr
        mlflow_line = config["head_start_ray_commands"][1]
        assert ("MLFLOW_DB=sqlite" in mlflow_line) == (db == "sqlite"), (extra, mlflow_line)
        # PostgreSQL's check (a head without Docker must have it installed) only where it is the database
        assert bool(config["head_setup_commands"]) == (db == "postgresql"), extra


@pytest.mark.parametrize(
    "args, message",
    [
        (["--no-docker"], "--no-docker and --python go together"),
        (["--python", "/usr/bin/python3"], "--no-docker and --python go together"),
        ([], "--head-ip"),
    ],
)
def test_bad_settings_exit_2_and_write_nothing(tmp_path, args, message):
    base = [] if not args else ["--head-ip", "10.0.0.1"]
    done, written = write(tmp_path, *base, "--ssh-user", "me", "--ssh-key", "k", *args)
    assert done.returncode == 2 and message in done.stderr and written is None
