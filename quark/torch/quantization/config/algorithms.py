"""Algorithm configs: pure data, registered by name, run by whichever backend implements them.

Every algorithm of either config flavour (the main API's SmoothQuant, AWQ, GPTQ; the Brevitas
extension's Preprocess, ...) is a dataclass here, registered in :data:`ALGO_CONFIGS` under its
``name`` so that configs serialise and load without importing a backend. A backend registers an
:class:`Implementation` for a config class with :func:`register_implementation`, saying in which
:class:`Phase` it runs; ``ModelQuantizer`` runs the phases in order. ``config.apply(model,
calib_loader)`` (the Brevitas extension's calling convention) runs the registered implementation
directly.

Kept free of Brevitas: a backend package announces itself with :func:`add_backend`, and is
imported only when an implementation is first looked up.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from quark.torch.quantization.config._fields import from_registry, named_dict

__all__ = [
    "ALGO_CONFIGS",
    "AWQConfig",
    "AlgoConfig",
    "GPTQConfig",
    "Implementation",
    "Phase",
    "PreQuantOptConfig",
    "Preprocess",
    "SmoothQuantConfig",
    "add_backend",
    "implementation_of",
    "register_algo_config",
    "register_implementation",
]


class Phase(Enum):
    """When an algorithm runs, relative to quantization."""

    before_quantization = "before_quantization"  # on the float model: SmoothQuant, equalization, Preprocess
    after_calibration = "after_calibration"  # on the calibrated quantized model: GPTQ, GPFQ, AWQ, ...
    after_quantization = "after_quantization"  # last: whatever needs the final quantized model


@dataclass(eq=True)
class AlgoConfig:
    """Base of the algorithms that run on the quantized model (``Config.algo_config``).

    ``name`` identifies the algorithm in serialised configs. ``apply(model, calib_loader=None)``
    runs the implementation a backend registered for this class; a subclass of your own may
    override ``apply`` instead.
    """

    name: ClassVar[str] = ""
    default_phase: ClassVar[Phase] = Phase.after_calibration

    def apply(self, model: Any, calib_loader: Any = None) -> Any:
        return implementation_of(self).run(self, model, calib_loader)

    def to_dict(self) -> dict[str, Any]:
        return named_dict(self, self.name)


@dataclass(eq=True)
class PreQuantOptConfig(AlgoConfig):
    """Base of the transforms that run on the float model before quantization (``pre_quant_opt_config``)."""

    default_phase: ClassVar[Phase] = Phase.before_quantization


#: name -> config class, for ``from_dict``. Filled by :func:`register_algo_config`.
ALGO_CONFIGS: dict[str, type[AlgoConfig]] = {}
#: names written by earlier releases -> current name
_ALIASES: dict[str, str] = {"smooth": "smoothquant", "preprocess": "Pre-Processing"}


def register_algo_config(cls: type[AlgoConfig]) -> type[AlgoConfig]:
    """Make ``cls`` loadable by its ``name`` (a class decorator)."""
    if not (isinstance(cls, type) and issubclass(cls, AlgoConfig)) or not cls.name:
        raise TypeError(f"register_algo_config: expected an AlgoConfig subclass with a name, got {cls!r}")
    if ALGO_CONFIGS.get(cls.name, cls) is not cls:
        raise ValueError(f"register_algo_config: name {cls.name!r} is taken by {ALGO_CONFIGS[cls.name].__name__}")
    ALGO_CONFIGS[cls.name] = cls
    return cls


def algo_from_dict(owner: str, data: Any) -> AlgoConfig:
    """The algorithm config that ``data["name"]`` names, built from the rest of ``data``."""
    if isinstance(data, dict) and data.get("name") in _ALIASES:
        data = {**data, "name": _ALIASES[data["name"]]}
    return from_registry(owner, data, ALGO_CONFIGS)


def algo_list(owner: str, field: str, value: Any) -> list[AlgoConfig] | None:
    """A config's algorithm field as a list: None stays None, one config becomes a list of one."""
    if value is None:
        return None
    steps = [value] if isinstance(value, AlgoConfig) else value
    if not isinstance(steps, list):
        raise TypeError(f"{owner}.{field}: expected None, an algorithm config or a list of them, got {type(value).__name__}")
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
    before touching the model).
    """

    phase: Phase
    run: Callable[[Any, Any, Any], Any]
    needs_data: bool = False


_IMPLEMENTATIONS: dict[type[AlgoConfig], Implementation] = {}
#: backend modules to import (once) before looking up an implementation
_BACKENDS: list[str] = []


def add_backend(module: str) -> None:
    """Announce a backend module that registers implementations when imported."""
    if module not in _BACKENDS:
        _BACKENDS.append(module)


def register_implementation(config_cls: type[AlgoConfig], phase: Phase, *, needs_data: bool = False):
    """Decorator: register ``run(config, model, batches) -> model`` as the implementation of ``config_cls``."""

    def decorator(run: Callable[[Any, Any, Any], Any]) -> Callable[[Any, Any, Any], Any]:
        _IMPLEMENTATIONS[config_cls] = Implementation(phase, run, needs_data)
        return run

    return decorator


def implementation_of(config: AlgoConfig) -> Implementation:
    """The implementation registered for ``config``'s class (or a base class of it).

    A config class of the user's own that overrides ``apply`` runs that, in its base's phase.
    """
    while _BACKENDS:
        importlib.import_module(_BACKENDS.pop(0))
    for cls in type(config).__mro__:
        if cls in _IMPLEMENTATIONS:
            return _IMPLEMENTATIONS[cls]
    if type(config).apply is not AlgoConfig.apply:
        return Implementation(config.default_phase, lambda cfg, model, batches: cfg.apply(model, batches))
    implemented = sorted(c.__name__ for c in _IMPLEMENTATIONS)
    hint = "" if implemented else " (no backend is loaded: import quark.torch.extensions.brevitas.api)"
    raise NotImplementedError(
        f"{type(config).__name__} (name={config.name!r}) has no implementation in this backend; "
        f"implemented: {implemented}{hint}"
    )


# -- the main API's algorithms ------------------------------------------------------------------


@register_algo_config
@dataclass(eq=True)
class SmoothQuantConfig(PreQuantOptConfig):
    """SmoothQuant (Xiao et al. 2022): migrate activation outliers into weights by per-channel scaling."""

    name: ClassVar[str] = "smoothquant"
    alpha: float = 1.0
    scale_clamp_min: float = 1e-3
    scaling_layers: list[dict[str, Any]] | None = None
    model_decoder_layers: str | None = None
    num_attention_heads: int = -1
    num_key_value_heads: int = -1


@register_algo_config
@dataclass(eq=True)
class AWQConfig(AlgoConfig):
    """AWQ (Lin et al. 2023): activation-aware weight scaling searched per layer group."""

    name: ClassVar[str] = "awq"
    scaling_layers: list[dict[str, Any]] | None = None
    model_decoder_layers: str | None = None
    num_attention_heads: int = -1
    num_key_value_heads: int = -1


@register_algo_config
@dataclass(eq=True)
class GPTQConfig(AlgoConfig):
    """GPTQ (Frantar et al. 2022): second-order weight rounding with error feedback."""

    name: ClassVar[str] = "gptq"
    damp_percent: float = 0.01
    desc_act: bool = True
    static_groups: bool = True
    true_sequential: bool = True
    inside_layer_modules: list[str] | None = None
    model_decoder_layers: str | None = None
    block_size: int = 128


# -- the Brevitas extension's algorithms (quark.torch.extensions.brevitas.algos) ----------------


@register_algo_config
@dataclass(eq=True)
class Preprocess(PreQuantOptConfig):
    """Float-model preparation before quantization (Brevitas ``preprocess_for_quantize``).

    Traces the model with ``torch.fx``, turns functional calls into modules, merges batch norm into
    the preceding convolution, removes dropout, equalizes weights across layers
    (``equalize_iterations`` rounds) and optionally splits outlier channels. The function of the
    model is preserved (ReLU6 is kept: Brevitas' default replacement by ReLU would change it).

    A model that ``torch.fx`` cannot trace fails here with the tracer's message; pass
    ``Config(..., pre_quant_opt_config=[])`` to quantize it without pre-processing.
    """

    name: ClassVar[str] = "Pre-Processing"
    trace_model: bool = True
    equalize_iterations: int = 20
    equalize_merge_bias: bool = True
    merge_batch_norm: bool = True
    channel_splitting_ratio: float = 0.0
    channel_splitting_split_input: bool = False
