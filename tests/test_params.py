"""A cell's MLflow params are the settings that apply to its kind, model and task (scaling.cells.Cell.params);
every setting of every settings dataclass is declared applicable somewhere, so none can vanish from params
unnoticed. The key and cell.yaml (Cell.to_dict) keep every setting."""

import dataclasses
import typing
from pathlib import Path

import pandas as pd
import pytest

from papers.context_scaling.architectures import ModelConfig
from papers.context_scaling.configs import EvalConfig, TaskConfig, TrainConfig
from papers.context_scaling.plugins import FAMILIES, MODELS, family, model_facts
from scaling.cells import ALWAYS, Cell, under
from scaling.judge import provenance
from scaling.kinds.registry import kind, kind_names
from scaling.plugins import names

REPO = Path(__file__).resolve().parents[1]


def setting_names(cls, prefix: str) -> list[str]:
    """The dotted names of a settings dataclass's leaves (a dataclass inside it is walked into)."""
    hints = typing.get_type_hints(cls)
    out = []
    for f in dataclasses.fields(cls):
        name = f"{prefix}.{f.name}"
        if dataclasses.is_dataclass(hints[f.name]):
            out += setting_names(hints[f.name], name)
        else:
            out.append(name)
    return out


def family_settings() -> dict[str, tuple[str, ...]]:
    """The settings each registered family reads (its FamilySpec's)."""
    return {name: family(name).settings for name in names(FAMILIES)}


def model_settings() -> dict[str, tuple[str, ...]]:
    """The settings each registered model reads (its ModelFacts')."""
    return {name: model_facts(name).settings for name in names(MODELS)}


def groups() -> dict[str, type]:
    """Every kind's settings group and its dataclass (e.g. 'temperature' -> TemperatureConfig)."""
    return {kind(k).group: kind(k).settings for k in kind_names() if kind(k).group}


def every_setting(task=TaskConfig, model=ModelConfig, train=TrainConfig, evaluation=EvalConfig) -> list[str]:
    names = [f.name for f in dataclasses.fields(Cell) if f.name not in ("settings", "versions")]
    names += setting_names(task, "task") + setting_names(model, "model")
    names += setting_names(train, "train") + setting_names(evaluation, "eval")
    for group, settings in groups().items():
        names += setting_names(settings, group)
    return names


def undeclared(**classes) -> list[str]:
    """The settings that no declaration makes applicable: not every cell's (ALWAYS), no family's
    (FamilySpec.settings), no architecture's (ModelFacts.settings) and read by no kind (Kind.reads)."""
    family = {"family"} | {s for settings in family_settings().values() for s in settings}
    arch = {"arch", "name"} | {s for m in model_settings().values() for s in m}
    reads = [r for k in kind_names() for r in kind(k).reads if r not in ("task", "model")]
    missing = []
    for name in every_setting(**classes):
        group, _, rest = name.partition(".")
        if (
            name in ALWAYS
            or (group == "task" and rest in family)
            or (group == "model" and rest in arch)
            or under(name, reads)
        ):
            continue
        missing.append(name)
    return missing


def test_every_setting_is_declared_applicable_somewhere():
    assert undeclared() == []


def test_a_new_undeclared_setting_is_caught():
    @dataclasses.dataclass(frozen=True)
    class WiderTask(TaskConfig):
        temperature_of_the_room: float = 20.0

    @dataclasses.dataclass(frozen=True)
    class WiderModel(ModelConfig):
        dropout: float = 0.0

    assert undeclared(task=WiderTask, model=WiderModel) == ["task.temperature_of_the_room", "model.dropout"]


def test_every_declaration_names_a_real_setting():
    """A typo in a declaration would make a setting silently vanish: every declared name is a setting or a
    group of settings."""
    everything = every_setting()
    task_fields = {f.name for f in dataclasses.fields(TaskConfig)}
    model_fields = {f.name for f in dataclasses.fields(ModelConfig)}
    for name, settings in family_settings().items():
        assert set(settings) <= task_fields, name
    for name, settings in model_settings().items():
        assert set(settings) <= model_fields, name
    for name in kind_names():
        for read in kind(name).reads:
            assert read in ("task", "model") or any(under(s, (read,)) for s in everything), (name, read)
    for name in ALWAYS:
        assert name in everything


