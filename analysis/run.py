"""The analysis of one sweep: load the table, fit, judge, draw, report and log to MLflow."""
from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd
import yaml

from . import plots
from .fit import fit_all
from .verdicts import answer_line, context_verdicts, format_verdicts, task_verdicts
from .load import load_table
from .report import write_report


class AnalysisError(RuntimeError):
    """The analysis cannot run (no such sweep or experiment, nothing complete yet)."""


@dataclass
class AnalysisResult:
    experiment: str
    out: Path
    table: pd.DataFrame
    missing: pd.DataFrame
    files: list[Path] = field(default_factory=list)
    fits: pd.DataFrame | None = None
    verdicts: pd.DataFrame | None = None
    run_id: str | None = None

    def summary(self) -> str:
        cells = self.table["cell_key"].nunique() if len(self.table) else 0
        lines = [f"analysis of {self.experiment}: {cells} complete cells, {len(self.missing)} not complete",
                 f"wrote {len(self.files)} files to {self.out}"]
        if self.verdicts is not None and len(self.verdicts):
            v = self.verdicts
            lines.append(format_verdicts(v[v["question"] == "context"], v[v["question"] == "task"]))
        if self.run_id:
            lines.append(f"logged to MLflow as run {self.run_id}")
        return "\n".join(lines)


def resolve_experiment(sweep: str | None, experiment: str | None, profile: str) -> tuple[str, dict]:
    """The experiment to read, and the sweep document (for the report) when a sweep file is given."""
    if experiment:
        return experiment, {}
    from scaling.plan import SweepError, load_plan

    try:
        plan = load_plan(sweep, profile)
    except SweepError as err:
        raise AnalysisError(str(err)) from None
    return plan.name, plan.document


def analyse(sweep: str | None, experiment: str | None = None, profile: str = "", tracking_uri: str | None = None,
            out: Path | None = None, bootstrap: int = 1000, log: bool = True) -> AnalysisResult:
    from scaling.tracking import resolve_tracking_uri

    name, document = resolve_experiment(sweep, experiment, profile)
    uri = resolve_tracking_uri(tracking_uri)
    try:
        table, missing = load_table(uri, name)
    except LookupError as err:
        raise AnalysisError(str(err)) from None
    if table.empty:
        raise AnalysisError(f"experiment {name!r} has no complete cells yet")
    out = (out or Path("analysis_out") / name).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result = AnalysisResult(name, out, table, missing)
    table.to_parquet(out / "table.parquet", index=False)
    result.files.append(out / "table.parquet")
    result.fits, result.verdicts = fits_and_verdicts(table, bootstrap)
    for frame, stem in ((result.fits, "fits"), (result.verdicts, "verdicts")):
        if frame is not None:
            frame.to_csv(out / f"{stem}.csv", index=False)
            result.files.append(out / f"{stem}.csv")
    result.files += plots.save(plots.context_scaling_figure(table, f"{name}: context scaling"),
                               out / "context_scaling")
    result.files += plots.save(plots.task_scaling_figure(table, f"{name}: task scaling"), out / "task_scaling")
    result.files.append(write_report(result, document, out / "report.html"))
    if log:
        result.run_id = log_analysis(uri, name, result)
    return result


def fits_and_verdicts(table: pd.DataFrame, bootstrap: int) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Scaling-law fits of every form and the context/task verdicts of every model, stacked."""
    fits = fit_all(table, n_boot=bootstrap)
    verdicts = pd.concat([context_verdicts(table, n_boot=bootstrap).assign(question="context"),
                          task_verdicts(table, n_boot=bootstrap).assign(question="task")], ignore_index=True)
    return fits, verdicts


def log_analysis(uri: str, experiment: str, result: AnalysisResult) -> str:
    """Log the analysis outputs as a run tagged kind=analysis in the sweep's experiment."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    exp = client.get_experiment_by_name(experiment)
    run = client.create_run(exp.experiment_id, run_name=f"analysis {experiment}",
                            tags={"kind": "analysis", "sweep": experiment})
    for path in result.files:
        client.log_artifact(run.info.run_id, str(path))
    with tempfile.TemporaryDirectory() as tmp:
        summary = Path(tmp) / "summary.yaml"
        summary.write_text(yaml.safe_dump({"cells": int(result.table["cell_key"].nunique()),
                                           "missing": int(len(result.missing)), "out": os.fspath(result.out)}))
        client.log_artifact(run.info.run_id, str(summary))
    client.set_terminated(run.info.run_id, "FINISHED")
    return run.info.run_id
