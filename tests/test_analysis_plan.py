"""Analysing a sweep file reads only that file's cells: stale runs are left out, unstarted cells listed."""

import pandas as pd

from analysis.pipeline import restrict_to_plan


def test_restrict_to_plan_drops_stale_and_lists_unstarted():
    table = pd.DataFrame(
        {
            "cell_key": ["a", "a", "b", "old"],
            "model": "m",
            "err": [0.1, 0.2, 0.3, 0.4],
            "param.train.steps": ["9", "9", "9", "60"],
        }
    )
    missing = pd.DataFrame(
        [
            {"cell_key": "c", "run_id": "r3", "name": "c", "status": "failed", "error": "boom"},
            {"cell_key": "gone", "run_id": "r9", "name": "gone", "status": "running", "error": ""},
        ]
    )
    planned = {"a": "cell a", "b": "cell b", "c": "cell c", "d": "cell d"}
    kept, still_missing, notes = restrict_to_plan(table, missing, planned)
    assert sorted(kept["cell_key"].unique()) == ["a", "b"] and len(kept) == 3
    assert dict(zip(still_missing["cell_key"], still_missing["status"])) == {
        "c": "failed",
        "d": "not started",
    }
    assert notes == [
        "1 complete cells of the experiment are not cells of this sweep file as given (they have "
        "train.steps = 60); left out (analyse them with the --set they were made with)"
    ]


def test_restrict_to_plan_with_nothing_missing():
    table = pd.DataFrame({"cell_key": ["a"], "err": [0.1]})
    kept, still_missing, notes = restrict_to_plan(table, pd.DataFrame(), {"a": "cell a"})
    assert len(kept) == 1 and still_missing.empty and notes == []
