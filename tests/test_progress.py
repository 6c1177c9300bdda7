"""scaling.sweep.progress: the live view and the plain lines, fed the events Tune's callbacks give it.

These drive the Progress object directly (no Ray); tests/test_sweep_e2e.py checks what a real sweep prints.
"""

import io
import pickle
import re
import time

import pytest
from rich.console import Console

from scaling.sweep.progress import Progress, Summary, error_line, next_commands, summary_lines


def cell_config(name, steps=1000):
    return {"key": name, "name": name, "cell": {"train": {"steps": steps}}}


def pack_config(names, steps=500):
    return {
        "key": "pack",
        "name": f"pack of {len(names)}",
        "members": [{"key": n, "name": n, "cell": {"train": {"steps": steps}}} for n in names],
    }


def test_plain_output_is_one_line_per_change_with_consistent_counts():
    out = io.StringIO()
    progress = Progress("smoke", total=12, skipped=2, out=out)
    assert not progress.live_mode  # a StringIO is not a terminal
    with progress:
        progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))
        progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))  # Tune may repeat: no second line
        progress.started(
            "b", pack_config(["mlp T=16 N=8 seed=0", "mlp T=16 N=8 seed=1", "mlp T=16 N=16 seed=0"])
        )
        for step in (250, 500, 750):
            progress.result("a", cell_config("gpt2 T=16 N=8 seed=0"), {"step": step, "progress": step / 1000})
        progress.completed("b", pack_config(["x", "y", "z"]))
        progress.errored(
            "a",
            cell_config("gpt2 T=16 N=8 seed=0"),
            "Traceback (most recent call last):\n  File 'x.py'\nValueError: lr must be positive\n",
        )
    lines = out.getvalue().splitlines()
    assert len(lines) == 4, lines  # 2 starts, 1 done, 1 failure; results print nothing
    assert lines[0].startswith(
        "[smoke] started gpt2 T=16 N=8 seed=0 | 2/12 cells done (17%), 1 running, 9 pending"
    )
    assert "started pack of 3: mlp T=16 N=8 seed=0, ..." in lines[1]
    assert "4 running, 6 pending, 0 failed" in lines[1]
    assert "done pack of 3" in lines[2] and "5/12 cells done (42%), 1 running, 6 pending" in lines[2]
    assert "FAILED gpt2 T=16 N=8 seed=0: ValueError: lr must be positive" in lines[3]
    assert "5/12 cells done (42%), 0 running, 6 pending, 1 failed" in lines[3]


def test_plain_output_has_a_heartbeat_with_each_running_trials_step_at_its_interval():
    out = io.StringIO()
    with Progress("smoke", total=12, skipped=2, out=out, heartbeat=0.1) as progress:
        progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))
        progress.result("a", cell_config("gpt2 T=16 N=8 seed=0"), {"step": 250, "progress": 0.25})
        progress.started("b", cell_config("theory_context none d=10 seed=0", steps=0))
        progress.started("c", cell_config("mlp T=inf N=16 seed=1"))
        progress.result("c", cell_config("mlp T=inf N=16 seed=1"), {"step": 1000, "progress": 1.0})
        time.sleep(0.55)
    time.sleep(0.25)  # closed: no more heartbeats
    beats = [line for line in out.getvalue().splitlines() if line.startswith("[smoke] running ")]
    assert 2 <= len(beats) <= 6, out.getvalue()  # 0.55 s at one per 0.1 s: at most 5 (and one late)
    assert re.fullmatch(
        r"\[smoke\] running gpt2 T=16 N=8 seed=0 step 250/1000, mlp T=inf N=16 seed=1 evaluating,"
        r" theory_context none d=10 seed=0 \| 2/12 cells done \(17%\), 3 running, 7 pending, 0 failed"
        r" \| \d+s elapsed, ~\S+ left",
        beats[0],
    ), beats[0]
    assert len(out.getvalue().splitlines()) == 3 + len(beats)  # the change lines are as before


def test_heartbeat_is_off_by_default_and_in_the_live_view():
    plain, terminal = io.StringIO(), io.StringIO()
    terminal.isatty = lambda: True
    for out, heartbeat in ((plain, None), (terminal, 0.05)):
        with Progress("smoke", total=2, skipped=0, out=out, heartbeat=heartbeat) as progress:
            progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))
            time.sleep(0.3)
            copy = pickle.loads(pickle.dumps(progress))  # Tune pickles its callbacks mid-run
    assert "running gpt2" not in plain.getvalue() and "running gpt2" not in terminal.getvalue()
    assert copy.running and copy.heartbeat == 0.05


