"""The numbers the docs and the sweep files' comments quote are what the code says today (issue 70): a cell
count, a trial count, a cost or a limit written in prose goes stale when a sweep file, the cost table or a
setting changes, and this test is what says so.

- QUOTED: every statement of README.md and docs/*.md that quotes a count, a cost or a setting of the code,
  as a pattern with the numbers in groups and the values the code gives now: the planner
  (scaling.planning.plan.load_plan) and the cost functions `--dry-run` prints from (the CPU trials of
  scaling.budget.cpu_plan, the GPU packs of scaling.budget.gpu_plan, scaling.budget.cost's totals). A
  statement reworded so that its pattern no longer matches fails too: update the pattern with the text.
- Sweep files: every "N cells" and "N trials" in a file's comments is a count of the profile the comment
  describes (the file's header and the comments outside `profiles:` the file's own settings; a comment
  block within `profiles:` the profile it precedes or sits in), and the comments quote no durations
  (`--dry-run` prints what a sweep costs; what one took is in docs/results.md).
- Guides (README.md and docs/*.md but docs/results.md, whose numbers are measurements with their dates):
  every "N cells" or "N trials" is QUOTED's or NOT_SWEEP_COUNTS'; a duration (seconds to hours, GPU-hours)
  is QUOTED's, or sits in a paragraph that gives a date or links docs/results.md (a measurement), or in
  inline code or a fenced block (a command or its output), or is one of SETTINGS (a timeout, a period).
  The README quotes no durations at all: its times are docs/results.md's.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Callable

import pytest
from test_cell_keys import LOCAL_FILES, make_stand_ins

from scaling.budget import packing
from scaling.budget.cost import format_hours, load_gpu_table, load_table, sweep_estimate
from scaling.budget.cpu_plan import cpu_estimate
from scaling.budget.gpu_plan import gpu_seconds
from scaling.planning import guards
from scaling.planning.plan import load_plan
from scaling.tracking import retry
from scaling.trial import leases, storage

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
GUIDES = [README, *(p for p in sorted((ROOT / "docs").glob("*.md")) if p.name != "results.md")]
SWEEPS = sorted((ROOT / "sweeps").glob("*.yaml"))

COUNT = re.compile(r"(?<![\w.,/-])(\d[\d,]*)(?: [\w-]+)? (cells|trials)\b")
UNITS = "ms|s|seconds?|min|minutes?|h|hours?|GPU-hours|CPU-hours|H100-hours"
DURATION = re.compile(rf"(?<![\w.,/-])(\d[\d.,]*) ?(?:{UNITS})(?![\w-])")
DATE = re.compile(r"\b20\d\d-\d\d-\d\d\b")
PROFILE_KEY = re.compile(r"^  ([\w-]+):")


@cache
def plan(entry: str):
    """The plan of 'sweeps/FILE.yaml:PROFILE' ('' the file's own settings), local files stood in."""
    make_stand_ins()
    path, _, profile = entry.partition(":")
    return load_plan(ROOT / path, profile, LOCAL_FILES.get(entry, []))


@dataclass(frozen=True)
class Costs:
    cells: int
    models: Counter  # cells per model preset
    cpu_trials: int  # the trials of the cells that ask for no GPU, as the driver forms them on 2 CPUs
    packs: int  # those of them that pack two or more cells
    packed: int  # the cells in those packs
    cpu_wall: str  # their estimated training time on 2 CPUs, as --dry-run prints it
    unpacked: str  # every training cell one at a time unpacked on the CPU table
    gpu_trials: int
    gpu_hours: float  # the GPU cells' packs one after another on the CUDA table's card
    flops: str

    @property
    def cell_counts(self) -> set[int]:
        return {self.cells, *self.models.values(), self.packed}

    @property
    def trial_counts(self) -> set[int]:
        return {self.cpu_trials, self.packs, self.gpu_trials}


@cache
def costs(entry: str) -> Costs:
    """What `--dry-run` of the entry costs on 2 CPUs and on the CUDA table's card."""
    planned = plan(entry)
    table = load_table()
    cpu = cpu_estimate(planned, table, 2)
    packs = [t for t in cpu.trials if len(t) > 1]
    gpu = gpu_seconds(planned, load_gpu_table())
    total = sweep_estimate([p.cell for p in planned.cells], table)
    return Costs(
        cells=len(planned.cells),
        models=Counter(p.cell.model.label for p in planned.cells),
        cpu_trials=len(cpu.trials),
        packs=len(packs),
        packed=sum(map(len, packs)),
        cpu_wall=format_hours(cpu.wall),
        unpacked=format_hours(total.seconds),
        gpu_trials=len(gpu),
        gpu_hours=sum(gpu) / 3600,
        flops=f"{total.flops:.3g}",
    )


def count_where(entry: str, **settings) -> int:
    """The entry's cells whose name has each `key=value` (T=16, N=8) or whose model preset is ``model``."""
    model = settings.pop("model", None)
    return sum(
        1
        for p in plan(entry).cells
        if (model is None or p.cell.model.label == model)
        and all(f" {k}={v} " in f" {p.name} " for k, v in settings.items())
    )


def seeds(entry: str) -> int:
    return len({p.cell.seed for p in plan(entry).cells})


def gpu_script():
    import benchmarks.gpu

    return benchmarks.gpu


def packing_benchmark():
    import benchmarks.packing

    return benchmarks.packing


def phase_seconds(*names: str) -> int:
    return sum(gpu_script().PHASE_SECONDS[name] for name in names)


def smoke_steps(model: str) -> int:
    return next(p.cell.train.steps for p in plan("sweeps/smoke.yaml:").cells if p.cell.model.label == model)


def progress(done: int, running: int) -> tuple[str, ...]:
    total = costs("sweeps/smoke.yaml:").cells
    return str(total), f"{100 * done / total:.0f}", str(total - done - running)


@dataclass(frozen=True)
class Quote:
    page: str  # relative to the repository
    pattern: str  # with single blanks: the page is read with its line breaks as blanks
    values: Callable[[], tuple]  # what the groups must read, in order

    def expected(self) -> tuple[str, ...]:
        return tuple(str(v) for v in self.values())


SMOKE = "sweeps/smoke.yaml:"
QUOTED = [
    Quote("README.md", r"trains the smoke sweep's (\d+) cells", lambda: (costs(SMOKE).cells,)),
    Quote(
        "README.md",
        r"T in \{16, 256, inf\}, N in \{8, 16\}, (\d+) seeds",
        lambda: (seeds(SMOKE),),
    ),
    Quote(
        "docs/sweeps.md",
        r"`\[smoke\] started <cell> \| 3/(\d+) cells done \((\d+)%\), 2 running, (\d+) pending",
        lambda: progress(3, 2),
    ),
    Quote(
        "docs/sweeps.md",
        r"step 500/(\d+), \.\.\. \| 2/(\d+) cells done \((\d+)%\)",
        lambda: (smoke_steps("gpt2"), *progress(2, 0)[:2]),
    ),
    Quote(
        "docs/sweeps.md",
        r"`(\d+) cells ask one node for CPU=([\d.]+), GPU=([\d.]+) \(gpt2 T=100 N=5 seed=0, gpt2 T=100 N=10"
        r" seed=0, \.\.\. and (\d+) more\)` for `sweeps/fig1.yaml`",
        lambda: (
            n := count_where("sweeps/fig1.yaml:", model="gpt2"),
            f"{plan('sweeps/fig1.yaml:').cells[0].resources.cpu:g}",
            f"{plan('sweeps/fig1.yaml:').cells[0].resources.gpu:g}",
            n - 2,
        ),
    ),
    Quote(
        "docs/sweeps.md",
        r"packs up to (\d+) cells whose training step is small \(at most (\S+) multiply-adds\)",
        lambda: (packing.AUTO_PACK_SIZE, f"{packing.AUTO_PACK_MAX_FLOPS:.0e}".replace("e+0", "e")),
    ),
    Quote(
        "docs/sweeps.md",
        r"each part keeps at least (\d+) s of estimated training",
        lambda: (f"{packing.MIN_SPLIT_SECONDS:g}",),
    ),
    Quote("docs/sweeps.md", r"(\d+) cells of a second are one trial", lambda: (packing.AUTO_PACK_SIZE,)),
    Quote(
        "docs/statisticians.md",
        r"sweep a: error vs L \((\d+) cells\)",
        lambda: (costs("sweeps/stat_gd.yaml:quick").cells,),
    ),
    Quote(
        "docs/statisticians.md",
        r"sweep b: selection \((\d+) cells, (\d+) seeds\)",
        lambda: (costs("sweeps/stat_selection.yaml:quick").cells, seeds("sweeps/stat_selection.yaml:quick")),
    ),
    Quote(
        "docs/speed.md",
        r"borrows GPT-2's fit \((\d+) ms a step fixed\)",
        lambda: (f"{load_table()['fit']['gpt2']['t0'] * 1e3:.0f}",),
    ),
    Quote(
        "docs/speed.md",
        r"The smoke sweep on 2 CPUs: about (\d+ min) \((\d+ min) one cell at a time unpacked\)",
        lambda: (costs(SMOKE).cpu_wall, costs(SMOKE).unpacked),
    ),
    Quote("docs/mlflow-ui.md", r"the (\d+) cells at T = 16", lambda: (count_where(SMOKE, T=16),)),
    Quote(
        "docs/mlflow-ui.md",
        r"params.N = '8'`` - (\d+) cells",
        lambda: (count_where(SMOKE, model="gpt2", N=8),),
    ),
    Quote("docs/mlflow-ui.md", r"the (\d+) GPT-2 cells", lambda: (count_where(SMOKE, model="gpt2"),)),
    Quote(
        "docs/mlflow-ui.md",
        r"params.`train.steps` = '(\d+)'`` - the GPT-2 cells .*the MLP's own preset trains (\d+)\)",
        lambda: (smoke_steps("gpt2"), smoke_steps("mlp")),
    ),
    Quote(
        "docs/guarantees.md",
        r"`tests/test_bad_input_table.py`, (\d+) cases",
        lambda: (len(__import__("test_bad_input_table").CASES),),
    ),
    Quote(
        "docs/guarantees.md",
        r"at most (\d+) MB, its YAML nested at most (\d+) levels and its aliases expanding to at most"
        r" ([\d,]+) values; a grid of more than ([\d,]+) cells",
        lambda: (
            guards.MAX_SWEEP_BYTES >> 20,
            guards.MAX_YAML_DEPTH,
            f"{guards.MAX_YAML_VALUES:,}",
            f"{guards.MAX_CELLS:,}",
        ),
    ),
    Quote(
        "docs/guarantees.md",
        r"`--address host:port` must answer within (\d+) s",
        lambda: (f"{guards.ADDRESS_TIMEOUT_S:g}",),
    ),
    Quote(
        "docs/guarantees.md",
        r"renewed every (\d+) s, taken over only when stale \(no heartbeat for (\d+) s",
        lambda: (f"{leases.LEASE_HEARTBEAT_S:g}", f"{leases.LEASE_STALE_S:g}"),
    ),
    Quote("docs/guarantees.md", r"three tries of (\d+) s\)", lambda: (retry.QUICK_TIMEOUT_S,)),
    Quote(
        "docs/guarantees.md",
        r"for up to (\d+) s \(`SCALING_STORAGE_RETRY_S`\)",
        lambda: (f"{storage.DEFAULT_RETRY_S:g}",),
    ),
    Quote(
        "docs/cluster.md",
        r"for up to (\d+) s \(`SCALING_STORAGE_RETRY_S`\)",
        lambda: (f"{storage.DEFAULT_RETRY_S:g}",),
    ),
    Quote(
        "docs/speed.md",
        r"against their bare work \(<= (\d+) s per cell\)",
        lambda: (f"{__import__('benchmarks.sweep_overhead').sweep_overhead.TARGET_SECONDS_PER_CELL:g}",),
    ),
    Quote(
        "docs/speed.md",
        r"(\d+) tiny MLP cells as one packed trial against (\d+) separate trials",
        lambda: (packing_benchmark().CELLS, packing_benchmark().CELLS),
    ),
    Quote(
        "docs/speed.md",
        r"GPU, (\d+) packed cells' throughput against one cell's \(>= 0.8 x (\d+)\)",
        lambda: (packing_benchmark().CELLS, packing_benchmark().CELLS),
    ),
    Quote("docs/gpu.md", r"or (\d+) s are spent", lambda: (gpu_script().SPREAD_SECONDS,)),
    Quote(
        "docs/temperature.md",
        r"`--dry-run` estimates about ([\d.]+) GPU-hours for its (\d+) training cells on the cost table's"
        r" card \(one at a time on a CPU, about ([\d.]+ h)\)",
        lambda: (
            f"{(c := costs('sweeps/temp_gpt2_scan.yaml:paper-gpu')).gpu_hours:.2f}",
            c.cells,
            c.unpacked,
        ),
    ),
    Quote(
        "docs/temperature.md",
        r"`--dry-run` estimates about ([\d.]+ h) of training on 2 CPUs",
        lambda: (costs("sweeps/temp_gpt2_scan.yaml:cpu").cpu_wall,),
    ),
    Quote(
        "docs/temperature.md",
        r"--profile smollm # (\d+) cells, one per noisy ratio",
        lambda: (costs("sweeps/temp_llama_b.yaml:smollm").cells,),
    ),
    Quote(
        "docs/gpu.md",
        r"costs Fig. 1's training at (\S+) FLOP, about ([\d.]+ h) one cell at a time on a CPU and about"
        r" ([\d.]+) GPU-hours on the cost table's card",
        lambda: (
            (c := costs("sweeps/fig1.yaml:")).flops,
            c.unpacked,
            f"{c.gpu_hours:.2f}",
        ),
    ),
    Quote(
        "docs/gpu.md",
        r"the default phases (\d+) s in all, `--phases sweep` (\d+) s, `--phases compile` (\d+) s",
        lambda: (
            phase_seconds("device", "fig1", "packs", "cost", "checks"),
            phase_seconds("sweep"),
            phase_seconds("compile"),
        ),
    ),
]
# Counts that are not a shipped sweep's plan: (page, the phrase as written), each with why.
NOT_SWEEP_COUNTS = {
    ("docs/cluster.md", "256 trials"): "the tracking load test's setting (--trials 256)",
    ("docs/speed.md", "50 tiny cells"): "the sweep-overhead benchmark's size (benchmarks/sweep_overhead.py)",
    ("docs/gpu.md", "4 trials"): "the GPU script's smoke sweep at gpu 0.25 a trial: 4 at once on a card",
}
# Durations that are settings, limits or periods of the code, not a measurement: (page, phrase).
SETTINGS = {
    ("docs/guarantees.md", "10 s"): "the tests' second driver starts 10 s after the first; a 10 s outage",
    ("docs/guarantees.md", "45 s"): "the S3 sweep test's outage",
}


def relative(path: Path) -> str:
    return str(path.relative_to(ROOT))


ITEM = re.compile(r"^\s*(?:[-*] |\| |\d+\. )")  # a list item or a table row starts a paragraph of its own


def blocks(path: Path) -> list[tuple[str, bool]]:
    """The page's paragraphs (blank-line separated; each list item and table row apart; a fenced block
    whole), each with its line breaks as single blanks, and whether it is a fenced block."""
    found, current, fenced = [], [], False
    for line in path.read_text().splitlines():
        if not fenced and ITEM.match(line) and current:
            found.append((" ".join(current), False))
            current = []
        if line.lstrip().startswith("```"):
            if fenced:
                found.append((" ".join(current + [line]), True))
                current, fenced = [], False
            else:
                if current:
                    found.append((" ".join(current), False))
                current, fenced = [line], True
            continue
        if not line.strip() and not fenced:
            if current:
                found.append((" ".join(current), False))
            current = []
            continue
        current.append(line.strip())
    if current:
        found.append((" ".join(current), fenced))
    return [(re.sub(r"\s+", " ", text), is_fence) for text, is_fence in found]


def quoted_spans(path: Path) -> set[tuple[int, int]]:
    """(block, position) of every character a QUOTED pattern's group covers on the page."""
    covered = set()
    for quote in (q for q in QUOTED if q.page == relative(path)):
        for index, (text, _) in enumerate(blocks(path)):
            for match in re.finditer(quote.pattern, text):
                for group in range(1, (match.lastindex or 0) + 1):
                    covered.update((index, i) for i in range(*match.span(group)))
    return covered


@pytest.mark.parametrize("quote", QUOTED, ids=lambda q: f"{q.page}: {q.pattern[:50]}")
def test_each_quoted_number_is_what_the_code_says_today(quote):
    path = ROOT / quote.page
    matches = [m for text, _ in blocks(path) for m in re.finditer(quote.pattern, text)]
    assert matches, f"{quote.page} no longer says /{quote.pattern}/: update the quote with the text"
    expected = quote.expected()
    for match in matches:
        assert match.groups() == expected, (
            f"{quote.page}: {match.group(0)!r} quotes {match.groups()}, the code says {expected}"
        )


def comment_blocks(path: Path) -> list[tuple[str, str]]:
    """(profile, text) of each run of comment lines of a sweep file: '' for the header and the comments
    outside `profiles:`, else the profile the run precedes (a comment at the profiles' indent) or sits in."""
    lines = path.read_text().splitlines()
    in_profiles, current, owner, pending, found = False, "", "", [], []
    keys = [(i, m.group(1)) for i, line in enumerate(lines) if (m := PROFILE_KEY.match(line))]
    for i, line in enumerate(lines):
        if line.startswith("profiles:"):
            in_profiles = True
        elif in_profiles and not line.startswith((" ", "#")) and line.strip():
            in_profiles, current = False, ""
        if in_profiles and PROFILE_KEY.match(line):
            current = PROFILE_KEY.match(line).group(1)
        comment = line.partition("#")[2].strip() if "#" in line else ""
        if comment:
            if not pending:
                indent = len(line) - len(line.lstrip())
                following = next((name for j, name in keys if j > i), current)
                owner = (following if indent <= 2 else current) if in_profiles else ""
            pending.append(comment)
        elif pending:
            found.append((owner, " ".join(pending)))
            pending = []
    if pending:
        found.append((owner, " ".join(pending)))
    return found


@pytest.mark.parametrize("path", SWEEPS, ids=lambda p: p.name)
def test_a_sweep_files_comments_count_its_profiles_cells_and_trials_and_quote_no_durations(path):
    wrong = []
    for profile, text in comment_blocks(path):
        entry = f"sweeps/{path.name}:{profile}"
        for match in COUNT.finditer(text):
            number, what = int(match.group(1).replace(",", "")), match.group(2)
            allowed = costs(entry).cell_counts if what == "cells" else costs(entry).trial_counts
            if number not in allowed:
                wrong.append(f"{entry}: {match.group(0)!r}, but the plan has {what} {sorted(allowed)}")
        wrong += [
            f"{entry}: a duration, {m.group(0)!r} (--dry-run prints it)" for m in DURATION.finditer(text)
        ]
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("page", GUIDES, ids=relative)
def test_a_guide_quotes_no_count_that_no_test_checks(page):
    covered = quoted_spans(page)
    unchecked = [
        match.group(0)
        for index, (text, _) in enumerate(blocks(page))
        for match in COUNT.finditer(text)
        if (index, match.start(1)) not in covered and (relative(page), match.group(0)) not in NOT_SWEEP_COUNTS
    ]
    assert not unchecked, (
        f"{relative(page)}: counts that no test checks (add a Quote, or remove): {unchecked}"
    )


def inline_code_blanked(text: str) -> str:
    return re.sub(r"`[^`]*`", lambda m: " " * len(m.group(0)), text)


@pytest.mark.parametrize("page", GUIDES, ids=relative)
def test_a_guide_quotes_durations_only_as_dated_measurements_or_checked(page):
    covered = quoted_spans(page)
    loose = []
    for index, (text, fenced) in enumerate(blocks(page)):
        measured = bool(DATE.search(text)) or "results.md" in text
        if fenced or (measured and page != README):
            continue
        for match in DURATION.finditer(inline_code_blanked(text)):
            if (index, match.start(1)) in covered or (relative(page), match.group(0)) in SETTINGS:
                continue
            loose.append(match.group(0))
    assert not loose, (
        f"{relative(page)}: durations with no date, no link to docs/results.md and no check: {loose}"
        + (" (the README quotes none: its times are docs/results.md's)" if page == README else "")
    )


def test_the_checks_catch_a_stale_count_a_stale_header_and_a_loose_duration(tmp_path):
    stale = Quote("README.md", r"trains the smoke sweep's (\d+) cells", lambda: (costs(SMOKE).cells + 1,))
    with pytest.raises(AssertionError, match="the code says"):
        test_each_quoted_number_is_what_the_code_says_today(stale)
    header = tmp_path / "smoke.yaml"
    header.write_text("# 37 cells, about 5 minutes\n" + (ROOT / "sweeps" / "smoke.yaml").read_text())
    with pytest.raises(AssertionError) as caught:
        test_a_sweep_files_comments_count_its_profiles_cells_and_trials_and_quote_no_durations(header)
    assert "'37 cells'" in str(caught.value) and "'5 minutes'" in str(caught.value)
    page = tmp_path / "page.md"
    page.write_text("It takes about 7 min here.\n\nMeasured 2026-01-01: 9 min.\n\n`sleep 3 s`\n")
    assert [m.group(0) for t, _ in blocks(page) for m in DURATION.finditer(inline_code_blanked(t))] == [
        "7 min",
        "9 min",
    ]
    assert [bool(DATE.search(t)) for t, _ in blocks(page)] == [False, True, False]
