"""A password in ``--tracking-uri`` never reaches the driver's output, its logs or the storage.

The unreachable-server case runs by default; the real one (a real ``mlflow server`` behind the URI with
credentials in it, a whole sweep, then ``grep -r`` of the log and the storage) is slow.
"""

import logging
import socket
import subprocess
import sys
import time

import pytest
import yaml
from drivers import start_driver

from scaling.redact import install_log_redaction, redact, trial_tracking_uri
from scaling.sweep.__main__ import main

PASSWORD = "hunter2-s3cret"


@pytest.mark.parametrize(
    "uri, expected",
    [
        (f"http://alice:{PASSWORD}@mlflow.lab:5000", "http://alice:***@mlflow.lab:5000"),
        (f"postgresql://u:{PASSWORD}@db:5432/mlflow", "postgresql://u:***@db:5432/mlflow"),
        (f"https://h/api?token={PASSWORD}&x=1", "https://h/api?token=***&x=1"),
        ("sqlite:////tmp/mlflow.db", "sqlite:////tmp/mlflow.db"),
        ("http://plain-host:5000", "http://plain-host:5000"),
    ],
)
def test_redact(uri, expected):
    assert redact(f"failed: {uri} (retrying)") == f"failed: {expected} (retrying)"


def test_log_records_are_redacted_whatever_the_logger(caplog):
    install_log_redaction()
    with caplog.at_level(logging.WARNING):
        logging.getLogger("mlflow.some.module").warning("cannot reach %s", f"http://a:{PASSWORD}@h:1")
    assert PASSWORD not in caplog.text and "http://a:***@h:1" in caplog.text


def test_trials_get_the_real_uri_from_their_environment_only(monkeypatch):
    real = f"http://a:{PASSWORD}@h:1"
    monkeypatch.setenv("SCALING_TRACKING_URI", real)
    assert trial_tracking_uri(redact(real)) == real
    assert trial_tracking_uri("http://other:5000") == "http://other:5000"  # not the one set: its own


def test_unreachable_server_with_a_password_never_prints_it(tmp_path, tiny_sweep, monkeypatch, capfd):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    assert (
        main(
            [
                str(path),
                "--tracking-uri",
                f"http://alice:{PASSWORD}@127.0.0.1:9",
                "--storage",
                str(tmp_path / "storage"),
            ]
        )
        == 2
    )
    out, err = capfd.readouterr()
    assert "cannot use the MLflow tracking store http://alice:***@127.0.0.1:9" in err
    assert PASSWORD not in out + err


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.e2e
@pytest.mark.slow
def test_a_whole_sweep_against_a_server_behind_a_password_leaves_it_nowhere(tmp_path, tiny_sweep):
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--backend-store-uri",
            f"sqlite:///{tmp_path}/server.db",
            "--artifacts-destination",
            str(tmp_path / "artifacts"),
            "--workers",
            "1",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                time.sleep(0.5)
        tiny_sweep["name"] = "secret"
        path = tmp_path / "secret.yaml"
        path.write_text(yaml.safe_dump(tiny_sweep))
        storage = tmp_path / "storage"
        with open(tmp_path / "sweep.log", "w") as log:
            code = start_driver(path, f"http://alice:{PASSWORD}@127.0.0.1:{port}", str(storage), log).wait(
                300
            )
        text = (tmp_path / "sweep.log").read_text()
        assert code == 0, text
        assert "http://alice:***@127.0.0.1" in text
        found = subprocess.run(
            ["grep", "-rl", PASSWORD, str(tmp_path / "sweep.log"), str(storage)],
            capture_output=True,
            text=True,
        )
        assert found.stdout == "", f"the password is in: {found.stdout}"
    finally:
        server.terminate()
        server.wait(timeout=30)
