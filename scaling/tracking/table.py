"""The tracking store -> one tidy table: a row per (cell, predictor, context length n), as analysis and the
adaptive driver read a sweep's cells.

Reads the cell runs of a sweep's experiment in bulk (TrackingStore.runs_of_sweep: one paged search, only
the columns the table uses), reads each run's ``curves.parquet`` in parallel (in place when it lies on
this machine, else downloaded and cached by run id: a complete run never changes), so reading a sweep of
thousands of runs takes seconds after the first time. Only runs tagged ``status=complete``
count; the others are listed as missing.

Columns: sweep, cell_key, run_id, model, T (float, inf = fresh tasks), N, seed, predictor ('model' for the
trained model, else the baseline's name), n, err, err_lo, err_hi, prompts, then every cell param as
``param.<name>`` (e.g. ``param.task.d``; a cell logs only the settings that apply to it, so a setting is NaN
in the rows of the cells it does not apply to: ``param.model.n_layer`` of an MLP); and ``lam`` when cells
scanned ridge's lambda (``split_scans`` takes those rows apart).
"""

from __future__ import annotations

import math
import os
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from scaling.aside import Aside
from scaling.tracking import STATUS_COMPLETE, Columns, RunRecord, TrackingStore
from scaling.tracking.backends import existing_store
from scaling.tracking.uri import local_artifact

UNITS = "units.parquet"
TABLE_COLUMNS = [
    "sweep",
    "cell_key",
    "run_id",
    "model",
    "T",
    "N",
    "seed",
    "predictor",
    "n",
    "err",
    "err_lo",
    "err_hi",
    "prompts",
]


class RunNames(dict):
    """Run id -> run name of a table's complete cells (``table.attrs["runs"]``), shared by every copy.

    pandas deep-copies a frame's attrs into each frame made from it (a filter, a merge, every part of a
    groupby): a plain dict of 2,000 names, copied some 60,000 times, was half of a 2,000-cell analysis.
    A complete run's name never changes, so a copy is the same object."""

    def __deepcopy__(self, memo):
        return self


def default_cache_dir() -> Path:
    return Path(os.environ.get("SCALING_CACHE", Path.home() / ".cache" / "icl-scaling" / "curves"))


# what the table reads of each cell run: every param (as ``param.<name>``), no metric, two tags
TABLE_READS = Columns(metrics=(), tags=("sweep", "error"))


def cell_runs(
    tracking_uri: str, experiment: str, tracker: TrackingStore | None = None, columns: Columns = TABLE_READS
) -> list[RunRecord]:
    """Every cell run of the experiment (all pages of one bulk search: no call per run), each with the
    ``columns`` read."""
    return (tracker or existing_store(tracking_uri)).runs_of_sweep(experiment, columns=columns)


def _curves(
    tracker: TrackingStore, run: RunRecord, cache: Path, in_place: bool = True
) -> tuple[pa.Table, bool]:
    """A run's curves as an Arrow table, and whether they had to be downloaded (False: read from the cache
    or, for a store on this machine's file system, in place). Arrow, not pandas, per run: pandas' reader
    costs ~1.7 ms a file, three times Arrow's, and the tables are stacked once (tidy)."""
    local = local_artifact(run.artifact_uri, "curves.parquet") if in_place else None
    if local is not None:
        return read_parquet(local), False
    cached = cache / f"{run.run_id}.parquet"
    return _artifact(tracker, run.run_id, "curves.parquet", cached, run.artifact_uri, read=read_parquet)


def read_parquet(path: str | Path) -> pa.Table:
    """One small parquet file as an Arrow table: the table ``pq.read_table`` gives, schema metadata and
    all, at less than half its cost (no dataset is set up for one file: 0.3 ms a file, not 0.7 ms)."""
    with pq.ParquetFile(path) as file:
        return file.read()


def _artifact(
    tracker: TrackingStore,
    run_id: str,
    name: str,
    cached: Path,
    artifact_uri: str | None = None,
    read=pd.read_parquet,
) -> tuple[pd.DataFrame | pa.Table, bool]:
    """A parquet artifact of a complete run (``cached`` when read before) as ``read`` reads it, and whether
    it was downloaded (from the run's ``artifact_uri`` when known: no request for the run first)."""
    if cached.exists():
        return read(cached), False
    cached.parent.mkdir(parents=True, exist_ok=True)
    # a folder of this call's own: another process (a second analysis, a replay) may be reading the same
    # run into the same cache at this moment; the last one's rename wins, both with the same file
    with tempfile.TemporaryDirectory(dir=cached.parent, prefix=f".{run_id}.") as own:
        downloaded = Path(tracker.download(run_id, name, own, artifact_uri))
        frame = read(downloaded)
        downloaded.replace(cached)  # the file as logged (renamed within the cache's file system)
    return frame, True


