"""papers.context_scaling.adam.FusedAdam against torch.optim.Adam(fused=True): the same updates,
interchangeable states."""

import io
import subprocess
import sys
import textwrap

import pytest
import torch

from papers.context_scaling.adam import FusedAdam


def model_pair(seed: int = 0):
    torch.manual_seed(seed)
    a = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 1))
    b = torch.nn.Sequential(torch.nn.Linear(5, 7), torch.nn.ReLU(), torch.nn.Linear(7, 1))
    b.load_state_dict(a.state_dict())
    return a, b


def step(model, optimizer, seed: int, skip_last: bool = False) -> None:
    gen = torch.Generator().manual_seed(seed)
    x, y = torch.randn(16, 5, generator=gen), torch.randn(16, 1, generator=gen)
    optimizer.zero_grad(set_to_none=True)
    (model(x) - y).square().mean().backward()
    if skip_last:  # a parameter without a gradient this step is left alone
        model[2].bias.grad = None
    optimizer.step()


def checkpointed(state: dict) -> dict:
    """``state`` through torch.save and torch.load, as a checkpoint carries it (torch.optim's
    load_state_dict keeps the tensors it is given)."""
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)


def assert_same(a, b):
    for (name, x), (_, y) in zip(a.named_parameters(), b.named_parameters()):
        assert torch.equal(x, y), name


def test_updates_are_bitwise_torchs_fused_adam():
    ours_model, torch_model = model_pair()
    ours = FusedAdam(ours_model.parameters(), lr=3e-3)
    ref = torch.optim.Adam(torch_model.parameters(), lr=3e-3, fused=True)
    for s in range(6):
        step(ours_model, ours, s, skip_last=s == 2)
        step(torch_model, ref, s, skip_last=s == 2)
        assert_same(ours_model, torch_model)
    ours_state, ref_state = ours.state_dict(), ref.state_dict()
    assert ours_state["param_groups"] == ref_state["param_groups"]
    assert ours_state["state"].keys() == ref_state["state"].keys()
    for index, slots in ref_state["state"].items():
        assert slots.keys() == ours_state["state"][index].keys()
        for key, value in slots.items():
            got = ours_state["state"][index][key]
            assert torch.equal(got, value) and got.dtype == value.dtype and got.device == value.device, (
                index,
                key,
            )


@pytest.mark.parametrize("fused", [True, False])
def test_states_move_between_torch_adam_and_ours(fused):
    """Checkpoints written with torch.optim.Adam (fused or not) resume in FusedAdam and the other way."""
    ours_model, torch_model = model_pair(1)
    ref = torch.optim.Adam(torch_model.parameters(), lr=1e-3, fused=fused)
    for s in range(3):
        step(torch_model, ref, s)
    ours_model.load_state_dict(torch_model.state_dict())
    ours = FusedAdam(ours_model.parameters(), lr=0.5)  # the saved lr wins
    saved = checkpointed(ref.state_dict())
    ours.load_state_dict(saved)
    assert ours.param_groups[0]["lr"] == 1e-3
    assert all(
        ours.state[p]["exp_avg"].data_ptr() != saved["state"][i]["exp_avg"].data_ptr()
        for i, p in enumerate(ours_model.parameters())
    )  # copied, never shared
    back_model, _ = model_pair(2)
    back_model.load_state_dict(torch_model.state_dict())
    back = torch.optim.Adam(back_model.parameters(), lr=1e-3, fused=True)
    back.load_state_dict(checkpointed(ours.state_dict()))
    for s in range(3, 6):
        step(torch_model, ref, s)
        step(ours_model, ours, s)
        step(back_model, back, s)
    torch.testing.assert_close(
        dict(ours_model.named_parameters()), dict(torch_model.named_parameters()), rtol=1e-6, atol=1e-7
    )  # fused=False: another kernel, the same arithmetic
    assert_same(back_model, ours_model)


def test_a_state_for_other_parameters_is_refused():
    model, _ = model_pair()
    with pytest.raises(ValueError, match="does not fit"):
        FusedAdam(list(model.parameters())[:2], lr=1e-3).load_state_dict(
            torch.optim.Adam(model.parameters(), lr=1e-3).state_dict()
        )


def test_training_a_cell_never_imports_torch_dynamo():
    """torch.optim's first use imports torch._dynamo and sympy (~1 s of CPU in every trial process)."""
    code = textwrap.dedent("""
        import sys
        from scaling.cells import Cell
        from papers.context_scaling.train import CellTrainer
        from conftest import tiny_cell_dict
        trainer = CellTrainer(Cell.from_dict(tiny_cell_dict()), "cpu")
        trainer.train_until(3)
        trainer.load_state_dict(trainer.state_dict())
        trainer.evaluate()
        print(sorted(m for m in ("torch._dynamo", "sympy") if m in sys.modules))
    """)
    done = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=str(__import__("pathlib").Path(__file__).parent),
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().splitlines()[-1] == "[]"
