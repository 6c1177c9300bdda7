"""Adaptive sweeps (scaling.adaptive): the `adaptive:` section is checked before any work; a real `--adaptive`
run on a local Ray and MLflow store runs its waves, records them on the sweep's parent run, and, killed
mid-wave and rerun, finishes without training any cell twice; the replay evaluator replays the policy on a
store holding the whole lattice."""

from __future__ import annotations

import json
import math
import re
import signal
import time

import numpy as np
import pandas as pd
import pytest
import yaml
from drivers import start_driver
from mlflow.tracking import MlflowClient

from scaling.planning.plan import SweepError, load_plan
from scaling.sweep.__main__ import main

ADAPTIVE = {
    "budget": 0.9,
    "questions": [{"verdict": "context"}, {"verdict": "task"}],
    "first": {"seeds": 2},
    "wave": 4,
    "min_seeds": 3,
}


def lattice_sweep(tiny_sweep, name="adaptive", steps=100) -> dict:
    """A fig7-style lattice small enough for a test: MLPs over T x N x 3 seeds, cells of ~1 s."""
    doc = tiny_sweep
    doc["name"] = name
    doc["defaults"]["train"].update(steps=steps, checkpoint_every=50, log_every=25, lr=3e-3)
    doc["defaults"]["eval"] = {"prompts": 128, "bootstrap": 50, "baselines": ["zero"]}
    doc["defaults"].pop("N", None)
    doc["grid"] = {"model": ["mlp"], "T": [2, 16, "inf"], "N": [2, 8], "seed": [0, 1, 2]}
    doc["adaptive"] = dict(ADAPTIVE)
    return doc


def write(tmp_path, doc, name="sweep.yaml"):
    path = tmp_path / name
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


@pytest.mark.parametrize(
    "change, message",
    [
        ({"budget": 0}, "adaptive.budget: a fraction of the full lattice's compute in (0, 1], got 0"),
        ({"wave": 0}, "adaptive.wave: must be >= 1 cell"),
        ({"min_seeds": 4}, "adaptive.min_seeds: the grid's seed axis has 3 value(s)"),
        ({"first": {"T": [16, "inf"]}}, "adaptive.first.T: must include the grid's ends 2.0 and inf"),
        ({"first": {"N": [3]}}, "adaptive.first.N: [3] not among the grid's values [2, 8]"),
        ({"questions": [{"exponent": "alpha"}]}, "adaptive.questions[0].within: must be > 0, got 0.0"),
        ({"questions": [{"verdict": "speed"}]}, "adaptive.questions[0].verdict: unknown value 'speed'"),
        (
            {"questions": [{"verdict": "task", "exponent": "beta", "within": 1}]},
            "either a verdict (context or task) or an exponent",
        ),
        ({"speed": 2}, "adaptive.speed: unknown"),
        ({"seed": -1}, "adaptive.seed: must be >= 0 (it seeds numpy's generator), got -1"),
    ],
)
def test_a_bad_adaptive_section_is_refused_with_its_line(tmp_path, tiny_sweep, change, message):
    doc = lattice_sweep(tiny_sweep)
    doc["adaptive"].update(change)
    path = write(tmp_path, doc)
    with pytest.raises(SweepError) as err:
        load_plan(path)
    assert message in str(err.value)
    assert re.match(rf"{re.escape(str(path))}:\d+: ", str(err.value)), str(err.value)


