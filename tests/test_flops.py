"""A training step's FLOPs (papers.context_scaling.flops, scaling.budget.cost.step_flops: the MFU's
numerator and the cost model's) against an independent count: torch's FlopCounterMode over the real step
(CellTrainer.step_on, the pack's StackedTransformer.step_on), attention through SDPA's math kernel (whose
products the counter sees; the fused kernels count the same (T, T) products)."""

import pytest
import torch
from torch.nn.attention import SDPBackend, sdpa_kernel
from torch.utils.flop_counter import FlopCounterMode

from papers.context_scaling.models import ModelConfig, build_model
from papers.context_scaling.stacked import stack
from papers.context_scaling.train import CellTrainer, prefix_loss
from scaling.budget.cost import StepShape, step_flops
from scaling.cells import Cell
from tests.conftest import tiny_cell_dict

MODELS = {
    "gpt2": {"arch": "gpt2", "n_layer": 3, "n_head": 2, "n_embd": 16},
    "gpt2-stacked": {"arch": "gpt2", "n_layer": 2, "n_head": 4, "n_embd": 16, "layout": "stacked"},
    "sgpt": {"arch": "sgpt", "n_layer": 3, "n_embd": 16},
    "sgpt-softmax": {"arch": "sgpt", "n_layer": 1, "n_embd": 8, "attention": "softmax"},
    "mlp": {"arch": "mlp", "width": 20},
}


def counted(step, *inputs) -> int:
    with sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as counter:
        step(*inputs)
    return counter.get_total_flops()


@pytest.mark.parametrize("name", MODELS)
def test_a_steps_flops_are_what_the_model_runs(name):
    cell = Cell.from_dict(tiny_cell_dict(model=MODELS[name], N=6))
    trainer = CellTrainer(cell)
    batch = trainer.train_batch(0)
    assert counted(trainer.step_on, batch.xs, batch.ys) == step_flops(StepShape.of_cell(cell))


@pytest.mark.parametrize("name", [n for n in MODELS if n != "mlp"])
def test_a_pack_of_K_runs_K_cells_flops(name):
    cell = Cell.from_dict(tiny_cell_dict(model=MODELS[name], N=6))
    pack = stack([CellTrainer(cell), CellTrainer(Cell.from_dict({**cell.to_dict(), "seed": 1}))])
    inputs = pack.step_inputs()  # the batches' draws are the data's work, not the step's
    assert counted(pack.step_on, *inputs) == 2 * step_flops(StepShape.of_cell(cell))


def test_fig1s_gpt2_step_is_197_gflop():
    """Issue 41: the MFU line counted 208.8 GFLOP per Fig. 1 step (3 x forward over 2(N+1) tokens in every
    block); the model runs 197.0: its last block keeps the x tokens after attention, the final y token is
    dropped, the tokens' read-in takes no gradient. Counted on the real model at Fig. 1's size, built on
    the meta device (shapes only, no arithmetic)."""
    config = ModelConfig(arch="gpt2", n_layer=8, n_head=8, n_embd=256)
    with torch.device("meta"):
        model = build_model(config, 8, 41)
        xs, ys = torch.empty(64, 41, 8), torch.empty(64, 41)

    def step(xs, ys):
        prefix_loss(model(xs, ys), ys).backward()

    flops = step_flops(StepShape("gpt2", 40, 8, 256, 8, 64))
    assert counted(step, xs, ys) == flops
    assert flops / 1e9 == pytest.approx(197.0, abs=0.05)
