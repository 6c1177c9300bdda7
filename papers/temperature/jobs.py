"""Seed 004's six experiments as jobs: a cell's settings in, its curves and summary out (the jobs of the
temperature kinds, papers/temperature/kind.py, which check their settings and log what they return).

Each job is ``job(cell, device, report=None, sweep_model=None) -> JobResult``: a curves frame with the
project's columns (predictor, n, err, err_lo, err_hi, prompts) plus self-describing extras, and a summary
of scalars (``tau_best``, ``tau_heuristic``, ``tau_opt`` where known). ``report`` takes progress dicts;
``sweep_model(experiment, params) -> (cell.yaml, weights)`` reads a model another sweep trained (the
trial's store: scaling.trial.run.TrialContext.sweep_model), for a GPT-2 scan of it. Every job reads its
settings from ``cell.temperature`` (papers.temperature.kind.TemperatureConfig) and uses the cell's
``task.d``, ``task.noise_std`` (the pretraining sigma), ``N`` and ``seed``.

- ``theory_context``: Figs. 1 and 2a, error vs l/d (tau = 1, tau_opt of Thm 4.7, Bayes ridge; theory
  and Monte Carlo) under ``temperature.shift``;
- ``theory_noise``: Figs. 2b and 2c, error and tau_opt vs sigma_test at l/d = 1;
- ``theory_mean_shift``: Fig. 4, linear vs linearized attention vs Bayes ridge under a mean shift;
- ``attention_histograms``: Fig. 5, histograms of softmax, linearized softmax and linear weights;
- ``gpt2_scan``: Fig. 6, a GPT-2 in-context model scanned over tau on shifted linear regression;
- ``llm_scan``: Fig. 3, a causal LM on SciQ with noisy demonstrations, exact match over tau.

``step`` (when present) is a row's step as logged: the context length n where the x axis is one, and the
index of x otherwise. Predictors named ``tau=<value>`` are the curves of one temperature; ``tau_best`` is
the tau whose curve has the least mean error over its points.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd
import torch

from papers.context_scaling.baselines import applicable_baselines
from papers.context_scaling.evaluate import context_grid, evaluate, squared_errors
from papers.context_scaling.models import ModelConfig, build_model
from papers.context_scaling.tasks import fresh_prompts, make_family
from papers.context_scaling.train import CellTrainer
from papers.temperature.curves import (
    error_vs_context_curves,
    figure2_curves,
    figure4_curves,
    figure5_histograms,
)
from papers.temperature.garg import load_garg_gpt2
from papers.temperature.settings import shift_label
from papers.temperature.theory import isotropic_distribution, shifted_distribution
from scaling.config import from_dict

Z90 = 1.6448536269514722  # the 90% normal interval, the project's coverage for Monte Carlo rows
# units.parquet (JobResult.units): llm_scan, one row per (tau, x, Monte Carlo run, test question), correct
# = exact match; gpt2_scan, one row per (tau, evaluation prompt), err = the prompt's normalised squared
# error averaged over the context lengths scored (the mean over prompts of which is the curves' mean over n)
LLM_UNIT_COLUMNS = ["tau", "x", "run", "question", "correct"]
# gpt2_scan's rows of the tau scan have n NaN and shifted True; under an input shift, Fig. 6's precondition
# adds tau = 1's error per prompt and n (n the context length), under the shift and without it (shifted)
GPT2_UNIT_COLUMNS = ["tau", "prompt", "err", "n", "shifted"]


@dataclass
class JobResult:
    curves: pd.DataFrame
    summary: dict[str, float] = field(default_factory=dict)  # logged as metrics and tags
    weights: dict | None = None  # a state dict to log as model.pt
    # the scans' score per resampling unit (question or prompt), logged as units.parquet: what the
    # analysis's bootstrap over questions and runs (LLM) or prompts and seeds (GPT-2) resamples
    units: pd.DataFrame | None = None


def best_tau(curves: pd.DataFrame) -> float:
    """The tau whose ``tau=<value>`` curve has the least mean error over its points (ties: the smallest)."""
    scans = curves[
        curves["predictor"].str.startswith("tau=") & ~curves["predictor"].str.contains("|", regex=False)
    ]
    means = scans.groupby("tau")["err"].mean()
    return float(means.idxmin())


def with_interval(frame: pd.DataFrame, prompts: int) -> pd.DataFrame:
    """err_lo / err_hi = err -+ 1.645 standard errors (normalised), and the prompt count."""
    se = frame["err_se"].fillna(0.0) / (frame["err_raw"] / frame["err"]).where(frame["err"] != 0, 1.0)
    return frame.assign(
        err_lo=frame["err"] - Z90 * se,
        err_hi=frame["err"] + Z90 * se,
        prompts=np.where(frame["source"] == "simulation", prompts, 0),
    )


# ----------------------------------------------------------------------------- theory jobs (Figs. 1, 2, 4, 5)


def theory_context(cell, device, report=None, sweep_model=None) -> JobResult:
    """Figs. 1 and 2a. Columns: predictor ("<source>/<curve>", e.g. "simulation/tau_opt"), n (= l - 1),
    step (= n), err, err_lo, err_hi, prompts, figure, panel (the shift), curve (tau=1 | tau_opt |
    bayes_ridge), source (theory | simulation), x (= l / d), tau, err_raw, err_se, l, d.
    Summary: tau_opt at the largest l / d."""
    t = cell.temperature
    train = isotropic_distribution(cell.task.d, cell.task.noise_std)
    test = shifted_distribution(train, t.shift, **t.shift_kwargs)
    frame = error_vs_context_curves(train, test, t.l_over_d, t.m, t.n_prompts, cell.seed, t.params_source)
    frame = with_interval(frame, t.n_prompts).assign(
        figure="2" if t.shift == "noise" else "1", panel=t.shift_label()
    )
    frame = frame.assign(predictor=frame["source"] + "/" + frame["curve"], n=frame["l"] - 1)
    frame["step"] = frame["n"]
    opt = frame[(frame["curve"] == "tau_opt") & (frame["source"] == "theory")]
    return JobResult(frame, {"tau_opt": float(opt.loc[opt["x"].idxmax(), "tau"])})


def theory_noise(cell, device, report=None, sweep_model=None) -> JobResult:
    """Figs. 2b and 2c at l / d = 1. Columns as theory_context, with x = sigma_test, step = index of x,
    panel b (error vs sigma_test) or c (curve tau_opt: its tau vs sigma_test, err = Thm 4.6 at that tau
    for theory, NaN for the Monte Carlo minimiser, whose standard error is tau_se)."""
    t = cell.temperature
    frame = figure2_curves(
        cell.task.d,
        cell.task.noise_std,
        l_over_d=(),
        sigma_tests=t.sigma_tests,
        m=t.m,
        n_prompts=t.n_prompts,
        seed=cell.seed,
        params_source=t.params_source,
    )
    frame = with_interval(frame, t.n_prompts)
    frame = frame.assign(
        predictor=frame["panel"] + "/" + frame["source"] + "/" + frame["curve"],
        n=(frame["l"] - 1).astype(int),
        step=frame["x"].map({x: i for i, x in enumerate(sorted(set(frame["x"])))}),
    )
    return JobResult(frame)


def theory_mean_shift(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 4: error vs l under an input-mean shift (shift_kwargs norm, default 2). Columns as
    theory_context with curve linear | linearized | bayes_ridge, x = l, n = step = l - 1."""
    t = cell.temperature
    frame = figure4_curves(
        cell.task.d, cell.task.noise_std, t.shift_kwargs.get("norm", 2.0), t.ls, t.n_prompts, cell.seed
    )
    frame = with_interval(frame, t.n_prompts)
    frame = frame.assign(predictor=frame["source"] + "/" + frame["curve"], n=frame["l"] - 1)
    frame["step"] = frame["n"]
    return JobResult(frame)


