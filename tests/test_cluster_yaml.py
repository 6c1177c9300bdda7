"""Checks of the `ray up` cluster definitions (cluster.yaml, cluster/cluster-local.yaml).

Validation uses Ray's own offline path, the one `ray up` runs before it contacts a
cloud: `prepare_config` (merge the provider's defaults.yaml, fill node-type
min/max workers) then `validate_config` (ray/autoscaler/ray-schema.json). Neither
needs credentials; the tests forbid network connections to prove it.
The property tests pin what the project requires of the cluster: a head that runs
no trials, spot GPU workers from zero, one image with the project's versions,
MLflow on the head with proxied artifacts and a private bind, Ray token auth.
"""

import copy
import os
import re
import shlex
import shutil
import signal
import socket
import sqlite3
import subprocess
import tomllib
from pathlib import Path

import jsonschema
import pytest
import yaml
from ray.autoscaler._private.util import prepare_config, validate_config

ROOT = Path(__file__).resolve().parents[1]
AWS_YAML = ROOT / "cluster.yaml"
LOCAL_YAML = ROOT / "cluster" / "cluster-local.yaml"
START_MLFLOW = ROOT / "cluster" / "start_mlflow.sh"
CLUSTER_FILES = {"aws": AWS_YAML, "local": LOCAL_YAML}


@pytest.fixture
def no_network(monkeypatch):
    def refuse(self, address):
        raise AssertionError(f"network connection attempted to {address}")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket.socket, "connect_ex", refuse)


def load(path):
    return yaml.safe_load(path.read_text())


def validated(config):
    prepared = prepare_config(copy.deepcopy(config))
    validate_config(prepared)
    return prepared


def ray_start_flags(command):
    """The --flag=value options of the `ray start` call in a shell command line."""
    words = shlex.split(command.split("ray start", 1)[1])
    flags = {}
    for word in words:
        if word.startswith("--"):
            name, _, value = word[2:].partition("=")
            flags[name] = value
    return flags


def ray_start_command(commands):
    (command,) = [c for c in commands if "ray start" in c]
    return command


def project_pins():
    deps = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
    torch = next(d for d in deps if d.startswith("torch=="))
    return torch.split("==")[1]


# ---------------------------------------------------------------- validation


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_cluster_file_passes_ray_offline_validation(name, no_network):
    prepared = validated(load(CLUSTER_FILES[name]))
    assert prepared["head_node_type"] in prepared["available_node_types"]


def misspelled_top_level_key(text):
    return text.replace("\navailable_node_types:", "\navailable_nodes_types:")


def fractional_gpu_count(text):
    return text.replace('resources: {"CPU": 8, "GPU": 1}', 'resources: {"CPU": 8, "GPU": 0.5}', 1)


def worker_without_node_config(text):
    return re.sub(
        r"\n    node_config:\n      InstanceType: g5\.2xlarge",
        "\n    node_cfg:\n      InstanceType: g5.2xlarge",
        text,
    )


def unknown_docker_option(text):
    return text.replace("  pull_before_run: true", "  pull_before_run: true\n  gpus: all")


@pytest.mark.parametrize(
    "corrupt",
    [misspelled_top_level_key, fractional_gpu_count, worker_without_node_config, unknown_docker_option],
    ids=lambda f: f.__name__,
)
def test_corrupted_copy_is_rejected(corrupt, tmp_path, no_network):
    text = AWS_YAML.read_text()
    broken = corrupt(text)
    assert broken != text, "corruption did not apply; the fixture text changed"
    copy_path = tmp_path / "cluster.yaml"
    copy_path.write_text(broken)
    with pytest.raises(jsonschema.ValidationError):
        validated(load(copy_path))


# ---------------------------------------------------------------- AWS properties


@pytest.fixture(scope="module")
def aws():
    return load(AWS_YAML)


