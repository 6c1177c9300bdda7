"""The GPU script's sweep phase (benchmarks/gpu.py, ``--phases sweep``): the product itself on the GPU, the
sweep CLI through Ray Tune and MLflow with the embedded store, against its bare packs.

Two sweeps, each ``python -m scaling.sweep`` in a process of its own (the local Ray, an SQLite MLflow store
and checkpoints in a scratch folder): ``sweeps/smoke.yaml`` with its models given a quarter of the GPU each
(its 36 cells in four GPU packs of 9, all four trials at once), and a slice of ``sweeps/fig1.yaml``'s full
profile (its 6 GPT-2 cells at N = 40, the paper's size, ``SLICE_STEPS`` steps, one trial holding the GPU).
Then their bare packs: the same cells grouped as the driver groups them (scaling.budget.gpu_plan.gpu_packs),
trained one pack after another with the kind's loop (PackTrainer, as
papers.context_scaling.kind.train_stacked) and evaluated, in a process of its own without Ray, MLflow or
checkpoints (``python -m benchmarks.gpu_sweep bare ...``). Each sweep's line: its wall time against its bare
packs' (the target: at most 1.3x for the Fig. 1 slice, whose one trial the bare pack is exactly) and the GPU's
utilisation sampled every 0.2 s while it ran (NVML).

Run it in a process without CUDA state of its own (the GPU run's second command, docs/gpu.md): the other
phases' CUDA context would hold memory the trials need. ``--smoke`` runs both sweeps at tiny sizes on the
CPU: the path, not the figures (tests/test_gpu_script.py).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

from .gpu_common import Check, Run

ROOT = Path(__file__).resolve().parents[1]
SLICE_STEPS = 3000  # the Fig. 1 slice's steps: ~50 s of a pack of 6 on an H100 (bf16, graphs)
TARGET = 1.3  # the slice's sweep against its bare pack
SWEEPS = {
    "smoke": [
        "sweeps/smoke.yaml",
        "--set",
        "models.gpt2.resources={cpu: 2, gpu: 0.25}",
        "--set",
        "models.mlp.resources={cpu: 1, gpu: 0.25}",
    ],
    "fig1_slice": [
        "sweeps/fig1.yaml",
        "--set",
        "grid.model=[gpt2]",
        "--set",
        "grid.N=[40]",
        "--set",
        "models.gpt2.resources={cpu: 4, gpu: 1}",
        "--set",
        f"train.steps={SLICE_STEPS}",
        "--set",
        f"train.checkpoint_every={SLICE_STEPS // 2}",
    ],
}
TINY = [  # on a CPU (--smoke): the same sweeps, tiny
    "--set", "train.steps=20", "--set", "train.checkpoint_every=10", "--set", "grid.T=[16, inf]",
    "--set", "grid.seed=[0]", "--set", "eval.prompts=64", "--set", "eval.bootstrap=20",
]  # fmt: skip
SMOKE_SWEEPS = {
    "smoke": ["sweeps/smoke.yaml", *TINY, "--set", "grid.N=[8]", "--set", "models.mlp.train={steps: 20}"],
    "fig1_slice": [
        "sweeps/fig1.yaml", *TINY, "--set", "grid.model=[gpt2]", "--set", "grid.N=[5]",
        "--set", "models.gpt2={n_layer: 1, n_head: 2, n_embd: 16, resources: {cpu: 1}}",
        "--set", "run.pack=2",
    ],
}  # fmt: skip
# seconds on a GPU; the smoke sweep's bare packs last, with what is left (their line is reported, not judged)
# (each trial and each bare run compiles its transformers: train.compile auto, ~20 s at Fig. 1's size)
LIMITS = {"smoke": 80, "fig1_slice": 120, "bare fig1_slice": 100, "bare smoke": 30}


class Sampler:
    """The GPU's utilisation (% of the time a kernel ran) and memory in use, every ``every`` seconds, in a
    thread (NVML: nvidia-ml-py, in the device image), with the time of each sample."""

    def __init__(self, every: float = 0.2):
        import pynvml

        pynvml.nvmlInit()
        self.nvml, self.handle = pynvml, pynvml.nvmlDeviceGetHandleByIndex(0)
        self.samples: list[tuple[float, int, int]] = []  # (time.time(), utilisation %, memory bytes)
        self.every, self.stop = every, threading.Event()
        self.thread = threading.Thread(target=self.loop, daemon=True)
        self.thread.start()

    def loop(self) -> None:
        while not self.stop.wait(self.every):
            rates = self.nvml.nvmlDeviceGetUtilizationRates(self.handle)
            memory = self.nvml.nvmlDeviceGetMemoryInfo(self.handle)
            self.samples.append((time.time(), int(rates.gpu), int(memory.used)))

    def close(self, path: Path) -> None:
        self.stop.set()
        self.thread.join(timeout=2)
        path.write_text("time,utilization_gpu_percent,memory_used_bytes\n" + "".join(
            f"{t:.2f},{u},{m}\n" for t, u, m in self.samples
        ))  # fmt: skip

    def during(self, start: float, end: float) -> str:
        """What the samples between ``start`` and ``end`` (time.time()) say."""
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return "no utilisation samples"
        busy = [u for u, _ in inside]
        high = sum(u >= 50 for u in busy) / len(busy)
        return (
            f"GPU utilisation mean {sum(busy) / len(busy):.0f}%, >= 50% in {high:.0%} of {len(busy)} samples;"
            f" memory in use up to {max(m for _, m in inside) / 2**30:.1f} GiB"
        )


def sampler(run: Run) -> Sampler | None:
    if not run.cuda:
        return None
    try:
        return Sampler()
    except Exception as error:  # noqa: BLE001 - the sweeps run without it; the line says why
        run.say(f"sweep: no GPU utilisation samples ({type(error).__name__}: {error})")
        return None


def run_process(argv: list[str], limit: float, log) -> tuple[int | None, str, float, float]:
    """Run ``argv`` (in a session of its own) for at most ``limit`` seconds: exit status (None: stopped at its
    limit, Ctrl-C first so that the sweep shuts its Ray down, then killed), its output, start and end."""
    env = {
        **os.environ,
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}",
    }
    start = time.time()
    child = subprocess.Popen(
        argv,
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )
    try:
        output, _ = child.communicate(timeout=max(limit, 1.0))
        status = child.returncode
    except subprocess.TimeoutExpired:
        output, status = stop(child), None
    except BaseException:  # the phase's own limit, a Ctrl-C: no sweep left running
        stop(child)
        raise
    end = time.time()
    log.write(f"$ {' '.join(argv)}\n{output}\n# status {status}, {end - start:.1f} s\n\n")
    log.flush()
    return status, output, start, end


def stop(child: subprocess.Popen) -> str:
    """Stop a process run in a session of its own: Ctrl-C (a sweep then shuts its Ray down), then after 15 s
    its whole session killed; what it printed."""
    os.killpg(child.pid, signal.SIGINT)
    try:
        return child.communicate(timeout=15)[0]
    except subprocess.TimeoutExpired:
        os.killpg(child.pid, signal.SIGKILL)
        return child.communicate()[0]


def store_of(work: Path, name: str) -> str:
    """The tracking URI of the sweep ``name`` in the phase's scratch folder."""
    return f"sqlite:///{work / name}.db"