def attention_histograms(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 5: histograms of softmax, linearized softmax and linear weights of one score vector at each
    tau of ``taus``. Columns: predictor ("<kind>/tau=<tau>" or "input"), n = step = bin index, x = bin
    centre, err = density (a histogram, not an error; err_lo = err_hi = err, prompts = 0), density,
    bin_width, mean, var, curve, tau, figure, panel."""
    t = cell.temperature
    frame = figure5_histograms(t.taus, t.hist_l, t.bins, cell.seed)
    frame["n"] = frame.groupby(["curve", "tau"], dropna=False).cumcount()
    names = np.where(
        frame["curve"] == "input", "input", frame["curve"] + "/tau=" + frame["tau"].map("{:g}".format)
    )
    frame = frame.assign(
        predictor=names,
        step=frame["n"],
        err=frame["density"],
        err_lo=frame["density"],
        err_hi=frame["density"],
        prompts=0,
        panel="histogram",
    )
    return JobResult(frame)


# ----------------------------------------------------------------------------- GPT-2 scan (Fig. 6)


def model_to_scan(cell, device, report, sweep_model) -> tuple[torch.nn.Module, dict | None]:
    """The model to scan and, when it was trained here, its weights to log."""
    t = cell.temperature
    d = cell.task.d
    if t.checkpoint:
        model = load_garg_gpt2(
            t.checkpoint,
            n_dims=d,
            n_positions=t.n_positions,
            n_embd=cell.model.n_embd,
            n_layer=cell.model.n_layer,
            n_head=cell.model.n_head,
            device=device,
        )
        return model, None
    if t.from_sweep:
        if sweep_model is None:
            raise ValueError("temperature.from_sweep: the model is read from a trial's store; none given")
        source, state = sweep_model(t.from_sweep, t.from_params)
        if source["task"]["d"] != d or int(source["N"]) < cell.N:
            raise ValueError(
                f"the model of {t.from_sweep} has d={source['task']['d']}, N={source['N']};"
                f" this scan needs d={d} and N <= {source['N']}"
            )
        model = build_model(from_dict(ModelConfig, source["model"]), d, int(source["N"]) + 1)
        model.load_state_dict(state)
        return model.to(device).eval(), None
    trainer = CellTrainer(cell, device)
    every = max(1, cell.train.steps // 10)
    while not trainer.done_training:
        trainer.train_until(trainer.step + every)
        if report:
            report({"step": trainer.step, "progress": 0.9 * trainer.step / cell.train.steps})
    return trainer.model.eval(), trainer.model.state_dict()


def gpt2_scan(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 6: the GPT-2 at every tau of ``taus`` (all layers' softmax at scores / (tau sqrt(d_k))) on the
    cell's evaluation prompts: task ``cell.task`` under the test-time shift ``cell.eval.shift`` (Sigma_x
    test = 3 I is x_scale = sqrt(3); a Garg et al. checkpoint, trained on w ~ N(0, I), needs task_scale =
    sqrt(d) on the project's beta ~ N(0, I/d)), scored as a training cell's evaluation is, with the
    baselines of cell.eval. Columns: predictor ("tau=<tau>" or a baseline; split rows add
    "|<meta>=<value>"), n = step, err (normalised by the shifted E[y^2]), err_lo, err_hi (bootstrap),
    prompts, tau (NaN for baselines), x (= n), panel (the shift), curve (= predictor), and the App. J
    score moments at tau = 1 (patch.ScoreMoments.columns: tau_heuristic, NaN when undefined, the pooled
    moments and the per-layer ones in words).
    Summary: tau_best (least mean error over n), the moments and tau_heuristic where defined."""
    model, weights = model_to_scan(cell, device, report, sweep_model)
    return scan_gpt2(cell, model, device, weights)


def scan_gpt2(cell, model: torch.nn.Module, device, weights: dict | None = None) -> JobResult:
    """gpt2_scan's curves and summary of a given ``model`` on ``device`` (the GPU script compares them
    across devices for the same weights)."""
    from papers.temperature.patch import attention_temperature, score_moments

    t = cell.temperature
    family = make_family(cell.task, cell.eval.shift)
    prompts = fresh_prompts(family, cell.eval.prompts, cell.N + 1, cell.seed, device=device)

    def at_temperature(tau: float):
        @torch.no_grad()
        def predict(batch) -> torch.Tensor:
            with attention_temperature(model, tau):
                return model(batch.xs, batch.ys).float()

        return predict

    taus = {f"tau={tau:g}": float(tau) for tau in t.taus}
    predictors = {name: at_temperature(tau) for name, tau in taus.items()}
    predictors.update(applicable_baselines(cell.eval.baselines, cell.task)[0])
    per_prompt: dict[str, np.ndarray] = {}  # each tau's error per prompt, averaged over n: units.parquet
    curves = evaluate(
        predictors, prompts, family.y_second_moment(), cell.eval, cell.N, cell.seed, family, per_prompt
    )
    curves = curves.assign(
        tau=curves["predictor"].str.split("|").str[0].map(taus),
        x=curves["n"],
        step=curves["n"],
        curve=curves["predictor"],
        panel=shift_label(cell.eval.shift),
    )
    first = prompts.slice(0, min(len(prompts), cell.eval.batch_size))
    moments = score_moments(model, [{"xs": first.xs, "ys": first.ys}])
    summary = {"tau_best": best_tau(curves), **moments.summary()}
    units = [
        pd.DataFrame({"tau": tau, "prompt": np.arange(len(per_prompt[name])), "err": per_prompt[name]})
        for name, tau in taus.items()
    ]
    reference = input_reference(cell.eval.shift)
    if reference != cell.eval.shift:  # Fig. 6's precondition: the model without the input shift
        unshifted, per_n = precondition_curves(cell, at_temperature(1.0), reference, prompts, device)
        curves = pd.concat([curves, unshifted.assign(panel=curves["panel"].iloc[0])], ignore_index=True)
        units += per_n
    curves = curves.assign(**moments.columns())  # beside the curves, for the analysis
    units = pd.concat(units, ignore_index=True).reindex(columns=GPT2_UNIT_COLUMNS)
    units["shifted"] = units["shifted"].fillna(True).astype(bool)
    return JobResult(curves, summary, weights, units)


def input_reference(shift):
    """``eval.shift`` with the inputs as in training (x_mean 0, x_scale 1), its task and noise kept (a Garg
    et al. checkpoint's task_scale matches its training, not a shift): what Fig. 6's precondition, that the
    input shift degrades the model, compares with."""
    return replace(shift, x_mean=0.0, x_scale=1.0)


def precondition_curves(cell, predict, reference, prompts, device) -> tuple[pd.DataFrame, list[pd.DataFrame]]:
    """The model at tau = 1 without the input shift (curve ``unshifted/tau=1``: the same random draws,
    Sigma_x as in training), and the units of Fig. 6's precondition: each prompt's normalised squared error
    at every scored n at tau = 1, under the shift (``prompts``) and without it (rows tau, prompt, n, err,
    shifted)."""
    family = make_family(cell.task, reference)
    plain = fresh_prompts(family, cell.eval.prompts, cell.N + 1, cell.seed, device=device)
    name = "unshifted/tau=1"
    curves = evaluate({name: predict}, plain, family.y_second_moment(), cell.eval, cell.N, cell.seed, family)
    curves = curves.assign(tau=np.nan, x=curves["n"], step=curves["n"], curve="unshifted")
    grid = context_grid(cell.eval, cell.N)
    shifted_family = make_family(cell.task, cell.eval.shift)
    units = []
    for shifted, these, norm in (
        (True, prompts, shifted_family.y_second_moment()),
        (False, plain, family.y_second_moment()),
    ):
        errors = (squared_errors(predict, these, cell.eval.batch_size)[:, grid] / norm).numpy()  # (P, G)
        P, G = errors.shape
        units.append(
            pd.DataFrame(
                {
                    "tau": 1.0,
                    "prompt": np.repeat(np.arange(P), G),
                    "n": np.tile(np.asarray(grid, float), P),
                    "err": errors.reshape(-1),
                    "shifted": shifted,
                }
            )
        )
    return curves, units


# ----------------------------------------------------------------------------- LLM scan (Fig. 3)


def llm_scan(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 3: exact match of a causal LM on SciQ with noisy demonstrations at each tau; panel "demos"
    scans x = n_demos at noisy_ratios[0], panel "noisy_ratio" scans x = noisy ratio at n_demos[0].
    Columns: predictor ("tau=<tau>"), n (demonstrations), step (n for panel demos, index of x for
    noisy_ratio), x, err (= 1 - exact match), err_lo / err_hi (err -+ one standard deviation over the
    mc_runs Monte Carlo runs, as the paper's error bars), prompts (questions x runs), em, em_std, tau,
    noisy_ratio, the App. J score moments at tau = 1 on this x's prompts (tau_heuristic, NaN when undefined,
    score_offdiag_m2, score_diag_m1, score_layers: patch.ScoreMoments.columns), panel, curve.
    Summary: tau_best, the moments over the prompts of every x pooled (tau_heuristic where defined)."""
    # both import transformers and scikit-learn (seconds): only an LLM scan loads them
    from papers.temperature.llm_icl import (
        load_causal_lm,
        load_sciq,
        make_retriever,
        prompt_score_moments,
        query_text,
    )
    from papers.temperature.scan import PromptSet  # transformers too

    t = cell.temperature
    model, tokenizer = load_causal_lm(t.llm, device=str(device))  # loaded once for every x, tau and run
    train, test = load_sciq(t.sciq_train), load_sciq(t.sciq_test)
    test = test[: t.n_test] if t.n_test else test
    retriever = make_retriever(
        t.retriever, train, **({"device": str(device)} if t.retriever == "minilm" else {})
    )
    points = llm_points(t)
    rows, units, all_prompts = [], [], []
    for index, (k, ratio) in enumerate(points):
        demos = retriever.top_k([query_text(item) for item in test], k)  # retrieval once per x
        # every run's prompts built and tokenised once, answered at each tau (papers.temperature.scan)
        prompt_set = PromptSet.build(tokenizer, train, test, demos, ratio, t.mc_runs, cell.seed)
        prompts = prompt_set.run_prompts(0)
        all_prompts += prompts
        moments = prompt_score_moments(model, tokenizer, prompts, t.batch_size).columns()
        x = float(k if t.panel == "demos" else ratio)
        point = (k, ratio, x, k if t.panel == "demos" else index)
        for tau in t.taus:
            result = prompt_set.exact_match(model, tokenizer, tau, t.max_new_tokens, t.batch_size)
            units += llm_units(tau, x, result.correct)
            rows.append(llm_row(t, tau, point, result, len(test), moments))
            if report:
                report({"step": len(rows), "progress": len(rows) / (len(points) * len(t.taus))})
    curves = pd.DataFrame(rows)
    pooled = prompt_score_moments(model, tokenizer, all_prompts, t.batch_size)
    units = pd.DataFrame(units, columns=LLM_UNIT_COLUMNS)
    return JobResult(curves, {"tau_best": best_tau(curves), **pooled.summary()}, units=units)


def llm_points(t) -> list[tuple[int, float]]:
    """An LLM scan's points as (demonstrations, noisy ratio): panel "demos" varies the demonstrations at
    the first noisy ratio, panel "noisy_ratio" the ratio at the first number of demonstrations."""
    if t.panel == "demos":
        return [(k, t.noisy_ratios[0]) for k in t.n_demos]
    return [(t.n_demos[0], r) for r in t.noisy_ratios]


def llm_units(tau: float, x: float, correct) -> list[tuple]:
    """The units.parquet rows (LLM_UNIT_COLUMNS) of one tau at one x: whether each Monte Carlo run
    answered each test question exactly (``correct``: per run, per question)."""
    return [
        (float(tau), x, run, question, answer)
        for run, answers in enumerate(correct)
        for question, answer in enumerate(answers)
    ]


def llm_row(
    t, tau: float, point: tuple[int, float, float, int], result, questions: int, moments: dict
) -> dict:
    """The curves row of one tau at one point (demonstrations, noisy ratio, x, step): err = 1 - exact
    match with err -+ one standard deviation over the Monte Carlo runs, and the point's score moments."""
    k, ratio, x, step = point
    err = 1.0 - result.mean
    return {
        "predictor": f"tau={tau:g}",
        "n": k,
        "step": step,
        "x": x,
        "err": err,
        "err_lo": err - result.std,
        "err_hi": err + result.std,
        "prompts": questions * t.mc_runs,
        "em": result.mean,
        "em_std": result.std,
        "tau": float(tau),
        "noisy_ratio": ratio,
        **moments,
        "panel": t.panel,
        "curve": f"tau={tau:g}",
    }
