"""Seed 001 App. A's MLP protocol (train.lengths): "we always trained a single MLP for all context lengths by
zero-padding to the largest context length", trained and tested on the figure's lengths. One MLP per (T,
seed) is trained on prompts of each length, its vectorised input zero-padded to the largest (the cell's N),
and tested within the model at each length; the claims read that within-model curve, the per-N MLPs (one
network per N, compared at n = N) stay as a second, labelled view. Unit checks of the cell, the padding, the
loss and the pack, then a tiny real sweep through Ray, the trial path and MLflow, read back by analysis."""

import math
from pathlib import Path

import pytest
import torch
import yaml

from analysis import figures
from analysis.claims import evaluate
from analysis.pipeline import analyse
from analysis.plugin import Request
from papers.context_scaling.analysis.claims import CLAIMS, PADDED, PER_N
from papers.context_scaling.stacked import PackTrainer
from papers.context_scaling.train import CellTrainer
from scaling.cells import Cell
from scaling.config import ConfigError
from scaling.planning.plan import SweepError, load_plan
from scaling.sweep.phases import run_sweep
from tests.conftest import tiny_cell_dict

LENGTHS = [3, 6]


def padded(**overrides) -> Cell:
    train = {**tiny_cell_dict()["train"], "lengths": LENGTHS}
    return Cell.from_dict(tiny_cell_dict(train=train, **overrides))


def test_a_padded_cell_has_the_largest_length_as_its_N_and_its_key_leaves_old_cells_alone():
    cell = padded(N=4)
    assert cell.N == 6 and cell.train.lengths == (3, 6)
    plain = Cell.from_dict(tiny_cell_dict())
    assert "lengths" not in str(plain.to_dict()["train"].get("lengths", "")) or not plain.train.lengths
    assert plain.key == Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "lengths": []})).key


@pytest.mark.parametrize(
    "change, message",
    [
        ({"model": {"arch": "onelayer", "width": 8, "feature_map": "linear"}}, "only mlp, gpt2 and sgpt"),
        ({"train": {**tiny_cell_dict()["train"], "lengths": [6, 3]}}, "increasing"),
        ({"train": {**tiny_cell_dict()["train"], "lengths": [0, 3]}}, ">= 1"),
        (
            {"train": {**tiny_cell_dict()["train"], "lengths": [3, 6], "curriculum": {"points_start": 3}}},
            "curriculum",
        ),
    ],
)
def test_lengths_the_protocol_cannot_train_are_refused_naming_the_setting(change, message):
    data = tiny_cell_dict(**change)
    data["train"].setdefault("lengths", LENGTHS)
    with pytest.raises(ConfigError, match=message) as err:
        Cell.from_dict(data)
    assert "lengths" in str(err.value)


def test_the_grid_gives_one_padded_mlp_per_T_and_seed_beside_one_mlp_per_N(tmp_path):
    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep(seeds=[0, 1])))
    cells = [p.cell for p in load_plan(path).cells]
    per_n = sorted((c.N, c.seed) for c in cells if c.model.label == "mlp")
    assert per_n == [(3, 0), (3, 1), (6, 0), (6, 1)]
    assert sorted((c.N, c.seed) for c in cells if c.model.label == "mlp_padded") == [(6, 0), (6, 1)]


def test_each_length_is_its_prompt_zero_padded_to_the_largest():
    trainer = CellTrainer(padded())
    d, points = 3, 7
    batch = trainer.train_batch(0)
    features = trainer.model.features(batch.xs, batch.ys)  # (B, P, points * (d + 1))
    assert features.shape[-1] == points * (d + 1)
    for n in LENGTHS:
        row = features[:, n]
        x_part, y_part = row[:, : points * d], row[:, points * d :]
        torch.testing.assert_close(x_part[:, : (n + 1) * d], batch.xs[:, : n + 1].flatten(1))
        assert (x_part[:, (n + 1) * d :] == 0).all() and (y_part[:, n:] == 0).all()
        torch.testing.assert_close(y_part[:, :n], batch.ys[:, :n])


