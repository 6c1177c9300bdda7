"""Replay the adaptive policy on a store that holds a sweep's whole lattice, without training.

``python -m scaling.adaptive.replay sweeps/adaptive_mlp.yaml --tracking-uri sqlite:///full.db --out DIR``

The lattice is read once (scaling.tracking.table). A replay runs the policy of the sweep file's ``adaptive:``
section with a given policy seed (the order its seeds are drawn in, its tie-breaks), where "running" a wave
means reading its cells from the table; the answers after each wave are scored against the whole lattice's own
answers (the same policy's assessment of every cell):

- verdicts: the share of verdict answers whose label equals the lattice's ("context-scales",
  "inconclusive", ...);
- exponents, by consistency (``exponent_outcome``): an exponent answer is *right* when it claims a value
  (settled) and the whole lattice's estimate lies inside its interval (or both say "moot"), *open* when it
  does not claim one (not settled: open, or beyond the lattice's seeds), which is right too, counted apart,
  and *wrong* when it claims a value whose interval excludes the lattice's estimate (or claims "moot" where
  the lattice has an exponent, or a value where the lattice says "moot"); counts of each per row, and the
  share consistent (right or open);
- widths: the median width of the verdicts' drop intervals and of the exponents' intervals (NaN where there is
  none yet counts as the widest, 1 for a drop);
- settled: the share of answers settled.

Four references: random subsets of the lattice's cells (cells drawn in a random order until the next one
would pass the cost), one at each replay's final cost and ``--random-seeds`` at each of several shares of the
lattice's compute; the whole lattice with fewer seeds (the first k of the grid's); for each policy seed, the
even design at the budget (``balanced``: every point on the first k seeds of that seed order, k the most the
budget holds), which reads every answer, exponents included, on the same seeds as the lattice; and, for
each policy seed, an *oracle* (``oracle``): the least compute at which the lattice's verdicts can be read off
the first seeds of that seed order, if one knew for each verdict how many seeds it takes (a lower bound for
any policy that draws seeds in that order and settles nothing on fewer than ``min_seeds``; exponents aside).
Writes
``replay.csv`` (a row per method, policy seed, wave or cost), ``summary.md`` and ``replay.png``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd

from scaling.planning.plan import SweepError, load_plan
from scaling.planning.variants import add_set_argument
from scaling.tracking.table import load_table

from ..redact import redact
from ..tracking import TrackingError
from ..tracking.uri import resolve_tracking_uri
from .policy import Answer, Policy

NO_INTERVAL_WIDTH = 1.0  # a drop interval not yet measured counts as this wide (drops live in [-inf, 1])


def run_cells(table: pd.DataFrame, keys: set[str]) -> pd.DataFrame:
    return table[table["cell_key"].isin(keys)]


def replay(policy: Policy, table: pd.DataFrame, max_waves: int = 200) -> list[dict]:
    """The policy's path on a recorded lattice: after each wave, the cells run, compute spent and answers."""
    available = set(table["cell_key"])
    run: set[str] = set()
    keys = policy.first_wave()
    path = []
    for wave in range(1, max_waves + 1):
        run |= set(keys) & available
        answers = policy.assess(run_cells(table, run), run)
        path.append({"wave": wave, "cells": len(run), "spent": policy.lattice.cost(run), "answers": answers})
        keys, _, stop = policy.next_wave(answers, run)
        keys = [k for k in keys if k in available]
        if not keys:
            path[-1]["stop"] = stop
            return path
    path[-1]["stop"] = f"stopped after {max_waves} waves"
    return path


def random_subset(policy: Policy, available: set[str], cost: float, rng: np.random.Generator) -> set[str]:
    """Cells drawn in a random order while the total stays within ``cost``."""
    frame = policy.lattice.frame.loc[sorted(available)]
    order = rng.permutation(len(frame))
    costs = frame["cost"].to_numpy()[order]
    take = np.cumsum(costs) <= cost + 1e-9
    return set(frame.index[order[take]])


def fewer_seeds(policy: Policy, available: set[str], k: int, order: list[int] | None = None) -> set[str]:
    """The available cells of the first k seeds of ``order`` (the grid's seeds unless given)."""
    f = policy.lattice.frame.loc[sorted(available)]
    return set(f.index[f["seed"].isin((policy.lattice.seeds if order is None else order)[:k])])


