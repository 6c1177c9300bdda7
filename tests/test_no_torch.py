"""Planning, costing, packing, a dry run, analysing cells and a sweep's driver never import torch (issue 45:
~1.5 s of the start of every analysis; ~2 s of every sweep's): only building, training or evaluating a
model does. Checked in a new interpreter."""

import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from scaling.trial.timeline import DRIVER_PREFIX, PREFIX

ROOT = Path(__file__).resolve().parents[1]

PLAN_AND_ANALYSE = """
import sys
import analysis.__main__, scaling.planning.plan, scaling.sweep
import scaling.budget.cpu_plan, scaling.budget.gpu_plan
from scaling.cells import settings_not_in_key
from scaling.budget.cost import training_cost
from scaling.kinds.registry import kind, kind_names
from scaling.budget.packing import pack_groups
from scaling.planning.plan import load_plan

for name in kind_names():
    kind(name)
settings_not_in_key()
for sweep in ("sweeps/fig1.yaml", "benchmarks/tiny10000.yaml"):
    cells = [p.cell for p in load_plan(sweep).cells]
    [training_cost(c) for c in cells[:50]]
    pack_groups(cells[:200], "auto", slots=2)
print(sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


def test_planning_costing_packing_and_the_analysis_command_leave_torch_unimported():
    done = subprocess.run(
        [sys.executable, "-c", PLAN_AND_ANALYSE], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]", done.stdout


def test_building_a_model_does_import_torch():
    """The check above can fail: the same interpreter imports torch once a model is built."""
    code = (
        "import sys\nfrom papers.context_scaling.architectures import ModelConfig\n"
        "assert 'torch' not in sys.modules\n"
        "from papers.context_scaling.models import build_model\n"
        "build_model(ModelConfig(arch='mlp', width=4), 2, 3)\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True", done.stderr


DRY_RUN = """
import sys
from scaling.sweep.__main__ import main

store, storage = sys.argv[1:]
code = main(["sweeps/fig1.yaml", "--dry-run", "--tracking-uri", store, "--storage", storage])
print(code, sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


def test_a_dry_run_on_a_machine_without_a_gpu_leaves_torch_unimported(tmp_path):
    """`python -m scaling.sweep FILE --dry-run` plans, costs, packs and reads the store and the
    checkpoints' headers without torch: it asks torch for this machine's GPUs only where a GPU driver's
    device file exists."""
    from scaling.sweep.dry_run import GPU_DEVICE_FILES

    if any(Path(f).exists() for f in GPU_DEVICE_FILES):
        pytest.skip("this machine has a GPU driver: the dry run asks torch for its GPUs")
    args = [f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")]
    done = subprocess.run(
        [sys.executable, "-c", DRY_RUN, *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )
    assert done.returncode == 0, done.stderr
    # exit status 2: fig1's GPU cells fit no node of this machine, said after the whole plan
    assert done.stdout.strip().splitlines()[-1] == "2 []", done.stdout[-2000:]
    assert "runs here: no" in done.stdout and "no node of this machine can run some cells" in done.stderr


def test_where_a_gpu_driver_s_device_file_exists_the_dry_run_asks_torch():
    """The check above can fail: with a device file present, finding the GPUs imports torch."""
    code = (
        "import sys\nfrom scaling.sweep import dry_run\n"
        "dry_run.GPU_DEVICE_FILES = (sys.executable,)\n"
        "assert 'torch' not in sys.modules\ndry_run.local_cuda()\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True", done.stderr


SWEEP = """
import sys
from scaling.sweep.__main__ import main

store, storage = sys.argv[1:]
tiny = ["train.steps=4", "grid.T=[16]", "grid.N=[5]", "grid.seed=[0, 1]", "grid.model=[gpt2]", "run.pack=2",
        "eval.prompts=32", "eval.bootstrap=10", "models.gpt2={n_layer: 1, n_head: 2, n_embd: 16}"]
sets = [arg for setting in tiny for arg in ("--set", setting)]
code = main(["sweeps/fig1.yaml", *sets, "--tracking-uri", store, "--storage", storage, "--num-cpus", "2"])
print(code, sorted(m for m in sys.modules if m == "torch" or m.startswith("torch.")))
"""


def test_a_sweeps_driver_never_imports_torch(tmp_path):
    """A real sweep (Ray Tune, MLflow, a trial that trains a pack of 2): torch is loaded in the trial's
    process only (scaling.trial.trainable), not in the driver's (about 2 s of every sweep's start here). The
    same sweep's runs carry where its time went (scaling.trial.timeline): the sweep run its driver's seconds
    by phase, adding up to no more than the run, each cell's run its trial's."""
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    began = time.monotonic()
    argv = [sys.executable, "-c", SWEEP, uri, str(tmp_path / "storage")]
    done = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - began
    assert done.stdout.strip().splitlines()[-1] == "0 []", done.stdout + done.stderr
    client = MlflowClient(uri)
    (experiment,) = [e.experiment_id for e in client.search_experiments() if e.name == "fig1"]
    (sweep,) = client.search_runs([experiment], "tags.kind = 'sweep'")
    metrics = sweep.data.metrics
    driver = {k[len(DRIVER_PREFIX) :]: v for k, v in metrics.items() if k.startswith(DRIVER_PREFIX)}
    assert set(driver) == {"plan", "ray", "cards", "store", "trials"}
    assert driver["ray"] > 0 and driver["trials"] > 0 and sum(driver.values()) < wall
    cells = client.search_runs([experiment], "tags.kind = 'cell'")
    assert len(cells) == 2 and all(PREFIX + "setup" in run.data.metrics for run in cells)
    assert max(run.data.metrics[PREFIX + "train"] for run in cells) < driver["trials"]
