"""The resolved plan: for every module and tensor role, the effective normalised spec.

Both config flavours (the main Quark API and the Brevitas extension) are normalised into
:class:`TensorQuant`, so every later stage (translation onto Brevitas, calibration, export checks,
the summary table) is written once. Pure data; no Brevitas import.

Resolution, for every module of a supported type and every role (input_tensors, output_tensors,
weight, bias): ``layer_quant_config`` (name pattern) > ``layer_type_quant_config`` > ``global``;
a role left None inherits from the level below; modules whose name (or an ancestor's) matches
``exclude`` stay float. A pattern or type that matches nothing is an error listing what exists.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from typing import Any, Callable

from torch import nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.config import config as main
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.observer import (
    ObserverBase,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
    TQT3SDObserver,
    TQTJeffreysObserver,
)

ROLES = ("input_tensors", "output_tensors", "weight", "bias")
ACTIVATION_ROLES = ("input_tensors", "output_tensors")

#: bit widths of weights and activations; bias goes up to 32.
MIN_BITS, MAX_BITS, MAX_BIAS_BITS = 2, 16, 32

#: integer dtypes of the main API: dtype -> (bit width, signed)
INT_DTYPES: dict[Dtype, tuple[int, bool]] = {d: (d.bit_width, d.signed) for d in Dtype if d.is_integer}
#: scaled minifloats: dtype -> (exponent bits, mantissa bits, variant). OCP: e4m3 max 448 (NaN only),
#: e5m2 max 57344 (inf, NaN); fp6/fp4 are OCP MX element formats (no inf/NaN). FNUZ: explicit dtypes.
FLOAT_DTYPES: dict[Dtype, tuple[int, int, str]] = {
    Dtype.fp8_e4m3: (4, 3, "ocp"),
    Dtype.fp8_e5m2: (5, 2, "ocp"),
    Dtype.fp8_e4m3fnuz: (4, 3, "fnuz"),
    Dtype.fp8_e5m2fnuz: (5, 2, "fnuz"),
    Dtype.fp6_e3m2: (3, 2, "ocp"),
    Dtype.fp6_e2m3: (2, 3, "ocp"),
    Dtype.fp4: (2, 1, "ocp"),
}
#: round-to-nearest-even casts (no scale): dtype -> (exponent bits, mantissa bits)
CAST_DTYPES: dict[Dtype, tuple[int, int]] = {Dtype.bfloat16: (8, 7), Dtype.float16: (5, 10)}
#: element types of OCP MX blocks (32 elements sharing an E8M0 scale)
MX_ELEMENTS: tuple[Dtype, ...] = (Dtype.int8, Dtype.fp8_e4m3, Dtype.fp8_e5m2, Dtype.fp6_e3m2, Dtype.fp6_e2m3, Dtype.fp4)
MX_BLOCK = 32
#: block formats with shared micro-exponents (Rouhani et al. 2023): 16-element blocks
BDR_DTYPES: tuple[Dtype, ...] = (Dtype.mx6, Dtype.mx9)
BDR_BLOCK = 16
BDR_BITS: dict[Dtype, int] = {Dtype.mx6: 6, Dtype.mx9: 9}  # bits per element, shared exponents included

#: the Brevitas extension's stats-based activation statistic (Brevitas' default, as in Quark).
EXT_ACT_PERCENTILE = 99.999


@dataclass(frozen=True)
class TensorQuant:
    """Normalised quantization of one tensor.

    ``ch_axis`` None means the layer's natural channel axis (output channels of a weight,
    axis 1 of an activation), resolved when the layer is known. ``observer`` is the statistic's
    class: activations instantiate it for calibration, weights compute the same statistic on the
    weight at every forward.
    """

    bit_width: int
    signed: bool
    symmetric: bool = True
    qscheme: QSchemeType = QSchemeType.per_tensor
    ch_axis: int | None = None
    group_size: int | None = None
    scale_type: ScaleType = ScaleType.float
    round_method: RoundType = RoundType.half_even
    zero_point_type: ZeroPointType = ZeroPointType.int32
    observer: type[ObserverBase] = PerTensorMinMaxObserver
    percentile: float | None = None
    is_dynamic: bool = False
    bias_scale_from_product: bool = False  # bias: scale = input scale x weight scale
    tqt: bool = False  # trained power-of-two threshold (TQT), initialised by ``observer``
    format: str = "int"  # int | float (scaled minifloat) | cast | mx | bdr
    exponent_bit_width: int | None = None  # float formats
    mantissa_bit_width: int | None = None
    variant: str | None = None  # float: "ocp" | "fnuz"; cast: dtype name; mx: element dtype name; bdr: mx6 | mx9

    @property
    def needs_calibration(self) -> bool:
        """Static activations of scaled formats take their range from calibration."""
        return not self.is_dynamic and self.format in ("int", "float")
    @property
    def statistic(self) -> str:
        return self.observer.statistic

    @property
    def grid(self) -> tuple[int, int]:
        """Integer grid (qmin, qmax). Asymmetric tensors use the unsigned grid with a zero point."""
        if self.symmetric and self.signed:
            return -(2 ** (self.bit_width - 1)), 2 ** (self.bit_width - 1) - 1
        return 0, 2**self.bit_width - 1

    def describe(self) -> str:
        """Short human description, used by the summary table."""
        if self.format in ("cast", "bdr"):
            return f"{self.variant} {'cast' if self.format == 'cast' else f'block {BDR_BLOCK}'}"
        if self.format == "mx":
            return f"mx {self.variant} block {MX_BLOCK} e8m0" + (" dynamic" if self.is_dynamic else "")
        if self.format == "float":
            kind = f"fp{self.bit_width}_e{self.exponent_bit_width}m{self.mantissa_bit_width}" + (
                "_fnuz" if self.variant == "fnuz" else ""
            )
        else:
            kind = f"{'int' if self.signed else 'uint'}{self.bit_width}"
        parts = [kind, "sym" if self.symmetric else "asym", self.qscheme.name]
        if self.qscheme is not QSchemeType.per_tensor and self.ch_axis is not None:
            parts.append(f"axis={self.ch_axis}")
        if self.group_size:
            parts.append(f"g={self.group_size}")
        parts.append(self.scale_type.name)
        if self.tqt:
            parts.append("tqt")
        if self.bias_scale_from_product:
            parts.append("scale=s_in*s_w")
        else:
            stat = self.statistic + (f"{self.percentile:g}" if self.percentile else "")
            parts.append("dynamic" if self.is_dynamic else stat)
        if self.round_method is not RoundType.half_even:
            parts.append(self.round_method.name)
        if not self.symmetric and self.zero_point_type is ZeroPointType.float32:
            parts.append("zp=float")
        return " ".join(parts)


def _fail(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


# -- normalisation of the main API's QuantizationSpec -------------------------------------------


def _from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    for dtypes, normaliser in MAIN_FORMATS:
        if spec.dtype in dtypes:
            return _check_role(normaliser(spec, role, where), role, where)
    raise _fail(where, f"dtype=Dtype.{spec.dtype.name} is not supported")  # every Dtype is in a table


def _int_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    bits, signed = INT_DTYPES[spec.dtype]
    if role == "bias" and spec.observer_cls is None:  # scale = input scale x weight scale
        product = {
            "qscheme": (None, QSchemeType.per_tensor),
            "scale_type": (None, ScaleType.float, ScaleType.pof2),
            "qat_spec": (None,),
        }
        _require(where, spec, product, "a bias whose scale is input scale x weight scale (no observer_cls)")
    qscheme = spec.qscheme or QSchemeType.per_tensor
    observer = spec.observer_cls or (PerTensorMinMaxObserver if qscheme is QSchemeType.per_tensor else PerChannelMinMaxObserver)
    symmetric = True if spec.symmetric is None else spec.symmetric
    observer, tqt = _tqt_observer(spec.qat_spec, observer)
    tq = TensorQuant(
        bit_width=bits,
        signed=signed,
        symmetric=symmetric,
        qscheme=qscheme,
        ch_axis=spec.ch_axis,
        group_size=spec.group_size,
        scale_type=spec.scale_type or ScaleType.float,
        round_method=spec.round_method or RoundType.half_even,
        zero_point_type=spec.zero_point_type or ZeroPointType.int32,
        observer=observer,
        percentile=getattr(observer, "percentile", None),
        is_dynamic=bool(spec.is_dynamic),
        bias_scale_from_product=role == "bias" and spec.observer_cls is None,
        tqt=tqt,
    )
    return tq


def _require(where: str, spec: Any, allowed: dict[str, tuple[Any, ...]], what: str) -> None:
    """Every listed field of ``spec`` must hold one of its allowed values (None: unset)."""
    for field_name, values in allowed.items():
        value = getattr(spec, field_name)
        if value not in values:
            shown = ", ".join(str(v) for v in values)
            raise _fail(where, f"{field_name}={value} is not supported with {what}; allowed: {shown}")


def _float_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    exponent, mantissa, variant = FLOAT_DTYPES[spec.dtype]
    what = f"dtype=Dtype.{spec.dtype.name}"
    _require(where, spec, {"symmetric": (None, True), "round_method": (None, RoundType.half_even), "qat_spec": (None,)}, what)
    if spec.observer_cls is PerTensorMSEObserver:
        raise _fail(where, f"observer_cls=PerTensorMSEObserver searches an integer grid; not supported with {what}")
    qscheme = spec.qscheme or QSchemeType.per_tensor
    observer = spec.observer_cls or (PerTensorMinMaxObserver if qscheme is QSchemeType.per_tensor else PerChannelMinMaxObserver)
    return TensorQuant(
        bit_width=1 + exponent + mantissa,
        signed=True,
        qscheme=qscheme,
        ch_axis=spec.ch_axis,
        group_size=spec.group_size,
        scale_type=spec.scale_type or ScaleType.float,
        observer=observer,
        percentile=getattr(observer, "percentile", None),
        is_dynamic=bool(spec.is_dynamic),
        format="float",
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        variant=variant,
    )


def _cast_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    exponent, mantissa = CAST_DTYPES[spec.dtype]
    unscaled = {
        "observer_cls": (None,),
        "qscheme": (None, QSchemeType.per_tensor),
        "ch_axis": (None,),
        "group_size": (None,),
        "symmetric": (None, True),
        "round_method": (None, RoundType.half_even),
        "scale_type": (None,),
        "qat_spec": (None,),
        "is_dynamic": (None, False) if role == "weight" else (None, False, True),
    }
    _require(where, spec, unscaled, f"dtype=Dtype.{spec.dtype.name} (a cast, no scale)")
    return TensorQuant(
        bit_width=1 + exponent + mantissa,
        signed=True,
        format="cast",
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        variant=spec.dtype.name,
    )


def _block_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    is_mx = spec.dtype is Dtype.mx
    block = MX_BLOCK if is_mx else BDR_BLOCK
    what = f"dtype=Dtype.{spec.dtype.name} ({block}-element blocks, power-of-two shared scales)"
    allowed = {
        "observer_cls": (None,),
        "qscheme": (None, QSchemeType.per_group),
        "group_size": (None, block),
        "symmetric": (None, True),
        "round_method": (None, RoundType.half_even),
        "scale_type": (None, ScaleType.pof2),
        "qat_spec": (None,),
        "is_dynamic": (None, role in ACTIVATION_ROLES),  # activations: per-block scales at run time
    }
    _require(where, spec, allowed, what)
    if is_mx and spec.mx_element_dtype not in MX_ELEMENTS:
        raise _fail(where, f"mx_element_dtype={spec.mx_element_dtype} not supported; allowed: {[d.name for d in MX_ELEMENTS]}")
    element = spec.mx_element_dtype if is_mx else spec.dtype
    exponent, mantissa, _ = FLOAT_DTYPES.get(element, (None, None, None))
    if not is_mx:
        bits = BDR_BITS[element]
    else:
        bits = element.bit_width if element.is_integer else 1 + exponent + mantissa
    return TensorQuant(
        bit_width=bits,
        signed=True,
        qscheme=QSchemeType.per_group,
        ch_axis=spec.ch_axis,
        group_size=block,
        scale_type=ScaleType.pof2,
        is_dynamic=role in ACTIVATION_ROLES,
        format="mx" if is_mx else "bdr",
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        variant=element.name,
    )


#: (dtypes, normaliser) of the main API, in lookup order.
MAIN_FORMATS: tuple[tuple[Any, Callable[[Any, str, str], TensorQuant]], ...] = (
    (INT_DTYPES, _int_from_main),
    (FLOAT_DTYPES, _float_from_main),
    (CAST_DTYPES, _cast_from_main),
    ((Dtype.mx, *BDR_DTYPES), _block_from_main),
)


#: TQT threshold initialisation -> the observer computing it.
TQT_OBSERVERS: dict[TQTThresholdInitMeth, type[ObserverBase]] = {
    TQTThresholdInitMeth._3SD: TQT3SDObserver,
    TQTThresholdInitMeth._LL_J: TQTJeffreysObserver,
}


def _tqt_observer(qat_spec: Any, observer: type[ObserverBase]) -> tuple[type[ObserverBase], bool]:
    """(observer initialising the threshold, whether TQT applies); without an init method, the spec's own."""
    if qat_spec is None:
        return observer, False
    init = qat_spec.threshold_init_meth
    return (TQT_OBSERVERS[init] if init is not None else observer), True