def balanced(policy: Policy, available: set[str]) -> tuple[int, set[str]]:
    """(k, cells): every point of the lattice on the first k seeds of the policy's seed order, k the most
    seeds whose cells stay within the budget: the even design of that compute, which reads every answer
    (exponents included) on the same seeds, as the whole lattice does on all of them."""
    for k in range(len(policy.lattice.seeds), 0, -1):
        keys = fewer_seeds(policy, available, k, policy.seed_order)
        if policy.lattice.cost(keys) <= policy.budget + 1e-9:
            return k, keys
    return 0, set()


def oracle(policy: Policy, table: pd.DataFrame, reference: list[Answer]) -> tuple[float, dict[str, int]]:
    """(share of the lattice's compute, seeds per verdict): for each verdict answer, the first k >= min_seeds
    of the policy's seed order at which its label on those k seeds equals the lattice's (all of the lattice's
    seeds if none does); at each point, the most seeds any answer reading it takes. Any set of cells that
    holds a prefix of the seed order at each point and gives every verdict the lattice's label on at least
    min_seeds seeds costs at least this much."""
    lattice, available = policy.lattice, set(table["cell_key"])
    want = {a.id: a.label for a in reference if a.question.verdict}
    labels: dict[str, list[tuple[int, str]]] = {}
    points: dict[str, list[str]] = {}
    for k in range(policy.settings.min_seeds, len(lattice.seeds) + 1):
        keys = fewer_seeds(policy, available, k, policy.seed_order)
        for a in policy.assess(run_cells(table, keys), keys, exponents=False):
            labels.setdefault(a.id, []).append((k, a.label))
            points[a.id] = a.points
    seeds, need = {}, {}
    for answer, found in labels.items():
        seeds[answer] = next((k for k, label in found if label == want[answer]), len(lattice.seeds))
        for point in points[answer]:
            need[point] = max(need.get(point, 0), seeds[answer])
    keys = [
        key for point, k in need.items() for s in policy.seed_order[:k] for key in lattice.keys_at([point], s)
    ]
    return lattice.cost(keys) / lattice.total_cost, seeds


RIGHT, OPEN, WRONG = "right", "open", "wrong"


def exponent_outcome(answer: Answer, lattice: Answer) -> str:
    """An exponent answer judged by consistency with the whole lattice's answer to the same question:
    ``OPEN`` when it claims no value (not settled: the run reports it open, or beyond the lattice's seeds),
    ``RIGHT`` when it claims one (settled) and the lattice's point estimate lies inside its interval, or both
    say "moot" (the model does not scale along the exponent's axis), ``WRONG`` otherwise: its interval
    excludes the lattice's estimate, or it and the lattice disagree on "moot", or the lattice has no estimate
    to check the claim against. The lattice's own interval plays no part (on 6 seeds the plain MLP's is the
    fit's whole range, which any claim would fall in)."""
    if not answer.settled:
        return OPEN
    if answer.label == "moot" or lattice.label == "moot":
        return RIGHT if answer.label == lattice.label else WRONG
    inside = math.isfinite(lattice.centre) and answer.lo <= lattice.centre <= answer.hi
    return RIGHT if inside else WRONG


def score(answers: list[Answer], reference: list[Answer]) -> dict:
    """How ``answers`` compare with the whole lattice's (see the module docstring)."""
    ref = {a.id: a for a in reference}
    verdicts = [a for a in answers if a.question.verdict]
    exponents = [a for a in answers if not a.question.verdict]
    agree = [a.label == ref[a.id].label for a in verdicts]
    outcomes = [exponent_outcome(a, ref[a.id]) for a in exponents]
    drop_w = [a.hi - a.lo if math.isfinite(a.lo) else NO_INTERVAL_WIDTH for a in verdicts]
    exp_w = [a.hi - a.lo for a in exponents if a.label != "moot"]
    exp_w = [w if math.isfinite(w) else math.inf for w in exp_w]
    return {
        "verdicts_agree": float(np.mean(agree)) if agree else math.nan,
        "exponents_right": outcomes.count(RIGHT),
        "exponents_open": outcomes.count(OPEN),
        "exponents_wrong": outcomes.count(WRONG),
        "exponents_consistent": 1 - outcomes.count(WRONG) / len(outcomes) if outcomes else math.nan,
        "settled": float(np.mean([a.settled for a in answers])) if answers else math.nan,
        "drop_width": float(np.median(drop_w)) if drop_w else math.nan,
        "exponent_width": float(np.median(exp_w)) if exp_w else math.nan,
    }


