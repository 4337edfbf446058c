"""Translation of the resolved plan onto Brevitas: tables, not if-chains.

A :class:`~quark.torch.quantization.tensor_quant.TensorQuant` becomes a Brevitas quantizer injector in
three steps, each a table lookup:

1. a stock Brevitas quantizer chosen by (role kind, symmetric, statistic) -> ``*_BASES``;
2. overrides that make its numbers Quark's: bit width, full integer range, Quark's integer
   threshold, rounding (``ROUND_IMPLS``), scale representation (``SCALE_RESTRICTS``), zero point;
3. granularity (per tensor / channel / group) from ``GRANULARITY``.

``LAYERS`` maps each supported float layer to its Brevitas layer and the keyword arguments that
receive each role's quantizer. The normalised spec travels inside the injector as ``quark_spec``
so that calibration and the summary can read it back from the built proxies.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import brevitas.nn as qnn
import torch
from brevitas import config as brevitas_config
from brevitas.core.function_wrapper import FloorSte, RoundSte, RoundToZeroSte
from brevitas.core.quant import BinaryQuant
from brevitas.core.restrict_val import FloatRestrictValue
from brevitas.core.stats import NegativePercentileOrZero
from brevitas.core.zero_point import ParameterZeroPoint
from brevitas.graph.base import ModuleToModuleByInstance, load_old_module_state_dict
from brevitas.inject.enum import ScalingImplType, ScalingPerOutputType, StatsOp
from brevitas.proxy.float_runtime_quant import DynamicActFloatQuantProxyFromInjector
from brevitas.proxy.groupwise_float_parameter_quant import GroupwiseWeightFloatQuantProxyFromInjector
from brevitas.proxy.groupwise_int_parameter_quant import GroupwiseWeightQuantProxyFromInjector
from brevitas.proxy.runtime_quant import DynamicActQuantProxyFromInjector
from brevitas.quant.binary import SignedBinaryActPerTensorConst, SignedBinaryWeightPerTensorConst
from brevitas.quant.fixed_point import (
    Int8ActPerTensorFixedPoint,
    Int8WeightPerTensorFixedPoint,
    Uint8ActPerTensorFixedPoint,
)
from brevitas.quant.float_quant_fnuz import FpFNUZActPerTensorFloat, FpFNUZWeightPerTensorFloat
from brevitas.quant.float_quant_ocp import FpOCPActPerTensorFloat, FpOCPWeightPerTensorFloat
from brevitas.quant.mx_quant_ocp import MXFloat8e4m3Act, MXFloat8e4m3Weight, MXInt8Act, MXInt8Weight
from brevitas.quant.scaled_int import (
    Int8AccumulatorAwareWeightQuant,
    Int8AccumulatorAwareZeroCenterWeightQuant,
    Int8ActPerTensorFloat,
    Int8BiasPerTensorFloatInternalScaling,
    Int8WeightPerTensorFloat,
    Int8WeightPerTensorFloatMSE,
    IntBias,
)
from brevitas.quant.shifted_scaled_int import (
    ShiftedUint8ActPerTensorFloat,
    ShiftedUint8WeightPerTensorFloat,
    ShiftedUint8WeightPerTensorFloatMSE,
)
from torch import nn

from quark.torch.extensions.brevitas._backend.accumulator import ep_init
from quark.torch.extensions.brevitas._backend.block_axes import check_feature_axis
from quark.torch.extensions.brevitas._backend.quantizers import (
    AccumulatorAwareWeightProxy,
    CastQuant,
    CastScale,
    DynamicScaling,
    DynamicZeroPoint,
    ExactFloorPowerOfTwoRestrictValue,
    FixedIntScaling,
    FusedPof2IntQuant,
    LSQScaling,
    MXBlockMax,
    MXIntScaling,
    Pof2MinMSEStats,
    Pof2Scale,
    QuarkIntScaling,
    RoundHalfAwayFromZeroSte,
    RoundHalfUpSte,
    SaturatingFloatQuant,
    TQTBias,
    TQTIntScaling,
    TQTParameterScaling,
    UnitIntScaling,
    ZeroInclusiveMax,
    ZeroInclusiveMinMax,
    round_zero_points_half_even,
)
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import QSchemeType, RoundType, ScaleType, ZeroPointType
from quark.torch.quantization.observer.lsq import lsq_initial_scale
from quark.torch.quantization.plan import LayerPlan, layer_type
from quark.torch.quantization.tensor_quant import MX_EVEN_MANTISSA_BITS, Format, TensorQuant

ROUND_IMPLS: dict[RoundType, type[nn.Module]] = {
    RoundType.half_even: RoundSte,  # torch.round: ties to even
    RoundType.floor: FloorSte,
    RoundType.round: RoundHalfAwayFromZeroSte,
    RoundType.half_up: RoundHalfUpSte,
    RoundType.toward_zero: RoundToZeroSte,
}

#: ScaleType -> (restriction module applied to the scale, its keyword arguments); None: unrestricted.
SCALE_RESTRICTS: dict[ScaleType, tuple[type[nn.Module], dict[str, Any]] | None] = {
    ScaleType.float: None,
    ScaleType.float32: (CastScale, {"scale_dtype": torch.float32}),
    ScaleType.float16: (CastScale, {"scale_dtype": torch.float16}),
    ScaleType.bfloat16: (CastScale, {"scale_dtype": torch.bfloat16}),
    ScaleType.pof2: (Pof2Scale, {}),
}

#: weights: (symmetric, statistic) -> stock quantizer computing that statistic on the weight.
WEIGHT_BASES: dict[tuple[bool, str], Any] = {
    (True, "minmax"): Int8WeightPerTensorFloat,  # abs-max (max(w, 0) for unsigned grids: see weight_quant)
    (False, "minmax"): ShiftedUint8WeightPerTensorFloat.let(scaling_stats_impl=ZeroInclusiveMinMax),
    (True, "percentile"): Int8WeightPerTensorFloat.let(scaling_stats_op=StatsOp.PERCENTILE),
    (False, "percentile"): ShiftedUint8WeightPerTensorFloat.let(
        scaling_stats_op=StatsOp.PERCENTILE_INTERVAL, zero_point_stats_impl=NegativePercentileOrZero
    ),
    (True, "mse"): Int8WeightPerTensorFloatMSE,
    (False, "mse"): ShiftedUint8WeightPerTensorFloatMSE,
    (True, "mean_abs"): Int8WeightPerTensorFloat.let(scaling_stats_op=StatsOp.AVE),  # ternary: mean |w|
    (True, "pof2_mse"): Int8WeightPerTensorFloat.let(scaling_stats_impl=Pof2MinMSEStats),  # Quark's five powers of two
}

#: bipolar tensors, sign(x) x s (x >= 0 -> +1), exported as QONNX BipolarQuant; key: weight?
#: Weights: ``BinaryQuant``, the scale the weight's statistic at every forward and the gradient passed
#: straight through to every weight (BinaryConnect's estimator). Brevitas' stock binary weight
#: quantizer clamps the weight in place to a constant scale: on a statistic scale that clamp would
#: shrink the weights, and their scale, at every step. Activations: Brevitas' stock
#: ``ClampedBinaryQuant`` (the gradient of hardtanh: none where |x| > s), with scale 1 (Brevitas'
#: stock quantizer: FINN's bipolar activations) or the scale learned and set by calibration like
#: every static activation's.
BIPOLAR_BASES: dict[bool, Any] = {
    True: SignedBinaryWeightPerTensorConst.let(tensor_quant=BinaryQuant, scaling_impl_type=ScalingImplType.STATS),
    False: SignedBinaryActPerTensorConst.let(scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0),
}
#: a bipolar activation of scale 1 (``UnitScaleObserver``): Brevitas' stock quantizer as it is
BIPOLAR_UNIT_ACT = SignedBinaryActPerTensorConst
#: statistic of a bipolar weight -> Brevitas' statistic of |w|
BIPOLAR_WEIGHT_STATS: dict[str, StatsOp] = {"mean_abs": StatsOp.AVE, "minmax": StatsOp.MAX}

#: static activations: a learned scale (and zero point) initialised by calibration observers.
STATIC_ACT_BASES: dict[bool, Any] = {
    True: Int8ActPerTensorFloat.let(scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0),
    False: ShiftedUint8ActPerTensorFloat.let(
        scaling_impl_type=ScalingImplType.PARAMETER,
        scaling_init=1.0,
        zero_point_impl=ParameterZeroPoint,
        zero_point_init=0.0,
    ),
}

#: dynamic activations: scale (and zero point) from each tensor at run time.
DYNAMIC_ACT_BASES: dict[bool, Any] = {
    True: Int8ActPerTensorFloat.let(
        proxy_class=DynamicActQuantProxyFromInjector, scaling_impl=DynamicScaling
    ),
    False: ShiftedUint8ActPerTensorFloat.let(
        proxy_class=DynamicActQuantProxyFromInjector,
        scaling_impl=DynamicScaling,
        zero_point_impl=DynamicZeroPoint,
    ),
}

#: TQT: a learned threshold in the log2 domain; Brevitas' power-of-two restriction with CeilSte
#: gives 2^ceil(log2 t), divided by TQTIntScaling. (weight?, signed) -> stock fixed-point quantizer.
TQT_BASES: dict[tuple[bool, bool], Any] = {
    (True, True): Int8WeightPerTensorFixedPoint.let(scaling_impl_type=ScalingImplType.PARAMETER),
    (True, False): Int8WeightPerTensorFixedPoint.let(
        scaling_impl_type=ScalingImplType.PARAMETER, signed=False
    ),
    (False, True): Int8ActPerTensorFixedPoint.let(
        scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0
    ),
    (False, False): Uint8ActPerTensorFixedPoint.let(
        scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0
    ),
}

#: accumulator-aware weights (A2QSpec), key: zero-centred? A2Q+ (Colbert et al. 2024:
#: zero-centred weights, the relaxed bound) or A2Q (Colbert et al. 2023). Brevitas' quantizers as
#: they are: per output channel, a learned scale (log domain) initialised from max |w| / (2^(b-1) - 1), the
#: weight-norm parameter g clamped to the bound of the accumulator, the narrow grid, rounding toward
#: zero; our proxy gives them the planned input grid (quantizers.AccumulatorAwareWeightProxy).
A2Q_BASES: dict[bool, Any] = {
    True: Int8AccumulatorAwareZeroCenterWeightQuant.let(proxy_class=AccumulatorAwareWeightProxy),
    False: Int8AccumulatorAwareWeightQuant.let(proxy_class=AccumulatorAwareWeightProxy),
}

#: scaled minifloats: (weight?, FNUZ?) -> stock Brevitas quantizer (OCP: saturating, OCP inf/NaN
#: codes for 8 bits, none below; FNUZ: NaN at 0x80, bias 2^(e-1)).
FLOAT_BASES: dict[tuple[bool, bool], Any] = {  # key: (weight?, FNUZ?)
    (True, False): FpOCPWeightPerTensorFloat.let(tensor_quant=SaturatingFloatQuant),
    (True, True): FpFNUZWeightPerTensorFloat.let(tensor_quant=SaturatingFloatQuant),
    (False, False): FpOCPActPerTensorFloat.let(
        scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0, tensor_quant=SaturatingFloatQuant
    ),
    (False, True): FpFNUZActPerTensorFloat.let(
        scaling_impl_type=ScalingImplType.PARAMETER, scaling_init=1.0, tensor_quant=SaturatingFloatQuant
    ),
}
DYNAMIC_FLOAT_BASES: dict[bool, Any] = {  # key: FNUZ?
    fnuz: FLOAT_BASES[(False, fnuz)].let(
        proxy_class=DynamicActFloatQuantProxyFromInjector, scaling_impl=DynamicScaling
    )
    for fnuz in (False, True)
}

#: OCP MX: element family -> (weight, activation) quantizers; 32-element blocks, E8M0 scales,
#: activations scaled per block at run time.
MX_BASES: dict[bool, tuple[Any, Any]] = {  # key: integer elements?
    True: (MXInt8Weight.let(int_scaling_impl=MXIntScaling), MXInt8Act.let(int_scaling_impl=MXIntScaling)),
    False: (MXFloat8e4m3Weight, MXFloat8e4m3Act),
}
#: every MX quantizer: exact floor(log2) for the shared exponent, and block maxima floored at
#: E8M0's smallest value 2^-127, so an all-zero block still gets a power-of-two scale (Brevitas
#: clamps at 1e-10, not a power of two).
MX_EXACT = {
    "restrict_scaling_impl": ExactFloorPowerOfTwoRestrictValue,
    "restrict_threshold_impl": ExactFloorPowerOfTwoRestrictValue,
    "scaling_min_val": 2.0**-127,
}

#: weight group proxies per element family
GROUP_PROXIES: dict[Format, Any] = {
    Format.integer: GroupwiseWeightQuantProxyFromInjector,
    Format.minifloat: GroupwiseWeightFloatQuantProxyFromInjector,
}

#: layer type -> axis of its weight holding output channels.
OUTPUT_CHANNEL_AXIS: dict[type[nn.Module], int] = {
    nn.ConvTranspose1d: 1,
    nn.ConvTranspose2d: 1,
    nn.ConvTranspose3d: 1,
}
#: layer type -> axis of its weight holding input channels (the reduction axis); default 1.
REDUCTION_AXIS: dict[type[nn.Module], int] = {
    nn.ConvTranspose1d: 0,
    nn.ConvTranspose2d: 0,
    nn.ConvTranspose3d: 0,
}

_WBIOL_ROLES = {
    "input_tensors": ("input_quant",),
    "output_tensors": ("output_quant",),
    "weight": ("weight_quant",),
    "bias": ("bias_quant",),
}


def _weight(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    return [("weight", module.weight)]


def _attention_weights(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    first = (
        ("q_proj_weight", module.q_proj_weight)
        if module.in_proj_weight is None
        else ("in_proj_weight", module.in_proj_weight)
    )
    return [first, ("out_proj.weight", module.out_proj.weight)]


@dataclass(frozen=True)
class LayerRow:
    """How a float layer becomes a Brevitas layer.

    ``roles``: role -> the keyword arguments that receive the role's quantizer; ``weights``: (name,
    tensor) of each weight its weight quantizers see, in the order of ``roles["weight"]``;
    ``unmapped``: Brevitas quantizers no Quark role covers, kept float; ``upstream_input``: whether
    graph mode may hand it an input quantized upstream (else it quantizes its own inputs).
    """

    quant_cls: type[nn.Module]
    roles: dict[str, tuple[str, ...]] = field(default_factory=lambda: _WBIOL_ROLES)
    weights: Callable[[nn.Module], list[tuple[str, torch.Tensor]]] = _weight
    unmapped: tuple[str, ...] = ()
    upstream_input: bool = True


#: float layer -> how it becomes a Brevitas layer
LAYERS: dict[type[nn.Module], LayerRow] = {
    nn.Linear: LayerRow(qnn.QuantLinear),
    nn.Conv1d: LayerRow(qnn.QuantConv1d),
    nn.Conv2d: LayerRow(qnn.QuantConv2d),
    nn.Conv3d: LayerRow(qnn.QuantConv3d),
    nn.ConvTranspose1d: LayerRow(qnn.QuantConvTranspose1d),
    nn.ConvTranspose2d: LayerRow(qnn.QuantConvTranspose2d),
    nn.ConvTranspose3d: LayerRow(qnn.QuantConvTranspose3d),
    # its three inputs go through one input quantizer per projection
    nn.MultiheadAttention: LayerRow(
        qnn.QuantMultiheadAttention,
        roles={
            "input_tensors": ("in_proj_input_quant", "out_proj_input_quant"),
            "output_tensors": ("out_proj_output_quant",),
            "weight": ("in_proj_weight_quant", "out_proj_weight_quant"),
            "bias": ("in_proj_bias_quant", "out_proj_bias_quant"),
        },
        weights=_attention_weights,
        unmapped=(
            "softmax_input_quant",
            "attn_output_weights_quant",
            "q_scaled_quant",
            "k_transposed_quant",
            "v_quant",
        ),
        upstream_input=False,
    ),
}


def _fused(tq: TensorQuant) -> dict[str, Any]:
    """The fused kernel where it is bit-identical: per tensor, symmetric, pof2, half-even."""
    pof2 = tq.tqt or tq.scale_type is ScaleType.pof2
    if (
        pof2
        and tq.symmetric
        and tq.qscheme is QSchemeType.per_tensor
        and tq.round_method is RoundType.half_even
    ):
        return {"int_quant": FusedPof2IntQuant}
    return {}


def _tqt(tq: TensorQuant) -> dict[str, Any]:
    """Overrides of a TQT quantizer: bits, signedness, TQT's integer threshold, rounding."""
    return {
        "quark_spec": tq,
        "bit_width": tq.bit_width,
        "narrow_range": False,
        "signed": tq.signed,
        "scaling_impl": TQTParameterScaling,
        "int_scaling_impl": TQTIntScaling,
        # TQTIntScaling is already an exact power of two: restricting it again each call is waste
        "restrict_threshold_impl": FloatRestrictValue,
        "float_to_int_impl": ROUND_IMPLS[tq.round_method],
        **_fused(tq),
    }