def test_adaptive_without_a_section_or_over_budget_exits_2_writing_nothing(tmp_path, tiny_sweep, capsys):
    doc = lattice_sweep(tiny_sweep)
    del doc["adaptive"]
    plain = write(tmp_path, doc, "plain.yaml")
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    args = ["--tracking-uri", uri, "--storage", str(tmp_path / "runs"), "--adaptive"]
    assert main([str(plain), *args]) == 2
    assert "--adaptive needs an `adaptive:` section" in capsys.readouterr().err
    doc["adaptive"] = {**ADAPTIVE, "budget": 0.5}  # the first wave is 2 of 3 seeds
    tight = write(tmp_path, doc, "tight.yaml")
    assert main([str(tight), *args]) == 2
    assert "the first wave costs 67% of the lattice's estimated compute" in capsys.readouterr().err
    # the replay plans the lattice as it was swept, --set included, and refuses a bad one the same way
    from scaling.adaptive.replay import main as replay_main

    replay = ["--tracking-uri", uri, "--out", str(tmp_path / "replay")]
    assert replay_main([str(plain), *replay, "--set", "grid.seed=[0,1,2,3]"]) == 2
    assert "no `adaptive:` section to replay" in capsys.readouterr().err
    assert replay_main([str(tight), *replay, "--set", "adaptive.budget=2"]) == 2
    assert "--set adaptive.budget=2: adaptive.budget: " in capsys.readouterr().err
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "runs").exists()
    assert not (tmp_path / "replay").exists()


def run_driver(tmp_path, name, path, uri, storage, *flags) -> tuple[int, str]:
    """The driver run to its end (scaling.sweep via tests/drivers.py); its exit status and output."""
    log_path = tmp_path / f"{name}.log"
    with open(log_path, "w") as log:
        rc = start_driver(path, uri, storage, log, *flags).wait(timeout=300)
    return rc, log_path.read_text()


def cell_runs(uri, name):
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(name)
    return client, exp, client.search_runs([exp.experiment_id], "tags.kind = 'cell'")


