"""What a sweep shows while it runs: one live view in a terminal, one line per change elsewhere.

In a terminal (stdout is a TTY) a rich live view redraws in place: a bar of the sweep's work, the cells done,
running, pending and failed, the time taken and the time left, and one line per running trial with its
step. Anywhere else (CI, ``nohup``, a file, Ray Jobs logs) each change is one plain line: a trial started,
finished or failed; and while trials run, a heartbeat line every ``heartbeat`` seconds (the sweep file's
``run.heartbeat``, default 60) with each running trial's step and the time left, so a sweep of long cells
is seen working between its changes. Both end with a summary (cells run, failed with
their error, time taken, where the runs are) and the commands to run next. ``quiet_ray`` silences Ray's
and Tune's own banners and hints, which would otherwise interleave with this view.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import threading
import time
from dataclasses import dataclass
from typing import TextIO

from scaling.tracking.uri import experiment_ui_link, ui_command
from scaling.trial.spec import spec_in
from scaling.trial.storage import OUTAGE_NOTICE

# Loggers whose warnings are Ray's and Tune's own chatter, not the sweep's news: the token-auth notice
# at every start, Tune's hints. Errors still show.
RAY_LOGGERS = ("ray", "ray.tune", "ray.train", "ray.air", "ray._private")
# A storage outage that trials rode through is said once; reports of it within this many seconds of the
# last saying are the same outage, heard late by other trials.
OUTAGE_QUIET_S = 600.0


def quiet_ray(verbose: bool = False) -> None:
    """Silence Ray's and Tune's banners, warnings and the TensorBoard hint (unless ``verbose``).

    Tune's default output engine prints a "Configuration for experiment" box and a TensorBoard hint even
    at ``verbose=0``; its older engine (RAY_AIR_NEW_OUTPUT=0) prints nothing at ``verbose=0``. Call before
    ``ray.init`` and ``Tuner.fit`` in the driver; a variable already set by the user is kept.
    """
    if verbose:
        return
    os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")
    for name in RAY_LOGGERS:
        logging.getLogger(name).setLevel(logging.ERROR)


def format_duration(seconds: float) -> str:
    seconds = int(max(seconds, 0))
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}h{minutes:02d}m" if hours else f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def error_line(error: str) -> str:
    """The line of an error that says what went wrong: the exception's own line (a traceback's last)."""
    lines = [line.strip() for line in (error or "").strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no message)"


@dataclass
class TrialState:
    label: str  # the cell's name, or "pack of K: first cell, ..."
    size: int  # cells it trains
    steps: int  # its training steps (the longest member's)
    step: int = 0
    fraction: float = 0.0  # of its work, in [0, 1]
    retries: int = 0
    base: float | None = None  # the fraction it started this run at (a resumed cell's checkpoint), reported
    weight: float | None = None  # its work in the progress's units (its cells' estimated cost); None: size

    def this_run(self, fraction: float | None = None) -> float:
        """The cells' worth of work it did in this run, up to ``fraction`` (default: its own now)."""
        done = self.fraction if fraction is None else fraction
        return self.work * max(done - (self.base or 0.0), 0.0)

    @property
    def work(self) -> float:
        """Its whole work in the progress's units: its weight, else its cells."""
        return self.size if self.weight is None else self.weight

    def stage(self) -> str:
        """'step 500/1500', 'evaluating' once its steps are done, or '' (a kind that does not train)."""
        if self.fraction >= 1.0:
            return "evaluating"
        return f"step {self.step}/{self.steps}" if self.steps else ""


def trial_state(config: dict, weights: dict[str, float] | None = None) -> TrialState:
    """A trial config of scaling.sweep (a cell, or a pack of cells under ``members``) as a TrialState;
    ``weights``: each cell's work by its key (a cell not in it weighs their mean), None: a cell each."""
    members = config.get("members") or [config]
    steps = max(int(m["cell"].get("train", {}).get("steps", 0)) for m in members)
    if len(members) == 1:
        label = members[0]["name"]
    else:
        label = f"pack of {len(members)}: {members[0]['name']}, ..."
    if not weights:
        return TrialState(label, len(members), steps)
    mean = sum(weights.values()) / len(weights)
    weight = sum(weights.get(m.get("key", ""), mean) for m in members)
    return TrialState(label, len(members), steps, weight=weight)