def initial_threshold(tq: TensorQuant, tensor: torch.Tensor) -> torch.Tensor:
    """Threshold of ``tensor`` by the spec's observer (TQT weights initialise from the weight)."""
    qmin, qmax = tq.grid
    observer = tq.observer(symmetric=True, qmin=qmin, qmax=qmax).to(tensor.device)
    observer(tensor.detach())
    return torch.clamp(observer.calculate_range()[1], min=torch.finfo(torch.float32).tiny)  # all-zero weight


def _scale_type(tq: TensorQuant) -> dict[str, Any]:
    """The spec itself and its scale representation, for every scaled quantizer."""
    kwargs: dict[str, Any] = {"quark_spec": tq, "restrict_scale_threshold_impl": None}
    restrict = SCALE_RESTRICTS[tq.scale_type]
    if restrict is not None:
        kwargs["restrict_scale_threshold_impl"], extra = restrict
        kwargs.update(extra)
    return kwargs


def _float(tq: TensorQuant) -> dict[str, Any]:
    """Overrides of a scaled minifloat quantizer: its layout and scale type."""
    return {
        "bit_width": tq.bit_width,
        "exponent_bit_width": tq.exponent_bit_width,
        "mantissa_bit_width": tq.mantissa_bit_width,
        **_scale_type(tq),
    }


