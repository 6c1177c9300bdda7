"""`--dry-run` answers "will this run here?": it names the store its cell states come from, says which cells
no node of this machine (or of the cluster at --address) can hold with the check the real run makes, and
then exits 2 as the real run would; it calls the cost table's card the table's; it summarises each model's
cells, trials and cost above the cell rows; its lines stay within 110 characters; it plans a sweep whose
local weights are missing, naming them, while the real run refuses that sweep before writing anything."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import ray
import yaml

from scaling.budget.cost import format_hours, load_gpu_table, load_table
from scaling.budget.cpu_plan import cpu_estimate
from scaling.planning.plan import SweepError, load_plan
from scaling.sweep.__main__ import main
from scaling.sweep.dry_run import LINE_WIDTH
from scaling.sweep.ray_start import check_feasible

ROOT = Path(__file__).resolve().parents[1]
SWEEPS = ROOT / "sweeps"
SMOKE = str(SWEEPS / "smoke.yaml")
FIG1 = str(SWEEPS / "fig1.yaml")
HEADER = re.compile(r"^cell +cpu +gpu +key +state$")  # the cell rows' header


def dry_run(tmp_path, capsys, *args: str) -> tuple[int, str, str]:
    """The exit status, stdout and stderr of `python -m scaling.sweep ARGS --dry-run`, its stores in
    ``tmp_path`` (neither is created)."""
    stores = ["--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--storage", str(tmp_path / "runs")]
    code = main([*args, "--dry-run", *stores])
    out, err = capsys.readouterr()
    assert not list(tmp_path.iterdir()), list(tmp_path.iterdir())  # a dry run writes nothing
    return code, out, err


def test_it_names_the_store_and_the_checkpoints_it_read_the_states_from(tmp_path, capsys):
    code, out, _ = dry_run(tmp_path, capsys, SMOKE, "--num-cpus", "2")
    assert code == 0
    said = re.sub(r"\n +", " ", out).splitlines()[1]  # its wrapped lines whole
    assert said == (
        f"cell states read from the tracking store sqlite:///{tmp_path}/m.db (no store there yet: no cell is"
        f" complete) and the checkpoints in {tmp_path / 'runs' / 'smoke'}"
    )


def test_a_store_without_the_sweep_is_named_as_such(tmp_path, capsys):
    from scaling.tracking.backends import open_store

    store = tmp_path / "store"
    store.mkdir()
    uri = f"sqlite:///{store}/m.db"
    open_store(uri).experiment_id("another-sweep", create=True)
    code = main([SMOKE, "--dry-run", "--num-cpus", "2", "--tracking-uri", uri, "--storage", str(store / "r")])
    out = re.sub(r"\n +", " ", capsys.readouterr().out)
    assert code == 0
    assert f"cell states read from the tracking store {uri} (no experiment smoke in it yet) and the" in out


def test_cells_that_ask_for_a_gpu_on_a_machine_without_one_are_said_and_refused(tmp_path, capsys):
    """sweeps/fig1.yaml at its own settings (0.5 GPU a GPT-2 cell) on this machine with no GPU (--num-gpus 0:
    the local Ray a run starts has none): the whole plan, then the real run's refusal, exit status 2."""
    code, out, err = dry_run(tmp_path, capsys, FIG1, "--num-gpus", "0", "--num-cpus", "2")
    plan = load_plan(FIG1)
    assert code == 2
    assert f"totals: {len(plan.cells)} pending" in out and all(p.name in out for p in plan.cells)
    refused = f"{len(plan.cells)} cells fit no node of this machine [CPU=2]"
    assert f"runs here: no (the error below): {refused}\n" in out
    assert err.startswith("error: no node of this machine can run some cells:\n")
    assert "30 cells ask one node for CPU=2, GPU=0.5 (gpt2 T=100 N=5 seed=0" in err
    assert "nodes: [CPU=2]" in err and "--profile quick" in err  # the file's smaller profiles


def test_a_cell_asking_for_a_whole_gpu_on_two_cpus_is_refused_as_the_real_run_refuses_it(
    tmp_path, capsys, local_ray
):
    """The dry run's refusal is the real run's check (scaling.sweep.node_fit.refusal), word for word: the
    real run asks Ray's live nodes (here a local Ray of 2 CPUs, as `--num-cpus 2` starts), the dry run the
    node that Ray would have."""
    gpu = "models.gpt2.resources.gpu=1"
    code, out, err = dry_run(tmp_path, capsys, SMOKE, "--set", gpu, "--num-cpus", "2", "--num-gpus", "0")
    assert code == 2 and "runs here: no (the error below): 18 cells fit no node of this machine" in out
    pending = load_plan(SMOKE, overrides=[gpu]).cells
    with pytest.raises(SweepError) as refused:
        check_feasible(pending, False, (), "", "this machine")
    assert err == f"error: {refused.value}\n"
    assert "18 cells ask one node for CPU=1, GPU=1 (gpt2 T=16 N=8 seed=0" in err


def test_a_dry_run_asked_about_a_cluster_reads_its_nodes(tmp_path, capsys, local_ray):
    address = ray.get_runtime_context().gcs_address
    code, out, _ = dry_run(tmp_path, capsys, SMOKE, "--address", address)
    assert code == 0
    assert f"runs here: yes, every pending cell fits a node of the Ray cluster at {address} [CPU=2]" in out
    gpu = ["--set", "models.gpt2.resources.gpu=1"]
    code, _, err = dry_run(tmp_path, capsys, SMOKE, "--address", address, *gpu)
    assert code == 2 and err.startswith(f"error: no node of the Ray cluster at {address} can run some cells:")
    assert ray.is_initialized()  # a cluster this process had joined is kept


