"""The adaptive driver's record of its waves in MLflow, on the sweep's parent run (Tracker.log_wave and
read_waves: scaling.sweep.waves logs them, the driver and analysis read them back).

Per wave NN: the artifact ``adaptive/wave_NN.json`` (the decision: its cells, why, the compute spent), the
MLflow table ``adaptive/answers_NN.json`` (the answers before it, shown by the UI) and the metrics
``adaptive.settled``, ``adaptive.open`` and ``adaptive.spent`` at step NN.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
import time
from pathlib import Path
from typing import Callable

import pandas as pd

from .retry import retrying


def log_wave(client, run_id: str, record: dict, answers: pd.DataFrame) -> None:
    """One wave of an adaptive sweep on its parent run: ``adaptive/wave_NN.json`` (the decision: cells,
    why, compute spent), ``adaptive/answers_NN.json`` (the answers before it, a table the UI shows)
    and the metrics ``adaptive.settled``, ``adaptive.open``, ``adaptive.spent`` at step NN."""
    from mlflow.entities import Metric

    wave = int(record["wave"])
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / f"wave_{wave:02d}.json"
        path.write_text(json.dumps(record, indent=1, default=str))
        retrying(lambda: client.log_artifact(run_id, str(path), "adaptive"), "logging a wave")
    retrying(
        lambda: client.log_table(run_id, answers, f"adaptive/answers_{wave:02d}.json"),
        "logging a wave's answers",
    )
    now = int(time.time() * 1000)
    metrics = [
        Metric(f"adaptive.{name}", float(record[name]), now, wave) for name in ("settled", "open", "spent")
    ]
    retrying(lambda: client.log_batch(run_id, metrics=metrics), "logging a wave's metrics")


WAVE = re.compile(r"adaptive/wave_\d+\.json")


def read_waves(client, run_id: str, download: Callable[[str, str, str], str]) -> list[dict]:
    """The wave records on the sweep's parent run ``run_id``, in order (empty for a sweep run in full),
    each fetched by ``download(run_id, artifact, directory)`` (Tracker.download)."""
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")  # no bar per wave
    files = retrying(lambda: client.list_artifacts(run_id, "adaptive"), "listing waves")
    names = sorted(f.path for f in files if WAVE.fullmatch(f.path))
    out = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in names:
            local = download(run_id, name, tmp)
            out.append(json.loads(Path(local).read_text()))
    return out


def waves_in(root: Path) -> list[dict]:
    """The wave records among a parent run's artifacts in the local folder ``root`` (local_artifact_root), in
    the order read_waves gives them (none without an ``adaptive`` folder), read in place."""
    folder = root / "adaptive"
    names = sorted(f"adaptive/{p.name}" for p in folder.iterdir() if p.is_file()) if folder.is_dir() else []
    return [json.loads((root / name).read_text()) for name in names if WAVE.fullmatch(name)]