def _common(tq: TensorQuant) -> dict[str, Any]:
    """Overrides every integer quantizer gets: Quark's grid, threshold, rounding and scale type."""
    kwargs: dict[str, Any] = {
        "bit_width": tq.bit_width,
        "narrow_range": tq.narrow,
        "signed": tq.symmetric and tq.signed,
        "int_scaling_impl": QuarkIntScaling,
        "float_to_int_impl": ROUND_IMPLS[tq.round_method],
        **_scale_type(tq),
    }
    if tq.narrow:  # ternary: the grid {-1, 0, 1}, the threshold divided by the spec's levels
        kwargs.update(int_scaling_impl=FixedIntScaling, int_levels=tq.threshold_levels)
    if not tq.symmetric:
        kwargs["quantize_zero_point"] = tq.zero_point_type is ZeroPointType.int32
    kwargs.update(_fused(tq))
    return kwargs


def _percentile_kwargs(tq: TensorQuant) -> dict[str, Any]:
    if tq.statistic != "percentile":
        return {}
    if tq.symmetric:
        return {"high_percentile_q": tq.percentile}
    tail = (100 - tq.percentile) / 2  # Quark: the central `percentile` interval
    return {"low_percentile_q": tail, "high_percentile_q": 100 - tail}


def weight_quant(tq: TensorQuant, module: nn.Module, weight: torch.Tensor, inputs: TensorQuant | None = None) -> Any:
    """Injector of a weight quantizer for ``weight`` of ``module``; ``inputs``: the spec on whose grid
    the layer's input arrives (accumulator-aware weights bound their L1 norm with it)."""
    return WEIGHT_FORMATS[tq.format](tq, module, weight, inputs)