@pytest.mark.e2e
@pytest.mark.slow  # ~100 s: a real adaptive run, killed, resumed, continued in full, analysed, replayed
def test_an_adaptive_run_killed_mid_wave_resumes_without_training_a_cell_twice(tmp_path, tiny_sweep):
    doc = lattice_sweep(tiny_sweep)
    path = write(tmp_path, doc)
    uri, storage = f"sqlite:///{tmp_path}/mlflow.db", str(tmp_path / "storage")
    with open(tmp_path / "first.log", "w") as log:
        first = start_driver(path, uri, storage, log, "--num-cpus", "2", "--adaptive")
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:  # kill once the second wave has begun
            text = (tmp_path / "first.log").read_text()
            if re.search(r"wave 2: \d+ cells", text) or first.poll() is not None:
                break
            time.sleep(0.3)
        first.send_signal(signal.SIGKILL)
        first.wait()
    text = (tmp_path / "first.log").read_text()
    assert "wave 1: 12 cells" in text and "first wave: T in {2, 16, inf}, N in {2, 8}" in text, text
    assert "answers:" in text and "context verdict: mlp (T=2)" in text, text
    _, _, before = cell_runs(uri, "adaptive")
    done_before = {
        r.data.tags["cell_key"]: r.info.end_time for r in before if r.data.tags["status"] == "complete"
    }
    assert len(done_before) >= 12

    with open(tmp_path / "second.log", "w") as log:
        second = start_driver(path, uri, storage, log, "--num-cpus", "2", "--adaptive")
        assert second.wait(timeout=400) == 0, (tmp_path / "second.log").read_text()
    text = (tmp_path / "second.log").read_text()
    assert "adaptive sweep ends: " in text, text
    client, exp, after = cell_runs(uri, "adaptive")
    keys = [r.data.tags["cell_key"] for r in after]
    assert len(keys) == len(set(keys))  # one run per cell: nothing trained twice
    for run in after:
        assert run.data.tags["status"] == "complete"
        if run.data.tags["cell_key"] in done_before:
            assert run.info.end_time == done_before[run.data.tags["cell_key"]]
    assert 12 < len(after) <= 18

    parent = client.search_runs([exp.experiment_id], "tags.kind = 'sweep'")[0]
    names = sorted(a.path for a in client.list_artifacts(parent.info.run_id, "adaptive"))
    waves = [n for n in names if re.fullmatch(r"adaptive/wave_\d+\.json", n)]
    assert waves[0] == "adaptive/wave_01.json" and len(waves) >= 2
    records = [
        json.loads(open(client.download_artifacts(parent.info.run_id, w, str(tmp_path))).read())
        for w in waves
    ]
    assert [r["wave"] for r in records] == list(range(1, len(records) + 1))
    assert records[-1]["cells"] == [] and records[-1]["stop"]
    ran = set().union(*(r["cells"] for r in records))
    assert ran == set(keys)  # every cell run belongs to a recorded wave, and every wave's cells ran
    assert any(n.startswith("adaptive/answers_") for n in names)
    settled = client.get_metric_history(parent.info.run_id, "adaptive.settled")
    assert len(settled) == len(records)

    # Once more: the answers are read again, no cell runs, no new wave is recorded.
    rc, again = run_driver(tmp_path, "again", path, uri, storage, "--adaptive")  # no Ray is started
    assert rc == 0, again
    assert "the adaptive sweep has ended: " in again and "answers: " in again, again
    _, _, final = cell_runs(uri, "adaptive")
    assert len(final) == len(after)
    assert len(
        [a for a in client.list_artifacts(parent.info.run_id, "adaptive") if "wave_" in a.path]
    ) == len(waves)

    # The analysis report shows the path the waves took.
    from analysis.pipeline import analyse
    from analysis.plugin import Request
    from papers.context_scaling.analysis.plugin import TRAINING

    out = tmp_path / "analysis"
    result = analyse(Request(str(path), tracking_uri=uri, out=out, bootstrap=200, log=False), plugin=TRAINING)
    report = (tmp_path / "analysis" / "report.html").read_text()
    assert len(result.waves) == len(records) and "<h2>Adaptive path</h2>" in report
    assert "first wave: T in {2, 16, inf}" in report

    # Continued as a full sweep: only the cells the policy never ran are trained.
    rc, full = run_driver(tmp_path, "full", path, uri, storage)
    assert rc == 0, full
    assert f"{18 - len(after)} of 18 cells to run ({len(after)} already complete)" in full, full
    _, _, whole = cell_runs(uri, "adaptive")
    assert len(whole) == 18 and len({r.data.tags["cell_key"] for r in whole}) == 18

    # The replay evaluator on the store that now holds the whole lattice.
    from scaling.adaptive.replay import main as replay_main

    assert (
        replay_main(
            [str(path), "--tracking-uri", uri, "--policy-seeds", "3", "--out", str(tmp_path / "replay")]
        )
        == 0
    )
    frame = pd.read_csv(tmp_path / "replay" / "replay.csv")
    reference = frame[frame["method"] == "full lattice"].iloc[0]
    assert reference["verdicts_agree"] == 1.0 and reference["spent"] == 1.0
    final = frame[(frame["method"] == "adaptive") & (frame["final"] == True)]  # noqa: E712
    assert sorted(final["seed"]) == [0, 1, 2]
    assert (final["spent"] <= ADAPTIVE["budget"] + 1e-9).all()
    same = frame[frame["method"] == "random, same cost"].set_index("seed")
    assert (same["spent"] <= final.set_index("seed")["spent"] + 1e-9).all()
    # both ends of N are the whole N axis here: the oracle reads every cell on all 3 seeds (min_seeds)
    bound = frame[frame["method"] == "oracle"]
    assert sorted(bound["seed"]) == [0, 1, 2] and bound["spent"].tolist() == pytest.approx([1.0] * 3)
    assert (tmp_path / "replay" / "replay.png").stat().st_size > 10_000
    summary = (tmp_path / "replay" / "summary.md").read_text()
    assert "adaptive (final wave)" in summary and "oracle for the verdicts" in summary


def tidy_rows(plan, c, err: float) -> list[dict]:
    """The analysis' tidy rows of lattice cell ``c`` (a Lattice.frame row) whose model has error ``err``
    (the zero predictor's is 1)."""
    return [
        dict(sweep=plan.name, cell_key=c.cell_key, run_id=f"r-{c.cell_key}", model=c.model, T=c.T, N=c.N,
             seed=c.seed, predictor=predictor, n=c.N, err=value, err_lo=value, err_hi=value)
        for predictor, value in (("model", err), ("zero", 1.0))
    ]  # fmt: skip


