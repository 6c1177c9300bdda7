"""Analysis runs in MLflow: what ``python -m analysis`` made (table, figures, report), logged as a finished
run of the sweep's experiment, nested under the sweep's parent run (Tracker.log_outputs_run)."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from .retry import retrying


def log_outputs_run(
    client,
    experiment_id: str,
    run_name: str,
    tags: dict[str, str],
    files: list[tuple[str | Path, str | None]],
    late: Callable[[str], list[tuple[str | Path, str | None]]] | None = None,
) -> str:
    """A finished run of the experiment (``tags`` name its parent run, if any) holding ``files`` as
    artifacts, each (path, artifact sub-directory or None); its run id (analysis uses it). ``late(run_id)``
    gives more files made once the run's id is known (a report that names its run)."""
    run = retrying(lambda: client.create_run(experiment_id, run_name=run_name, tags=tags), "creating run")
    for path, sub in [*files, *(late(run.info.run_id) if late else [])]:
        retrying(
            lambda: client.log_artifact(run.info.run_id, str(path), sub),
            f"logging {Path(path).name}",
        )
    retrying(lambda: client.set_terminated(run.info.run_id, "FINISHED"), "ending run")
    return run.info.run_id