def test_head_runs_no_trials(aws):
    head = aws["available_node_types"][aws["head_node_type"]]
    assert head["resources"] == {"CPU": 0, "GPU": 0}
    assert head["max_workers"] == 0
    flags = ray_start_flags(ray_start_command(aws["head_start_ray_commands"]))
    assert flags["num-cpus"] == "0" and flags["num-gpus"] == "0"
    assert "InstanceMarketOptions" not in head["node_config"], "head must be on-demand"


def test_gpu_workers_are_spot_and_scale_from_zero(aws):
    workers = {
        name: node for name, node in aws["available_node_types"].items() if name != aws["head_node_type"]
    }
    assert workers
    for name, node in workers.items():
        assert node["resources"]["GPU"] >= 1, name
        assert node["min_workers"] == 0, name
        assert node["max_workers"] <= aws["max_workers"], name
        assert node["node_config"]["InstanceMarketOptions"]["MarketType"] == "spot", name
        assert re.fullmatch(r"g[56]\.\w+", node["node_config"]["InstanceType"]), name
    assert aws["provider"]["cache_stopped_nodes"] is False


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_image_matches_project_versions(name):
    config = load(CLUSTER_FILES[name])
    assert re.fullmatch(r"rayproject/ray:2\.60\.0-py311(-\w+)?", config["docker"]["image"])
    dockerfile = (ROOT / "cluster" / "Dockerfile").read_text()
    assert f"FROM {config['docker']['image']}\n" in dockerfile
    torch = project_pins()
    assert f"TORCH_VERSION={torch}\n" in dockerfile
    check = next(c for c in config["setup_commands"] if "assert found" in c)
    assert f"'2.60.0', '{torch}'" in check and "(3, 11)" in check


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_every_node_installs_the_synced_project(name):
    config = load(CLUSTER_FILES[name])
    (project_dir,) = [dst for dst, src in config["file_mounts"].items() if src == "."]
    assert config["setup_commands"][0].split()[:2] == ["pip", "install"]
    assert config["setup_commands"][0].endswith(f"-e {project_dir}")


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_token_auth_on_every_node(name):
    config = load(CLUSTER_FILES[name])
    assert "--env RAY_AUTH_MODE=token" in config["docker"]["run_options"]
    for key in ("head_start_ray_commands", "worker_start_ray_commands"):
        command = ray_start_command(config[key])
        assert re.search(r"export RAY_AUTH_MODE=token\b.*;\s*ray start", command), key
    assert config["file_mounts"]["/home/ray/.ray/auth_token"] == "~/.ray/auth_token"


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_mlflow_starts_on_head_before_ray_with_private_bind(name):
    config = load(CLUSTER_FILES[name])
    head = config["head_start_ray_commands"]
    (mlflow_index,) = [i for i, c in enumerate(head) if "cluster/start_mlflow.sh" in c]
    ray_index = head.index(ray_start_command(head))
    assert mlflow_index < ray_index
    assert not any("start_mlflow" in c for c in config["worker_start_ray_commands"])
    assert "MLFLOW_TRACKING_URI" in head[ray_index]
    assert 'MLFLOW_TRACKING_URI="http://$RAY_HEAD_IP:5000"' in ray_start_command(
        config["worker_start_ray_commands"]
    )
    script = START_MLFLOW.read_text()
    assert "--serve-artifacts" in script and "--artifacts-destination" in script
    assert re.search(r'--host "\$MLFLOW_HOST"', script)


@pytest.mark.parametrize("name", sorted(CLUSTER_FILES))
def test_nothing_binds_all_interfaces(name):
    config = load(CLUSTER_FILES[name])
    flags = ray_start_flags(ray_start_command(config["head_start_ray_commands"]))
    assert flags["dashboard-host"] == "127.0.0.1"
    live_text = yaml.safe_dump(config)  # comments dropped
    assert "0.0.0.0" not in live_text


# ---------------------------------------------------------------- on-prem properties


def test_local_variant_uses_fixed_machines_and_shared_storage():
    config = load(LOCAL_YAML)
    assert config["provider"]["type"] == "local"
    assert config["min_workers"] == config["max_workers"] == len(config["provider"]["worker_ips"])
    flags = ray_start_flags(ray_start_command(config["head_start_ray_commands"]))
    assert flags["num-cpus"] == "0" and flags["num-gpus"] == "0"
    assert "--volume /mnt/cluster-storage:/mnt/cluster-storage" in config["docker"]["run_options"]
    assert any("mountpoint -q /mnt/cluster-storage" in c for c in config["initialization_commands"])