def load_units(
    tracking_uri: str, run_ids: list[str], cache_dir: Path | None = None, workers: int = 16
) -> dict[str, pd.DataFrame | None]:
    """Each complete run's ``units.parquet`` (the temperature scans' score per question or prompt,
    papers.temperature.kind.JobResult.units), or None for a run that logged none (a cell run before the
    scans recorded them); cached by run id beside the curves."""
    tracker = existing_store(tracking_uri)
    cache = cache_dir or default_cache_dir()

    def one(run_id: str) -> pd.DataFrame | None:
        cached = cache / f"{run_id}.{UNITS}"
        if not cached.exists() and UNITS not in tracker.artifact_names(run_id):
            return None
        return _artifact(tracker, run_id, UNITS, cached)[0]

    with ThreadPoolExecutor(max_workers=workers) as pool:
        return dict(zip(run_ids, pool.map(one, run_ids)))


def parse_T(value: str) -> float:
    return math.inf if value in ("inf", "Infinity") else float(value)


def load_table(
    tracking_uri: str,
    experiment: str,
    cache_dir: Path | None = None,
    workers: int = 16,
    in_place: bool = True,
    runs: list[RunRecord] | None = None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy table of complete cells, and a table of the cells that are not complete (with status).
    Curves on this machine's file system are read in place (``in_place``; False downloads and caches them
    as a server's are). ``runs``: the experiment's cell runs (``cell_runs``) when read already.

    ``table.attrs``: ``downloads`` (curves fetched from the store; 0 when every run was cached or read in
    place),
    ``runs`` (run id -> run name of the complete cells) and ``experiment_id`` (for links to the MLflow UI).
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar per run
    runs = cell_runs(tracking_uri, experiment) if runs is None else runs
    complete = [r for r in runs if r.status == STATUS_COMPLETE]
    missing = missing_cells(runs)
    cache = cache_dir or default_cache_dir()
    local = [local_artifact(r.artifact_uri, "curves.parquet") for r in complete] if in_place else []
    if len(complete) >= FORKED_READ and all(local):
        stacks, downloads = read_in_place(complete, local), 0
    else:
        tracker = existing_store(tracking_uri)
        with ThreadPoolExecutor(max_workers=workers) as pool:
            read = list(pool.map(lambda r: _curves(tracker, r, cache, in_place), complete))
        stacks, downloads = [stacked(complete, [frame for frame, _ in read])], sum(f for _, f in read)
    table = tidy(experiment, complete, stacks) if complete else pd.DataFrame(columns=TABLE_COLUMNS)
    table.attrs.update(
        downloads=downloads,
        runs=RunNames({r.run_id: r.name for r in complete}),
        experiment_id=runs[0].experiment_id if runs else "",
    )
    return table, missing


def split_scans(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The curves (a row per cell, predictor and n) and the ridge-vs-lambda scans (the rows with a
    ``lam``, from cells with ``eval.lambda_n``; seed 001 Figs. 2-3, right panels), apart."""
    if "lam" not in table:
        return table, table.iloc[0:0].assign(lam=pd.Series(dtype=float))
    scan = table["lam"].notna().to_numpy()
    return table[~scan].drop(columns="lam").reset_index(drop=True), table[scan].reset_index(drop=True)


def missing_cells(runs: list[RunRecord]) -> pd.DataFrame:
    """The cell runs that are not complete: key, run id, name, status and the last line of the error."""
    return pd.DataFrame(
        [
            {
                "cell_key": r.cell_key,
                "run_id": r.run_id,
                "name": r.name,
                "status": r.status,
                "error": ((r.tags.get("error") or "").strip().splitlines() or [""])[-1],
            }
            for r in runs
            if r.status != STATUS_COMPLETE
        ],
        columns=["cell_key", "run_id", "name", "status", "error"],
    )


# From this many runs whose curves lie on this machine, a forked child reads half of them while this process
# reads the other half: reading a file costs ~0.35 ms of CPU, most of it Arrow's Python side, so threads
# only queue for the GIL (16 of them took more time than one: 4.0 s for 10,000 files against 3.7 s)
FORKED_READ = 2000


def read_in_place(runs: list[RunRecord], paths: list[Path]) -> list[pa.Table]:
    """The runs' curves read from their files (``paths``), stacked in two parts (``stacked``, in the runs'
    order): the second half read by a forked child (scaling.aside) while this process reads the first; all
    here where no child can be forked."""
    half = len(runs) // 2

    def read(part: slice) -> pa.Table:
        return stacked(runs[part], [read_parquet(p) for p in paths[part]])

    # one chunk, not one per file, comes back through the pipe (pickling 5,000 chunks took a second)
    child = Aside(lambda: read(slice(half, None)).combine_chunks())
    first = read(slice(0, half))
    second = child.result()
    if second is None:  # not forked (another thread runs), or the child failed: read here, errors and all
        second = read(slice(half, None))
    return [first, second]


def stacked(runs: list[RunRecord], curves: list[pa.Table]) -> pa.Table:
    """The runs' curves in one Arrow table, each row with its ``run_id``. Runs whose curves lack a column
    (``lam`` outside ridge scans) get nulls there, as pd.concat gave NaN; each file's pandas metadata is
    dropped."""
    return pa.concat_tables(
        [
            c.replace_schema_metadata(None).append_column(
                "run_id", pa.array([r.run_id] * c.num_rows, pa.string())
            )
            for r, c in zip(runs, curves)
        ],
        promote_options="permissive",
    )


def tidy(experiment: str, runs: list[RunRecord], stacks: list[pa.Table]) -> pd.DataFrame:
    """The runs' curves (``stacks``: parts of ``stacked``, in the runs' order) with their cell columns; params
    join once per run, not per row. The table ``cells.merge(curves, on="run_id", how="inner")`` sorted by
    SORT_KEYS gives, row for row and bit for bit (tests/test_table_tidy.py), each column taken once (a merge
    then a sort took each of the ~40 string columns twice: 0.9 s of the 10,000-cell analysis)."""
    cells = pd.DataFrame(
        [
            {
                "sweep": r.tags.get("sweep", experiment),
                "cell_key": r.cell_key,
                "run_id": r.run_id,
                "model": r.params.get("model.name") or r.params.get("model.arch", "?"),
                "T": parse_T(r.params["T"]),
                "N": int(r.params["N"]),
                "seed": int(r.params["seed"]),
                **{f"param.{k}": v for k, v in r.params.items()},
            }
            for r in runs
        ]
    )
    curves = pa.concat_tables(stacks, promote_options="permissive").to_pandas()  # converted once
    shared = sorted(set(cells) & set(curves) - {"run_id"})
    if shared:  # a merge would keep both as <name>_x and <name>_y, and a reader find neither
        raise ValueError(
            f"the curves of {experiment!r} have columns that the cells' columns also name: {shared}; a"
            " kind's curves.parquet names what varies within a cell (predictor, n, err, ...), and the cell's"
            " settings come from its run's params"
        )
    left, right = inner_rows(cells["run_id"], curves["run_id"])
    side = {**{c: (cells, left) for c in cells}, **{c: (curves, right) for c in curves if c != "run_id"}}

    def taken(column: str, rows: np.ndarray | None = None) -> pd.Series:  # the merged table's column
        frame, at = side[column]
        return frame[column].take(at if rows is None else at[rows]).reset_index(drop=True)

    order = pd.DataFrame({k: taken(k) for k in SORT_KEYS}).sort_values(list(SORT_KEYS)).index.to_numpy()
    lead = TABLE_COLUMNS + sorted(c for c in side if c not in TABLE_COLUMNS)
    return pd.DataFrame({c: taken(c, order) for c in lead})


SORT_KEYS = ("model", "T", "N", "seed", "predictor", "n")


def inner_rows(left: pd.Series, right: pd.Series) -> tuple[np.ndarray, np.ndarray]:
    """The row positions (in ``left``, in ``right``) of an inner join of unique ``left`` keys with ``right``
    keys, in pandas' order: by left row, then by right row; a key twice in ``left`` is pandas'
    MergeError (merge's validate="one_to_many")."""
    if not left.is_unique:
        raise pd.errors.MergeError("Merge keys are not unique in left dataset; not a one-to-many merge")
    at = pd.Index(left).get_indexer(right)  # each right row's left row, -1 where none
    matched = np.flatnonzero(at >= 0)
    by_left = np.argsort(at[matched], kind="stable")
    return at[matched][by_left], matched[by_left]