def test_work_fraction_counts_running_cells_by_steps_and_never_reaches_one_while_they_run():
    progress = Progress("s", total=4, skipped=0, out=io.StringIO())
    progress.started("a", cell_config("a"))
    progress.result("a", cell_config("a"), {"step": 500, "progress": 0.5})
    assert progress.work_fraction() == 0.5 / 4
    progress.result("a", cell_config("a"), {"step": 1000, "progress": 1.0})  # training over, evaluating
    assert progress.work_fraction() < 1 / 4
    for key in "bcd":
        progress.started(key, cell_config(key))
        progress.completed(key, cell_config(key))
    assert progress.work_fraction() < 1.0 and progress.pending == 0
    progress.completed("a", cell_config("a"))
    assert progress.work_fraction() == 1.0


def test_time_left_is_timed_from_the_first_report_and_counts_only_this_runs_training():
    """The time left is the work left at the rate of this run's work since training began: neither the
    start before it (Ray, Tune, imports) nor a resumed cell's steps trained before the run count, which
    made the smoke sweep's estimates run high (9 min 15 s against 6 min 38 s)."""
    progress = Progress("s", total=12, skipped=2, out=io.StringIO())
    progress.start -= 60  # a minute of start-up before any trial trains: no part of the rate
    progress.started("a", cell_config("a"))
    progress.started("b", cell_config("b"))
    assert progress.seconds_left() is None and progress.eta() == "?"  # nothing trained yet
    progress.result("a", cell_config("a"), {"step": 500, "progress": 0.5, "start": 0.5})  # resumed at 500
    progress.result("b", cell_config("b"), {"step": 10, "progress": 0.01, "start": 0.0})
    began = progress.began
    assert progress.seconds_left(began + 1) is None  # 0.01 cells of this run's work: under 2% of 10
    progress.result("b", cell_config("b"), {"step": 1000, "progress": 1.0, "start": 0.0})
    progress.completed("b", cell_config("b"))
    progress.result("a", cell_config("a"), {"step": 750, "progress": 0.75, "start": 0.5})
    # 1 cell (b) and a's 250 steps in 25 s; left: 10 cells less b and a's 750 steps = 8.25 cells
    assert progress.seconds_left(began + 25) == pytest.approx(25 * 8.25 / 1.25)
    progress.completed("a", cell_config("a"))
    assert progress.seconds_left(began + 40) == pytest.approx(40 * 8 / 1.5)


def test_time_left_weighs_each_cell_by_its_estimated_cost():
    """Two unpacked cells of 4 s a step's worth each and a pack of 4 cells of 0.25 each (the smoke sweep's
    GPT-2 and its packed MLP): once the two are done the pack is a ninth of the work, not two thirds."""
    weights = {"g1": 4.0, "g2": 4.0, **{f"m{i}": 0.25 for i in range(4)}}
    pack = pack_config([f"m{i}" for i in range(4)])
    weighed = Progress("s", total=6, skipped=0, out=io.StringIO(), weights=weights)
    counted = Progress("s", total=6, skipped=0, out=io.StringIO())
    for progress in (weighed, counted):
        for key in ("g1", "g2"):
            progress.started(key, cell_config(key))
            progress.result(key, cell_config(key), {"step": 1000, "progress": 1.0, "start": 0.0})
            progress.completed(key, cell_config(key))
        progress.started("p", pack)
    assert weighed.work_fraction() == pytest.approx(8 / 9) and counted.work_fraction() == pytest.approx(2 / 6)
    # 2 cells in 40 s: weighed, 1 of 9 left (5 s); counted, 4 cells of 6 left (80 s)
    assert weighed.seconds_left(weighed.began + 40) == pytest.approx(5.0)
    assert counted.seconds_left(counted.began + 40) == pytest.approx(80.0)
    weighed.result("p", pack, {"step": 250, "progress": 0.5, "start": 0.0})
    assert weighed.seconds_left(weighed.began + 42) == pytest.approx(42 * 0.5 / 8.5)
    assert "2/6 cells done (33%), 4 running, 0 pending" in weighed.counts()  # counts stay in cells