def test_the_loss_and_its_gradient_are_taken_at_the_lengths_alone():
    trainer, twin = CellTrainer(padded()), CellTrainer(padded())
    batch = trainer.train_batch(0)
    pred = twin.model(batch.xs, batch.ys)
    expected = (pred[:, LENGTHS] - batch.ys[:, LENGTHS]).pow(2).mean()
    expected.backward()
    torch.testing.assert_close(trainer.step_on(batch.xs, batch.ys), expected.detach())
    for a, b in zip(trainer.model.parameters(), twin.model.parameters()):
        torch.testing.assert_close(a.grad, b.grad)
    everywhere = (pred[:, 1:] - batch.ys[:, 1:]).pow(2).mean()  # the prefix loss: another number
    assert not torch.isclose(everywhere, expected)


def test_padded_cells_packed_train_to_the_numbers_they_reach_alone():
    cells = [padded(seed=s, T=t) for s, t in ((0, 8), (1, math.inf))]
    alone = [CellTrainer(c) for c in cells]
    for t in alone:
        t.train_until(t.cell.train.steps)
    packed = [CellTrainer(c) for c in cells]
    pack = PackTrainer(packed)
    while not pack.done_training:
        active, stop = pack.next_segment()
        pack.train_until(active, stop)
    for a, p in zip(alone, packed):
        for (name, x), (_, y) in zip(a.model.named_parameters(), p.model.named_parameters()):
            torch.testing.assert_close(y, x, rtol=1e-4, atol=1e-5, msg=name)


def tiny_sweep(seeds=(0, 1, 2)) -> dict:
    return {
        "name": "fig1",
        "defaults": {
            "task": {"family": "linear", "d": 3, "noise_std": 0.1},
            "train": {"steps": 30, "batch_size": 16, "lr": 3e-3, "checkpoint_every": 15, "log_every": 5},
            "eval": {"prompts": 64, "bootstrap": 20, "baselines": ["zero", "least_squares"]},
        },
        "models": {
            "mlp": {"arch": "mlp", "width": 16},
            "mlp_padded": {"arch": "mlp", "width": 16, "train": {"lengths": LENGTHS}},
        },
        "grid": {"model": ["mlp", "mlp_padded"], "T": ["inf"], "N": LENGTHS, "seed": list(seeds)},
        "resources": {"cpu": 1},
    }


@pytest.mark.e2e
@pytest.mark.usefixtures("local_ray")
def test_a_tiny_padded_sweep_is_tested_at_each_length_and_the_claim_reads_that_one_model(tmp_path):
    path = tmp_path / "fig1.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep()))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    assert run_sweep(str(path), "", (), tracking_uri=uri, storage=str(tmp_path / "runs")).ok
    result = analyse(
        Request(sweep=str(path), tracking_uri=uri, out=tmp_path / "out", bootstrap=20, log=False)
    )
    table = result.table
    own = table[(table["model"] == "mlp_padded") & (table["predictor"] == "model")]
    assert own.groupby("seed")["cell_key"].nunique().tolist() == [1, 1, 1]  # one MLP per seed
    assert set(own["N"]) == {6} and sorted(set(own["n"])) == LENGTHS  # tested at each length
    v = result.verdicts
    row = v[(v["question"] == "context") & (v["model"] == "mlp_padded") & (v["predictor"] == "model")].iloc[0]
    assert (row["x_min"], row["x_max"], row["n_seeds"]) == (3, 6, 3)
    zero = table[(table["model"] == "mlp_padded") & (table["predictor"] == "zero")]
    ratio = own.set_index(["seed", "n"])["err"] / zero.set_index(["seed", "n"])["err"]
    start = math.exp(ratio.xs(3, level="n").map(math.log).mean())
    assert row["start"] == pytest.approx(start)  # the within-model curve, from the N = 6 cells alone
    claims = evaluate({"fig1": result}, claims=[c for c in CLAIMS if c.figure == "fig1"]).set_index("claim")
    mine = claims.loc[f"MLP (vectorised input) does not context-scale [{PADDED}]"]
    other = claims.loc[f"MLP (vectorised input) does not context-scale [{PER_N}]"]
    said = (
        f"{row['low']:.2f}-{row['high']:.2f}" if row["verdict"] == "at chance" else f"{row['start']:.2f} ->"
    )
    assert mine.status != "not run" and row["verdict"] in mine.evidence and said in mine.evidence, (
        mine.evidence
    )
    assert other.status != "not run"  # the per-N view: the N = 3 and N = 6 networks at n = N
    panel_b = [ax for ax in figures.draw(table, "fig1").figures["fig1"].axes if "(B)" in ax.get_title()]
    labels = {ax.get_xlabel() for ax in panel_b}
    # the padded MLP is drawn at each length it was tested at, not at n = N of separate networks: said
    own_line = "mlp_padded: one network for every N \u2264 6"
    assert labels == {f"context length N (train = test = N)\n{own_line}"}, labels
    per_N = figures.draw(table[table["model"] == "mlp"], "fig1").figures["fig1"].axes
    assert {ax.get_xlabel() for ax in per_N if "(B)" in ax.get_title()} == {
        "context length N (train = test = N)"
    }