# -- normalisation of the Brevitas extension's QuantizationSpec ---------------------------------

_EXT_OBSERVERS: dict[tuple[ext.ParamType, bool, QSchemeType], type[ObserverBase]] = {
    # (param_type, is activation, qscheme) -> statistic
    (ext.ParamType.stats, False, QSchemeType.per_tensor): PerTensorMinMaxObserver,
    (ext.ParamType.stats, False, QSchemeType.per_channel): PerChannelMinMaxObserver,
    (ext.ParamType.stats, True, QSchemeType.per_tensor): PerTensorPercentileObserver,
    (ext.ParamType.mse, False, QSchemeType.per_tensor): PerTensorMSEObserver,
    (ext.ParamType.mse, False, QSchemeType.per_channel): PerTensorMSEObserver,
    (ext.ParamType.mse, True, QSchemeType.per_tensor): PerTensorMSEObserver,
}


def _from_ext(spec: ext.QuantizationSpec, role: str, where: str) -> TensorQuant:
    if role == "bias" and spec.quant_type is not ext.QuantType.int_quant:
        raise _fail(where, "bias quantization must be integer (quant_type=QuantType.int_quant)")
    if role == "bias":
        # The extension's bias takes scale = input scale x weight scale: only bit_width and
        # scale_type (checked against the product) apply; other fields must keep their defaults.
        defaults = ext.QuantizationSpec()
        changed = [
            f for f in ("qscheme", "symmetric", "param_type", "qat_spec") if getattr(spec, f) != getattr(defaults, f)
        ]
        if changed:
            raise _fail(
                where,
                f"a bias spec sets bit_width (and scale_type) only; its scale is input scale x weight scale, "
                f"so {', '.join(f'{f}={getattr(spec, f)}' for f in changed)} cannot be honoured",
            )
        return _check_role(
            TensorQuant(bit_width=spec.bit_width, signed=True, bias_scale_from_product=True, scale_type=spec.scale_type),
            role,
            where,
        )
    key = (spec.param_type, role in ACTIVATION_ROLES, spec.qscheme)
    if key not in _EXT_OBSERVERS:
        allowed = sorted(f"{p.name}/{q.name}" for p, act, q in _EXT_OBSERVERS if act == key[1])
        raise _fail(
            where,
            f"param_type={spec.param_type.name} with qscheme={spec.qscheme.name} is not supported for "
            f"{role}; supported param_type/qscheme: {allowed}",
        )
    observer, tqt = _tqt_observer(spec.qat_spec, _EXT_OBSERVERS[key])
    if spec.quant_type is ext.QuantType.float_quant:
        return _check_role(_ext_float(spec, observer, where), role, where)
    tq = TensorQuant(
        bit_width=spec.bit_width,
        signed=spec.symmetric,  # the extension quantizes asymmetric tensors on an unsigned grid
        symmetric=spec.symmetric,
        qscheme=spec.qscheme,
        scale_type=spec.scale_type,
        observer=observer,
        percentile=EXT_ACT_PERCENTILE if observer is PerTensorPercentileObserver else None,
        tqt=tqt,
    )
    return _check_role(tq, role, where)


