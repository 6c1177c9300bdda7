"""The checks of a trial's GPU path that need a GPU (issue 41): functions the GPU script calls
(benchmarks/gpu.py), each returning check lines as dicts (``name``, ``status`` PASS | FAIL | INFO, ``text``,
``extra``: the fields of benchmarks.gpu.Check). They train through the trial's own trainers
(papers.context_scaling.train.CellTrainer, .stacked.PackTrainer: what the training kind's ``run``
and ``run_pack`` drive), with no Ray and no MLflow.

- ``graph_equals_eager``: steps replayed from a captured CUDA graph against the same path run eagerly, bit
  for bit, for one cell and for a pack (the learning rate read on the device, a cosine schedule).
- ``resume_equals_whole``: a cell and a pack stopped, checkpointed (torch.save), resumed in new trainers
  (a new graph captured at another step): bit for bit the uninterrupted ones.
- ``bf16_within_seed_spread``: Fig. 1-size GPT-2 cells (seeds as one pack) in bf16 autocast (TF32 on) and
  in fp32 (TF32 off), trained side by side until the fp32 cells leave the loss plateau (or a budget is
  spent): the bf16 error within the fp32 cells' seed-to-seed spread.
- ``pack_splits_on_card``: in a subprocess whose CUDA allocator is capped below what a pack needs (as a
  fractional trial's is), the pack runs out of memory for real, splits, and every member ends with its
  numbers alone.

On a CPU (the default-run test, tests/test_trial_gpu_checks.py) they run at tiny sizes with nothing captured
(the same path run eagerly): they run, their lines are well-formed; their verdicts mean something on a GPU.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from papers.context_scaling.stacked import PackTrainer, release_memory
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.trial.devices import use_precision

FIG1 = {"d": 8, "N": 40, "n_layer": 8, "n_head": 8, "n_embd": 256, "batch": 64}  # sweeps/fig1.yaml's GPT-2
FIG1_A = {**FIG1, "N": 10}  # its panel A's cells (error against T at N = 10)
QUICK = {"d": 4, "N": 10, "n_layer": 2, "n_head": 2, "n_embd": 64, "batch": 64}  # its quick profile
TINY = {"d": 3, "N": 5, "n_layer": 1, "n_head": 2, "n_embd": 16, "batch": 8}
PACK_TOL = 1e-4  # a pack member's parameters against the cell alone (rounding of batched products)


def check(name: str, ok: bool | None, text: str, **extra) -> dict:
    status = "INFO" if ok is None else ("PASS" if ok else "FAIL")
    return {"name": name, "status": status, "text": text, "extra": extra}


def cell_of(size: dict, seed: int = 0, precision: str = "bfloat16", **train) -> Cell:
    """A Fig. 1-style GPT-2 cell of ``size`` (linear regression, sigma 0.22, T = inf), trained on the GPU
    (``train`` overrides its training settings: steps, lr, schedule, ...), uncompiled unless ``train`` says
    so: the checks' shapes and dtypes would each compile (~20 s at Fig. 1's size), and what they check
    (graphs, resumes, precision, splits) is not compile's; the compile phase checks compile's numbers."""
    return Cell.from_dict(
        {
            "task": {"family": "linear", "d": size["d"], "noise_std": 0.22},
            "model": {k: size[k] for k in ("n_layer", "n_head", "n_embd")} | {"arch": "gpt2"},
            "train": {
                "batch_size": size["batch"],
                "lr": 1e-4,
                "precision": precision,
                "compile": "off",
                **train,
            },
            "eval": {"prompts": 256, "baselines": ["zero"]},
            "N": size["N"],
            "T": "inf",
            "seed": seed,
        }
    )


def trainers(cells: list[Cell], device: torch.device, capture: bool | None = None) -> list[CellTrainer]:
    return [CellTrainer(c, device, graphs=True, capture=capture) for c in cells]


def train(members: list[CellTrainer], stop: int) -> list[CellTrainer]:
    """One cell alone, or a pack, trained to ``stop``, as the training kind's run and run_pack do."""
    return train_counted(members, stop)[0]


def train_counted(members: list[CellTrainer], stop: int) -> tuple[list[CellTrainer], int]:
    """train's members, and how many of their steps were replayed from a CUDA graph."""
    if len(members) == 1:
        members[0].train_until(stop)
        return members, members[0].graph.replays if members[0].graph is not None else 0
    pack = PackTrainer(members)
    while not pack.done_training and min(t.step for t in members) < stop:
        active, until = pack.next_segment()
        pack.train_until(active, min(until, stop))
    return members, pack.replayed


def differing(a: list[CellTrainer], b: list[CellTrainer]) -> list[str]:
    """The parameters and Adam moments of ``a``'s members not bitwise equal to ``b``'s."""
    out = []
    for x, y in zip(a, b):
        for (name, p), q in zip(x.model.named_parameters(), y.model.parameters()):
            if not torch.equal(p, q):
                out.append(f"{x.cell.seed}:{name}")
        for (p, s), t in zip(x.optimizer.state.items(), y.optimizer.state.values()):
            if not all(torch.equal(s[k], t[k]) for k in ("exp_avg", "exp_avg_sq", "step")):
                out.append(f"{x.cell.seed}:adam")
    return out


