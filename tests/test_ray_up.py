"""A real `ray up` of the on-premises cluster file, on this machine over SSH on loopback (slow, root only).

What a user of docs/cluster.md does with one machine as the cluster, command for command:
`python cluster/onprem.py ... --no-docker` (the on-prem file adapted through its documented settings:
head address, SSH user and key, no Docker, storage, ports and Ray temp dir of its own, so that other
Rays on this machine are never touched), `ray up`, the smoke sweep by the documented plain command
through `ray exec`, a rerun that trains nothing, `python -m analysis` on the head, the backup and
restore of MLflow's store, then the documented teardown; nothing of the cluster may be left running.
Every command runs with the user's environment: a virtual environment made by exactly the README's
install line (tests/readme_env.py; cached, ~4 minutes the first time), on PATH for the launcher and the
head's interpreter, so a module of the documented path that imports a package the project does not
declare fails here (issue 35: cluster/stop_ray.py's psutil) as it fails for a user.

Needs root (to start its own sshd), Debian's openssh-server and rsync (installed with apt-get when
missing) and 127.0.0.1:22 free; skips with the reason otherwise. The sshd listens on 127.0.0.1 only and
admits one throwaway key, whose sessions get a throwaway HOME (so the cluster's files, its
~/.icl-scaling/cluster.env included, never land in the real home of the account). ~10 minutes on 2 cores:

    python -m pytest -m slow tests/test_ray_up.py
"""

from __future__ import annotations

import contextlib
import os
import shutil
import socket
import subprocess
import time
import uuid
from pathlib import Path

import pytest
from doc_commands import fenced_commands
from readme_env import readme_venv

pytestmark = [pytest.mark.slow, pytest.mark.e2e]

ROOT = Path(__file__).resolve().parents[1]
SMOKE_CELLS = 24
SECTION = "**One machine as the cluster**"
# The section's commands, in order, by how each starts (the test fails if the section changes them).
DOCUMENTED = (
    "python cluster/onprem.py --head-ip 127.0.0.1 ",
    "ray get-auth-token --generate",
    "ray up -y my-cluster.yaml",
    "ray exec my-cluster.yaml 'cd ~/icl-scaling-cluster && python -m scaling.sweep sweeps/smoke.yaml'",
    "ray exec my-cluster.yaml 'cd ~/icl-scaling-cluster && python -m analysis sweeps/smoke.yaml'",
    "ray exec my-cluster.yaml 'python ~/icl-scaling-cluster/cluster/stop_ray.py /tmp/ray --mlflow",
    "ray down -y my-cluster.yaml",
)