def test_an_mlp_cell_logs_no_transformer_settings_and_a_gpt2_cell_no_mlp_width():
    mlp = Cell.from_dict({"model": {"arch": "mlp", "width": 256, "n_layer": 2}, "T": 16})
    gpt2 = Cell.from_dict({"model": {"arch": "gpt2", "n_layer": 2}, "T": 16})
    assert {"model.n_layer", "model.n_head", "model.n_embd", "model.layout", "model.attention"}.isdisjoint(
        mlp.params()
    )
    assert mlp.params()["model.width"] == "256" and mlp.params()["model.inputs"] == "vectorised"
    assert "model.feature_map" not in mlp.params()  # vectorised inputs read no feature map
    assert "model.width" not in gpt2.params() and gpt2.params()["model.n_layer"] == "2"
    for cell in (mlp, gpt2):  # what analysis and the UI's filters read is always there
        assert {"T", "N", "seed", "job", "model.name", "model.arch", "task.family", "task.d"} <= set(
            cell.params()
        )
        assert cell.params()["T"] == "16"
    # the key and cell.yaml keep every setting: n_layer = 2 still makes another MLP cell
    assert mlp.to_dict()["model"]["n_layer"] == 2
    assert mlp.key != Cell.from_dict({"model": {"arch": "mlp", "width": 256}, "T": 16}).key
    featured = Cell.from_dict({"model": {"arch": "mlp", "inputs": "both", "feature_map": "hilbert"}})
    assert featured.params()["model.feature_map"] == "hilbert"


@pytest.mark.parametrize(
    "family, has, lacks",
    [
        (
            "linear",
            {"task.d", "task.noise_std"},
            {"task.hidden", "task.depth", "task.sparsity", "task.noise_stds"},
        ),
        ("relu_net", {"task.hidden", "task.noise_std"}, {"task.depth", "task.sparsity"}),
        ("decision_tree", {"task.depth"}, {"task.hidden", "task.sparsity"}),
        ("sparse_linear", {"task.sparsity"}, {"task.hidden", "task.depth"}),
        ("linear_mixed_noise", {"task.noise_stds"}, {"task.noise_std", "task.hidden"}),
    ],
)
def test_a_task_logs_its_family_settings_only(family, has, lacks):
    extra = {"noise_stds": [0.1, 0.5]} if family == "linear_mixed_noise" else {}
    params = Cell.from_dict({"task": {"family": family, **extra}}).params()
    assert params["task.family"] == family
    assert has <= set(params) and lacks.isdisjoint(params)


def test_settings_unread_under_their_values_are_left_out():
    """Only behind a switch that is always logged (the curriculum's starts, eval.lambda_n), so an absent
    param never hides a difference between cells."""
    plain = Cell().params()
    assert {k for k in plain if k.startswith("train.curriculum.")} == {
        "train.curriculum.dims_start",
        "train.curriculum.points_start",
    }
    assert plain["train.curriculum.points_start"] == "0"
    assert "eval.lambdas" not in plain and plain["eval.lambda_n"] == "[]"
    points = Cell.from_dict(
        {"train": {"curriculum": {"points_start": 5}}, "eval": {"lambda_n": [4]}}
    ).params()
    assert {k for k in points if k.startswith("train.curriculum.")} == {
        "train.curriculum.dims_start",
        "train.curriculum.points_start",
        "train.curriculum.points_inc",
        "train.curriculum.points_every",
    }
    assert "eval.lambdas" in points


def test_kinds_log_their_own_settings():
    theory = Cell.from_dict({"job": "theory_context", "task": {"d": 4}}).params()
    assert theory["task.d"] == "4" and theory["temperature.m"] == "5000"
    assert not any(k.startswith(("train.", "eval.", "model.n_")) for k in theory)
    assert "temperature.taus" not in theory and "temperature.llm" not in theory
    scan = Cell.from_dict({"job": "gpt2_scan", "temperature": {"train_model": True}}).params()
    assert scan["temperature.train_model"] == "True" and scan["train.steps"] == "1000"
    assert "model.n_layer" in scan and "temperature.from_sweep" not in scan
    source = Cell.from_dict(
        {"job": "gpt2_scan", "temperature": {"from_sweep": "smoke", "from_params": {"T": "inf"}}}
    ).params()
    assert source["temperature.from_params.T"] == "inf" and source["temperature.from_sweep"] == "smoke"
    assert not any(k.startswith(("train.", "model.n_")) for k in source)  # the model comes from that run
    gd = Cell.from_dict({"job": "gd_transformer"}).params()
    assert gd["construction.lam"] == "0.0" and "construction.lambdas" not in gd and "train.steps" not in gd
    selection = Cell.from_dict(
        {"job": "selection_transformer", "construction": {"train_model": True}}
    ).params()
    assert "construction.lambdas" in selection and selection["train.steps"] == "1000"


