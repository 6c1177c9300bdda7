"""Plug-ins (scaling/plugins.py, docs/extending.md): a sweep file names a researcher's task family, model,
feature map, baseline or kind by ``module:Name`` (a module beside it or on the Python path), an installed
distribution registers names through an entry-point group (this project's built-ins do, in pyproject.toml),
a plug-in's version is in its cells' keys, and a bad plug-in is one line, exit 2, nothing written.

The example's whole run (sweep, rerun, analysis, a changed source) is tests/test_example.py."""

from __future__ import annotations

import contextlib
import io
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from papers.context_scaling import plugins as points
from scaling import plugins
from scaling.cells import plugin_sources
from scaling.config import ConfigError
from scaling.kinds.registry import POINT as KINDS
from scaling.planning.plan import SweepError, load_plan
from scaling.sweep.__main__ import main as sweep_main

ROOT = Path(__file__).resolve().parents[1]

# a family of the researcher's, as small as one can be: y = sum(x) with unit-variance noise-free inputs
FAMILY = """
from dataclasses import dataclass

import torch

from papers.context_scaling.extend import TaskFamily, TaskSettings


@dataclass(frozen=True)
class SumSettings(TaskSettings):
    scale: float = 1.0

    def __post_init__(self):
        super().__post_init__()
        if self.scale <= 0:
            from scaling.config import ConfigError

            raise ConfigError("scale", f"must be > 0, got {self.scale}")


class Sum(TaskFamily):
    Settings = SumSettings
    version = "VERSION"

    def draw_tasks(self, count, gen):
        return {"w": torch.ones(count, self.config.d, device=gen.device)}

    def signal(self, params, xs):
        return self.config.scale * torch.einsum("bpd,bd->bp", xs, params["w"])
"""


def sweep_file(folder: Path, module: str, family: str, **task) -> Path:
    document = {
        "name": f"plug-{module}",
        "defaults": {
            "task": {"family": f"{module}:{family}", "d": 2, **task},
            "model": {"arch": "mlp", "width": 8},
            "train": {"steps": 4, "batch_size": 4, "checkpoint_every": 2, "log_every": 2},
            "eval": {"prompts": 8, "bootstrap": 5, "baselines": ["zero"]},
            "N": 3,
        },
        "grid": {"T": [4, "inf"], "seed": [0]},
    }
    path = folder / "sweep.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False))
    return path


def module_file(folder: Path, name: str, text: str) -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(text))
    return path


def test_the_built_ins_are_registered_by_the_projects_entry_points():
    """The one mechanism: pyproject.toml's entry points name every built-in, which load through it."""
    assert plugins.names(KINDS)[0] == "train" and "llm_scan" in plugins.names(KINDS)
    assert plugins.names(points.FAMILIES)[:2] == ["linear", "linear_mixed_noise"]
    assert "gpt2" in plugins.names(points.MODELS) and "hilbert" in plugins.names(points.FEATURE_MAPS)
    assert "xgboost" in plugins.names(points.BASELINES)
    train = plugins.resolve(KINDS, "train")
    assert train.builtin and train.registered and train.reference == "papers.context_scaling.kind:TRAIN"
    assert plugins.is_builtin(points.FAMILIES, "linear") and not plugins.is_builtin(points.FAMILIES, "x:Y")


def test_a_family_beside_the_sweep_file_plans_with_its_version_in_the_key(tmp_path):
    module_file(tmp_path, "sumfamily_a", FAMILY.replace("VERSION", "1"))
    plan = load_plan(sweep_file(tmp_path, "sumfamily_a", "Sum", scale=2.0))
    cell = plan.cells[0].cell
    assert cell.versions == {"sumfamily_a:Sum": "1"} and cell.task.scale == 2.0
    assert "task.scale" in cell.params() and cell.params()["task.family"] == "sumfamily_a:Sum"
    (source,) = plugin_sources(cell)
    assert source == {
        "point": "families",
        "name": "sumfamily_a:Sum",
        "version": "1",
        "source": plugins.source_hash(tmp_path / "sumfamily_a.py"),
    }
    # the same settings under another version of the plug-in are other cells
    other = tmp_path / "other"
    other.mkdir()
    module_file(other, "sumfamily_b", FAMILY.replace("VERSION", "2"))
    renamed = load_plan(sweep_file(other, "sumfamily_b", "Sum", scale=2.0)).cells[0].cell
    assert renamed.versions == {"sumfamily_b:Sum": "2"} and renamed.key != cell.key


