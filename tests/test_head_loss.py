"""The head of a real multi-node Ray cluster lost mid-sweep (issue 45, slow, root).

The cluster is the file that ``cluster/onprem.py`` writes (docs/cluster.md, "On-premises cluster")
for a head and one worker, both on this machine without Docker: the test runs what `ray up`
runs on each node, command for command from that file (the head's setup, the head's start commands, the
worker's), so the head has its own MLflow server on a real PostgreSQL (``cluster/start_mlflow.sh``) and
advertises no CPU: every trial runs on the worker. The driver runs on the head by the plain documented
command (it finds the cluster, its MLflow server and storage in the head's ``cluster.env``). Then:

- ``test_head_lost_with_its_disk``: mid-sweep (a cell complete, one training with checkpoints, one
  pending), SIGKILL of the head's processes: the driver, GCS, raylet and the rest of the head's Ray, the
  MLflow server and PostgreSQL. Brought up again as `ray up` does, the same command finishes the sweep:
  the complete cell is not retrained, the running one resumes from its last checkpoint, no cell is trained
  from the start twice, and every loss point is there once.
- ``test_head_lost_with_its_disk_restored_from_an_older_backup``: docs/cluster.md's backup taken
  mid-sweep; the sweep goes on; the head is killed and its MLflow folder deleted (the cloud case: the disk
  is gone); a new head restored from the backup (``start_mlflow.sh restore``). The backup is older than
  the storage: the driver names the cells whose checkpoints are ahead of their runs and trains them again
  from step 0; no cell is counted twice or skipped, every loss point is there once.

Needs root (PostgreSQL then runs as user ``postgres``), Debian's postgresql and psycopg2 (the postgres
extra); skips saying which is missing. 7 and 9 minutes on a 2-core machine shared by other work (load ~20):

    python -m pytest -m slow tests/test_head_loss.py
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from scaling.planning.plan import load_plan
from scaling.trial.checkpoints import CheckpointStore

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
STEPS, EVERY = 2000, 100


def load_stop_ray():
    spec = importlib.util.spec_from_file_location("stop_ray", ROOT / "cluster" / "stop_ray.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


STOP_RAY = load_stop_ray()


def missing() -> str | None:
    if os.geteuid() != 0:
        return "needs root: PostgreSQL runs as user postgres"
    if importlib.util.find_spec("psycopg2") is None:
        return "psycopg2 is not installed (pip install -e '.[postgres]')"
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and not shutil.which("initdb"):
        return "PostgreSQL is not installed (apt-get install postgresql)"
    return None


def listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("", port))
        except OSError:
            return False
    return True


def free_port_block(size: int = 5) -> int:
    """A base port whose next ``size`` ports nothing uses (bound, listening, or a connection's own port)."""
    for base in range(20000 + os.getpid() % 400 * 10, 32000, 10):
        if all(bindable(base + i) for i in range(size)):
            return base
    raise RuntimeError("no free port block")


def sh(command: str, env: dict, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(["bash", "-c", command], env=env, capture_output=True, text=True, timeout=timeout)
    assert done.returncode == 0, f"{command}\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    return done


@dataclass
class Cluster:
    """A head and a worker on this machine, from the cluster file onprem.py writes (see the docstring)."""

    base: Path  # every user can search it: PostgreSQL (user postgres) reaches its folder below
    port: int = field(default_factory=free_port_block)
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:6])

    def __post_init__(self):
        self.home = self.base / "head-home"  # the head's HOME: cluster.env, the MLflow folder, the token
        self.home.mkdir()
        self.home.chmod(0o755)
        self.storage = self.base / "storage"
        self.head_temp, self.worker_temp = f"/tmp/ray-hl-{self.tag}", f"/tmp/ray-hlw-{self.tag}"
        self.env = {
            "PATH": f"{Path(sys.executable).parent}:/usr/sbin:/usr/bin:/sbin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "LC_ALL": "C.UTF-8",
            "RAY_HEAD_IP": "127.0.0.1",  # what `ray up` sets for the worker's commands
            "SCALING_LOSS_FLUSH_S": "0",  # losses reach MLflow at every checkpoint: the backup is behind
        }
        written = self.base / "cluster.yaml"
        sh(
            f"{sys.executable} {ROOT}/cluster/onprem.py --head-ip 127.0.0.1 --worker-ip 127.0.0.1"
            f" --ssh-user root --ssh-key /dev/null --no-docker --python {sys.executable}"
            f" --storage {self.storage} --ports {self.port} --temp-dir {self.head_temp}"
            f" --cluster-name hl-{self.tag} --project-dir {ROOT} -o {written}",
            self.env,
        )
        self.config = yaml.safe_load(written.read_text())
        # `ray up` leaves the autoscaler's config on the head; its worker list is fixed here (no SSH)
        idle = {**self.config, "min_workers": 0, "max_workers": 0}
        idle["provider"] = {**self.config["provider"], "worker_ips": []}
        (self.home / "ray_bootstrap_config.yaml").write_text(yaml.safe_dump(idle))
        sh("ray get-auth-token --generate", self.env)
        self.mlflow_home = self.home / "icl-scaling-mlflow"
        self.uri = f"http://127.0.0.1:{self.port + 4}"

    def up(self) -> None:
        """What `ray up` runs: the head's setup and start commands, then the worker's (a machine of its own:
        its own Ray temp dir)."""
        for command in self.config["head_setup_commands"] + self.config["head_start_ray_commands"]:
            sh(command, self.env)
        for command in self.config["worker_start_ray_commands"]:
            sh(command.replace(self.head_temp, self.worker_temp), self.env)
        assert listening(self.port) and listening(self.port + 4)

    def driver(self, sweep: Path, log) -> subprocess.Popen:
        """The documented command on the head: `python -m scaling.sweep SWEEP`, no flags."""
        env = {
            **self.env,
            "PYTHONPATH": str(ROOT),
            "SCALING_CLUSTER_ENV": str(self.home / ".icl-scaling" / "cluster.env"),
            "RAY_AUTH_MODE": "token",
            "PYTHONUNBUFFERED": "1",
        }
        return subprocess.Popen(
            [sys.executable, "-m", "scaling.sweep", str(sweep)],
            cwd=sweep.parent,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )

    def kill_head(self, driver: subprocess.Popen) -> None:
        """SIGKILL of everything that runs on the head: the driver, its Ray, MLflow and PostgreSQL."""
        os.killpg(driver.pid, signal.SIGKILL)
        driver.wait()
        victims = STOP_RAY.ray_processes(self.head_temp) + STOP_RAY.mlflow_group(self.mlflow_home)
        postmaster = self.mlflow_home / "postgres" / "postmaster.pid"
        if postmaster.exists():
            main = STOP_RAY.psutil.Process(int(postmaster.read_text().split()[0]))
            victims += [main, *main.children(recursive=True)]
        for process in victims:
            with contextlib.suppress(STOP_RAY.psutil.NoSuchProcess):
                process.kill()
        STOP_RAY.psutil.wait_procs(victims, timeout=30)
        assert not listening(self.port) and not listening(self.port + 4)

    def down(self) -> None:
        for temp in (self.head_temp, self.worker_temp):
            subprocess.run(
                [sys.executable, str(ROOT / "cluster" / "stop_ray.py"), temp, "--grace", "5", "--mlflow"],
                env={**self.env, "MLFLOW_HOME": str(self.mlflow_home)},
                capture_output=True,
                timeout=300,
            )
            shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture
def cluster():
    why = missing()
    if why:
        pytest.skip(why)
    base = Path(tempfile.mkdtemp(prefix="headloss-", dir="/tmp"))
    base.chmod(0o755)
    made = Cluster(base)
    try:
        made.up()
        yield made
    finally:
        made.down()
        shutil.rmtree(base, ignore_errors=True)


def write_sweep(cluster: Cluster, name: str) -> tuple[Path, list[str]]:
    """Three tiny cells trained one at a time on the worker (the head has no CPU), checkpointed every 100
    steps; the sweep file and the cells' keys."""
    folder = cluster.base / "sweeps"
    folder.mkdir(exist_ok=True)
    sweep = {
        "name": name,
        "defaults": {
            "task": {"family": "linear", "d": 2, "noise_std": 0.1},
            "train": {
                "steps": STEPS,
                "batch_size": 16,
                "lr": 1e-3,
                "checkpoint_every": EVERY,
                "log_every": EVERY,
                "device": "cpu",
            },
            "eval": {"prompts": 32, "bootstrap": 50},
            "N": 4,
        },
        "models": {"gpt2": {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8, "resources": {"cpu": 1}}},
        "grid": {"model": ["gpt2"], "T": [4], "seed": [0, 1, 2]},
        "run": {"max_concurrent": 1, "pack": "off"},
    }
    path = folder / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep))
    return path, [p.cell.key for p in load_plan(path).cells]