def test_live_view_shows_counts_and_each_running_trial_with_its_step():
    progress = Progress("smoke", total=12, skipped=0, out=io.StringIO(), live=True)
    progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))
    progress.result("a", cell_config("gpt2 T=16 N=8 seed=0"), {"step": 250, "progress": 0.25})
    progress.started("b", cell_config("mlp T=inf N=16 seed=1"))
    progress.result("b", cell_config("mlp T=inf N=16 seed=1"), {"step": 1000, "progress": 1.0})
    progress.started("c", cell_config("mlp T=256 N=8 seed=0"))
    progress.completed("c", cell_config("mlp T=256 N=8 seed=0"))
    console = Console(file=io.StringIO(), width=160, force_terminal=True, color_system=None)
    console.print(progress.render())
    text = console.file.getvalue()
    assert re.search(r"smoke .* 1/12 cells done, 2 running, 9 pending, 0 failed \| \d+s elapsed", text), text
    assert re.search(r"gpt2 T=16 N=8 seed=0 .* step 250/1000", text), text
    assert re.search(r"mlp T=inf N=16 seed=1 .* evaluating", text), text
    assert "mlp T=256" not in text  # finished trials leave the view


def test_live_view_runs_on_a_terminal_and_pickles_without_its_stream():
    out = io.StringIO()
    out.isatty = lambda: True  # what sys.stdout says in a terminal
    progress = Progress("smoke", total=2, skipped=0, out=out)
    assert progress.live_mode
    with progress:
        progress.started("a", cell_config("gpt2 T=16 N=8 seed=0"))
        copy = pickle.loads(pickle.dumps(progress))  # Tune pickles its callbacks mid-run
        progress.completed("a", cell_config("gpt2 T=16 N=8 seed=0"))
        progress.write("a line of the sweep's own")
    assert copy.running and copy.out is None
    shown = out.getvalue()
    assert "a line of the sweep's own" in shown and "1/2 cells done" in shown
    assert "started gpt2" not in shown  # no plain lines in live mode


def test_summary_names_failures_time_place_and_next_commands():
    commands = next_commands("sweeps/smoke.yaml", "", (), "sqlite:////tmp/x/mlflow.db", "smoke", "3")
    assert commands == [
        "python -m analysis sweeps/smoke.yaml --tracking-uri sqlite:////tmp/x/mlflow.db",
        "MLFLOW_SERVER_ENABLE_JOB_EXECUTION=false mlflow ui --workers 1 --backend-store-uri sqlite:////tmp/x/mlflow.db",
        "open http://127.0.0.1:5000/#/experiments/3/runs?workflowType=machine_learning&viewStateShareKey=lattice",
    ]
    default = next_commands(
        "sweeps/smoke.yaml",
        "quick",
        (),
        "sqlite:////w/mlflow.db",
        "smoke-quick",
        "1",
        "sqlite:////w/mlflow.db",
    )
    assert default[0] == "python -m analysis sweeps/smoke.yaml --profile quick"
    edited = next_commands(
        "sweeps/smoke.yaml", "", ("train.steps=10",), "sqlite:////w/m.db", "smoke", "1", "sqlite:////w/m.db"
    )
    assert edited[0] == "python -m analysis sweeps/smoke.yaml --set train.steps=10"
    server = next_commands("s.yaml", "", (), "http://mlflow:5000/", "s", "7")
    assert server == [
        "python -m analysis s.yaml --tracking-uri http://mlflow:5000/",
        "open http://mlflow:5000/#/experiments/7/runs?workflowType=machine_learning&viewStateShareKey=lattice",
    ]

    ok = summary_lines(
        Summary(
            name="smoke",
            total=24,
            skipped=4,
            completed=20,
            failed={},
            unfinished=0,
            elapsed=75.0,
            trials=9,
            uri="sqlite:////w/m.db",
            commands=commands,
        )
    )
    assert ok[0] == (
        "[smoke] 20 cells trained in 9 trials (small cells packed together), 0 failed,"
        " 4 already complete; 24/24 cells complete; took 1m15s."
    )
    assert ok[-4:] == ["next:"] + [f"  {command}" for command in commands]
    bad = summary_lines(
        Summary(
            name="smoke",
            total=3,
            skipped=0,
            completed=2,
            failed={"gpt2 T=16 N=8 seed=0 (abc)": "Traceback\n  x\nKeyError: 'd'"},
            unfinished=0,
            elapsed=5.0,
            trials=3,
            uri="sqlite:////w/m.db",
            commands=commands,
        )
    )
    assert bad[0].startswith("[smoke] 2 cells trained, 1 failed; 2/3 cells complete")
    assert bad[1] == "[smoke] FAILED gpt2 T=16 N=8 seed=0 (abc): KeyError: 'd'"
    assert "next:" not in bad  # the failure comes first


def test_error_line_is_the_exception_line():
    assert error_line("ray::ImplicitFunc.train()\n  File 'a'\nRuntimeError: boom\n\n") == "RuntimeError: boom"
    assert error_line("") == "(no message)"