def test_an_installed_distribution_registers_its_names_through_the_entry_point_group(tmp_path, monkeypatch):
    """A package of the researcher's, installed (a dist-info on the path, as pip leaves it), names its family
    ``sum`` in the group icl_scaling.families: sweeps name it ``sum``, and its version is in the key."""
    package = tmp_path / "sum_icl"
    package.mkdir()
    (package / "__init__.py").write_text(textwrap.dedent(FAMILY.replace("VERSION", "3")))
    info = tmp_path / "sum_icl-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: sum-icl\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text("[icl_scaling.families]\nsum = sum_icl:Sum\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    plugins.refresh()
    try:
        assert "sum" in plugins.names(points.FAMILIES) and not plugins.is_builtin(points.FAMILIES, "sum")
        elsewhere = tmp_path / "sweeps"
        elsewhere.mkdir()
        plan = load_plan(sweep_file(elsewhere, "unused", "unused"), overrides=["task.family=sum"])
        cell = plan.cells[0].cell
        assert cell.task.family == "sum" and cell.versions == {"sum": "3"}
    finally:
        monkeypatch.undo()
        plugins.refresh()
    assert "sum" not in plugins.names(points.FAMILIES)


BAD = {
    "a missing module": ("nosuchmodule_x", "Sum", None, "no module 'nosuchmodule_x' in"),
    "a missing attribute": ("badattr_x", "Summ", FAMILY.replace("VERSION", "1"), "has no 'Summ'; it has"),
    "an object of the wrong kind": (
        "badkind_x",
        "helper",
        "def helper():\n    return 1\n",
        "(badkind_x:helper) is not one: it has no draw_tasks, signal",
    ),
    "settings that fail validation": (
        "badsettings_x",
        "Sum",
        FAMILY.replace("VERSION", "1"),
        "task.scale: must be > 0, got -1.0",
    ),
    "an import that raises": (
        "badimport_x",
        "Sum",
        "raise RuntimeError('no GPU here')\n",
        "importing badimport_x raised RuntimeError: no GPU here",
    ),
    "no version": (
        "badversion_x",
        "Sum",
        FAMILY.replace('    version = "VERSION"\n', ""),
        "declares no version",
    ),
}


