"""--dry-run on a GPU: GPU-hours and packs from the measured CUDA cost table, or that none is measured."""

import io

import yaml

from scaling.cost import StepShape, load_gpu_table, step_flops
from scaling.gpu_plan import describe_gpu
from scaling.plan import load_plan
from scaling.sweep.phases import run_sweep
from scaling.sweep.run import RunOptions

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
    """scaling/cost_table_cuda.json is the GPU script's measurement on a real card (docs/results.md)."""
    table = load_gpu_table()
    assert table is not None and not table["smoke"] and "H100" in table["device"]
    out = io.StringIO()
    path = gpu_sweep(tmp_path, tiny_sweep)
    uri = f"sqlite:///{tmp_path}/m.db"
    run_sweep(str(path), tracking_uri=uri, storage=str(tmp_path), out=out, options=RunOptions(dry_run=True))
    text = out.getvalue()
    assert "GPU-hours" in text and f"on one {table['device']} (measured on {table['measured']})" in text
    assert "of one cpu" in text


def test_gpu_hours_are_the_packs_steps_under_the_measured_fit(tmp_path, tiny_sweep):
    """Four cells of one shape on a 0.5 GPU share pack as one trial of 4 (they fit): steps x (t0 + 4 x the
    step's FLOPs / rate), counted here from the model's FLOPs."""
    plan = load_plan(str(gpu_sweep(tmp_path, tiny_sweep)))
    cell = plan.cells[0].cell
    seconds = cell.train.steps * (2e-3 + 4 * step_flops(StepShape.of_cell(cell)) / 1e14)
    text = describe_gpu(plan, TABLE)
    assert f"GPU: about {seconds / 3600:.2f} GPU-hours" in text
    assert "on one NVIDIA H100 80GB HBM3 (measured on 2026-12-01) for the 4 training cells" in text
    assert "GPU packs (run.pack auto): 1 trials for 4 cells; packs x cells: gpt2: 1 x 4" in text


def test_cells_that_ask_for_no_gpu_are_not_counted(tmp_path, tiny_sweep):
    text = describe_gpu(load_plan(str(gpu_sweep(tmp_path, tiny_sweep, gpu=0))), TABLE)
    assert text == "GPU (NVIDIA H100 80GB HBM3): no training cell of this sweep asks for a GPU"
