"""MLflow -> one tidy table: a row per (cell, predictor, context length n), as analysis and the adaptive
driver read a sweep's cells.

Reads the cell runs of a sweep's experiment in bulk (paged ``search_runs``), downloads each run's
``curves.parquet`` in parallel, and caches it by run id (a complete run never changes), so reading a
sweep of thousands of runs takes seconds after the first time. Only runs tagged ``status=complete``
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
from urllib.parse import urlparse
from urllib.request import url2pathname

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from .tracking.tracker import Tracker

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


def cell_runs(tracking_uri: str, experiment: str, tracker: Tracker | None = None) -> list:
    """Every cell run of the experiment (all pages of one bulk search: no call per run)."""
    return (tracker or Tracker.existing(tracking_uri)).runs(experiment, "tags.kind = 'cell'")


def _curves(tracker: Tracker, run, cache: Path, in_place: bool = True) -> tuple[pa.Table, bool]:
    """A run's curves as an Arrow table, and whether they had to be downloaded (False: read from the cache
    or, for a store on this machine's file system, in place). Arrow, not pandas, per run: pandas' reader
    costs ~1.7 ms a file, three times Arrow's, and the tables are stacked once (tidy)."""
    run_id = run.info.run_id
    local = local_artifact(run.info.artifact_uri, "curves.parquet") if in_place else None
    if local is not None:
        return pq.read_table(local), False
    return _artifact(tracker, run_id, "curves.parquet", cache / f"{run_id}.parquet", run, read=pq.read_table)


def local_artifact(artifact_uri: str | None, name: str) -> Path | None:
    """The file of artifact ``name`` when the run's artifacts live on this machine's file system (a plain
    path or file:// URI, as the embedded default and a cluster's shared disk have them), else None (a
    server's mlflow-artifacts:, S3, ...: downloaded). Read in place: copying it into the cache first
    would only add a write."""
    if not artifact_uri:
        return None
    parsed = urlparse(artifact_uri)
    if parsed.scheme not in ("", "file") or (
        parsed.scheme == "file" and parsed.netloc not in ("", "localhost")
    ):
        return None
    path = Path(url2pathname(parsed.path)) / name
    return path if path.is_file() else None


def _artifact(
    tracker: Tracker, run_id: str, name: str, cached: Path, run=None, read=pd.read_parquet
) -> tuple[pd.DataFrame | pa.Table, bool]:
    """A parquet artifact of a complete run (``cached`` when read before) as ``read`` reads it, and whether
    it was downloaded."""
    if cached.exists():
        return read(cached), False
    cached.parent.mkdir(parents=True, exist_ok=True)
    # a folder of this call's own: another process (a second analysis, a replay) may be reading the same
    # run into the same cache at this moment; the last one's rename wins, both with the same file
    with tempfile.TemporaryDirectory(dir=cached.parent, prefix=f".{run_id}.") as own:
        uri = run.info.artifact_uri if run is not None else None
        downloaded = Path(tracker.download(run_id, name, own, uri))
        frame = read(downloaded)
        downloaded.replace(cached)  # the file as logged (renamed within the cache's file system)
    return frame, True


def load_units(
    tracking_uri: str, run_ids: list[str], cache_dir: Path | None = None, workers: int = 16
) -> dict[str, pd.DataFrame | None]:
    """Each complete run's ``units.parquet`` (the temperature scans' score per question or prompt,
    scaling.kinds.temperature.JobResult.units), or None for a run that logged none (a cell run before the
    scans recorded them); cached by run id beside the curves."""
    tracker = Tracker.existing(tracking_uri)
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
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy table of complete cells, and a table of the cells that are not complete (with status).
    Curves on this machine's file system are read in place (``in_place``; False downloads and caches them
    as a server's are).

    ``table.attrs``: ``downloads`` (curves fetched from the store; 0 when every run was cached or read in
    place),
    ``runs`` (run id -> run name of the complete cells) and ``experiment_id`` (for links to the MLflow UI).
    """
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar per run
    tracker = Tracker.existing(tracking_uri)
    runs = cell_runs(tracking_uri, experiment, tracker)
    complete = [r for r in runs if r.data.tags.get("status") == "complete"]
    missing = missing_cells(runs)
    cache = cache_dir or default_cache_dir()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        read = list(pool.map(lambda r: _curves(tracker, r, cache, in_place), complete))
    if not read:
        table = pd.DataFrame(columns=TABLE_COLUMNS)
    else:
        table = tidy(experiment, complete, [frame for frame, _ in read])
    table.attrs.update(
        downloads=sum(fetched for _, fetched in read),
        runs=RunNames({r.info.run_id: r.info.run_name for r in complete}),
        experiment_id=runs[0].info.experiment_id if runs else "",
    )
    return table, missing


def split_scans(table: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The curves (a row per cell, predictor and n) and the ridge-vs-lambda scans (the rows with a
    ``lam``, from cells with ``eval.lambda_n``; seed 001 Figs. 2-3, right panels), apart."""
    if "lam" not in table:
        return table, table.iloc[0:0].assign(lam=pd.Series(dtype=float))
    scan = table["lam"].notna().to_numpy()
    return table[~scan].drop(columns="lam").reset_index(drop=True), table[scan].reset_index(drop=True)


def missing_cells(runs: list) -> pd.DataFrame:
    """The cell runs that are not complete: key, run id, name, status and the last line of the error."""
    return pd.DataFrame(
        [
            {
                "cell_key": r.data.tags.get("cell_key"),
                "run_id": r.info.run_id,
                "name": r.info.run_name,
                "status": r.data.tags.get("status", ""),
                "error": ((r.data.tags.get("error") or "").strip().splitlines() or [""])[-1],
            }
            for r in runs
            if r.data.tags.get("status") != "complete"
        ],
        columns=["cell_key", "run_id", "name", "status", "error"],
    )


def tidy(experiment: str, runs: list, curves: list[pa.Table]) -> pd.DataFrame:
    """Stack the runs' curves with their cell columns; params join once per run, not per row."""
    cells = pd.DataFrame(
        [
            {
                "sweep": r.data.tags.get("sweep", experiment),
                "cell_key": r.data.tags["cell_key"],
                "run_id": r.info.run_id,
                "model": r.data.params.get("model.name") or r.data.params.get("model.arch", "?"),
                "T": parse_T(r.data.params["T"]),
                "N": int(r.data.params["N"]),
                "seed": int(r.data.params["seed"]),
                **{f"param.{k}": v for k, v in r.data.params.items()},
            }
            for r in runs
        ]
    )
    # promote: runs whose curves lack a column (``lam`` outside ridge scans) get nulls there, as pd.concat
    # gave NaN; each file's pandas metadata is dropped, the stack is converted once
    stacked = pa.concat_tables(
        [
            c.replace_schema_metadata(None).append_column(
                "run_id", pa.array([r.info.run_id] * c.num_rows, pa.string())
            )
            for r, c in zip(runs, curves)
        ],
        promote_options="permissive",
    ).to_pandas()
    table = cells.merge(stacked, on="run_id", how="inner", validate="one_to_many")
    lead = TABLE_COLUMNS + sorted(c for c in table.columns if c not in TABLE_COLUMNS)
    return table[lead].sort_values(["model", "T", "N", "seed", "predictor", "n"], ignore_index=True)
