"""Packing small cells (issue 6, item 5): 8 tiny MLP cells packed vs 8 separate trials.

Both sides are the same 8 cells (T and seed differ; an MLP of width 16 on d = 2, N = 4, trained for
``STEPS`` steps, the length of the quick profiles' cells) run through ``scaling.sweep.phases.run_sweep``
on one local Ray of 2 CPUs, each as a new sweep (its own MLflow experiment in one SQLite store, its own
storage): the reference with ``run.pack: off`` (one Tune trial per cell, actors reused), ours with the
default ``run.pack: auto`` (the planner packs them into stacked ensembles, scaling.budget.packing: here one
trial of the 8, since two parts of ~1 s of training each would not pay for a second trial's process start;
auto_parts).

Every sweep also pays a start-up that does not depend on its cells or on packing: Tune's experiment, a
trial actor's process and imports, the sweep's MLflow run. It is measured in the same run as a third
side, a sweep of one 1-step cell, and the target is on the time the 8 cells add to a sweep beyond it
(what packing can change; in a sweep of a hundred cells the start-up is paid once):
speedup = (separate - start-up) / (packed - start-up). The whole sweeps' ratio is printed beside it, and
the trials' own span (first cell run's start to last one's end, from MLflow), which needs no start-up
subtracted and so moves less between runs (INFO).
The three sides alternate and the medians over repeats are compared. Target: at least 3x on this CPU.
On a GPU (``gpu_rows``, SKIP without one): K = 8 packed cells' training throughput against one cell's,
target at least 0.8 K times. ``run("tiny")``: 2 cells of a few steps each, once (the code path only:
nothing judged).
"""

from __future__ import annotations

import io
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import yaml

TARGET_SPEEDUP = 3.0
CELLS = 8
STEPS = 2000
TINY_RUN = {"cells": 2, "steps": 5}  # run("tiny"): the code path, in seconds


