"""The ``adaptive:`` section of a sweep file: what an adaptive sweep must answer and what it may spend.

::

    adaptive:
      budget: 0.5                  # at most this fraction of the full lattice's estimated compute
      questions:                   # the answers that matter
        - {verdict: context}       # does each model context-scale (at each T)?
        - {verdict: task}          # does each model task-scale (at each N)?
        - {exponent: alpha, within: 0.05}   # each model's alpha (joint fit) to +-0.05
      first: {seeds: 2}            # the first wave: the ends and middle of T and N, 2 seeds
      wave: 8                      # cells per later wave
      min_seeds: 3                 # no answer is settled on fewer seeds
      seed: 0                      # the policy's seed: the order in which seeds are drawn, tie-breaks

Pure: no Ray, no MLflow, no analysis. ``check_against_lattice`` checks the section against the grid it
will sample (scaling.planning.plan calls it, so a bad section stops the planner before anything runs). It sits
beside the planner, below the adaptive driver (scaling.adaptive), which reads the checked settings.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

from scaling.config import check, check_choice

VERDICTS = ("context", "task")
EXPONENTS = {"alpha": ("joint", "context"), "beta": ("joint", "task")}  # parameter -> forms that have it
REFINED_AXES = ("T", "N")  # the lattice axes a wave may add values of; the others are sampled whole


@dataclass(frozen=True)
class AdaptiveQuestion:
    """One question: a scaling verdict (``verdict: context``) or an exponent to a precision
    (``exponent: alpha, within: 0.05``, from the ``form`` fit: joint by default)."""

    verdict: str = ""
    exponent: str = ""
    within: float = 0.0
    form: str = "joint"

    def __post_init__(self):
        check(
            bool(self.verdict) != bool(self.exponent),
            "",
            "a question is either a verdict (context or task) or an exponent (alpha or beta)"
            " with its `within`",
        )
        if self.verdict:
            check_choice(self.verdict, "verdict", VERDICTS)
            check(self.within == 0.0, "within", "belongs to an exponent question")
        else:
            check_choice(self.exponent, "exponent", EXPONENTS)
            check(self.within > 0 and math.isfinite(self.within), "within", f"must be > 0, got {self.within}")
            check_choice(self.form, "form", EXPONENTS[self.exponent])

    @property
    def name(self) -> str:
        if self.verdict:
            return f"{self.verdict} verdict"
        return f"{self.exponent} ({self.form} fit) to +-{self.within:g}"


@dataclass(frozen=True)
class FirstWave:
    """The first wave: ``seeds`` seeds at the listed values of T and N (default: each axis's smallest,
    middle and largest value)."""

    seeds: int = 2
    T: tuple[float, ...] = ()
    N: tuple[int, ...] = ()

    def __post_init__(self):
        check(self.seeds >= 1, "seeds", f"must be >= 1, got {self.seeds}")


DEFAULT_QUESTIONS = (AdaptiveQuestion(verdict="context"), AdaptiveQuestion(verdict="task"))


@dataclass(frozen=True)
class AdaptiveSettings:
    budget: float = 0.5
    questions: tuple[AdaptiveQuestion, ...] = DEFAULT_QUESTIONS
    first: FirstWave = field(default_factory=FirstWave)
    wave: int = 8
    min_seeds: int = 3
    seed: int = 0

    def __post_init__(self):
        check(
            0 < self.budget <= 1,
            "budget",
            f"a fraction of the full lattice's compute in (0, 1], got {self.budget}",
        )
        check(len(self.questions) > 0, "questions", "give at least one question")
        check(self.wave >= 1, "wave", f"must be >= 1 cell, got {self.wave}")
        check(
            self.min_seeds >= 2,
            "min_seeds",
            f"must be >= 2 (an interval needs 2 seeds), got {self.min_seeds}",
        )
        check(self.seed >= 0, "seed", f"must be >= 0 (it seeds numpy's generator), got {self.seed}")
        names = [q.name for q in self.questions]
        dupes = sorted({n for n in names if names.count(n) > 1})
        check(not dupes, "questions", f"asked twice: {', '.join(dupes)}")


def default_first(values: list) -> tuple:
    """The smallest, middle and largest of an axis's values (sorted; inf last)."""
    values = sorted(values)
    return tuple(dict.fromkeys([values[0], values[len(values) // 2], values[-1]]))


def check_against_lattice(settings: AdaptiveSettings, axes: dict[str, list]) -> AdaptiveSettings:
    """``settings`` checked against the grid's axes (name -> values), with the first wave's values filled in.
    Raises a ConfigError naming the setting (``first.T``, ``min_seeds``, ...) and what the grid allows."""
    seeds = axes.get("seed", [])
    need = max(settings.first.seeds, settings.min_seeds)
    check(
        len(seeds) >= need,
        "min_seeds" if settings.min_seeds >= settings.first.seeds else "first.seeds",
        f"the grid's seed axis has {len(seeds)} value(s); an adaptive sweep draws up to {need} (first.seeds,"
        f" min_seeds): give `seed: [0, 1, ...]` at least {need} values",
    )
    refined = [a for a in REFINED_AXES if len(axes.get(a, [])) > 1]
    check(bool(refined), "", "an adaptive sweep needs a T or N axis with at least 2 values in its grid")
    first = {}
    for axis in REFINED_AXES:
        grid = sorted(axes.get(axis, []))
        given = getattr(settings.first, axis)
        if not grid:
            check(not given, f"first.{axis}", f"the grid has no {axis} axis")
            continue
        if not given:
            first[axis] = default_first(grid)
            continue
        unknown = [v for v in given if v not in grid]
        check(not unknown, f"first.{axis}", f"{unknown} not among the grid's values {grid}")
        ends = [v for v in (grid[0], grid[-1]) if v not in given]
        check(
            not ends,
            f"first.{axis}",
            f"must include the grid's ends {grid[0]} and {grid[-1]} (verdicts compare them), missing {ends}",
        )
        first[axis] = tuple(sorted(given))
    for q in settings.questions:
        if q.verdict:
            axis = "N" if q.verdict == "context" else "T"
            check(len(axes.get(axis, [])) > 1, "questions", f"a {q.verdict} verdict needs an {axis} axis")
    return replace(settings, first=replace(settings.first, T=first.get("T", ()), N=first.get("N", ())))
