"""Every bad input of the table below fails before any work: exit status 2, the expected first line of
the message (what, where, what is allowed), no traceback, and nothing written (no MLflow store, no
storage directory, no checkpoint, no Ray trial: the directory holds only the sweep file).

Each case runs the real CLI entry point (scaling.sweep.__main__.main) in its own empty directory, which
is also the working directory, so a default ``./mlflow.db`` or ``./scaling_runs`` would show up too.
"""

import copy
import time

import pytest
import yaml
from conftest import TINY_SWEEP

from scaling.sweep.__main__ import main

ALIAS_BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 9)}]\n" for i in range(8)
)


def with_setting(dotted, value):
    document = copy.deepcopy(TINY_SWEEP)
    node = document
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return yaml.safe_dump(document, sort_keys=False)


def tiny(**top):
    return yaml.safe_dump({**copy.deepcopy(TINY_SWEEP), **top}, sort_keys=False)


TINY = tiny()

# name: (sweep file text or bytes, extra CLI arguments, the message's first line must contain this)
CASES = {
    # --- the file itself
    "binary_file": (bytes(range(256)) * 4, [], "bad.yaml: not a text file"),
    "nul_bytes": (b"name: tiny\x00\x00\n", [], "bad.yaml: not a text file"),
    "huge_file": ("# " + "x" * (2 << 20) + "\n" + TINY, [], "bad.yaml: 2.0 MB; a sweep file is at most 1 MB"),
    "deep_nesting": (
        "name: tiny\ngrid: " + "[" * 5000 + "]" * 5000 + "\n",
        [],
        "bad.yaml:2: YAML nested deeper than 50 levels",
    ),
    "deep_mapping": (
        "name: tiny\ndefaults: " + "{a: " * 100 + "1" + "}" * 100 + "\n",
        [],
        "bad.yaml:2: YAML nested deeper than 50 levels",
    ),
    "alias_bomb": (ALIAS_BOMB, [], "YAML aliases expand to more than 100000 values"),
    "malformed_yaml": (
        "name: bad\ndefaults:\n  train: {steps: 10\ngrid:\n  T: [1, 2]\n",
        [],
        "bad.yaml:4: malformed YAML",
    ),
    "duplicate_key": ("name: bad\nname: again\n", [], "bad.yaml:2: name: duplicate key"),
    "empty_file": ("", [], "bad.yaml: a sweep file is a mapping with keys name,"),
    "top_level_list": ("- name: tiny\n", [], "bad.yaml: a sweep file is a mapping with keys name,"),
    "top_level_scalar": ("just words\n", [], "bad.yaml: a sweep file is a mapping with keys name,"),
    "unknown_top_key": (tiny(gird={"T": [1]}), [], "gird: unknown key; allowed: name,"),
    # --- the name
    "name_with_space": (tiny(name="my sweep"), [], "name: the sweep needs a `name`"),
    "name_missing": (
        yaml.safe_dump({k: v for k, v in TINY_SWEEP.items() if k != "name"}),
        [],
        "the sweep needs a `name`",
    ),
    "name_not_text": (tiny(name=123), [], "name: the sweep needs a `name`"),
    "name_with_slash": (tiny(name="a/b"), [], "name: the sweep needs a `name`"),
    # --- the grid
    "empty_grid": ("name: tiny\ngrid:\n", [], "bad.yaml:2: grid: is empty"),
    "empty_grid_mapping": (tiny(grid={}), [], "grid: is empty"),
    "grid_not_mapping": (tiny(grid=[1, 2]), [], "grid: expected a mapping of axis -> list of values"),
    "empty_axis": (with_setting("grid.T", []), [], "grid.T: an axis needs at least one value"),
    "unknown_model_preset": (
        with_setting("grid.model", ["mlp", "lstm"]),
        [],
        "grid.model[1]: unknown model preset 'lstm'",
    ),
    "unknown_axis_setting": (with_setting("grid.train.stepz", [1, 2]), [], "unknown setting"),
    "T_below_one": (with_setting("grid.T", [4, 0]), [], "grid.T[1]: T: must be a whole number >= 1"),
    "T_not_whole": (with_setting("grid.T", [2.5]), [], "grid.T[0]: T: must be a whole number >= 1"),
    "seed_negative": (with_setting("grid.seed", [-1]), [], "grid.seed[0]: seed: must be >= 0"),
    "lattice_beyond_cap": (
        with_setting("grid.seed", list(range(6000))),
        [],
        "the grid makes 12000 cells (model 1 x T 2 x seed 6000), more than the cap of 10000",
    ),
    "lattice_beyond_lowered_cap": (
        TINY,
        ["--max-cells", "1"],
        "the grid makes 2 cells (model 1 x T 2 x seed 1), more than the cap of 1",
    ),
    "unknown_job": (with_setting("defaults.job", "juggle"), [], "job: unknown experiment kind 'juggle'"),
    # --- cell settings
    "unknown_task_family": (
        with_setting("defaults.task.family", "cubic"),
        [],
        "defaults.task.family: unknown task family 'cubic'",
    ),
    "task_d_zero": (with_setting("defaults.task.d", 0), [], "defaults.task.d: must be >= 1"),
    "noise_negative": (
        with_setting("defaults.task.noise_std", -0.1),
        [],
        "defaults.task.noise_std: must be >= 0",
    ),
    "noise_infinite": (
        with_setting("defaults.task.noise_std", "inf"),
        [],
        "defaults.task.noise_std: must be finite",
    ),
    "noise_nan": (
        with_setting("defaults.task.noise_std", "nan"),
        [],
        "defaults.task.noise_std: not a number",
    ),
    "unknown_setting": (
        with_setting("defaults.train.stepz", 10),
        [],
        "defaults.train.stepz: unknown setting",
    ),
    "defaults_not_mapping": (tiny(defaults=[1]), [], "defaults: expected a mapping of cell settings"),
    "N_zero": (with_setting("defaults.N", 0), [], "defaults.N: must be >= 1"),
    "steps_zero": (with_setting("defaults.train.steps", 0), [], "defaults.train.steps: must be >= 1"),
    "steps_text": (
        with_setting("defaults.train.steps", "many"),
        [],
        "defaults.train.steps: expected an integer",
    ),
    "batch_zero": (
        with_setting("defaults.train.batch_size", 0),
        [],
        "defaults.train.batch_size: must be >= 1",
    ),
    "lr_infinite": (with_setting("defaults.train.lr", "inf"), [], "defaults.train.lr: must be finite"),
    "lr_nan": (with_setting("defaults.train.lr", float("nan")), [], "defaults.train.lr: not a number"),
    "lr_negative": (with_setting("defaults.train.lr", -1e-3), [], "defaults.train.lr: must be > 0"),
    "precision_unknown": (
        with_setting("defaults.train.precision", "fp8"),
        [],
        "defaults.train.precision: unknown value 'fp8'",
    ),
    "device_unknown": (
        with_setting("defaults.train.device", "tpu"),
        [],
        "defaults.train.device: must be auto, cpu, cuda or cuda:K",
    ),
    "device_cuda_without_gpu": (
        with_setting("defaults.train.device", "cuda"),
        [],
        "train.device: cuda needs a GPU",
    ),
    "checkpoint_every_zero": (
        with_setting("defaults.train.checkpoint_every", 0),
        [],
        "defaults.train.checkpoint_every: must be >= 1",
    ),
    "eval_prompts_text": (
        with_setting("defaults.eval.prompts", "lots"),
        [],
        "defaults.eval.prompts: expected an integer",
    ),
    "unknown_model_arch": (
        with_setting("models.mlp.arch", "resnet"),
        [],
        "models.mlp.arch: unknown model 'resnet'",
    ),
    "models_not_mapping": (tiny(models=["mlp"]), [], "models: expected a mapping of preset name"),
    "gpt2_too_long": (
        tiny(grid={"model": ["gpt2"], "N": [4, 1024]}),
        [],
        "grid: the cell (model=gpt2, N=1024) is invalid: N: N=1024 makes GPT-2 prompts",
    ),
    # --- resources and run
    "gpu_fraction_above_one": (
        tiny(resources={"cpu": 1, "gpu": 1.5}),
        [],
        "resources.gpu: a fraction must be at most 1",
    ),
    "gpu_negative": (with_setting("models.mlp.resources", {"gpu": -1}), [], "models.mlp.gpu: must be >= 0"),
    "cpu_zero": (tiny(resources={"cpu": 0}), [], "resources.cpu: must be > 0"),
    "custom_resource_builtin": (
        tiny(resources={"custom": {"GPU": 1}}),
        [],
        "custom.GPU: is a built-in resource",
    ),
    "max_failures_negative": (tiny(run={"max_failures": -1}), [], "run.max_failures: must be >= 0"),
    "max_concurrent_negative": (tiny(run={"max_concurrent": -2}), [], "run.max_concurrent: must be >= 0"),
    "pack_unknown": (tiny(run={"pack": "many"}), [], "run.pack: must be auto, off or a whole number >= 1"),
    "run_unknown_key": (tiny(run={"retries": 3}), [], "run.retries: unknown setting"),
    # --- the command line
    "unknown_profile": (TINY, ["--profile", "fast"], "bad.yaml: unknown profile 'fast'"),
    "set_without_equals": (TINY, ["--set", "train.steps"], "--set train.steps: expected key=value"),
    "set_unknown_key": (
        TINY,
        ["--set", "unknown.key=1"],
        "--set unknown.key=1: defaults.unknown: unknown setting",
    ),
    "set_unknown_train_key": (
        TINY,
        ["--set", "train.stepz=5"],
        "--set train.stepz=5: defaults.train.stepz: unknown setting",
    ),
    "set_bad_value": (
        TINY,
        ["--set", "train.steps=-3"],
        "--set train.steps=-3: defaults.train.steps: must be >= 1",
    ),
    "set_bad_yaml": (TINY, ["--set", "grid.T=[1,"], "--set grid.T=[1,: value is not valid YAML"),
    "num_cpus_negative": (TINY, ["--num-cpus", "-1"], "--num-cpus: must be a whole number >= 1, got -1"),
    "num_cpus_zero": (TINY, ["--num-cpus", "0"], "--num-cpus: must be a whole number >= 1, got 0"),
    "num_gpus_negative": (TINY, ["--num-gpus", "-2"], "--num-gpus: must be a whole number >= 0, got -2"),
    "max_cells_zero": (TINY, ["--max-cells", "0"], "--max-cells: must be a whole number >= 1, got 0"),
    "gpu_memory_no_unit": (TINY, ["--gpu-memory", "24"], "--gpu-memory '24': give the GPU's memory as a"),
    "gpu_memory_unknown_unit": (TINY, ["--gpu-memory", "24G"], "--gpu-memory '24G': give the GPU's memory"),
    "gpu_memory_zero": (TINY, ["--gpu-memory", "0GiB"], "--gpu-memory '0GiB': give the GPU's memory as a"),
    "address_nobody_answers": (
        TINY,
        ["--address", "127.0.0.1:1"],
        "cannot reach a Ray cluster at 127.0.0.1:1",
    ),
    "address_malformed": (TINY, ["--address", "host:port:extra"], "--address host:port:extra: expected"),
    "storage_bogus_scheme": (TINY, ["--storage", "bogus://x/y"], "cannot use the storage bogus://x/y/tiny"),
    "storage_is_a_file": (
        TINY,
        ["--storage", "{dir}/bad.yaml"],
        "cannot use the storage {dir}/bad.yaml/tiny",
    ),
    "tracking_dir_missing": (
        TINY,
        ["--tracking-uri", "sqlite:///{dir}/no/such/dir/mlflow.db"],
        "is not a directory",
    ),
    "tracking_server_down": (
        TINY,
        ["--tracking-uri", "http://127.0.0.1:9"],
        "cannot use the MLflow tracking store http://127.0.0.1:9: reaching the tracking store failed after 3"
        " attempts: connection refused: no server listens there",
    ),
    "tracking_scheme_typo": (
        TINY,
        ["--tracking-uri", "sqllite:///mlflow.db"],
        "tracking URI sqllite:///mlflow.db: unknown scheme 'sqllite'; allowed: sqlite:///PATH",
    ),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_bad_input_exits_2_with_one_clear_line_and_writes_nothing(case, tmp_path, monkeypatch, capsys):
    text, extra, expected = CASES[case]
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "bad.yaml"
    (path.write_bytes if isinstance(text, bytes) else path.write_text)(text)
    extra = [arg.replace("{dir}", str(tmp_path)) for arg in extra]
    flags = [] if "--tracking-uri" in extra else ["--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]
    flags += [] if "--storage" in extra else ["--storage", str(tmp_path / "storage")]
    start = time.monotonic()
    code = main([str(path), *flags, *extra])
    elapsed = time.monotonic() - start
    out, err = capsys.readouterr()
    assert code == 2, (out, err)
    first = err.splitlines()[0] if err else ""
    assert first.startswith("error: ") and expected.replace("{dir}", str(tmp_path)) in first, err
    assert len(err.strip().splitlines()) == 1, err  # one line, not a library's exception after it
    assert "Traceback" not in out + err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.yaml"]
    assert elapsed < 30, f"{case} took {elapsed:.0f}s to fail"


def test_the_table_holds_at_least_fifty_cases():
    assert len(CASES) >= 50


def test_a_directory_given_as_the_sweep(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweeps").mkdir()
    assert main([str(tmp_path / "sweeps"), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 2
    err = capsys.readouterr().err
    assert (
        err.splitlines()[0]
        == f"error: {tmp_path}/sweeps: is a directory; give a sweep file (e.g. sweeps/smoke.yaml)"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweeps"]


@pytest.mark.parametrize(
    "given, meant",
    [
        ("sweeps/smok.yaml", "sweeps/smoke.yaml"),  # a letter left out
        ("sweep/smoke.yaml", "sweeps/smoke.yaml"),  # the folder misspelt
        ("smoke.yaml", "sweeps/smoke.yaml"),  # the folder left out
        ("sweeps/smoke.yml", "sweeps/smoke.yaml"),
        ("sweeps/nothing_alike.yaml", None),
    ],
)
def test_a_misspelt_sweep_path_gets_the_nearest_file(given, meant, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "smoke.yaml").write_text(TINY)
    (tmp_path / "sweeps" / "fig1.yaml").write_text(TINY)
    assert main([given, "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 2
    hint = f"; did you mean {meant}?" if meant else ""
    assert capsys.readouterr().err == f"error: {given}: no such sweep file{hint}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["sweeps"]


# 25 s of planning a large lattice (slow); the refusal without the flag stays in the default run
@pytest.mark.slow
def test_a_large_lattice_is_allowed_by_the_flag_and_sized_quickly(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "big.yaml"
    path.write_text(with_setting("grid.seed", list(range(6000))))
    start = time.monotonic()
    code = main(
        [
            str(path),
            "--dry-run",
            "--max-cells",
            "12000",
            "--tracking-uri",
            f"sqlite:///{tmp_path}/mlflow.db",
            "--storage",
            str(tmp_path / "storage"),
        ]
    )
    assert code == 0
    assert "12000 cells" in capsys.readouterr().out
    print(f"planned and listed 12000 cells in {time.monotonic() - start:.1f}s")