def _lsq(tq: TensorQuant) -> dict[str, Any]:
    """Overrides of an LSQ quantizer: its trained scale, used as it is (integer threshold 1)."""
    return {"scaling_impl": LSQScaling, "int_scaling_impl": UnitIntScaling, "lsq_qmax": tq.grid[1]}


def _lsq_weight(tq: TensorQuant, module: nn.Module, weight: torch.Tensor) -> Any:
    """LSQ weights: the scale trained from 2 * mean|w| / sqrt(qmax), per tensor or per output channel."""
    inj = WEIGHT_BASES[(True, "minmax")].let(**{**_common(tq), **_lsq(tq)})
    if tq.qscheme is QSchemeType.per_tensor:
        return inj.let(scaling_init=lsq_initial_scale(weight, tq.grid[1]), scaling_per_output_type=ScalingPerOutputType.TENSOR)
    axis = weight_axis(tq, module, weight)
    shape = [1] * weight.dim()
    shape[axis] = weight.shape[axis]
    return _per_channel(inj, tq, module, weight).let(scaling_init=lsq_initial_scale(weight, tq.grid[1], axis).reshape(shape))


def _a2q_weight(tq: TensorQuant, module: nn.Module, weight: torch.Tensor, inputs: TensorQuant | None) -> Any:
    """A2Q / A2Q+ weights: Brevitas' quantizer at the spec's bit width and accumulator, per output
    channel, with the input grid the plan gives the layer (``rules/layers.py`` refuses a layer
    without an integer input first)."""
    if inputs is None or inputs.format is not Format.integer:
        raise ValueError(f"accumulator-aware weights need the layer's integer input spec, got {inputs}")
    return _per_channel(A2Q_BASES[tq.zero_centered], tq, module, weight).let(
        **_scale_type(tq),  # the learned scale as it is (float) or rounded to a power of two (pof2)
        bit_width=tq.bit_width,
        accumulator_bit_width=tq.accumulator_bits,
        a2q_input_bit_width=inputs.bit_width,
        a2q_input_signed=inputs.signed,
    )


