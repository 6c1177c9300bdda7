"""The training kind's plug-in points (docs/extending.md): task families, models, feature maps and
baselines, each a small interface, named in a sweep file by a registered name (this project's built-ins,
pyproject.toml's ``icl_scaling.families``, ``.models``, ``.feature_maps``, ``.baselines``) or by a
researcher's own ``module:Name`` (scaling.plugins). Without torch: the planner, the cost model and analysis
resolve names here; what runs is imported by the trial.

- A **task family** (``task.family``) is a subclass of papers.context_scaling.tasks.TaskFamily: its
  parameters drawn (``draw_tasks``), its signal f(x) (``signal``), its settings as a dataclass
  (``Settings``, a ``TaskSettings``), its normaliser E[f(x)^2] (``signal_second_moment``; a deterministic
  Monte Carlo unless it states one), the baselines valid for it (``baselines``; None: every baseline decides
  for itself) and its ``version``. The built-ins register a ``FamilySpec``, which names its class, so that
  planning imports no torch.
- A **model** (``model.arch``) is a ``ModelFacts``: a builder of a torch module that maps (xs, ys) to a
  prediction at every prefix, its settings (a ``ModelSettings``), its parameter and FLOP counts for costs
  (None: not estimated), and whether it packs: a module with a parameter-free ``features(xs, ys)`` and a
  Linear/ReLU ``head_layers()`` trains stacked with its siblings (papers.context_scaling.stacked);
  otherwise one cell per trial. A researcher may give a class with ``Settings``, ``build``, ``version``
  and optional ``parameters`` and ``step_flops``; ``model_facts`` reads it as ModelFacts.
- A **feature map** (``model.feature_map``) is a function (xs (B, P, d), ys (B, P)) -> rows (B, P, d+1),
  row n the map's last row psi(A_n)_{n,:} from the pairs j < n and x_n alone (seed 001 eq. 9).
- A **baseline** (an entry of ``eval.baselines``) is a factory (task settings, options) -> predictor, the
  predictor a function of a batch of prompts returning a prediction at every prefix, (B, P), as a model's;
  it raises papers.context_scaling.baselines.BaselineNotApplicable for a task it is not defined for. A
  built-in baseline whose numbers changed has a version (``BUILTIN_BASELINE_VERSIONS``), in its cells' keys.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Any, Callable

from scaling.config import check
from scaling.plugins import Plugin, Point, is_registered, load, resolve

DEFAULT_FAMILY = "linear"
DEFAULT_ARCH = "gpt2"


def _has(*names: str) -> Callable[[Any], str]:
    def problem(obj) -> str:
        missing = [n for n in names if not hasattr(obj, n)]
        return f"it has no {', '.join(missing)}" if missing else ""

    return problem


def _callable(obj) -> str:
    return "" if callable(obj) else f"a {type(obj).__name__}, not a function"


def _settings_problem(obj, base: type) -> str:
    """What is wrong with a plug-in's ``Settings`` ('' when it is a dataclass extending ``base``)."""
    settings = getattr(obj, "Settings", None)
    if not (isinstance(settings, type) and dataclasses.is_dataclass(settings) and issubclass(settings, base)):
        return f"its Settings must be a dataclass extending {base.__module__}.{base.__name__}"
    return ""


def _family_problem(obj) -> str:
    if isinstance(obj, FamilySpec):
        return ""
    return _has("draw_tasks", "signal")(obj) or _settings_problem(obj, TaskSettings)


def _model_problem(obj) -> str:
    if isinstance(obj, ModelFacts):
        return ""
    return _has("build")(obj) or _settings_problem(obj, ModelSettings)


FAMILIES = Point(
    "families",
    "task family",
    "a TaskFamily subclass (papers.context_scaling.tasks) with Settings, draw_tasks and signal",
    check=lambda obj: _family_problem(obj),
)
MODELS = Point(
    "models",
    "model",
    "a class with Settings and build(settings, d, points) -> a torch module (or a ModelFacts)",
    check=lambda obj: _model_problem(obj),
)
FEATURE_MAPS = Point(
    "feature_maps", "feature map", "a function (xs, ys) -> rows (B, P, d+1)", check=_callable
)
# The versions of the built-in baselines whose numbers changed (the others have none), read without importing
# them: in their cells' keys (scaling.cells.plugin_versions) and their disk cache's (baselines.library_fit).
# Change a built-in baseline's numbers, and give it the next version here.
BUILTIN_BASELINE_VERSIONS = {
    "xgboost": "2",  # Garg et al.'s settings written out (baseline_fits.GARG_XGBOOST), not xgboost 3's
}
BASELINES = Point(
    "baselines",
    "baseline",
    "a factory (task settings, options) -> predictor",
    check=_callable,
    builtin_version=lambda name: BUILTIN_BASELINE_VERSIONS.get(name, ""),
)


