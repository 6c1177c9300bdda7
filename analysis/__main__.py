"""``python -m analysis sweeps/smoke.yaml`` (or ``--experiment NAME``): MLflow -> table, verdicts, figures.

Builds one ``Request`` (analysis/plugin.py) and runs the pipeline (analysis/pipeline.py) with the plug-in of
the sweep's experiment kind. Writes into ``--out`` (default ``analysis_out/<experiment>``): ``table.parquet``
(the tidy table), ``verdicts.csv``, the figures as PNG and SVG, ``report.html``, and what the kind adds (a
training sweep: ``fits.csv``, scaling-law fits with intervals; its figures in the sweep's layout, ``fig1.png``
for fig1*, ``context_scaling`` and ``task_scaling`` for other names); and logs all of it to MLflow as a run
tagged ``kind=analysis`` under the sweep's parent run.

``--set KEY=VALUE`` (repeatable): with a sweep file, the cells of the sweep run with the same ``--set``;
with ``--experiment``, the cells whose setting KEY is VALUE (one variant of a sweep; cells that differ
beyond the grid axes are never pooled, see scaling/judge/provenance.py).

``--compare A B`` (sweep files or experiment names), or ``--experiment A --experiment B``: one report
comparing two sweeps, in ``analysis_out/A-vs-B``, logged to A's experiment.

``--margin 0.05``: the verdicts' practical margin (scaling.judge.verdicts.Rule.threshold): a drop whose
interval lies above it scales, one above 0 and under it scales weakly; the report states it with the rule.

``--paper sweeps/fig*.yaml sweeps/stat_*.yaml sweeps/temp_*.yaml [--profile quick]``: the reproduction report
of the three papers (analysis/paper.py): every given sweep analysed, each of the papers' claims checked, one
page in ``analysis_out/paper[-PROFILE]/report.html`` (``FILE:PROFILE`` gives one file its own profile).
"""

from __future__ import annotations

import argparse
import gc
import sys
from pathlib import Path

from scaling.judge.verdicts import Rule
from scaling.planning.variants import add_set_argument
from scaling.redact import redact
from scaling.tracking import TrackingError

from .claims import tally
from .compare import compare
from .paper import analyse_figures, commands, papers, profiles_read, write_paper
from .pipeline import analyse
from .plugin import AnalysisError, Request

DESCRIPTION = """\
Analyse a sweep: read its complete cells from MLflow into one table, fit the
scaling laws, judge which models context-scale and task-scale, draw the
figures and write one HTML report, in analysis_out/<experiment> (or --out).
The analysis is also logged to MLflow, as a run under the sweep's parent run.
With two sweeps (--compare A B, or --experiment twice): one report comparing
them, in analysis_out/A-vs-B, logged to A's experiment. With --paper and the
papers' sweep files: the reproduction report of seeds 001, 003 and 004."""

EPILOG = """\
examples:
  python -m analysis sweeps/smoke.yaml
  python -m analysis sweeps/fig1.yaml --profile quick      experiment fig1-quick
  python -m analysis --experiment smoke --tracking-uri sqlite:///other.db
  python -m analysis --compare sweeps/fig1.yaml fig1-quick
  python -m analysis sweeps/smoke.yaml --set train.steps=300   as swept
  python -m analysis --paper sweeps/fig*.yaml sweeps/stat_*.yaml sweeps/temp_*.yaml --profile quick

exit status:
  0  the report was written
  2  invalid input (no such sweep file, store or experiment, no complete
     cell, bad arguments; a tracking server that does not answer); nothing
     was written (a store is never created)"""


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
    add_set_argument(
        parser, "the cells made with this --set (sweep file), or with this setting (--experiment)"
    )
    parser.add_argument(
        "--paper",
        nargs="+",
        metavar="SWEEP",
        help="the reproduction report of seeds 001, 003 and 004 over these sweep files "
        "(FILE:PROFILE: that file at its own profile)",
    )
    parser.add_argument(
        "--ui-url",
        default="",
        help="the MLflow UI's address, to link run ids in the report "
        "(default: the tracking URI when it is a server)",
    )
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)",
    )
    parser.add_argument("--out", default=None, help="output folder (default analysis_out/<experiment>)")
    parser.add_argument(
        "--layout",
        metavar="NAME",
        help="figure layout of the sweep's kind (the training kind's: fig1 .. fig8, smoke, generic;"
        " default: by the sweep's name)",
    )
    parser.add_argument(
        "--bootstrap", type=int, default=1000, help="bootstrap resamples of seed 004's scan intervals"
    )
    parser.add_argument(
        "--margin",
        type=float,
        default=Rule.threshold,
        help="the verdicts' practical margin: a drop scales when its interval lies above it, scales weakly "
        f"when above 0 and under it (default {Rule.threshold:g}; stated in the report)",
    )
    parser.add_argument("--no-log", action="store_true", help="do not log the analysis to MLflow")
    args = parser.parse_args(argv)
    if len(args.experiment) > 2:
        parser.error("--experiment at most twice")
    if not (args.sweep or args.experiment or args.compare or args.paper):
        parser.error("give a sweep file, --experiment NAME, --compare A B or --paper SWEEP...")
    if args.paper and (args.sweep or args.experiment or args.compare):
        parser.error("--paper takes its own sweep files: give no other sweep, --experiment or --compare")
    if not 0 <= args.margin < 1:
        parser.error(f"--margin {args.margin:g}: the practical margin is a fraction in [0, 1) (default 0.05)")
    bad = [s for s in args.overrides if "=" not in s]
    if bad:
        parser.error(f"--set {bad[0]}: expected KEY=VALUE")
    return args