def outcomes(row) -> str:
    """'1 right, 1 open, 0 wrong': a row's exponent answers by the consistency rule."""
    return ", ".join(f"{int(row[f'exponents_{o}'])} {o}" for o in (RIGHT, OPEN, WRONG))


def _policy_run(plan, table: pd.DataFrame, seed: int, reference: list[Answer]) -> tuple[list[dict], str]:
    """One replay with policy seed ``seed`` and the random subset of its cost: their rows, and a line."""
    started = time.monotonic()
    policy = Policy(plan, seed=seed)
    total = policy.lattice.total_cost
    path = replay(policy, table)
    rows = [
        {
            "method": "adaptive",
            "seed": seed,
            "wave": step["wave"],
            "spent": step["spent"] / total,
            "final": step is path[-1],
            "stop": step.get("stop", ""),
            **score(step["answers"], reference),
        }
        for step in path
    ]
    available = set(table["cell_key"])
    subset = random_subset(policy, available, path[-1]["spent"], np.random.default_rng(10_000 + seed))
    answers = policy.assess(run_cells(table, subset), subset)
    rows.append(
        {"method": "random, same cost", "seed": seed, "spent": policy.lattice.cost(subset) / total}
        | score(answers, reference)
    )
    last, rnd = rows[-2], rows[-1]
    k, even = balanced(policy, available)
    answers = policy.assess(run_cells(table, even), even)
    spent = policy.lattice.cost(even) / total
    even_row = {"method": "balanced, its seed order", "seed": seed, "k": k, "spent": spent}
    even_row |= score(answers, reference)
    rows.append(even_row)
    bound, seeds = oracle(policy, table, reference)
    rows.append({"method": "oracle", "seed": seed, "spent": bound})
    more = sorted(f"{a} {k}" for a, k in seeds.items() if k > policy.settings.min_seeds)
    line = (
        f"policy seed {seed}: {len(path)} waves, {last['spent']:.0%} of the compute, verdicts as the"
        f" lattice's {last['verdicts_agree']:.0%}, exponents {outcomes(last)}; a random subset of that cost:"
        f" {rnd['verdicts_agree']:.0%} / {outcomes(rnd)}; its first {k} seeds at every point:"
        f" {even_row['verdicts_agree']:.0%} / {outcomes(even_row)};"
        f" the oracle for this seed order: {bound:.0%}"
        + (f" (seeds: {'; '.join(more)})" if more else "")
        + f" ({time.monotonic() - started:.0f} s)"
    )
    return rows, line


def _subset_run(plan, table: pd.DataFrame, keys: set[str], method: str, seed: int, reference) -> list[dict]:
    policy = Policy(plan)
    answers = policy.assess(run_cells(table, keys), keys)
    spent = policy.lattice.cost(keys) / policy.lattice.total_cost
    return [{"method": method, "seed": seed, "spent": spent} | score(answers, reference)]


def evaluate(
    plan,
    table: pd.DataFrame,
    policy_seeds: list[int],
    fractions: list[float],
    out=sys.stdout,
    jobs: int = 1,
    random_seeds: int = 10,
) -> pd.DataFrame:
    """Replays for each policy seed with a random subset of each one's cost, random subsets at ``fractions``
    of the lattice's compute, the lattice with fewer seeds, and the whole lattice: one row each (``jobs``
    processes)."""
    from concurrent.futures import ProcessPoolExecutor

    base = Policy(plan)
    available = set(table["cell_key"]) & set(base.lattice.frame.index)
    if len(available) < len(base.lattice.frame):
        raise SweepError(f"the store holds {len(available)} of the lattice's {len(base.lattice.frame)} cells")
    table = run_cells(table, available)
    reference = base.assess(table, available)
    rows = [{"method": "full lattice", "seed": -1, "wave": 0, "spent": 1.0, **score(reference, reference)}]
    subsets = [
        (
            random_subset(base, available, f * base.lattice.total_cost, np.random.default_rng(20_000 + s)),
            "random",
            s,
        )
        for f in fractions
        for s in range(random_seeds)
    ]
    subsets += [
        (fewer_seeds(base, available, k), f"lattice, {k} seeds", -1)
        for k in range(2, len(base.lattice.seeds))
    ]
    with ProcessPoolExecutor(max_workers=jobs) as pool:
        replays = [pool.submit(_policy_run, plan, table, seed, reference) for seed in policy_seeds]
        others = [pool.submit(_subset_run, plan, table, k, m, s, reference) for k, m, s in subsets]
        for future in replays:
            more, line = future.result()
            rows += more
            out.write(line + "\n")
            out.flush()
        for future in others:
            rows += future.result()
    return pd.DataFrame(rows)