def known_lattice(tmp_path, tiny_sweep, noise=0.01, **adaptive):
    """(plan, policy, table): a 6-seed lattice whose every verdict is clear on the first 3 seeds of the
    policy's order except the context verdict at T = 16, whose first 3 seeds do not drop at all while the
    other 3 drop by 80%; errors vary by a factor exp(noise * normal); ``adaptive`` overrides settings."""
    from scaling.adaptive.policy import Policy

    doc = lattice_sweep(tiny_sweep)
    doc["grid"].update(T=[2, 16, "inf"], N=[2, 4, 8], seed=[0, 1, 2, 3, 4, 5])
    doc["adaptive"].update(adaptive)
    plan = load_plan(write(tmp_path, doc))
    policy = Policy(plan)
    late = set(policy.seed_order[3:])
    normal = np.random.default_rng(0).normal
    rows = []
    for c in policy.lattice.frame.itertuples():
        drop = (0.8 if c.seed in late else 0.0) if c.T == 16 else 0.3
        share = {2: 0.0, 4: 0.5, 8: 1.0}[c.N]  # the drop's share reached at N
        err = (0.6 if math.isinf(c.T) else 0.78) * (1 - drop * share) * math.exp(noise * normal())
        rows += tidy_rows(plan, c, err)
    table = pd.DataFrame(rows)
    return plan, policy, table


def test_the_replay_oracle_reads_each_verdict_off_the_fewest_seeds_that_give_the_lattices_label(
    tmp_path, tiny_sweep
):
    """The replay's oracle (a lower bound on the compute any policy drawing seeds in this order needs for
    the lattice's verdicts) on a lattice with known answers: every verdict is clear on the first 3 seeds of
    the policy's order except the context verdict at T = 16, whose first 3 seeds do not drop at all while the
    other 3 drop by 80%: the whole lattice says it context-scales, and only its last seeds show it."""
    from scaling.adaptive.replay import oracle

    plan, policy, table = known_lattice(tmp_path, tiny_sweep)
    whole = set(table["cell_key"])
    reference = policy.assess(table, whole)
    labels = {a.id: a.label for a in reference}
    assert labels["context verdict: mlp (T=16)"] == "context-scales", labels
    share, seeds = oracle(policy, table, reference)
    k = seeds.pop("context verdict: mlp (T=16)")
    assert k > 3
    assert sorted(seeds) == sorted(a for a in labels if a != "context verdict: mlp (T=16)")
    assert set(seeds.values()) == {3}, seeds
    # its cells: 3 seeds at every end a verdict reads, more at T = 16's two ends, none at T = 16, N = 4
    f = policy.lattice.frame
    ends = f[(f["T"].isin([2, math.inf]) | f["N"].isin([2, 8])) & (f["T"] != 16)]
    at16 = f[(f["T"] == 16) & f["N"].isin([2, 8])]
    want = ends[ends["seed"].isin(policy.seed_order[:3])]["cost"].sum()
    want += at16[at16["seed"].isin(policy.seed_order[:k])]["cost"].sum()
    assert share == pytest.approx(want / policy.lattice.total_cost)
    assert 0 < share < 1


def test_pooled_spread_counts_the_degrees_of_freedom_that_correlated_groups_carry():
    """One group: its own sd on S - 1; two groups whose drops are uncorrelated over their seeds: twice the
    degrees of freedom; two groups whose drops move together seed by seed: no more than one group's."""
    from scaling.adaptive.small_samples import pooled_spread

    a = pd.Series([0.1, -0.1, 0.0], index=[4, 5, 6])
    b = pd.Series([1.0, 1.0, -2.0], index=[4, 5, 6]) / 10 / math.sqrt(3)  # sd 0.1, uncorrelated with a
    one = pooled_spread({"a": a})
    assert one.sd == pytest.approx(0.1) and one.dof == pytest.approx(2)
    apart = pooled_spread({"a": a, "b": b})
    assert apart.sd == pytest.approx(0.1) and apart.dof == pytest.approx(4)
    together = pooled_spread({"a": a, "b": a + 1.0})
    assert together.sd == pytest.approx(0.1) and together.dof == pytest.approx(2)
    assert apart.half_width(3, 0.9) < one.half_width(3, 0.9) == pytest.approx(together.half_width(3, 0.9))
    assert pooled_spread({"a": a.iloc[:1]}).dof == 0 and math.isinf(pooled_spread({}).half_width(3, 0.9))