def _int_weight(tq: TensorQuant, module: nn.Module, weight: torch.Tensor, inputs: TensorQuant | None = None) -> Any:
    if tq.tqt:
        return TQT_BASES[(True, tq.signed)].let(**_tqt(tq), scaling_init=float(initial_threshold(tq, weight)))
    if tq.lsq:
        return _lsq_weight(tq, module, weight)
    if tq.accumulator_bits is not None:
        return _a2q_weight(tq, module, weight, inputs)
    inj = WEIGHT_BASES[(tq.symmetric, tq.statistic)].let(**_common(tq), **_percentile_kwargs(tq), pof2_mse_grid=tq.grid)
    if tq.symmetric and not tq.signed and tq.statistic == "minmax":
        inj = inj.let(scaling_stats_impl=ZeroInclusiveMax)  # an unsigned grid covers [0, max(w, 0)]
    return GRANULARITY[tq.qscheme](inj, tq, module, weight)


def _float_weight(tq: TensorQuant, module: nn.Module, weight: torch.Tensor, inputs: TensorQuant | None = None) -> Any:
    inj = FLOAT_BASES[(True, tq.fnuz)].let(**_float(tq))
    if tq.statistic == "percentile":
        inj = inj.let(scaling_stats_op=StatsOp.PERCENTILE, **_percentile_kwargs(tq))
    return GRANULARITY[tq.qscheme](inj, tq, module, weight)


