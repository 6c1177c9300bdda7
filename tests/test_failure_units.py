"""Failure handling in the small: exact resume, the loss buffer across a store outage, node fitting."""

import io

import pandas as pd
import pytest
import torch
from conftest import tiny_cell_dict
from mlflow.tracking import MlflowClient

from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.planning.plan import PlannedCell, Resources
from scaling.sweep.node_fit import unmet_requests
from scaling.tracking import STATUS_COMPLETE
from scaling.tracking.cell_log import CellLog, log_batches
from scaling.tracking.store_template import seed_sqlite_store
from scaling.tracking.tracker import Tracker


@pytest.mark.parametrize("arch", ["mlp", "gpt2"])
def test_resumed_trainer_ends_with_bit_identical_weights(arch):
    model = (
        {"arch": "mlp", "width": 16}
        if arch == "mlp"
        else {"arch": "gpt2", "n_layer": 1, "n_head": 1, "n_embd": 8}
    )
    cell = Cell.from_dict(tiny_cell_dict(model=model))
    straight = CellTrainer(cell, "cpu")
    straight.train_until(cell.train.steps)

    first = CellTrainer(cell, "cpu")
    first.train_until(7)  # not a checkpoint boundary
    buffer = io.BytesIO()
    torch.save(first.state_dict(), buffer)
    del first
    resumed = CellTrainer(cell, "cpu")  # a fresh process would build it the same way
    resumed.load_state_dict(torch.load(io.BytesIO(buffer.getvalue()), weights_only=True))
    resumed.train_until(cell.train.steps)

    assert resumed.step == straight.step == cell.train.steps
    a, b = straight.model.state_dict(), resumed.model.state_dict()
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(a[name], b[name]), name
    opt_a, opt_b = straight.optimizer.state_dict()["state"], resumed.optimizer.state_dict()["state"]
    for index in opt_a:
        for slot in ("exp_avg", "exp_avg_sq", "step"):
            assert torch.equal(opt_a[index][slot], opt_b[index][slot]), (index, slot)


def test_loss_buffer_keeps_points_through_an_outage_and_flushes_each_step_once(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    seed_sqlite_store(uri)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("buffer")).info.run_id
    down = CellLog(Tracker("http://127.0.0.1:9"), run_id, last_loss_step=0)  # nothing listens on port 9

    assert down.log_losses([(5, 1.0), (10, 0.5)]) is False
    assert [p[:2] for p in down.pending] == [(5, 1.0), (10, 0.5)]
    assert down.log_losses([(10, 0.5), (15, 0.25)]) is False  # step 10 again: buffered once
    assert [p[0] for p in down.pending] == [5, 10, 15]

    up = CellLog(Tracker(uri), run_id, last_loss_step=0)  # the store is back
    up.pending = list(down.pending)
    assert up.log_losses([(20, 0.125)], final=True) is True and up.pending == []
    assert up.last_loss_step == 20
    history = client.get_metric_history(run_id, "train/loss")
    assert sorted((m.step, m.value) for m in history) == [(5, 1.0), (10, 0.5), (15, 0.25), (20, 0.125)]

    resumed = CellLog(Tracker(uri), run_id, last_loss_step=20)  # a resumed trial replays old points
    assert resumed.log_losses([(5, 1.0), (20, 0.125), (25, 0.0625)]) is True
    assert sorted(m.step for m in client.get_metric_history(run_id, "train/loss")) == [5, 10, 15, 20, 25]