def _ext_float(spec: ext.QuantizationSpec, observer: type[ObserverBase], where: str) -> TensorQuant:
    """``QuantType.float_quant``: an OCP-style minifloat of any exponent / mantissa width."""
    e, m = spec.exponent_bit_width, spec.mantissa_bit_width
    if e is None or m is None:
        raise _fail(where, "quant_type=QuantType.float_quant needs exponent_bit_width and mantissa_bit_width")
    if e < 1 or m < 0 or 1 + e + m != spec.bit_width:
        raise _fail(
            where,
            f"bit_width={spec.bit_width} must equal 1 + exponent_bit_width + mantissa_bit_width "
            f"(1 + {e} + {m}), with exponent_bit_width >= 1 and mantissa_bit_width >= 0",
        )
    if not spec.symmetric:
        raise _fail(where, "quant_type=QuantType.float_quant is symmetric: symmetric=False is not supported")
    if observer is PerTensorMSEObserver:
        raise _fail(where, "param_type=ParamType.mse is not supported with quant_type=QuantType.float_quant")
    if spec.qat_spec is not None:
        raise _fail(where, "qat_spec=TQTSpec needs quant_type=QuantType.int_quant")
    return TensorQuant(
        bit_width=spec.bit_width,
        signed=True,
        qscheme=spec.qscheme,
        scale_type=spec.scale_type,
        observer=observer,
        percentile=EXT_ACT_PERCENTILE if observer is PerTensorPercentileObserver else None,
        format="float",
        exponent_bit_width=e,
        mantissa_bit_width=m,
        variant="ocp",
    )