def listening(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket() as s:
        s.settimeout(1)
        return s.connect_ex((host, port)) == 0


def free_port_block(size: int = 5) -> int:
    """A base port whose next ``size`` ports are free (Ray's and MLflow's ports of this cluster)."""
    for base in range(47000 + os.getpid() % 500 * 10, 60000, 10):
        if not any(listening(base + i) for i in range(size)):
            return base
    raise RuntimeError("no free port block")


def run(
    cmd: list[str], env: dict, timeout: float, check: bool = True, cwd: Path = ROOT
) -> subprocess.CompletedProcess:
    start = time.monotonic()
    done = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    print(
        f"$ {' '.join(cmd)}  ({time.monotonic() - start:.0f} s, exit {done.returncode})\n"
        f"{done.stdout[-3000:]}{done.stderr[-3000:]}"
    )
    if check:
        assert done.returncode == 0, (
            f"{cmd} failed ({done.returncode}):\n{done.stdout[-4000:]}\n{done.stderr[-4000:]}"
        )
    return done


def ensure_sshd() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root: the test starts its own sshd on 127.0.0.1:22")
    missing = [
        p
        for p in ("openssh-server", "rsync")
        if not shutil.which({"openssh-server": "sshd"}.get(p, p), path="/usr/sbin:/usr/bin:/sbin:/bin")
    ]
    if missing:
        if not shutil.which("apt-get"):
            pytest.skip(f"needs {', '.join(missing)} and there is no apt-get to install them")
        installed = subprocess.run(
            ["apt-get", "install", "-y", "-q", "--no-install-recommends", *missing],
            env={**os.environ, "DEBIAN_FRONTEND": "noninteractive"},
            capture_output=True,
            text=True,
            timeout=900,
        )
        if installed.returncode != 0:
            pytest.skip(f"could not install {', '.join(missing)}: {installed.stderr[-500:]}")
    if listening(22):
        pytest.skip("127.0.0.1:22 is taken by another sshd; this test starts its own there")
    return shutil.which("sshd", path="/usr/sbin:/usr/bin:/sbin:/bin")


@pytest.fixture
def loopback_ssh(tmp_path):
    """An sshd of this test on 127.0.0.1:22 admitting one new key; yields (key, the sessions' HOME)."""
    sshd = ensure_sshd()
    ssh_dir, home = tmp_path / "ssh", tmp_path / "head-home"
    ssh_dir.mkdir()
    home.mkdir()
    key = ssh_dir / "id_ed25519"
    for path, comment in ((ssh_dir / "host_ed25519", "host"), (key, "client")):
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)], check=True
        )
    (ssh_dir / "authorized_keys").write_text(
        f'environment="HOME={home}" {(ssh_dir / "id_ed25519.pub").read_text()}'
    )
    config = ssh_dir / "sshd_config"
    config.write_text(
        "\n".join(
            [
                "ListenAddress 127.0.0.1",
                "Port 22",
                f"HostKey {ssh_dir / 'host_ed25519'}",
                f"PidFile {ssh_dir / 'sshd.pid'}",
                f"AuthorizedKeysFile {ssh_dir / 'authorized_keys'}",
                "StrictModes no",
                "PasswordAuthentication no",
                "KbdInteractiveAuthentication no",
                "PermitRootLogin prohibit-password",
                "PermitUserEnvironment yes",
                "UsePAM no",
                f"AllowUsers {os.environ.get('USER', 'root')} root",
                "MaxSessions 50",
                "MaxStartups 50",
                "",
            ]
        )
    )
    Path("/run/sshd").mkdir(exist_ok=True)
    server = subprocess.Popen(
        [sshd, "-D", "-e", "-f", str(config)],
        stdout=subprocess.DEVNULL,
        stderr=open(ssh_dir / "sshd.log", "w"),
    )
    deadline = time.monotonic() + 20
    while not listening(22) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert listening(22), (ssh_dir / "sshd.log").read_text()
    try:
        yield key, home
    finally:
        server.terminate()
        server.wait(timeout=20)


def ray_processes(temp_dir: str, gcs: str) -> list[str]:
    """The processes of the cluster: naming its temp dir or its GCS address (Ray's client server names
    only the address), or holding a file open under its temp dir."""
    out = subprocess.run(["ps", "-ww", "-eo", "pid,args"], capture_output=True, text=True).stdout
    found = [line for line in out.splitlines() if temp_dir + "/" in line or f"={gcs} " in f"{line} "]
    for fd in Path("/proc").glob("[0-9]*/fd/*"):
        with contextlib.suppress(OSError):
            if os.readlink(fd).startswith(temp_dir + "/"):
                found.append(f"{fd.parts[2]} holds {os.readlink(fd)}")
    return found


def one_machine_section() -> list[str]:
    """The commands of docs/cluster.md's "One machine as the cluster" and its teardown, as documented."""
    doc = ROOT / "docs" / "cluster.md"
    lines = doc.read_text().splitlines()
    start = next(i for i, line in enumerate(lines, 1) if line.startswith(SECTION))
    end = next(i for i, line in enumerate(lines, 1) if i > start and line.startswith("`tests/test_ray_up"))
    return [c.text for c in fenced_commands(doc) if start < int(c.source.rsplit(":", 1)[1]) < end]


def as_here(command: str, values: dict[str, str]) -> str:
    """A documented command with the user's values (the doc's placeholders) replaced by this test's."""
    for placeholder, value in values.items():
        command = command.replace(placeholder, value)
    return command


