"""The GPU checks of the trial's path (benchmarks/trial_gpu_checks.py, called by the GPU script) run on a
CPU at tiny sizes: nothing is captured there, so their verdicts are those of the same path run eagerly; the
GPU run gives them their meaning. Each line has the GPU script's Check fields."""

import pytest
import torch

from benchmarks.trial_gpu_checks import (
    TINY,
    bf16_within_seed_spread,
    cell_of,
    differing,
    graph_equals_eager,
    pack_splits_on_card,
    resume_equals_whole,
    train,
    trainers,
)

CPU = torch.device("cpu")


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_each_check_runs_on_a_cpu_and_passes_there():
    lines = [
        *graph_equals_eager(CPU, TINY, steps=8, K=2),
        *resume_equals_whole(CPU, TINY, steps=8, stop=3, K=2),
        *bf16_within_seed_spread(CPU, TINY, seeds=2, segment=6, learned=10.0),  # "learned" at once
        *pack_splits_on_card(CPU),
    ]
    assert [line["name"] for line in lines] == [
        "trial_graph_equals_eager[cell]",
        "trial_graph_equals_eager[pack of 2]",
        "trial_resume_equals_whole[cell]",
        "trial_resume_equals_whole[pack of 2]",
        "trial_bf16_within_seed_spread",
        "trial_pack_splits_on_card",
    ]
    assert [line["status"] for line in lines] == ["PASS"] * 5 + ["INFO"]
    assert all(set(line) == {"name", "status", "text", "extra"} for line in lines)
    assert lines[0]["extra"]["replayed"] == 8 - 3  # the steps after 3 eager ones go through the graph path
    assert len(lines[4]["extra"]["fp32"]) == len(lines[4]["extra"]["bf16"]) == 2
    assert lines[4]["extra"]["step"] == 6 and "learned by step 6" in lines[4]["text"]


def test_the_bf16_check_says_so_when_the_cells_never_left_their_plateau():
    """Both packs train segment by segment until the budget would be passed; not learned, no verdict."""
    (line,) = bf16_within_seed_spread(CPU, TINY, seeds=2, segment=4, budget_s=5.0, learned=0.0)
    assert line["status"] == "INFO" and not line["extra"]["learned"]
    assert line["extra"]["step"] >= 8 and line["extra"]["step"] % 4 == 0  # more than one segment, whole ones
    assert f"still on the loss plateau at step {line['extra']['step']}" in line["text"]
    assert line["extra"]["seconds"]["fp32"] + line["extra"]["seconds"]["bf16"] < 5.0 + 3.0


def test_the_bitwise_comparison_sees_one_step_of_difference():
    cells = [cell_of(TINY, 0, steps=8)]
    a, b = train(trainers(cells, CPU), 4), train(trainers(cells, CPU), 5)
    assert differing(a, a) == [] and differing(a, b)