def _cast(tq: TensorQuant, weight: bool) -> Any:
    base = FpOCPWeightPerTensorFloat if weight else FpOCPActPerTensorFloat
    return base.let(
        quark_spec=tq,
        tensor_quant=CastQuant,
        cast_dtype=getattr(torch, tq.element.name),
        bit_width=tq.bit_width,
        exponent_bit_width=tq.exponent_bit_width,
        mantissa_bit_width=tq.mantissa_bit_width,
    )


def _mx(tq: TensorQuant, weight: bool) -> Any:
    integer = tq.exponent_bit_width is None
    rounding = {
        "scaling_stats_impl": MXBlockMax,
        "mx_scale_rounding": tq.scale_rounding,
        "mx_mantissa_bits": MX_EVEN_MANTISSA_BITS[tq.element],
    }
    inj = MX_BASES[integer][0 if weight else 1].let(quark_spec=tq, bit_width=tq.bit_width, **MX_EXACT, **rounding)
    if not integer:
        inj = inj.let(exponent_bit_width=tq.exponent_bit_width, mantissa_bit_width=tq.mantissa_bit_width)
    return inj


def _bdr(tq: TensorQuant, weight: bool, axis: int | None) -> Any:
    from quark.torch.extensions.brevitas._backend.shared_microexponents import shared_microexponent_quant

    return shared_microexponent_quant(tq.element.name, "weight" if weight else "act", axis).let(quark_spec=tq)


