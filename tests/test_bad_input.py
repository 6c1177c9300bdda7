"""Bad input fails before any work: a message saying what and where, exit status 2, nothing written.

Each case runs the real CLI entry point (scaling.sweep.main) in an empty directory and then checks that
the directory holds only the sweep file: no mlflow.db, no storage directory, no Ray trial.
"""

import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

from papers.context_scaling.architectures import GPT2_MAX_POSITIONS
from scaling.sweep.__main__ import main
from scaling.tracking.store_template import seed_sqlite_store


def run_cli(tmp_path, document, *extra, text=None):
    path = tmp_path / "bad.yaml"
    path.write_text(text if text is not None else yaml.safe_dump(document, sort_keys=False))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    return main([str(path), "--tracking-uri", uri, "--storage", str(tmp_path / "storage"), *extra])


def assert_nothing_written(tmp_path, also=()):
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["bad.yaml", *also])


def set_key(document, dotted, value):
    node = document
    keys = dotted.split(".")
    for key in keys[:-1]:
        node = node.setdefault(key, {})
    node[keys[-1]] = value
    return document


CASES = {
    # name: (dotted key, value, what the message must contain)
    "unknown_task_family": (
        "defaults.task.family",
        "cubic",
        "defaults.task.family: unknown task family 'cubic'",
    ),
    "unknown_model_arch": ("models.mlp.arch", "resnet", "models.mlp.arch: unknown model 'resnet'"),
    "unknown_model_preset": ("grid.model", ["mlp", "lstm"], "grid.model[1]: unknown model preset 'lstm'"),
    "unknown_setting": ("defaults.train.stepz", 10, "defaults.train.stepz: unknown setting"),
    "T_below_one": ("grid.T", [4, 0], "grid.T[1]: T: must be a whole number >= 1"),
    "T_not_whole": ("grid.T", [2.5], "grid.T[0]: T: must be a whole number >= 1"),
    "N_zero": ("defaults.N", 0, "defaults.N: must be >= 1"),
    "gpu_fraction_above_one": (
        "resources",
        {"cpu": 1, "gpu": 1.5},
        "resources.gpu: a fraction must be at most 1",
    ),
    "gpu_negative": ("models.mlp.resources", {"gpu": -1}, "models.mlp.gpu: must be >= 0"),
    "cpu_zero": ("resources", {"cpu": 0}, "resources.cpu: must be > 0"),
    "custom_resource_builtin": ("resources", {"custom": {"GPU": 1}}, "custom.GPU: is a built-in resource"),
    "negative_max_failures": ("run", {"max_failures": -1}, "run.max_failures: must be >= 0"),
    "bad_sweep_name": ("name", "my sweep", "name: the sweep needs a `name`"),
    "axis_not_a_list": ("grid.T", 16, "grid.T: an axis takes a list of values, got 16: write [16] for that"),
}


@pytest.mark.parametrize("case", CASES, ids=list(CASES))
def test_invalid_setting_exits_2_naming_file_line_and_key(case, tmp_path, tiny_sweep, capsys):
    dotted, value, message = CASES[case]
    assert run_cli(tmp_path, set_key(tiny_sweep, dotted, value)) == 2
    err = capsys.readouterr().err
    assert message in err and "bad.yaml:" in err, err
    assert_nothing_written(tmp_path)


FLAG_CASES = {
    # name: (the command's flags, its one line of error)
    "set_axis_not_a_list": (  # one seed 3, or three seeds? said, not guessed
        ["--set", "grid.seed=3"],
        "--set grid.seed=3: grid.seed: an axis takes a list of values, got 3: write [3] for that one value,"
        " or [0, 1, 2] for 3 seeds",
    ),
    "storage_scheme_typo": (
        ["--storage", "s4://bucket/runs"],
        "cannot use the storage s4://bucket/runs/tiny: unknown scheme s4://; give a path or a URI of file://,"
        " s3://, gs://, gcs://, abfs://, abfss://, hdfs://, viewfs://",
    ),
    "dry_run_address_nobody_answers": (  # a dry run asked about a cluster: it must answer too
        ["--dry-run", "--address", "127.0.0.1:1"],
        "cannot reach a Ray cluster at 127.0.0.1:1",
    ),
}