def test_ray_up_smoke_sweep_on_the_cluster_mlflow_then_ray_down(loopback_ssh, tmp_path):
    from mlflow.tracking import MlflowClient

    key, head_home = loopback_ssh
    python = readme_venv()  # the README's .venv: the launcher's `ray` and the head's interpreter
    tag = uuid.uuid4().hex[:6]
    name, temp_dir, base = f"icl-rayup-{tag}", f"/tmp/ray-icl-{tag}", free_port_block()
    storage = str(tmp_path / "storage")
    launcher_home = tmp_path / "launcher-home"
    launcher_home.mkdir()
    env = {
        "PATH": f"{python.parent}:/usr/sbin:/usr/bin:/sbin:/bin",
        "HOME": str(launcher_home),
        "RAY_AUTH_MODE": "token",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }
    cluster = tmp_path / "cluster.yaml"
    documented = one_machine_section()
    assert [c[: len(start)] for c, start in zip(documented, DOCUMENTED)] == list(DOCUMENTED), documented
    # The user's values in the section, and this test's: the sshd admits root with the throwaway key; the
    # head's interpreter is the README's .venv, named by its full path as the section allows
    values = {
        "my-cluster.yaml": str(cluster),
        "$USER": "root",
        "~/.ssh/id_ed25519": str(key),
        "$PWD/.venv/bin/python": str(python),
        "~/icl-runs": storage,
        "stop_ray.py /tmp/ray ": f"stop_ray.py {temp_dir} ",
        "&& python -m": f"&& {python} -m",
        "'python ~/": f"'{python} ~/",
    }
    onprem, token, up, sweep, analysis, stop, down = (as_here(c, values) for c in documented)
    # and settings of its own (documented ones), so that other Rays and servers on this machine are never
    # touched: ports, Ray temp dir, cluster name. Nothing else: not --mlflow-db (issue 43: the section as
    # written stopped in the head's setup when the default database became PostgreSQL).
    run(["bash", "-c", f"{onprem} --ports {base} --temp-dir {temp_dir} --cluster-name {name}"], env, 60)
    run(["bash", "-c", token], env, 60)
    uri, gcs = f"http://127.0.0.1:{base + 4}", f"127.0.0.1:{base}"
    client_installed = run([str(python), "-c", "import grpc"], env, 60, check=False).returncode == 0
    state_file = Path("/tmp/ray") / f"cluster-{name}.state"
    try:
        run(["bash", "-c", up], env, 900)
        cluster_env = (head_home / ".icl-scaling" / "cluster.env").read_text()
        assert f"RAY_ADDRESS={gcs}\n" in cluster_env and f"MLFLOW_TRACKING_URI={uri}\n" in cluster_env
        assert listening(base) and listening(base + 4)
        # Ray's client server runs where the README's venv has Ray's client, and on this cluster's port
        assert listening(base + 2) == client_installed

        # The documented command, without flags: the driver finds the cluster and its MLflow server.
        first = run(["bash", "-c", sweep], env, 1800)
        assert "on the `ray up` cluster of" in first.stdout and f"tracking {uri}" in first.stdout
        client = MlflowClient(uri)
        experiment = client.get_experiment_by_name("smoke")
        cells = client.search_runs([experiment.experiment_id], "tags.kind = 'cell'")
        assert len(cells) == SMOKE_CELLS and {r.data.tags["status"] for r in cells} == {"complete"}
        assert not (head_home / "icl-scaling-cluster" / "mlflow.db").exists(), (
            "the driver fell back to SQLite"
        )
        assert (head_home / "icl-scaling-mlflow" / "mlflow.db").exists(), "one machine: the head's SQLite"
        assert (Path(storage) / "icl-scaling" / "smoke").is_dir(), "the cluster's storage was not used"

        again = run(["bash", "-c", sweep], env, 600)
        assert "nothing to train" in again.stdout

        run(["bash", "-c", analysis], env, 900)
        assert (head_home / "icl-scaling-cluster" / "analysis_out" / "smoke" / "report.html").exists()

        # The MLflow UI's SSH tunnel (docs/cluster.md, section 5), with this cluster's account and key.
        tunnel_port = free_port_block(1)
        tunnel_cmd = (
            f"SSH_USER=root SSH_KEY={key}; "
            f"MLFLOW_ADDR=$(ray exec {cluster} 'cat ~/icl-scaling-mlflow/tracking_uri' 2>/dev/null"
            " | tr -d '\\r' | grep '^http' | tail -n 1); "
            f"HEAD=$(ray get-head-ip {cluster} 2>/dev/null | tail -n 1); "
            "exec ssh -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null "
            f"-i $SSH_KEY -N -L {tunnel_port}:${{MLFLOW_ADDR#http://}} $SSH_USER@$HEAD"
        )
        tunnel_log = tmp_path / "tunnel.log"
        tunnel = subprocess.Popen(
            ["bash", "-xc", tunnel_cmd],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=tunnel_log.open("w"),
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 60
            while not listening(tunnel_port) and time.monotonic() < deadline and tunnel.poll() is None:
                time.sleep(0.5)
            assert listening(tunnel_port), f"the documented tunnel did not open:\n{tunnel_log.read_text()}"
            through = MlflowClient(f"http://localhost:{tunnel_port}")
            assert len(through.search_runs([experiment.experiment_id], "tags.kind = 'cell'")) == SMOKE_CELLS
        finally:
            os.killpg(tunnel.pid, 15)
            tunnel.wait(timeout=30)

        # Backup and restore (docs/cluster.md, "Storage"), command for command: every run comes back.
        run(
            ["ray", "rsync-down", str(cluster), "~/icl-scaling-mlflow/", "./mlflow-backup/"],
            env,
            300,
            cwd=tmp_path,
        )
        restored_port = free_port_block(1)
        server = subprocess.Popen(
            [
                "bash",
                "-c",
                "test -f mlflow-backup/mlflow.db && exec mlflow server --backend-store-uri"
                " sqlite:///mlflow-backup/mlflow.db --artifacts-destination ./mlflow-backup/artifacts"
                f" --port {restored_port}",
            ],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 120
            while not listening(restored_port) and time.monotonic() < deadline and server.poll() is None:
                time.sleep(1)
            restored = MlflowClient(f"http://127.0.0.1:{restored_port}")
            runs = restored.search_runs(
                [restored.get_experiment_by_name("smoke").experiment_id], "tags.kind = 'cell'"
            )
            assert {r.info.run_id for r in runs} == {r.info.run_id for r in cells}
            artifact = restored.download_artifacts(runs[0].info.run_id, "curves.parquet", str(tmp_path))
            assert Path(artifact).stat().st_size > 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server.pid, 15)
            server.wait(timeout=30)
    finally:
        # The documented teardown (docs/cluster.md, "On-premises cluster"): this cluster's Ray and MLflow,
        # then `ray down`. `ray down` runs a bare `ray stop` on the head, which would stop every Ray of the
        # machine; here it finds no `ray` on the login PATH of the head's sessions and stops nothing else,
        # so `ray down` runs only when that holds.
        run(["bash", "-c", stop], env, 300, check=False)
        # The same on this machine directly, in case the head never came up far enough for `ray exec`.
        run(
            [
                str(python),
                "cluster/stop_ray.py",
                temp_dir,
                "--mlflow",
                "--mlflow-home",
                str(head_home / "icl-scaling-mlflow"),
            ],
            env,
            300,
            check=False,
        )
        ray_on_login_path = (
            subprocess.run(
                [
                    "ssh",
                    "-i",
                    str(key),
                    "-o",
                    "StrictHostKeyChecking=no",
                    "-o",
                    "UserKnownHostsFile=/dev/null",
                    "root@127.0.0.1",
                    "bash --login -c -i 'command -v ray'",
                ],
                capture_output=True,
                env=env,
            ).returncode
            == 0
        )
        if not ray_on_login_path:
            run(["bash", "-c", down], env, 300, check=False)
        state_file.unlink(missing_ok=True)
    assert not ray_on_login_path, "`ray` on the head's login PATH: `ray down` would stop every Ray here"
    time.sleep(2)
    # Nothing of the cluster is left running or listening (issue 43: Ray's client server was)
    assert ray_processes(temp_dir, gcs) == []
    assert not any(listening(base + i) for i in range(5))
    shutil.rmtree(temp_dir, ignore_errors=True)  # its session's logs