def source(spec: str) -> tuple[str | None, str | None]:
    """(sweep file, None) when ``spec`` is a file, else (None, experiment name)."""
    return (spec, None) if Path(spec).is_file() else (None, spec)


def request_of(args: argparse.Namespace) -> Request:
    """The one request of this command (--compare and --paper take their sweeps beside it)."""
    return Request(
        sweep=args.sweep,
        experiment=args.experiment[0] if args.experiment else None,
        profile=args.profile,
        overrides=tuple(args.overrides),
        tracking_uri=args.tracking_uri,
        out=Path(args.out) if args.out else None,
        bootstrap=args.bootstrap,
        margin=args.margin,
        log=not args.no_log,
        layout=args.layout,
        ui_url=args.ui_url,
    )


def paper_summary(figures: dict, claims, page: Path, request: Request) -> list[str]:
    """What ``--paper`` prints: the claims' tally per paper, where the report is, what to run next (the
    first part not run, the report); each claim with its numbers or reason is in the report."""
    lines = [f"reproduction report{profiles_read(figures, request.profile)}: {tally(claims)}"]
    for paper in papers():
        parts = [figures[part.key] for part in paper.parts]
        ran = sum(f.result is not None for f in parts)
        rows = claims[claims["paper"] == paper.seed]
        lines.append(f"  seed {paper.seed}: {tally(rows)} ({ran} of {len(parts)} parts in the store)")
    waiting = [f for f in figures.values() if f.result is None]
    if waiting:
        lines.append("the report gives each claim not run with its reason and the commands that run it")
    lines += [f"wrote {page} and claims.csv", "next:"]
    if waiting:
        lines.append(f"  {commands(waiting[0], request)[0]}   # {waiting[0].part.title}, not run")
    return [*lines, f"  open {page}"]


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    request = request_of(args)
    try:
        if args.paper:
            figures = analyse_figures(args.paper, request)
            page, claims = write_paper(figures, request, args.paper)
            print("\n".join(paper_summary(figures, claims, page, request)))
            return 0
        if args.compare or len(args.experiment) == 2:
            pair = [source(s) for s in args.compare] if args.compare else [(None, e) for e in args.experiment]
            a, b, report = compare(request, *pair)
            print(f"A: {a.experiment}: {a.answer()}\nB: {b.experiment}: {b.answer()}\nwrote {report}")
            return 0
        result = analyse(request)
    except (AnalysisError, TrackingError) as err:  # TrackingError: no such store, or it does not answer
        print(f"error: {redact(str(err))}", file=sys.stderr)
        return 2
    print(result.summary())
    return 0


def run_command() -> int:
    """``main`` as the command line runs it: the objects made before it (the imports') and after it are
    frozen out of the garbage collector's reach. A collection of the oldest generation walks every tracked
    object, and the interpreter's exit walks them all once more: on the 10,000-cell store, 1.5 s of the
    exit and 0.5 s of collections during the analysis (docs/results.md). Frozen objects are never collected:
    the imports' live to the end anyway, and after ``main`` the process ends (its files are closed by then).
    """
    gc.freeze()
    status = main()
    gc.freeze()
    return status


if __name__ == "__main__":
    sys.exit(run_command())
