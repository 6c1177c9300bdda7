"""A create_run answered too late is sent again, and the server may store it twice: the cell still ends
with one run. Played for real: a real ``mlflow server`` (SQLite) behind a loopback relay that holds back
the first create (its answer, or the request itself) past the client's timeout, as an overloaded server
does (the SQLite load test at 128 trials left 6 cells with 2-3 runs each: docs/results.md). In the slow
suite."""

import http.client
import http.server
import threading
import time

import pandas as pd
import pytest
from conftest import tiny_cell_dict
from test_outages import MlflowServer, free_port

from scaling.cells import Cell
from scaling.tracking import STATUS_COMPLETE
from scaling.tracking.cell_log import CellLog
from scaling.tracking.tracker import Tracker

CREATE = "/api/2.0/mlflow/runs/create"
TIMEOUT_S = 2  # the client's (MLFLOW_HTTP_REQUEST_TIMEOUT); the relay holds the first create longer


class Relay:
    """An HTTP relay on 127.0.0.1 to ``target``; the first POST to runs/create is held ``hold`` seconds
    after the server answered it ("answer") or before it reaches the server ("request")."""

    def __init__(self, target_port: int, hold: float, mode: str):
        relay = self
        self.held = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.relay()

            def do_POST(self):
                self.relay()

            def do_PUT(self):
                self.relay()

            def relay(self):
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                first = self.path.startswith(CREATE) and not relay.held.is_set()
                if first:
                    relay.held.set()
                    if mode == "request":
                        time.sleep(hold)
                upstream = http.client.HTTPConnection("127.0.0.1", target_port, timeout=60)
                headers = {k: v for k, v in self.headers.items() if k.lower() not in ("host", "connection")}
                upstream.request(self.command, self.path, body=body, headers=headers)
                answer = upstream.getresponse()
                data = answer.read()
                if first and mode == "answer":
                    time.sleep(hold)
                try:
                    self.send_response(answer.status)
                    for key, value in answer.getheaders():
                        if key.lower() not in ("transfer-encoding", "connection", "content-length"):
                            self.send_header(key, value)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data)
                except OSError:
                    pass  # the client gave up waiting

            def log_message(self, *args):
                pass

        self.port = free_port()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    server = MlflowServer(tmp_path_factory.mktemp("twins"))
    server.start()
    yield server
    server.stop()


@pytest.mark.slow  # an overloaded server played for real (as a restarted one: tests/test_outages.py)
@pytest.mark.parametrize("mode", ["answer", "request"])
def test_a_create_stored_twice_leaves_the_cell_one_complete_run(server, mode, monkeypatch):
    """``answer``: the server stored the create, its answer came after the client's timeout, the create was
    sent again and stored again. ``request``: the first create reached the server only after the second."""
    monkeypatch.setenv("MLFLOW_HTTP_REQUEST_TIMEOUT", str(TIMEOUT_S))
    relay = Relay(int(server.uri.rsplit(":", 1)[1]), TIMEOUT_S + 1.5, mode)
    try:
        uri = f"http://127.0.0.1:{relay.port}"
        tracker = Tracker(server.uri)
        experiment = tracker.experiment_id(f"twins-{mode}", create=True)
        cell = Cell.from_dict(tiny_cell_dict())
        log = CellLog.open(uri, experiment, cell, "twins")
        deadline = time.monotonic() + 30
        while len(tracker.cell_runs(experiment, cell.key)) < 2:  # the held create is stored too
            assert time.monotonic() < deadline, "the relay's held create was never stored: no twin to test"
            time.sleep(0.2)
        log.log_losses([(1, 0.5), (2, 0.25)], final=True)
        curves = pd.DataFrame({"predictor": ["model"] * 2, "n": [1, 2], "err": [0.5, 0.4]})
        log.finish(cell, curves, None)
        runs = tracker.cell_runs(experiment, cell.key)
        assert [r.run_id for r in runs] == [log.run_id]
        assert runs[0].status == STATUS_COMPLETE and runs[0].params == cell.params()
        assert [m.step for m in tracker.client.get_metric_history(log.run_id, "train/loss")] == [1, 2]
    finally:
        relay.close()