def cell_runs(uri: str, name: str) -> dict[str, object]:
    client = MlflowClient(uri)
    experiment = client.get_experiment_by_name(name)
    runs = client.search_runs([experiment.experiment_id], "tags.kind = 'cell'") if experiment else []
    keys = [r.data.tags["cell_key"] for r in runs]
    assert len(keys) == len(set(keys)), f"a cell with two runs: {keys}"
    return {r.data.tags["cell_key"]: r for r in runs}


def wait_until(condition, driver, log: Path, timeout: float = 600) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert driver.poll() is None, f"the driver ended early:\n{log.read_text()[-4000:]}"
        assert time.monotonic() < deadline, f"timed out:\n{log.read_text()[-4000:]}"
        time.sleep(0.5)


def mid_sweep(cluster: Cluster, name: str, keys: list[str]):
    """A test of the cells' state: one complete in MLflow and another with a checkpoint of 2 or more
    segments, not yet at its end."""
    store = CheckpointStore(f"{cluster.storage}/icl-scaling/{name}")

    def reached() -> bool:
        with contextlib.suppress(Exception):
            complete = [
                k for k, r in cell_runs(cluster.uri, name).items() if r.data.tags["status"] == "complete"
            ]
            steps = [store.peek(k).get("step", 0) for k in keys if k not in complete]
            return len(complete) >= 1 and any(2 * EVERY <= s < STEPS for s in steps)
        return False

    return reached, store


def check_whole(client: MlflowClient, runs: dict) -> None:
    """Every cell complete, one run each (cell_runs), every loss point once."""
    for key, run in runs.items():
        assert run.data.tags["status"] == "complete", (key, run.data.tags)
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "train/loss")]
        assert steps == list(range(EVERY, STEPS + 1, EVERY)), (key, steps)


def lease_records(cluster: Cluster, name: str, key: str) -> int:
    """How many trials trained the cell (scaling.trial.leases: one line per trial that went on to train
    it)."""
    log = cluster.storage / "icl-scaling" / name / "leases" / f"{key}.log"
    return len(log.read_text().splitlines()) if log.exists() else 0


def test_head_lost_with_its_disk(cluster, tmp_path):
    sweep, keys = write_sweep(cluster, "headloss")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    with open(first_log, "w") as log:
        driver = cluster.driver(sweep, log)
        reached, store = mid_sweep(cluster, "headloss", keys)
        try:
            wait_until(reached, driver, first_log)
        finally:
            cluster.kill_head(driver)
    assert f"tracking {cluster.uri}" in first_log.read_text()

    cluster.up()  # `ray up` again: PostgreSQL recovers what it committed, MLflow serves it
    before = cell_runs(cluster.uri, "headloss")
    done_before = {k: r.info.end_time for k, r in before.items() if r.data.tags["status"] == "complete"}
    resume_at = {k: store.peek(k).get("step") for k in keys if k not in done_before}
    assert done_before and any(step for step in resume_at.values()), (done_before, resume_at)

    with open(second_log, "w") as log:
        assert cluster.driver(sweep, log).wait(timeout=900) == 0, second_log.read_text()
    client, after = MlflowClient(cluster.uri), cell_runs(cluster.uri, "headloss")
    assert sorted(after) == sorted(keys)
    check_whole(client, after)
    for key, run in after.items():
        resumed = [m.value for m in client.get_metric_history(run.info.run_id, "trial/resumed_from")]
        if key in done_before:  # finished: not retrained, not touched
            assert run.info.end_time == done_before[key] and not resumed
            assert lease_records(cluster, "headloss", key) == 1
        elif resume_at[key] is not None:  # was training: resumed from its last checkpoint, once
            assert resumed == [resume_at[key]], (key, resumed, resume_at[key])
        else:  # pending: trained once, from the start
            assert not resumed and lease_records(cluster, "headloss", key) == 1