def test_params_are_a_subset_of_the_full_cell():
    for cell in (
        Cell(),
        Cell.from_dict({"model": {"arch": "onelayer", "feature_map": "hilbert"}}),
        Cell.from_dict({"job": "attention_histograms"}),
    ):
        flat = cell.flat()
        assert cell.params().items() <= flat.items()
        assert len(cell.params()) < len(flat)


# ----------------------------------------------------------------------------- analysis reads absent params


def settings_table(cells: list[Cell]) -> pd.DataFrame:
    """The analysis table's cell columns for ``cells`` (scaling.tracking.table.tidy: a param a cell does not
    log is NaN), one row per cell and context length 1..2."""
    rows = [
        {
            "cell_key": c.key,
            "model": c.model.label,
            "n": n,
            **{f"param.{k}": v for k, v in c.params().items()},
        }
        for c in cells
        for n in (1, 2)
    ]
    return pd.DataFrame(rows)


def smoke_cells(*overrides: str) -> list[Cell]:
    from scaling.planning.plan import load_plan

    return [p.cell for p in load_plan(str(REPO / "sweeps" / "smoke.yaml"), "", overrides).cells]


def test_mlp_and_gpt2_cells_pool_although_mlp_cells_log_no_n_layer():
    table = settings_table(smoke_cells())
    assert table.loc[table["model"] == "mlp", "param.model.n_layer"].isna().all()
    assert set(table.loc[table["model"] == "gpt2", "param.model.n_layer"]) == {"2"}
    assert provenance.differing_settings(table, provenance.DEFAULT_AXES) == {}
    provenance.check_poolable(table, provenance.DEFAULT_AXES, "smoke")
    assert provenance.setting_columns(table, provenance.DEFAULT_AXES) == {}
    assert provenance.drop_repeats(table) == (table, [])


def test_a_setting_only_some_kinds_read_is_compared_where_it_applies():
    """GD-construction cells read no train settings, selection cells that train a model do: their
    train.steps differ only when two selection cells differ in it."""

    def cells(*steps):
        gd = [Cell.from_dict({"job": "gd_transformer", "seed": s}) for s in (0, 1)]
        trained = [
            Cell.from_dict(
                {"job": "selection_transformer", "construction": {"train_model": True}, "train": {"steps": n}}
            )
            for n in steps
        ]
        return settings_table(gd + trained)

    AXES = (*provenance.DEFAULT_AXES, "job")  # a sweep with both kinds has job as a grid axis
    same = cells(100)
    assert same.loc[same["param.job"] == "gd_transformer", "param.train.steps"].isna().all()
    provenance.check_poolable(same, AXES, "constructions")
    differ = cells(100, 200)
    assert provenance.differing_settings(differ, AXES) == {"train.steps": ["100", "200"]}
    with pytest.raises(provenance.PoolingError, match=r"train\.steps = 100 / 200\)"):
        provenance.check_poolable(differ, AXES, "constructions")
    picked = provenance.select(differ, ["train.steps=200"])  # the GD cells read no train.steps: kept
    assert picked.groupby("param.job")["cell_key"].nunique().to_dict() == {
        "gd_transformer": 2,
        "selection_transformer": 1,
    }
    provenance.check_poolable(picked, AXES, "constructions")
    curriculum = settings_table(
        [
            Cell.from_dict({"train": {"curriculum": {"points_start": s}}, "model": {"name": "m"}})
            for s in (0, 5)
        ]
    )  # the switch is always logged, so a curriculum on vs off is a difference
    assert provenance.differing_settings(curriculum, provenance.DEFAULT_AXES) == {
        "train.curriculum.points_start": ["0", "5"]
    }


def test_cells_whose_keys_differ_only_in_settings_they_do_not_read_count_once():
    """--set model.n_layer=4 on the smoke sweep gives its MLP cells new keys (the key holds every setting)
    and the same params: one computation, counted once; the GPT-2 preset keeps its own n_layer."""
    plain, variant = smoke_cells(), smoke_cells("model.n_layer=4")
    half = len(plain) // 2  # the smoke sweep's cells of each model (18: 3 T x 2 N x 3 seeds)
    assert len({c.key for c in plain} | {c.key for c in variant}) == 3 * half
    table = settings_table(plain + variant)
    provenance.check_poolable(table, provenance.DEFAULT_AXES, "smoke")  # nothing that applies differs
    kept, notes = provenance.drop_repeats(table)
    assert kept["cell_key"].nunique() == 2 * half
    assert kept.groupby("model")["cell_key"].nunique().to_dict() == {"gpt2": half, "mlp": half}
    assert notes and notes[0].startswith(f"{half} complete cells repeat the settings of others")
    note = provenance.other_variants(settings_table(variant), settings_table(plain))
    assert "nan" not in note
