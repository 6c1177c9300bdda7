"""The CUDA-graph path of a trial's training, on the CPU: the learning rate and its schedule held on the
device (papers.context_scaling.adam.DeviceRates) give today's host-side numbers bit for bit, and
the step a graph captures (StepGraph: static inputs, the rate read at the device's step counter, eager
steps for other shapes) is the eager step, bit for bit, for cells and packs, resumed or not. On a GPU the
same path captures and replays CUDA graphs (benchmarks/trial_gpu_checks.py checks replay against eager)."""

import gc
import weakref

import pytest
import torch
from mlflow import MlflowClient

from papers.context_scaling.adam import DeviceRates, FusedAdam
from papers.context_scaling.cuda_graphs import StepGraph
from papers.context_scaling.kind import GRAPH_REPLAYS
from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer, TrainConfig, graphs_on, lr_factors
from scaling.cells import Cell
from scaling.tracking.tracker import Tracker
from scaling.trial.checkpoints import CheckpointStore
from scaling.trial.run import run_cell, run_pack
from scaling.trial.spec import TrialMember, TrialSpec
from tests.conftest import tiny_cell_dict

MODELS = {
    "mlp": {"arch": "mlp", "width": 16},
    "gpt2": {"arch": "gpt2", "n_layer": 1, "n_head": 2, "n_embd": 16},
    "sgpt": {"arch": "sgpt", "n_layer": 1, "n_embd": 16},
}
COSINE = {"schedule": "cosine", "warmup": 0.2}
CURRICULUM = {"curriculum": {"points_start": 3, "points_inc": 1, "points_every": 4}}  # N = 5: steady at 12


@pytest.fixture(autouse=True)
def one_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def cell(model: str, seed: int = 0, lr: float = 1e-3, **train) -> Cell:
    settings = {**tiny_cell_dict()["train"], "lr": lr, **train}
    return Cell.from_dict(tiny_cell_dict(model=MODELS[model], train=settings, seed=seed, T=4 + seed))