def test_head_lost_with_its_disk_restored_from_an_older_backup(cluster, tmp_path):
    sweep, keys = write_sweep(cluster, "restored")
    first_log, second_log = tmp_path / "first.log", tmp_path / "second.log"
    backup = tmp_path / "mlflow-backup"
    with open(first_log, "w") as log:
        driver = cluster.driver(sweep, log)
        reached, store = mid_sweep(cluster, "restored", keys)
        try:
            wait_until(reached, driver, first_log)
            # docs/cluster.md's backup: the database dumped while trials log, then copied off the head
            mlflow_env = {**cluster.env, "MLFLOW_HOME": str(cluster.mlflow_home)}
            sh(f"bash {ROOT}/cluster/start_mlflow.sh backup", mlflow_env)
            shutil.copytree(cluster.mlflow_home / "backup", backup)
            shutil.copytree(cluster.mlflow_home / "artifacts", backup / "artifacts")
            backed_up = cell_runs(cluster.uri, "restored")
            last_logged = {k: last_loss_step(cluster.uri, r) for k, r in backed_up.items()}

            def ahead() -> bool:  # the sweep went on: some cell's checkpoint is past what the backup holds
                return any(store.peek(k).get("logged", -1) > last_logged.get(k, 0) for k in keys)

            wait_until(ahead, driver, first_log)
        finally:
            cluster.kill_head(driver)
    shutil.rmtree(cluster.mlflow_home)  # the head's disk is gone

    cluster.up()  # a new head: an empty MLflow store
    assert cell_runs(cluster.uri, "restored") == {}
    sh(
        f"bash {ROOT}/cluster/start_mlflow.sh restore {backup}",
        {**cluster.env, "MLFLOW_HOME": str(cluster.mlflow_home)},
    )
    restored = cell_runs(cluster.uri, "restored")  # what the backup holds
    assert restored and set(restored) <= set(backed_up)
    held = {k: last_loss_step(cluster.uri, r) for k, r in restored.items()}
    ahead_of_backup = {k for k in keys if store.peek(k).get("logged", -1) > held.get(k, 0)}
    complete_in_backup = {k for k, r in restored.items() if r.data.tags["status"] == "complete"}
    assert ahead_of_backup and complete_in_backup, (ahead_of_backup, complete_in_backup)

    with open(second_log, "w") as log:
        assert cluster.driver(sweep, log).wait(timeout=900) == 0, second_log.read_text()
    text = second_log.read_text()
    said = re.search(r"the tracking store is behind the storage for (\d+) cells?.*?: (.*)", text)
    assert said, text
    client, after = MlflowClient(cluster.uri), cell_runs(cluster.uri, "restored")
    assert sorted(after) == sorted(keys)
    check_whole(client, after)
    redone = {k for k, r in after.items() if "redone" in r.data.tags}
    assert redone == ahead_of_backup and int(said[1]) == len(redone), (redone, ahead_of_backup, text)
    assert all(after[k].info.run_name in said[2] for k in redone), text
    for key in complete_in_backup:  # complete in the backup: kept, not trained again
        assert after[key].info.end_time == restored[key].info.end_time


def last_loss_step(uri: str, run) -> int:
    history = MlflowClient(uri).get_metric_history(run.info.run_id, "train/loss")
    return max((m.step for m in history), default=0)