def _bipolar_weight(tq: TensorQuant, module: nn.Module, weight: torch.Tensor, inputs: TensorQuant | None = None) -> Any:
    inj = BIPOLAR_BASES[True].let(scaling_stats_op=BIPOLAR_WEIGHT_STATS[tq.statistic], **_scale_type(tq))
    return GRANULARITY[tq.qscheme](inj, tq, module, weight)


#: format -> weight quantizer builder (tq, module, weight, the layer's input spec)
WEIGHT_FORMATS: dict[Format, Callable[..., Any]] = {
    Format.integer: _int_weight,
    Format.minifloat: _float_weight,
    Format.cast: lambda tq, module, weight, inputs=None: _cast(tq, weight=True),
    Format.mx: lambda tq, module, weight, inputs=None: _mx(tq, weight=True).let(group_dim=weight_axis(tq, module, weight)),
    Format.bdr: lambda tq, module, weight, inputs=None: _bdr(tq, True, weight_axis(tq, module, weight)),
    Format.bipolar: _bipolar_weight,
}


def _per_tensor(inj: Any, tq: TensorQuant, module: nn.Module, weight: torch.Tensor) -> Any:
    return inj.let(scaling_per_output_type=ScalingPerOutputType.TENSOR)


def _per_channel(inj: Any, tq: TensorQuant, module: nn.Module, weight: torch.Tensor) -> Any:
    axis = weight_axis(tq, module, weight)
    return inj.let(
        scaling_per_output_type=ScalingPerOutputType.CHANNEL,
        output_channel_dim=axis,
        out_channels=weight.shape[axis],
    )


def _per_group(inj: Any, tq: TensorQuant, module: nn.Module, weight: torch.Tensor) -> Any:
    axis = weight_axis(tq, module, weight)
    return inj.let(
        proxy_class=GROUP_PROXIES[tq.format],
        scaling_per_output_type=ScalingPerOutputType.GROUP,
        group_size=tq.group_size,
        group_dim=axis,
    )


GRANULARITY: dict[QSchemeType, Callable[..., Any]] = {
    QSchemeType.per_tensor: _per_tensor,
    QSchemeType.per_channel: _per_channel,
    QSchemeType.per_group: _per_group,
}


def weight_axis(tq: TensorQuant, module: nn.Module, weight: torch.Tensor) -> int:
    """The weight axis of ``tq``: its ch_axis, else output channels (per channel) or input channels (blocks)."""
    if tq.ch_axis is not None:
        return tq.ch_axis % weight.dim()
    if tq.qscheme is QSchemeType.per_group:
        return REDUCTION_AXIS.get(type(module), 1)
    return OUTPUT_CHANNEL_AXIS.get(type(module), 0)


def act_quant(tq: TensorQuant) -> Any:
    """Injector of an activation quantizer (static: learned scale set by calibration; or dynamic)."""
    return ACT_FORMATS[tq.format](tq)


def _int_act(tq: TensorQuant) -> Any:
    if tq.tqt:
        return TQT_BASES[(False, tq.signed)].let(**_tqt(tq))
    bases = DYNAMIC_ACT_BASES if tq.is_dynamic else STATIC_ACT_BASES
    kwargs = _common(tq)
    if tq.is_dynamic:
        kwargs["symmetric"] = tq.symmetric
    if tq.lsq:  # static (LSQ is refused with is_dynamic): calibration sets the trained scale
        kwargs.update(_lsq(tq), scaling_init=1.0)
    return bases[tq.symmetric].let(**kwargs)


def _float_act(tq: TensorQuant) -> Any:
    if tq.is_dynamic:
        return DYNAMIC_FLOAT_BASES[tq.fnuz].let(**_float(tq), symmetric=True, signed=True)
    return FLOAT_BASES[(False, tq.fnuz)].let(**_float(tq))


ACT_FORMATS: dict[Format, Callable[[TensorQuant], Any]] = {
    Format.integer: _int_act,
    Format.minifloat: _float_act,
    Format.cast: lambda tq: _cast(tq, weight=False),
    Format.mx: lambda tq: _mx(tq, weight=False),
    Format.bdr: lambda tq: _bdr(tq, False, None),  # axis None: the layer's channel axis
    Format.bipolar: lambda tq: (
        BIPOLAR_UNIT_ACT.let(quark_spec=tq) if tq.statistic == "unit" else BIPOLAR_BASES[False].let(**_scale_type(tq))
    ),
}


