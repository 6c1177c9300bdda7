"""scaling.tracking.table.tidy: the runs' curves joined to their cells' columns and sorted, each column taken
once, is the table that merging then sorting gives, row for row and bit for bit (the analysis' outputs depend
on its order): with ties on every sort key, runs of several models and T = inf, a run without curves, a curve
column only some runs have, and the runs in no particular order."""

import io
import math

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from scaling.tracking import RunRecord
from scaling.tracking.table import SORT_KEYS, TABLE_COLUMNS, stacked, tidy


def record(i: int, model: str, T: float, N: int, seed: int) -> RunRecord:
    params = {"model.name": model, "model.arch": "mlp", "T": "inf" if math.isinf(T) else str(int(T))}
    params |= {"N": str(N), "seed": str(seed), "task.d": "2", "job": ""}
    return RunRecord(
        f"r{i:03d}", f"run {i}", "1", f"k{i}", "complete", "FINISHED", None, i, i, {}, params, {}
    )


def curves(rng, ns: list[int], lam: bool) -> pa.Table:
    """One run's curves: each predictor at each n (twice for one: rows equal on every sort key)."""
    rows = [(p, n) for p in ("model", "ridge", "zero") for n in ns] + [("model", ns[0])]
    frame = pd.DataFrame({"predictor": [p for p, _ in rows], "n": [n for _, n in rows]})
    frame["err"], frame["err_lo"], frame["err_hi"] = rng.random((3, len(rows)))
    frame["prompts"] = 64
    if lam:
        frame["lam"] = rng.random(len(rows))
    return pa.Table.from_pandas(frame, preserve_index=False)


def merged_then_sorted(experiment: str, runs: list[RunRecord], stacks: list[pa.Table]) -> pd.DataFrame:
    """The table as the analysis made it before: one merge, then a sort of the joined table."""
    cells = pd.DataFrame(
        [
            {
                "sweep": r.tags.get("sweep", experiment),
                "cell_key": r.cell_key,
                "run_id": r.run_id,
                "model": r.params.get("model.name") or r.params.get("model.arch", "?"),
                "T": math.inf if r.params["T"] == "inf" else float(r.params["T"]),
                "N": int(r.params["N"]),
                "seed": int(r.params["seed"]),
                **{f"param.{k}": v for k, v in r.params.items()},
            }
            for r in runs
        ]
    )
    joined = pa.concat_tables(stacks, promote_options="permissive").to_pandas()
    table = cells.merge(joined, on="run_id", how="inner", validate="one_to_many")
    lead = TABLE_COLUMNS + sorted(c for c in table.columns if c not in TABLE_COLUMNS)
    return table[lead].sort_values(list(SORT_KEYS), ignore_index=True)


def parquet_bytes(frame: pd.DataFrame) -> bytes:
    out = io.BytesIO()
    frame.to_parquet(out)
    return out.getvalue()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tidy_is_the_merge_then_the_sort_bit_for_bit(seed):
    rng = np.random.default_rng(seed)
    lattice = [
        (m, T, N, s) for m in ("mlp", "gpt2") for T in (4.0, math.inf, 1.0) for N in (4, 8) for s in (1, 0)
    ]
    runs = [record(i, *cell) for i, cell in enumerate(lattice)]
    runs = [runs[i] for i in rng.permutation(len(runs))]  # the store's order, not the lattice's
    parts = [curves(rng, [1, 2, int(r.params["N"])], lam=i % 3 == 0) for i, r in enumerate(runs)]
    parts[5] = parts[5].slice(0, 0)  # a run without curves: not in the table
    half = len(runs) // 2
    stacks = [stacked(runs[:half], parts[:half]), stacked(runs[half:], parts[half:])]
    got, want = tidy("s", runs, stacks), merged_then_sorted("s", runs, stacks)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
    assert parquet_bytes(got) == parquet_bytes(want)
    assert runs[5].run_id not in set(got["run_id"]) and got["lam"].isna().any() and got["lam"].notna().any()


def test_a_run_twice_is_merges_error():
    runs = [record(0, "mlp", 4.0, 4, 0)] * 2
    table = stacked(runs, [curves(np.random.default_rng(0), [1, 2], lam=False)] * 2)
    with pytest.raises(pd.errors.MergeError):
        tidy("s", runs, [table])


@pytest.mark.parametrize("column", ["seed", "param.task.d"])
def test_curves_that_name_a_cell_column_are_a_clear_error(column):
    """A kind whose curves name a cell column (a merge would keep both, suffixed, and a reader find neither)
    is told which and why, not given a table without the column."""
    runs = [record(0, "mlp", 4.0, 4, 0)]
    part = curves(np.random.default_rng(0), [1, 2], lam=False)
    part = part.append_column(column, pa.array(["0"] * part.num_rows))
    said = rf"curves of 's' have columns that the cells' columns also name: \['{column}'\]"
    with pytest.raises(ValueError, match=said):
        tidy("s", runs, [stacked(runs, [part])])