# -- rules every normalised spec obeys -----------------------------------------------------------

SUPPORTED_SCALE_TYPES = (ScaleType.float, ScaleType.pof2, ScaleType.float32, ScaleType.float16, ScaleType.bfloat16)


def _check_role(tq: TensorQuant, role: str, where: str) -> TensorQuant:
    max_bits = MAX_BIAS_BITS if role == "bias" else MAX_BITS
    if not MIN_BITS <= tq.bit_width <= max_bits:
        raise _fail(where, f"bit width {tq.bit_width} is not supported for {role}; allowed {MIN_BITS}..{max_bits}")
    if tq.scale_type not in SUPPORTED_SCALE_TYPES:
        raise _fail(where, f"scale_type={tq.scale_type} not supported; allowed {[s.name for s in SUPPORTED_SCALE_TYPES]}")
    if role == "weight" and tq.is_dynamic:
        raise _fail(where, "is_dynamic=True applies to activations; weights are always quantized from their own values")
    if role in ACTIVATION_ROLES and tq.qscheme is not QSchemeType.per_tensor and tq.format not in ("mx", "bdr"):
        raise _fail(
            where,
            f"qscheme={tq.qscheme.name} is not supported for {role} (static or dynamic); "
            "activations are quantized per_tensor",
        )
    if role == "bias":
        if tq.format != "int":
            raise _fail(where, f"bias quantization must be integer; got a {tq.format} format")
        if tq.tqt:
            raise _fail(where, "qat_spec=TQTSpec does not apply to bias (its scale follows input and weight scales)")
        if not tq.symmetric:
            raise _fail(where, "bias quantization must be symmetric (symmetric=True)")
        if not tq.signed:
            raise _fail(where, "bias quantization must use a signed dtype (int8, int4, ...), got an unsigned one")
        if tq.qscheme is not QSchemeType.per_tensor and not tq.bias_scale_from_product:
            raise _fail(where, "a bias with its own observer must be per_tensor")
        if tq.is_dynamic:
            raise _fail(where, "is_dynamic=True does not apply to bias")
    return tq