def bias_quant(tq: TensorQuant, bias: torch.Tensor | None = None) -> Any:
    """Injector of a bias quantizer: scale = input scale x weight scale, its own abs-max scale, or its
    own TQT threshold (initialised from ``bias``)."""
    if tq.tqt:
        return TQTBias.let(**_tqt(tq), scaling_init=float(initial_threshold(tq, bias)))
    if tq.bias_scale_from_product:
        return IntBias.let(
            quark_spec=tq,
            bit_width=tq.bit_width,
            narrow_range=False,
            float_to_int_impl=ROUND_IMPLS[tq.round_method],
        )
    stats = {"scaling_stats_impl": Pof2MinMSEStats, "pof2_mse_grid": tq.grid} if tq.statistic == "pof2_mse" else {}
    return Int8BiasPerTensorFloatInternalScaling.let(**_common(tq), **stats)


def weights(module: nn.Module) -> list[tuple[str, torch.Tensor]]:
    """(name, tensor) of each weight the layer's weight quantizers see."""
    return LAYERS[layer_type(module)].weights(module)


#: role -> quantizer builder (tq, module, weight, the spec on whose grid the layer's input arrives)
ROLE_BUILDERS: dict[str, Callable[..., Any]] = {
    "input_tensors": lambda tq, module, weight, inputs: act_quant(tq),
    "output_tensors": lambda tq, module, weight, inputs: act_quant(tq),
    "weight": weight_quant,
    "bias": lambda tq, module, weight, inputs: bias_quant(tq, getattr(module, "bias", None)),
}


def build_layer(
    plan: LayerPlan,
    module: nn.Module,
    return_quant_tensor: bool = False,
    quant_cls: type[nn.Module] | None = None,
    inputs: TensorQuant | None = None,
) -> nn.Module:
    """The Brevitas layer that replaces ``module`` according to ``plan`` (``module`` is not modified);
    ``return_quant_tensor`` hands its quantized output on as a QuantTensor (graph mode);
    ``quant_cls`` replaces the row's Brevitas class by a subclass taking the same arguments;
    ``inputs``: the spec of an input quantized upstream (graph mode), else the plan's own input spec."""
    row = LAYERS[layer_type(module)]
    inputs = inputs if inputs is not None else plan.specs[Role.input_tensors]
    quant_cls, roles = quant_cls or row.quant_cls, row.roles
    kwargs: dict[str, Any] = {"return_quant_tensor": return_quant_tensor, **dict.fromkeys(row.unmapped)}
    # each weight quantizer keyword, with the tensor it quantizes (MultiheadAttention has two)
    by_keyword = dict(zip(roles["weight"], (tensor for _, tensor in row.weights(module))))
    first_weight = next(iter(by_keyword.values()))
    for role, names in roles.items():
        tq = plan.specs[role]
        for name in names:
            kwargs[name] = (
                ROLE_BUILDERS[role](tq, module, by_keyword.get(name, first_weight), inputs)
                if tq is not None
                else None
            )
    param = next(module.parameters())
    kwargs.update(device=param.device, dtype=param.dtype)
    # Built on the real device (Brevitas would build on 'meta', where quantizers with an initial
    # scale cannot be constructed), then the float weights are copied in. The float layer has no
    # quantizer state: its state_dict lacks those keys by construction.
    previous, brevitas_config.IGNORE_MISSING_KEYS = brevitas_config.IGNORE_MISSING_KEYS, True
    try:
        new = ModuleToModuleByInstance(module, quant_cls, **kwargs).init_new_module(
            module, load_state_dict=False
        )
        load_old_module_state_dict(module, new, False)
    finally:
        brevitas_config.IGNORE_MISSING_KEYS = previous
    round_zero_points_half_even(new)
    ep_init(new)  # accumulator-aware weights start inside their bound (A2Q+'s EP-init); others: nothing
    check_feature_axis(new, plan, module)  # activation blocks written ch_axis=1 on a features-last layer: 2-D only
    return new