class Progress:
    """A sweep's progress, fed by Tune's callbacks (``callback()``) and shown live or line by line.

    ``live`` None: live when ``out`` is a terminal. Counts are in cells (a packed trial trains several);
    the bar and the time left weigh each cell by ``weights`` (its estimated seconds by its key, of the
    trial it runs in: scaling.budget.cpu_plan.cell_weights; None: a cell each) and running cells by the share
    of their steps done. Without the live view,
    a heartbeat line every ``heartbeat`` seconds while the progress is open (None: none).
    """

    def __init__(
        self,
        name: str,
        total: int,
        skipped: int,
        out: TextIO | None = None,
        live: bool | None = None,
        trials: int = 0,
        heartbeat: float | None = None,
        weights: dict[str, float] | None = None,
    ):
        self.name, self.total, self.skipped, self.trials = name, total, skipped, trials
        self.weights = dict(weights) if weights else None
        # the work of this run's cells (their weights, else a cell each), and of the finished trials'
        self.todo = sum(self.weights.values()) if self.weights else float(total - skipped)
        self.finished_work = 0.0
        self.out = out
        stream = out or sys.stdout
        self.live_mode = bool(live if live is not None else (hasattr(stream, "isatty") and stream.isatty()))
        self.heartbeat = heartbeat
        self.done = self.failed = 0
        self.running: dict[str, TrialState] = {}
        self.errors: dict[str, str] = {}  # failed trial's label -> its error line
        self.start = time.monotonic()
        self.began: float | None = None  # when the first trial first reported work (the clock of the rate)
        self.worked = 0.0  # cells' worth of work the finished trials did in this run
        self.lock = threading.Lock()
        self.writing = threading.Lock()  # the change lines and the heartbeat's come from two threads
        self._live = None
        self._beating: tuple[threading.Event, threading.Thread] | None = None
        self.outage_said = -OUTAGE_QUIET_S  # when a storage outage was last said (once per outage)

    def __getstate__(self):
        # Tune pickles callbacks into its experiment state; stream, locks, live view, heartbeat stay behind.
        return {**self.__dict__, "out": None, "lock": None, "writing": None, "_live": None, "_beating": None}

    def __setstate__(self, state):
        self.__dict__.update(state)
        self.lock, self.writing = threading.Lock(), threading.Lock()

    # -- numbers -------------------------------------------------------------------------------------------

    @property
    def pending(self) -> int:
        running = sum(t.size for t in self.running.values())
        return self.total - self.skipped - self.done - self.failed - running

    def work_fraction(self) -> float:
        """The share of this run's work done: finished cells, plus running cells by their steps."""
        partial = sum(t.work * min(t.fraction, 0.99) for t in self.running.values())
        return min((self.finished_work + partial) / self.todo, 1.0) if self.todo > 0 else 1.0

    def seconds_left(self, now: float | None = None) -> float | None:
        """The time left: the work left (in cells or their weights, running ones by their steps) at the
        rate this run has worked since its first trial first reported, None before 2% of the work is done in
        this run.

        The rate counts neither the time before any trial trains (Tune's start, the first trial's imports),
        nor the steps a resumed cell had trained before this run: both made the estimate run high or low
        (the smoke sweep: 9 min 15 s predicted against 6 min 38 s; 4 min 25 s against 1 min 57 s after a
        resume). A later trial's start and evaluation count: they recur while the sweep runs."""
        todo = self.todo
        worked = self.worked + sum(t.this_run() for t in self.running.values())
        if self.began is None or todo <= 0 or worked < 0.02 * todo:
            return None
        left = todo * (1 - self.work_fraction())
        return ((time.monotonic() if now is None else now) - self.began) * left / worked

    def eta(self) -> str:
        seconds = self.seconds_left()
        return "?" if seconds is None else format_duration(seconds)

    def counts(self) -> str:
        finished = self.skipped + self.done
        return (
            f"{finished}/{self.total} cells done ({100 * finished / max(self.total, 1):.0f}%),"
            f" {sum(t.size for t in self.running.values())} running, {self.pending} pending,"
            f" {self.failed} failed"
        )

    def times(self) -> str:
        return f"{format_duration(time.monotonic() - self.start)} elapsed, ~{self.eta()} left"

    def steps(self, at_most: int = 12) -> str:
        """Each running trial's stage, as the live view's rows: 'gpt2 T=16 N=8 seed=0 step 500/1500, ...'."""
        states = sorted(self.running.values(), key=lambda s: s.label)
        parts = [" ".join(filter(None, (s.label, s.stage()))) for s in states[:at_most]]
        if len(states) > at_most:
            parts.append(f"... and {len(states) - at_most} more")
        return ", ".join(parts)

    # -- events (from Tune's callbacks) -------------------------------------------------------------------

    def started(self, trial_id: str, config: dict) -> None:
        with self.lock:
            if trial_id in self.running:
                return
            state = self.running[trial_id] = trial_state(config, self.weights)
        self._change(f"started {state.label}")

    def result(self, trial_id: str, config: dict, result: dict) -> None:
        with self.lock:  # no line: the live view shows the step at its next redraw
            state = self.running.setdefault(trial_id, trial_state(config, self.weights))
            state.step = int(result.get("step", state.step) or 0)
            state.fraction = float(result.get("progress", state.fraction) or 0.0)
            if state.base is None:  # its first report: what it had trained before this run is no work of it
                state.base = float(result.get("start", 0.0) or 0.0)
                self.began = self.began or time.monotonic()
            outage = result.get(OUTAGE_NOTICE)
            say = outage and time.monotonic() - self.outage_said > OUTAGE_QUIET_S
            if say:
                self.outage_said = time.monotonic()
        if say:  # every trial that waited reports the same outage: it is said once
            self.write(f"[{self.name}] {outage}: the trials waited for it and went on ({state.label})")

    def recovered(self, trial_id: str, config: dict) -> None:
        with self.lock:
            state = self.running.setdefault(trial_id, trial_state(config, self.weights))
            state.retries += 1
        self._change(f"retrying {state.label} (attempt {state.retries + 1}) from its checkpoint")

    def completed(self, trial_id: str, config: dict, held: int = 0) -> None:
        """A trial ended; ``held`` of its cells were left to another driver that trains them (leases)."""
        with self.lock:
            state = self.running.pop(trial_id, None) or trial_state(config, self.weights)
            self.done += state.size - held
            self.finished_work += state.work * (state.size - held) / state.size
            self.worked += state.this_run(1.0) * (state.size - held) / state.size
        self._change(f"done {state.label}")

    def errored(self, trial_id: str, config: dict, error: str = "") -> None:
        with self.lock:
            state = self.running.pop(trial_id, None) or trial_state(config, self.weights)
            self.failed += state.size
            self.finished_work += state.work
            self.worked += state.this_run()
            self.errors[state.label] = error_line(error)
        self._change(f"FAILED {state.label}: {self.errors[state.label]}")

    # -- output --------------------------------------------------------------------------------------------

    def write(self, text: str) -> None:
        """A line of the sweep's own (above the live view while it runs)."""
        if self._live is not None:
            self._live.console.print(text, markup=False, highlight=False)
        else:
            stream = self.out or sys.stdout
            with self.writing:
                stream.write(text + "\n")
                stream.flush()

    def _change(self, what: str) -> None:
        """A state change: redraw the live view now, or print one line (never while holding the lock:
        the live view's own thread takes Live's lock, then this one's, to render)."""
        if self.live_mode:
            if self._live is not None:
                self._live.refresh()
        else:
            with self.lock:
                line = f"[{self.name}] {what} | {self.counts()} | {self.times()}"
            self.write(line)

    def render(self):
        """The live view: a bar and the counts, then one row per running trial."""
        from rich.console import Group
        from rich.progress_bar import ProgressBar
        from rich.table import Table
        from rich.text import Text

        with self.lock:
            fraction = self.work_fraction()
            done = (self.skipped + fraction * (self.total - self.skipped)) / max(self.total, 1)
            head = Table.grid(padding=(0, 1))
            running = sum(t.size for t in self.running.values())
            counts = Text.assemble(
                (f"{self.skipped + self.done}/{self.total} cells done", "green"),
                ", ",
                (f"{running} running", "cyan"),
                f", {self.pending} pending, ",
                (f"{self.failed} failed", "red" if self.failed else ""),
                (f" | {self.times()}", "dim"),
            )
            head.add_row(
                Text(self.name, style="bold"), ProgressBar(total=1.0, completed=done, width=30), counts
            )
            rows = Table.grid(padding=(0, 2))
            for state in sorted(self.running.values(), key=lambda s: s.label)[:12]:
                bar = ProgressBar(total=1.0, completed=min(state.fraction, 1.0), width=20)
                step = state.stage()
                retry = f"retry {state.retries}" if state.retries else ""
                rows.add_row(
                    Text("  " + state.label), bar, Text(step, style="dim"), Text(retry, style="yellow")
                )
            extra = len(self.running) - 12
            parts = [head, rows]
            if extra > 0:
                parts.append(Text(f"  ... and {extra} more running trials", style="dim"))
            for label, error in list(self.errors.items())[-5:]:
                parts.append(Text(f"  FAILED {label}: {error}", style="red"))
            return Group(*parts)

    def beat(self) -> None:
        """A heartbeat line: each running trial's step (or that none runs yet), the counts, the time left."""
        with self.lock:
            running = self.steps()
            line = f"[{self.name}] {f'running {running}' if running else 'no trial running'}"
            line += f" | {self.counts()} | {self.times()}"
        self.write(line)

    def _beat_until(self, stop: threading.Event) -> None:
        while not stop.wait(self.heartbeat):
            self.beat()

    def __enter__(self) -> "Progress":
        self.start = time.monotonic()
        if not self.live_mode and self.heartbeat:
            stop = threading.Event()
            thread = threading.Thread(target=self._beat_until, args=(stop,), name="heartbeat", daemon=True)
            self._beating = (stop, thread)
            thread.start()
        if self.live_mode:
            from rich.console import Console
            from rich.live import Live

            console = Console(file=self.out or sys.stdout)
            self._live = Live(
                console=console,
                get_renderable=self.render,
                refresh_per_second=2,
                transient=False,
                redirect_stdout=False,
                redirect_stderr=False,
            )
            self._live.start()
        return self

    def __exit__(self, *exc) -> None:
        if self._beating is not None:
            (stop, thread), self._beating = self._beating, None
            stop.set()
            thread.join()
        if self._live is not None:
            live, self._live = self._live, None
            live.stop()

    def callback(self):
        """The Ray Tune callback that feeds this progress."""
        from ray.tune import Callback

        progress = self

        class ProgressCallback(Callback):
            def on_trial_start(self, iteration, trials, trial, **info):
                progress.started(trial.trial_id, spec_in(trial.config))

            def on_trial_result(self, iteration, trials, trial, result, **info):
                progress.result(trial.trial_id, spec_in(trial.config), result)

            def on_trial_recover(self, iteration, trials, trial, **info):
                progress.recovered(trial.trial_id, spec_in(trial.config))

            def on_trial_complete(self, iteration, trials, trial, **info):
                held = int((trial.last_result or {}).get("held", 0))  # cells another driver trains
                progress.completed(trial.trial_id, spec_in(trial.config), held)

            def on_trial_error(self, iteration, trials, trial, **info):
                progress.errored(trial.trial_id, spec_in(trial.config), read_error(trial))

        return ProgressCallback()