@pytest.mark.parametrize("case", BAD, ids=list(BAD))
def test_a_bad_plugin_is_one_line_exit_2_and_nothing_written(case, tmp_path, monkeypatch):
    module, name, text, message = BAD[case]
    if text is not None:
        module_file(tmp_path, module, text)
    task = {"scale": -1.0} if case == "settings that fail validation" else {}
    path = sweep_file(tmp_path, module, name, **task)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(sys, "dont_write_bytecode", True)  # the folder holds what a run would write alone
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        code = sweep_main([str(path), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"])
    lines = err.getvalue().strip().splitlines()
    assert code == 2 and len(lines) == 1, lines
    assert lines[0].startswith(f"error: {path}:") and message in lines[0], lines[0]
    assert f"{module}:{name}" in lines[0] or case == "settings that fail validation"
    given = {"sweep.yaml"} | ({f"{module}.py"} if text is not None else set())
    assert {p.name for p in tmp_path.iterdir()} == given, "nothing is written"
    sys.modules.pop(module, None)


def test_a_researchers_plugin_must_be_of_its_point(tmp_path):
    """Each point checks its interface: a model that is no model, a family's settings that extend nothing."""
    module_file(
        tmp_path,
        "mixed_x",
        """
        from dataclasses import dataclass

        @dataclass(frozen=True)
        class Plain:
            width: int = 1

        class NoSettings:
            version = "1"
            Settings = Plain

            def build(self, settings, d, points):
                raise AssertionError("never built")
        """,
    )
    plugins.search_folder(tmp_path)
    with pytest.raises(ConfigError, match="its Settings must be a dataclass extending .*ModelSettings"):
        plugins.resolve(points.MODELS, "mixed_x:NoSettings", "model.arch")
    with pytest.raises(ConfigError, match="unknown model 'transformer'; known: gpt2, mlp.*module:Name"):
        plugins.resolve(points.MODELS, "transformer", "model.arch")


def test_the_planner_says_where_a_bad_plugin_is_named(tmp_path):
    path = sweep_file(tmp_path, "nosuchmodule_y", "Sum")
    with pytest.raises(SweepError, match=r"sweep.yaml:\d+: defaults.task.family: task family"):
        load_plan(path)


def test_a_sweeps_own_modules_are_shipped_to_the_workers_and_installed_ones_are_not(tmp_path):
    module_file(tmp_path, "ship_x", FAMILY.replace("VERSION", "1"))
    load_plan(sweep_file(tmp_path, "ship_x", "Sum"))
    shipped = plugins.modules_to_ship()
    assert str(tmp_path / "ship_x.py") in shipped
    assert not [s for s in shipped if Path(s).is_relative_to(ROOT) or "site-packages" in s]


UNCOUNTED = """
from dataclasses import dataclass

from torch import nn

from papers.context_scaling.extend import ModelSettings


@dataclass(frozen=True)
class HeadSettings(ModelSettings):
    width: int = 4


class Head(nn.Module):
    def __init__(self, width, d):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d + 1, width), nn.ReLU(), nn.Linear(width, 1))

    def features(self, xs, ys):
        return xs.new_zeros(*xs.shape[:2], xs.shape[-1] + 1)

    def head_layers(self):
        return list(self.net)

    def forward(self, xs, ys):
        return self.net(self.features(xs, ys)).squeeze(-1)


class Uncounted:
    Settings = HeadSettings
    version = "1"
    packs = True

    def build(self, settings, d, points):
        return Head(settings.width, d)
"""


def test_a_model_that_counts_nothing_is_not_estimated_and_packs_only_when_asked(tmp_path):
    """Without parameter and FLOP counts the cost is "not estimated" and auto packing has nothing to size a
    pack by: each cell trains alone, unless the sweep's run.pack asks for K."""
    from scaling.budget.cost import sweep_estimate
    from scaling.budget.packing import pack_groups

    module_file(tmp_path, "uncounted_x", UNCOUNTED)
    path = sweep_file(tmp_path, "sumfamily_c", "Sum")
    module_file(tmp_path, "sumfamily_c", FAMILY.replace("VERSION", "1"))
    plan = load_plan(path, overrides=["model={arch: 'uncounted_x:Uncounted', width: 4}"])
    cells = [p.cell for p in plan.cells]
    assert cells[0].kind.cost(cells[0]) is None and cells[0].kind.packable(cells[0])
    assert sweep_estimate(cells).other == {"train, cost not estimated": 2}
    assert pack_groups(cells, "auto") == [[0], [1]] and pack_groups(cells, 2) == [[0, 1]]


def test_a_config_error_crosses_processes_whole():
    """A trial's ConfigError (a plug-in a worker cannot import) reaches the driver through pickling, as Ray
    sends it, with its setting and message."""
    import pickle

    again = pickle.loads(pickle.dumps(ConfigError("task.family", "no module 'quadratic'")))
    assert (again.where, str(again)) == ("task.family", "task.family: no module 'quadratic'")


def test_two_sweeps_own_modules_of_one_name_in_one_process_are_an_error_not_a_mix(tmp_path):
    """A process that plans a second sweep whose folder has a module of the name the first's had (two
    experiments' quadratic.py) says so, rather than run the first one's code for the second."""
    first, second = tmp_path / "first", tmp_path / "second"
    for folder in (first, second):
        folder.mkdir()
        module_file(folder, "twice_x", FAMILY.replace("VERSION", "1"))
    load_plan(sweep_file(first, "twice_x", "Sum"))
    with pytest.raises(SweepError, match=f"module 'twice_x' is already imported from {first}"):
        load_plan(sweep_file(second, "twice_x", "Sum"))