def sweep_args(run: Run, name: str, work: Path) -> list[str]:
    args = (SMOKE_SWEEPS if run.smoke else SWEEPS)[name]
    stores = ["--tracking-uri", store_of(work, name), "--storage", str(work / name)]
    return [*args, *stores, *(["--num-gpus", "1"] if run.cuda else ["--num-cpus", "2"])]


def sweep_phase(run: Run, seconds: float) -> None:
    """The sweeps, then their bare packs (the Fig. 1 slice's first: its line has the target), each process
    under its limit; on a smoke run the GPU run's argument lists are planned (--dry-run) and the slice runs
    tiny on the CPU."""
    work = Path(tempfile.mkdtemp(prefix="gpu-sweep-"))
    names = ("fig1_slice",) if run.smoke else ("smoke", "fig1_slice")
    samples = sampler(run)
    walls: dict[str, tuple] = {}
    with open(run.out / "sweeps.log", "a") as log:
        if run.smoke:
            planned_as_on_gpu(run, work, log)
        for name in names:
            argv = [sys.executable, "-m", "scaling.sweep", *sweep_args(run, name, work)]
            walls[name] = run_process(argv, limit_of(run, name), log)
        for name in reversed(names):
            argv = [sys.executable, "-m", "benchmarks.gpu_sweep", "bare", *sweeps_of(run)[name]]
            status, output, _, _ = run_process(argv, limit_of(run, f"bare {name}"), log)
            bare = json.loads(output.strip().splitlines()[-1]) if status == 0 else None
            experiment = Path(sweeps_of(run)[name][0]).stem  # the sweep's name is its file's (fig1, smoke)
            store = store_of(work, name)
            phases, driver = trial_seconds(store, experiment), driver_seconds(store, experiment)
            run.add(sweep_line(run, name, walls[name], bare, samples, phases, driver))
            if name == "fig1_slice" and bare is not None and phases:
                run.add(projected_line(run, walls[name], bare, phases))
    if samples is not None:
        samples.close(run.out / "smi.csv")