# ---------------------------------------------------------------- MLflow start script


def run_start_mlflow(env, tmp_path, timeout):
    return subprocess.run(
        ["bash", str(START_MLFLOW)],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "*"])
def test_start_mlflow_refuses_wildcard_bind(host, tmp_path):
    result = run_start_mlflow({"MLFLOW_HOST": host, "MLFLOW_HOME": str(tmp_path / "m")}, tmp_path, 30)
    assert result.returncode == 1
    assert "refusing to bind" in result.stderr
    assert not (tmp_path / "m" / "server.pid").exists()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_start_mlflow_serves_and_proxies_artifacts(tmp_path):
    import mlflow

    home, artifacts = tmp_path / "mlflow", tmp_path / "proxied"
    env = {
        "MLFLOW_HOME": str(home),
        "MLFLOW_HOST": "127.0.0.1",
        "MLFLOW_PORT": str(free_port()),
        "MLFLOW_ARTIFACTS_DESTINATION": str(artifacts),
        "MLFLOW_DB": "sqlite",  # the PostgreSQL backend has its own test below
    }
    first = run_start_mlflow(env, tmp_path, 240)
    try:
        assert first.returncode == 0, first.stderr
        uri = (home / "tracking_uri").read_text().strip()
        assert uri == f"http://127.0.0.1:{env['MLFLOW_PORT']}"
        again = run_start_mlflow(env, tmp_path, 60)
        assert again.returncode == 0 and "already serving" in again.stdout

        client = mlflow.MlflowClient(tracking_uri=uri)
        run = client.create_run(client.create_experiment("cluster-check"))
        note = tmp_path / "note.txt"
        note.write_text("proxied")
        client.log_artifact(run.info.run_id, str(note))
        assert client.get_run(run.info.run_id).info.artifact_uri.startswith("mlflow-artifacts:")
        stored = list(artifacts.rglob("note.txt"))
        assert [p.read_text() for p in stored] == ["proxied"]
    finally:
        pid_file = home / "server.pid"
        if pid_file.exists():
            os.killpg(int(pid_file.read_text()), signal.SIGTERM)


def test_server_sizing_is_written_once_in_start_mlflow():
    """The cluster's server: its workers, the database pool and PostgreSQL's connections are decided in
    start_mlflow.sh alone. (The one-person UI a sweep prints, scaling.tracking.uri.ui_command, asks one
    worker of its own.)"""
    script = START_MLFLOW.read_text()
    assert '--workers "$MLFLOW_WORKERS"' in script
    assert re.search(r"^MLFLOW_WORKERS=.*:-4", script, re.M)
    assert re.search(r"^export MLFLOW_SQLALCHEMYSTORE_POOL_SIZE=.*:-10", script, re.M)
    assert re.search(r"^export MLFLOW_SQLALCHEMYSTORE_MAX_OVERFLOW=.*:-30", script, re.M)
    assert "max_connections=$PG_MAX_CONNECTIONS" in script
    elsewhere = [ROOT / "cluster.yaml", *(ROOT / "cluster").iterdir(), *(ROOT / "scaling").rglob("*.py")]
    for path in elsewhere:
        if path != START_MLFLOW and path.is_file():
            text = path.read_text(errors="replace")
            if path == ROOT / "scaling" / "tracking" / "uri.py":
                assert text.count("--workers") == 1 and '"mlflow", "ui", "--workers", "1"' in text
                text = text.replace('"mlflow", "ui", "--workers", "1"', "")
            assert "POOL_SIZE" not in text and "--workers" not in text, path