def read_error(trial) -> str:
    """The error text Tune saved for a failed trial; empty when it cannot be read."""
    try:
        path = trial.error_file
        if path and os.path.exists(path):
            with open(path) as handle:
                return handle.read()
    except Exception:  # noqa: BLE001 - the summary still has the error from the trial's result
        pass
    return ""


def next_commands(
    sweep: str,
    profile: str,
    overrides: tuple[str, ...],
    uri: str,
    experiment: str,
    experiment_id: str,
    default_uri: str | None = None,
) -> list[str]:
    """The commands to run after a sweep: its analysis, and the MLflow UI on its runs table."""
    where = [] if uri == default_uri else ["--tracking-uri", uri]
    analysis = ["python", "-m", "analysis", sweep] + (["--profile", profile] if profile else [])
    for override in overrides:  # the analysis plans the same cells, and reads only those
        analysis += ["--set", override]
    commands = [shlex.join(analysis + where)]
    serve = ui_command(uri)
    if serve:
        commands.append(serve)
    commands.append(f"open {experiment_ui_link(uri, experiment_id)}")
    return commands


@dataclass(frozen=True, kw_only=True)
class Summary:
    """What a sweep's closing summary reports (scaling.sweep.run.SweepRun.summary builds it)."""

    name: str  # the sweep, which is also its MLflow experiment
    total: int  # cells of the sweep
    skipped: int  # complete before this run
    completed: int  # completed by this run
    failed: dict[str, str]  # "<cell name> (<key>)" -> its error
    unfinished: int  # left unfinished (interrupted)
    elapsed: float  # seconds
    trials: int  # Tune trials run (a pack of cells is one)
    uri: str  # the tracking store, redacted
    commands: list[str]  # what to run next (next_commands)


def summary_lines(summary: Summary) -> list[str]:
    """The closing summary: what ran, what failed (with its error), how long, where the runs are, next."""
    s = summary
    ran = f"{s.completed} cell{'s' if s.completed != 1 else ''} trained"
    if s.trials and s.trials != s.completed + len(s.failed) + s.unfinished:
        ran += f" in {s.trials} trials (small cells packed together)"
    lines = [
        f"[{s.name}] {ran}, {len(s.failed)} failed"
        + (f", {s.unfinished} unfinished" if s.unfinished else "")
        + (f", {s.skipped} already complete" if s.skipped else "")
        + f"; {s.skipped + s.completed}/{s.total} cells complete; took {format_duration(s.elapsed)}."
    ]
    for label, error in s.failed.items():
        lines.append(f"[{s.name}] FAILED {label}: {error_line(error)}")
    lines.append(f"[{s.name}] runs: MLflow experiment {s.name!r} in {s.uri}")
    if not s.failed and not s.unfinished:
        lines.append("next:")
        lines += [f"  {command}" for command in s.commands]
    return lines
