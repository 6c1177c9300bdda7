"""The waves of ``python -m scaling.sweep FILE --adaptive`` (scaling.sweep runs each wave's cells as trials).

Each wave: read the complete cells of the lattice from MLflow (scaling.tracking.table, cached), judge them
(scaling.adaptive.policy), print the answers with their intervals and the next wave with its reasons, log both
on the sweep's parent run (scaling.tracking.adaptive_waves: ``adaptive/wave_NN.json``, the MLflow table
``adaptive/answers_NN.json``, metrics ``adaptive.settled/open/spent``), then run the wave. The wave record is
logged before its cells run, so a driver that dies mid-wave resumes that wave's remaining cells on the rerun
(complete cells are never run again, partial ones resume from their checkpoints); a wave that finished is
followed by a new decision from everything complete. Cells complete from any earlier run of the sweep (a full
run, another adaptive run) count as run.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, TextIO

import pandas as pd

from scaling.planning.plan import Plan
from scaling.tracking.table import load_table

from ..judge.verdicts import value_text
from ..redact import redact
from ..sweep.run import SweepRun
from .policy import Answer, Policy


def lattice_complete(run: SweepRun, policy: Policy) -> set[str]:
    """The lattice's cells complete in the store now."""
    return run.complete_now() & set(policy.lattice.frame.index)


def answers_frame(answers: list[Answer]) -> pd.DataFrame:
    return pd.DataFrame([a.row() for a in answers])


def first_reason(policy: Policy) -> str:
    first, seeds = policy.settings.first, policy.seed_order[: policy.settings.first.seeds]
    axes = [f"{axis} in {{{', '.join(value_text(v) for v in getattr(first, axis))}}}" for axis in ("T", "N")]
    axes = [a for a, axis in zip(axes, ("T", "N")) if getattr(first, axis)]
    return f"first wave: {', '.join(axes)}, seeds {', '.join(map(str, seeds))}, every model"


def assess_store(policy: Policy, uri: str, plan: Plan, complete: set[str]) -> list[Answer]:
    """The answers of the complete lattice cells in the store (none without any)."""
    if not complete:
        return []
    table, _ = load_table(uri, plan.name)
    return policy.assess(table[table["cell_key"].isin(complete)], complete)


def ended_already(run: SweepRun) -> bool:
    """Whether this adaptive sweep already ended with the cells now complete (its last wave record, of
    ``run.waves``, says why and no lattice cell completed since); if so, say so with its answers, so a
    rerun starts no Ray."""
    policy, records = run.policy, run.waves
    complete = run.complete & set(policy.lattice.frame.index)
    if not records or records[-1]["cells"] or records[-1]["complete"] != len(complete):
        return False
    print_answers(run.name, assess_store(policy, run.uri, run.plan, complete), run.out)
    run.say(
        f"[{run.name}] the adaptive sweep has ended: {records[-1]['stop']}; {len(complete)} of"
        f" {len(policy.lattice.frame)} cells run ({records[-1]['spent']:.0%} of the lattice's estimated"
        f" compute)"
    )
    return True


def print_answers(name: str, answers: list[Answer], out: TextIO) -> None:
    settled = sum(a.settled for a in answers)
    out.write(f"[{name}] answers: {settled} settled, {len(answers) - settled} open\n")
    for a in sorted(answers, key=lambda a: a.settled):
        out.write(f"  {a.line()}\n")


