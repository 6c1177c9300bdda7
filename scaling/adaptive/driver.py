"""The waves of ``python -m scaling.sweep FILE --adaptive`` (scaling.sweep runs each wave's cells as trials).

Each wave: read the complete cells of the lattice from MLflow (scaling.table, cached), judge them
(scaling.adaptive.policy), print the answers with their intervals and the next wave with its reasons, log both
on the sweep's parent run (scaling.tracking: ``adaptive/wave_NN.json``, the MLflow table
``adaptive/answers_NN.json``, metrics ``adaptive.settled/open/spent``), then run the wave. The wave record is
logged before its cells run, so a driver that dies mid-wave resumes that wave's remaining cells on the rerun
(complete cells are never run again, partial ones resume from their checkpoints); a wave that finished is
followed by a new decision from everything complete. Cells complete from any earlier run of the sweep (a full
run, another adaptive run) count as run.
"""

from __future__ import annotations

from typing import Callable, TextIO

import pandas as pd

from ..judge.verdicts import value_text
from ..plan import Plan
from ..redact import redact
from ..table import load_table
from ..tracking import Tracker
from .policy import Answer, Policy


def complete_keys(tracker: Tracker, experiment_id: str, policy: Policy) -> set[str]:
    return tracker.complete_keys(experiment_id) & set(policy.lattice.frame.index)


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


def ended_already(
    policy: Policy, plan: Plan, uri: str, records: list[dict], complete: set[str], out: TextIO
) -> bool:
    """Whether this adaptive sweep already ended with the cells now complete (``complete``: the sweep's
    complete cells; its last wave record says why and no lattice cell completed since); if so, say so with
    its answers, so a rerun starts no Ray."""
    complete = complete & set(policy.lattice.frame.index)
    if not records or records[-1]["cells"] or records[-1]["complete"] != len(complete):
        return False
    print_answers(plan.name, assess_store(policy, uri, plan, complete), out)
    out.write(
        f"[{plan.name}] the adaptive sweep has ended: {records[-1]['stop']}; {len(complete)} of"
        f" {len(policy.lattice.frame)} cells run ({records[-1]['spent']:.0%} of the lattice's estimated"
        f" compute)\n"
    )
    return True


def print_answers(name: str, answers: list[Answer], out: TextIO) -> None:
    settled = sum(a.settled for a in answers)
    out.write(f"[{name}] answers: {settled} settled, {len(answers) - settled} open\n")
    for a in sorted(answers, key=lambda a: a.settled):
        out.write(f"  {a.line()}\n")


def run_adaptive(
    plan: Plan,
    uri: str,
    tracker: Tracker,
    experiment_id: str,
    parent: str,
    records: list[dict],
    run_wave: Callable[[list], list],
    out: TextIO,
    failed: Callable[[], bool],
) -> dict:
    """Run waves until every answer is settled, the budget is spent, or a wave fails or is interrupted
    (``records``: the waves already on ``parent``, as Tracker.adaptive_waves reads them; ``run_wave(planned
    cells)`` trains them and returns those left unfinished; ``failed()`` says whether a cell failed). The
    final state: cells, spent (share of the lattice's compute), answers, stop, unfinished cells."""
    policy = Policy(plan)
    name, total = plan.name, policy.lattice.total_cost
    by_key = {p.cell.key: p for p in plan.cells}
    records = list(records)
    complete = complete_keys(tracker, experiment_id, policy)
    keys, reasons, resuming = None, [], False
    if records and records[-1]["cells"] and not set(records[-1]["cells"]) <= complete:
        keys = [k for k in records[-1]["cells"] if k in by_key]
        reasons = [
            f"resuming wave {records[-1]['wave']}: {len(set(keys) - complete)} of its cells unfinished"
        ]
        wave, resuming = int(records[-1]["wave"]), True
    elif records:
        wave = int(records[-1]["wave"])
    else:
        keys, reasons, wave = policy.first_wave(), [first_reason(policy)], 1
    answers: list[Answer] = []
    stop = ""

    def final(stop: str, unfinished: list) -> dict:
        spent = policy.lattice.cost(complete) / total
        return {
            "cells": len(complete),
            "spent": spent,
            "answers": answers,
            "stop": stop,
            "unfinished": unfinished,
        }

    while True:
        answers = assess_store(policy, uri, plan, complete)
        spent = policy.lattice.cost(complete) / total
        if answers:
            out.write(
                f"[{name}] adaptive: {len(complete)} of {len(by_key)} lattice cells complete,"
                f" {spent:.0%} of its estimated compute (budget {policy.settings.budget:.0%})\n"
            )
            print_answers(name, answers, out)
        if keys is None:
            keys, reasons, stop = policy.next_wave(answers, complete)
            wave += 1
        record = {
            "wave": wave,
            "cells": keys,
            "reasons": reasons,
            "stop": stop,
            "spent": spent,
            "budget": policy.settings.budget,
            "complete": len(complete),
            "settled": sum(a.settled for a in answers),
            "open": sum(not a.settled for a in answers),
            "policy_seed": policy.settings.seed,
        }
        repeat = (
            records and not keys and not records[-1]["cells"] and records[-1]["complete"] == len(complete)
        )
        if not resuming and not repeat:
            frame = answers_frame(answers) if answers else pd.DataFrame({"answer": []})
            tracker.log_adaptive_wave(parent, record, frame)
            records.append(record)
        resuming = False
        if not keys:
            out.write(
                f"[{name}] adaptive sweep ends: {stop}; {len(complete)} of {len(by_key)} cells run"
                f" ({spent:.0%} of the lattice's estimated compute)\n"
            )
            out.flush()
            return final(stop, [])
        todo = [by_key[k] for k in keys if k not in complete]
        cost = policy.lattice.cost([p.cell.key for p in todo]) / total
        out.write(f"[{name}] wave {wave}: {len(todo)} cells ({cost:.0%} of the compute)\n")
        for reason in reasons:
            out.write(f"  {redact(reason)}\n")
        out.flush()
        unfinished = run_wave(todo) if todo else []
        complete = complete_keys(tracker, experiment_id, policy)
        if unfinished or failed():
            return final("", unfinished)
        keys, reasons, stop = None, [], ""