def spread(x: pd.Series, fmt: str) -> str:
    """The median [10th, 90th percentile] of ``x`` (infinities dropped), or n/a."""
    x = x.replace([np.inf], np.nan).dropna()
    if x.empty:
        return "n/a"
    q = np.percentile(x, [10, 50, 90])
    return f"{format(q[1], fmt)} [{format(q[0], fmt)}, {format(q[2], fmt)}]"


def shown(x: float, fmt: str) -> str:
    return format(x, fmt) if np.isfinite(x) else "n/a"


def exponent_counts(part: pd.DataFrame) -> str:
    """The exponent answers of these rows by the consistency rule, summed over the rows."""
    n = {o: int(part[f"exponents_{o}"].fillna(0).sum()) for o in (RIGHT, OPEN, WRONG)}
    return f"{n[RIGHT]} / {n[OPEN]} / {n[WRONG]}"


def fewer_seed_rows(frame: pd.DataFrame) -> pd.DataFrame:
    """The whole lattice's rows, on all its seeds and on fewer."""
    return frame[frame["method"].str.startswith("lattice") | (frame["method"] == "full lattice")]


def compared_methods(frame: pd.DataFrame) -> list[tuple[str, pd.DataFrame]]:
    """(name, rows) of the methods replayed once per policy seed: the adaptive policy's final waves, the
    random subsets of the same cost and, where there are any, the even designs at the budget."""
    final = frame[(frame["method"] == "adaptive") & (frame["final"] == True)]  # noqa: E712
    same = frame[frame["method"] == "random, same cost"]
    even = frame[frame["method"] == "balanced, its seed order"]
    ks = "/".join(str(int(k)) for k in sorted(even["k"].unique())) if not even.empty else ""
    parts = [("adaptive (final wave)", final), ("random subset, same cost", same)]
    return parts + (
        [(f"every point on the first {ks} seeds of each seed order (at the budget)", even)] if ks else []
    )