@pytest.mark.parametrize("db", ["mysql", "postgres"])
def test_start_mlflow_refuses_an_unknown_database(db, tmp_path):
    result = run_start_mlflow(
        {"MLFLOW_HOST": "127.0.0.1", "MLFLOW_HOME": str(tmp_path / "m"), "MLFLOW_DB": db}, tmp_path, 30
    )
    assert result.returncode == 1 and "MLFLOW_DB must be postgresql or sqlite" in result.stderr
    assert not (tmp_path / "m" / "server.pid").exists()


def test_a_head_with_a_sqlite_store_keeps_it_and_backs_it_up(tmp_path):
    import sqlite3

    home = tmp_path / "m"
    home.mkdir()
    with sqlite3.connect(home / "mlflow.db") as db:
        db.execute("CREATE TABLE runs (id TEXT)")
        db.execute("INSERT INTO runs VALUES ('r1')")
    result = run_start_mlflow_args(
        ["backup"], {"MLFLOW_HOST": "127.0.0.1", "MLFLOW_HOME": str(home)}, tmp_path
    )
    assert result.returncode == 0, result.stderr
    assert "keeping this head's SQLite store" in result.stdout
    with sqlite3.connect(home / "backup" / "mlflow.db") as copy_:
        assert copy_.execute("SELECT id FROM runs").fetchall() == [("r1",)]
    assert not (home / "postgres").exists()


def test_restore_refuses_a_folder_that_is_no_backup(tmp_path):
    env = {"MLFLOW_HOST": "127.0.0.1", "MLFLOW_HOME": str(tmp_path / "m")}
    missing = run_start_mlflow_args(["restore", str(tmp_path / "nope")], env, tmp_path)
    assert missing.returncode == 1 and "restore: no backup folder" in missing.stderr
    (tmp_path / "empty").mkdir()
    empty = run_start_mlflow_args(["restore", str(tmp_path / "empty")], env, tmp_path)
    assert empty.returncode == 1 and "holds neither mlflow.dump nor mlflow.db" in empty.stderr
    assert not (tmp_path / "m").exists() or not any((tmp_path / "m").iterdir())


@pytest.mark.slow
def test_restore_puts_a_sqlite_backup_in_place_and_keeps_the_replaced_store(tmp_path):
    """`start_mlflow.sh restore DIR` (docs/cluster.md, "The head is lost"): the server comes back on its
    address serving the backup's runs and artifacts; the store it replaced is kept aside, not deleted."""
    import mlflow

    home = tmp_path / "m"
    env = {"MLFLOW_HOME": str(home), "MLFLOW_HOST": "127.0.0.1", "MLFLOW_PORT": str(free_port())}
    try:
        assert run_start_mlflow_args([], {**env, "MLFLOW_DB": "sqlite"}, tmp_path, 300).returncode == 0
        uri = (home / "tracking_uri").read_text().strip()
        client = mlflow.MlflowClient(tracking_uri=uri)
        experiment = client.create_experiment("restore-check")
        kept = client.create_run(experiment).info.run_id
        (tmp_path / "note.txt").write_text("kept")
        client.log_artifact(kept, str(tmp_path / "note.txt"))
        assert run_start_mlflow_args(["backup"], env, tmp_path).returncode == 0
        backup = tmp_path / "mlflow-backup"  # as the documented rsync-down lines leave it
        shutil.copytree(home / "backup", backup)
        shutil.copytree(home / "artifacts", backup / "artifacts")
        later = client.create_run(experiment).info.run_id  # after the backup: not in it

        restored = run_start_mlflow_args(["restore", str(backup)], {"MLFLOW_HOME": str(home)}, tmp_path, 300)
        assert restored.returncode == 0, restored.stderr + restored.stdout
        assert (home / "tracking_uri").read_text().strip() == uri  # the same address and port
        runs = {r.info.run_id for r in client.search_runs([experiment])}
        assert runs == {kept}
        assert Path(client.download_artifacts(kept, "note.txt", str(tmp_path / "got"))).read_text() == "kept"
        (aside,) = home.glob("replaced-*")
        with sqlite3.connect(aside / "mlflow.db") as db:
            assert (later,) in db.execute("SELECT run_uuid FROM runs").fetchall()
    finally:
        subprocess.run(
            ["python", str(ROOT / "cluster" / "stop_ray.py"), str(home / "no-ray"), "--mlflow"],
            env={**os.environ, "MLFLOW_HOME": str(home)},
            capture_output=True,
            timeout=120,
        )


