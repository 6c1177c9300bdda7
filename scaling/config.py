"""Typed configuration: frozen dataclasses built from plain dicts, with errors that say where.

Every config in the project (task, model, training, evaluation, resources) is a frozen dataclass that
lives next to the code that uses it. This module turns YAML-shaped dicts into those dataclasses and back:
unknown keys are errors that list the allowed ones, values are coerced to the declared type (``inf`` is
accepted for floats), and ``canonical`` gives the form that cell keys are hashed from (fields equal to
their default are left out, so adding a new field with a default never changes an existing key).
"""

from __future__ import annotations

import contextlib
import contextvars
import dataclasses
import functools
import math
import types
import typing
from typing import Any, Iterator


class ConfigError(ValueError):
    """A configuration value is wrong; the message says where, what and what is allowed."""

    def __init__(self, where: str, message: str):
        self.where, self.message = where, message
        super().__init__(f"{where}: {message}" if where else message)

    def __reduce__(self):  # rebuilt from both parts: a trial's error crosses processes (Ray) as it was
        return type(self), (self.where, self.message)


def _join(where: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{where}[{key}]"
    return f"{where}.{key}" if where else key


SWITCH = {True: "on", False: "off"}  # a string setting given a YAML boolean: the switch it spells


def _coerce(value: Any, kind: Any, where: str) -> Any:
    """Coerce one YAML value to the annotated type ``kind`` or raise a ConfigError at ``where``."""
    origin = typing.get_origin(kind)
    if origin in (typing.Union, types.UnionType):
        options = typing.get_args(kind)
        if value is None and type(None) in options:
            return None
        errors = []
        for option in options:
            if option is type(None):
                continue
            try:
                return _coerce(value, option, where)
            except ConfigError as err:
                errors.append(str(err).split(": ", 1)[-1])
        raise ConfigError(where, " or ".join(errors))
    if origin is tuple:
        if isinstance(value, (str, bytes)) or not isinstance(value, (list, tuple)):
            value = [value]
        (item,) = typing.get_args(kind)[:1] or (Any,)
        return tuple(_coerce(v, item, _join(where, i)) for i, v in enumerate(value))
    if origin is dict:
        if not isinstance(value, dict):
            raise ConfigError(where, f"expected a mapping, got {value!r}")
        _, item = typing.get_args(kind)
        return {str(k): _coerce(v, item, _join(where, str(k))) for k, v in value.items()}
    if dataclasses.is_dataclass(kind):
        return shared(kind, value, where)
    if kind is Any:
        return value
    if kind is bool:
        if isinstance(value, bool):
            return value
        raise ConfigError(where, f"expected true or false, got {value!r}")
    if kind is int:
        if (
            isinstance(value, bool)
            or not isinstance(value, (int, float))
            or not math.isfinite(value)
            or float(value) != int(value)
        ):
            raise ConfigError(where, f"expected an integer, got {value!r}")
        return int(value)
    if kind is float:
        if isinstance(value, str) and value.strip().lower() in ("inf", "+inf", "infinity", ".inf"):
            return math.inf
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            try:
                value = float(value)
            except (TypeError, ValueError):
                raise ConfigError(where, f"expected a number, got {value!r}") from None
        if math.isnan(value):
            raise ConfigError(where, "not a number (nan); give a number")
        return float(value)
    if kind is str:
        if isinstance(value, bool):  # YAML 1.1 reads an unquoted on/off (yes/no, true/false) as a boolean
            return SWITCH[value]
        if not isinstance(value, str):
            raise ConfigError(where, f"expected a string, got {value!r}")
        return value
    raise ConfigError(where, f"unsupported type {kind!r}")


@functools.lru_cache(maxsize=None)
def _fields(cls: type) -> tuple[dict[str, Any], list[str]]:
    """A dataclass's resolved annotations and its init fields' names, worked out once per class (a plan of
    10,000 cells builds some 50,000 settings objects; resolving the annotations was 60% of that)."""
    return typing.get_type_hints(cls), [f.name for f in dataclasses.fields(cls) if f.init]


def from_dict(cls: type, data: Any, where: str = "") -> Any:
    """Build the dataclass ``cls`` from ``data``; unknown keys and wrong types raise ConfigError."""
    if isinstance(data, cls):
        return data
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(where, f"expected a mapping of {cls.__name__} settings, got {data!r}")
    hints, names = _fields(cls)
    unknown = sorted(set(map(str, data)) - set(names))
    if unknown:
        raise ConfigError(_join(where, unknown[0]), f"unknown setting; allowed: {', '.join(names)}")
    kwargs = {k: _coerce(v, hints[k], _join(where, k)) for k, v in data.items()}
    try:
        return cls(**kwargs)
    except ConfigError as err:
        raise ConfigError(_join(where, err.where), str(err).split(": ", 1)[-1]) from None


# Within shared_configs(): (class, where, settings) -> the config built from them, and id -> (config, its
# canonical form); None outside
_SHARED: contextvars.ContextVar[dict | None] = contextvars.ContextVar("shared_configs", default=None)


@contextlib.contextmanager
def shared_configs() -> Iterator[None]:
    """Within this block, equal settings nested in a config (a cell's task, model, training, evaluation) are
    built once and shared, frozen, by every config holding them, and each shared config's canonical form is
    worked out once: a plan of 10,000 cells over a lattice of T, N and seed builds its few distinct groups of
    settings once each, not 10,000 times. The results are the same objects' equals; outside the block every
    call builds afresh (a file a setting names may appear between two plans)."""
    token = _SHARED.set({})
    try:
        yield
    finally:
        _SHARED.reset(token)


def shared(cls: type, data: Any, where: str) -> Any:
    """``from_dict`` of a config nested in another (a cell's group of settings), shared within
    shared_configs()."""
    memo = _SHARED.get()
    key = _frozen(data) if memo is not None else None
    if key is None or not _is_frozen(cls):
        return from_dict(cls, data, where)
    key = (cls, where, key)
    if key not in memo:
        memo[key] = from_dict(cls, data, where)
    return memo[key]


def _is_frozen(cls: type) -> bool:
    return bool(getattr(cls, "__dataclass_params__", None) and cls.__dataclass_params__.frozen)


def _frozen(data: Any) -> Any:
    """A hashable, type-exact form of YAML-shaped ``data`` (1, 1.0 and True stay apart; order kept); None for
    anything else (such data is never shared)."""
    if isinstance(data, dict):
        items = tuple((k, _frozen(v)) for k, v in data.items())
        return None if any(v is None for _, v in items) else ("dict", items)
    if isinstance(data, (list, tuple)):
        items = tuple(_frozen(v) for v in data)
        return None if any(v is None for v in items) else (type(data).__name__, items)
    if data is None or isinstance(data, (str, int, float, bool)):
        return (type(data).__name__, data)
    return None


def replaced(obj: Any, **changes: Any) -> Any:
    """``dataclasses.replace(obj, **changes)``, shared within shared_configs() (each cell's training
    settings with their precision resolved: one object for all)."""
    memo = _SHARED.get()
    if memo is None:
        return dataclasses.replace(obj, **changes)
    key = ("replaced", id(obj), tuple(sorted(changes.items())))
    if key not in memo:
        memo[key] = (obj, dataclasses.replace(obj, **changes))  # obj kept: its id stays its own
    return memo[key][1]


def to_dict(obj: Any) -> Any:
    """Plain, YAML-safe form of a config (dataclasses -> dicts, tuples -> lists, inf -> 'inf')."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            if f.metadata.get("inline"):  # a mapping of groups written at this level (Cell.settings)
                out.update({name: to_dict(group) for name, group in getattr(obj, f.name).items()})
            else:
                out[f.name] = to_dict(getattr(obj, f.name))
        return out
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {k: to_dict(v) for k, v in obj.items()}
    if isinstance(obj, float) and math.isinf(obj):
        return "inf" if obj > 0 else "-inf"
    return obj


def format_T(T: float, *, short: bool = False) -> str:
    """A number of tasks T as run names and MLflow params write it ('inf', '65536'); ``short=True`` as
    figures label it: powers of ten from 1000 on as '1e4', other values as ``%g``."""
    if math.isinf(T):
        return "inf"
    if not short:
        return str(int(T))
    exponent = math.log10(T) if T > 0 else 0.5
    return f"1e{int(exponent)}" if T >= 1000 and exponent == int(exponent) else f"{T:g}"


def canonical(obj: Any) -> Any:
    """The hashable form of a config: like ``to_dict`` but without fields equal to their default.

    Fields declared with ``metadata={"key": False}`` (how, not what: device, checkpoint cadence) are
    left out too, so they never change a cell's key. A field declared ``metadata={"in_key": predicate}``
    is kept even at its default where the predicate, given the config holding it, is true: a default that
    changed what a model computes (ModelConfig.bias) so that no cell keyed before the change is taken for
    one after it. A field declared ``metadata={"inline": True}`` is a
    mapping of named groups written at this level, as if each were a field (scaling.cells.Cell.settings).
    A field declared ``metadata={"keyed_as_default": values}`` is left out at those values too: a setting
    whose default (``auto``) resolves at planning to one of them, so the key of a resolved cell is that of the
    cells keyed before the setting could be ``auto`` (TrainConfig.precision: ``float32``).
    """
    memo = _SHARED.get()
    if memo is not None and dataclasses.is_dataclass(obj) and _is_frozen(type(obj)):
        key = ("canonical", id(obj))
        if key not in memo:
            memo[key] = (obj, _canonical(obj))  # obj kept: its id stays its own
        return memo[key][1]
    return _canonical(obj)


def _default_made(f: dataclasses.Field) -> Any:
    """A field's ``default_factory()``, made once within shared_configs() (the default compared with)."""
    memo = _SHARED.get()
    if memo is None:
        return f.default_factory()
    key = ("default", id(f))
    if key not in memo:
        memo[key] = (f, f.default_factory())
    return memo[key][1]


def _canonical(obj: Any) -> Any:
    """canonical, worked out."""
    if dataclasses.is_dataclass(obj):
        out = {}
        for f in dataclasses.fields(obj):
            if not f.metadata.get("key", True):
                continue
            if f.metadata.get("inline"):  # groups written at this level, each left out when empty
                for name, group in getattr(obj, f.name).items():
                    if canonical(group) != {}:
                        out[name] = canonical(group)
                continue
            value = getattr(obj, f.name)
            always = f.metadata.get("in_key")
            if always is not None and always(obj):
                out[f.name] = canonical(value)
                continue
            if f.default is not dataclasses.MISSING and value == f.default:
                continue
            if value in f.metadata.get("keyed_as_default", ()):
                continue
            if f.default_factory is not dataclasses.MISSING and value == _default_made(f):
                continue
            value = canonical(value)
            if value != {}:  # a group holding only defaults and non-key fields
                out[f.name] = value
        return out
    return to_dict(obj)


def not_in_key(cls: type, prefix: str) -> list[str]:
    """Dotted names of the fields of a config class (and of the config classes inside it) declared
    ``metadata={"key": False}``: how a cell runs, not what it computes (``canonical`` leaves them out)."""
    hints = typing.get_type_hints(cls)
    out: list[str] = []
    for f in dataclasses.fields(cls):
        name = f"{prefix}.{f.name}"
        if not f.metadata.get("key", True):
            out.append(name)
        elif dataclasses.is_dataclass(hints[f.name]):
            out += not_in_key(hints[f.name], name)
    return out


def unread(obj: Any, prefix: str = "") -> list[str]:
    """Dotted names of the settings of a config (and of the configs inside it) that go unread under their
    current values: the fields declared ``metadata={"applies": predicate}`` whose predicate, given the
    config holding them, is false (e.g. the curriculum's steps while it is off). Cells leave them out of
    their MLflow params (scaling.cells.Cell.params); the cell key and cell.yaml keep them. The predicate
    reads a switch that is itself always a setting (the curriculum's start, eval.lambda_n), so an absent
    param never carries information of its own: analysis may read absence as "does not apply"."""
    out: list[str] = []
    if not dataclasses.is_dataclass(obj):
        return out
    for f in dataclasses.fields(obj):
        name = f"{prefix}.{f.name}" if prefix else f.name
        applies = f.metadata.get("applies")
        if applies is not None and not applies(obj):
            out.append(name)
        elif not f.metadata.get("inline"):
            out += unread(getattr(obj, f.name), name)
    return out


def flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    """Dotted keys of a nested dict: {'task': {'d': 8}} -> {'task.d': 8}."""
    if not isinstance(tree, dict):
        return {prefix: tree}
    out: dict[str, Any] = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flatten(value, name))
        else:
            out[name] = value
    return out


