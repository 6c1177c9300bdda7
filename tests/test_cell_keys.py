"""Every cell key of every shipped sweep file, at every profile, pinned: a cell's key is what makes a store
resumable (scaling.cells.Cell.key), so a change of the code that plans cells must leave each key as it was.

tests/fixtures/cell_keys.json holds the keys in plan order. A new sweep file or profile is added to it with
``python tests/test_cell_keys.py --write`` (which rewrites only the entries that are missing); an entry that
changes is a change to what users' stores hold, and is made by hand, on purpose.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from scaling.planning.plan import load_plan

REPO = Path(__file__).resolve().parents[1]
PINNED = REPO / "tests" / "fixtures" / "cell_keys.json"
# Sweeps that plan only with local files: stand-ins at a fixed path (a key holds the path it names, so it
# must not be a temporary directory's). Planning checks that they exist; nothing reads them.
STAND_INS = Path("/tmp/icl-scaling-pinned-keys")
LOCAL_FILES = {
    "sweeps/temp_gpt2_scan.yaml:": [f"temperature.checkpoint={STAND_INS}/garg"],
    "sweeps/temp_llama_a.yaml:": [
        f"temperature.llm={STAND_INS}/llm",
        f"temperature.sciq_train={STAND_INS}/sciq.json",
        f"temperature.sciq_test={STAND_INS}/sciq.json",
    ],
}
# the quick and smollm profiles read SciQ from the checkout's fixtures, whose absolute path is in the key
LOCAL_FILES["sweeps/temp_llama_a.yaml:quick"] = LOCAL_FILES["sweeps/temp_llama_a.yaml:"]
LOCAL_FILES["sweeps/temp_llama_a.yaml:smollm"] = LOCAL_FILES["sweeps/temp_llama_a.yaml:"]
LOCAL_FILES["sweeps/temp_llama_b.yaml:"] = LOCAL_FILES["sweeps/temp_llama_a.yaml:"]
LOCAL_FILES["sweeps/temp_llama_b.yaml:quick"] = LOCAL_FILES["sweeps/temp_llama_a.yaml:quick"]
LOCAL_FILES["sweeps/temp_llama_b.yaml:smollm"] = LOCAL_FILES["sweeps/temp_llama_a.yaml:smollm"]


def make_stand_ins() -> None:
    (STAND_INS / "llm").mkdir(parents=True, exist_ok=True)
    (STAND_INS / "llm" / "config.json").write_text("{}")
    (STAND_INS / "garg").mkdir(exist_ok=True)
    (STAND_INS / "garg" / "state.pt").touch()
    (STAND_INS / "sciq.json").write_text("[]")


def shipped() -> list[str]:
    """'sweeps/FILE.yaml:PROFILE' for every sweep file and each of its profiles ('' the file itself)."""
    entries = []
    for path in sorted((REPO / "sweeps").glob("*.yaml")):
        profiles = yaml.safe_load(path.read_text()).get("profiles") or {}
        entries += [f"sweeps/{path.name}:{profile}" for profile in ["", *profiles]]
    return entries


def planned_keys(entry: str) -> list[str]:
    path, _, profile = entry.partition(":")
    plan = load_plan(REPO / path, profile, LOCAL_FILES.get(entry, []))
    return [planned.cell.key for planned in plan.cells]


def pinned() -> dict[str, list[str]]:
    return json.loads(PINNED.read_text())


def test_every_shipped_sweep_is_pinned():
    assert sorted(set(shipped()) - set(pinned())) == [], "pin them: python tests/test_cell_keys.py --write"


@pytest.mark.parametrize("entry", sorted(pinned()))
def test_keys_unchanged(entry):
    make_stand_ins()
    assert planned_keys(entry) == pinned()[entry]


if __name__ == "__main__" and sys.argv[1:] == ["--write"]:
    make_stand_ins()
    keys = pinned() if PINNED.exists() else {}
    for entry in shipped():
        keys.setdefault(entry, planned_keys(entry))
    PINNED.write_text(json.dumps(keys, indent=1, sort_keys=True) + "\n")
    print(f"{PINNED}: {len(keys)} sweeps, {sum(map(len, keys.values()))} keys")