def test_a_dry_run_asked_about_a_cluster_that_does_not_answer_says_so_and_exits_2(tmp_path, capsys):
    code, out, err = dry_run(tmp_path, capsys, SMOKE, "--address", "127.0.0.1:1")
    assert code == 2 and out == ""
    assert err.startswith("error: cannot reach a Ray cluster at 127.0.0.1:1:") and "within 5s" in err


def test_the_gpu_lines_say_the_card_is_the_cost_tables(tmp_path, capsys):
    table = load_gpu_table()
    _, out, _ = dry_run(tmp_path, capsys, FIG1, "--num-gpus", "1")
    assert f"  costed on the table's {table['device']}, measured on {table['measured']} (" in out
    assert f"GPU ({table['device']})" not in out and f"on one {table['device']}" not in out
    _, smoke, _ = dry_run(tmp_path, capsys, SMOKE)
    assert "GPU: no training cell of this sweep asks for a GPU" in smoke and table["device"] not in smoke


def test_each_models_cells_trials_and_cost_come_before_the_cell_rows(tmp_path, capsys):
    """The smoke sweep on 2 CPUs: GPT-2's 18 cells alone (18 trials), the MLP's 18 packed into 4 trials; the
    trials add up to the CPU line's, and each model's cost is its trials' estimate."""
    _, out, _ = dry_run(tmp_path, capsys, SMOKE, "--num-cpus", "2")
    lines = out.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("model "))
    cells = next(i for i, line in enumerate(lines) if HEADER.match(line))
    assert header < cells
    rows = {line.split()[0]: line.split()[1:3] for line in lines[header + 1 : cells]}
    assert rows == {"gpt2": ["18", "18"], "mlp": ["18", "4"]}
    assert "22 trials for 36 cells that ask for no GPU" in out
    estimate = cpu_estimate(load_plan(SMOKE), load_table(), 2)

    for arch in ("gpt2", "mlp"):
        seconds = sum(s for t, s in zip(estimate.trials, estimate.seconds) if t[0].model.label == arch)
        assert f"about {format_hours(seconds)} of CPU trials" in lines[header + 1 + list(rows).index(arch)]


SHIPPED = [
    (path.name, profile)
    for path in sorted(SWEEPS.glob("*.yaml"))
    for profile in ["", *((yaml.safe_load(path.read_text()) or {}).get("profiles") or {})]
]


@pytest.mark.parametrize("sweep, profile", SHIPPED)
def test_every_line_of_every_shipped_sweeps_dry_run_fits_110_characters(sweep, profile, tmp_path, capsys):
    """Within LINE_WIDTH (the stores' paths here are short enough), and every cell row's columns where the
    header's are, however long the cell's name (sweeps/stat_selection.yaml's are 55 characters)."""
    args = [str(SWEEPS / sweep), *(["--profile", profile] if profile else []), "--num-gpus", "1"]
    code, out, err = dry_run(tmp_path, capsys, *args)
    assert code in (0, 2), err
    lines = out.splitlines()
    assert lines, err
    assert max(map(len, lines)) <= LINE_WIDTH, [line for line in lines if len(line) > LINE_WIDTH]
    header = next(line for line in lines if HEADER.match(line))
    key = header.index("key")
    rows = [line for line in lines if re.search(r"  [0-9a-f]{16}  ", line)]
    assert rows and all(re.match(r"[0-9a-f]{16}  ", row[key:]) for row in rows), header


def test_a_name_longer_than_the_cell_column_gets_a_line_of_its_own(tmp_path, capsys):
    """A variant's cells are named with what it changed: 87 characters here, past the column's 64."""
    sets = ["train.lr=0.00123456789", "task.noise_std=0.123456789", "eval.prompts=333"]
    _, out, _ = dry_run(tmp_path, capsys, SMOKE, *(part for s in sets for part in ("--set", s)))
    lines = out.splitlines()
    header = next(line for line in lines if HEADER.match(line))
    name = "gpt2 T=16 N=8 seed=0 train.lr=0.00123456789 task.noise_std=0.123456789 eval.prompts=333"
    row = lines[lines.index(name) + 1]
    assert row.strip().split()[:3] == ["1", "0", load_plan(SMOKE, overrides=sets).cells[0].cell.key]
    assert row.index(row.split()[2]) == header.index("key") and max(map(len, lines)) <= LINE_WIDTH


def test_a_sweep_whose_local_weights_are_missing_is_planned_and_the_real_run_refuses_it(tmp_path, capsys):
    """sweeps/temp_llama_a.yaml at --profile quick with its tiny LLaMA not built: the dry run plans its
    cells and names what is missing (and how to build it), exit 2; the real run refuses the sweep with the
    same words before anything is written (no store, no storage)."""
    missing = tmp_path / "no-llama"
    args = [str(SWEEPS / "temp_llama_a.yaml"), "--profile", "quick", "--set", f"temperature.llm={missing}"]
    stores = ["--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--storage", str(tmp_path / "runs")]
    assert main([*args, "--dry-run", *stores]) == 2
    out, err = capsys.readouterr()
    plan_cells = [f"llm_scan no-llama demos={n} ratio=0.6 seed=0" for n in (1, 2, 4)]
    assert all(name in out for name in plan_cells) and "totals: 3 pending" in out
    assert "runs here: no (the error below): 1 local file it needs missing here" in out
    (line,) = err.strip().splitlines()
    lacks = "this machine lacks a local file the run needs: no Hugging Face model directory at"
    assert f"{lacks} {missing}" in line
    assert f"python -m papers.temperature.tiny_llm {missing}" in line
    assert main([*args, *stores]) == 2
    assert f"no Hugging Face model directory at {missing}" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())