def test_a_bad_lengths_setting_in_a_sweep_file_names_its_line(tmp_path):
    document = tiny_sweep()
    document["models"]["mlp_padded"]["train"]["lengths"] = [6, 3]
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(document))
    with pytest.raises(SweepError, match=r"bad.yaml:\d+: models.mlp_padded.train.lengths"):
        load_plan(Path(path))


def test_figures_draw_a_padded_mlp_at_each_length_and_the_per_n_mlps_at_n_equal_N():
    import pandas as pd

    from analysis.plots import trained_and_tested

    rows = pd.DataFrame(
        [
            dict(model="mlp", N=N, n=n, base=b, err=1.0)
            for N in LENGTHS
            for n in (1, N)
            for b in ("model", "zero")
        ]
        + [dict(model="mlp_padded", N=6, n=n, base=b, err=1.0) for n in LENGTHS for b in ("model", "zero")]
    )
    drawn = trained_and_tested(rows)
    got = set(zip(drawn["model"], drawn["base"], drawn["N"], drawn["n"]))
    assert got == {
        *(("mlp", b, N, N) for N in LENGTHS for b in ("model", "zero")),
        ("mlp_padded", "model", 3, 3),  # its own curve: N read as the n it was tested at
        ("mlp_padded", "model", 6, 6),
        ("mlp_padded", "zero", 6, 6),  # its cell's baselines stay at n = N
    }


@pytest.mark.parametrize("packed", [False, True])
def test_the_graph_path_trains_a_padded_mlp_to_the_eager_numbers(packed):
    """train.cuda_graphs' path (run eagerly on the CPU: the same code a GPU captures) with the lengths' index
    held on the device, alone and in a pack."""
    cells = [padded(seed=s) for s in (0, 1)]
    runs = []
    for graphs in (False, True):
        trainers = [CellTrainer(c, graphs=graphs) for c in cells]
        if packed:
            pack = PackTrainer(trainers)
            while not pack.done_training:
                active, stop = pack.next_segment()
                pack.train_until(active, stop)
        else:
            for t in trainers:
                t.train_until(t.cell.train.steps)
        runs.append(trainers)
    for eager, graphed in zip(*runs):
        for x, y in zip(eager.model.parameters(), graphed.model.parameters()):
            assert torch.equal(x, y)


def test_a_transformer_trained_at_given_lengths_takes_its_loss_there_and_trains_alone():
    """App. A's GPT-2 trained at 1, 11, ..., 91 (sweeps/fig4_lengths.yaml): the loss at those lengths alone,
    and no pack (the stacked transformers take the prefix loss)."""
    model = {"arch": "gpt2", "layout": "stacked", "n_layer": 1, "n_head": 1, "n_embd": 8}
    cell = padded(model=model)
    assert cell.N == 6 and not cell.kind.packable(cell)
    assert Cell.from_dict(tiny_cell_dict(model=model)).kind.packable(
        Cell.from_dict(tiny_cell_dict(model=model))
    )
    trainer, twin = CellTrainer(cell), CellTrainer(cell)
    batch = trainer.train_batch(0)
    pred = twin.model(batch.xs, batch.ys)
    expected = (pred[:, LENGTHS] - batch.ys[:, LENGTHS]).pow(2).mean()
    torch.testing.assert_close(trainer.step_on(batch.xs, batch.ys), expected.detach())