@pytest.mark.parametrize("case", FLAG_CASES, ids=list(FLAG_CASES))
def test_a_bad_flag_exits_2_with_one_line_naming_what_is_allowed(case, tmp_path, tiny_sweep, capsys):
    flags, message = FLAG_CASES[case]
    assert run_cli(tmp_path, tiny_sweep, *flags) == 2
    out, err = capsys.readouterr()
    assert out == "" and err.startswith("error: ") and message in err and len(err.splitlines()) == 1, err
    assert_nothing_written(tmp_path)


def test_gpt2_N_beyond_the_position_cap_is_refused(tmp_path, tiny_sweep, capsys):
    too_long = GPT2_MAX_POSITIONS // 2  # 2(N+1) = cap + 2 tokens
    tiny_sweep["grid"] = {"model": ["gpt2"], "N": [4, too_long]}
    assert run_cli(tmp_path, tiny_sweep) == 2
    err = capsys.readouterr().err
    assert (
        f"grid: the cell (model=gpt2, N={too_long}) is invalid: N: N={too_long} makes GPT-2 prompts of"
        f" 2(N+1)={2 * too_long + 2} tokens, more than the {GPT2_MAX_POSITIONS} positions" in err
    )
    assert_nothing_written(tmp_path)


def test_mlp_is_not_bound_by_the_gpt2_position_cap(tmp_path, tiny_sweep, capsys):
    tiny_sweep["grid"] = {"model": ["mlp"], "N": [GPT2_MAX_POSITIONS]}
    assert run_cli(tmp_path, tiny_sweep, "--dry-run") == 0
    assert "1 pending" in capsys.readouterr().out
    assert_nothing_written(tmp_path)


def test_malformed_yaml_names_the_line(tmp_path, capsys):
    text = "name: bad\ndefaults:\n  train: {steps: 10\ngrid:\n  T: [1, 2]\n"
    assert run_cli(tmp_path, None, text=text) == 2
    err = capsys.readouterr().err
    assert "malformed YAML" in err and "bad.yaml:4" in err, err
    assert_nothing_written(tmp_path)


def test_duplicate_key_names_the_line(tmp_path, capsys):
    assert run_cli(tmp_path, None, text="name: bad\nname: again\n") == 2
    assert "bad.yaml:2: name: duplicate key" in capsys.readouterr().err
    assert_nothing_written(tmp_path)


def test_missing_sweep_file(tmp_path, capsys):
    assert main([str(tmp_path / "nowhere.yaml"), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db"]) == 2
    assert "nowhere.yaml: no such sweep file" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_unreachable_tracking_server_fails_fast(tmp_path, tiny_sweep, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    start = time.monotonic()
    code = main([str(path), "--tracking-uri", "http://127.0.0.1:9", "--storage", str(tmp_path / "storage")])
    elapsed = time.monotonic() - start
    assert code == 2
    assert "cannot use the MLflow tracking store http://127.0.0.1:9" in capsys.readouterr().err
    assert elapsed < 60, f"took {elapsed:.0f}s to give up"  # MLflow's own retries take minutes
    assert_nothing_written(tmp_path)


def test_tracking_database_in_a_missing_directory(tmp_path, tiny_sweep, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    uri = f"sqlite:///{tmp_path}/no/such/dir/mlflow.db"
    assert main([str(path), "--tracking-uri", uri, "--storage", str(tmp_path / "storage")]) == 2
    assert "is not a directory" in capsys.readouterr().err
    assert_nothing_written(tmp_path)


def test_storage_uri_that_cannot_be_opened(tmp_path, tiny_sweep, capsys):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    assert (
        main([str(path), "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db", "--storage", "bogus://x/y"])
        == 2
    )
    assert "cannot use the storage bogus://x/y/tiny" in capsys.readouterr().err
    assert_nothing_written(tmp_path)


def test_sweep_name_taken_by_another_sweep_file(tmp_path, tiny_sweep, capsys):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    seed_sqlite_store(uri)  # the store as a sweep starts it (MLflow's migrations are not what is tested)
    MlflowClient(uri).create_experiment("tiny", tags={"sweep_file": "other.yaml"})
    assert run_cli(tmp_path, tiny_sweep) == 2
    err = capsys.readouterr().err
    assert "the sweep name 'tiny' is already the MLflow experiment of other.yaml" in err
    assert_nothing_written(
        tmp_path, also=["mlflow.db", "mlruns"] if (tmp_path / "mlruns").exists() else ["mlflow.db"]
    )
    client = MlflowClient(uri)
    assert client.search_runs([client.get_experiment_by_name("tiny").experiment_id]) == []