@dataclass(frozen=True)
class TaskSettings:
    """What every task family's settings hold: its name (the cell's ``task.family``), the input dimension
    and the label noise. A family's ``Settings`` adds its own fields (with defaults: a field at its default is
    left out of the cell's key, so adding one later keeps old keys)."""

    family: str = ""
    d: int = 8  # input dimension
    noise_std: float = 0.0  # sigma of the label noise

    def __post_init__(self):
        check(self.d >= 1, "d", f"must be >= 1, got {self.d}")
        check(self.noise_std >= 0, "noise_std", f"must be >= 0, got {self.noise_std}")

    def applicable_settings(self) -> tuple[str, ...]:
        """The settings this family reads, which a cell logs as MLflow params (family is every task's)."""
        return ("family", *family(self.family).settings)


@dataclass(frozen=True)
class ModelSettings:
    """What every model's settings hold: its architecture (the cell's ``model.arch``) and the label a sweep
    gives it (its ``models:`` preset's name). A model's ``Settings`` adds its own fields."""

    arch: str = ""
    name: str = ""  # label in run names and figures; defaults to arch

    @property
    def label(self) -> str:
        return self.name or self.arch

    def applicable_settings(self) -> tuple[str, ...]:
        return model_facts(self.arch).applicable(self)


@dataclass(frozen=True)
class FamilySpec:
    """A registered family without its torch code: the ``module:Class`` of its TaskFamily subclass, its
    settings' dataclass, the settings it reads, the baselines valid for it (None: each baseline decides), its
    version."""

    implementation: Any  # "module:Class", or the class itself
    Settings: type
    settings: tuple[str, ...]
    baselines: tuple[str, ...] | None = None
    version: str = ""

    def cls(self) -> type:
        """The TaskFamily subclass (imported: torch)."""
        return load(self.implementation) if isinstance(self.implementation, str) else self.implementation


@dataclass(frozen=True)
class ModelFacts:
    """What the rest of the project knows of a model, asked of the model's own entry (the cost model, the
    packer, the planner), without building it: its builder, its exact parameter count under a config, its
    estimated parameter count and a training step's FLOPs for a step shape (``s``: arch, N, d, width,
    layers, batch, layout: papers.context_scaling.architectures.StepShape), its width and depth under a
    config, whether it packs (a parameter-free ``features`` then a Linear/ReLU ``head_layers``:
    papers.context_scaling.stacked) and its position limit. ``params`` or ``step_flops`` None: its cost is
    not estimated."""

    # "module:callable" or the callable: (config, d, points) -> the torch module
    build: Any
    # the parameters of the model built for (config, d, points), counted without building it
    parameters: Callable[[Any, int, int], int] | None = None
    params: Callable[[object], int] | None = None
    step_flops: Callable[[object], float] | None = None  # one training step of a batch
    width: Callable[[Any], int] = lambda config: getattr(config, "width", 0)
    layers: Callable[[Any], int] = lambda config: getattr(config, "n_layer", 0)
    packable: Callable[[Any], bool] = lambda config: False
    # whether packing small cells pays on a CPU (scaling.budget.packing's ``auto``): measured on this
    # project's 2-core CPU (docs/gpu.md, "On this CPU"): 8 packed quick-size GPT-2 cells step at 0.72x, SGPT
    # at 0.94x of the same cells one after another (a CPU is busy with arithmetic at every size the sweeps
    # train), so transformers pack on GPUs only
    cpu_packing_pays: bool = True
    max_positions: int | None = None  # tokens per prompt the model takes; None: no limit
    title: str = ""  # the name errors use (default: the arch's)
    # the settings the architecture reads (arch and name are every model's); a cell logs only these as MLflow
    # params (scaling.cells.Cell.params), its cell.yaml keeps every setting
    settings: tuple[str, ...] = ()
    unused: Callable[[Any], tuple[str, ...]] = lambda config: ()  # of those, unread under config
    Settings: type | None = None  # the settings' dataclass; None: ModelConfig (the built-in models')
    tokens_per_point: int = 1  # tokens per (x, y) pair in the model's sequence (GPT-2, SGPT: 2)
    # a researcher's model: (config, d, points, batch) -> (parameters, FLOPs of a training step); None: its
    # cost is not estimated
    counts: Callable[[Any, int, int, int], tuple[int, float]] | None = None
    version: str = ""

    def applicable(self, config) -> tuple[str, ...]:
        """The settings of ``config`` that this architecture reads: arch, name and its ``settings`` but the
        ones ``unused`` under this config."""
        unused = set(self.unused(config))
        return ("arch", "name", *(s for s in self.settings if s not in unused))

    def tokens(self, s) -> int:
        """Sequence length per prompt of N+1 points."""
        return self.tokens_per_point * (s.N + 1)

    def forward_multiply_adds(self, config, d: int, points: int, batch: int) -> float:
        """Multiply-adds of one forward pass of a batch of prompts of ``points`` pairs: the model's parameters
        x prompts x positions (exact for the packable MLP-type models, whose every parameter is used once per
        position); 0 where the parameters are not counted."""
        if self.parameters is None:
            return 0.0
        return float(self.parameters(config, d, points)) * batch * points

    def check_positions(self, config, N: int) -> None:
        """A ConfigError on N when a prompt of N+1 points exceeds the position limit."""
        if self.max_positions is None:
            return
        positions = self.tokens_per_point * (N + 1)
        check(
            positions <= self.max_positions,
            "N",
            f"N={N} makes {self.title or config.arch} prompts of {self.tokens_per_point}(N+1)={positions}"
            f" tokens, more than the {self.max_positions} positions allowed",
        )

    def builder(self) -> Callable:
        return load(self.build) if isinstance(self.build, str) else self.build