def sweeps_of(run: Run) -> dict[str, list[str]]:
    return SMOKE_SWEEPS if run.smoke else SWEEPS


def limit_of(run: Run, step: str) -> float:
    """A step's seconds: its LIMITS share on a GPU, within what is left; on a smoke run, a slow CPU's."""
    return 300.0 if run.smoke else min(LIMITS[step], run.left() - 5)


def planned_as_on_gpu(run: Run, work: Path, log) -> None:
    """The GPU run's sweeps planned with --dry-run here: their files and every --set are valid."""
    for name, args in SWEEPS.items():
        stores = [
            "--tracking-uri",
            f"sqlite:///{work / name}-plan.db",
            "--storage",
            str(work / f"{name}-plan"),
        ]
        argv = [sys.executable, "-m", "scaling.sweep", *args, *stores, "--dry-run"]
        status, output, start, end = run_process(argv, 120, log)
        cells = re.search(r"^sweep \S+: (\d+) cells", output, re.M)
        ok = status == 0 and cells is not None
        text = f"planned: {cells.group(1)} cells" if ok else f"exit status {status}: see sweeps.log"
        run.add(
            Check(f"sweep_plan[{name}]", "PASS" if ok else "FAIL", f"the GPU run's sweep, --dry-run: {text}")
        )


def summary(output: str) -> str:
    """The sweep's own summary line ('N cells trained, 0 failed; N/N cells complete; took ...')."""
    found = [line for line in output.splitlines() if "cells complete" in line]
    return found[-1].split("] ", 1)[-1] if found else "(no summary: see sweeps.log)"


def logged_seconds(uri: str, experiment: str, tags: dict, prefix: str) -> dict[str, float]:
    """The mean over the experiment's runs with ``tags`` of each metric ``prefix`` + phase
    (scaling.trial.timeline: the trials' ``trial/seconds/``, the driver's ``sweep/seconds/``); {} where none
    were logged (or the store cannot be read)."""
    from scaling.tracking.tracker import Tracker

    try:
        tracker = Tracker.existing(uri)
        found_id = tracker.experiment_id(experiment)
        runs = tracker.find_runs(found_id, tags=tags) if found_id is not None else []
    except Exception:  # noqa: BLE001 - the line says the phases were not read
        return {}
    found = [{k[len(prefix) :]: v for k, v in r.metrics.items() if k.startswith(prefix)} for r in runs]
    found = [f for f in found if f]
    return {k: sum(f.get(k, 0.0) for f in found) / len(found) for k in found[0]} if found else {}


def trial_seconds(uri: str, experiment: str) -> dict[str, float]:
    """Where the sweep's trials' time went: the mean over its complete cell runs of each phase."""
    from scaling.trial.timeline import PREFIX

    return logged_seconds(uri, experiment, {"kind": "cell", "status": "complete"}, PREFIX)


