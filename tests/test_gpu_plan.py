"""--dry-run on a GPU: GPU-hours and packs from the measured CUDA cost table, or that none is measured."""

import io
import re
from pathlib import Path

import pytest
import yaml

from papers.context_scaling.architectures import StepShape, step_flops
from scaling.budget.cost import format_hours, load_gpu_table
from scaling.budget.gpu_plan import describe_gpu, wall_seconds
from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main
from scaling.sweep.phases import run_sweep
from scaling.sweep.run import RunOptions

ROOT = Path(__file__).resolve().parents[1]
TABLE = {
    "device": "NVIDIA H100 80GB HBM3",
    "memory_bytes": 80 * 2**30,
    "measured": "2026-12-01",
    "fit": {"gpt2": {"t0": 2e-3, "rate": 1e14, "m0": 2**30, "bytes_per_activation": 40.0}},
}


def gpu_sweep(tmp_path, tiny_sweep, gpu=0.5):
    tiny_sweep["models"] = {
        "gpt2": {"arch": "gpt2", "n_layer": 2, "n_head": 2, "n_embd": 16, "resources": {"cpu": 1, "gpu": gpu}}
    }
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [2, 4, 8, "inf"], "seed": [0]}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    return path


def test_without_a_measured_table_the_dry_run_says_none_is_measured(tmp_path, tiny_sweep):
    text = describe_gpu(load_plan(str(gpu_sweep(tmp_path, tiny_sweep))), path=tmp_path / "none.json")
    assert text.startswith("GPU: no CUDA cost table measured yet")


def test_the_dry_run_prints_gpu_hours_from_the_shipped_measured_table(tmp_path, tiny_sweep):
    """scaling/budget/cost_table_cuda.json is the GPU script's measurement on a real card
    (docs/results.md)."""
    table = load_gpu_table()
    assert table is not None and not table["smoke"] and "H200" in table["device"]
    assert table["train_precision"] == "bfloat16" and table["cuda_graphs"]  # as a GPU trial trains now
    out = io.StringIO()
    path = gpu_sweep(tmp_path, tiny_sweep)
    uri = f"sqlite:///{tmp_path}/m.db"
    options = RunOptions(dry_run=True, num_gpus=1)  # a local Ray of one GPU: the cells run there
    run_sweep(str(path), tracking_uri=uri, storage=str(tmp_path), out=out, options=options)
    text = out.getvalue()
    assert (
        "GPU-hours" in text
        and f"costed on the table's {table['device']}, measured on {table['measured']} (" in text
    )
    assert "CPU: every training cell asks for a GPU (their time: the GPU lines)" in text


def test_gpu_hours_are_the_packs_steps_under_the_measured_fit(tmp_path, tiny_sweep):
    """Four cells of one shape on a 0.5 GPU share pack as one trial of 4 (they fit): steps x (t0 + 4 x the
    step's FLOPs / rate), counted here from the model's FLOPs."""
    plan = load_plan(str(gpu_sweep(tmp_path, tiny_sweep)))
    cell = plan.cells[0].cell
    seconds = cell.train.steps * (2e-3 + 4 * step_flops(StepShape.of_cell(cell)) / 1e14)
    text = describe_gpu(plan, TABLE)
    assert f"GPU: about {seconds / 3600:.2f} GPU-hours" in text
    assert "for the 4 training cells that ask for a GPU" in text
    assert (
        "costed on the table's NVIDIA H100 80GB HBM3, measured on 2026-12-01 (float32 steps, eager)" in text
    )
    assert "GPU packs (run.pack auto): 1 trials for 4 cells; packs x cells: gpt2: 1 x 4" in text


def test_cells_that_ask_for_no_gpu_are_not_counted(tmp_path, tiny_sweep):
    text = describe_gpu(load_plan(str(gpu_sweep(tmp_path, tiny_sweep, gpu=0))), TABLE)
    assert text == "GPU: no training cell of this sweep asks for a GPU"  # the table's card is not this one