@pytest.mark.parametrize(
    "metrics, tags", [(0, 0), (0, 1), (5, 1), (999, 1), (1000, 1), (2500, 3), (1200, 150)]
)
def test_log_batches_keep_mlflows_limits_and_put_the_last_tag_last(metrics, tags):
    chunks = list(log_batches(list(range(metrics)), [f"t{i}" for i in range(tags)]))
    assert all(len(m) + len(t) <= 1000 and len(t) <= 100 for m, t in chunks)
    assert [x for m, _ in chunks for x in m] == list(range(metrics))  # every metric once, in order
    assert [x for _, t in chunks for x in t] == [f"t{i}" for i in range(tags)]
    if tags:
        assert chunks[-1][1][-1] == f"t{tags - 1}"  # e.g. status=complete: stored last
        first_tags = next(i for i, (_, t) in enumerate(chunks) if t)
        assert not any(m for m, _ in chunks[first_tags + 1 :])  # tags only after every metric
    if tags <= 100:
        assert len(chunks) == -(-(metrics + tags) // 1000)  # as few round trips as allowed


def test_finish_logs_buffered_losses_curves_and_status_in_few_round_trips(tmp_path, monkeypatch):
    """A cell with more curve points than one batch holds: everything lands, status=complete last."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri)
    # created as a sweep creates it: its artifacts (cell.yaml, curves.parquet) beside the store in tmp_path,
    # not in MLflow's default root (./mlruns in the checkout)
    client = tracker.client
    run_id = client.create_run(tracker.experiment_id("finish", create=True)).info.run_id
    log = CellLog(tracker, run_id, last_loss_step=0, flush_every=3600)
    assert log.log_losses([(s, 1.0 / s) for s in range(1, 301)]) is False  # buffered, not flushed
    n = list(range(1, 401))
    curves = pd.DataFrame(
        {
            "predictor": ["model"] * 400 + ["ridge"] * 400 + ["least_squares"] * 400,
            "n": n * 3,
            "err": [0.5] * 1200,
        }
    )
    calls, real_log_batch = [], log.client.log_batch

    def counted_log_batch(*args, **kwargs):
        calls.append(kwargs)
        return real_log_batch(*args, **kwargs)

    monkeypatch.setattr(log.client, "log_batch", counted_log_batch)
    log.finish(Cell.from_dict(tiny_cell_dict()), curves, None, summary={"err_last": 0.5})

    run = client.get_run(run_id)
    assert run.data.tags["status"] == STATUS_COMPLETE and run.info.status == "FINISHED"
    assert run.data.tags["err_last"] == "0.5" and log.pending == [] and log.last_loss_step == 300
    assert len(client.get_metric_history(run_id, "train/loss")) == 300
    for key in ("eval/err", "baseline/ridge", "baseline/least_squares"):
        assert [m.step for m in client.get_metric_history(run_id, key)] == n
    assert len(calls) == 2 and "status" in [t.key for t in calls[-1]["tags"]]  # 1501 points + 2 tags
    assert {f.path for f in client.list_artifacts(run_id)} == {"cell.yaml", "curves.parquet"}


class Calls:
    """The tracking calls a CellLog makes, by MlflowClient method (each is one request to a server)."""

    def __init__(self, monkeypatch):
        self.names: list[str] = []
        for name in ("search_runs", "create_run", "log_batch", "get_run", "set_terminated", "set_tag"):
            real = getattr(MlflowClient, name)
            monkeypatch.setattr(MlflowClient, name, self.counted(name, real))

    def counted(self, name, real):
        def call(client, *args, **kwargs):
            self.names.append(name)
            return real(client, *args, **kwargs)

        return call


def short_curves():
    return pd.DataFrame({"predictor": ["model"] * 4 + ["ridge"] * 4, "n": [1, 2, 3, 4] * 2, "err": [0.5] * 8})


def test_a_short_cells_life_asks_the_store_five_times_and_holds_everything(tmp_path, monkeypatch):
    """Open (search, create), finish: the params ride in the one batch with the losses, curves and tags,
    the artifacts go straight to the run's artifact store (no request to look the run up)."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri)
    experiment = tracker.experiment_id("short", create=True)
    cell = Cell.from_dict(tiny_cell_dict())
    calls = Calls(monkeypatch)
    log = CellLog.open(uri, experiment, cell, "short")
    log.log_losses([(s, 1.0 / s) for s in range(1, 21)])  # within flush_every: buffered
    log.finish(cell, short_curves(), None)
    assert calls.names == ["search_runs", "create_run", "log_batch", "set_terminated"]
    run = tracker.client.get_run(log.run_id)
    assert run.data.params == cell.params() and run.data.tags["status"] == STATUS_COMPLETE
    assert len(tracker.client.get_metric_history(log.run_id, "train/loss")) == 20
    assert {f.path for f in tracker.client.list_artifacts(log.run_id)} == {"cell.yaml", "curves.parquet"}


def test_a_run_whose_trial_died_before_its_first_batch_gets_its_params_when_reopened(tmp_path):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    tracker = Tracker(uri)
    experiment = tracker.experiment_id("reopen", create=True)
    cell = Cell.from_dict(tiny_cell_dict())
    died = CellLog.open(uri, experiment, cell, "reopen")  # created; its trial dies before any batch
    assert tracker.client.get_run(died.run_id).data.params == {}
    again = CellLog.open(uri, experiment, cell, "reopen")
    assert again.run_id == died.run_id
    again.log_losses([(1, 0.5)], final=True)
    assert tracker.client.get_run(died.run_id).data.params == cell.params()
    again.finish(cell, short_curves(), None)  # params sent again with the same values: allowed, unchanged
    assert tracker.client.get_run(died.run_id).data.params == cell.params()


def test_retries_of_an_overloaded_store_back_off_with_jitter_and_are_said_once(monkeypatch, caplog):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import (
        BAD_REQUEST,
        INVALID_PARAMETER_VALUE,
        REQUEST_LIMIT_EXCEEDED,
        TEMPORARILY_UNAVAILABLE,
    )

    import scaling.tracking.retry as tracking

    slept: list[float] = []
    monkeypatch.setattr(tracking.time, "sleep", slept.append)
    monkeypatch.setattr(tracking, "_retries", {"count": 0, "said": False})
    answers = [
        MlflowException("QueuePool limit of size 5 overflow 10 reached", error_code=BAD_REQUEST),
        MlflowException("Too many requests", error_code=REQUEST_LIMIT_EXCEEDED),
        MlflowException("database is locked", error_code=TEMPORARILY_UNAVAILABLE),
    ]

    def overloaded():
        if answers:
            raise answers.pop(0)
        return "stored"

    with caplog.at_level("DEBUG", logger="scaling.tracking"):
        assert tracking.retrying(overloaded, "logging train/loss", first_wait=1.0) == "stored"
        answers.append(MlflowException("Service unavailable", error_code=TEMPORARILY_UNAVAILABLE))
        assert tracking.retrying(overloaded, "logging curves", first_wait=1.0) == "stored"
    assert tracking.retry_count() == 4
    warnings = [r for r in caplog.records if r.levelname == "WARNING"]
    assert len(warnings) == 1 and "said once" in warnings[0].getMessage()
    assert [r.levelname for r in caplog.records].count("DEBUG") == 3
    for got, wait in zip(slept, [1.0, 2.0, 4.0, 1.0]):  # exponential, each drawn from [wait/2, wait]
        assert wait / 2 <= got <= wait
    with pytest.raises(MlflowException):  # a request refused as wrong is not retried
        tracking.retrying(
            lambda: (_ for _ in ()).throw(MlflowException("bad", error_code=INVALID_PARAMETER_VALUE)), "x"
        )
    assert tracking.retry_count() == 4


def planned(cpu=1.0, gpu=0.0, custom=None):
    return PlannedCell(Cell.from_dict(tiny_cell_dict()), Resources(cpu, gpu, custom or {}))


NODES = [
    {"CPU": 0.0, "memory": 1e9, "node:10.0.0.1": 1.0},  # head: no trials
    {"CPU": 8.0, "GPU": 1.0, "accelerator_type:A10G": 1.0},
    {"CPU": 16.0, "big_memory": 1.0},
]


@pytest.mark.parametrize(
    "request_, fits",
    [
        ((1, 0.25, None), True),
        ((8, 1, None), True),  # the GPU node exactly
        ((16, 0, None), True),  # the CPU node
        ((9, 1, None), False),  # 24 CPUs in all, but the GPU node has 8
        ((1, 2, None), False),  # whole GPUs on one node only
        ((1, 1, {"accelerator_type:A10G": 0.5}), True),
        ((1, 1, {"big_memory": 1}), False),  # big_memory lives on the node without a GPU
        ((1, 0, {"accelerator_type:L4": 1}), False),
    ],
)
def test_a_cell_must_fit_on_one_node(request_, fits):
    cpu, gpu, custom = request_
    problems = unmet_requests([planned(cpu, gpu, custom)], NODES)
    assert (problems == []) == fits, problems
    if not fits:
        assert "asks one node for" in problems[0] and problems[-1].startswith("nodes: ")
        assert "[CPU=8, GPU=1, accelerator_type:A10G=1]" in problems[-1]


def test_no_alive_node_fits_nothing():
    assert unmet_requests([planned()], [])[-1] == "nodes: (none alive)"
