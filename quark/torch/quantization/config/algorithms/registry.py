"""The algorithm config base classes, the registry of their names, and the table of backend
implementations.

An algorithm is a config (pure data, a dataclass with a ``name`` field, loadable by that name) and
an :class:`Implementation` a backend provides for the config's class: ``run(config, model,
batches) -> model`` in a :class:`Phase`. A backend announces the module holding its table of
implementations with :func:`add_backend`; the module is imported (and its ``IMPLEMENTATIONS``
read) when an implementation is first looked up, so configs build and serialise without the
backend. Kept free of Brevitas.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, fields
from enum import Enum
from typing import Any, ClassVar

from quark.torch.quantization.config._fields import config_to_dict, from_registry
from quark.torch.quantization.config.algorithms.fields import Check, check_fields, failed_checks


class Phase(Enum):
    """When an algorithm runs, relative to quantization."""

    before_quantization = "before_quantization"  # on the float model: SmoothQuant, equalization, Preprocess
    after_calibration = "after_calibration"  # on the calibrated quantized model: GPTQ, GPFQ, AWQ, ...
    after_quantization = "after_quantization"  # last: whatever needs the final quantized model


#: names written by earlier releases -> current name
ALIASES: dict[str, str] = {"smooth": "smoothquant", "preprocess": "Pre-Processing"}


@dataclass(eq=True)
class AlgoConfig:
    """Base of the algorithms that run on the quantized model (``Config.algo_config``).

    Every algorithm of this package has a ``name`` field (Quark's main-API configs take it first,
    as Quark does; the Brevitas extension's take it as a keyword), fixed to its registered name
    (an old spelling is normalised, another name refused); each field declared with
    :func:`~.fields.checked` is checked on construction, every failure reported together. ``apply(model, calib_loader=None)`` runs the
    implementation a backend provides for this class; a subclass of your own may override
    ``apply`` instead (and may name itself with a plain class attribute).
    """

    name: ClassVar[str] = (
        ""  # this package's configs make it a field; a user's own may keep a class attribute
    )
    default_phase: ClassVar[Phase] = Phase.after_calibration
    #: fields where an empty value ("" or [], as newer Quark writes them) means None
    empty_as_none: ClassVar[tuple[str, ...]] = ()
    #: why no backend here runs this config at all (a Quark name kept so that scripts and files
    #: naming it load, and are refused with the reason and what to use instead); None: it runs
    refused: ClassVar[str | None] = None
    #: field -> (test, what is allowed and why): values the config takes but no backend runs; checked
    #: when an implementation is looked up (before the model is touched), every failure together
    unsupported_values: ClassVar[dict[str, Check]] = {}

    def unsupported(self) -> list[str]:
        """What of this config no backend here runs, one line per field (see ``unsupported_values``)."""
        return failed_checks(self, self.unsupported_values, "is not supported")

    def __post_init__(self) -> None:
        for name in self.empty_as_none:
            setattr(self, name, getattr(self, name) or None)
        if "name" in {f.name for f in fields(self)}:
            registered = type(self).name
            name = ALIASES.get(self.name, self.name)
            if name != registered:
                spellings = [registered, *sorted(k for k, v in ALIASES.items() if v == registered)]
                raise ValueError(f"{type(self).__name__}.name={self.name!r}: allowed {spellings}")
            self.name = registered
        check_fields(self, {f.name: f.metadata["check"] for f in fields(self) if "check" in f.metadata})

    def apply(self, model: Any, calib_loader: Any = None) -> Any:
        """Run the registered implementation on ``model`` (the extension's ``algos`` style); returns the model."""
        implementation = implementation_of(self)
        if implementation.needs_data and calib_loader is None:
            raise ValueError(f"{type(self).__name__} ({self.name}) needs calibration data: pass calib_loader")
        return implementation.run(self, model, calib_loader)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with its ``name`` first; ``Config.from_dict`` finds the class by that name."""
        return {"name": self.name, **config_to_dict(self)}


@dataclass(eq=True)
class PreQuantOptConfig(AlgoConfig):
    """Base of the transforms that run on the float model before quantization (``pre_quant_opt_config``)."""

    default_phase: ClassVar[Phase] = Phase.before_quantization


#: name -> config class, for ``from_dict``: this package's algorithms (filled by the package) and
#: those added with :func:`register_algo_config`
ALGO_CONFIGS: dict[str, type[AlgoConfig]] = {}


def register_algo_config(cls: type[AlgoConfig]) -> type[AlgoConfig]:
    """Make a config class of your own loadable by its ``name`` (usable as a class decorator)."""
    name = getattr(cls, "name", None) if isinstance(cls, type) else None
    if not (isinstance(cls, type) and issubclass(cls, AlgoConfig)) or not isinstance(name, str) or not name:
        raise TypeError(f"register_algo_config: expected an AlgoConfig subclass with a name, got {cls!r}")
    if ALGO_CONFIGS.get(name, cls) is not cls:
        raise ValueError(f"register_algo_config: name {name!r} is taken by {ALGO_CONFIGS[name].__name__}")
    ALGO_CONFIGS[name] = cls
    return cls


def algo_from_dict(owner: str, data: Any) -> AlgoConfig:
    """The algorithm config that ``data["name"]`` names, built from ``data``."""
    if isinstance(data, dict) and data.get("name") in ALIASES:
        data = {**data, "name": ALIASES[data["name"]]}
    return from_registry(owner, data, ALGO_CONFIGS)


def algo_list(owner: str, field: str, value: Any) -> list[AlgoConfig] | None:
    """A config's algorithm field as a list: None stays None, one config becomes a list of one, and
    an entry in its file form (a dict with its ``name``) becomes the config it names."""
    if value is None:
        return None
    steps = [value] if isinstance(value, AlgoConfig) else value
    if not isinstance(steps, list):
        raise TypeError(
            f"{owner}.{field}: expected None, an algorithm config or a list of them, got {type(value).__name__}"
        )
    steps = [algo_from_dict(field, step) if isinstance(step, dict) else step for step in steps]
    for step in steps:
        if not isinstance(step, AlgoConfig):
            raise TypeError(
                f"{owner}.{field} entry {step!r}: expected an algorithm config, one of {sorted(ALGO_CONFIGS)} "
                "(or a subclass of AlgoConfig / PreQuantOptConfig)"
            )
    return list(steps)


# -- implementations -----------------------------------------------------------------------------


@dataclass(frozen=True)
class Implementation:
    """How a backend runs an algorithm: ``run(config, model, batches) -> model`` in ``phase``.

    ``needs_data``: the algorithm needs calibration batches (``quantize_model`` checks for them
    before touching the model). ``check(config, plans, sites) -> problems``: what the algorithm
    refuses in the resolved plan (e.g. its ``bit`` against a layer's weight spec), reported with
    the layer rules before anything is built. ``wants_plans``: a ``before_quantization`` algorithm
    that is called with ``plans=`` (layer name -> ``LayerPlan``: the config resolved over the float
    model's layers, as the layerwise backend sees them), to fit what it does to the quantizers
    that will follow. ``structural``: it makes the model what the target needs (batch norm
    folded) rather than more accurate: ``quantize_model``'s algorithm check keeps it on both sides.
    ``shape(model) -> model``: what the algorithm adds to the model's structure (e.g. a bias where a
    layer had none), done instead of ``run`` when the model is built without calibration to load a
    checkpoint into (``quantize_model(calibrate=False)``), so that the checkpoint's keys fit.
    ``folded_batch_norm``: an algorithm on the quantized model that also takes layers with batch
    norm folded in during QAT (the others would edit a layer's own weight, not the folded one).
    """

    phase: Phase
    run: Callable[..., Any]
    needs_data: bool = False
    check: Callable[[Any, Any, Any], Any] | None = None
    wants_plans: bool = False
    structural: bool = False
    shape: Callable[[Any], Any] | None = None
    folded_batch_norm: bool = False


#: implementations registered one by one (a user's own, with :func:`register_implementation`)
_REGISTERED: dict[type[AlgoConfig], Implementation] = {}
#: backend modules whose ``IMPLEMENTATIONS`` table is read on the first look-up, in order
_BACKENDS: list[str] = []
_LOADED: dict[type[AlgoConfig], Implementation] = {}


def add_backend(module: str) -> None:
    """Announce a backend module holding a table ``IMPLEMENTATIONS: {config class: Implementation}``."""
    if module not in _BACKENDS:
        _BACKENDS.append(module)


def register_implementation(
    config_cls: type[AlgoConfig],
    phase: Phase,
    *,
    needs_data: bool = False,
    check: Callable[..., Any] | None = None,
):
    """Decorator: register ``run(config, model, batches) -> model`` as the implementation of ``config_cls``
    (``check``: its precondition on the resolved plan, see :class:`Implementation`)."""

    def decorator(run: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        _REGISTERED[config_cls] = Implementation(phase, run, needs_data, check)
        return run

    return decorator


def implementations() -> dict[type[AlgoConfig], Implementation]:
    """Every implementation: the backends' tables (loaded now if not yet), then those registered one by one."""
    while _BACKENDS:
        _LOADED.update(importlib.import_module(_BACKENDS.pop(0)).IMPLEMENTATIONS)
    return {**_LOADED, **_REGISTERED}


def implementation_of(config: AlgoConfig) -> Implementation:
    """The implementation registered for ``config``'s class (or a base class of it).

    A config class of the user's own that overrides ``apply`` runs that, in its base's phase. A
    config refused by name (``refused``) raises ``NotImplementedError`` with its reason; values no
    backend runs (``unsupported()``) raise one ``ValueError`` naming each field.
    """
    if type(config).refused is not None:
        raise NotImplementedError(f"{type(config).__name__} (name={config.name!r}) is not supported: {type(config).refused}")
    problems = config.unsupported()
    if problems:
        raise ValueError("; ".join(problems))
    table = implementations()
    for cls in type(config).__mro__:
        if cls in table:
            return table[cls]
    if type(config).apply is not AlgoConfig.apply:
        return Implementation(config.default_phase, lambda cfg, model, batches: cfg.apply(model, batches))
    implemented = sorted(c.__name__ for c in table)
    hint = "" if implemented else " (no backend is loaded: import quark.torch.extensions.brevitas.api)"
    raise NotImplementedError(
        f"{type(config).__name__} (name={config.name!r}) has no implementation in this backend; "
        f"implemented: {implemented}{hint}"
    )