@dataclass
class Waves:
    """Where an adaptive run stands: the waves recorded, the lattice cells complete, and the next wave's
    cells and reasons (None: to be decided from the answers)."""

    run: SweepRun
    policy: Policy
    records: list[dict]
    complete: set[str]
    wave: int = 0
    keys: list[str] | None = None
    reasons: list[str] = field(default_factory=list)
    stop: str = ""
    resuming: bool = False  # the next wave is the last recorded one, resumed (logged already)
    answers: list[Answer] = field(default_factory=list)

    @classmethod
    def resume(cls, run: SweepRun, policy: Policy) -> "Waves":
        """The waves of ``run`` so far (its records): resume the last wave if some of its cells are
        unfinished; else decide the next one from the answers; the first wave when none was recorded."""
        records, complete = list(run.waves), lattice_complete(run, policy)
        waves = cls(run, policy, records, complete)
        last = records[-1] if records else None
        if last and last["cells"] and not set(last["cells"]) <= complete:
            by_key = {p.cell.key for p in run.plan.cells}
            waves.keys = [k for k in last["cells"] if k in by_key]
            unfinished = len(set(waves.keys) - complete)
            waves.reasons = [f"resuming wave {last['wave']}: {unfinished} of its cells unfinished"]
            waves.wave, waves.resuming = int(last["wave"]), True
        elif last:
            waves.wave = int(last["wave"])
        else:
            waves.keys, waves.reasons, waves.wave = policy.first_wave(), [first_reason(policy)], 1
        return waves

    def spent(self) -> float:
        """The share of the lattice's estimated compute the complete cells took."""
        return self.policy.lattice.cost(self.complete) / self.policy.lattice.total_cost

    def judge(self) -> None:
        """The answers of the complete cells, printed."""
        run, budget, lattice = self.run, self.policy.settings.budget, len(self.run.plan.cells)
        self.answers = assess_store(self.policy, run.uri, run.plan, self.complete)
        if self.answers:
            run.out.write(
                f"[{run.name}] adaptive: {len(self.complete)} of {lattice} lattice cells complete,"
                f" {self.spent():.0%} of its estimated compute (budget {budget:.0%})\n"
            )
            print_answers(run.name, self.answers, run.out)

    def decide(self) -> None:
        """The next wave (unless resumed or chosen already), recorded on the sweep's parent run before its
        cells run; a decision to stop that repeats the last record is not recorded again."""
        if self.keys is None:
            self.keys, self.reasons, self.stop = self.policy.next_wave(self.answers, self.complete)
            self.wave += 1
        record = {
            "wave": self.wave,
            "cells": self.keys,
            "reasons": self.reasons,
            "stop": self.stop,
            "spent": self.spent(),
            "budget": self.policy.settings.budget,
            "complete": len(self.complete),
            "settled": sum(a.settled for a in self.answers),
            "open": sum(not a.settled for a in self.answers),
            "policy_seed": self.policy.settings.seed,
        }
        last = self.records[-1] if self.records else None
        repeat = last and not self.keys and not last["cells"] and last["complete"] == len(self.complete)
        if not self.resuming and not repeat:
            frame = answers_frame(self.answers) if self.answers else pd.DataFrame({"answer": []})
            self.run.tracker.log_wave(self.run.parent, record, frame)
            self.records.append(record)
        self.resuming = False

    def run_next(self, run_wave: Callable[[list], list]) -> list:
        """Run the decided wave's cells not complete yet; those left unfinished."""
        run, lattice = self.run, self.policy.lattice
        by_key = {p.cell.key: p for p in run.plan.cells}
        todo = [by_key[k] for k in self.keys if k not in self.complete]
        cost = lattice.cost([p.cell.key for p in todo]) / lattice.total_cost
        run.out.write(f"[{run.name}] wave {self.wave}: {len(todo)} cells ({cost:.0%} of the compute)\n")
        for reason in self.reasons:
            run.out.write(f"  {redact(reason)}\n")
        run.out.flush()
        unfinished = run_wave(todo) if todo else []
        self.complete = lattice_complete(run, self.policy)
        self.keys, self.reasons, self.stop = None, [], ""
        return unfinished

    def final(self, stop: str, unfinished: list) -> dict:
        """The adaptive run's end: cells, spent (the lattice's compute), answers, stop, unfinished cells."""
        return {
            "cells": len(self.complete),
            "spent": self.spent(),
            "answers": self.answers,
            "stop": stop,
            "unfinished": unfinished,
        }


def run_adaptive(run: SweepRun, run_wave: Callable[[list], list]) -> dict:
    """Run waves until every answer is settled, the budget is spent, or a wave fails or is interrupted
    (``run.waves``: the waves already on the sweep's parent run, as scaling.tracking.adaptive_waves reads
    them; ``run_wave(planned cells)`` trains them and returns those left unfinished). The final state:
    cells, spent (share of the lattice's compute), answers, stop, unfinished cells."""
    waves = Waves.resume(run, Policy(run.plan))
    while True:
        waves.judge()
        waves.decide()
        if not waves.keys:
            run.say(
                f"[{run.name}] adaptive sweep ends: {waves.stop}; {len(waves.complete)} of"
                f" {len(run.plan.cells)} cells run ({waves.spent():.0%} of the lattice's estimated compute)"
            )
            return waves.final(waves.stop, [])
        unfinished = waves.run_next(run_wave)
        if unfinished or run.outcome.failed:
            return waves.final("", unfinished)
