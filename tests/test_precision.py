"""The precision is part of a cell's key: ``train.precision: auto`` resolves at planning from the cell's
resources (bfloat16 for a trial given a GPU, float32 otherwise), a CPU cell keeps the key it had before
``auto`` existed, and fp32 and bf16 cells never share a key (scaling.cells.resolve_precision)."""

import pytest

from scaling.cells import Cell, resolve_precision
from scaling.config import ConfigError
from scaling.planning.plan import plan_document
from tests.conftest import tiny_cell_dict

# Cell().key before train.precision could be auto (tests/test_cells.py's golden value): float32 then
FLOAT32_KEY = "44136fa355b3678a"


def planned(resources: dict, model: dict | None = None, **train) -> Cell:
    document = {
        "name": "p",
        "defaults": {"train": train} if train else {},
        "models": {"m": {**(model or {"arch": "mlp", "width": 16}), "resources": resources}},
        "grid": {"model": ["m"]},
    }
    (only,) = plan_document(document).cells
    return only.cell


def test_an_unplanned_cell_is_auto_and_keyed_as_float32():
    assert Cell().train.precision == "auto"
    assert Cell().key == Cell.from_dict({"train": {"precision": "float32"}}).key == FLOAT32_KEY
    assert Cell.from_dict({"train": {"precision": "bfloat16"}}).key != FLOAT32_KEY


@pytest.mark.parametrize(
    "resources, train, expected",
    [
        ({"cpu": 1}, {}, "float32"),
        ({"cpu": 1, "gpu": 0}, {}, "float32"),
        ({"cpu": 1, "gpu": 0.25}, {}, "bfloat16"),
        ({"cpu": 2, "gpu": 1}, {}, "bfloat16"),
        ({"cpu": 1, "gpu": 0.5}, {"device": "cpu"}, "float32"),  # given a GPU, told to train on the CPU
        ({"cpu": 1, "gpu": 0.5}, {"precision": "float32"}, "float32"),  # said, not resolved
        ({"cpu": 1}, {"precision": "bfloat16"}, "bfloat16"),
    ],
)
def test_auto_resolves_from_the_resources_at_planning(resources, train, expected):
    cell = planned(resources, **train)
    assert cell.train.precision == expected
    assert cell.params()["train.precision"] == expected  # the run's params show the resolved precision
    assert cell.to_dict()["train"]["precision"] == expected  # and so does its cell.yaml


def test_a_cpu_cell_keeps_its_key_and_a_gpu_cell_names_bfloat16():
    cpu, gpu = planned({"cpu": 1}), planned({"cpu": 1, "gpu": 0.25})
    before = Cell.from_dict({**cpu.to_dict(), "train": {**cpu.to_dict()["train"], "precision": "float32"}})
    assert cpu.key == before.key  # resolved float32 is keyed as the default: old keys stand
    assert gpu.key != cpu.key
    assert gpu.key == Cell.from_dict(gpu.to_dict()).key  # the trial's cell (from its dict) keeps the key
    forced = planned({"cpu": 1, "gpu": 0.25}, precision="float32")
    assert forced.key == cpu.key and forced.key != gpu.key  # fp32 on a GPU is the fp32 cell


def test_a_kind_that_does_not_read_the_precision_keeps_float32_on_a_gpu():
    gd = Cell.from_dict(
        {"job": "gd_transformer", "task": {"d": 4}, "N": 8, "construction": {"steps": 2, "eta": 0.5}}
    )
    assert resolve_precision(gd, 1.0).train.precision == "float32"
    assert resolve_precision(gd, 1.0).key == gd.key
    train = Cell.from_dict(tiny_cell_dict(train={**tiny_cell_dict()["train"], "device": "auto"}))
    assert resolve_precision(train, 1.0).train.precision == "bfloat16"
    assert resolve_precision(train, 0.0).key == train.key


@pytest.mark.parametrize("field, value", [("precision", "fp8"), ("cuda_graphs", "sometimes")])
def test_unknown_precision_or_graph_settings_name_the_field(field, value):
    with pytest.raises(ConfigError, match=f"train.{field}: unknown value"):
        Cell.from_dict({"train": {field: value}})


def test_cuda_graphs_is_how_not_what():
    assert Cell.from_dict({"train": {"cuda_graphs": "off"}}).key == Cell().key