def test_a_verdict_whose_few_seeds_happen_to_agree_settles_only_on_the_models_pooled_spread(
    tmp_path, tiny_sweep
):
    """Two task verdicts (N = 2 and N = 8) on 3 seeds. At N = 2 the drops are 12% with sd 1%: the verdict's
    own t interval resolves it ("task-scales"). The model's spread pooled with N = 8's (sd 7%) is 5%: with
    the two groups' drops uncorrelated over the seeds (4 degrees of freedom) its t half-width, 6.2%, clears
    the 7% to the margin and the verdict settles; the same drops made to move together seed by seed pool to
    no more than one group's 2 degrees of freedom (8.4%), and it stays open, though the analysis' verdict is
    the same."""
    from scaling.adaptive.policy import Policy

    doc = lattice_sweep(tiny_sweep)
    doc["grid"].update(T=[2, 16, "inf"], N=[2, 8], seed=[0, 1, 2, 3, 4, 5])
    plan = load_plan(write(tmp_path, doc))
    policy = Policy(plan)
    first = policy.seed_order[:3]
    apart = {2: [1.0, -1.0, 0.0], 8: [1.0 / math.sqrt(3), 1.0 / math.sqrt(3), -2.0 / math.sqrt(3)]}
    sd = {2: 0.01, 8: 0.07}

    def table(together: bool) -> tuple[pd.DataFrame, set[str]]:
        rows, run = [], set()
        for c in policy.lattice.frame.itertuples():
            if c.seed not in first:
                continue
            run.add(c.cell_key)
            deviation = apart[2 if together else c.N][first.index(c.seed)]
            drop = 0.12 + sd[c.N] * deviation  # task drop at this N: from T = 2 to T = inf
            err = 0.8 * {2.0: 1.0, 16.0: 1 - drop / 2}.get(c.T, 1 - drop) * (1.0 if c.N == 2 else 0.6)
            rows += tidy_rows(plan, c, err)
        return pd.DataFrame(rows), run

    for together, settled in ((False, True), (True, False)):
        answers = {a.id: a for a in policy.assess(*table(together), exponents=False)}
        a = answers["task verdict: mlp (N=2)"]
        assert a.label == "task-scales" and a.n_seeds == 3, a.line()
        assert a.centre == pytest.approx(0.12, abs=1e-3)
        assert a.settled is settled, (together, a.line())
        assert not answers["task verdict: mlp (N=8)"].settled


def test_a_resumed_policy_chooses_the_wave_an_uninterrupted_one_would(tmp_path, tiny_sweep):
    """A driver restarted between waves builds a new Policy; its choices (ties between equally good cells
    included) are the ones the policy that ran every wave makes, so an interrupted adaptive sweep takes the
    same path as one left alone."""
    from scaling.adaptive.policy import Policy
    from scaling.adaptive.replay import run_cells

    # three context verdicts (T = 2, 16, inf) alike in cost and seeds needed, one verdict's cells a wave:
    # which goes first is a tie to break
    questions = [{"verdict": "context"}]
    plan, policy, table = known_lattice(tmp_path, tiny_sweep, noise=0.0, questions=questions, wave=2)

    def path(fresh: bool) -> list[list[str]]:
        keys, run, waves = policy.first_wave(), set(), []
        while keys and len(waves) < 12:
            waves.append(sorted(keys))
            run |= set(keys)
            p = Policy(plan) if fresh else policy
            keys, _, _ = p.next_wave(p.assess(run_cells(table, run), run, exponents=False), run)
        return waves

    alone = path(fresh=False)
    assert len(alone) >= 3, alone
    assert path(fresh=True) == alone


