"""--dry-run's CPU time: the smoke sweep's trials costed packed, as the driver forms them, on its CPUs."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from papers.context_scaling.architectures import StepShape, step_flops
from scaling.budget.cost import format_hours, load_table, sweep_estimate
from scaling.budget.cpu_plan import at_threads, cell_weights, cpu_estimate, describe_compute, table_threads
from scaling.budget.packing import pack_groups
from scaling.planning.plan import load_plan

ROOT = Path(__file__).resolve().parents[1]
SMOKE = ROOT / "sweeps" / "smoke.yaml"


def by_hand(cell, members: int, table: dict, threads: int) -> float:
    """A trial's seconds from the table by hand: steps x (t0 + members x FLOP / rate), the rate of the
    table's threads scaled to the trial's (GPT-2's fit for an architecture with no row)."""
    fit = table["fit"].get(cell.model.arch, table["fit"]["gpt2"])
    rate = fit["rate"] * min(threads, table_threads(table)) / table_threads(table)
    return cell.train.steps * (fit["t0"] + members * step_flops(StepShape.of_cell(cell)) / rate)


def test_the_smoke_sweep_is_costed_as_packed_trials_far_below_the_unpacked_sum():
    plan, table = load_plan(SMOKE), load_table()
    estimate = cpu_estimate(plan, table, cpus=2)
    unpacked = sweep_estimate([p.cell for p in plan.cells], table)
    # the driver's packs: 18 GPT-2 cells alone (packing does not pay for them on a CPU), the MLP's 9 cells
    # per N in 2 packs (2 slots), each trial at 1 thread (resources.cpu 1) on 2 slots
    sizes = sorted(len(t) for t in estimate.trials)
    assert sizes == [1] * 18 + [4, 4, 5, 5] and estimate.slots == 2 and estimate.threads == 1
    hand = [by_hand(t[0], len(t), table, 1) for t in estimate.trials]
    assert estimate.seconds == pytest.approx(hand)
    assert sum(hand) / 2 <= estimate.wall <= sum(hand) / 2 + max(hand)  # 2 slots, none idle for long
    assert estimate.wall < 0.3 * unpacked.seconds  # 16 min against 72
    mlp_packed = sum(s for t, s in zip(estimate.trials, estimate.seconds) if t[0].model.arch == "mlp")
    mlp_alone = sum(
        by_hand(p.cell, 1, table, table_threads(table)) for p in plan.cells if p.cell.model.arch == "mlp"
    )
    assert mlp_packed < 0.3 * mlp_alone  # 14 min for the 4 packs against 56 costed one cell at a time


def test_the_dry_run_line_says_the_wall_time_how_it_was_counted_and_that_the_mlp_borrows():
    plan, table = load_plan(SMOKE, overrides=["train.steps=300"]), load_table()
    estimate = cpu_estimate(plan, table, cpus=2)
    text = describe_compute(plan, 2, "--num-cpus")
    assert (
        f"estimated CPU training time: about {format_hours(estimate.wall)} on 2 CPUs (--num-cpus)\n" in text
    )
    assert "22 trials for 36 cells that ask for no GPU, 17 cells packed into 3, 2 at a time" in text
    assert "at 1 thread" in text and "the cells one at a time unpacked: 9 min" in text
    assert "start-up and evaluation not counted" in text
    assert "mlp: no measured row in the cost table; costed with GPT-2's fit (46 ms a step fixed)" in text
    # more CPUs, more slots: the wall time falls, the trials' sum does not
    wide = cpu_estimate(plan, table, cpus=8)
    assert wide.slots == 8 and wide.wall < estimate.wall


def test_a_trial_is_costed_at_its_own_threads_never_faster_than_the_table():
    table = load_table()
    assert table_threads(table) == 2  # "cpu (2 threads)"
    one, many = at_threads(table, 1), at_threads(table, 16)
    assert one["fit"]["gpt2"]["rate"] == pytest.approx(table["fit"]["gpt2"]["rate"] / 2)
    assert many["fit"]["gpt2"]["rate"] == table["fit"]["gpt2"]["rate"]
    assert one["fit"]["gpt2"]["t0"] == table["fit"]["gpt2"]["t0"]


def test_each_cell_weighs_its_share_of_its_trials_estimate():
    """What the progress weighs the time left by: at train.steps=300 a packed MLP cell weighs its pack's
    seconds over its members, a tenth of an unpacked GPT-2 cell's, not a whole cell."""
    plan, table = load_plan(SMOKE, overrides=["train.steps=300"]), load_table()
    groups = pack_groups([p.cell for p in plan.cells], plan.run.pack, lambda c: None, 2)
    trials = [[plan.cells[i] for i in group] for group in groups]
    weights = cell_weights(trials, table, {})
    assert sum(weights.values()) == pytest.approx(sum(cpu_estimate(plan, table, 2).seconds))
    for trial in trials:
        share = by_hand(trial[0].cell, len(trial), table, 1) / len(trial)
        assert all(weights[p.cell.key] == pytest.approx(share) for p in trial)
    gpt2 = max(w for p in plan.cells if p.cell.model.arch == "gpt2" for w in [weights[p.cell.key]])
    eight = next(t for t in trials if len(t) == 8)
    assert weights[eight[0].cell.key] < 0.15 * gpt2


def test_cells_with_no_estimate_weigh_the_mean_of_the_others():
    plan, table = load_plan(SMOKE, overrides=["train.steps=300"]), load_table()
    gpu = replace(plan.cells[0], resources=replace(plan.cells[0].resources, gpu=1.0))
    gpt2, mlp = plan.cells[1], plan.cells[-1]
    weights = cell_weights([[gpu], [gpt2], [mlp]], table, {})  # {}: no CUDA table, the GPU cell unknown
    assert weights[gpt2.cell.key] > 1.1 * weights[mlp.cell.key]  # the mean is of two different weights
    assert weights[gpu.cell.key] == pytest.approx((weights[gpt2.cell.key] + weights[mlp.cell.key]) / 2)
