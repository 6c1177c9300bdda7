"""The benchmark suite: ``python -m benchmarks [--quick | --tiny] [--only NAME] [--json PATH]
[--reference PATH]``; ``python -m benchmarks --gpu [--smoke] [--out DIR]`` is the GPU script
(benchmarks/gpu.py, docs/gpu.md). ``--tiny`` runs every benchmark's code path at tiny sizes, once: whether
the suite runs here.

Prints one line per benchmark: its name, PASS/FAIL/SKIP/INFO, the ratio ours / reference with its target,
and both sides with their throughput; writes the same as JSON (default benchmarks/results.json). Each
ratio comes from the two sides timed alternately in this run (medians over repeats), never from stored
absolute times. Exit status 1 when a benchmark with a target fails.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

SUITES = ("training", "baselines", "cost", "sweep_overhead", "packing", "llm")


SUITE_BUDGET_S = 600  # issue 6: the whole suite runs in under 10 minutes on 2 CPU cores


def run_suite(name: str, size: str, update_cost_table: bool):
    """The results of benchmark ``name`` at ``size``: full, quick, or tiny (its code path only)."""
    if name == "training":
        from . import training

        return training.run(size)
    if name == "baselines":
        from . import baselines

        return baselines.run(size)
    if name == "llm":
        from . import llm_scan

        return llm_scan.run(size)
    if name in ("sweep_overhead", "packing"):
        from importlib import import_module

        from .common import Row

        return [Row(row) for row in import_module(f".{name}", __package__).run(size)]
    from . import step_cost

    return step_cost.run(size, update_cost_table)


DESCRIPTION = """\
Run the benchmark suite: one line per benchmark with its name, PASS, FAIL,
SKIP or INFO, the ratio ours / reference with its target, and both sides'
throughput; the same is written as JSON (--json). Each ratio comes from the
two sides timed alternately in this run, never from stored times."""

EPILOG = f"""\
benchmarks: {", ".join(SUITES)}

examples:
  python -m benchmarks                       the whole suite (under 10 minutes)
  python -m benchmarks --quick               small sizes, few repeats
  python -m benchmarks --tiny --json /tmp/tiny.json   every benchmark's code path,
                                             at tiny sizes: does the suite run here?
  python -m benchmarks --only packing --only sweep_overhead
  python -m benchmarks --gpu --smoke --out /tmp/gpu-smoke   the GPU script on tiny shapes

exit status:
  0  every benchmark with a target met it
  1  some benchmark missed its target (marked FAIL)
  2  bad arguments"""


def parse_args(argv=None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks",
        description=DESCRIPTION,
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="small sizes and few repeats (a smoke test)")
    size.add_argument(
        "--tiny",
        action="store_true",
        help="every benchmark's code path at tiny sizes, once: whether the suite runs here (its figures"
        " mean nothing, no target is judged)",
    )
    parser.add_argument(
        "--only",
        choices=SUITES,
        action="append",
        metavar="NAME",
        help="run only this benchmark (repeatable; the names are below)",
    )
    parser.add_argument("--json", default=str(Path(__file__).with_name("results.json")), help="results file")
    parser.add_argument(
        "--reference",
        default=None,
        help="a local checkout of dtsip/in-context-learning (default $ICL_REFERENCE): its own"
        " model is the reference side of the training benchmark",
    )
    parser.add_argument(
        "--update-cost-table",
        action="store_true",
        help="write the measured step costs to scaling/budget/cost_table.json",
    )
    gpu = parser.add_argument_group("the GPU script (benchmarks/gpu.py, docs/gpu.md)")
    gpu.add_argument("--gpu", action="store_true", help="run the GPU script instead of the suite")
    gpu.add_argument("--smoke", action="store_true", help="tiny shapes on any device (a CPU too)")
    gpu.add_argument(
        "--out", default=os.environ.get("OUT") or "gpu-results", help="where its files go ($OUT)"
    )
    gpu.add_argument(
        "--budget", type=float, default=None, help="seconds for all phases (default: their limits added)"
    )
    gpu.add_argument(
        "--phases",
        nargs="+",
        default=None,
        help="these phases, in this order (default: device fig1 packs cost checks; sweep: in a new process)",
    )
    gpu.add_argument("--tokenizer", default=None, help="a saved tokenizer for the LLM phase (default: chars)")
    args = parser.parse_args(argv)
    if args.tiny and args.update_cost_table:
        parser.error(
            "--update-cost-table: a --tiny run measures nothing to write; run the cost benchmark at"
            " its own size: python -m benchmarks --only cost --update-cost-table"
        )
    if args.phases:
        from .gpu import PHASES

        unknown = [p for p in args.phases if p not in PHASES]
        if unknown:
            parser.error(f"--phases: unknown {unknown}; known: {', '.join(PHASES)}")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.gpu:
        from . import gpu

        return gpu.main(args.out, args.smoke, args.budget, args.phases, args.tokenizer)
    if args.reference:
        os.environ["ICL_REFERENCE"] = str(Path(args.reference).resolve())
    size = "tiny" if args.tiny else "quick" if args.quick else "full"
    print(
        f"# {platform.processor() or platform.machine()}, torch {torch.__version__}, "
        f"{torch.get_num_threads()} threads, cuda: {torch.cuda.is_available()}"
        f"{f' ({size})' if size != 'full' else ''}",
        flush=True,
    )
    results, start, suite_seconds = [], time.perf_counter(), {}
    for name in args.only or SUITES:
        began = time.perf_counter()
        for result in run_suite(name, size, args.update_cost_table):
            print(result.line(), flush=True)
            results.append(result)
        suite_seconds[name] = round(time.perf_counter() - began, 1)
        print(f"# {name}: {suite_seconds[name]:.0f} s", flush=True)
    elapsed = time.perf_counter() - start
    failed = [r.name for r in results if r.status == "FAIL"]
    budget = "" if size != "full" or args.only else f" (the whole suite's budget: {SUITE_BUDGET_S} s)"
    print(
        f"# {len(results)} benchmarks in {elapsed:.0f} s{budget}; "
        f"{'FAILED: ' + ', '.join(failed) if failed else 'every target met'}"
    )
    Path(args.json).write_text(
        json.dumps(
            {
                "quick": args.quick,
                "size": size,
                "seconds": elapsed,
                "suite_seconds": suite_seconds,
                "torch": torch.__version__,
                "threads": torch.get_num_threads(),
                "results": [r.as_dict() for r in results],
            },
            indent=1,
            default=str,
        )
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