def graph_equals_eager(device: torch.device, size: dict = QUICK, steps: int = 16, K: int = 4) -> list[dict]:
    """A cell and a pack of K, bf16, cosine schedule: steps replayed from a CUDA graph (3 eager steps, then
    captured) against the same trainers' path with nothing captured; bit for bit."""
    use_precision(device, "bfloat16")
    lines = []
    for label, count in (("cell", 1), (f"pack of {K}", K)):
        cells = [cell_of(size, s, steps=steps, schedule="cosine", warmup=0.25) for s in range(count)]
        replayed, replays = train_counted(trainers(cells, device), steps)
        eager = train(trainers(cells, device, capture=False), steps)
        bad = differing(replayed, eager)
        lines.append(
            check(
                f"trial_graph_equals_eager[{label}]",
                not bad and replays > 0,
                f"GPT-2 {size['n_layer']}x{size['n_embd']}, bf16, cosine, {steps} steps ({replays} replayed):"
                f" graphed == eager bit for bit: {'yes' if not bad else 'no, ' + ', '.join(bad[:4])}",
                differing=bad,
                replayed=replays,
            )
        )
    return lines


def checkpointed(trainer: CellTrainer) -> dict:
    buffer = io.BytesIO()
    torch.save(trainer.state_dict(), buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def resume_equals_whole(
    device: torch.device, size: dict = QUICK, steps: int = 16, stop: int = 7, K: int = 3
) -> list[dict]:
    """A cell and a pack of K (bf16, cosine, graphs) stopped at ``stop``, saved, loaded into new trainers and
    trained on, against the same trained without a stop: bit for bit."""
    use_precision(device, "bfloat16")
    lines = []
    for label, count in (("cell", 1), (f"pack of {K}", K)):
        cells = [cell_of(size, s, steps=steps, schedule="cosine", warmup=0.25) for s in range(count)]
        whole = train(trainers(cells, device), steps)
        first = train(trainers(cells, device), stop)
        resumed = trainers(cells, device)
        for new, old in zip(resumed, first):
            new.load_state_dict(checkpointed(old))
        bad = differing(whole, train(resumed, steps))
        lines.append(
            check(
                f"trial_resume_equals_whole[{label}]",
                not bad,
                f"GPT-2 {size['n_layer']}x{size['n_embd']}, bf16, graphs, stopped at {stop} of {steps}:"
                f" resumed == uninterrupted bit for bit: {'yes' if not bad else 'no, ' + ', '.join(bad[:4])}",
                differing=bad,
            )
        )
    return lines


def mean_errors(members: list[CellTrainer]) -> list[float]:
    """Each member's model error (the normalised error, mean over n: err/zero's numerator)."""
    errors = []
    for member in members:
        curves = member.evaluate()
        errors.append(float(curves[curves["predictor"] == "model"]["err"].mean()))
    return errors


def bf16_within_seed_spread(
    device: torch.device,
    size: dict = FIG1_A,
    seeds: int = 4,
    lr: float = 1e-4,
    segment: int = 500,
    budget_s: float = 120.0,
    learned: float = 0.8,
) -> list[dict]:
    """Fig. 1-size GPT-2 cells, ``seeds`` seeds as one pack in fp32 (TF32 off) and one in bf16 autocast (TF32
    on), trained side by side ``segment`` steps at a time until the fp32 seeds' mean error is below
    ``learned`` (off the loss plateau, where a comparison says something: at 600 steps both sat at 0.97) or
    the next segment would pass ``budget_s``. Learned: PASS when the bf16 mean error is within the fp32
    seeds' spread (max - min) of theirs. Not learned: INFO, the step and the errors said."""
    cells = {
        p: [cell_of(size, s, p, steps=10**6, lr=lr, checkpoint_every=10**6) for s in range(seeds)]
        for p in ("float32", "bfloat16")
    }
    packs = {p: trainers(c, device) for p, c in cells.items()}
    seconds = {p: 0.0 for p in packs}
    start, step = time.perf_counter(), 0
    while True:
        step += segment
        for precision, members in packs.items():
            use_precision(device, precision)
            began = time.perf_counter()
            train(members, step)
            seconds[precision] += time.perf_counter() - began
        use_precision(device, "float32")
        fp32 = mean_errors(packs["float32"])
        spent = time.perf_counter() - start
        if sum(fp32) / seeds < learned or spent * (step + segment) / step > budget_s:
            break
    use_precision(device, "bfloat16")
    bf16 = mean_errors(packs["bfloat16"])
    use_precision(device, "float32")
    spread, mean = max(fp32) - min(fp32), {"fp32": sum(fp32) / seeds, "bf16": sum(bf16) / seeds}
    gap = abs(mean["bf16"] - mean["fp32"])
    paired = max(abs(a - b) for a, b in zip(fp32, bf16))
    off_plateau = mean["fp32"] < learned
    where = (
        f"learned by step {step} (fp32 mean err below {learned:g})"
        if off_plateau
        else f"still on the loss plateau at step {step} (fp32 mean err {mean['fp32']:.3f} >= {learned:g},"
        f" the {budget_s:.0f} s budget spent): the comparison says little"
    )
    return [
        check(
            "trial_bf16_within_seed_spread",
            gap <= spread if off_plateau else None,
            f"GPT-2 {size['n_layer']}x{size['n_embd']} d={size['d']} N={size['N']}, lr {lr:g}, {seeds} seeds,"
            f" {where}: mean err bf16 {mean['bf16']:.4f} vs fp32 {mean['fp32']:.4f} (gap {gap:.4f}, fp32"
            f" seed spread {spread:.4f}; largest same-seed gap {paired:.4f}); {seconds['bfloat16']:.0f} s"
            f" bf16, {seconds['float32']:.0f} s fp32",
            fp32=fp32,
            bf16=bf16,
            step=step,
            learned=off_plateau,
            seconds={"fp32": seconds["float32"], "bf16": seconds["bfloat16"]},
        )
    ]


def oom_probe(size: dict, K: int, steps: int, headroom: float) -> dict:
    """In a process of its own (it caps its CUDA allocator): the peak a pack of 2 reserves, a cap of
    ``headroom`` times it, then a pack of K under the cap (it runs out of memory and splits) and each member
    alone under the cap; what happened, as a dict."""
    device = torch.device("cuda", 0)
    # fp32, as pack_member0: in bf16 Adam's first steps magnify the packs' rounding past the bound
    use_precision(device, "float32")
    cells = [cell_of(size, s, "float32", steps=steps, checkpoint_every=max(1, steps // 2)) for s in range(K)]
    train(trainers(cells[:2], device), steps)
    peak = torch.cuda.max_memory_reserved(device)
    release_memory(device)
    total = torch.cuda.get_device_properties(device).total_memory
    torch.cuda.set_per_process_memory_fraction(min(1.0, headroom * peak / total), device)
    splits: list[str] = []
    pack = PackTrainer(trainers(cells, device), on_split=lambda indices, text: splits.append(text))
    while not pack.done_training:
        pack.train_until(*pack.next_segment())
    packed = [[p.detach().cpu() for p in m.model.parameters()] for m in pack.trainers]
    limit = pack.limit
    del pack  # the pack's trainers and engine give their memory back before the members train alone
    release_memory(device)
    diff = 0.0
    for cell, params in zip(cells, packed):  # one at a time, each let go before the next: the cap holds one
        alone = train(trainers([cell], device), steps)[0]
        diff = max(
            diff,
            *(float((p.detach().cpu() - q).abs().max()) for p, q in zip(alone.model.parameters(), params)),
        )
        del alone
        release_memory(device)
    return {"pair_peak": peak, "cap": headroom * peak, "splits": splits, "limit": limit, "diff": diff}


def pack_splits_on_card(
    device: torch.device,
    size: dict = FIG1,
    K: int = 16,
    steps: int = 6,
    headroom: float = 1.25,
    timeout_s: float = 80.0,
) -> list[dict]:
    """A pack of K that cannot fit a capped allocator runs out of memory on the card, splits and finishes
    every member with its numbers alone (PASS: at least one split, members within PACK_TOL)."""
    if device.type != "cuda":
        return [check("trial_pack_splits_on_card", None, "no CUDA device: nothing runs out of memory")]
    code = (
        "import json, sys; from benchmarks.trial_gpu_checks import oom_probe;"
        f" print(json.dumps(oom_probe({size!r}, {K}, {steps}, {headroom})))"
    )
    root = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": f"{root}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    try:  # a probe past its time is killed, so it cannot hold the card's memory into the later phases
        done = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=root, timeout=timeout_s
        )
    except subprocess.TimeoutExpired:
        return [check("trial_pack_splits_on_card", False, f"the probe ran past {timeout_s:g} s: killed")]
    if done.returncode != 0:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["(no output)"]
        return [
            check(
                "trial_pack_splits_on_card",
                False,
                f"the probe failed: {tail[0][:300]}",
                traceback=done.stderr[-4000:],  # in gpu.json: where it ran out
            )
        ]
    got = json.loads(done.stdout.strip().splitlines()[-1])
    ok = bool(got["splits"]) and got["diff"] <= PACK_TOL
    return [
        check(
            "trial_pack_splits_on_card",
            ok,
            f"a pack of {K} fp32 GPT-2 {size['n_layer']}x{size['n_embd']} under a"
            f" {got['cap'] / 2**30:.2f} GiB cap ({headroom:g}x a pair's peak): {len(got['splits'])} split(s),"
            f" down to packs of {got['limit']}; members vs alone max |param diff| {got['diff']:.2e}"
            f" (bound {PACK_TOL:g})",
            **got,
        )
    ]
