"""The sweep driver's command line: ``python -m scaling.sweep``'s arguments, its exit status and its exit.

Exit status: 0 when every cell is complete, 1 when some cell failed, 2 on invalid input, 130 when
interrupted (Ctrl-C: trials stop, checkpoints stay; the same command resumes).
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import sys

from scaling.planning.guards import GuardError
from scaling.planning.plan import SweepError
from scaling.planning.variants import add_set_argument

from ..redact import install_log_redaction, redact
from ..tracking import TrackingError
from .phases import run_sweep
from .run import RunOptions

DESCRIPTION = """\
Run a sweep: each cell of the sweep file (model x T x N x seed x ...) as a
Ray Tune trial that logs to MLflow. Cells already complete in MLflow are
skipped; the others resume from their last checkpoint, so the same command
continues a sweep after a crash or Ctrl-C. Every input is checked before any
work starts. In a terminal the progress is one live view (cells done,
running, pending, failed; each running cell's step; time taken and left);
elsewhere it is one line per trial started, done or failed. Both end with a
summary and the commands to run next (the analysis, the MLflow UI)."""


EPILOG = """\
examples:
  python -m scaling.sweep sweeps/smoke.yaml             local Ray, ./mlflow.db
  python -m scaling.sweep sweeps/smoke.yaml --dry-run   cells, state; no run
  python -m scaling.sweep sweeps/smoke.yaml --set train.steps=200 \\
      --set grid.T=[16,64]
  python -m scaling.sweep sweeps/fig1.yaml --profile quick
  python -m scaling.sweep sweeps/adaptive_mlp.yaml --adaptive    waves until
      the file's questions are settled or its budget is spent
  python -m scaling.sweep sweeps/fig1.yaml --address auto \\
      --tracking-uri http://mlflow:5000 --storage s3://bucket/runs

exit status:
  0    every cell is complete (--dry-run: the sweep would start here)
  1    some cell failed (each is listed with its error; rerun to retry)
  2    invalid input (sweep file, tracking store, storage, a cell that no
       node can hold, a local file it names missing, an --address that
       does not answer); nothing was written. --dry-run prints its plan
       first, then why the run would be refused here
  130  interrupted (Ctrl-C); checkpoints are kept, the same command resumes"""


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m scaling.sweep",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("sweep", help="the sweep file, e.g. sweeps/smoke.yaml")
    parser.add_argument(
        "--dry-run",
        action="store_true",
        help="print the plan and run nothing: where the cells' states are read from, whether the sweep runs"
        " here, each model's cells, trials and cost, every cell's resources and state (exit status 2 where"
        " the run would be refused here)",
    )
    add_set_argument(
        parser, "override a setting, e.g. --set train.steps=200 or --set grid.T=[16,64] (repeatable)"
    )
    parser.add_argument("--profile", default="", help="a named profile of the sweep file, e.g. quick")
    parser.add_argument("--address", default=None, help="join an existing Ray cluster ('auto' or host:port)")
    parser.add_argument(
        "--tracking-uri",
        default=None,
        help="MLflow tracking URI (default: $MLFLOW_TRACKING_URI, else sqlite:///mlflow.db here)",
    )
    parser.add_argument(
        "--storage",
        default=None,
        help="checkpoints and Tune state: a path or URI reachable by every node (default ./scaling_runs)",
    )
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of the embedded local Ray")
    parser.add_argument("--num-gpus", type=int, default=None, help="GPUs of the embedded local Ray")
    parser.add_argument(
        "--gpus",
        type=int,
        default=None,
        help="with --dry-run: the GPUs to give the wall time on (default: --num-gpus, else the cluster's"
        " or this machine's count)",
    )
    parser.add_argument(
        "--gpu-memory",
        default=None,
        metavar="SIZE",
        help="plan the GPU cells' packs for cards of this memory, e.g. 24GiB (default: the cluster's cards,"
        " else the CUDA cost table's)",
    )
    parser.add_argument(
        "--max-cells",
        type=int,
        default=None,
        help="allow a grid of up to this many cells (default: the cap of scaling.planning.guards.MAX_CELLS)",
    )
    parser.add_argument(
        "--autoscaling",
        action="store_true",
        help="the cluster adds nodes on demand: skip the check that every cell fits a node",
    )
    parser.add_argument(
        "--adaptive",
        action="store_true",
        help="run the lattice in waves that settle the file's `adaptive:` questions within its budget",
    )
    parser.add_argument(
        "--verbose", action="store_true", help="also show Ray's and Ray Tune's own messages and banners"
    )
    parser.add_argument(
        "--accept-plugin-changes",
        action="store_true",
        help="count cells trained with another source of one of your plug-ins at the same version as current"
        " (without it such a sweep is refused: give the plug-in a new version to train them anew)",
    )
    return parser.parse_args(argv)


EXIT_OK, EXIT_FAILED, EXIT_INVALID, EXIT_INTERRUPTED = 0, 1, 2, 130


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    install_log_redaction()
    args = parse_args(argv)
    resume = f"resume with the same command: python -m scaling.sweep {redact(shlex.join(argv))}"
    try:
        options = RunOptions(
            dry_run=args.dry_run,
            adaptive=args.adaptive,
            max_cells=args.max_cells,
            address=args.address,
            num_cpus=args.num_cpus,
            num_gpus=args.num_gpus,
            gpus=args.gpus,
            gpu_memory=args.gpu_memory,
            autoscaling=args.autoscaling,
            verbose=args.verbose,
            accept_plugin_changes=args.accept_plugin_changes,
        )
        outcome = run_sweep(
            args.sweep,
            args.profile,
            tuple(args.overrides),
            tracking_uri=args.tracking_uri,
            storage=args.storage,
            options=options,
        )
    except (SweepError, TrackingError, GuardError) as err:
        print(f"error: {redact(str(err))}", file=sys.stderr)
        return EXIT_INVALID
    except BrokenPipeError:
        if not args.dry_run:
            raise
        # a dry run read by `head`, which stopped reading: what it read is all it wanted (no second error)
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK
    except KeyboardInterrupt:  # a second Ctrl-C, or one before the trials started
        print(f"interrupted; {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    if outcome.failed:
        print(
            f"{len(outcome.failed)} cells failed (their errors are above and in MLflow, tag `error`);"
            f" fix the cause and {resume} (complete cells are skipped)",
            file=sys.stderr,
        )
        return EXIT_FAILED
    if outcome.interrupted:
        print(f"interrupted; {resume}", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_OK


def exit_now(code: int) -> None:
    """End the CLI process without the interpreter's teardown (~1.5 s of freeing torch, Ray and MLflow
    modules, per sweep): output flushed, logging closed and Ray shut down first; every MLflow write and
    checkpoint is already committed by then (the sweep run is ended before main returns)."""
    ray = sys.modules.get("ray")  # None unless the run imported Ray (a dry run: to read a cluster's nodes)
    if ray is not None and ray.is_initialized():
        ray.shutdown()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    exit_now(main())
