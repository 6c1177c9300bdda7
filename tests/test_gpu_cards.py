"""The driver plans each GPU cell's pack for the memory of the card it will run on (scaling.budget.cards): the
stated --gpu-memory, else the cluster's cards (the GPU nodes alive in Ray, the autoscaler's node types),
else the CUDA cost table's card, said in the plan line and by --dry-run. The planner runs on the real
sweep files; the live nodes are a real local Ray's."""

import io
import re
from pathlib import Path

import pytest
import ray
import torch
import yaml
from ray.autoscaler._private.util import prepare_config

from scaling.budget.cards import (
    GIB,
    KNOWN_CARDS,
    Cards,
    accelerator_of,
    known_card,
    parse_memory,
    run_cards,
    type_cards,
)
from scaling.budget.cost import load_gpu_table
from scaling.budget.gpu_plan import gpu_packs
from scaling.budget.packing import device_pack_size
from scaling.cluster import node_types
from scaling.planning.plan import load_plan
from scaling.sweep.__main__ import main
from scaling.sweep.phases import run_sweep
from scaling.sweep.tune_rounds import trial_specs

ROOT = Path(__file__).resolve().parents[1]
TABLE = load_gpu_table()  # the committed CUDA cost table: its memory fit, its card
# Fig. 1's GPT-2 at a quarter of a GPU, 40 seeds x 6 T of one shape: more than one pack holds anywhere.
MANY = ("grid.model=[gpt2]", "grid.N=[10]", f"grid.seed={list(range(40))}", "models.gpt2.resources.gpu=0.25")
SHARED = dict(tracking_uri="t", experiment_id="0", sweep="fig1", parent_run_id="p", storage="s", driver="d")


def gpu_cells(plan):
    return [p for p in plan.cells if p.resources.gpu > 0]


def test_the_packs_K_follows_the_stated_memory():
    """24 GiB cards give fewer members per pack than 80 GiB ones for the same cell, each pack as large as
    a trial of that share of that card stacks (scaling.budget.packing.device_pack_size), in --dry-run's plan
    and in the driver's trial specs alike."""
    plan = load_plan(str(ROOT / "sweeps" / "fig1.yaml"), overrides=MANY)
    planned = gpu_cells(plan)
    cell = planned[0].cell
    sizes = {}
    for size in ("24GiB", "80GiB"):
        cards = run_cards(size, [], TABLE)
        groups = gpu_packs(plan, planned, TABLE, cards)
        specs = trial_specs(planned, plan.run.pack, SHARED, slots=4, cards=cards)
        assert sorted(len(g) for g in groups) == sorted(len(s.members) for s in specs)
        sizes[size] = max(len(g) for g in groups)
    assert sizes["24GiB"] == device_pack_size(cell, 0.25 * 24 * GIB, TABLE) < sizes["80GiB"]


def test_the_dry_run_says_which_memory_the_packs_were_planned_for(tmp_path, capsys):
    if torch.cuda.is_available():
        pytest.skip("this machine's GPU would be the card planned for")
    sets = [part for s in MANY for part in ("--set", s)]
    common = [str(ROOT / "sweeps" / "fig1.yaml"), "--dry-run", *sets, "--storage", str(tmp_path)]
    common += ["--tracking-uri", f"sqlite:///{tmp_path}/m.db", "--num-gpus", "1"]  # a GPU: the cells fit
    assert main([*common, "--gpu-memory", "24GiB"]) == 0
    stated = capsys.readouterr().out
    assert "GPU packs planned for 24.0 GiB cards (as stated, --gpu-memory 24GiB)" in stated
    assert main(common) == 0
    table = re.sub(r"\n +", " ", capsys.readouterr().out)  # the dry run's wrapped lines whole
    assert (
        f"GPU packs planned for {TABLE['memory_bytes'] / GIB:.1f} GiB cards ({TABLE['device']}, the cost"
        " table's card: no other card known here; pass --gpu-memory SIZE for yours)" in table
    )
    trials = [line for text in (stated, table) for line in text.splitlines() if "GPU packs (run.pack" in line]
    assert trials[0] != trials[1]  # more trials on the smaller card
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("text, size", [("24GiB", 24 * GIB), ("80 GB", 80e9), ("1.5TiB", 1.5 * 2**40)])
def test_sizes(text, size):
    assert parse_memory(text) == size


