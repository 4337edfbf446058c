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
from quark.torch.quantization.config.spec import (
    ACTIVATION_ROLES,
    BIPOLAR_BITS,
    MAX_BIAS_BITS,
    MAX_BITS,
    MIN_BITS,
    A2QSpec,
    TQTSpec,
)
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.flavours import load_flavours
from quark.torch.quantization.observer import (
    LSQObserver,
    MeanAbsObserver,
    ObserverBase,
    PerBlockBFPObserver,
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerGroupMinMaxObserver,
    PerTensorHistogramObserverPro,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PlaceholderObserver,
    TQT3SDObserver,
    TQTJeffreysObserver,
    TQTObserver,
    UnitScaleObserver,
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
#: block formats with a shared exponent per block (block data representations, "bdr"): MX6 / MX9
#: (shared micro-exponents, Rouhani et al. 2023: 16-element blocks) and BFP16 (AMD's block floating
#: point: 8-element blocks, 8-bit signed elements)
BDR_DTYPES: tuple[Dtype, ...] = (Dtype.mx6, Dtype.mx9, Dtype.bfp16)
BDR_BLOCK = 16
#: dtype -> (block, bits per element: sign and magnitude, shared exponents included)
BDR_FORMATS: dict[Dtype, tuple[int, int]] = {Dtype.mx6: (16, 6), Dtype.mx9: (16, 9), Dtype.bfp16: (8, 9)}
BDR_BITS: dict[Dtype, int] = {d: bits for d, (_, bits) in BDR_FORMATS.items()}
#: OCP MX element -> mantissa bits Quark rounds a block's maximum to (``scale_calculation_mode="even"``)
MX_EVEN_MANTISSA_BITS: dict[Dtype, int] = {
    Dtype.int8: 8,
    Dtype.fp8_e4m3: 3,
    Dtype.fp8_e5m2: 2,
    Dtype.fp6_e3m2: 2,
    Dtype.fp6_e2m3: 3,
    Dtype.fp4: 1,
}
#: how an OCP MX block's shared exponent comes from its maximum (None: the OCP spec's floor)
MX_SCALE_MODES = (None, "even", "floor", "ceil")
#: dtypes refused, with the reason
REFUSED_DTYPES: dict[Dtype, str] = {
    Dtype.fp8_e5m3: (
        "an unsigned 8-bit float (no sign bit), which AMD Quark 0.13 names for the per-group scales of AmdFP4Spec; "
        "it quantizes no signed tensor here; use Dtype.fp8_e4m3 or Dtype.fp8_e5m2"
    ),
}


class Format(Enum):
    """The kind of number a quantizer produces."""

    integer = "int"  # integers times a scale (and a zero point)
    minifloat = "float"  # scaled minifloats (OCP or FNUZ)
    cast = "cast"  # bfloat16 / float16, no scale
    mx = "mx"  # OCP MX: 32-element blocks sharing an E8M0 scale
    bdr = "bdr"  # MX6 / MX9: 16-element blocks with shared micro-exponents
    bipolar = "bipolar"  # sign(x) times a scale: {-1, +1} x s (binary networks)

    @property
    def scaled(self) -> bool:
        """Whether the quantizer has a scale of its own per tensor / channel / group (from calibration)."""
        return self in (Format.integer, Format.minifloat, Format.bipolar)

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
    element: Dtype | None = None  # cast: the type cast to; mx: the element type; bdr: mx6, mx9 or bfp16
    scale_rounding: str = "floor"  # mx: how the shared exponent comes from the block maximum (floor | even | ceil)
    lsq: bool = False  # learned step size (LSQ): the scale is a trained parameter, its gradient scaled
    narrow: bool = False  # integer: the grid without its most negative level (ternary: {-1, 0, 1})
    # weights (TQTSpec.fold_batch_norm): a batch norm after the layer is folded into it during QAT,
    # its statistics frozen after freeze_batch_norm_steps training steps (None: never), then absorbed
    # into the layer's weight and bias if absorb_frozen_batch_norm
    fold_batch_norm: bool = False
    freeze_batch_norm_steps: int | None = None
    absorb_frozen_batch_norm: bool = True
    # weights (A2QSpec): the signed accumulator width promised (None: unconstrained) and A2Q+'s
    # zero-centring; the grid is narrow (no -2^(b-1)) and rounding toward zero, as Brevitas' A2Q
    accumulator_bits: int | None = None
    zero_centered: bool = False

    @property
    def a2q(self) -> str | None:
        """``"a2q+"`` / ``"a2q"`` for accumulator-aware weights, else None."""
        if self.accumulator_bits is None:
            return None
        return "a2q+" if self.zero_centered else "a2q"

    @property
    def needs_calibration(self) -> bool:
        """Static activations of scaled formats take their range from calibration (a bipolar one of
        scale 1 has none to take)."""
        return not self.is_dynamic and self.format.scaled and self.statistic != "unit"
    @property
    def statistic(self) -> str:
        return self.observer.statistic

    @property
    def threshold_levels(self) -> float:
        """The integer threshold the quantizers divide a range by: (qmax - qmin) / 2 on a signed
        symmetric grid ((2^b - 1) / 2, or 2^(b-1) - 1 when narrow), 2^b - 1 otherwise (scale =
        threshold / levels). Bipolar: 1 (the scale is the threshold); a ternary grid on the mean
        |x| statistic: 1 / 1.4 (:data:`TERNARY_MEAN_ABS_THRESHOLD`)."""
        if self.format is Format.bipolar:
            return 1.0
        if self.narrow and self.statistic == "mean_abs":
            return 0.5 / TERNARY_MEAN_ABS_THRESHOLD
        qmin, qmax = self.grid
        return (qmax - qmin) / 2 if self.symmetric and self.signed else float(qmax - qmin)

    @property
    def grid(self) -> tuple[int, int]:
        """Integer grid (qmin, qmax). Asymmetric tensors use the unsigned grid with a zero point;
        a bipolar tensor's levels are -1 and +1, its grid (-1, 1)."""
        if self.format is Format.bipolar:
            return -1, 1
        if self.symmetric and self.signed:
            return -(2 ** (self.bit_width - 1)) + self.narrow, 2 ** (self.bit_width - 1) - 1
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
            return f"{self.dtype_name} block {self.group_size}"
        if self.format is Format.mx:
            rounding = "" if self.scale_rounding == "floor" else f" {self.scale_rounding}"
            return f"{self.dtype_name} block {MX_BLOCK} e8m0{rounding}" + (" dynamic" if self.is_dynamic else "")
        parts = [self.dtype_name, "sym" if self.symmetric else "asym", self.qscheme.name]
        if self.qscheme is not QSchemeType.per_tensor and self.ch_axis is not None:
            parts.append(f"axis={self.ch_axis}")
        if self.group_size:
            parts.append(f"g={self.group_size}")
        parts.append(self.scale_type.name)
        if self.narrow and self.bit_width > 2:
            parts.append("narrow")
        if self.tqt:
            parts.append("tqt")
        if self.a2q:
            parts.append(f"{self.a2q} acc{self.accumulator_bits}")
        if self.lsq:
            parts.append("lsq")
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


#: a ternary tensor's rounding threshold, in units of its mean |x|: Ternary Weight Networks' (Li & Liu
#: 2016) 0.7 E|w|; on the grid {-1, 0, 1} x s, rounding to nearest puts it at s / 2, so s = 1.4 E|x|
TERNARY_MEAN_ABS_THRESHOLD = 0.7

#: format -> the name of a spec's element type
DTYPE_NAMES: dict[Format, Callable[[TensorQuant], str]] = {
    Format.integer: lambda tq: "ternary" if tq.narrow and tq.bit_width == 2 else f"{'int' if tq.signed else 'uint'}{tq.bit_width}",
    Format.minifloat: lambda tq: f"fp{tq.bit_width}_e{tq.exponent_bit_width}m{tq.mantissa_bit_width}"
    + ("_fnuz" if tq.fnuz else ""),
    Format.cast: lambda tq: tq.element.name,
    Format.mx: lambda tq: f"mx {tq.element.name}",
    Format.bdr: lambda tq: tq.element.name,
    Format.bipolar: lambda tq: "bipolar",
}


def fail(where: str, message: str) -> ValueError:
    return ValueError(f"{where}: {message}")


# -- normalisation of the main API's QuantizationSpec -------------------------------------------


def _from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    _check_quark013_fields(spec, role, where)
    for matches, normaliser in MAIN_FORMATS:
        if matches(spec):
            return check_role(normaliser(spec, role, where), role, where)
    raise fail(where, f"dtype=Dtype.{spec.dtype.name} is not supported")  # every Dtype is in a table


#: AMD Quark 0.13's spec fields no format here can take: (refused?, message) on the spec
_QUARK013_REFUSALS: tuple[tuple[Callable[[Any], bool], Callable[[Any], str]], ...] = (
    (
        lambda s: s.is_scale_quant,
        lambda s: (
            "is_scale_quant=True is not supported: a spec quantizing another quantizer's scales (Quark's "
            "ScaleQuantSpec, two-stage scales) has no quantizer here; allowed: False"
        ),
    ),
    (
        lambda s: s.qscheme is QSchemeType.per_block or s.block_size is not None,
        lambda s: (
            f"qscheme={s.qscheme} with block_size={s.block_size} is not supported: 2-D weight blocks have no "
            "quantizer here; allowed: qscheme per_tensor, per_channel or per_group, block_size None"
        ),
    ),
    (
        lambda s: s.scale_type is ScaleType.float8_e5m3,
        lambda s: (
            "scale_type=ScaleType.float8_e5m3 is not supported: AMD FP4's unsigned e5m3 group scales (AmdFP4Spec) "
            "have no quantizer here; use OCP_MXFP4Spec (e8m0 scales) or FP4PerGroupSpec (float scales)"
        ),
    ),
    (
        lambda s: s.observer_cls is not None and s.observer_cls.refused is not None,
        lambda s: f"observer_cls={s.observer_cls.__name__} is not supported: {s.observer_cls.refused}",
    ),
)


def _check_quark013_fields(spec: main.QuantizationSpec, role: str, where: str) -> None:
    """Refuse what no format here can honour of Quark 0.13's fields and observers, naming the field."""
    for refused, message in _QUARK013_REFUSALS:
        if refused(spec):
            raise fail(where, message(spec))
    observer = spec.observer_cls
    if role == "weight" and observer is not None and observer.not_for_weights:
        raise fail(where, f"observer_cls={observer.__name__} is not supported for weights: {observer.not_for_weights}")


#: a format that takes no block scales: Quark 0.13's scale fields must stay unset
_NO_BLOCK_SCALE_FIELDS = {"scale_format": (None,), "scale_calculation_mode": (None,)}


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
    what = f"dtype=Dtype.{spec.dtype.name} (a scaled integer)"
    _refuse_observers(spec, where, _UNSCALED_OBSERVERS, what)
    require(where, spec, _NO_BLOCK_SCALE_FIELDS, what)
    if spec.scale_type is ScaleType.float8_e8m0fnu:
        raise fail(
            where,
            f"scale_type=ScaleType.float8_e8m0fnu is not supported with {what}: it is the shared scale of OCP MX "
            "blocks; for power-of-two integer scales use ScaleType.pof2",
        )
    if isinstance(spec.qat_spec, A2QSpec):
        return _a2q_from_main(spec, role, where, bits, signed)
    observer_cls = spec.observer_cls
    lsq = observer_cls is LSQObserver
    if lsq:
        lsq_fields = {
            "symmetric": (None, True),
            "scale_type": (None, ScaleType.float),
            "qat_spec": (None,),
            "qscheme": (None, QSchemeType.per_tensor, QSchemeType.per_channel),
            "is_dynamic": (None, False),
        }
        require(where, spec, lsq_fields, "observer_cls=LSQObserver (a trained scale, zero point 0 as in Quark)")
    scale_type = spec.scale_type or ScaleType.float
    if observer_cls is not None and observer_cls.power_of_two:
        pof2_types = (None, ScaleType.float, ScaleType.pof2)
        require(where, spec, {"scale_type": pof2_types}, f"observer_cls={observer_cls.__name__} (power-of-two scales, as in Quark)")
        scale_type = ScaleType.pof2
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
    observer, tqt = tqt_observer(spec.qat_spec, observer, where)
    tq = TensorQuant(
        bit_width=bits,
        signed=signed,
        symmetric=symmetric,
        qscheme=qscheme,
        ch_axis=spec.ch_axis,
        group_size=spec.group_size,
        scale_type=scale_type,
        round_method=spec.round_method or RoundType.half_even,
        zero_point_type=spec.zero_point_type or ZeroPointType.int32,
        observer=observer,
        percentile=getattr(observer, "percentile", None),
        is_dynamic=bool(spec.is_dynamic),
        bias_scale_from_product=role == "bias" and spec.observer_cls is None,
        tqt=tqt,
        lsq=lsq,
        **batch_norm_folding(spec.qat_spec, role),
    )
    return tq


#: the main spec's fields an ``A2QSpec`` weight may set: field -> allowed values. A2Q learns one scale
#: per output channel (initialised from max |w| / (2^(b-1) - 1), the abs-max statistic; float, or
#: rounded to a power of two, as FINN's integer flow keeps its graphs exact) on a symmetric narrow
#: grid and rounds toward zero, which keeps its bound (no rounding step raises |q|)
A2Q_MAIN_FIELDS: dict[str, tuple[Any, ...]] = {
    "qscheme": (QSchemeType.per_channel,),
    "ch_axis": (0,),
    "symmetric": (None, True),
    "scale_type": (None, ScaleType.float, ScaleType.pof2),
    "round_method": (None, RoundType.toward_zero),
    "observer_cls": (None, PerChannelMinMaxObserver),
    "is_dynamic": (None, False),
}


def a2q_weight(
    qat_spec: A2QSpec, role: str, signed: bool, dtype: str, where: str, scale_type: ScaleType | None = None
) -> dict[str, Any]:
    """The ``TensorQuant`` fields of an ``A2QSpec`` (both flavours): a signed integer weight, per
    output channel, learned scales (float, or power-of-two), narrow grid, rounded toward zero."""
    if role != "weight":
        raise fail(
            where,
            f"qat_spec=A2QSpec is not supported for {role}: it bounds the L1 norm of each output channel's integer "
            "weights (the accumulator is the dot product of weights and inputs); allowed: a weight spec",
        )
    if not signed:
        raise fail(
            where,
            f"{dtype} is not supported with qat_spec=A2QSpec: its weights are signed (a narrow symmetric grid "
            "about 0); allowed: a signed integer dtype (int2 .. int16), or bit_width with symmetric=True",
        )
    return {
        "signed": True,
        "symmetric": True,
        "qscheme": QSchemeType.per_channel,
        "ch_axis": 0,
        "scale_type": scale_type or ScaleType.float,
        "round_method": RoundType.toward_zero,
        "observer": PerChannelMinMaxObserver,
        "narrow": True,
        "accumulator_bits": qat_spec.accumulator_bit_width,
        "zero_centered": qat_spec.zero_centered,
    }


def _a2q_from_main(spec: main.QuantizationSpec, role: str, where: str, bits: int, signed: bool) -> TensorQuant:
    what = f"qat_spec=A2QSpec ({spec.qat_spec.method}: one learned scale per output channel, rounding toward zero)"
    fields = a2q_weight(spec.qat_spec, role, signed, f"dtype=Dtype.{spec.dtype.name}", where, spec.scale_type)
    require(where, spec, A2Q_MAIN_FIELDS, what)
    return TensorQuant(bit_width=bits, **fields)


def require(where: str, spec: Any, allowed: dict[str, tuple[Any, ...]], what: str) -> None:
    """Every listed field of ``spec`` must hold one of its allowed values (None: unset)."""
    for field_name, values in allowed.items():
        value = getattr(spec, field_name)
        if value not in values:
            shown = ", ".join(getattr(v, "__name__", str(v)) for v in values)
            value = getattr(value, "__name__", value)
            raise fail(where, f"{field_name}={value} is not supported with {what}; allowed: {shown}")


#: observers of integer grids only (as in Quark): refused by the minifloats
_INTEGER_ONLY_OBSERVERS = (LSQObserver, TQTObserver, PerTensorHistogramObserverPro)

#: Quark 0.13's per-group minifloats (FP4PerGroupSpec, ...): ``scale_format="float32"`` is a plain float scale
_FLOAT_SCALE_FIELDS = {"scale_format": (None, "float32"), "scale_calculation_mode": (None,)}


def _float_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    exponent, mantissa, fnuz = FLOAT_DTYPES[spec.dtype]
    what = f"dtype=Dtype.{spec.dtype.name}"
    require(where, spec, {"symmetric": (None, True), "round_method": (None, RoundType.half_even), "qat_spec": (None,)}, what)
    require(where, spec, _FLOAT_SCALE_FIELDS, what + " with a float scale (scale_format='e8m0' makes it OCP MX)")
    if spec.scale_type is ScaleType.float8_e8m0fnu:
        raise fail(
            where,
            f"scale_type=ScaleType.float8_e8m0fnu is not supported with {what} and scale_format={spec.scale_format!r}: "
            "e8m0 scales are OCP MX's; write scale_format='e8m0' with PerBlockMXObserver and group_size=32 "
            "(OCP_MXSpec), or use ScaleType.pof2",
        )
    _refuse_observers(spec, where, _INTEGER_ONLY_OBSERVERS, what + " (observers of integer grids)")
    if spec.observer_cls is not None and spec.observer_cls.power_of_two:
        raise fail(where, f"observer_cls={spec.observer_cls.__name__} is not supported with {what}: it chooses integer scales (as in Quark)")
    grouped = spec.qscheme is QSchemeType.per_group
    if role in ACTIVATION_ROLES and grouped:
        raise fail(
            where,
            f"qscheme=per_group is not supported with {what} for {role} with float scales: dynamic per-group "
            "minifloat activations have no quantizer here; use an OCP MX spec (scale_format='e8m0', e.g. OCP_MXFP4Spec)",
        )
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
        # weights are quantized from their own values: Quark's per-group helpers say is_dynamic=True
        is_dynamic=bool(spec.is_dynamic) and not (grouped and role == "weight"),
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
        **_NO_BLOCK_SCALE_FIELDS,
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


def _is_mx_element_form(spec: main.QuantizationSpec) -> bool:
    """Quark's OCP MX form (``OCP_MXSpec``): the element dtype with PerBlockMXObserver and e8m0 scales."""
    return spec.dtype in MX_ELEMENTS and spec.observer_cls is PerBlockMXObserver and spec.scale_format == "e8m0"


#: scale types of a power-of-two shared scale: Quark writes OCP MX with ScaleType.float and
#: scale_format="e8m0" (the e8m0 scale is a power of two), this package's earlier form is pof2
BLOCK_SCALE_TYPES = (None, ScaleType.pof2, ScaleType.float, ScaleType.float8_e8m0fnu)


def _block_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    element_form = _is_mx_element_form(spec)
    is_mx = spec.dtype is Dtype.mx or element_form
    element = spec.dtype if element_form else (spec.mx_element_dtype if is_mx else spec.dtype)
    block = MX_BLOCK if is_mx else BDR_FORMATS[spec.dtype][0]
    name = f"dtype=Dtype.{spec.dtype.name}" + (" with observer_cls=PerBlockMXObserver and scale_format='e8m0'" if element_form else "")
    what = f"{name} ({block}-element blocks, power-of-two shared scales)"
    allowed = {
        "observer_cls": (PerBlockMXObserver,)
        if element_form
        else (None, PerBlockMXObserver if is_mx else PerBlockBFPObserver, PerGroupMinMaxObserver, PerChannelMinMaxObserver),
        "qscheme": (None, QSchemeType.per_group),
        "group_size": (None, block),
        "symmetric": (None, True),
        "round_method": (None, RoundType.half_even),
        "scale_type": BLOCK_SCALE_TYPES,
        "scale_format": (None, "e8m0"),
        # Quark's mx6 / mx9 / bfp16 kernels do not read it; "even" is its helpers' default
        "scale_calculation_mode": MX_SCALE_MODES if is_mx else (None, "even"),
        "qat_spec": (None,),
        # activations: per-block scales at run time; weights: from their own values, whatever is_dynamic says
        "is_dynamic": (None, True) if role in ACTIVATION_ROLES else (None, True, False),
    }
    require(where, spec, allowed, what)
    if is_mx and element not in MX_ELEMENTS:
        raise fail(where, f"mx_element_dtype={element} not supported; allowed: {[d.name for d in MX_ELEMENTS]}")
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
        scale_rounding=(spec.scale_calculation_mode or "floor") if is_mx else "floor",
    )


