"""Planning, costing, packing and analysing cells never import torch (issue 45: ~1.5 s of start of every
analysis): only building, training or evaluating a model does. Checked in a new interpreter."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

PLAN_AND_ANALYSE = """
import sys
import analysis.__main__, scaling.plan, scaling.sweep, scaling.cpu_plan, scaling.gpu_plan
from scaling.cells import settings_not_in_key
from scaling.cost import training_cost
from scaling.kinds.registry import KINDS, kind
from scaling.packing import pack_groups
from scaling.plan import load_plan

for name in KINDS:
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
        "import sys\nfrom scaling.papers.context_scaling.architectures import ModelConfig\n"
        "assert 'torch' not in sys.modules\n"
        "from scaling.papers.context_scaling.models import build_model\n"
        "build_model(ModelConfig(arch='mlp', width=4), 2, 3)\nprint('torch' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.stdout.strip() == "True", done.stderr
