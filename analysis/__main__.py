"""``python -m analysis sweeps/smoke.yaml`` (or ``--experiment NAME``): MLflow -> table, fits, figures.

Writes into ``--out`` (default ``analysis_out/<experiment>``): ``table.parquet`` (the tidy table),
``fits.csv`` (scaling-law fits), ``verdicts.csv`` (does each model context-/task-scale?),
``context_scaling.{png,svg}``, ``task_scaling.{png,svg}``, ``report.html``; and logs all of it to MLflow
as a run tagged ``kind=analysis`` in the sweep's experiment.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .run import AnalysisError, analyse


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m analysis", description=__doc__.split("\n\n")[0])
    parser.add_argument("sweep", nargs="?", help="the sweep file whose experiment to analyse")
    parser.add_argument("--experiment", help="an MLflow experiment name instead of a sweep file")
    parser.add_argument("--profile", default="", help="the sweep's profile (its experiment is NAME-PROFILE)")
    parser.add_argument("--tracking-uri", default=None,
                        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)")
    parser.add_argument("--out", default=None, help="output folder (default analysis_out/<experiment>)")
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for fit intervals")
    parser.add_argument("--no-log", action="store_true", help="do not log the analysis to MLflow")
    args = parser.parse_args(argv)
    if not args.sweep and not args.experiment:
        parser.error("give a sweep file or --experiment NAME")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        result = analyse(args.sweep, args.experiment, args.profile, args.tracking_uri,
                         Path(args.out) if args.out else None, args.bootstrap, log=not args.no_log)
    except AnalysisError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