#: binary and ternary dtypes -> (bit width, format, narrow integer grid?)
SIGN_DTYPES: dict[Dtype, tuple[int, Format, bool]] = {
    Dtype.bipolar: (BIPOLAR_BITS, Format.bipolar, False),
    Dtype.ternary: (2, Format.integer, True),
}
#: the statistics that set a binary or ternary scale: the mean |x| (the L2-optimal sign scale,
#: :mod:`~quark.torch.quantization.observer.mean_abs`) or the abs-max
#: statistic or the abs-max; a bipolar activation may have scale 1 (UnitScaleObserver)
SIGN_OBSERVERS = (None, MeanAbsObserver, PerTensorMinMaxObserver, PerChannelMinMaxObserver, UnitScaleObserver)


def _sign_from_main(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    """``Dtype.bipolar`` / ``Dtype.ternary``: sign(x) x s, or {-1, 0, 1} x s, symmetric, no zero point."""
    bits, fmt, narrow = SIGN_DTYPES[spec.dtype]
    what = f"dtype=Dtype.{spec.dtype.name}"
    if role == "bias":
        raise fail(
            where,
            f"{what} is not supported for bias: a bias is added to the accumulator at full precision (FINN folds it "
            "into the thresholds); leave bias=None or give it an integer dtype (int8 .. int32)",
        )
    allowed = {
        "observer_cls": SIGN_OBSERVERS,
        "symmetric": (None, True),
        "qscheme": (None, QSchemeType.per_tensor, QSchemeType.per_channel),
        "scale_type": (None, ScaleType.float, ScaleType.pof2),
        "is_dynamic": (None, False),
        "qat_spec": (None,),
        **_NO_BLOCK_SCALE_FIELDS,
    }
    if fmt is not Format.bipolar:
        allowed["observer_cls"] = SIGN_OBSERVERS[:-1]
    if fmt is Format.bipolar:  # sign(x): x >= 0 -> +1, nothing is rounded
        allowed["round_method"] = (None,)
    reason = {
        "symmetric": "a zero point: the levels are symmetric about 0 by definition",
        "qat_spec": "TQT: these train by the straight-through estimator, activation scales as learned parameters",
        "round_method": "rounding: bipolar is sign(x), x >= 0 -> +1",
    }
    for field_name, values in allowed.items():
        if getattr(spec, field_name) not in values:
            extra = f" ({reason[field_name]})" if field_name in reason else ""
            require(where, spec, {field_name: values}, what + extra)
    qscheme = spec.qscheme or QSchemeType.per_tensor
    return TensorQuant(
        bit_width=bits,
        signed=True,
        qscheme=qscheme,
        ch_axis=spec.ch_axis,
        scale_type=spec.scale_type or ScaleType.float,
        round_method=spec.round_method or RoundType.half_even,
        observer=spec.observer_cls or MeanAbsObserver,
        format=fmt,
        narrow=narrow,
    )


def _refused_dtype(spec: main.QuantizationSpec, role: str, where: str) -> TensorQuant:
    raise fail(where, f"dtype=Dtype.{spec.dtype.name} is not supported: {REFUSED_DTYPES[spec.dtype]}")


#: (does the spec name this format?, normaliser) of the main API, in lookup order: Quark's OCP MX
#: form (an element dtype with PerBlockMXObserver and e8m0 scales) before the minifloats.
MAIN_FORMATS: tuple[tuple[Callable[[Any], bool], Callable[[Any, str, str], TensorQuant]], ...] = (
    (lambda spec: spec.dtype in INT_DTYPES, _int_from_main),
    (_is_mx_element_form, _block_from_main),
    (lambda spec: spec.dtype in FLOAT_DTYPES, _float_from_main),
    (lambda spec: spec.dtype in CAST_DTYPES, _cast_from_main),
    (lambda spec: spec.dtype in (Dtype.mx, *BDR_DTYPES), _block_from_main),
    (lambda spec: spec.dtype in REFUSED_DTYPES, _refused_dtype),
    (lambda spec: spec.dtype in SIGN_DTYPES, _sign_from_main),
)


#: TQT threshold initialisation -> the observer computing it.
TQT_OBSERVERS: dict[TQTThresholdInitMeth, type[ObserverBase]] = {
    TQTThresholdInitMeth._3SD: TQT3SDObserver,
    TQTThresholdInitMeth._LL_J: TQTJeffreysObserver,
}


def batch_norm_folding(qat_spec: Any, role: str) -> dict[str, Any]:
    """The ``TensorQuant`` fields of ``TQTSpec.fold_batch_norm`` / ``freeze_batch_norm_steps`` /
    ``absorb_frozen_batch_norm`` (weights only: a batch norm folds into the weights it follows)."""
    if role != "weight" or not getattr(qat_spec, "fold_batch_norm", False):
        return {}
    return {
        "fold_batch_norm": True,
        "freeze_batch_norm_steps": qat_spec.freeze_batch_norm_steps,
        "absorb_frozen_batch_norm": qat_spec.absorb_frozen_batch_norm,
    }


def tqt_observer(qat_spec: Any, observer: type[ObserverBase], where: str = "spec") -> tuple[type[ObserverBase], bool]:
    """(observer initialising the threshold, whether TQT applies); without an init method, the spec's own
    (Quark's ``TQTObserver`` names TQT itself: abs-max then)."""
    if not isinstance(qat_spec, TQTSpec):
        if observer is TQTObserver:
            raise fail(where, "observer_cls=TQTObserver needs qat_spec=TQTSpec(threshold_init_meth=...), as in Quark")
        return observer, False
    init = qat_spec.threshold_init_meth
    if init is not None:
        return TQT_OBSERVERS[init], True
    return (PerTensorMinMaxObserver if observer is TQTObserver else observer), True


# -- rules every normalised spec obeys -----------------------------------------------------------

SUPPORTED_SCALE_TYPES = (ScaleType.float, ScaleType.pof2, ScaleType.float32, ScaleType.float16, ScaleType.bfloat16)  # after normalisation


def check_role(tq: TensorQuant, role: str, where: str) -> TensorQuant:
    max_bits = MAX_BIAS_BITS if role == "bias" else MAX_BITS
    min_bits = BIPOLAR_BITS if tq.format is Format.bipolar else MIN_BITS
    if not min_bits <= tq.bit_width <= max_bits:
        allowed = f"{MIN_BITS}..{max_bits}" + (" (1: bipolar, Dtype.bipolar)" if role != "bias" else "")
        raise fail(where, f"bit width {tq.bit_width} is not supported for {role}; allowed {allowed}")
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
    if role in ("weight", "bias") and tq.statistic == "pof2_mse" and not tq.symmetric:
        raise fail(
            where,
            f"observer_cls=PerTensorPowOf2MinMSEObserver on a {role} searches a symmetric grid; allowed: symmetric=True",
        )
    if role == "bias":
        if tq.format is not Format.integer:
            raise fail(where, f"bias quantization must be integer; got a {tq.format.value} format")
        if tq.tqt and tq.bias_scale_from_product:
            raise fail(
                where,
                "qat_spec=TQTSpec needs a bias with its own threshold (observer_cls=TQTObserver, as AMD Quark writes it); "
                "without an observer the bias scale is input scale x weight scale",
            )
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
    if type(spec) not in NORMALISERS and load_flavours():  # an announced flavour, registered on first use
        return normalise(spec, role, where)
    try:
        normaliser = NORMALISERS[type(spec)]
    except KeyError:
        allowed = ", ".join(f"{c.__module__}.{c.__name__}" for c in NORMALISERS)
        raise TypeError(f"{where}: expected a QuantizationSpec ({allowed}), got {type(spec).__name__}") from None
    return normaliser(spec, role, where)

