"""The adaptive policy: the answers the cells run so far give, and the next wave of cells.

The lattice is the sweep file's grid (``Lattice``); its cells are ordinary cells (same key, same run). A
*point* is a cell without its seed (model, T, N and any other grid axis); a point's seeds are drawn in the
policy's own order (a permutation of the grid's seed axis drawn from ``adaptive.seed``).

Answers (``assess``) come from the rules the analysis judges by: the verdicts of scaling.judge.verdicts (rule
as the report's, intervals over seeds) and the fits of scaling.judge.fit, on the tidy table of the complete
cells. The lattice defines which answers exist (a context verdict for every model and T of the grid, a task
verdict for every model and N, an exponent per model), data or not. An answer is *settled* when

- verdict: it is "scales", "scales weakly", "does not scale" or "at chance" on at least ``min_seeds`` seeds
  (the verdict's own interval: Student t over its group's seeds), and a scaling label still holds on a
  Student t interval of its drop from the model's spread (a group whose few seeds happen to agree is not
  taken as final; percentile bootstrap intervals over 3 seeds, the verdicts' rule before, settled wrong
  labels in replays). That t interval's sd is the seed-to-seed spread of the
  model's drops pooled over the question's groups (every T of a context verdict, every N of a task
  verdict), with the degrees of freedom that groups sharing seeds really carry (``pooled_spread``): a task
  verdict's groups barely co-vary over seeds and lend each other degrees of freedom; a context verdict's
  groups move together seed by seed and lend almost none (on adaptive_mlp the plain MLP's drops correlate
  0.85 across T, 0.15 across N);
- exponent: its interval's half-width (Student t over the seeds' own fits) is at most ``within`` on at
  least ``min_seeds`` seeds and the interval stays inside the fit's bounds; or the model does not scale
  along that axis (every verdict of the model on the exponent's axis is settled, none of them "scales"):
  moot.

Every unsettled answer estimates the seeds it needs, from its interval's half-width h now (S seeds) and the
half-width g that would settle it (the distance of a verdict's drop from the threshold, of its end from
chance; an exponent's ``within``), with intervals shrinking as 1/sqrt(seeds): S_need = S (h / g)^2, at least
``min_seeds`` (h: a verdict's or an exponent's large-sample half-width, a verdict's from the pooled
spread). A candidate action adds cells: one more seed at the points an answer reads (a verdict: its two ends
along the axis; an exponent: every point of its fit so far), or, for an exponent, a missing value of T or N
(the points it adds count as seeds in the proportion of points). The value of an action is the fraction of the
remaining way to S_need it covers, summed over every unsettled answer it serves, divided by its estimated cost
(scaling.budget.cost, the cost model of ``--dry-run``); a verdict's S_need counts at most the lattice's seeds
there (no wave can give it more), and so does any answer's on fewer than ``min_seeds`` seeds (too few to tell
a hopeless one), so that a verdict that looks hopeless on its first seeds is not starved. Waves are built
greedily from the best-valued action, with the answers' seeds advanced as if the chosen cells had run, until
the wave holds ``wave`` cells; never beyond the budget. S_need is estimated from large-sample half-widths (a t
one shrinks faster than 1/sqrt(S)), and is at least one seed more than the answer has. An open answer whose
S_need exceeds REACH times the lattice's seeds (a drop sitting on the threshold) on 2/3 of the lattice's
seeds, or 10 times that on ``min_seeds``, or an exponent whose interval reaches the fit's bound, is *beyond*
the lattice: reported open, no longer pursued.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from scaling.planning.adaptive_settings import AdaptiveQuestion, AdaptiveSettings
from scaling.planning.plan import Plan

from ..judge.fit import fit_scaling, is_trained
from ..judge.power_law import EXPONENT_BOUNDS
from ..judge.provenance import setting_columns
from ..judge.verdicts import AT_CHANCE, QUESTIONS, Rule, scaling_verdicts, seed_drops, value_text
from .small_samples import Spread, large_sample, pooled_spread, seeds_needed

SETTLED_LABELS = {AT_CHANCE, *(label for q in QUESTIONS.values() for label in (q.yes, q.weak, q.no))}
AXIS_OF = {"context": "N", "task": "T"}  # the lattice axis a verdict varies (n = N on a lattice of N)
HELD_OF = {"context": "T", "task": "N"}  # the lattice axis a verdict holds fixed
# an open answer on min_seeds or more that needs more than REACH x the lattice's seeds is left open
REACH = 1.5


def cell_cost(cell) -> float:
    """A cell's estimated seconds (its kind's cost model, as ``--dry-run`` adds up); 1 if it has none."""
    cost = cell.kind.cost(cell)
    return float(cost.seconds) if cost is not None and math.isfinite(cost.seconds) else 1.0


class Lattice:
    """The sweep's cells as a table: key, point, model, T, N, seed, cost and the setting columns that split
    answers (``settings``: grid axes beyond model/T/N/seed, as scaling.judge.provenance names them)."""

    def __init__(self, plan: Plan):
        rows, grid = [], dict(plan.document.get("grid") or {})
        for planned in plan.cells:
            cell = planned.cell
            rest = {k: v for k, v in planned.axes.items() if k != "seed"}
            rows.append(
                {
                    "cell_key": cell.key,
                    "point": repr(sorted((k, str(v)) for k, v in rest.items())),
                    "model": cell.kind.model_label(cell),
                    "T": float(cell.T),
                    "N": int(cell.N),
                    "seed": int(cell.seed),
                    "cost": cell_cost(cell),
                    **{f"param.{k}": v for k, v in cell.params().items()},
                }
            )
        frame = pd.DataFrame(rows)
        self.settings = sorted(setting_columns(frame, tuple(grid) or ("model", "T", "N", "seed", "task")))
        keep = ["cell_key", "point", "model", "T", "N", "seed", "cost"]
        self.frame = frame[keep].assign(**{s: frame[f"param.{s}"].astype(str) for s in self.settings})
        self.frame = self.frame.set_index("cell_key", drop=False)
        self.seeds = sorted(self.frame["seed"].unique().tolist())
        self.total_cost = float(self.frame["cost"].sum())
        self.points = self.frame.groupby("point").first()

    def keys_at(self, points, seed: int) -> list[str]:
        f = self.frame
        return f.index[f["point"].isin(points) & (f["seed"] == seed)].tolist()

    def cost(self, keys) -> float:
        return float(self.frame.loc[list(keys), "cost"].sum()) if len(keys) else 0.0

    def describe(self, keys) -> str:
        """'mlp T=64 N=5,40 seed 3' for the cells ``keys``, grouped compactly."""
        rows = self.frame.loc[list(keys)]
        parts = []
        for (model, seed), g in rows.groupby(["model", "seed"], sort=True):
            Ts = ",".join(value_text(t) for t in sorted(g["T"].unique()))
            Ns = ",".join(str(n) for n in sorted(g["N"].unique()))
            extra = "".join(f" {s}={'/'.join(sorted(g[s].unique()))}" for s in self.settings)
            parts.append(f"{model} T={Ts} N={Ns}{extra} seed {seed}")
        return "; ".join(parts)


@dataclass
class Answer:
    """One answer the sweep must settle, as the data so far give it."""

    question: AdaptiveQuestion
    group: dict  # model, T or N, settings
    label: str = "no data"  # the verdict, or the exponent's value
    centre: float = math.nan  # the drop (verdict) or the exponent
    lo: float = math.nan
    hi: float = math.nan
    n_seeds: int = 0
    settled: bool = False
    why: str = "no cells yet"
    seeds_needed: float = math.nan
    out_of_reach: bool = False  # open, and needs more seeds than the lattice has (the policy leaves it)
    points: list = field(default_factory=list)  # the points the answer reads (verdict: its two ends)
    candidates: list = field(default_factory=list)  # exponents: lattice points the fit may add

    @property
    def id(self) -> str:
        where = ", ".join(
            f"{k}={value_text(v) if k in ('T', 'N') else v}" for k, v in self.group.items() if k != "model"
        )
        return f"{self.question.name}: {self.group['model']}" + (f" ({where})" if where else "")

    def line(self) -> str:
        if self.question.verdict:
            stat = f"drop {self.centre:.0%} [{self.lo:.0%}, {self.hi:.0%}]" if math.isfinite(self.lo) else ""
        else:
            stat = f"[{self.lo:.3g}, {self.hi:.3g}]" if math.isfinite(self.lo) else ""
        state = "settled" if self.settled else "beyond" if self.out_of_reach else "open"
        more = ""
        if not self.settled and math.isfinite(self.seeds_needed):
            more = f"; needs ~{math.ceil(self.seeds_needed)} seeds"
        detail = "; ".join(t for t in (stat, f"{self.n_seeds} seeds", self.why) if t)
        return f"{state:8s}{self.id}: {self.label} ({detail}{more})"

    def row(self) -> dict:
        return {
            "answer": self.id,
            "question": self.question.name,
            **{k: (value_text(v) if k in ("T", "N") else v) for k, v in self.group.items()},
            "answer_value": self.label,
            "centre": self.centre,
            "lo": self.lo,
            "hi": self.hi,
            "seeds": self.n_seeds,
            "settled": self.settled,
            "out_of_reach": self.out_of_reach,
            "why": self.why,
            "seeds_needed": self.seeds_needed,
        }


class Policy:
    """Answers from a tidy table of complete cells, and the next wave (see the module docstring)."""

    def __init__(self, plan: Plan, settings: AdaptiveSettings | None = None, seed: int | None = None):
        self.plan = plan
        self.settings = settings or plan.adaptive or AdaptiveSettings()
        self.lattice = Lattice(plan)
        self.seed = self.settings.seed if seed is None else seed
        self.seed_order = [int(s) for s in np.random.default_rng(self.seed).permutation(self.lattice.seeds)]
        self.rule = Rule()
        self.budget = self.settings.budget * self.lattice.total_cost

    # ------------------------------------------------------------------ the first wave

    def first_wave(self) -> list[str]:
        f, first = self.lattice.frame, self.settings.first
        keep = f["seed"].isin(self.seed_order[: first.seeds])
        if first.T:
            keep &= f["T"].isin(first.T)
        if first.N:
            keep &= f["N"].isin(first.N)
        return f.index[keep].tolist()

    def first_wave_problem(self) -> str:
        """Why the first wave cannot run within the budget ("" when it can)."""
        cost = self.lattice.cost(self.first_wave())
        if cost <= self.budget:
            return ""
        return (
            f"the first wave costs {cost / self.lattice.total_cost:.0%} of the lattice's estimated"
            f" compute, more than adaptive.budget ({self.settings.budget:g}); raise the budget or shrink"
            " adaptive.first"
        )

    # ------------------------------------------------------------------ answers

    def view(self, table: pd.DataFrame) -> pd.DataFrame:
        """The tidy table restricted to lattice cells, with the lattice's setting columns."""
        table = table[table["cell_key"].isin(self.lattice.frame.index)]
        extra = {s: table["cell_key"].map(self.lattice.frame[s]) for s in self.lattice.settings}
        return table.assign(**extra)

    def groups(self, by: list[str]) -> list[dict]:
        cols = ["model", *by, *self.lattice.settings]
        rows = self.lattice.frame[cols].drop_duplicates().sort_values(cols)
        return [dict(zip(cols, r)) for r in rows.itertuples(index=False)]

    def _select(self, group: dict) -> pd.DataFrame:
        f = self.lattice.frame
        keep = np.ones(len(f), bool)
        for k, v in group.items():
            keep &= (f[k] == v).to_numpy()
        return f[keep]

    def assess(self, table: pd.DataFrame, run: set[str], exponents: bool = True) -> list[Answer]:
        """Every answer of the lattice, from the complete cells' table (``run``: their keys); the verdicts
        alone with ``exponents=False``."""
        view = self.view(table)
        answers: list[Answer] = []
        for q in self.settings.questions:
            if q.verdict:
                answers += self._verdicts(q, view, run)
        for q in self.settings.questions:
            if q.exponent and exponents:
                answers += self._exponents(q, view, run, answers)
        seeds = len(self.lattice.seeds)
        for a in answers:
            # an exponent's missing points count as seeds in proportion (see _level)
            grow = (len(a.points) + len(a.candidates)) / len(a.points) if a.points else 1.0
            reach = REACH * seeds * grow
            at_bound = "reaches a bound of the fit" in a.why  # a degenerate fit: seeds rarely pin it
            if a.settled or a.n_seeds < self.settings.min_seeds or (a.seeds_needed <= reach and not at_bound):
                continue
            # a few seeds estimate S_need roughly: only a hopeless one (10x) is left before 2/3 of the seeds
            if a.n_seeds < math.ceil(2 * seeds / 3) and a.seeds_needed <= 10 * reach and not at_bound:
                continue
            a.out_of_reach = True
            a.why = "; ".join(
                t for t in (a.why, f"the lattice has {len(self.lattice.seeds)} seeds: out of its reach") if t
            )
        return answers

    def _key(self, values: dict, held: list[str]) -> tuple:
        """An answer's group as a lookup key, from a lattice group or an analysis row (whose N is ``n``: the
        lattice's verdict and fit groups over N are judged at n = N)."""
        axes = (float(values[h] if h in values else values["n"]) for h in held)
        return (values["model"], *axes, *(str(values[s]) for s in self.lattice.settings))

    def _verdict_rows(self, q: AdaptiveQuestion, view: pd.DataFrame) -> dict:
        if view.empty:
            return {}
        v = scaling_verdicts(view, q.verdict, rule=self.rule)
        if v.empty:
            return {}
        v = v[is_trained(v["predictor"])]
        held = [HELD_OF[q.verdict]]
        return {self._key(row, held): row for row in v.to_dict("records")}

    def _spreads(self, q: AdaptiveQuestion, view: pd.DataFrame) -> dict:
        """The pooled seed-to-seed spread of each model's drops (per setting) for verdict question q, over the
        groups whose drops span the lattice's whole axis (as the verdicts it settles do)."""
        if view.empty:
            return {}
        drops = seed_drops(view, q.verdict, rule=self.rule)
        axis = self.lattice.frame[AXIS_OF[q.verdict]]
        drops = drops[(drops["x_min"] == axis.min()) & (drops["x_max"] == axis.max())]
        if drops.empty:
            return {}
        held = "n" if HELD_OF[q.verdict] == "N" else HELD_OF[q.verdict]
        model = ["model", *self.lattice.settings]
        out = {}
        for key, part in drops.groupby(model, dropna=False, sort=True):
            series = {h: g.set_index("seed")["drop"] for h, g in part.groupby(held)}
            out[self._key(dict(zip(model, key)), [])] = pooled_spread(series)  # key: a tuple (by a list)
        return out

    def _verdicts(self, q: AdaptiveQuestion, view: pd.DataFrame, run: set[str]) -> list[Answer]:
        held, axis = HELD_OF[q.verdict], AXIS_OF[q.verdict]
        rows = self._verdict_rows(q, view)
        spreads = self._spreads(q, view)
        out = []
        for group in self.groups([held]):
            cells = self._select(group)
            ends = cells[cells[axis].isin([cells[axis].min(), cells[axis].max()])]
            a = Answer(q, group, points=sorted(ends["point"].unique()))
            row = rows.get(self._key(group, [held]))
            if row is not None and row["x_min"] == cells[axis].min() and row["x_max"] == cells[axis].max():
                self._judge(a, row, spreads.get(self._key(group, [])))
            elif row is not None:
                a.why = f"the {axis} ends of the lattice are not both run yet"
            if not a.settled and not math.isfinite(a.seeds_needed):
                a.seeds_needed = float(max(self.settings.min_seeds, a.n_seeds + 1))
            out.append(a)
        return out

    def _judge(self, a: Answer, row: dict, spread: Spread | None = None) -> None:
        """Fill a verdict answer from its row. Settled: a decided label on min_seeds seeds that also holds
        on the small-sample interval, else open with the seeds it needs. The small-sample interval of the
        drop is the Student t interval from the model's spread pooled over its groups (``pooled_spread``),
        never narrower than the verdict's own (Student t) side; without a spread, the verdict's own."""
        s = self.settings
        a.label, a.n_seeds = row["verdict"], int(row["n_seeds"])
        a.centre, a.lo, a.hi = row["drop"], row["drop_lo"], row["drop_hi"]
        a.why = row.get("note") or ""
        t, chance = self.rule.threshold, 1.0 - self.rule.chance_margin
        shrink = large_sample(a.n_seeds, self.rule.level)
        need = [float(s.min_seeds), float(a.n_seeds + 1)]
        ok = a.n_seeds >= s.min_seeds
        if a.label == AT_CHANCE:
            pass  # a point rule: the end at or above chance
        elif math.isfinite(a.lo):
            c = a.centre
            side = (c - a.lo) if c > t else (a.hi - c)  # the verdict's (t) half-width towards the margin
            raw = side * shrink
            if spread is not None and spread.dof > 0:
                side = max(side, spread.half_width(a.n_seeds, self.rule.level))
                raw = max(raw, spread.half_width(a.n_seeds, self.rule.level, large_sample=True))
            ok &= side < abs(c - t) and a.label in SETTLED_LABELS
            if side >= abs(c - t):  # the seeds it needs, from the large-sample width (t shrinks with S)
                need.append(max(seeds_needed(a.n_seeds, raw, abs(c - t), s.min_seeds), a.n_seeds + 1.0))
            weak = a.label == QUESTIONS[a.question.verdict].weak
            if weak:  # resolved above 0 too, on the wider of the two intervals
                ok &= max(c - a.lo, side) < c
            if (c > t or weak) and math.isfinite(row["end_hi"]):
                h_end = row["end_hi"] - row["end"]
                ok &= h_end < chance - row["end"]
                if h_end >= chance - row["end"]:
                    need.append(
                        max(
                            seeds_needed(a.n_seeds, h_end * shrink, chance - row["end"], s.min_seeds),
                            a.n_seeds + 1.0,
                        )
                    )
        else:
            ok = False
        if ok:
            a.settled = True
            return
        if a.label in SETTLED_LABELS:
            a.why = "; ".join(
                t
                for t in (
                    a.why,
                    f"fewer than {s.min_seeds} seeds"
                    if a.n_seeds < s.min_seeds
                    else "not yet on the small-sample (Student t) interval",
                )
                if t
            )
        a.seeds_needed = max(need)

    def _exponents(
        self, q: AdaptiveQuestion, view: pd.DataFrame, run: set[str], verdicts: list[Answer]
    ) -> list[Answer]:
        held = {"joint": [], "context": ["T"], "task": ["N"]}[q.form]
        fits = {}
        models = view[is_trained(view["predictor"])] if not view.empty else view
        if not models.empty:
            f = fit_scaling(models, q.form)
            fits = {self._key(row, held): row for row in f.to_dict("records")}
        sampled = set(self.lattice.frame.loc[list(run), "point"]) if run else set()
        axis_question = "context" if q.exponent == "alpha" else "task"
        out = []
        for group in self.groups(held):
            cells = self._select(group)
            a = Answer(q, group)
            a.points = sorted(set(cells["point"]) & sampled)
            a.candidates = sorted(set(cells["point"]) - sampled)
            own = [
                v
                for v in verdicts
                if v.question.verdict == axis_question and v.group["model"] == group["model"]
            ]
            if (
                own
                and all(v.settled for v in own)
                and not any(v.label == QUESTIONS[axis_question].yes for v in own)
            ):
                a.label, a.settled = "moot", True
                a.why = (
                    f"{group['model']} does not {axis_question}-scale (every {axis_question} verdict settled)"
                )
                out.append(a)
                continue
            row = fits.get(self._key(group, held))
            if row is None:
                a.seeds_needed = float(self.settings.min_seeds)
                out.append(a)
                continue
            a.n_seeds = int(row["n_seeds"])
            a.centre, a.lo, a.hi = row[q.exponent], row[f"{q.exponent}_lo"], row[f"{q.exponent}_hi"]
            a.label = f"{q.exponent} = {a.centre:.3g}" if math.isfinite(a.centre) else "not fitted"
            a.why = row.get("note") or ""
            h = (a.hi - a.lo) / 2 if math.isfinite(a.lo) else math.nan  # Student t over seeds already
            bound = math.isfinite(a.lo) and (
                a.lo <= EXPONENT_BOUNDS[0] + 1e-6 or a.hi >= EXPONENT_BOUNDS[1] - 1e-6
            )
            if math.isfinite(h) and h <= q.within and a.n_seeds >= self.settings.min_seeds and not bound:
                a.settled = True
            else:
                if bound:
                    a.why = "; ".join(t for t in (a.why, "the interval reaches a bound of the fit") if t)
                elif math.isfinite(h) and h > q.within:
                    a.why = "; ".join(t for t in (a.why, f"+-{h:.2g} > {q.within:g}") if t)
                raw = h * large_sample(a.n_seeds, self.rule.level) if math.isfinite(h) else h
                a.seeds_needed = max(
                    seeds_needed(a.n_seeds, raw, q.within, self.settings.min_seeds), a.n_seeds + 1.0
                )
            out.append(a)
        return out

    # ------------------------------------------------------------------ the next wave

    def _seeds_at(self, present: set[str]) -> dict[str, set[int]]:
        f = self.lattice.frame.loc[list(present)] if present else self.lattice.frame.iloc[0:0]
        return {p: set(g) for p, g in f.groupby("point")["seed"]}

    def _level(self, a: Answer, seeds_at: dict) -> float:
        """The answer's seeds as the present cells give them (an exponent's added points count as seeds in
        proportion): the quantity its seeds_needed is measured in."""
        if not a.points:
            return 0.0
        sets = [seeds_at.get(p, set()) for p in a.points]
        if a.question.verdict:
            return float(len(set.intersection(*sets)))
        extra = [p for p in a.candidates if seeds_at.get(p)]
        base = min(len(s) for s in sets)
        return base * (len(a.points) + len(extra)) / len(a.points)

    def _actions(self, a: Answer, seeds_at: dict, present: set[str]) -> list[tuple[str, list[str]]]:
        """(description, cell keys) of the actions that advance answer ``a``."""
        out = []
        if a.points:
            sets = [seeds_at.get(p, set()) for p in a.points]
            if a.question.verdict:
                common = set.intersection(*sets)
                nxt = next((s for s in self.seed_order if s not in common), None)
                if nxt is not None:
                    keys = [k for k in self.lattice.keys_at(a.points, nxt) if k not in present]
                    out.append(("one more seed", keys))
            else:
                low = min(len(s) for s in sets)
                keys = []
                for p, s in zip(a.points, sets):
                    if len(s) == low:
                        nxt = next((x for x in self.seed_order if x not in s), None)
                        if nxt is not None:
                            keys += [k for k in self.lattice.keys_at([p], nxt) if k not in present]
                if keys:
                    out.append(("one more seed", keys))
        if not a.question.verdict and a.candidates:
            pts = self.lattice.points
            used = pts.loc[a.points] if a.points else pts.iloc[0:0]
            for axis in ("T", "N"):
                fresh = pts.loc[a.candidates]
                fresh = fresh[~fresh[axis].isin(used[axis])] if len(used) else fresh
                for value, g in fresh.groupby(axis):
                    other = "N" if axis == "T" else "T"
                    g = g[g[other].isin(used[other])] if len(used) else g
                    seeds = self.seed_order[: max(self.settings.first.seeds, 2)]
                    keys = [
                        k for s in seeds for k in self.lattice.keys_at(list(g.index), s) if k not in present
                    ]
                    if keys:
                        out.append((f"{axis} = {value_text(value)}", keys))
        return out

    def next_wave(self, answers: list[Answer], run: set[str]) -> tuple[list[str], list[str], str]:
        """(cell keys, reasons, why it stops when empty): the next wave from the answers so far."""
        open_ = [a for a in answers if not a.settled and not a.out_of_reach]
        if not open_:
            beyond = sum(a.out_of_reach for a in answers)
            if beyond:
                return [], [], f"every answer is settled but {beyond} beyond the lattice's seeds"
            return [], [], "every answer is settled"
        spent = self.lattice.cost(run)
        room = self.budget - spent
        # ties broken at random, drawn from the policy's seed and the cells run: a resumed driver (a new
        # Policy) chooses the wave an uninterrupted one would
        ran = self.lattice.frame.index.get_indexer(list(run))
        rng = np.random.default_rng([self.seed, *sorted(int(i) for i in ran if i >= 0)])
        start = {id(a): self._level(a, self._seeds_at(run)) for a in open_}
        chosen: list[str] = []
        reasons: list[str] = []
        present = set(run)
        while len(chosen) < self.settings.wave:
            seeds_at = self._seeds_at(present)
            before = {id(a): self._level(a, seeds_at) for a in open_}
            best, best_score = None, 0.0
            for a in open_:
                for what, keys in self._actions(a, seeds_at, present):
                    cost = self.lattice.cost(keys)
                    if not keys or cost > room - self.lattice.cost(chosen) + 1e-9:
                        continue
                    after_at = self._seeds_at(present | set(keys))
                    gain, served = 0.0, []
                    for b in open_:
                        need = b.seeds_needed if math.isfinite(b.seeds_needed) else 1e9
                        if b.question.verdict or b.n_seeds < self.settings.min_seeds:
                            need = min(need, len(self.lattice.seeds))  # what the lattice can give
                        need = max(need, start[id(b)] + 1)  # open past its estimate: one more seed at least
                        lo, hi = before[id(b)], self._level(b, after_at)
                        if hi <= lo or lo >= need:
                            continue
                        part = (min(hi, need) - lo) / max(need - start[id(b)], 1.0)
                        gain += part
                        served.append(b)
                    if gain <= 0:
                        continue
                    score = gain / cost * (1 + 1e-9 * rng.random())  # ties: at random
                    if score > best_score:
                        best, best_score = (a, what, keys, served), score
            if best is None:
                break
            a, what, keys, served = best
            chosen += keys
            present |= set(keys)
            names = "; ".join(b.id for b in served[:3]) + (
                f" and {len(served) - 3} more" if len(served) > 3 else ""
            )
            reasons.append(f"{self.lattice.describe(keys)} ({what}) for {names}")
        if chosen:
            return chosen, reasons, ""
        if any(self._actions(a, self._seeds_at(run), run) for a in open_):
            return (
                [],
                [],
                f"the budget leaves too little for the cells the open answers need"
                f" ({spent / self.lattice.total_cost:.0%} of the lattice's compute spent,"
                f" budget {self.settings.budget:.0%})",
            )
        return [], [], "no cell of the lattice can narrow the open answers further"