def summary_table(frame: pd.DataFrame, parts: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """The summary's table: a row per compared method (spreads over policy seeds), per number of the
    lattice's seeds and, where it was read, the oracle's."""
    lines = [
        "| method | compute (share of the lattice) | verdicts as the lattice's |"
        " exponents right / open / wrong | answers settled | drop interval width | exponent interval width |",
        "|---|---|---|---|---|---|---|",
    ]
    for name, part in parts:
        lines.append(
            f"| {name} | {spread(part['spent'], '.0%')} | {spread(part['verdicts_agree'], '.0%')} |"
            f" {exponent_counts(part)} | {spread(part['settled'], '.0%')} |"
            f" {spread(part['drop_width'], '.3f')} | {spread(part['exponent_width'], '.3f')} |"
        )
    for name, part in fewer_seed_rows(frame).groupby("method", sort=False):
        r = part.iloc[0]
        lines.append(
            f"| {name} | {r['spent']:.0%} | {shown(r['verdicts_agree'], '.0%')} |"
            f" {exponent_counts(part.iloc[:1])} | {shown(r['settled'], '.0%')} |"
            f" {shown(r['drop_width'], '.3f')} | {shown(r['exponent_width'], '.3f')} |"
        )
    bound = frame[frame["method"] == "oracle"]
    if not bound.empty:
        lines.append(
            "| oracle for the verdicts (least compute on each seed order) |"
            f" {spread(bound['spent'], '.0%')} | | | | | |"
        )
    return lines


def oracle_lines(final: pd.DataFrame, bound: pd.DataFrame) -> list[str]:
    """How much more the adaptive policy spent than the oracle of its seed order (none without one)."""
    if bound.empty:
        return []
    pairs = final.set_index("seed")["spent"] - bound.set_index("seed")["spent"]
    return [
        "",
        f"The adaptive policy spent {spread(pairs.dropna(), '+.0%')} of the lattice's compute more than"
        " the oracle for its seed order (an oracle knows how many seeds each verdict takes; it counts no"
        " exponent).",
    ]


def agreement_lines(parts: list[tuple[str, pd.DataFrame]]) -> list[str]:
    """For each compared method, how many replays had every verdict the lattice's and no exponent wrong."""
    lines = [
        "",
        "Replays whose every verdict is the lattice's (the same label) and whose no exponent is wrong (each"
        " right or open), of those run:",
        "",
    ]
    for name, part in parts:
        verdicts, exponents = part["verdicts_agree"] == 1.0, part["exponents_wrong"] == 0
        lines.append(
            f"- {name}: every verdict in {int(verdicts.sum())} of {len(part)}, no exponent wrong in"
            f" {int(exponents.sum())}, both in {int((verdicts & exponents).sum())}"
        )
    return lines


def summarise(frame: pd.DataFrame) -> str:
    """The markdown summary: medians and spreads (10th-90th percentile) over policy seeds."""
    parts = compared_methods(frame)
    final = parts[0][1]
    lines = [
        f"{len(final)} replays (policy seeds). Median [10th, 90th percentile] over them; the exponents"
        " summed over them.",
        "",
        "Exponents by consistency with the whole lattice: right (a value claimed, the lattice's estimate"
        " inside its interval), open (no value claimed: open or beyond the lattice's seeds; right too),"
        " wrong (a value claimed whose interval excludes the lattice's estimate).",
        "",
        *summary_table(frame, parts),
        *oracle_lines(final, frame[frame["method"] == "oracle"]),
        *agreement_lines(parts),
    ]
    stops = final["stop"].value_counts()
    lines += ["", "Why the replays stopped: " + "; ".join(f"{n} x {why}" for why, n in stops.items())]
    return "\n".join(lines) + "\n"


def draw_adaptive(ax, frame: pd.DataFrame, col: str) -> None:
    """Each policy seed's path (a faint line) and where it stopped (a dot)."""
    ad = frame[frame["method"] == "adaptive"]
    for i, (_, run) in enumerate(ad.groupby("seed")):
        ax.plot(
            run["spent"],
            run[col],
            color="tab:blue",
            alpha=0.25,
            lw=1,
            label="adaptive (each policy seed)" if i == 0 else None,
        )
    final = ad[ad["final"] == True]  # noqa: E712
    ax.scatter(
        final["spent"], final[col], color="tab:blue", s=14, zorder=3, label="adaptive, where it stopped"
    )


def draw_random(ax, frame: pd.DataFrame, col: str) -> None:
    """The random subsets' median and 10-90% band at each share of the compute."""
    rnd = frame[frame["method"] == "random"].copy()
    rnd["bin"] = rnd["spent"].round(2)
    stats = rnd.groupby("bin")[col].quantile(0.5).rename("mid").to_frame()
    stats["lo"] = rnd.groupby("bin")[col].quantile(0.1)
    stats["hi"] = rnd.groupby("bin")[col].quantile(0.9)
    ax.plot(stats.index, stats["mid"], color="tab:orange", lw=2, label="random subsets (median, 10-90%)")
    ax.fill_between(stats.index, stats["lo"], stats["hi"], color="tab:orange", alpha=0.2)


def draw_references(ax, frame: pd.DataFrame, col: str) -> None:
    """The oracles (on the verdicts' panel), the even designs (but on the drop widths') and the whole lattice
    on its seeds and fewer."""
    bound = frame[frame["method"] == "oracle"]
    if col == "verdicts_agree" and not bound.empty:
        ax.scatter(
            bound["spent"],
            np.ones(len(bound)),
            marker="|",
            s=120,
            color="black",
            zorder=4,
            label="oracle: least compute with the lattice's verdicts (each seed order)",
        )
    even = frame[frame["method"] == "balanced, its seed order"]
    if col != "drop_width" and not even.empty:
        jitter = np.random.default_rng(0).uniform(-0.012, 0.012, len(even))
        ax.scatter(
            even["spent"] + jitter,
            even[col],
            marker="x",
            s=22,
            color="tab:green",
            zorder=4,
            label="every point on the first k seeds of each seed order",
        )
    fewer = fewer_seed_rows(frame).sort_values("spent")
    seeds = f"2..{len(fewer) + 1}" if len(fewer) > 1 else "all"
    ax.plot(fewer["spent"], fewer[col], "s--", color="black", ms=5, label=f"whole lattice, {seeds} seeds")


def draw(frame: pd.DataFrame, path: Path) -> None:
    """Compute spent against the answers' interval width and agreement: adaptive vs random vs lattice."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 3, figsize=(16, 4.4))
    panels = (
        ("drop_width", "median width of the verdicts' drop intervals"),
        ("verdicts_agree", "verdicts as the full lattice's"),
        ("exponents_consistent", "exponents right or open (not wrong)"),
    )
    for ax, (col, title) in zip(axes, panels):
        draw_adaptive(ax, frame, col)
        draw_random(ax, frame, col)
        draw_references(ax, frame, col)
        ax.set_xlabel("compute spent (share of the full lattice's estimate)")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.set_xlim(0, 1.03)
    axes[0].set_ylabel(f"drop interval width ({NO_INTERVAL_WIDTH:g}: a verdict with no interval yet)")
    axes[1].set_ylabel("share of the verdicts with the lattice's label")
    axes[1].set_ylim(0, 1.03)
    axes[2].set_ylabel("share of the exponents consistent with the lattice's estimate")
    axes[2].set_ylim(-0.03, 1.03)
    axes[0].legend(fontsize=8)
    if not frame[frame["method"] == "oracle"].empty:
        axes[1].legend(fontsize=8, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m scaling.adaptive.replay",
        description="Replay a sweep's adaptive policy on a store holding its whole lattice (no training), "
        "against random subsets of the same compute and the lattice with fewer seeds.",
    )
    parser.add_argument(
        "sweep", help="the sweep file (with an `adaptive:` section), e.g. sweeps/adaptive_mlp.yaml"
    )
    parser.add_argument(
        "--tracking-uri", required=True, help="the MLflow store holding every cell of the lattice"
    )
    parser.add_argument("--profile", default="", help="the sweep's profile, as the lattice was swept")
    add_set_argument(
        parser, "a setting as the lattice was swept with it, e.g. --set 'grid.seed=[0,1,2,3]' (repeatable)"
    )
    parser.add_argument(
        "--policy-seeds", type=int, default=20, help="replays, one per policy seed (default 20)"
    )
    parser.add_argument("--out", required=True, help="folder for replay.csv, summary.md and replay.png")
    parser.add_argument("--jobs", type=int, default=1, help="processes (default 1)")
    parser.add_argument(
        "--random-seeds", type=int, default=10, help="random subsets per share of the compute (default 10)"
    )
    args = parser.parse_args(argv)
    try:
        if args.policy_seeds < 1 or args.jobs < 1:
            raise SweepError(f"--policy-seeds and --jobs must be >= 1, got {args.policy_seeds}, {args.jobs}")
        plan = load_plan(args.sweep, args.profile, args.overrides)
        if plan.adaptive is None:
            raise SweepError(f"{args.sweep}: no `adaptive:` section to replay")
        table, _ = load_table(resolve_tracking_uri(args.tracking_uri), plan.name)
        fractions = [0.15, 0.25, 0.35, 0.5, 0.65, 0.8]
        seeds = list(range(args.policy_seeds))
        frame = evaluate(plan, table, seeds, fractions, jobs=args.jobs, random_seeds=args.random_seeds)
    except (SweepError, LookupError, TrackingError) as err:  # no such store, or experiment in it
        print(f"error: {redact(str(err))}", file=sys.stderr)
        return 2
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    frame.to_csv(out / "replay.csv", index=False)
    (out / "summary.md").write_text(summarise(frame))
    draw(frame, out / "replay.png")
    print((out / "summary.md").read_text())
    print(f"wrote {out / 'replay.csv'}, {out / 'summary.md'}, {out / 'replay.png'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