def tiny_cells(steps: int, cells: int = CELLS) -> dict:
    """``cells`` tiny MLP cells (T x 2 seeds) of ``steps`` steps."""
    return {
        "name": "packing",
        "defaults": {
            "task": {"family": "linear", "d": 2, "noise_std": 0.1},
            "train": {
                "steps": steps,
                "batch_size": 16,
                "lr": 1e-3,
                "checkpoint_every": 500,
                "log_every": 20,
                "device": "cpu",
            },
            "eval": {"prompts": 64, "bootstrap": 50},
            "N": 4,
        },
        "models": {"mlp": {"arch": "mlp", "width": 16, "resources": {"cpu": 1}}},
        "grid": {"model": ["mlp"], "T": [1, 2, 4, 8][: max(1, cells // 2)], "seed": [0, 1]},
    }


def sweep_seconds(document: dict, pack: str | int, name: str, tmp: str, cells: int = CELLS) -> float:
    """Wall time of run_sweep on the document as a new sweep ``name`` (on the Ray already started)."""
    from scaling.sweep.phases import run_sweep

    path = Path(tmp) / f"{name}.yaml"
    path.write_text(yaml.safe_dump({**document, "name": name, "run": {"pack": pack}}))
    start = time.perf_counter()
    outcome = run_sweep(
        str(path), tracking_uri=f"sqlite:///{tmp}/mlflow.db", storage=f"{tmp}/storage", out=io.StringIO()
    )
    elapsed = time.perf_counter() - start
    if not outcome.ok or len(outcome.completed) != cells:
        raise RuntimeError(f"the pack={pack} sweep did not complete its {cells} cells: {outcome}")
    return elapsed


def trials_span(name: str, tmp: str) -> float:
    """Seconds from the first of sweep ``name``'s cell runs starting to the last one ending (MLflow's
    times): the cells' trials alone, without the sweep's start (Ray, Tune, worker processes)."""
    from scaling.tracking import BARE
    from scaling.tracking.backends import open_store

    runs = open_store(f"sqlite:///{tmp}/mlflow.db").runs_of_sweep(name, columns=BARE)
    return (max(r.end_time for r in runs) - min(r.start_time for r in runs)) / 1000


def step_seconds(cells, device, steps: int) -> float:
    """Median seconds of one training step of ``cells`` stacked (one cell: a pack of one) on ``device``."""
    import torch

    from papers.context_scaling.stacked import StackedMembers
    from papers.context_scaling.train import CellTrainer

    stacked = StackedMembers([CellTrainer(c, device) for c in cells])
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        stacked.train_step()
        torch.cuda.synchronize(device)
        times.append(time.perf_counter() - start)
    return statistics.median(times[steps // 5 :])


def gpu_rows(size: str) -> list[dict]:
    """On a GPU: K packed cells' throughput (cell-steps/s) vs one cell's; target >= 0.8 K times."""
    import torch

    from scaling.cells import Cell

    name = f"packing_gpu[{CELLS} MLP cells (width 256, N 40, batch 64) vs one, training steps]"
    if not torch.cuda.is_available():
        return [
            {
                "name": name,
                "reference": None,
                "ours": None,
                "reference_rate": None,
                "ours_rate": None,
                "unit": "cell-steps/s",
                "ratio": None,
                "target": f">= {0.8 * CELLS:g}x",
                "status": "SKIP",
            }
        ]
    cells = [
        Cell.from_dict(
            {
                "task": {"d": 20},
                "model": {"arch": "mlp", "width": 256},
                "train": {"batch_size": 64, "lr": 1e-4},
                "N": 40,
                "T": 2 ** (i + 4),
                "seed": i,
            }
        )
        for i in range(CELLS)
    ]
    device, steps = torch.device("cuda"), {"full": 200, "quick": 50, "tiny": 5}[size]
    one = step_seconds(cells[:1], device, steps)
    packed = step_seconds(cells, device, steps)
    ratio = CELLS * one / packed
    return [
        {
            "name": name,
            "reference": round(1 / one, 1),
            "ours": round(CELLS / packed, 1),
            "reference_rate": round(1 / one, 1),
            "ours_rate": round(CELLS / packed, 1),
            "unit": "cell-steps/s",
            "ratio": round(ratio, 2),
            "target": f">= {0.8 * CELLS:g}x",
            "status": "PASS" if ratio >= 0.8 * CELLS else "FAIL",
        }
    ]


def trial_work_seconds(document: dict, packed: bool, tmp: str, name: str) -> float:
    """The trials' own work in this process, no Ray: 8 x scaling.trial.run.run_cell, or one run_pack of the 8.

    Everything a trial does (training, evaluation, checkpoints, MLflow runs) without Tune's scheduling
    and worker processes: what packing saves inside the trials.
    """
    import torch

    from scaling.planning.plan import plan_document
    from scaling.tracking.backends import open_store
    from scaling.trial.run import run_cell, run_pack
    from scaling.trial.spec import TrialMember, TrialSpec

    torch.set_num_threads(1)
    uri = f"sqlite:///{tmp}/mlflow.db"
    tracker = open_store(uri)
    shared = {
        "tracking_uri": uri,
        "experiment_id": tracker.experiment_id(name, create=True),
        "sweep": name,
        "storage": f"{tmp}/{name}",
        "resources": {"cpu": 1},
    }
    members = [TrialMember(p.cell.to_dict(), p.cell.key, p.cell.name) for p in plan_document(document).cells]
    start = time.perf_counter()
    if packed:
        run_pack(TrialSpec(tuple(members), "pack", "pack", **shared))
    else:
        for member in members:
            run_cell(TrialSpec((member,), member.key, member.name, **shared))
    return time.perf_counter() - start


def work_rows(size: str) -> list[dict]:
    """Row: the 8 cells' trial work packed vs one after another, in one process on one core."""
    cells, steps = (TINY_RUN["cells"], TINY_RUN["steps"]) if size == "tiny" else (CELLS, STEPS)
    document = tiny_cells(steps, cells)
    separate, packed = [], []
    with tempfile.TemporaryDirectory() as tmp:
        trial_work_seconds(tiny_cells(min(20, steps), cells), False, tmp, "warm")  # imports, MLflow, ...
        for i in range(2 if size == "full" else 1):  # an INFO row: two repeats keep the suite in its budget
            separate.append(trial_work_seconds(document, False, tmp, f"separate-{i}"))
            packed.append(trial_work_seconds(document, True, tmp, f"packed-{i}"))
    reference, ours = statistics.median(separate), statistics.median(packed)
    return [
        {
            "name": f"packing_trial_work[{cells} tiny MLP cells, one process, one core, no Ray]",
            "reference": round(reference, 2),
            "ours": round(ours, 2),
            "reference_rate": round(cells / reference, 3),
            "ours_rate": round(cells / ours, 3),
            "unit": "s",
            "ratio": round(reference / ours, 2),
            "target": "INFO (what packing saves inside trials)",
            "status": "INFO",
        }
    ]


def transformer_rows(size: str, members: int = CELLS) -> list[dict]:
    """Rows: ``members`` GPT-2 and SGPT cells of sweeps/fig1.yaml's quick size trained as one pack
    against the same cells one after another, a training step each, on one core (a trial's ``cpu: 1``):
    the measurement behind ModelFacts.cpu_packing_pays (INFO)."""
    import torch

    from papers.context_scaling.stacked import stack
    from papers.context_scaling.train import CellTrainer

    from .common import interleaved_medians
    from .gpu_common import QUICK, TINY
    from .trial_path import cell_of

    shape, members = (TINY, min(members, TINY_RUN["cells"])) if size == "tiny" else (QUICK, members)
    label = "tiny-size" if size == "tiny" else "quick-size"
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    rows = []
    try:
        for arch in ("gpt2", "sgpt"):
            cells = [cell_of(shape, "float32", torch.device("cpu"), arch, seed=k) for k in range(members)]
            alone = [CellTrainer(c) for c in cells]
            packed = stack([CellTrainer(c) for c in cells])

            def one_after_another(trainers=alone):
                for trainer in trainers:
                    trainer.next_loss()

            medians = interleaved_medians(
                {"alone": one_after_another, "packed": packed.train_step},
                {"full": 10, "quick": 3, "tiny": 1}[size],
                warmup=1,
            )
            ratio = medians["alone"] / medians["packed"]
            rows.append(
                {
                    "name": f"packing_{arch}_cpu[{members} {label} {arch} cells, one step each, one core]",
                    "reference": round(medians["alone"], 4),
                    "ours": round(medians["packed"], 4),
                    "reference_rate": round(members / medians["alone"], 2),
                    "ours_rate": round(members / medians["packed"], 2),
                    "unit": "s",
                    "ratio": round(ratio, 2),
                    "target": "INFO (auto packs a model on a CPU only where this pays)",
                    "status": "INFO",
                }
            )
    finally:
        torch.set_num_threads(threads)
    return rows


def run(size: str = "full") -> list[dict]:
    """Rows: packed vs separate trials on this CPU (ratio = speedup), the trials' own work packed vs
    separate, transformer cells packed on this CPU, and the GPU throughput (SKIP without one), at ``size``
    (full, quick, tiny)."""
    return cpu_rows(size) + work_rows(size) + transformer_rows(size) + gpu_rows(size)


def cpu_rows(size: str) -> list[dict]:
    import ray

    os.environ.setdefault("RAY_AUTH_MODE", "disabled")
    quick = size != "full"
    cells, steps = (TINY_RUN["cells"], TINY_RUN["steps"]) if size == "tiny" else (CELLS, STEPS)
    document = tiny_cells(steps, cells)
    startup_document = {**tiny_cells(1), "grid": {"model": ["mlp"], "T": [1], "seed": [0]}}
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        with tempfile.TemporaryDirectory() as tmp:  # one MLflow store; each sweep its own experiment
            if size != "tiny":  # imports, MLflow schema, Tune: warmed before the timed sides
                sweep_seconds(tiny_cells(100), "off", "warm", tmp)
            separate, packed, startup, spans = [], [], [], {"separate": [], "packed": []}
            for i in range({"full": 3, "quick": 2, "tiny": 1}[size]):
                startup.append(sweep_seconds(startup_document, "off", f"startup-{i}", tmp, cells=1))
                separate.append(sweep_seconds(document, "off", f"separate-{i}", tmp, cells))
                packed.append(sweep_seconds(document, "auto", f"packed-{i}", tmp, cells))
                for side in spans:
                    spans[side].append(trials_span(f"{side}-{i}", tmp))
    finally:
        if started:
            ray.shutdown()
    reference, ours, fixed = (statistics.median(x) for x in (separate, packed, startup))
    span_separate, span_packed = (statistics.median(spans[side]) for side in ("separate", "packed"))
    added = {"reference": reference - fixed, "ours": ours - fixed}  # at tiny size: about 0, either sign
    rates = {side: cells / s if s else float("nan") for side, s in added.items()}
    speedup = added["reference"] / added["ours"] if added["ours"] else float("nan")
    count = cells
    cells = f"{count} tiny MLP cells, {steps} steps"
    return [
        {
            "name": f"packing[{cells}: time added to a sweep, packed vs separate trials]",
            "reference": round(added["reference"], 2),
            "ours": round(added["ours"], 2),
            "reference_rate": round(rates["reference"], 3),
            "ours_rate": round(rates["ours"], 3),
            "unit": "s",
            "ratio": round(speedup, 2),
            "target": f"speedup >= {TARGET_SPEEDUP:g}x" + (" (judged in the full run)" if quick else ""),
            "status": "INFO" if quick else "PASS" if speedup >= TARGET_SPEEDUP else "FAIL",
            "startup_s": round(fixed, 2),
            "startup_runs_s": [round(s, 2) for s in startup],
            "separate_runs_s": [round(s, 2) for s in separate],
            "packed_runs_s": [round(s, 2) for s in packed],
        },
        {
            "name": f"packing_whole_sweep[{cells}, packed vs separate, start-up {fixed:.1f} s included]",
            "reference": round(reference, 2),
            "ours": round(ours, 2),
            "reference_rate": round(count / reference, 3),
            "ours_rate": round(count / ours, 3),
            "unit": "s",
            "ratio": round(reference / ours, 2),
            "target": "INFO (the start-up is paid once per sweep)",
            "status": "INFO",
        },
        {
            "name": f"packing_trials_span[{cells}: first cell run's start to last one's end,"
            " packed vs separate]",
            "reference": round(span_separate, 2),
            "ours": round(span_packed, 2),
            "reference_rate": round(count / span_separate, 3),
            "ours_rate": round(count / span_packed, 3),
            "unit": "s",
            "ratio": round(span_separate / span_packed, 2),
            "target": "INFO (the trials alone, from MLflow's run times; no start-up to subtract)",
            "status": "INFO",
            "separate_spans_s": [round(x, 2) for x in spans["separate"]],
            "packed_spans_s": [round(x, 2) for x in spans["packed"]],
        },
    ]


if __name__ == "__main__":
    for result in run("quick" if "--quick" in sys.argv else "full"):
        print(result)
