"""The normalised quantization of one tensor (:class:`TensorQuant`) and how specs become one.

Both config flavours normalise into :class:`TensorQuant`, so every later stage (translation onto
Brevitas, calibration, export checks, the summary table) is written once. The main API's
``QuantizationSpec`` is normalised here; another flavour registers its own normaliser with
:func:`register_normaliser` (the Brevitas extension does, in ``extensions/brevitas/normalise.py``).
Pure data; no Brevitas import.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from quark.torch.quantization.config import config as main
from quark.torch.quantization.config.config import ACTIVATION_ROLES, MAX_BIAS_BITS, MAX_BITS, MIN_BITS
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
    PerBlockBFPObserver,
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerGroupMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PlaceholderObserver,
    TQT3SDObserver,
    TQTJeffreysObserver,
)

#: integer dtypes of the main API: dtype -> (bit width, signed)
INT_DTYPES: dict[Dtype, tuple[int, bool]] = {d: (d.bit_width, d.signed) for d in Dtype if d.is_integer}
#: scaled minifloats: dtype -> (exponent bits, mantissa bits, FNUZ?). OCP: e4m3 max 448 (NaN only),
#: e5m2 max 57344 (inf, NaN); fp6/fp4 are OCP MX element formats (no inf/NaN). FNUZ: explicit dtypes.
FLOAT_DTYPES: dict[Dtype, tuple[int, int, bool]] = {
    Dtype.fp8_e4m3: (4, 3, False),
    Dtype.fp8_e5m2: (5, 2, False),
    Dtype.fp8_e4m3fnuz: (4, 3, True),
    Dtype.fp8_e5m2fnuz: (5, 2, True),
    Dtype.fp6_e3m2: (3, 2, False),
    Dtype.fp6_e2m3: (2, 3, False),
    Dtype.fp4: (2, 1, False),
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


class Format(Enum):
    """The kind of number a quantizer produces."""

    integer = "int"  # integers times a scale (and a zero point)
    minifloat = "float"  # scaled minifloats (OCP or FNUZ)
    cast = "cast"  # bfloat16 / float16, no scale
    mx = "mx"  # OCP MX: 32-element blocks sharing an E8M0 scale
    bdr = "bdr"  # MX6 / MX9: 16-element blocks with shared micro-exponents

    @property
    def scaled(self) -> bool:
        """Whether the quantizer has a scale of its own per tensor / channel / group (from calibration)."""
        return self in (Format.integer, Format.minifloat)

    @property
    def block(self) -> bool:
        """Whether the scale is shared by fixed blocks of elements, computed at run time."""
        return self in (Format.mx, Format.bdr)


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
    format: Format = Format.integer
    exponent_bit_width: int | None = None  # float, cast and minifloat-element mx formats
    mantissa_bit_width: int | None = None
    fnuz: bool = False  # float: FNUZ (no negative zero, no inf) instead of OCP
    element: Dtype | None = None  # cast: the type cast to; mx: the element type; bdr: mx6 or mx9

    @property
    def needs_calibration(self) -> bool:
        """Static activations of scaled formats take their range from calibration."""
        return not self.is_dynamic and self.format.scaled
    @property
    def statistic(self) -> str:
        return self.observer.statistic

    @property
    def grid(self) -> tuple[int, int]:
        """Integer grid (qmin, qmax). Asymmetric tensors use the unsigned grid with a zero point."""
        if self.symmetric and self.signed:
            return -(2 ** (self.bit_width - 1)), 2 ** (self.bit_width - 1) - 1
        return 0, 2**self.bit_width - 1

    @property
    def dtype_name(self) -> str:
        """The element type: int8, uint4, fp8_e4m3, fp8_e4m3_fnuz, bfloat16, mx fp4, mx6, ..."""
        return DTYPE_NAMES[self.format](self)

    def describe(self) -> str:
        """Short human description, used by the summary table."""
        if self.format is Format.cast:
            return f"{self.dtype_name} cast"
        if self.format is Format.bdr:
            return f"{self.dtype_name} block {BDR_BLOCK}"
        if self.format is Format.mx:
            return f"{self.dtype_name} block {MX_BLOCK} e8m0" + (" dynamic" if self.is_dynamic else "")
        parts = [self.dtype_name, "sym" if self.symmetric else "asym", self.qscheme.name]
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


#: format -> the name of a spec's element type
DTYPE_NAMES: dict[Format, Callable[[TensorQuant], str]] = {
    Format.integer: lambda tq: f"{'int' if tq.signed else 'uint'}{tq.bit_width}",
    Format.minifloat: lambda tq: f"fp{tq.bit_width}_e{tq.exponent_bit_width}m{tq.mantissa_bit_width}"
    + ("_fnuz" if tq.fnuz else ""),
    Format.cast: lambda tq: tq.element.name,
    Format.mx: lambda tq: f"mx {tq.element.name}",
    Format.bdr: lambda tq: tq.element.name,
}


def fail(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


# -- normalisation of the main API's QuantizationSpec -------------------------------------------


def _from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    for dtypes, normaliser in MAIN_FORMATS:
        if spec.dtype in dtypes:
            return check_role(normaliser(spec, role, where), role, where)
    raise fail(where, f"dtype=Dtype.{spec.dtype.name} is not supported")  # every Dtype is in a table


#: observers naming formats without a calibrated scale: refused by the scaled formats
_UNSCALED_OBSERVERS = (PlaceholderObserver, PerBlockMXObserver, PerBlockBFPObserver)


def _refuse_observers(spec: main.QuantizationSpec, where: str, refused: tuple[type, ...], what: str) -> None:
    if spec.observer_cls is not None and issubclass(spec.observer_cls, refused):
        raise fail(
            where,
            f"observer_cls={spec.observer_cls.__name__} is not supported with {what}; "
            f"refused: {', '.join(c.__name__ for c in refused)}",
        )


def _int_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    bits, signed = INT_DTYPES[spec.dtype]
    _refuse_observers(spec, where, _UNSCALED_OBSERVERS, f"dtype=Dtype.{spec.dtype.name} (a scaled integer)")
    if role == "bias" and spec.observer_cls is None:  # scale = input scale x weight scale
        product = {
            "qscheme": (None, QSchemeType.per_tensor),
            "scale_type": (None, ScaleType.float, ScaleType.pof2),
            "qat_spec": (None,),
        }
        require(where, spec, product, "a bias whose scale is input scale x weight scale (no observer_cls)")
    qscheme = spec.qscheme or QSchemeType.per_tensor
    observer = spec.observer_cls or (PerTensorMinMaxObserver if qscheme is QSchemeType.per_tensor else PerChannelMinMaxObserver)
    symmetric = True if spec.symmetric is None else spec.symmetric
    observer, tqt = tqt_observer(spec.qat_spec, observer)
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


def require(where: str, spec: Any, allowed: dict[str, tuple[Any, ...]], what: str) -> None:
    """Every listed field of ``spec`` must hold one of its allowed values (None: unset)."""
    for field_name, values in allowed.items():
        value = getattr(spec, field_name)
        if value not in values:
            shown = ", ".join(getattr(v, "__name__", str(v)) for v in values)
            value = getattr(value, "__name__", value)
            raise fail(where, f"{field_name}={value} is not supported with {what}; allowed: {shown}")


def _float_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    exponent, mantissa, fnuz = FLOAT_DTYPES[spec.dtype]
    what = f"dtype=Dtype.{spec.dtype.name}"
    require(where, spec, {"symmetric": (None, True), "round_method": (None, RoundType.half_even), "qat_spec": (None,)}, what)
    if spec.observer_cls is not None and issubclass(spec.observer_cls, PerTensorMSEObserver):
        raise fail(where, f"observer_cls={spec.observer_cls.__name__} searches an integer grid; not supported with {what}")
    # PerBlockMXObserver is Quark's name for per-group abs-max scales of minifloats too
    _refuse_observers(spec, where, (PlaceholderObserver, PerBlockBFPObserver), what)
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
        format=Format.minifloat,
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        fnuz=fnuz,
        element=spec.dtype,
    )


def _cast_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    exponent, mantissa = CAST_DTYPES[spec.dtype]
    unscaled = {
        "observer_cls": (None, PlaceholderObserver),
        "qscheme": (None, QSchemeType.per_tensor),
        "ch_axis": (None,),
        "group_size": (None,),
        "symmetric": (None, True),
        "round_method": (None, RoundType.half_even),
        "scale_type": (None,),
        "qat_spec": (None,),
        "is_dynamic": (None, False) if role == "weight" else (None, False, True),
    }
    require(where, spec, unscaled, f"dtype=Dtype.{spec.dtype.name} (a cast, no scale)")
    return TensorQuant(
        bit_width=1 + exponent + mantissa,
        signed=True,
        format=Format.cast,
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        element=spec.dtype,
    )


def _block_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    is_mx = spec.dtype is Dtype.mx
    block = MX_BLOCK if is_mx else BDR_BLOCK
    what = f"dtype=Dtype.{spec.dtype.name} ({block}-element blocks, power-of-two shared scales)"
    allowed = {
        "observer_cls": (None, PerBlockMXObserver if is_mx else PerBlockBFPObserver, PerGroupMinMaxObserver, PerChannelMinMaxObserver),
        "qscheme": (None, QSchemeType.per_group),
        "group_size": (None, block),
        "symmetric": (None, True),
        "round_method": (None, RoundType.half_even),
        "scale_type": (None, ScaleType.pof2),
        "qat_spec": (None,),
        # activations: per-block scales at run time; weights: from their own values, whatever is_dynamic says
        "is_dynamic": (None, True) if role in ACTIVATION_ROLES else (None, True, False),
    }
    require(where, spec, allowed, what)
    if is_mx and spec.mx_element_dtype not in MX_ELEMENTS:
        raise fail(where, f"mx_element_dtype={spec.mx_element_dtype} not supported; allowed: {[d.name for d in MX_ELEMENTS]}")
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
        format=Format.mx if is_mx else Format.bdr,
        exponent_bit_width=exponent,
        mantissa_bit_width=mantissa,
        element=element,
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


def tqt_observer(qat_spec: Any, observer: type[ObserverBase]) -> tuple[type[ObserverBase], bool]:
    """(observer initialising the threshold, whether TQT applies); without an init method, the spec's own."""
    if qat_spec is None:
        return observer, False
    init = qat_spec.threshold_init_meth
    return (TQT_OBSERVERS[init] if init is not None else observer), True