def driver_seconds(uri: str, experiment: str) -> dict[str, float]:
    """Where the sweep's driver's time went, from its parent run: plan, ray, cards, store, trials."""
    from scaling.trial.timeline import DRIVER_PREFIX

    return logged_seconds(uri, experiment, {"kind": "sweep"}, DRIVER_PREFIX)


def setting(args: list[str], key: str) -> str:
    """The value a sweep's argument list gives ``key`` (its last ``--set key=value``)."""
    return [a.split("=", 1)[1] for a in args if a.startswith(key + "=")][-1]


def in_trials(phases: dict[str, float], driver: dict[str, float] | None = None) -> str:
    """'in its trials (...): setup 15 s, train 44 s, ...; its driver: ...' from trial_seconds and
    driver_seconds."""
    text = "in its trials (each cell run's trial/seconds, mean): " + ", ".join(
        f"{name} {value:.1f} s" for name, value in phases.items()
    )
    text = text if phases else "the trials' seconds by phase not read"
    if driver:
        text += "; its driver (the sweep run's sweep/seconds): " + ", ".join(
            f"{name} {value:.1f} s" for name, value in driver.items()
        )
    return text


def projected_line(run: Run, wall: tuple, bare: dict, phases: dict[str, float]) -> Check:
    """The Fig. 1 slice's sweep against its bare pack at the full profile's steps and checkpoints (its
    cells' own), from the slice: the sweep's time outside its steps and checkpoints taken as fixed, its
    steps and checkpoints at the slice's rates, the bare pack's steps at theirs and its evaluation fixed.
    Reported, not judged: the slice's own line is the measurement."""
    from scaling.planning.plan import load_plan

    full = next(iter(load_plan(str(ROOT / "sweeps/fig1.yaml"), "", ()).cells)).cell.train
    steps, every = (
        int(setting(sweeps_of(run)["fig1_slice"], k)) for k in ("train.steps", "train.checkpoint_every")
    )
    seconds = wall[3] - wall[2]
    train, saves = phases.get("train", 0.0), phases.get("checkpoint", 0.0)
    per_save = saves / max(1, steps // every)
    scale = full.steps / steps
    sweep = seconds - train - saves + train * scale + per_save * (full.steps // full.checkpoint_every)
    alone = bare["train"] * scale + bare["evaluate"]
    return Check(
        "sweep_projected[fig1]",
        "INFO",
        f"{sweep / alone:.2f}x at the full profile's {full.steps} steps (a checkpoint every"
        f" {full.checkpoint_every}), projected from the slice: the sweep {sweep / 3600:.2f} h (its"
        f" {seconds - train - saves:.0f} s outside the steps and checkpoints fixed, steps at"
        f" {train / steps * 1e3:.2f} ms, {per_save:.1f} s a checkpoint) against its bare pack"
        f" {alone / 3600:.2f} h (steps at {bare['train'] / steps * 1e3:.2f} ms)",
        {"ratio": sweep / alone, "sweep_s": sweep, "bare_s": alone},
    )


def sweep_line(
    run: Run,
    name: str,
    wall: tuple,
    bare: dict | None,
    samples: Sampler | None,
    phases: dict | None = None,
    driver: dict | None = None,
) -> Check:
    status, output, start, end = wall
    seconds = end - start
    where = samples.during(start, end) if samples is not None else "utilisation not sampled (no GPU)"
    where += "; " + in_trials(phases or {}, driver)
    if status != 0:
        what = "stopped at its time limit" if status is None else f"exit status {status}"
        return Check(f"sweep[{name}]", "FAIL", f"{what} after {seconds:.0f} s: {summary(output)}; {where}")
    found = re.search(r" as (\d+ trials?)", output)
    trials = found.group(1) if found else "trials: see sweeps.log"
    if bare is None:
        return Check(
            f"sweep[{name}]",
            "INFO",
            f"{seconds:.0f} s, {summary(output)} ({trials}); bare packs not timed; {where}",
        )
    ratio = seconds / bare["seconds"]
    judged = name == "fig1_slice" and not run.smoke
    status_text = ("PASS" if ratio <= TARGET else "FAIL") if judged else "INFO"
    text = (
        f"{ratio:.2f}x"
        + (f" (target <= {TARGET:g}x)" if judged else "")
        + f": the whole sweep {seconds:.0f} s"
        f" (CLI start to exit: {summary(output)}; {trials}) | its bare packs {bare['seconds']:.0f} s"
        f" ({bare['packs']} packs one after another: train {bare['train']:.0f} s, evaluate"
        f" {bare['evaluate']:.0f} s, {bare['precision']}{', graphs' if bare['graphs'] else ''}); during the"
        f" sweep: {where}"
    )
    return Check(
        f"sweep[{name}]", status_text, text, {"sweep_seconds": seconds, "bare": bare, "ratio": ratio}
    )


def this_card(table: dict):
    """The cards the driver plans this machine's packs for (scaling.budget.cards): its GPU's memory as the
    driver reads it on a live node (NVML), else the table's card."""
    from scaling.budget.cards import Card, run_cards
    from scaling.sweep.card_probe import node_card_memory

    measured = node_card_memory()
    return run_cards(None, [Card(*measured, "read here")] if measured else [], table)


def bare(argv: list[str]) -> dict:
    """The sweep's cells (file and --set of ``argv``) as the driver packs them on this device, trained one
    pack after another with the kind's loop and evaluated, no Ray, MLflow or checkpoints: the seconds."""
    import torch

    from papers.context_scaling.train import CellTrainer
    from scaling.budget.cost import load_gpu_table
    from scaling.budget.gpu_plan import gpu_packs
    from scaling.budget.packing import pack_groups
    from scaling.planning.plan import load_plan
    from scaling.trial.devices import use_precision

    path, overrides = argv[0], tuple(a for a in argv[1:] if a != "--set")
    plan = load_plan(str(ROOT / path), "", overrides)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    table = load_gpu_table() if device.type == "cuda" else None
    planned = list(plan.cells)
    torch.set_num_threads(max(1, int(planned[0].resources.cpu)))  # as Ray gives a trial its CPUs' threads
    if table is not None and all(p.resources.gpu > 0 for p in planned):
        groups = gpu_packs(plan, planned, table, this_card(table))
    else:
        groups = pack_groups([p.cell for p in planned], plan.run.pack, lambda c: None, 1)
    start, train_s, eval_s = time.perf_counter(), 0.0, 0.0
    for group in groups:
        cells = [planned[i].cell for i in group]
        use_precision(device, cells[0].train.precision)
        trainers = [CellTrainer(cell, device) for cell in cells]
        began = time.perf_counter()
        train_as_trial(trainers)
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        train_s += time.perf_counter() - began
        began = time.perf_counter()
        for trainer in trainers:
            trainer.evaluate()
        eval_s += time.perf_counter() - began
    return {
        "seconds": time.perf_counter() - start,
        "train": train_s,
        "evaluate": eval_s,
        "packs": len(groups),
        "cells": len(planned),
        "precision": planned[0].cell.train.precision,
        "graphs": bool(trainers[0].graphs) and device.type == "cuda",
    }


def train_as_trial(trainers) -> None:
    """Train a trial's cells to their last steps as the training kind does: one cell with its own loop
    (``run``), a pack with PackTrainer's segments (``train_stacked``); losses read at each ``log_every``."""
    from papers.context_scaling.stacked import PackTrainer

    if len(trainers) == 1:
        trainers[0].train_until(trainers[0].cell.train.steps, lambda step, loss: None)
        return
    pack = PackTrainer(trainers)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop, lambda i, step, loss: None)


if __name__ == "__main__":
    if sys.argv[1:2] != ["bare"]:
        sys.exit("usage: python -m benchmarks.gpu_sweep bare SWEEP_FILE [--set KEY=VALUE ...]")
    print(json.dumps(bare(sys.argv[2:])), flush=True)
