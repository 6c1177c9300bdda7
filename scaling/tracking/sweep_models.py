"""A model trained by a sweep, read back from its complete cell run: what a temperature scan of a sweep's
model (papers.temperature.kind, ``temperature.from_sweep`` and ``from_params``) scans."""

from __future__ import annotations

import tempfile
from pathlib import Path

import torch
import yaml

from scaling.cells import ALWAYS, Cell
from scaling.redact import redact
from scaling.tracking import STATUS_COMPLETE, Columns, TrackingError
from scaling.tracking.backends import existing_store
from scaling.tracking.uri import resolve_tracking_uri


def load_complete_model(experiment: str, params: dict[str, str], uri: str | None = None) -> tuple[dict, dict]:
    """(cell.yaml as a dict, model.pt state dict) of the one complete cell run of ``experiment`` whose
    settings match ``params`` (e.g. {"model.name": "gpt2", "T": "inf"}); the oldest when several match.
    A setting the run logs is matched against its param; one it does not log (it does not apply to the
    run's model and task: scaling.cells.Cell.params) against its cell.yaml, which keeps every setting."""
    tracker = existing_store(resolve_tracking_uri(uri))
    experiment_id = tracker.experiment_id(experiment)
    if experiment_id is None:
        raise TrackingError(
            f"no MLflow experiment {experiment!r} in {redact(tracker.uri)}; run that sweep first"
        )
    # every cell logs these; the others are matched run by run
    logged_by_all = {k: str(v) for k, v in sorted(params.items()) if k in ALWAYS}
    found = tracker.find_runs(
        experiment_id,
        tags={"kind": "cell", "status": STATUS_COMPLETE},
        params=logged_by_all,
        columns=Columns(params=tuple(params), metrics=(), tags=()),
    )
    with tempfile.TemporaryDirectory() as tmp:
        for run in sorted(found, key=lambda r: r.start_time or 0):
            logged = run.params
            if any(k in logged and logged[k] != str(v) for k, v in params.items()):
                continue
            run_id = run.run_id
            Path(tmp, run_id).mkdir()
            # with the run's artifact_uri: a copy where the artifacts are on this disk, else one request
            cell = yaml.safe_load(
                Path(tracker.download(run_id, "cell.yaml", f"{tmp}/{run_id}", run.artifact_uri)).read_text()
            )
            absent = [k for k in params if k not in logged]
            if absent:
                flat = Cell.from_dict(cell).flat()
                if any(flat.get(k) != str(params[k]) for k in absent):
                    continue
            path = tracker.download(run_id, "model.pt", f"{tmp}/{run_id}", run.artifact_uri)
            return cell, torch.load(path, map_location="cpu", weights_only=True)
    raise TrackingError(f"no complete cell run in {experiment!r} has settings {params}")
