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
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any, ClassVar

from quark.torch.quantization.config._fields import from_registry, named_dict

__all__ = [
    "ALGO_CONFIGS",
    "GPFA2Q",
    "GPFQ",
    "GPTQ",
    "AWQConfig",
    "ActivationEqualization",
    "AlgoConfig",
    "BiasCorrection",
    "CalibrateBatchNorm",
    "GPTQConfig",
    "HadamardRotation",
    "Implementation",
    "MergeBatchNorm",
    "Phase",
    "PreQuantOptConfig",
    "Preprocess",
    "Qronos",
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
        """Run the registered implementation on ``model`` (the extension's ``algos`` style); returns the model."""
        implementation = implementation_of(self)
        if implementation.needs_data and calib_loader is None:
            raise ValueError(f"{type(self).__name__} ({self.name}) needs calibration data: pass calib_loader")
        return implementation.run(self, model, calib_loader)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with its ``name``; ``Config.from_dict`` finds the class by that name."""
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
        raise ValueError(
            f"register_algo_config: name {cls.name!r} is taken by {ALGO_CONFIGS[cls.name].__name__}"
        )
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
        raise TypeError(
            f"{owner}.{field}: expected None, an algorithm config or a list of them, got {type(value).__name__}"
        )
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
    the layer rules before anything is built.
    """

    phase: Phase
    run: Callable[[Any, Any, Any], Any]
    needs_data: bool = False
    check: Callable[[Any, Any, Any], Any] | None = None


_IMPLEMENTATIONS: dict[type[AlgoConfig], Implementation] = {}
#: backend modules to import (once) before looking up an implementation
_BACKENDS: list[str] = []


def add_backend(module: str) -> None:
    """Announce a backend module that registers implementations when imported."""
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
        _IMPLEMENTATIONS[config_cls] = Implementation(phase, run, needs_data, check)
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


# -- field checks ---------------------------------------------------------------------------------


def _check_fields(config: Any, checks: dict[str, tuple[Callable[[Any], bool], str]]) -> None:
    """Every listed field must pass its test; all failures are reported together."""
    owner = type(config).__name__
    bad = [
        f"{owner}.{name}={getattr(config, name)!r} is not valid; allowed: {allowed}"
        for name, (ok, allowed) in checks.items()
        if not ok(getattr(config, name))
    ]
    if bad:
        raise ValueError("; ".join(bad))


def _is(
    types: type | tuple[type, ...], *, optional: bool = False, test: Callable[[Any], bool] = lambda v: True
):
    def ok(value: Any) -> bool:
        if value is None:
            return optional
        return (
            isinstance(value, types)
            and not (isinstance(value, bool) and bool not in _as_tuple(types))
            and test(value)
        )

    return ok


def _as_tuple(types: type | tuple[type, ...]) -> tuple[type, ...]:
    return types if isinstance(types, tuple) else (types,)


def _str_list(value: Any) -> bool:
    return isinstance(value, list) and all(isinstance(v, str) and v for v in value)


#: keys of one ``scaling_layers`` entry (Quark's format) -> whether required
SCALING_LAYER_KEYS: dict[str, bool] = {
    "prev_op": True,
    "layers": True,
    "inp": False,
    "module2inspect": False,
    "has_kwargs": False,
    "alpha": False,
}


def _scaling_layers(value: Any) -> bool:
    if not isinstance(value, list):
        return False
    for entry in value:
        if not isinstance(entry, dict) or set(entry) - set(SCALING_LAYER_KEYS):
            return False
        if any(key not in entry for key, required in SCALING_LAYER_KEYS.items() if required):
            return False
        if not isinstance(entry["prev_op"], str) or not _str_list(entry["layers"]) or not entry["layers"]:
            return False
    return True


SCALING_LAYERS_ALLOWED = (
    "None (found in the model) or a list of dicts with 'prev_op' (str) and 'layers' (non-empty list of str), "
    f"optionally {[k for k, required in SCALING_LAYER_KEYS.items() if not required]}"
)
_OPT_NAMES = (_is(str, optional=True), "None or a module path (str)")
_OPT_NAME_LIST = (lambda v: v is None or _str_list(v), "None or a list of module names (str)")
_BIT = (_is(int, optional=True, test=lambda v: 2 <= v <= 16), "None (the weight spec's) or an int in 2..16")
_SYM = (_is(bool, optional=True), "None (the weight spec's) or a bool")
_GROUP = (
    _is(int, optional=True, test=lambda v: v > 0 or v == -1),
    "None (the weight spec's), -1 (one scale per output channel) or a positive int",
)
_HEADS = (_is(int, test=lambda v: v > 0 or v == -1), "-1 (unknown) or a positive int")
_BOOL = (_is(bool), "True or False")


class _NamedConfig:
    """Main-API algorithms carry ``name`` as their first field (Quark's convention): it must be the
    registered name or an old spelling of it, which is normalised."""

    def _normalise_name(self) -> None:
        registered = type(self).__dataclass_fields__["name"].default
        name = _ALIASES.get(self.name, self.name)
        if name != registered:
            spellings = [registered, *sorted(k for k, v in _ALIASES.items() if v == registered)]
            raise ValueError(f"{type(self).__name__}.name={self.name!r}: allowed {spellings}")
        self.name = registered


# -- the main API's algorithms ------------------------------------------------------------------


@register_algo_config
@dataclass(eq=True)
class SmoothQuantConfig(_NamedConfig, PreQuantOptConfig):
    """SmoothQuant (Xiao et al. 2022): migrate activation outliers into the weights by per-channel scaling.

    For each pair ``prev_op -> layers`` (a norm or a linear layer feeding linear layers), the scale
    of input channel j is ``s_j = max|X_j|^alpha / max|W_:j|^(1 - alpha)``, clamped below at
    ``scale_clamp_min``; ``prev_op``'s output is divided by s and the layers' weights multiplied,
    so the float function is unchanged.

    Args:
        name: "smoothquant" (older files: "smooth").
        alpha: migration strength in [0, 1].
        scale_clamp_min: smallest scale.
        scaling_layers: Quark's list of ``{"prev_op": ..., "layers": [...], "inp": ...}`` relative
            to each block of ``model_decoder_layers`` (or to the model without it); None: found in
            the model (norm -> linear and linear -> linear pairs), pairs that cannot be found named
            in a warning.
        embedding_layers: modules run before the first block (checked to exist; the model runs
            them anyway to reach the blocks).
        model_decoder_layers: path of the blocks' ``ModuleList``; None: found in the model.
        num_attention_heads, num_key_value_heads: heads of grouped-query attention, needed to pair
            ``v_proj -> o_proj`` when they have different widths.
    """

    name: str = "smoothquant"
    alpha: float = 1.0
    scale_clamp_min: float = 1e-3
    scaling_layers: list[dict[str, Any]] | None = None
    embedding_layers: list[str] | None = None
    model_decoder_layers: str | None = None
    num_attention_heads: int = -1
    num_key_value_heads: int = -1

    def __post_init__(self) -> None:
        self._normalise_name()
        self.model_decoder_layers = self.model_decoder_layers or None  # newer Quark writes ""
        self.scaling_layers = self.scaling_layers or None
        _check_fields(
            self,
            {
                "alpha": (_is((int, float), test=lambda v: 0 <= v <= 1), "a number in [0, 1]"),
                "scale_clamp_min": (_is((int, float), test=lambda v: v > 0), "a positive number"),
                "scaling_layers": (lambda v: v is None or _scaling_layers(v), SCALING_LAYERS_ALLOWED),
                "embedding_layers": _OPT_NAME_LIST,
                "model_decoder_layers": _OPT_NAMES,
                "num_attention_heads": _HEADS,
                "num_key_value_heads": _HEADS,
            },
        )


@register_algo_config
@dataclass(eq=True)
class AWQConfig(_NamedConfig, AlgoConfig):
    """AWQ (Lin et al. 2023): activation-aware weight scaling searched per layer group, then clipping.

    For each pair ``prev_op -> layers``, a grid of scales ``s = mean|X|^r`` (r in 0, 0.05, ..., 0.95)
    is tried on the layers' quantized weights and the one minimising the output error of the
    group (``module2inspect``, else the layers) is folded into ``prev_op`` and the weights; then
    each layer's weight range is shrunk (up to 50%) where that lowers its output error.

    Args:
        name: "awq".
        bit, sym, group_size: Quark's description of the weight quantization; the layer's weight
            spec is what quantizes, and these must agree with it (None: take the spec's; group_size
            -1: per channel).
        algo_processor: Quark's processor class; this backend runs its own implementation, so
            only None is meaningful (any other value is accepted and ignored with a warning).
        scaling_layers, model_decoder_layers, embedding_layers: as in :class:`SmoothQuantConfig`.
        num_attention_heads, num_key_value_heads: as in :class:`SmoothQuantConfig`.
    """

    name: str = "awq"
    bit: int | None = 4
    sym: bool | None = False
    group_size: int | None = 128
    algo_processor: Any = None
    scaling_layers: list[dict[str, Any]] | None = None
    model_decoder_layers: str | None = None
    embedding_layers: list[str] | None = None
    num_attention_heads: int = -1
    num_key_value_heads: int = -1

    def __post_init__(self) -> None:
        self._normalise_name()
        self.model_decoder_layers = self.model_decoder_layers or None
        self.scaling_layers = self.scaling_layers or None
        _check_fields(
            self,
            {
                "bit": _BIT,
                "sym": _SYM,
                "group_size": _GROUP,
                "scaling_layers": (lambda v: v is None or _scaling_layers(v), SCALING_LAYERS_ALLOWED),
                "model_decoder_layers": _OPT_NAMES,
                "embedding_layers": _OPT_NAME_LIST,
                "num_attention_heads": _HEADS,
                "num_key_value_heads": _HEADS,
            },
        )
        if self.algo_processor is not None:
            warnings.warn(
                f"AWQConfig.algo_processor={self.algo_processor!r} is ignored: this package runs its own AWQ on "
                "Brevitas quantizers",
                stacklevel=3,
            )

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready dict with its ``name``; ``Config.from_dict`` finds the class by that name."""
        data = super().to_dict()
        data["algo_processor"] = None  # a class does not serialise; it is ignored anyway
        return data


@register_algo_config
@dataclass(eq=True)
class GPTQConfig(_NamedConfig, AlgoConfig):
    """GPTQ (Frantar et al. 2022): second-order weight rounding with error feedback, layer by layer.

    Args:
        name: "gptq".
        bit, sym, group_size: must agree with each layer's weight spec (None: take the spec's;
            group_size -1: per channel).
        damp_percent: dampening of the Hessian's diagonal, as a fraction of its mean.
        desc_act: quantize columns in order of decreasing activation energy ("act order").
        static_groups: per_group weights: True fixes every group's scale from the original
            weights before GPTQ starts; False (Quark's documented default) computes a group's
            scale from the updated weights when GPTQ reaches its first column (as AutoGPTQ);
            with ``desc_act=True`` it is refused (groups in activation order are not the spec's
            contiguous groups; AMD Quark refuses it too). Per-channel and per-tensor scales are
            fixed from the original weights.
        true_sequential: True: each layer sees the inputs produced by the layers already
            quantized; False: the layers of one block are quantized in parallel on the block's
            float inputs.
        inside_layer_modules: the layers to run GPTQ on, relative to each block (wildcards
            allowed); None: every quantized Linear / Conv layer of the blocks.
        model_decoder_layers: path of the blocks' ``ModuleList``; None: found in the model (no
            repeated blocks: the whole model is one block).
        embedding_layers: modules run before the first block (checked to exist).
        block_size: columns updated together (the lazy batch update of the paper).
    """

    name: str = "gptq"
    bit: int | None = 4
    sym: bool | None = False
    group_size: int | None = 128
    damp_percent: float = 0.01
    desc_act: bool = True
    static_groups: bool = False
    true_sequential: bool = True
    inside_layer_modules: list[str] | None = None
    model_decoder_layers: str | None = None
    embedding_layers: list[str] | None = None
    block_size: int = 128

    def __post_init__(self) -> None:
        self._normalise_name()
        self.model_decoder_layers = self.model_decoder_layers or None
        self.inside_layer_modules = self.inside_layer_modules or None
        _check_fields(
            self,
            {
                "bit": _BIT,
                "sym": _SYM,
                "group_size": _GROUP,
                "damp_percent": (_is((int, float), test=lambda v: 0 <= v < 1), "a number in [0, 1)"),
                "desc_act": _BOOL,
                "static_groups": _BOOL,
                "true_sequential": _BOOL,
                "inside_layer_modules": _OPT_NAME_LIST,
                "model_decoder_layers": _OPT_NAMES,
                "embedding_layers": _OPT_NAME_LIST,
                "block_size": (_is(int, test=lambda v: v > 0), "a positive int"),
            },
        )


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


@register_algo_config
@dataclass(eq=True)
class MergeBatchNorm(PreQuantOptConfig):
    """Batch norm folded into the layer before it (Brevitas ``MergeBatchNorm``), beyond AMD Quark.

    What ``Preprocess`` does to batch norm, alone: a model without batch norm is returned as it
    is (no tracing, so any model passes); otherwise the model is traced with ``torch.fx`` (a model
    that does not trace whole, part by part: its largest submodules that do) and every
    ``BatchNorm`` that follows a Linear / Conv / ConvTranspose (whose output feeds nothing else) is
    folded into its weights and bias; the float function is unchanged. A batch norm that cannot be
    folded (after an addition, or after a layer whose output forks) stays and is named in a
    warning. Integer targets need it: the XINT8 preset folds by default, as the NPU's compiler does.
    """

    name: ClassVar[str] = "Merge Batch Norm"


@register_algo_config
@dataclass(eq=True)
class ActivationEqualization(PreQuantOptConfig):
    """SmoothQuant-style activation equalization (Brevitas ``activation_equalization_mode``) on the
    float model, from calibration data.

    Args:
        is_layerwise: True: a per-channel scale is inserted in front of every Linear / Conv and
            folded into its weight (any model); False: scales are folded into the preceding layer
            through the traced graph (needs the ``torch.fx`` model that ``Preprocess`` makes).
        alpha: migration strength in [0, 1].
    """

    name: ClassVar[str] = "Activation Equalization"
    is_layerwise: bool = True
    alpha: float = 0.5

    def __post_init__(self) -> None:
        _check_fields(
            self,
            {
                "is_layerwise": _BOOL,
                "alpha": (_is((int, float), test=lambda v: 0 <= v <= 1), "a number in [0, 1]"),
            },
        )


@register_algo_config
@dataclass(eq=True)
class HadamardRotation(PreQuantOptConfig):
    """Online Hadamard rotation in front of Linear layers (QuaRot-style; Brevitas
    ``LayerwiseActivationRotation``), beyond AMD Quark.

    Each chosen Linear computes ``(x H)(W H)^T = x W^T`` with H an orthonormal Hadamard matrix: the
    weight is rotated once (``W H``), the input at every call (``x H``, a float transform that stays
    in the quantized model, in front of the layer's input quantizer). Rotation spreads outlier
    channels of weights and activations over all channels, so per-tensor scales fit them better;
    the float function is unchanged. A rotated layer becomes the child ``layer`` of Brevitas'
    ``RotatedModule`` (``encoder.0.fc`` is quantized as ``encoder.0.fc.layer``: name patterns in
    ``layer_quant_config`` must match the new name; ``exclude`` of the old name still applies).

    Args:
        layers: name patterns (fnmatch) of the Linear layers to rotate; None: every Linear whose
            input width has a Hadamard matrix (a power of two times 1, 12, 20, 28, 36, 40, 52, 60,
            108, 140, 152, 156 or 172), the others named in a warning. A pattern matching no Linear,
            or a matched layer of another width, is an error.
    """

    name: ClassVar[str] = "Hadamard Rotation"
    layers: list[str] | None = None

    def __post_init__(self) -> None:
        patterns = (lambda v: v is None or (_str_list(v) and bool(v)), "None or a non-empty list of name patterns")
        _check_fields(self, {"layers": patterns})


@register_algo_config
@dataclass(eq=True)
class GPTQ(AlgoConfig):
    """GPTQ (Frantar et al.) with Brevitas' ``gptq_mode``, on the calibrated model.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
    """

    name: ClassVar[str] = "GPTQ"
    act_order: bool = False

    def __post_init__(self) -> None:
        _check_fields(self, {"act_order": _BOOL})


_PERCENTAGE = (_is((int, float), test=lambda v: 0 < v <= 1), "a number in (0, 1]")


@register_algo_config
@dataclass(eq=True)
class GPFQ(AlgoConfig):
    """GPFQ (Lybrand and Saab; Zhang et al.) with Brevitas' memory-efficient ``gpfq_mode``.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
        percentage_of_processed_inputs: fraction of each batch's input vectors (tokens, pixels)
            that enter the statistics, evenly spaced.
    """

    name: ClassVar[str] = "GPFQ"
    act_order: bool = False
    percentage_of_processed_inputs: float = 1.0

    def __post_init__(self) -> None:
        _check_fields(self, {"act_order": _BOOL, "percentage_of_processed_inputs": _PERCENTAGE})


@register_algo_config
@dataclass(eq=True)
class GPFA2Q(AlgoConfig):
    """GPFQ constrained so that no integer accumulator of ``accumulator_bit_width`` bits can overflow
    (A2Q, Colbert et al.), with Brevitas' accumulator-aware GPFQ.

    Args:
        act_order, percentage_of_processed_inputs: as in :class:`GPFQ`.
        accumulator_bit_width: bits of the signed accumulator of every quantized layer.
    """

    name: ClassVar[str] = "GPFA2Q"
    act_order: bool = False
    percentage_of_processed_inputs: float = 1.0
    accumulator_bit_width: int = 16

    def __post_init__(self) -> None:
        _check_fields(
            self,
            {
                "act_order": _BOOL,
                "percentage_of_processed_inputs": _PERCENTAGE,
                "accumulator_bit_width": (_is(int, test=lambda v: 2 <= v <= 64), "an int in 2..64"),
            },
        )


@register_algo_config
@dataclass(eq=True)
class Qronos(AlgoConfig):
    """Qronos (Zhang et al. 2025, Brevitas ``Qronos``), beyond AMD Quark: rounds each column to
    correct both the error of the weights already rounded and the error that quantized inputs
    (from the layers quantized before) bring, then diffuses the rest GPTQ-style.

    Args:
        act_order: quantize columns in order of decreasing activation energy.
        alpha: dampening of the input covariance, relative to its largest eigenvalue.
    """

    name: ClassVar[str] = "Qronos"
    act_order: bool = True
    alpha: float = 1e-6

    def __post_init__(self) -> None:
        _check_fields(
            self,
            {"act_order": _BOOL, "alpha": (_is((int, float), test=lambda v: 0 < v < 1), "a number in (0, 1)")},
        )


@register_algo_config
@dataclass(eq=True)
class BiasCorrection(AlgoConfig):
    """Bias correction (Nagel et al. 2019, Brevitas ``bias_correction_mode``): each layer's bias
    absorbs the mean shift its quantization causes on the calibration data."""

    name: ClassVar[str] = "Bias Correction"


@register_algo_config
@dataclass(eq=True)
class CalibrateBatchNorm(AlgoConfig):
    """Batch-norm statistics re-estimated on the quantized model (Brevitas ``norm_correction_mode``)."""

    name: ClassVar[str] = "Calibrate Batch Norm"
