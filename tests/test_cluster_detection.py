"""The driver's view of a `ray up` cluster (scaling.sweep.cluster): the head's cluster.env, counted only while
its Ray answers, and the autoscaler's node types, read from fake autoscaling configs of both cluster files
(prepared offline by Ray's own `prepare_config`, as `ray up` does before writing ~/ray_bootstrap_config.yaml).
"""

import copy
import socket
import sys
from pathlib import Path

import pytest
import yaml
from ray.autoscaler._private.util import prepare_config

from scaling.sweep.cluster import (
    NodeType,
    could_start,
    node_types,
    ray_up_head,
    read_env_file,
    read_node_types,
)

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "cluster"))
import onprem  # noqa: E402  (cluster/onprem.py, a script next to the cluster files)


@pytest.fixture
def live_port():
    """A listening socket standing in for a head's GCS."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen()
        yield server.getsockname()[1]


def write_env(path, port, **extra):
    lines = [
        f"RAY_ADDRESS=127.0.0.1:{port}",
        "RAY_AUTH_MODE=token",
        "MLFLOW_TRACKING_URI=http://127.0.0.1:5999",
        *(f"{k}={v}" for k, v in extra.items()),
    ]
    path.write_text("# written by the head's start commands\n" + "\n".join(lines) + "\n")
    return path


def test_env_file_lines_comments_and_quotes(tmp_path):
    path = tmp_path / "cluster.env"
    path.write_text("# c\n\nA=1\nB='two words'\nC=\"x=y\"\n")
    assert read_env_file(path) == {"A": "1", "B": "two words", "C": "x=y"}


def test_head_is_found_while_its_ray_answers(tmp_path, live_port):
    head = ray_up_head(write_env(tmp_path / "cluster.env", live_port, SCALING_STORAGE="/srv/runs"))
    assert head.ray_address == f"127.0.0.1:{live_port}"
    assert (
        head.tracking_uri == "http://127.0.0.1:5999"
        and head.storage == "/srv/runs"
        and head.auth_mode == "token"
    )


def test_stale_or_missing_file_is_no_head(tmp_path):
    with socket.socket() as s:  # a port nothing listens on any more: the cluster was taken down
        s.bind(("127.0.0.1", 0))
        dead = s.getsockname()[1]
    assert ray_up_head(write_env(tmp_path / "cluster.env", dead)) is None
    assert ray_up_head(tmp_path / "missing.env") is None


def test_tests_never_see_a_head_of_this_machine(monkeypatch):
    """conftest points SCALING_CLUSTER_ENV at nothing, so a test never joins a cluster it finds."""
    assert ray_up_head() is None


def aws_bootstrap_config():
    return prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text()))


def test_aws_node_types_are_the_gpu_workers():
    types = {t.name: t for t in node_types(aws_bootstrap_config())}
    assert set(types) == {"gpu.a10g.spot", "gpu.l4.spot"}  # the head (max_workers 0) starts nothing
    assert types["gpu.a10g.spot"] == NodeType("gpu.a10g.spot", {"CPU": 8.0, "GPU": 1.0}, 8, "A10G")
    assert (
        types["gpu.l4.spot"].accelerator == "L4"
    )  # from its instance type, g6.2xlarge (scaling.budget.cards)


@pytest.mark.parametrize(
    "request_, expected",
    [
        ({"CPU": 1, "GPU": 0.25}, True),  # a GPU cell with no GPU node up yet: a spot worker will hold it
        ({"CPU": 8, "GPU": 1}, True),
        ({"CPU": 1, "GPU": 2}, False),  # no node type has 2 GPUs
        ({"CPU": 16}, False),
        ({"CPU": 1, "bigmem": 1}, False),  # a custom resource no node type advertises
    ],
)
def test_aws_could_start(request_, expected):
    assert could_start(request_, node_types(aws_bootstrap_config())) is expected


def test_global_max_workers_zero_starts_nothing():
    config = aws_bootstrap_config()
    config["max_workers"] = 0
    assert node_types(config) == [] and not could_start({"CPU": 1}, node_types(config))


def onprem_bootstrap_config(workers):
    template = yaml.safe_load((ROOT / "cluster" / "cluster-local.yaml").read_text())
    config = onprem.onprem_config(template, onprem.Settings("10.0.0.10", workers))
    return prepare_config(copy.deepcopy(config))


def test_onprem_workers_have_resources_known_only_when_they_join():
    (local,) = node_types(onprem_bootstrap_config(["10.0.0.11", "10.0.0.12"]))
    assert local.resources is None and local.max_workers == 2
    assert could_start({"CPU": 64, "GPU": 8}, [local])  # may be still joining: the driver cannot refuse


def test_one_machine_cluster_starts_no_node():
    assert node_types(onprem_bootstrap_config([])) == []


def test_autoscaling_config_file_read_or_missing(tmp_path):
    path = tmp_path / "ray_bootstrap_config.yaml"
    path.write_text(yaml.safe_dump(aws_bootstrap_config()))
    assert {t.name for t in read_node_types(path)} == {"gpu.a10g.spot", "gpu.l4.spot"}
    assert read_node_types(tmp_path / "missing.yaml") == []
