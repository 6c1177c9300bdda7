"""Write an on-premises cluster file for `ray up` from cluster/cluster-local.yaml and your settings.

    python cluster/onprem.py --head-ip 10.0.0.10 --worker-ip 10.0.0.11 --worker-ip 10.0.0.12 \\
        --ssh-user me --ssh-key ~/.ssh/id_ed25519 -o my-cluster.yaml
    python cluster/onprem.py --head-ip 127.0.0.1 --ssh-user me --ssh-key ~/.ssh/id_ed25519 \\
        --no-docker --python ~/icl-scaling/.venv/bin/python --storage ~/icl-runs -o my-cluster.yaml
    ray up -y my-cluster.yaml

The second is one machine (a workstation, a laptop) as the whole cluster, without Docker. Settings:

  --head-ip, --worker-ip   the machines (private addresses); with no worker the head also runs trials
                           (it advertises its CPUs and GPUs); with workers it runs none (--num-cpus=0)
  --ssh-user, --ssh-key    the account on every machine and its key (passwordless SSH)
  --no-docker --python P   run on the hosts directly with the Python environment of interpreter P
                           (Python 3.11 with the project's dependencies, e.g. the README's .venv); the
                           synced checkout is run from --project-dir through PYTHONPATH, P's environment
                           is not changed. Default: Docker with the file's image on every machine
  --storage DIR            Tune state and checkpoints (the sweeps' default --storage is DIR/icl-scaling):
                           with workers an NFS mount on every machine (a node without it refuses to
                           start); on one machine any directory (created)
  --project-dir DIR        where the checkout is synced on the machines (default /home/ray/icl-scaling
                           in Docker, ~/icl-scaling-cluster without)
  --ports BASE             Ray's GCS on BASE, the dashboard on BASE+1, the Ray client server on BASE+2
                           (where Ray's client is installed), the dashboard agent on BASE+3, MLflow on
                           BASE+4 (default: Ray's 6379, 8265, 10001, 52365 and MLflow's 5000); for a
                           machine where other Rays run
  --temp-dir DIR           this cluster's Ray temp dir (default /tmp/ray); the start commands stop only
                           the Ray of this dir (cluster/stop_ray.py), never other Rays on the machine
  --cluster-name NAME      default icl-scaling-onprem
  --mlflow-db DB           the head's MLflow database. postgresql (the default with workers): a PostgreSQL
                           of its own on the head, sized for a cluster's trials; installed in the head's
                           container, or already on a head without Docker with psycopg2-binary in P's
                           environment. sqlite (the default on one machine, which then needs nothing
                           installed): one file, a few dozen trials at once at most. cluster/start_mlflow.sh
                           says how and why

The template's own commands are this script's output for the template's own settings (a test checks
it), so the file you get differs from cluster/cluster-local.yaml only where your settings do.
"""

from __future__ import annotations

import argparse
import copy
import shlex
import sys
from dataclasses import dataclass, field
from pathlib import Path

import yaml

TEMPLATE = Path(__file__).resolve().parent / "cluster-local.yaml"
RAY_DEFAULT_PORTS = {"gcs": 6379, "dashboard": 8265, "client": 10001, "agent": 52365, "mlflow": 5000}
DOCKER_PROJECT_DIR = "/home/ray/icl-scaling"
HOST_PROJECT_DIR = "~/icl-scaling-cluster"
MLFLOW_HOST_DIR = "~/icl-scaling-mlflow"  # MLflow's data on the head host (a volume with Docker)
CLUSTER_ENV = "~/.icl-scaling/cluster.env"  # what the driver reads on the head (scaling.sweep)
VERSION_CHECK = (
    '-c "import sys, ray, torch;'
    " found = (sys.version_info[:2], ray.__version__, torch.__version__.split('+')[0]);"
    " "
    "assert found == ((3, 11), '2.60.0', '2.13.0'), found\""
)


