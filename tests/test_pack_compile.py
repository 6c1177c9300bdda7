"""``train.compile: on``: the training step compiled by torch.compile (inductor, here its CPU kernels): a
stacked transformer pack's forward and loss, an MLP pack's written-out step, a cell's model trained alone;
each ends with the numbers it reaches uncompiled, a dropped engine goes at once, the setting is not part
of a cell's key, and the GPU script's compile phase runs on the CPU (tiny). The transformers' compiles
(the stacked pack, the GPT-2 alone, the GPU script's phase: ~55 s) are in the slow suite."""

import gc
import json
import weakref

import pytest
import torch
from torch._dynamo.utils import counters

from benchmarks import gpu
from papers.context_scaling import cuda_graphs
from papers.context_scaling.cuda_graphs import CompiledStep, compiles
from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.config import ConfigError
from tests.conftest import tiny_cell_dict
from tests.test_pack_transformers import GPT2_STACKED, SGPT, assert_same_numbers, train_alone, train_packed


@pytest.fixture(autouse=True, scope="module")
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def members(compile: str) -> list[Cell]:
    """Three GPT-2 cells of Fig. 2's stacked layout (its boolean mask inside the compiled forward), their
    steps through the CUDA-graph path's logic (``cuda_graphs: on``: static buffers, eager on a CPU)."""
    train = {**tiny_cell_dict()["train"], "compile": compile, "cuda_graphs": "on"}
    return [
        Cell.from_dict(tiny_cell_dict(model=GPT2_STACKED, T=t, seed=s, train={**train, "lr": lr}))
        for t, s, lr in ((4, 0, 1e-3), (float("inf"), 1, 1e-3), (8, 2, 3e-3))
    ]


@pytest.mark.slow  # ~30 s of inductor compiles; train.compile is off by default (the MLP pack's below)
def test_compiled_pack_members_end_with_their_numbers_alone():
    graphs = counters["stats"]["unique_graphs"]
    packed = train_packed([CellTrainer(c) for c in members("on")])
    # the pack's steps went through torch.compile, compiled once: warm-up and capture saw the same strides
    assert counters["stats"]["unique_graphs"] == graphs + 1
    alone = train_alone(members("off"))
    for a, p in zip(alone, packed):
        assert_same_numbers(a, p)


def test_compile_is_how_not_what():
    on, off = members("on"), members("off")
    assert [c.key for c in on] == [c.key for c in off]
    assert on[0].train.compile == "on"
    # YAML 1.1 reads an unquoted on/off as true/false: the switch is still understood
    spelled = Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "compile": True}))
    assert spelled.train.compile == "on"
    graphs = Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "cuda_graphs": False}))
    assert graphs.train.cuda_graphs == "off"
    with pytest.raises(ConfigError, match="compile: unknown value 'sometimes'; known: auto, on, off"):
        Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "compile": "sometimes"}))
    with pytest.raises(ConfigError, match=r"unknown value 'on' \(YAML reads an unquoted on/off"):
        Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "schedule": True}))


@pytest.mark.slow  # the GPU run's phase on the CPU (another compile, ~11 s); the paths it runs are above
def test_gpu_script_compile_phase_on_the_cpu(tmp_path):
    assert gpu.main(str(tmp_path), smoke=True, phases=["compile"]) == 0
    results = json.loads((tmp_path / "gpu.json").read_text())["results"]
    (line,) = [x for x in results if x["name"].startswith("pack")]
    assert line["name"] == "pack_compile[tiny K=2]" and line["status"] == "INFO"
    extra = line["extra"]
    assert extra["param_diff"] < 1e-5  # the same members' steps, compiled or not, on the same data
    assert extra["first_steps_s"]["on"] > extra["first_steps_s"]["off"]  # the compile is in the first steps
    assert set(extra["seconds_per_step"]) == {"off", "on"}


def test_a_dropped_compiled_engine_is_freed_at_once():
    """torch.compile of the engine's bound method holds the engine (a cycle, as its CUDA graph's): a finished
    pack's engine must go at once, not at the collector's next pass (its memory is the next pack's). MLP
    engines here (PackTrainer.drop_engine lets any engine go the same way; they compile in seconds)."""
    train = {**tiny_cell_dict()["train"], "compile": "on"}
    trainers = [CellTrainer(Cell.from_dict(tiny_cell_dict(seed=s, train=train))) for s in range(2)]
    pack = PackTrainer(trainers, limit=1)  # two packs of one, one after the other
    gc.disable()
    try:
        active, _ = pack.next_segment()
        engine = weakref.ref(pack.engine_of(active))
        while not trainers[0].done_training:
            pack.train_until(*pack.next_segment())
        assert engine() is None
    finally:
        gc.enable()