NORMALISERS: dict[type, Callable[[Any, str, str], TensorQuant]] = {
    main.QuantizationSpec: _from_main,
    ext.QuantizationSpec: _from_ext,
}


def normalise(spec: Any, role: str, where: str) -> TensorQuant:
    """Normalise a spec of either flavour; ``where`` names it in error messages."""
    try:
        normaliser = NORMALISERS[type(spec)]
    except KeyError:
        raise TypeError(f"{where}: expected a QuantizationSpec, got {type(spec).__name__}") from None
    return normaliser(spec, role, where)


# -- the plan ---------------------------------------------------------------------------------


@dataclass
class LayerPlan:
    """Effective quantization of one module: spec per role and where each came from."""

    name: str
    module_type: type[nn.Module]
    specs: dict[str, TensorQuant | None]
    sources: dict[str, str] = field(default_factory=dict)
    target_device: Any = None

    @property
    def quantized(self) -> bool:
        return any(self.specs.values())


@dataclass
class ConfigView:
    """The parts of either Config flavour that resolution needs."""

    global_config: Any
    type_configs: dict[Any, Any]
    name_configs: dict[str, Any]
    exclude: list[str]

    @classmethod
    def of(cls, config: Any) -> ConfigView:
        if isinstance(config, main.Config):
            return cls(config.global_quant_config, config.layer_type_quant_config, config.layer_quant_config, config.exclude)
        if isinstance(config, ext.Config):
            return cls(config.global_quant_config, {}, {}, [])
        raise TypeError(
            f"expected quark.torch.quantization.config.config.Config or "
            f"quark.torch.extensions.brevitas.config.Config, got {type(config).__name__}"
        )


