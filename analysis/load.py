"""MLflow -> one tidy table: a row per (cell, predictor, context length n).

Reads the cell runs of a sweep's experiment in bulk (paged ``search_runs``), downloads each run's
``curves.parquet`` in parallel, and caches it by run id (a complete run never changes), so reading a
sweep of thousands of runs takes seconds after the first time. Only runs tagged ``status=complete``
count; the others are listed as missing.

Columns: sweep, cell_key, run_id, model, T (float, inf = fresh tasks), N, seed, predictor ('model' for the
trained model, else the baseline's name), n, err, err_lo, err_hi, prompts, then every cell param as
``param.<name>`` (e.g. ``param.task.d``).
"""
from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pandas as pd

TABLE_COLUMNS = ["sweep", "cell_key", "run_id", "model", "T", "N", "seed", "predictor", "n", "err",
                 "err_lo", "err_hi", "prompts"]


def default_cache_dir() -> Path:
    return Path(os.environ.get("SCALING_CACHE", Path.home() / ".cache" / "icl-scaling" / "curves"))


def _client(tracking_uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=tracking_uri)


def cell_runs(tracking_uri: str, experiment: str) -> list:
    """Every cell run of the experiment (all pages)."""
    client = _client(tracking_uri)
    found = client.get_experiment_by_name(experiment)
    if found is None:
        raise LookupError(f"no MLflow experiment named {experiment!r} in {tracking_uri}; run the sweep first")
    runs, token = [], None
    while True:
        page = client.search_runs([found.experiment_id], "tags.kind = 'cell'", max_results=1000, page_token=token)
        runs.extend(page)
        token = page.token
        if not token:
            return runs


def _curves(client, run_id: str, cache: Path) -> pd.DataFrame:
    cached = cache / f"{run_id}.parquet"
    if cached.exists():
        return pd.read_parquet(cached)
    cache.mkdir(parents=True, exist_ok=True)
    local = client.download_artifacts(run_id, "curves.parquet", str(cache / f".{run_id}"))
    frame = pd.read_parquet(local)
    tmp = cache / f".{run_id}.parquet.tmp"
    frame.to_parquet(tmp, index=False)
    tmp.replace(cached)
    Path(local).unlink(missing_ok=True)
    return frame


def parse_T(value: str) -> float:
    return math.inf if value in ("inf", "Infinity") else float(value)


def load_table(tracking_uri: str, experiment: str, cache_dir: Path | None = None,
               workers: int = 16) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The tidy table of complete cells, and a table of the cells that are not complete (with status)."""
    client = _client(tracking_uri)
    runs = cell_runs(tracking_uri, experiment)
    complete = [r for r in runs if r.data.tags.get("status") == "complete"]
    missing = pd.DataFrame([{"cell_key": r.data.tags.get("cell_key"), "run_id": r.info.run_id,
                             "name": r.info.run_name, "status": r.data.tags.get("status", ""),
                             "error": ((r.data.tags.get("error") or "").strip().splitlines() or [""])[-1]}
                            for r in runs if r.data.tags.get("status") != "complete"])
    cache = cache_dir or default_cache_dir()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        curves = list(pool.map(lambda r: _curves(client, r.info.run_id, cache), complete))
    frames = []
    for run, curve in zip(complete, curves):
        params = run.data.params
        frame = curve.copy()
        frame.insert(0, "sweep", run.data.tags.get("sweep", experiment))
        frame.insert(1, "cell_key", run.data.tags["cell_key"])
        frame.insert(2, "run_id", run.info.run_id)
        frame.insert(3, "model", params.get("model.name") or params.get("model.arch", "?"))
        frame.insert(4, "T", parse_T(params["T"]))
        frame.insert(5, "N", int(params["N"]))
        frame.insert(6, "seed", int(params["seed"]))
        for name, value in params.items():
            frame[f"param.{name}"] = value
        frames.append(frame)
    if not frames:
        return pd.DataFrame(columns=TABLE_COLUMNS), missing
    table = pd.concat(frames, ignore_index=True)
    lead = TABLE_COLUMNS + sorted(c for c in table.columns if c not in TABLE_COLUMNS)
    return table[lead].sort_values(["model", "T", "N", "seed", "predictor", "n"], ignore_index=True), missing