def test_the_wall_time_places_the_packs_longest_first_on_G_cards():
    assert wall_seconds([5.0, 4.0, 3.0, 3.0], 2) == 8.0  # 5 + 3 | 4 + 3
    assert wall_seconds([5.0, 4.0, 3.0, 3.0], 8) == 5.0  # the longest pack alone
    assert wall_seconds([5.0, 4.0, 3.0, 3.0], 1) == 15.0  # the GPU-hours


def test_the_wall_time_is_said_on_the_gpus_asked_for(tmp_path, tiny_sweep):
    tiny_sweep["run"] = {**tiny_sweep.get("run", {}), "pack": "off"}  # 4 trials of one cell
    plan = load_plan(str(gpu_sweep(tmp_path, tiny_sweep)))
    cell = plan.cells[0].cell
    slow = {**TABLE, "fit": {"gpt2": {**TABLE["fit"]["gpt2"], "t0": 60.0}}}  # a minute a step
    one = cell.train.steps * (60.0 + step_flops(StepShape.of_cell(cell)) / 1e14)
    text = describe_gpu(plan, slow, gpus=3, gpus_from="--gpus")
    assert format_hours(2 * one) != format_hours(one)
    assert "GPU packs (run.pack off): 4 trials for 4 cells" in text
    assert f"GPU wall time: about {format_hours(2 * one)} on 3 GPUs (--gpus; 4 trials" in text
    assert "on 1 GPU (no GPU count known here: --gpus G for G GPUs)" in describe_gpu(plan, TABLE)


@pytest.mark.parametrize("gpus, status", [("4", 0), ("0", 2)])
def test_the_gpus_flag(tmp_path, tiny_sweep, capsys, gpus, status):
    path = gpu_sweep(tmp_path, tiny_sweep)
    argv = [
        str(path),
        "--dry-run",
        "--gpus",
        gpus,
        "--num-gpus",
        "1",
        "--tracking-uri",
        f"sqlite:///{tmp_path}/m.db",
    ]
    assert main([*argv, "--storage", str(tmp_path)]) == status
    out, err = capsys.readouterr()
    if status == 0:
        assert "on 4 GPUs (--gpus;" in out
    else:
        assert "--gpus" in err and out == ""


def test_cells_in_another_precision_than_the_table_timed_are_said(tmp_path, tiny_sweep):
    plan = load_plan(str(gpu_sweep(tmp_path, tiny_sweep)))
    precisions = {p.cell.train.precision for p in plan.cells}
    timed = {**TABLE, "train_precision": "float32"}
    mismatch = describe_gpu(plan, timed).splitlines()[-1]
    assert mismatch.startswith("GPU note: the table timed float32 steps") == (precisions != {"float32"})
    same = {**TABLE, "train_precision": precisions.pop(), "cuda_graphs": True}
    assert "GPU note" not in describe_gpu(plan, same) and ", CUDA graphs)" in describe_gpu(plan, same)
    assert "not counted: evaluation\n" in describe_gpu(plan, same)
    # a table timed with the transformers compiled (train.compile auto) says so, and what its hours leave out
    compiled = describe_gpu(plan, {**same, "compile": True})
    assert ", CUDA graphs, transformers compiled)" in compiled
    assert "not counted: evaluation and each trial's compiles" in compiled


@pytest.mark.parametrize("figure", range(1, 9))
def test_every_figures_full_profile_has_gpu_hours_and_a_wall_time(figure):
    text = describe_gpu(
        load_plan(str(ROOT / "sweeps" / f"fig{figure}.yaml")), TABLE, gpus=8, gpus_from="--gpus"
    )
    assert re.search(r"^GPU: about [\d.]+ GPU-hours", text, re.M), text
    assert re.search(r"^GPU wall time: about .+ on 8 GPUs", text, re.M), text
