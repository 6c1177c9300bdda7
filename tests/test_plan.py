"""The planner: expansion, precedence, profiles, overrides and errors that say where."""

import math
import textwrap
from pathlib import Path

import pytest
import yaml

from scaling.planning.plan import SweepError, apply_override, load_plan, plan_document


def write(tmp_path, text: str):
    path = tmp_path / "sweep.yaml"
    path.write_text(textwrap.dedent(text))
    return path


def test_grid_product_in_order(tiny_sweep):
    tiny_sweep["grid"] = {"model": ["mlp", "gpt2"], "T": [4, "inf"], "N": [3, 5], "seed": [0, 1]}
    plan = plan_document(tiny_sweep)
    assert len(plan.cells) == 16
    first, last = plan.cells[0].cell, plan.cells[-1].cell
    assert (first.model.label, first.T, first.N, first.seed) == ("mlp", 4, 3, 0)
    assert (last.model.label, math.isinf(last.T), last.N, last.seed) == ("gpt2", True, 5, 1)
    assert len({p.cell.key for p in plan.cells}) == 16


def test_precedence_defaults_preset_axis(tiny_sweep):
    tiny_sweep["defaults"]["model"] = {"width": 8}
    tiny_sweep["models"]["mlp"]["width"] = 24
    tiny_sweep["grid"]["model.width"] = [40]
    plan = plan_document(tiny_sweep)
    assert {p.cell.model.width for p in plan.cells} == {40}
    del tiny_sweep["grid"]["model.width"]
    assert {p.cell.model.width for p in plan_document(tiny_sweep).cells} == {24}


def test_a_presets_own_training_reaches_its_cells_and_an_axis_or_set_wins_over_it(tiny_sweep):
    tiny_sweep["models"]["mlp"]["train"] = {"steps": 40, "schedule": "cosine"}
    tiny_sweep["grid"]["model"] = ["mlp", "gpt2"]
    by_model = {p.cell.model.label: p.cell.train for p in plan_document(tiny_sweep).cells}
    assert (by_model["mlp"].steps, by_model["mlp"].schedule) == (40, "cosine")
    assert by_model["mlp"].lr == by_model["gpt2"].lr == tiny_sweep["defaults"]["train"]["lr"]
    assert (by_model["gpt2"].steps, by_model["gpt2"].schedule) == (
        tiny_sweep["defaults"]["train"]["steps"],
        "constant",
    )
    assert {p.cell.train.steps for p in plan_document(apply_override(tiny_sweep, "train.steps=7")).cells} == {
        7
    }
    tiny_sweep["grid"]["train.steps"] = [9]
    assert {p.cell.train.steps for p in plan_document(tiny_sweep).cells} == {9}


def test_a_presets_bad_training_setting_is_named(tmp_path):
    text = "name: x\nmodels:\n  m: {arch: mlp, train: {schedule: step}}\ngrid: {model: [m]}\n"
    with pytest.raises(SweepError, match="models.m.train.schedule: unknown value 'step'"):
        load_plan(write(tmp_path, text))


def test_resources_from_preset_or_default(tiny_sweep):
    tiny_sweep["models"]["gpt2"]["resources"] = {"cpu": 1, "gpu": 0.25}
    tiny_sweep["resources"] = {"cpu": 2}
    del tiny_sweep["models"]["mlp"]["resources"]
    tiny_sweep["grid"]["model"] = ["mlp", "gpt2"]
    by_model = {p.cell.model.label: p.resources for p in plan_document(tiny_sweep).cells}
    assert (by_model["mlp"].cpu, by_model["mlp"].gpu) == (2, 0)
    assert (by_model["gpt2"].cpu, by_model["gpt2"].gpu) == (1, 0.25)


def test_dotted_axis_and_duplicates_collapse(tiny_sweep):
    tiny_sweep["grid"]["task.noise_std"] = [0.0, 0.5, 0.5]
    plan = plan_document(tiny_sweep)
    assert sorted({p.cell.task.noise_std for p in plan.cells}) == [0.0, 0.5]
    assert len(plan.cells) == 4


def test_override_sets_defaults_and_replaces_an_axis(tiny_sweep):
    doc = apply_override(tiny_sweep, "train.steps=7")
    doc = apply_override(doc, "T=32")
    doc = apply_override(doc, "grid.seed=[0, 1, 2]")
    plan = plan_document(doc)
    assert {p.cell.train.steps for p in plan.cells} == {7}
    assert {p.cell.T for p in plan.cells} == {32}
    assert len(plan.cells) == 3