def check(condition: bool, field: str, message: str) -> None:
    """Raise a ConfigError for ``field`` unless ``condition`` holds (used in ``__post_init__``)."""
    if not condition:
        raise ConfigError(field, message)


# Inside missing_paths_noted(): the local paths found missing, noted instead of raised (None: raise).
_MISSING_PATHS: contextvars.ContextVar[list[str] | None] = contextvars.ContextVar("missing", default=None)


def check_path(exists: bool, field: str, message: str) -> None:
    """``check`` for a local file a setting names (a model's weights, a data file): a fact of this machine,
    not of the sweep file, so inside ``missing_paths_noted()`` (a reading command, which needs no weights)
    a missing one is noted and the settings stand."""
    noted = _MISSING_PATHS.get()
    if exists or noted is None:
        check(exists, field, message)
    elif message not in noted:
        noted.append(message)


@contextlib.contextmanager
def missing_paths_noted() -> typing.Iterator[list[str]]:
    """The local paths that settings built inside the block name and this machine lacks, each as its
    ``check_path`` message (what is missing and how to make it), in the order found."""
    noted: list[str] = []
    token = _MISSING_PATHS.set(noted)
    try:
        yield noted
    finally:
        _MISSING_PATHS.reset(token)


def check_choice(value: str, field: str, choices: typing.Iterable[str]) -> None:
    choices = list(choices)
    switch = value in SWITCH.values()
    read = " (YAML reads an unquoted on/off, yes/no or true/false as on/off)" if switch else ""
    check(value in choices, field, f"unknown value {value!r}{read}; known: {', '.join(choices)}")
