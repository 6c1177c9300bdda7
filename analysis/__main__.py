"""``python -m analysis sweeps/smoke.yaml`` (or ``--experiment NAME``): MLflow -> table, fits, figures.

Writes into ``--out`` (default ``analysis_out/<experiment>``): ``table.parquet`` (the tidy table),
``fits.csv`` (scaling-law fits with intervals), ``verdicts.csv`` (does each model context-/task-scale?),
the figures of the sweep's layout as PNG and SVG (``fig1.png`` for fig1*; ``context_scaling`` and
``task_scaling`` for other names), ``report.html``; and logs all of it to MLflow as a run tagged
``kind=analysis`` under the sweep's parent run.

``--compare A B`` (sweep files or experiment names), or ``--experiment A --experiment B``: one report
comparing two sweeps, in ``analysis_out/A-vs-B``, logged to A's experiment.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .figures import LAYOUTS
from .run import AnalysisError, analyse, compare

DESCRIPTION = """\
Analyse a sweep: read its complete cells from MLflow into one table, fit the
scaling laws, judge which models context-scale and task-scale, draw the
figures and write one HTML report, in analysis_out/<experiment> (or --out).
The analysis is also logged to MLflow, as a run under the sweep's parent run.
With two sweeps (--compare A B, or --experiment twice): one report comparing
them, in analysis_out/A-vs-B, logged to A's experiment."""

EPILOG = """\
examples:
  python -m analysis sweeps/smoke.yaml
  python -m analysis sweeps/fig1.yaml --profile quick      experiment fig1-quick
  python -m analysis --experiment smoke --tracking-uri sqlite:///other.db
  python -m analysis --compare sweeps/fig1.yaml fig1-quick

exit status:
  0  the report was written
  2  invalid input (no such sweep file or experiment, no complete cell,
     bad arguments); nothing was written"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m analysis",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", nargs="?", help="the sweep file whose experiment to analyse")
    parser.add_argument(
        "--experiment",
        action="append",
        default=[],
        help="an MLflow experiment name instead of a sweep file (twice: compare the two)",
    )
    parser.add_argument(
        "--compare",
        nargs=2,
        metavar=("A", "B"),
        help="compare two sweeps: each a sweep file or an experiment name",
    )
    parser.add_argument("--profile", default="", help="the sweep's profile (its experiment is NAME-PROFILE)")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)",
    )
    parser.add_argument("--out", default=None, help="output folder (default analysis_out/<experiment>)")
    parser.add_argument(
        "--layout",
        choices=sorted(LAYOUTS),
        metavar="NAME",
        help=f"figure layout, one of {', '.join(sorted(LAYOUTS))} (default: by the sweep's name)",
    )
    parser.add_argument("--bootstrap", type=int, default=1000, help="bootstrap resamples for fit intervals")
    parser.add_argument("--no-log", action="store_true", help="do not log the analysis to MLflow")
    args = parser.parse_args(argv)
    if len(args.experiment) > 2:
        parser.error("--experiment at most twice")
    if not (args.sweep or args.experiment or args.compare):
        parser.error("give a sweep file, --experiment NAME or --compare A B")
    return args


def source(spec: str) -> tuple[str | None, str | None]:
    """(sweep file, None) when ``spec`` is a file, else (None, experiment name)."""
    return (spec, None) if Path(spec).is_file() else (None, spec)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out) if args.out else None
    try:
        if args.compare or len(args.experiment) == 2:
            pair = [source(s) for s in args.compare] if args.compare else [(None, e) for e in args.experiment]
            a, b, report = compare(
                *pair, args.profile, args.tracking_uri, out, args.bootstrap, log=not args.no_log
            )
            print(f"A: {a.experiment}: {a.answer()}\nB: {b.experiment}: {b.answer()}\nwrote {report}")
            return 0
        result = analyse(
            args.sweep,
            args.experiment[0] if args.experiment else None,
            args.profile,
            args.tracking_uri,
            out,
            args.bootstrap,
            log=not args.no_log,
            layout=args.layout,
        )
    except AnalysisError as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


if __name__ == "__main__":
    sys.exit(main())