def assert_bitwise(a: CellTrainer, b: CellTrainer) -> None:
    assert a.step == b.step
    for (name, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(x, y), name
    for x, y in zip(a.optimizer.state.values(), b.optimizer.state.values()):
        assert all(torch.equal(x[k], y[k]) for k in ("exp_avg", "exp_avg_sq", "step"))


def test_graphs_follow_the_setting_and_the_device():
    cpu, cuda = torch.device("cpu"), torch.device("cuda", 0)
    assert [graphs_on(s, cpu) for s in ("auto", "on", "off")] == [False, True, False]
    assert [graphs_on(s, cuda) for s in ("auto", "on", "off")] == [True, True, False]
    assert CellTrainer(cell("mlp")).graph is None  # the CPU default: today's eager path


@pytest.mark.parametrize("schedule", [{}, COSINE])
def test_device_held_rates_are_the_host_side_rates_bit_for_bit(schedule):
    train = TrainConfig(steps=50, lr=3e-3, **schedule)
    rates = DeviceRates([3e-3, 1e-4], lr_factors(train, torch.device("cpu")), 0)
    for step in range(train.steps):
        got = [float(r) for r in rates.rates()]
        assert got == [3e-3 * train.lr_factor(step), 1e-4 * train.lr_factor(step)]
        rates.advance()
    rates.seek(17)
    assert float(rates.rates()[0]) == 3e-3 * train.lr_factor(17)


def test_a_tensor_rate_updates_as_the_float_rate_does():
    torch.manual_seed(0)
    models = [torch.nn.Linear(4, 3) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    train = TrainConfig(steps=6, lr=2e-3, **COSINE)
    rates = DeviceRates([train.lr], lr_factors(train, torch.device("cpu")), 0)
    host, device = (FusedAdam(m.parameters(), lr=train.lr) for m in models)
    for step in range(train.steps):
        x = torch.randn(8, 4)
        for model, optimizer in zip(models, (host, device)):
            optimizer.zero_grad()
            model(x).square().mean().backward()
        host.param_groups[0]["lr"] = train.lr * train.lr_factor(step)
        host.step()
        device.step(rates.rates()[0])
        rates.advance()
        assert all(torch.equal(a, b) for a, b in zip(models[0].parameters(), models[1].parameters()))


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("train", [{}, COSINE, CURRICULUM], ids=["constant", "cosine", "curriculum"])
def test_the_graph_path_trains_a_cell_to_todays_numbers_bit_for_bit(model, train):
    today = CellTrainer(cell(model, **train))
    today.train_until(today.cell.train.steps)
    graphed = CellTrainer(cell(model, **train), graphs=True)
    graphed.train_until(graphed.cell.train.steps)
    assert graphed.graph.captured  # the steady steps went through the static buffers
    assert graphed.graph.eager_steps == graphed.graph.warmup
    assert_bitwise(today, graphed)


@pytest.mark.parametrize("model", ["mlp", "gpt2"])
def test_a_resumed_graph_path_cell_equals_an_uninterrupted_one(model):
    whole = CellTrainer(cell(model, **COSINE), graphs=True)
    whole.train_until(whole.cell.train.steps)
    first = CellTrainer(cell(model, **COSINE), graphs=True)
    first.train_until(9)
    resumed = CellTrainer(cell(model, **COSINE), graphs=True)
    resumed.load_state_dict(first.state_dict())  # a new graph, captured at another step
    resumed.train_until(resumed.cell.train.steps)
    assert_bitwise(whole, resumed)


def packed(cells: list[Cell], graphs: bool, resume_at: dict[int, int] | None = None) -> list[CellTrainer]:
    trainers = [CellTrainer(c, graphs=graphs) for c in cells]
    for i, step in (resume_at or {}).items():
        alone = CellTrainer(cells[i], graphs=graphs)
        alone.train_until(step)
        trainers[i].load_state_dict(alone.state_dict())
    pack = PackTrainer(trainers)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop)
    return trainers


@pytest.mark.parametrize("model", list(MODELS))
@pytest.mark.parametrize("train", [COSINE, CURRICULUM], ids=["cosine", "curriculum"])
def test_the_graph_path_trains_a_pack_to_todays_numbers_bit_for_bit(model, train):
    cells = [cell(model, seed=s, lr=lr, **train) for s, lr in [(0, 1e-3), (1, 3e-3), (2, 1e-3)]]
    for today, graphed in zip(packed(cells, False, {1: 5}), packed(cells, True, {1: 5})):
        assert_bitwise(today, graphed)


def test_every_steady_step_runs_on_the_static_inputs_warm_up_included():
    """The warm-up steps, the captured one and the replays see one pair of tensors, whatever the strides of
    the batches handed in (a pack's are views of its batch block): torch.compile's guards (train.compile)
    then hold at the capture, where a recompile cannot run (on an H200: "operation failed due to a previous
    error during capture")."""
    block = torch.randn(4, 10, 3, 5, 2)  # (K, steps, B, P, d), sliced per step as a pack's step_inputs does
    seen = []

    class Trainer:
        def step_on(self, xs, ys):
            seen.append(((xs.data_ptr(), xs.stride(), ys.data_ptr(), ys.stride()), xs.clone(), ys.clone()))
            return xs[:, -1, -1, -1] - ys[:, -1, -1]  # exact: one element each, no reduction order

    graph = StepGraph(Trainer(), capture=False)
    for j in range(6):
        xs, ys = block[:, j], block[:, j, :, :, 0]
        assert not xs.is_contiguous() and not ys.is_contiguous()
        losses = graph.run(xs, ys)
        assert torch.equal(seen[-1][1], xs) and torch.equal(seen[-1][2], ys)  # this step's batch
        assert torch.equal(losses, xs[:, -1, -1, -1] - ys[:, -1, -1])
    assert graph.eager_steps == graph.warmup and graph.replays == 6 - graph.warmup
    contiguous = ((30, 10, 2, 1), (15, 5, 1))  # (K, B, P, d), (K, B, P)
    assert {tensors for tensors, _, _ in seen} == {
        (graph.xs.data_ptr(), contiguous[0], graph.ys.data_ptr(), contiguous[1])
    }
    graph.run(block[:, 7, :2], block[:, 7, :2, :, 0])  # another shape: eager, on its own tensors
    assert seen[-1][0][0] != graph.xs.data_ptr() and graph.replays == 6 - graph.warmup


def test_a_pack_keeps_its_engine_and_graph_across_checkpoints():
    trainers = [CellTrainer(cell("gpt2", seed=s), graphs=True) for s in range(2)]
    pack = PackTrainer(trainers)
    active, stop = pack.next_segment()
    pack.train_until(active, stop)
    engine = pack.engine_of(active)
    graph = engine.graph
    assert graph.captured and graph.eager_steps == 3  # checkpoint_every 5: 3 eager steps, 2 through it
    active, stop = pack.next_segment()
    pack.train_until(active, stop)
    assert pack.engine_of(active) is engine and engine.graph is graph and graph.eager_steps == 3


def test_a_finished_packs_engine_and_graph_are_freed_before_the_next_pack_is_stacked():
    """The graph holds its engine (a cycle): left to the collector, the private memory pools of finished
    packs' graphs stayed on the card while the next packs trained, until a capped card ran out."""
    trainers = [CellTrainer(cell("gpt2", seed=s), graphs=True) for s in range(2)]
    pack = PackTrainer(trainers, limit=1)  # two packs of one, one after the other
    gc.disable()
    try:
        active, _ = pack.next_segment()
        engine = pack.engine_of(active)
        first, graph = weakref.ref(engine), weakref.ref(engine.graph)
        del engine
        while not trainers[0].done_training:
            pack.train_until(*pack.next_segment())
        assert first() is None and graph() is None  # freed at once, not at the collector's next pass
        while not pack.done_training:
            pack.train_until(*pack.next_segment())
    finally:
        gc.enable()
    assert all(t.done_training for t in trainers)


def trial_spec(cells: list[Cell], tmp_path, name: str) -> TrialSpec:
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return TrialSpec(
        tuple(TrialMember(c.to_dict(), c.key, c.name) for c in cells),
        cells[0].key if len(cells) == 1 else "pack",
        name,
        {"cpu": 1},
        uri,
        Tracker(uri).experiment_id(name, create=True),
        name,
        str(tmp_path / name),
    )


@pytest.mark.parametrize("count", [1, 3], ids=["cell", "pack"])
def test_a_trial_with_cuda_graphs_on_ends_with_the_numbers_of_one_without(tmp_path, count):
    """Through the trial and the training kind (run_cell, run_pack): ``train.cuda_graphs: on`` takes the
    graph path (on a CPU: nothing captured) and ends each cell at the checkpoint, bit for bit, of the
    default eager trial; its runs count the replayed steps."""
    ends = {}
    for setting in ("off", "on"):
        cells = [cell("gpt2", seed=s, lr=1e-3 * (1 + s), **COSINE, cuda_graphs=setting) for s in range(count)]
        spec = trial_spec(cells, tmp_path, setting)
        assert (run_cell if count == 1 else run_pack)(spec)["finished"] == 1
        store = CheckpointStore(spec.storage)
        ends[setting] = [store.load(c.key) for c in cells]
        client = MlflowClient(spec.tracking_uri)
        for run in client.search_runs([spec.experiment_id], "tags.kind = 'cell'"):
            replays = [m.value for m in client.get_metric_history(run.info.run_id, GRAPH_REPLAYS)]
            assert replays == ([] if setting == "off" else [20 - 3])  # 3 eager steps, then the graph
    for off, on in zip(ends["off"], ends["on"]):
        assert off["step"] == on["step"] == 20
        assert all(torch.equal(off["model"][k], on["model"][k]) for k in off["model"])