def test_the_replay_reads_the_even_design_at_the_budget_on_each_seed_order(tmp_path, tiny_sweep):
    """Beside each replay, the even design of the budget's compute: every point of the lattice on the first k
    seeds of that replay's seed order (k the most the budget holds: 5 of 6 at 90%), scored like the policy's
    answers, exponents included; the summary counts the replays whose every verdict and exponent is the
    lattice's, and the figure gains the exponents' panel."""
    from scaling.adaptive.replay import _policy_run, draw, run_cells, score, summarise

    questions = [{"verdict": "context"}, {"verdict": "task"}, {"exponent": "alpha", "within": 0.05}]
    plan, policy, table = known_lattice(tmp_path, tiny_sweep, questions=questions)
    whole = set(table["cell_key"])
    reference = policy.assess(table, whole)
    rows, line = _policy_run(plan, table, 3, reference)
    even = [r for r in rows if r["method"] == "balanced, its seed order"]
    assert len(even) == 1 and even[0]["k"] == 5 and even[0]["spent"] == pytest.approx(5 / 6), even
    from scaling.adaptive.policy import Policy

    order = Policy(plan, seed=3).seed_order
    f = policy.lattice.frame
    keys = set(f.index[f["seed"].isin(order[:5])])
    assert {k: even[0][k] for k in score([], [])} == score(
        policy.assess(run_cells(table, keys), keys), reference
    )
    assert "its first 5 seeds at every point" in line
    frame = pd.DataFrame(
        [{"method": "full lattice", "seed": -1, "spent": 1.0} | score(reference, reference), *rows]
    )
    summary = summarise(frame)
    assert "every point on the first 5 seeds of each seed order (at the budget)" in summary
    assert re.search(
        r"- adaptive \(final wave\): every verdict in [01] of 1, no exponent wrong in [01]", summary
    )
    draw(frame, tmp_path / "replay.png")
    assert (tmp_path / "replay.png").stat().st_size > 10_000


def test_an_exponent_is_right_inside_its_own_interval_open_when_unclaimed_and_wrong_otherwise():
    """The consistency rule on explicit intervals: a claimed (settled) exponent is right when the whole
    lattice's estimate lies inside the claim's interval, whatever the lattice's own interval; an unsettled one
    (open, or beyond the lattice's seeds) is open whatever its value; "moot" is right only against "moot"."""
    from scaling.adaptive.policy import Answer
    from scaling.adaptive.replay import OPEN, RIGHT, WRONG, exponent_outcome
    from scaling.planning.adaptive_settings import AdaptiveQuestion

    q = AdaptiveQuestion(exponent="alpha", within=0.05)

    def answer(centre, lo, hi, settled=True, label=None, beyond=False):
        a = Answer(q, {"model": "mlp"}, label=label or f"alpha = {centre}", centre=centre, lo=lo, hi=hi)
        a.settled, a.out_of_reach = settled, beyond
        return a

    lattice = answer(0.286, 0.265, 0.302)
    assert exponent_outcome(answer(0.304, 0.257, 0.326), lattice) == RIGHT
    assert exponent_outcome(answer(0.32, 0.29, 0.34), lattice) == WRONG  # 0.286 below the claim's interval
    assert exponent_outcome(answer(0.0098, 0.0, 0.06, settled=False, beyond=True), lattice) == OPEN
    assert exponent_outcome(answer(5.0, 1.0, 10.0, settled=False), lattice) == OPEN
    unidentified = answer(3.0, 0.0, 10.0, settled=False)  # the lattice's own interval is the fit's range
    assert exponent_outcome(answer(0.5, 0.45, 0.55), unidentified) == WRONG
    assert exponent_outcome(answer(3.1, 2.9, 3.2), unidentified) == RIGHT
    moot = answer(math.nan, math.nan, math.nan, label="moot")
    assert exponent_outcome(moot, moot) == RIGHT
    assert exponent_outcome(moot, lattice) == WRONG and exponent_outcome(lattice, moot) == WRONG