# -- rules every normalised spec obeys -----------------------------------------------------------

SUPPORTED_SCALE_TYPES = (ScaleType.float, ScaleType.pof2, ScaleType.float32, ScaleType.float16, ScaleType.bfloat16)


def check_role(tq: TensorQuant, role: str, where: str) -> TensorQuant:
    max_bits = MAX_BIAS_BITS if role == "bias" else MAX_BITS
    if not MIN_BITS <= tq.bit_width <= max_bits:
        raise fail(where, f"bit width {tq.bit_width} is not supported for {role}; allowed {MIN_BITS}..{max_bits}")
    if tq.scale_type not in SUPPORTED_SCALE_TYPES:
        raise fail(where, f"scale_type={tq.scale_type} not supported; allowed {[s.name for s in SUPPORTED_SCALE_TYPES]}")
    if role == "weight" and tq.is_dynamic:
        raise fail(where, "is_dynamic=True applies to activations; weights are always quantized from their own values")
    if role in ACTIVATION_ROLES and tq.qscheme is not QSchemeType.per_tensor and not tq.format.block:
        raise fail(
            where,
            f"qscheme={tq.qscheme.name} is not supported for {role} (static or dynamic); "
            "activations are quantized per_tensor",
        )
    if role == "bias":
        if tq.format is not Format.integer:
            raise fail(where, f"bias quantization must be integer; got a {tq.format.value} format")
        if tq.tqt:
            raise fail(where, "qat_spec=TQTSpec does not apply to bias (its scale follows input and weight scales)")
        if not tq.symmetric:
            raise fail(where, "bias quantization must be symmetric (symmetric=True)")
        if not tq.signed:
            raise fail(where, "bias quantization must use a signed dtype (int8, int4, ...), got an unsigned one")
        if tq.qscheme is not QSchemeType.per_tensor and not tq.bias_scale_from_product:
            raise fail(where, "a bias with its own observer must be per_tensor")
        if tq.is_dynamic:
            raise fail(where, "is_dynamic=True does not apply to bias")
    return tq


Normaliser = Callable[[Any, str, str], TensorQuant]  # (spec, role, where) -> TensorQuant

#: spec class -> its normaliser; other flavours add theirs with :func:`register_normaliser`.
NORMALISERS: dict[type, Normaliser] = {main.QuantizationSpec: _from_main}


def register_normaliser(spec_cls: type, normaliser: Normaliser) -> None:
    """Let :func:`normalise` take ``spec_cls`` (a config flavour registers its spec class)."""
    NORMALISERS[spec_cls] = normaliser


def normalise(spec: Any, role: str, where: str) -> TensorQuant:
    """Normalise a spec of any registered flavour; ``where`` names it in error messages."""
    try:
        normaliser = NORMALISERS[type(spec)]
    except KeyError:
        allowed = ", ".join(f"{c.__module__}.{c.__name__}" for c in NORMALISERS)
        raise TypeError(f"{where}: expected a QuantizationSpec ({allowed}), got {type(spec).__name__}") from None
    return normaliser(spec, role, where)