def run_start_mlflow_args(args, env, tmp_path, timeout=60):
    return subprocess.run(
        ["bash", str(START_MLFLOW), *args],
        env={"PATH": os.environ["PATH"], "HOME": str(tmp_path), **env},
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def postgres_missing() -> str | None:
    """Why start_mlflow.sh's PostgreSQL cannot run here (None: it can)."""
    import glob
    import importlib.util
    import shutil

    if importlib.util.find_spec("psycopg2") is None:
        return "psycopg2 is not installed (pip install -e '.[postgres]')"
    if not glob.glob("/usr/lib/postgresql/*/bin/initdb") and not shutil.which("initdb"):
        return "PostgreSQL is not installed (apt-get install postgresql)"
    return None


def reachable_dir() -> Path:
    """A folder every user can search: as root, start_mlflow.sh runs PostgreSQL as user postgres, and
    pytest's own temporary folders are root's alone."""
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="pg-", dir="/tmp"))
    path.chmod(0o755)
    return path


@pytest.mark.slow
def test_start_mlflow_postgresql_serves_backs_up_and_restores(tmp_path):
    """The default backend: a PostgreSQL of its own in MLFLOW_HOME; a second call finds it up; `backup`
    dumps it while it serves; a new MLFLOW_HOME started from the dump holds the same run; stop_ray.py
    --mlflow stops MLflow and PostgreSQL."""
    import shutil

    import mlflow

    missing = postgres_missing()
    if missing:
        pytest.skip(missing)
    base = reachable_dir()
    homes = [base / "head", base / "restored"]
    try:
        env = {"MLFLOW_HOME": str(homes[0]), "MLFLOW_HOST": "127.0.0.1", "MLFLOW_PORT": str(free_port())}
        first = run_start_mlflow_args([], env, tmp_path, 400)
        assert first.returncode == 0, first.stderr + first.stdout
        assert "(postgresql;" in first.stdout and (homes[0] / "postgres" / "PG_VERSION").exists()
        again = run_start_mlflow_args([], env, tmp_path, 120)
        assert again.returncode == 0 and "already serving" in again.stdout
        uri = (homes[0] / "tracking_uri").read_text().strip()
        client = mlflow.MlflowClient(tracking_uri=uri)
        run = client.create_run(client.create_experiment("pg-check"))
        client.log_metric(run.info.run_id, "train/loss", 0.5, step=3)
        backup = run_start_mlflow_args(["backup"], env, tmp_path, 120)
        assert backup.returncode == 0, backup.stderr
        dump = homes[0] / "backup" / "mlflow.dump"
        assert dump.stat().st_size > 0

        restored_env = {
            "MLFLOW_HOME": str(homes[1]),
            "MLFLOW_HOST": "127.0.0.1",
            "MLFLOW_PORT": str(free_port()),
            "MLFLOW_RESTORE_FROM": str(dump),
        }
        second = run_start_mlflow_args([], restored_env, tmp_path, 400)
        assert second.returncode == 0, second.stderr + second.stdout
        restored = mlflow.MlflowClient(tracking_uri=(homes[1] / "tracking_uri").read_text().strip())
        history = restored.get_metric_history(run.info.run_id, "train/loss")
        assert [(m.step, m.value) for m in history] == [(3, 0.5)]
    finally:
        for home in homes:
            subprocess.run(
                ["python", str(ROOT / "cluster" / "stop_ray.py"), str(home / "no-ray"), "--mlflow"],
                env={**os.environ, "MLFLOW_HOME": str(home)},
                capture_output=True,
                timeout=120,
            )
        leftover = subprocess.run(["pgrep", "-f", str(base)], capture_output=True, text=True).stdout
        shutil.rmtree(base, ignore_errors=True)
    assert leftover == "", f"processes of the test's servers left running: {leftover}"