def test_the_autoscalers_node_types_plan_for_their_smallest_card():
    """cluster.yaml's GPU workers (as `ray up` prepares its config): A10G and L4 from their instance types,
    the cell planned for the smaller; `ray up` on AWS also fills in their accelerator_type resource."""
    types = node_types(prepare_config(yaml.safe_load((ROOT / "cluster.yaml").read_text())))
    cards = type_cards(types)
    assert {(c.name, c.where) for c in cards} == {
        ("A10G", "the autoscaler's node type gpu.a10g.spot"),
        ("L4", "the autoscaler's node type gpu.l4.spot"),
    }
    chosen = Cards(tuple(cards), None).card_for({"CPU": 1, "GPU": 0.25})
    assert chosen.name == "L4" and chosen.memory_bytes == KNOWN_CARDS["L4"][0] < 24 * GIB
    assert Cards(tuple(cards), "fallback").card_for({"CPU": 1, "GPU": 2}) == "fallback"  # no type holds it
    filled = node_types(
        {
            "max_workers": 2,
            "available_node_types": {
                "w": {
                    "resources": {"CPU": 8, "GPU": 1, "accelerator_type:H100": 1},
                    "node_config": {},
                    "max_workers": 2,
                }
            },
        }
    )
    assert [c.name for c in type_cards(filled)] == ["H100"]


def test_a_card_of_two_sizes_plans_for_the_smaller_and_says_so():
    card = known_card("A100", "node 10.0.0.5", None)
    assert card.memory_bytes < 40 * GIB and "pass --gpu-memory" in card.note
    assert known_card("unknown-card", "node", None) is None
    both = {"GPU": 1, "accelerator_type:A100": 1, "accelerator_type:A100-80G": 1}  # Ray's and the user's
    assert accelerator_of(both) == "A100-80G" and accelerator_of({"GPU": 1}, "p5.48xlarge") == "H100"


@pytest.fixture(scope="module")
def gpu_ray():
    """A real local Ray whose one node has a (logical) A10G: Ray names a node's card so when it starts."""
    ray.init(
        address="local",
        num_cpus=1,
        num_gpus=1,
        resources={"accelerator_type:A10G": 1},
        include_dashboard=False,
        object_store_memory=80 * 1024**2,
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def test_a_live_gpu_nodes_card(gpu_ray):
    """No NVIDIA driver here: the node's memory cannot be read on it, so its accelerator_type names it."""
    from scaling.sweep.card_probe import live_cards

    (card,) = live_cards(timeout=60)
    assert card.name == "A10G" and card.memory_bytes == KNOWN_CARDS["A10G"][0]
    assert card.where.startswith("node ") and card.resources["GPU"] == 1


def test_a_run_plans_its_packs_for_the_live_nodes_card_and_says_so(gpu_ray, tmp_path, tiny_sweep):
    """The driver's plan line on a cluster whose GPU node is an A10G: the two GPT-2 cells (half a GPU each)
    planned for the A10G, not for the cost table's H100, and trained."""
    tiny_sweep["models"]["gpt2"]["resources"] = {"cpu": 0.5, "gpu": 0.5}
    tiny_sweep["grid"] = {"model": ["gpt2"], "T": [4, "inf"], "seed": [0]}
    tiny_sweep["defaults"]["train"]["steps"] = 10
    path = tmp_path / "tiny.yaml"
    path.write_text(yaml.safe_dump(tiny_sweep))
    out = io.StringIO()
    uri = f"sqlite:///{tmp_path}/m.db"
    outcome = run_sweep(str(path), tracking_uri=uri, storage=str(tmp_path / "runs"), out=out)
    assert outcome.ok and len(outcome.completed) == 2, out.getvalue()
    assert "[tiny] GPU packs planned for 22.0 GiB cards (A10G, node " in out.getvalue()