def family(name: str, where: str = "family") -> FamilySpec:
    """The task family ``name`` names, as a FamilySpec (a researcher's TaskFamily subclass read as one)."""
    return _family(resolve(FAMILIES, name, where))


@functools.cache
def _family(plugin: Plugin) -> FamilySpec:
    obj = plugin.obj
    if isinstance(obj, FamilySpec):
        return obj
    own = [f.name for f in dataclasses.fields(obj.Settings) if f.name != "family"]
    baselines = getattr(obj, "baselines", None)
    return FamilySpec(
        obj, obj.Settings, tuple(own), None if baselines is None else tuple(baselines), plugin.version
    )


def model_facts(arch: str, where: str = "arch") -> ModelFacts:
    """The facts of model ``arch``; an architecture without an entry is an error, never a guessed formula."""
    return _facts(resolve(MODELS, arch, where))


@functools.cache
def _facts(plugin: Plugin) -> ModelFacts:
    obj = plugin.obj
    if isinstance(obj, ModelFacts):
        return obj
    model = obj() if isinstance(obj, type) else obj
    own = tuple(f.name for f in dataclasses.fields(obj.Settings) if f.name not in ("arch", "name"))
    counted, flops = getattr(model, "parameters", None), getattr(model, "step_flops", None)
    counts = None
    if counted is not None and flops is not None:
        counts = lambda config, d, points, batch: (
            counted(config, d, points),
            flops(config, d, points, batch),
        )
    return ModelFacts(
        build=model.build,
        parameters=counted,
        packable=lambda config: bool(getattr(model, "packs", False)),
        settings=own,
        Settings=obj.Settings,
        tokens_per_point=int(getattr(model, "tokens_per_point", 1)),
        counts=counts,
        version=plugin.version,
    )


def feature_map(name: str, where: str = "feature_map") -> Callable:
    """The feature map ``name`` names: (xs, ys) -> rows (B, P, d+1)."""
    return resolve(FEATURE_MAPS, name, where).obj


def baseline(name: str, where: str = "baselines") -> Callable:
    """The factory of the baseline ``name`` names (its base name, without options)."""
    return resolve(BASELINES, name, where).obj


def known(point: Point, name: str, where: str) -> None:
    """Check that ``name`` names a plug-in of ``point``: a registered name is checked without importing it
    (planning stays free of torch); a ``module:Name`` is imported and checked."""
    if not is_registered(point, name):
        resolve(point, name, where)