def test_profile_merges_and_renames_the_experiment(tmp_path, tiny_sweep):
    tiny_sweep["profiles"] = {"quick": {"defaults": {"train": {"steps": 3}}, "grid": {"T": [4]}}}
    path = write(tmp_path, yaml.safe_dump(tiny_sweep))
    plan = load_plan(path, profile="quick")
    assert plan.name == "tiny-quick"
    assert [p.cell.train.steps for p in plan.cells] == [3]
    assert plan.cells[0].cell.train.lr == 1e-3  # the rest of defaults survives the merge
    with pytest.raises(SweepError, match="unknown profile 'full'; known: quick"):
        load_plan(path, profile="full")


def test_smoke_sweep_is_the_documented_lattice():
    plan = load_plan("sweeps/smoke.yaml")
    models = {p.cell.model.label for p in plan.cells}
    assert models == {"gpt2", "mlp"} and len(plan.cells) >= 12
    assert len({p.cell.T for p in plan.cells}) >= 3 and len({p.cell.N for p in plan.cells}) >= 2


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: x\ngrid: {T: [1, 2]\n", "sweep.yaml:3: malformed YAML"),
        ("name: x\nname: y\n", "sweep.yaml:2: name: duplicate key"),
        ("grid: {T: [1]}\n", "the sweep needs a `name`"),
        ("name: x\ngird: {T: [1]}\n", "sweep.yaml:2: gird: unknown key; allowed: name,"),
        ("name: x\ngrid:\n  T: [4, 0]\n", "sweep.yaml:3: grid.T[1]: T: must be a whole number >= 1 or inf"),
        ("name: x\ngrid:\n  model: [gpt3]\n", "grid.model[0]: unknown model preset 'gpt3'"),
        (
            "name: x\ndefaults:\n  task: {family: tabular}\n",
            "sweep.yaml:3: defaults.task.family: unknown value 'tabular'; known: linear",
        ),
        (
            "name: x\ndefaults:\n  train: {stepz: 3}\n",
            "defaults.train.stepz: unknown setting; allowed: steps,",
        ),
        ("name: x\nresources: {gpu: 1.5}\n", "sweep.yaml:2: resources.gpu: a fraction must be at most 1"),
        (
            "name: x\nmodels:\n  big: {arch: gpt2, n_embd: 10, n_head: 4}\ngrid: {model: [big]}\n",
            "sweep.yaml:3: models.big.n_embd: width 10 must be divisible by n_head 4",
        ),
        ("name: x\ngrid:\n  T: []\n", "grid.T: an axis needs at least one value"),
        ("name: bad name!\n", "the sweep needs a `name`"),
    ],
)
def test_invalid_files_fail_with_file_line_and_key(tmp_path, text, message):
    with pytest.raises(SweepError) as err:
        load_plan(write(tmp_path, text))
    assert message in str(err.value)


def test_missing_file(tmp_path):
    with pytest.raises(SweepError, match="no such sweep file"):
        load_plan(tmp_path / "nope.yaml")


def test_bad_override_value():
    with pytest.raises(SweepError, match="expected key=value"):
        apply_override({"name": "x"}, "train.steps")


def test_a_set_variant_names_what_it_changed_in_each_cell_and_the_sweep_as_written_names_nothing():
    smoke = Path(__file__).resolve().parents[1] / "sweeps" / "smoke.yaml"
    plain = load_plan(smoke)
    assert plain.variant == ()
    assert [p.name for p in plain.cells] == [p.cell.name for p in plain.cells]
    overrides = ["train.steps=200", "grid.T=[16,64]", "models.gpt2.n_layer=3", "resources.cpu=2"]
    variant = load_plan(smoke, "", overrides)
    # resources change no cell: they are no part of the variant
    assert variant.variant == ("train.steps=200", "grid.T=[16,64]", "models.gpt2.n_layer=3")
    names = {p.cell.key: p.name for p in variant.cells}
    assert names[variant.cells[0].cell.key] == "gpt2 T=16 N=8 seed=0 train.steps=200 model.n_layer=3"
    last = variant.cells[-1].cell
    assert names[last.key] == f"mlp T=64 N=16 seed={last.seed} train.steps=200"  # not the GPT-2's n_layer
    assert len(set(names.values())) == len(names)
    assert not set(names.values()) & {p.name for p in plain.cells}  # never a name of the sweep as written


def test_a_variant_does_not_repeat_what_the_cell_label_shows():
    temp = Path(__file__).resolve().parents[1] / "sweeps" / "temp_fig1.yaml"
    planned = load_plan(temp, "quick", ["task.d=4"]).cells[0]
    assert planned.name == planned.cell.name and "d=4" in planned.name