@dataclass
class Settings:
    head_ip: str
    worker_ips: list[str] = field(default_factory=list)
    ssh_user: str = "researcher"
    ssh_key: str = "~/.ssh/id_ed25519"
    python: str | None = None  # None: Docker
    storage: str = "/mnt/cluster-storage"
    project_dir: str | None = None
    ports: int | None = None
    temp_dir: str = "/tmp/ray"
    cluster_name: str = "icl-scaling-onprem"
    mlflow_db: str | None = None  # None: sqlite on one machine, postgresql with workers (mlflow_database)

    @property
    def docker(self) -> bool:
        return self.python is None

    @property
    def project(self) -> str:
        return self.project_dir or (DOCKER_PROJECT_DIR if self.docker else HOST_PROJECT_DIR)

    @property
    def mlflow_database(self) -> str:
        """The head's MLflow database: the one asked for, else SQLite on one machine (a workstation's few
        trials; nothing to install) and PostgreSQL with workers (a cluster's trials)."""
        return self.mlflow_db or ("postgresql" if self.worker_ips else "sqlite")

    def port(self, name: str) -> int:
        offsets = {"gcs": 0, "dashboard": 1, "client": 2, "agent": 3, "mlflow": 4}
        return RAY_DEFAULT_PORTS[name] if self.ports is None else self.ports + offsets[name]


def env_prefix(s: Settings) -> str:
    """Without Docker every command runs with the chosen environment first on PATH and the synced
    checkout on PYTHONPATH (so Ray's workers import it); in Docker the image's Python is the environment."""
    if s.docker:
        return ""
    bin_dir = str(Path(s.python).expanduser().parent)
    return f"export PATH={shlex.quote(bin_dir)}:$PATH PYTHONPATH={s.project}; "


def storage_commands(s: Settings) -> list[str]:
    if s.worker_ips:  # several machines: the storage must be the shared mount, never a local directory
        return [f'mountpoint -q {s.storage} || (echo "{s.storage} is not mounted" >&2; exit 1)']
    return [f"mkdir -p {s.storage}"]


def setup_commands(s: Settings) -> list[str]:
    if s.docker:
        return [f"pip install --quiet --no-cache-dir -e {s.project}", f"python {VERSION_CHECK}"]
    return [f"{env_prefix(s)}python {VERSION_CHECK}"]


# The head's PostgreSQL (cluster/start_mlflow.sh): Ray's image has neither the server nor psycopg2.
POSTGRES_IN_DOCKER = [
    "command -v pg_dump >/dev/null || (sudo apt-get update -qq && sudo DEBIAN_FRONTEND=noninteractive"
    " apt-get install -y -qq postgresql >/dev/null)",
    "pip install --quiet --no-cache-dir 'psycopg2-binary>=2.9'",
]
POSTGRES_CHECK = (
    'python -c "import psycopg2" && (command -v pg_ctl || ls /usr/lib/postgresql/*/bin/pg_ctl) >/dev/null'
    ' || (echo "the head needs PostgreSQL (apt-get install postgresql) and psycopg2-binary in its Python'
    ' environment, or --mlflow-db sqlite" >&2; exit 1)'
)


def head_setup_commands(s: Settings) -> list[str]:
    if s.mlflow_database != "postgresql":
        return []
    return list(POSTGRES_IN_DOCKER) if s.docker else [f"{env_prefix(s)}{POSTGRES_CHECK}"]


def head_start_commands(s: Settings) -> list[str]:
    prefix, mlflow_home = env_prefix(s), ("~/mlflow" if s.docker else MLFLOW_HOST_DIR)
    db = " MLFLOW_DB=sqlite" if s.mlflow_database == "sqlite" else ""
    trials = "" if not s.worker_ips else " --num-cpus=0 --num-gpus=0"
    gcs = f"{s.head_ip}:{s.port('gcs')}"
    # Ray's client server: `ray start` starts it wherever Ray's client (grpcio) is importable, on port 10001
    # unless told another, and refuses --ray-client-server-port where it is not. Ray's image has it; a host
    # environment may or may not (the README's has it), so without Docker the flag is added when the
    # head's Python imports grpc: the server then listens on this cluster's port, never on 10001 where
    # another cluster's may be. The project does not use the client (drivers run on the head).
    flag = f"--ray-client-server-port={s.port('client')}"
    client = f" {flag}" if s.docker else f""" $(python -c 'import grpc' 2>/dev/null && echo {flag})"""
    return [
        f"{prefix}python {s.project}/cluster/stop_ray.py {s.temp_dir}",
        f"{prefix}MLFLOW_HOME={mlflow_home} MLFLOW_HOST={s.head_ip} MLFLOW_PORT={s.port('mlflow')}"
        f"{db} bash {s.project}/cluster/start_mlflow.sh",
        f"{prefix}ulimit -n 65536;"
        f' export RAY_AUTH_MODE=token MLFLOW_TRACKING_URI="$(cat {mlflow_home}/tracking_uri)";'
        f" ray start --head --node-ip-address={s.head_ip} --port={s.port('gcs')} --temp-dir={s.temp_dir}"
        f" --dashboard-host=127.0.0.1 --dashboard-port={s.port('dashboard')}{client}"
        f" --dashboard-agent-listen-port={s.port('agent')}"
        f" --autoscaling-config=~/ray_bootstrap_config.yaml{trials} --disable-usage-stats",
        f"mkdir -p {Path(CLUSTER_ENV).parent} && printf"
        " 'RAY_ADDRESS=%s\\nRAY_AUTH_MODE=token\\nMLFLOW_TRACKING_URI=%s\\n"
        f'SCALING_STORAGE=%s\\n\' {gcs} "$(cat {mlflow_home}/tracking_uri)" {s.storage}/icl-scaling'
        f" > {CLUSTER_ENV}",
    ]