def test_the_replay_scores_real_fits_right_open_and_wrong_against_the_whole_lattice(tmp_path, tiny_sweep):
    """Three models on one 6-seed lattice, every answer from the analysis' own joint fit (Policy.assess), the
    first 3 seeds of the policy's order against all 6: "steady" (alpha 0.5, its last 3 seeds repeat the first
    3's errors, so the lattice's estimate is the first seeds') settles on 3 seeds with the lattice's estimate
    inside its interval: right; "noisy" (50x the noise) stays open: open; "shifting" (alpha 0.3 on the first
    3 seeds, 1.2 on the others) settles on 3 seeds on a value whose interval excludes the lattice's estimate:
    wrong. The summary counts them."""
    from scaling.adaptive.policy import Policy
    from scaling.adaptive.replay import OPEN, RIGHT, WRONG, exponent_outcome, run_cells, score, summarise

    doc = lattice_sweep(tiny_sweep)
    doc["models"] = {name: dict(doc["models"]["mlp"]) for name in ("steady", "noisy", "shifting")}
    doc["grid"] = {"model": list(doc["models"]), "T": [4, 16, 64, "inf"], "N": [2, 4, 8, 16]}
    doc["grid"]["seed"] = [0, 1, 2, 3, 4, 5]
    doc["adaptive"]["questions"] = [{"exponent": "alpha", "within": 0.15}]
    plan = load_plan(write(tmp_path, doc))
    policy = Policy(plan)
    first = policy.seed_order[:3]
    normal = np.random.default_rng(0).normal
    draws = {}  # (model, T, N, seed) -> noise; "steady"'s last 3 seeds repeat its first 3's
    rows = []
    for c in policy.lattice.frame.sort_values("seed", key=lambda s: ~s.isin(first)).itertuples():
        alpha = (1.2 if c.seed not in first else 0.3) if c.model == "shifting" else 0.5
        twin = first[policy.seed_order.index(c.seed) % 3]
        z = draws[(c.model, c.T, c.N, twin)] if c.model == "steady" and c.seed not in first else normal()
        draws[(c.model, c.T, c.N, c.seed)] = z
        noise = 0.5 if c.model == "noisy" else 0.01
        err = (0.1 + 0.8 * c.N**-alpha + 0.3 * (0 if math.isinf(c.T) else c.T**-0.5)) * math.exp(noise * z)
        rows += tidy_rows(plan, c, err)
    table = pd.DataFrame(rows)
    reference = policy.assess(table, set(table["cell_key"]))
    f = policy.lattice.frame
    keys = set(f.index[f["seed"].isin(first)])
    answers = {a.group["model"]: a for a in policy.assess(run_cells(table, keys), keys)}
    lattice = {a.group["model"]: a for a in reference}
    outcome = {m: exponent_outcome(a, lattice[m]) for m, a in answers.items()}
    lines = [a.line() for a in answers.values()]
    assert outcome == {"steady": RIGHT, "noisy": OPEN, "shifting": WRONG}, lines
    assert answers["steady"].n_seeds == answers["shifting"].n_seeds == 3 and not answers["noisy"].settled
    assert answers["shifting"].hi < lattice["shifting"].centre  # 0.3 claimed where all 6 seeds say more
    scored = score(list(answers.values()), reference)
    assert {k: scored[f"exponents_{k}"] for k in (RIGHT, OPEN, WRONG)} == {RIGHT: 1, OPEN: 1, WRONG: 1}
    assert scored["exponents_consistent"] == pytest.approx(2 / 3)
    frame = pd.DataFrame(
        [
            {"method": "full lattice", "seed": -1, "spent": 1.0} | score(reference, reference),
            {"method": "adaptive", "seed": 0, "wave": 1, "spent": 0.5, "final": True, "stop": "x"} | scored,
            {"method": "random, same cost", "seed": 0, "spent": 0.5} | scored,
        ]
    )
    summary = summarise(frame)
    assert "exponents right / open / wrong" in summary
    assert re.search(r"\| adaptive \(final wave\) \| 50% .*\| 1 / 1 / 1 \|", summary), summary
    assert "- adaptive (final wave): every verdict in 0 of 1, no exponent wrong in 0, both in 0" in summary
