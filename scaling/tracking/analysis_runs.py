"""Analysis runs: what ``python -m analysis`` made (table, figures, report), logged as a finished run of the
sweep's experiment, nested under the sweep's parent run."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from ..redact import redact
from .retry import retrying
from .tracker import Tracker


def log_outputs_run(
    tracker: Tracker,
    experiment: str,
    run_name: str,
    tags: dict[str, str],
    files: list[tuple[str | Path, str | None]],
    late: Callable[[str], list[tuple[str | Path, str | None]]] | None = None,
) -> str:
    """A finished run of ``experiment`` (nested under the sweep's parent run when there is one) holding
    ``files`` as artifacts, each (path, artifact sub-directory or None); its run id (analysis uses it).
    ``late(run_id)`` gives more files made once the run's id is known (a report that names its run)."""
    experiment_id = tracker.experiment_id(experiment)
    if experiment_id is None:
        raise LookupError(f"no MLflow experiment named {experiment!r} in {redact(tracker.uri)}")
    tags = dict(tags)
    parent = tracker.sweep_parent(experiment_id, tags.get("sweep", experiment))
    if parent:
        tags["mlflow.parentRunId"] = parent
    run = retrying(
        lambda: tracker.client.create_run(experiment_id, run_name=run_name, tags=tags), "creating run"
    )
    for path, sub in [*files, *(late(run.info.run_id) if late else [])]:
        retrying(
            lambda: tracker.client.log_artifact(run.info.run_id, str(path), sub),
            f"logging {Path(path).name}",
        )
    retrying(lambda: tracker.client.set_terminated(run.info.run_id, "FINISHED"), "ending run")
    return run.info.run_id