def test_auto_compiles_the_own_transformers_on_cuda_only(monkeypatch):
    """``train.compile: auto`` (the default): on for a GPT-2 or SGPT step on CUDA where triton finds a C
    compiler; off for an MLP's, on the CPU, and where no C compiler is found (its first step would fail)."""
    cuda, cpu = torch.device("cuda"), torch.device("cpu")
    assert compiles("auto", cuda, auto=True) == (cuda_graphs.c_compiler() is not None)
    assert not compiles("auto", cuda, auto=False) and not compiles("auto", cpu, auto=True)
    assert compiles("on", cpu, auto=False) and not compiles("off", cuda, auto=True)
    monkeypatch.delenv("CC", raising=False)
    monkeypatch.setenv("PATH", "")
    assert cuda_graphs.c_compiler() is None and not compiles("auto", cuda, auto=True)
    monkeypatch.setenv("CC", "clang")
    assert compiles("auto", cuda, auto=True)
    # the default on the CPU: nothing compiled, alone or packed
    cells = members("auto")
    assert cells[0].train.compile == "auto" and CellTrainer(cells[0]).compiled is None
    trainers = [CellTrainer(c) for c in cells]
    assert PackTrainer(trainers).engine_of(trainers).compiled is None


def test_a_trials_engines_of_one_shape_share_one_compile():
    """Engines of one shape (a trial's packs one after another) run the same code: compiled once, not once
    per engine (MLP engines here; the transformers' step is compiled the same way)."""
    train = {**tiny_cell_dict()["train"], "compile": "on"}
    mlp = {"arch": "mlp", "width": 24}  # a shape no other test compiles (dynamo's cache is the process's)
    trainers = [
        CellTrainer(Cell.from_dict(tiny_cell_dict(model=mlp, seed=s, T=4 + s, train=train))) for s in range(4)
    ]
    pack = PackTrainer(trainers, limit=2)  # two packs of two, one after the other
    graphs, engines = counters["stats"]["unique_graphs"], []  # the engines held: no id reused
    while not pack.done_training:
        active, stop = pack.next_segment()
        engine = pack.engine_of(active)
        if not any(engine is e for e in engines):
            engines.append(engine)
        pack.train_until(active, stop)
    assert len(engines) == 2 and counters["stats"]["unique_graphs"] == graphs + 1


def test_past_the_recompile_limit_a_compiled_step_stops_instead_of_running_eager(monkeypatch):
    """Dynamo's own answer to too many shapes is to run the rest uncompiled, silently: a trial would train
    slower than its cost table says. CompiledStep raises, before the step runs, and says what to do."""
    monkeypatch.setattr(cuda_graphs, "RECOMPILE_LIMIT", 1)

    def scaled(x: torch.Tensor) -> torch.Tensor:
        return torch.nn.functional.gelu(2 * x + 1)

    step = CompiledStep(scaled)
    torch.testing.assert_close(step(torch.ones(2)), scaled(torch.ones(2)))
    with pytest.raises(RuntimeError, match=r"scaled was compiled for 1 input shapes.*train.compile: off"):
        step(torch.ones(3))


# gpt2-alone, sgpt-pack: ~11 s and ~30 s of compiles, slow as the stacked GPT-2 pack's above
@pytest.mark.parametrize(
    "model",
    ["mlp-pack", *(pytest.param(m, marks=pytest.mark.slow) for m in ("gpt2-alone", "sgpt-pack"))],
)
def test_compile_of_a_cell_alone_an_mlp_pack_and_an_sgpt_pack(model):
    """``train.compile: on`` is not silently nothing elsewhere: a cell trained alone compiles its model, an
    MLP pack its written-out step, an SGPT pack (compiled by auto on CUDA, as GPT-2's) its stacked forward;
    the numbers are those of the uncompiled cells alone."""
    arch, count = {
        "mlp-pack": ({"arch": "mlp", "width": 16}, 2),
        "gpt2-alone": (GPT2_STACKED, 1),
        "sgpt-pack": (SGPT, 2),
    }[model]

    def cells(setting: str) -> list[Cell]:
        train = {**tiny_cell_dict()["train"], "compile": setting}
        return [
            Cell.from_dict(tiny_cell_dict(model=arch, seed=s, T=4 + s, train=train)) for s in range(count)
        ]

    graphs = counters["stats"]["unique_graphs"]
    compiled = train_packed([CellTrainer(c) for c in cells("on")]) if count > 1 else train_alone(cells("on"))
    assert counters["stats"]["unique_graphs"] > graphs
    for a, p in zip(train_alone(cells("off")), compiled):
        assert_same_numbers(a, p)