def worker_start_commands(s: Settings) -> list[str]:
    prefix = env_prefix(s)
    return [
        f"{prefix}python {s.project}/cluster/stop_ray.py {s.temp_dir}",
        f"{prefix}ulimit -n 65536;"
        f' export RAY_AUTH_MODE=token MLFLOW_TRACKING_URI="http://$RAY_HEAD_IP:{s.port("mlflow")}";'
        f" ray start --address=$RAY_HEAD_IP:{s.port('gcs')} --temp-dir={s.temp_dir} --disable-usage-stats",
    ]


def onprem_config(template: dict, s: Settings) -> dict:
    """The template with the settings applied (see the module docstring)."""
    config = copy.deepcopy(template)
    config["cluster_name"] = s.cluster_name
    config["provider"].update(head_ip=s.head_ip, worker_ips=list(s.worker_ips))
    config["auth"] = {"ssh_user": s.ssh_user, "ssh_private_key": s.ssh_key}
    config["min_workers"] = config["max_workers"] = len(s.worker_ips)
    token = "/home/ray/.ray/auth_token" if s.docker else "~/.ray/auth_token"
    config["file_mounts"] = {s.project: ".", token: "~/.ray/auth_token"}
    config["initialization_commands"] = storage_commands(s)
    if s.docker:
        config["initialization_commands"].append(f"mkdir -p {MLFLOW_HOST_DIR}")
        config["docker"]["run_options"] = [
            "--env RAY_AUTH_MODE=token",
            f"--volume {s.storage}:{s.storage}",
            f"--volume {MLFLOW_HOST_DIR}:/home/ray/mlflow",
        ]
    else:
        config.pop("docker", None)
    config["setup_commands"] = setup_commands(s)
    config["head_setup_commands"] = head_setup_commands(s)
    config["head_start_ray_commands"] = head_start_commands(s)
    config["worker_start_ray_commands"] = worker_start_commands(s)
    return config


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python cluster/onprem.py",
        description=__doc__.split("\n\n")[0],
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog=__doc__.split("\n\n", 1)[1],
    )
    parser.add_argument("--head-ip", required=True)
    parser.add_argument("--worker-ip", dest="worker_ips", action="append", default=[])
    parser.add_argument("--ssh-user", required=True)
    parser.add_argument("--ssh-key", required=True)
    parser.add_argument("--no-docker", action="store_true")
    parser.add_argument("--python", default=None)
    parser.add_argument("--storage", default=Settings.storage)
    parser.add_argument("--project-dir", default=None)
    parser.add_argument("--ports", type=int, default=None)
    parser.add_argument("--temp-dir", default=Settings.temp_dir)
    parser.add_argument("--cluster-name", default=Settings.cluster_name)
    parser.add_argument("--mlflow-db", choices=("postgresql", "sqlite"), default=None)
    parser.add_argument("-o", "--output", required=True, help="the cluster file to write")
    args = parser.parse_args(argv)
    if args.no_docker != bool(args.python):
        parser.error("--no-docker and --python go together (the environment to run without Docker)")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    settings = Settings(
        args.head_ip,
        args.worker_ips,
        args.ssh_user,
        args.ssh_key,
        args.python,
        args.storage,
        args.project_dir,
        args.ports,
        args.temp_dir,
        args.cluster_name,
        args.mlflow_db,
    )
    config = onprem_config(yaml.safe_load(TEMPLATE.read_text()), settings)
    header = (
        f"# Written by: python cluster/onprem.py {shlex.join(argv)}\n"
        f'# from {TEMPLATE.name}; see docs/cluster.md, "On-premises cluster".\n'
    )
    Path(args.output).write_text(header + yaml.safe_dump(config, sort_keys=False, width=100))
    print(f"wrote {args.output}: ray up -y {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