def _type_name(key: Any) -> str:
    return key if isinstance(key, str) else key.__name__


def resolve(model: nn.Module, config: Any, supported: tuple[type[nn.Module], ...]) -> list[LayerPlan]:
    """Resolve ``config`` over ``model``: one :class:`LayerPlan` per module of a supported type.

    Raises ``ValueError`` (before anything is changed) when a name pattern, exclude pattern or
    layer type matches nothing, or a spec cannot be honoured.
    """
    view = ConfigView.of(config)
    names = [n for n, _ in model.named_modules() if n]
    types_present = {type(m).__name__: type(m) for m in model.modules()}
    supported_names = {t.__name__ for t in supported}

    for key in view.type_configs:
        tname = _type_name(key)
        if tname not in supported_names:
            raise ValueError(
                f"layer_type_quant_config[{tname!r}]: {tname} is not a quantizable layer type; "
                f"supported: {sorted(supported_names)}"
            )
        if tname not in types_present or (not isinstance(key, str) and types_present[tname] is not key):
            present = sorted(supported_names & set(types_present))
            raise ValueError(
                f"layer_type_quant_config[{tname!r}] matches no module of the model; quantizable types present: {present}"
            )
    quantizable = [n for n, m in model.named_modules() if n and type(m) in supported]
    for pattern in view.name_configs:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in quantizable):
            raise ValueError(
                f"layer_quant_config pattern {pattern!r} matches no quantizable module; "
                f"quantizable modules: {_preview(quantizable)}"
            )
    for pattern in view.exclude:
        if not any(fnmatch.fnmatchcase(n, pattern) for n in names):
            raise ValueError(f"exclude pattern {pattern!r} matches no module; modules: {_preview(names)}")

    plans: list[LayerPlan] = []
    skip_prefixes: list[str] = []
    for name, module in model.named_modules():
        if not name or any(name.startswith(p) for p in skip_prefixes):
            continue
        if type(module) not in supported:
            continue
        skip_prefixes.append(name + ".")  # never quantize inside a quantized (or excluded) layer
        if _excluded(name, view.exclude):
            continue
        plans.append(_plan_layer(name, module, view))
    return plans


def _excluded(name: str, patterns: list[str]) -> bool:
    parts = name.split(".")
    ancestors = [".".join(parts[: i + 1]) for i in range(len(parts))]
    return any(fnmatch.fnmatchcase(a, p) for a in ancestors for p in patterns)


def _plan_layer(name: str, module: nn.Module, view: ConfigView) -> LayerPlan:
    levels: list[tuple[str, Any]] = []
    exact = view.name_configs.get(name)
    if exact is not None:
        levels.append((f"layer_quant_config[{name!r}]", exact))
    else:
        for pattern, cfg in view.name_configs.items():
            if fnmatch.fnmatchcase(name, pattern):
                levels.append((f"layer_quant_config[{pattern!r}]", cfg))
                break
    for key, cfg in view.type_configs.items():
        if _type_name(key) == type(module).__name__:
            levels.append((f"layer_type_quant_config[{_type_name(key)!r}]", cfg))
    levels.append(("global_quant_config", view.global_config))

    specs: dict[str, TensorQuant | None] = {}
    sources: dict[str, str] = {}
    for role in ROLES:
        specs[role] = None
        for label, cfg in levels:
            spec = getattr(cfg, role)
            if spec is not None:
                specs[role] = normalise(spec, role, f"{label}.{role} (module {name!r})")
                sources[role] = label
                break
    target = next((cfg.target_device for _, cfg in levels if getattr(cfg, "target_device", None)), None)
    return LayerPlan(name, type(module), specs, sources, target)


def _preview(names: list[str], limit: int = 30) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f", ... ({len(names) - limit} more)" if len(names) > limit else "")


def format_plan(plans: list[LayerPlan]) -> str:
    """Plain-text table: one row per layer, one column per role, '-' where a role stays float."""
    headers = ("layer", "type", *ROLES)
    rows = [
        (p.name, p.module_type.__name__, *((p.specs[r].describe() if p.specs[r] else "-") for r in ROLES))
        for p in plans
    ]
    widths = [max(len(str(c)) for c in col) for col in zip(headers, *rows)]
    line = lambda cells: "  ".join(str(c).ljust(w) for c, w in zip(cells, widths)).rstrip()  # noqa: E731
    return "\n".join([line(headers), line("-" * w for w in widths), *map(line, rows)])
