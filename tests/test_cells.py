"""The Cell, its key and typed configuration."""

import math

import pytest

from scaling.cells import Cell
from scaling.config import ConfigError, format_T


def test_key_is_stable_golden_value():
    # A change to this value means every existing sweep would rerun: only change it on purpose.
    assert Cell().key == "44136fa355b3678a"


def test_key_ignores_how_not_what():
    base = Cell.from_dict({"T": 16})
    assert (
        Cell.from_dict(
            {
                "T": 16,
                "train": {"device": "cuda", "checkpoint_every": 7, "log_every": 3},
                "eval": {"batch_size": 3},
            }
        ).key
        == base.key
    )


@pytest.mark.parametrize(
    "change",
    [
        {"T": 17},
        {"N": 41},
        {"seed": 1},
        {"task": {"d": 9}},
        {"model": {"n_layer": 4}},
        {"train": {"steps": 5}},
        {"eval": {"prompts": 100}},
    ],
)
def test_key_changes_with_every_result_defining_setting(change):
    assert Cell.from_dict(change).key != Cell().key


def test_explicit_default_gives_same_key():
    assert Cell.from_dict({"task": {"d": 8}, "T": "inf"}).key == Cell().key


def test_infinite_T_and_name():
    cell = Cell.from_dict({"T": "inf", "N": 10, "model": {"arch": "mlp", "name": "mlp-wide"}})
    assert math.isinf(cell.T)
    assert cell.name == "mlp-wide T=inf N=10 seed=0"
    assert cell.params()["T"] == "inf"


def test_T_param_is_written_as_typed_so_ui_filters_find_it():
    for typed, param in ((16, "16"), (16.0, "16"), ("1e6", "1000000"), (65536, "65536")):
        assert Cell.from_dict({"T": typed}).params()["T"] == param


@pytest.mark.parametrize(
    "T, name, label",
    [
        (16, "16", "16"),
        (1000, "1000", "1e3"),
        (65536, "65536", "65536"),
        (1e6, "1000000", "1e6"),
        (math.inf, "inf", "inf"),
    ],
)
def test_T_is_written_whole_in_run_names_and_as_a_power_of_ten_on_figures(T, name, label):
    assert Cell.from_dict({"T": T}).name == f"gpt2 T={name} N=40 seed=0"
    assert format_T(T) == name
    assert format_T(T, short=True) == label


def test_round_trip_through_dict():
    cell = Cell.from_dict({"T": 64, "eval": {"n": [1, 5]}, "model": {"arch": "mlp"}})
    assert Cell.from_dict(cell.to_dict()) == cell


@pytest.mark.parametrize(
    "data, where",
    [
        ({"task": {"dim": 3}}, "task.dim"),
        ({"task": {"d": 0}}, "task.d"),
        ({"T": 0}, "T"),
        ({"T": 2.5}, "T"),
        ({"N": "ten"}, "N"),
        ({"model": {"arch": "lstm"}}, "model.arch"),
        ({"train": {"precision": "fp8"}}, "train.precision"),
        ({"model": {"n_embd": 10, "n_head": 3}}, "model.n_embd"),
    ],
)
def test_invalid_settings_name_the_field(data, where):
    with pytest.raises(ConfigError) as err:
        Cell.from_dict(data)
    assert str(err.value).startswith(where)
