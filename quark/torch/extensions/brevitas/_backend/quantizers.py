"""Brevitas building blocks that Brevitas does not ship, each plugged into stock injectors.

- :class:`QuarkIntScaling`, :class:`TQTIntScaling`, :class:`FixedIntScaling`: integer thresholds of
  Quark's and TQT's formulas, and a fixed one (ternary grids).
  :class:`QuarkIntScaling`: Quark's integer threshold. Quark divides a symmetric range by
  (qmax - qmin) / 2 (127.5 for int8), Brevitas by 2^(b-1); the integer grid is the same.
- :class:`Pof2Scale`, :class:`CastScale`: restrictions applied to the *scale itself* (Brevitas'
  power-of-two restriction rounds the threshold and the integer range separately, which is not
  Quark's 2^round(log2(scale))).
- :class:`RoundHalfAwayFromZeroSte`, :class:`RoundHalfUpSte`: ``RoundType.round`` and
  ``RoundType.half_up``; Brevitas has half-even, floor, ceil and the DPU's rounding (ties up for
  negative values only), but neither of these.
- :class:`DynamicScaling`, :class:`DynamicZeroPoint`: per-tensor scale and zero point computed
  from each tensor at run time; Brevitas core ships dynamic scaling per group only.
- :class:`ZeroInclusiveMax`, :class:`ZeroInclusiveMinMax`: weight statistics over a range that
  always contains zero. Brevitas' ``AbsMax`` takes |x| (wrong for an unsigned symmetric grid) and
  ``AbsMinMax`` leaves max unclamped (wrong for an all-negative channel or group).
- :func:`round_zero_points_half_even`: Quark rounds zero points half to even whatever the tensor's
  rounding; Brevitas rounds them with the tensor's.
- :class:`SaturatingFloatQuant`, :class:`ExactFloorPowerOfTwoRestrictValue`: Brevitas' float
  quantizer and power-of-two restriction, fixed for infinite inputs and for floor(log2) just below
  a power of two.
- :class:`CastQuant`: bfloat16 / float16 as a round-to-nearest-even cast, exact by construction,
  behind Brevitas' float-quantizer interface (Brevitas' scaled-float emulation mis-rounds the
  lowest bfloat16 binades, computed in float32).
- :class:`FusedPof2IntQuant`, :class:`TQTParameterScaling`: Brevitas' integer quantization and
  TQT's learned power-of-two scale, each run as one autograd node where that is bit-identical
  (see the classes); the QAT speed comes from them.
- :class:`AccumulatorAwareWeightProxy`: Brevitas' A2Q / A2Q+ weight proxy with the layer's input
  grid fixed by the plan, so that its weights exist without a quantized input at hand
  (calibration, ``quant_weight()`` at export).
- :class:`TQTBias`: AMD Quark's TQT on a bias with its own scale (its vision example's ``--tqt``
  config); Brevitas' TQT recipe exists for weights and activations only.

The trained scales are AMD Quark's observers by name: :class:`TQTParameterScaling` is registered as
a ``TQTObserver`` (its ``_log_threshold`` is the parameter it trains, log2 of the threshold) and
:class:`LSQScaling` as an ``LSQObserver`` (its ``scale``), so that code written for Quark
(``isinstance(module, TQTObserver)``) finds the parameters it means to train.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import torch
from brevitas import config as brevitas_config
from brevitas.core.function_wrapper import CeilSte, Identity, RoundSte, ScalarSignedClampMinSte
from brevitas.core.quant.float import FloatQuant, min_internal_scale
from brevitas.core.quant.int_base import IntQuant
from brevitas.core.restrict_val import FloatRestrictValue, PowerOfTwoRestrictValue
from brevitas.core.scaling.standalone import ParameterScaling
from brevitas.core.zero_point import _ScaleShiftZeroPoint
from brevitas.function.ops_ste import abs_binary_sign_grad, round_ste
from brevitas.inject.enum import ScalingImplType
from brevitas.proxy.parameter_quant import DecoupledWeightQuantWithInputProxyFromInjector
from brevitas.quant.base import PerTensorPoTScaling8bit
from brevitas.quant.scaled_int import Int8BiasPerTensorFloatInternalScaling
from brevitas.quant_tensor import IntQuantTensor
from brevitas.utils.torch_utils import float_internal_scale
from torch import Tensor, nn

from quark.common.errors import RefusedError
from quark.torch.quantization.observer import LSQObserver, TQTObserver
from quark.torch.quantization.observer.pof2 import pof2, pof2_mse_scale


class QuarkIntScaling(nn.Module):
    """Integer threshold of Quark's formulas: (2^b - 1) / 2 for a signed symmetric grid, 2^b - 1 else."""

    def __init__(self, signed: bool):
        super().__init__()
        self.signed = signed

    def forward(self, bit_width: Tensor) -> Tensor:
        levels = 2.0**bit_width - 1
        return levels / 2 if self.signed else levels


#: IEEE half formats: torch dtype -> (exponent bits, mantissa bits, exponent bias)
CAST_FORMATS: dict[torch.dtype, tuple[int, int, int]] = {torch.bfloat16: (8, 7, 127), torch.float16: (5, 10, 15)}


class CastQuant(nn.Module):
    """x -> x cast to ``cast_dtype`` (round to nearest even, overflow to inf) and back, straight-through.

    Returns Brevitas' float-quantizer tuple (value, scale 1, zero point 0, exponent and mantissa
    widths, bias, saturating=False, IEEE inf and NaN mantissa codes), so Brevitas' proxies and
    export see an ordinary minifloat.
    """

    def __init__(self, cast_dtype: torch.dtype) -> None:
        super().__init__()
        self.cast_dtype = cast_dtype
        exponent, mantissa, bias = CAST_FORMATS[cast_dtype]
        for name, value in (("exponent_bit_width", exponent), ("mantissa_bit_width", mantissa), ("exponent_bias", bias)):
            self.register_buffer(name, torch.tensor(float(value)), persistent=False)
        self.register_buffer("one", torch.tensor(1.0), persistent=False)
        self.register_buffer("zero", torch.tensor(0.0), persistent=False)
        self.inf_values = ("0" * mantissa,)
        self.nan_values = tuple(format(i, f"0{mantissa}b") for i in range(1, 2**mantissa))

    def forward(self, x: Tensor) -> tuple:
        y = _CastSte.apply(x, self.cast_dtype)
        return (y, self.one, self.zero, self.exponent_bit_width, self.mantissa_bit_width, self.exponent_bias,
                False, self.inf_values, self.nan_values)


class _CastSte(torch.autograd.Function):
    """x -> x.to(dtype).to(x.dtype), gradient passed straight through (no inf - inf for infinite x)."""

    @staticmethod
    def forward(ctx, x: Tensor, dtype: torch.dtype) -> Tensor:
        return x.to(dtype).to(x.dtype)

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None]:
        return grad, None


class SaturatingFloatQuant(FloatQuant):
    """Brevitas' ``FloatQuant`` that maps +-inf to +-max when the format saturates (OCP conversion).

    Brevitas computes the exponent of inf as inf and returns NaN; finite values are untouched
    (they already saturate), and their gradients too.
    """

    def quantize(self, x: Tensor, scale: Tensor) -> tuple[Tensor, Tensor]:
        # Brevitas' FloatQuant.quantize, with infinite scaled values replaced by +-max first
        scaled_x = self.input_view_impl(x) / scale
        clamp = self.float_clamp_impl
        if clamp.saturating and clamp.max_available_float is not None:
            scaled_x = torch.where(torch.isinf(scaled_x), torch.sign(scaled_x) * clamp.max_available_float(), scaled_x)
        scale_min = min_internal_scale(self.exponent_bias_impl(), self.mantissa_bit_width_impl())
        internal_scale = float_internal_scale(scaled_x, self.mantissa_bit_width_impl(), scale_min, self.eps)
        return internal_scale * self.float_to_int_impl(scaled_x / internal_scale), scale


class FrexpLogTwo(nn.Module):
    """A log2 whose floor is exact: (e - 1) + (m - 1/2) for x = m * 2^e, m in [0.5, 1).

    Equal to log2 at powers of two, monotonic in between, and always in [e - 1, e - 1/2), so no
    float32 rounding of the sum can reach the next integer. float32 ``log2`` rounds up to k for
    values a few ulps below 2^k, so floor(log2 x) can be one too large (an OCP MX block would then
    get twice its shared scale); this surrogate is only used where the result is floored.
    """

    def __init__(self) -> None:
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        mantissa, exponent = torch.frexp(x)
        return (exponent - 1).to(x.dtype) + (mantissa - 0.5)


class ExactFloorPowerOfTwoRestrictValue(PowerOfTwoRestrictValue):
    """Brevitas' power-of-two restriction with a floor-exact log2 (see :class:`FrexpLogTwo`)."""

    def restrict_init_tensor(self, x: Tensor) -> Tensor:
        return FrexpLogTwo()(x)

    def restrict_init_module(self) -> nn.Module:
        return FrexpLogTwo()


def _floor_exponent(x: Tensor) -> Tensor:
    """floor(log2 x) for x > 0, exact (from frexp)."""
    return torch.frexp(x)[1] - 1


#: OCP MX shared-exponent rules as a transform of the block maximum, after which the quantizer's
#: exact floor(log2) gives the rule's exponent (amax, element mantissa bits) -> amax'
MX_SCALE_ROUNDINGS = {
    # the OCP MX spec: floor(log2 amax)
    "floor": lambda amax, mbits: amax,
    # AMD Quark's "even": amax rounded at the element's mantissa precision first (half up), so a block
    # whose maximum would round to the next binade gets the next exponent: amax + 2^(floor(log2 amax) - mbits - 1)
    "even": lambda amax, mbits: amax + torch.where(
        amax > 0, torch.ldexp(torch.ones_like(amax), _floor_exponent(amax) - mbits - 1), torch.zeros_like(amax)
    ),
    # ceil(log2 amax): amax raised to its power of two
    "ceil": lambda amax, mbits: torch.where(
        amax > 0,
        torch.ldexp(torch.ones_like(amax), _floor_exponent(amax) + (torch.frexp(amax)[0] != 0.5).to(torch.int32)),
        amax,
    ),
}


class MXBlockMax(nn.Module):
    """Block abs-max with AMD Quark 0.13's ``scale_calculation_mode`` applied (see
    :data:`MX_SCALE_ROUNDINGS`). Brevitas' MX quantizers take floor(log2(block max)) for the shared
    exponent (the OCP spec); Quark's default "even" rounds the maximum to the element precision first."""

    def __init__(
        self,
        stats_reduce_dim: int | None = None,
        keepdim: bool = False,
        mx_scale_rounding: str = "floor",
        mx_mantissa_bits: int = 0,
    ) -> None:
        super().__init__()
        self.stats_reduce_dim, self.keepdim = stats_reduce_dim, keepdim
        self.rounding, self.mantissa_bits = MX_SCALE_ROUNDINGS[mx_scale_rounding], mx_mantissa_bits

    def forward(self, x: Tensor) -> Tensor:
        x = x.abs()
        amax = x.max() if self.stats_reduce_dim is None else x.amax(dim=self.stats_reduce_dim, keepdim=self.keepdim)
        return amax + (self.rounding(amax.detach(), self.mantissa_bits) - amax.detach())


class LSQScaling(nn.Module):
    """LSQ's trained scale (Esser et al.; AMD Quark's ``LSQObserver``): a parameter s whose gradient
    is scaled by 1 / sqrt(numel(x) * qmax) as LSQ and Quark do. Brevitas' learned scale
    (``ParameterScaling``) has no gradient scaling, so this small module replaces it; as Brevitas'
    learned scales, it is used as |s| with a sign gradient (Brevitas' ``abs_binary_sign_grad``), plus
    float32's smallest normal, so that it cannot cross zero (Quark adds its eps to s; measured on
    the digits CNN at W2A2, a weight scale trained that way went negative and accuracy fell to chance)."""

    def __init__(self, scaling_init: Tensor | float, lsq_qmax: float) -> None:
        super().__init__()
        self.value = nn.Parameter(torch.as_tensor(scaling_init, dtype=torch.float32).clone().detach())
        self.qmax = float(lsq_qmax)

    def forward(self, x: Tensor, threshold: Tensor | None = None) -> Tensor:
        grad = 1.0 / math.sqrt(x.numel() * self.qmax)
        value = self.value * grad + (self.value - self.value * grad).detach()  # value s, gradient g * ds
        value = abs_binary_sign_grad(value) + torch.finfo(torch.float32).tiny
        return value if threshold is None else value / threshold

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs):
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs)
        if brevitas_config.IGNORE_MISSING_KEYS and prefix + "value" in missing_keys:  # as Brevitas' ParameterScaling
            missing_keys.remove(prefix + "value")

    @property
    def scale(self) -> nn.Parameter:
        """The trained scale, by the name of AMD Quark's ``LSQObserver.scale``."""
        return self.value


LSQObserver.register(LSQScaling)


class UnitIntScaling(nn.Module):
    """Integer threshold 1: the learned value is the scale itself (LSQ)."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, bit_width: Tensor) -> Tensor:
        return torch.ones_like(bit_width)


class FixedIntScaling(nn.Module):
    """A fixed integer threshold ``int_levels`` whatever the bit width: a narrow (ternary) grid's
    levels, which Quark's (2^b - 1) / 2 does not describe (TensorQuant.threshold_levels)."""

    def __init__(self, int_levels: float) -> None:
        super().__init__()
        self.int_levels = float(int_levels)

    def forward(self, bit_width: Tensor) -> Tensor:
        return torch.full_like(bit_width, self.int_levels)


class TQTIntScaling(nn.Module):
    """Integer threshold of TQT: 2^(b-1) for a signed grid, 2^b for an unsigned one."""

    def __init__(self, signed: bool):
        super().__init__()
        self.signed = signed

    def forward(self, bit_width: Tensor) -> Tensor:
        return 2.0 ** (bit_width - 1) if self.signed else 2.0**bit_width


class MXIntScaling(nn.Module):
    """Integer threshold of OCP MXINT elements: 2^(b-2), so that the element scale is
    2^(floor(log2 amax) - (b - 2)) (MXINT8: elements are 2^-6 units). Brevitas' MXInt quantizers
    divide by 2^(b-1), which halves the scale and clips every block maximum."""

    def __init__(self) -> None:
        super().__init__()

    def forward(self, bit_width: Tensor) -> Tensor:
        return 2.0 ** (bit_width - 2)


class Pof2Scale(nn.Module):
    """scale -> 2^round(log2(scale)), with a straight-through gradient in the log domain."""

    def __init__(self) -> None:  # explicit: Brevitas' injector rejects *args/**kwargs
        super().__init__()

    def forward(self, scale: Tensor) -> Tensor:
        return torch.exp2(round_ste(torch.log2(scale)))


class CastScale(nn.Module):
    """scale -> scale rounded to ``scale_dtype`` (float16 / bfloat16 / float32), straight-through
    gradient. A scale outside the type's positive range takes its smallest or largest value
    instead of becoming 0 or inf (which would make every quantized value NaN: float16 tops out
    at 65504, so a tensor of magnitude 1e7 has an int8 scale beyond it)."""

    def __init__(self, scale_dtype: torch.dtype):
        super().__init__()
        self.scale_dtype = scale_dtype
        info = torch.finfo(scale_dtype)
        self.smallest, self.largest = info.tiny * info.eps, info.max  # smallest positive subnormal, largest

    def forward(self, scale: Tensor) -> Tensor:
        cast = scale.to(self.scale_dtype).to(scale.dtype).clamp(min=self.smallest, max=self.largest)
        return cast + (scale - scale.detach())  # the value is exactly ``cast``


class RoundHalfAwayFromZeroSte(nn.Module):
    """Round to nearest, ties away from zero (2.5 -> 3, -2.5 -> -3), straight-through gradient."""

    def __init__(self) -> None:  # explicit: Brevitas' injector rejects *args/**kwargs
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        y = torch.sign(x) * torch.floor(torch.abs(x) + 0.5)
        return x + (y - x).detach()


class RoundHalfUpSte(nn.Module):
    """Round to nearest, ties up: floor(x + 0.5) (2.5 -> 3, -2.5 -> -2), straight-through gradient.
    FINN's MultiThreshold counts x >= (k + 1/2) steps, which is this rounding.

    Exact: floor(x) plus one where x - floor(x) (exact in float32) reaches 1/2. ``floor(x + 0.5)``
    rounds the sum first: 0.5 - 2^-25 (+ 0.5 is halfway between 1 - 2^-24 and 1) gave 1, odd
    integers from 2^23 on the next even one. A near-identity activation (SiLU, GELU) on a grid value
    at a tie gives such values: EfficientNet-B0's SiLU(16) in ONNX Runtime, at scale 32."""

    def __init__(self) -> None:  # explicit: Brevitas' injector rejects *args/**kwargs
        super().__init__()

    def forward(self, x: Tensor) -> Tensor:
        value = x.detach()
        y = torch.floor(value)
        y.add_((value - y).ge_(0.5))  # in place: 2.6 against 5.6 ms per 1M elements out of place
        return x + (y - x).detach()


class ZeroInclusiveMax(nn.Module):
    """max(max(x), 0) along ``stats_reduce_dim``: the range of an unsigned symmetric grid."""

    def __init__(self, stats_reduce_dim: int | None = None, keepdim: bool = False) -> None:
        super().__init__()
        self.stats_reduce_dim, self.keepdim = stats_reduce_dim, keepdim

    def forward(self, x: Tensor) -> Tensor:
        hi = x.max() if self.stats_reduce_dim is None else x.amax(dim=self.stats_reduce_dim, keepdim=self.keepdim)
        return torch.clamp(hi, min=0)


class ZeroInclusiveMinMax(ZeroInclusiveMax):
    """max(max(x), 0) - min(min(x), 0) along ``stats_reduce_dim``: an asymmetric range holding zero."""

    def forward(self, x: Tensor) -> Tensor:
        lo = x.min() if self.stats_reduce_dim is None else x.amin(dim=self.stats_reduce_dim, keepdim=self.keepdim)
        return super().forward(x) - torch.clamp(lo, max=0)


def round_zero_points_half_even(module: nn.Module) -> None:
    """Make every zero point under ``module`` round half to even, whatever its tensor's rounding."""
    for shift in module.modules():
        if isinstance(shift, _ScaleShiftZeroPoint) and not isinstance(shift.int_quant.float_to_int_impl, RoundSte):
            shift.int_quant = copy.deepcopy(shift.int_quant)
            shift.int_quant.float_to_int_impl = RoundSte()


class DynamicScaling(nn.Module):
    """Per-tensor scale from each input over the threshold: max|x| (symmetric signed),
    max(x, 0) (symmetric unsigned) or max(x, 0) - min(x, 0) (asymmetric)."""

    def __init__(
        self,
        symmetric: bool,
        signed: bool,
        restrict_scale_threshold_impl: nn.Module | None = None,
        scaling_min_val: float = 1e-10,
    ):
        super().__init__()
        self.symmetric, self.signed = symmetric, signed
        self.restrict = restrict_scale_threshold_impl if restrict_scale_threshold_impl is not None else nn.Identity()
        self.scaling_min_val = scaling_min_val

    def forward(self, x: Tensor, threshold: Tensor) -> Tensor:
        x = x.detach()
        if self.symmetric and self.signed:
            stat = x.abs().max()
        elif self.symmetric:
            stat = torch.clamp(x.max(), min=0)
        else:
            stat = torch.clamp(x.max(), min=0) - torch.clamp(x.min(), max=0)
        return self.restrict(torch.clamp(stat, min=self.scaling_min_val) / threshold)


class DynamicZeroPoint(nn.Module):
    """Per-tensor zero point from each input: -min(x, 0) / scale, rounded when ``quantize_zero_point``."""

    def __init__(self, int_quant: nn.Module, quantize_zero_point: bool):
        super().__init__()
        self.scale_shift_zero_point = _ScaleShiftZeroPoint(int_quant, quantize_zero_point)

    def forward(self, x: Tensor, scale: Tensor, bit_width: Tensor) -> Tensor:
        return self.scale_shift_zero_point(-torch.clamp(x.detach().min(), max=0), scale, bit_width)


class _TQTScale(torch.autograd.Function):
    """max(2^ceil(v), min_val) / t with ceil straight-through: the gradient Brevitas' chain gives
    (``PowerOfTwoRestrictValue`` with ``CeilSte``, its sign-preserving clamp, the division by t),
    g / t * (2^ceil(v) * ln 2), computed in that order so that it is bit-identical."""

    @staticmethod
    def forward(ctx, log2_threshold: Tensor, int_threshold: Tensor, min_val: float | None) -> Tensor:
        power = torch.pow(2.0, torch.ceil(log2_threshold))
        ctx.save_for_backward(power, int_threshold)
        return (power if min_val is None else torch.clamp_min(power, min_val)) / int_threshold

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, None, None]:
        power, int_threshold = ctx.saved_tensors
        return grad / int_threshold * (power * math.log(2.0)), None, None


class TQTParameterScaling(ParameterScaling):
    """Brevitas' ``ParameterScaling`` as TQT configures it (threshold learned as log2 t, restricted
    to 2^ceil(log2 t), divided by the integer threshold), run as one autograd node.

    Why: Brevitas computes the scale through nine modules and six autograd nodes each forward
    (abs, ceil, power, sign-preserving clamp, division), which measured about 1.7 ms of a 6-conv
    CNN's graph-mode QAT step (14 quantizers), a few percent of the step; the values and gradients
    are those of the chain (tested bit-identical). The parameter, its name and the module tree are
    Brevitas', so checkpoints and every reader of ``scaling_impl.value`` see no difference. Any
    other restriction falls back to Brevitas' forward.
    """

    @functools.cached_property
    def _fused(self) -> tuple[bool, float | None]:
        """(the restrictions are TQT's, the clamp's minimum): read at the first forward."""
        restrict, clamp = self.restrict_clamp_scaling.restrict_value_impl, self.restrict_clamp_scaling.clamp_ste
        fused = (
            isinstance(restrict, PowerOfTwoRestrictValue)
            and isinstance(restrict.float_to_int_impl, CeilSte)
            and isinstance(clamp, (ScalarSignedClampMinSte, Identity))
            and isinstance(self.restrict_clamp_threshold.restrict_value_impl, FloatRestrictValue)
            and isinstance(self.restrict_clamp_scale_threshold.restrict_value_impl, Identity)
        )
        return fused, getattr(clamp, "min_val", None)

    def forward(self, placeholder: Tensor, threshold: Tensor | None = None) -> Tensor:
        fused, min_val = self._fused
        if not fused or threshold is None or threshold.requires_grad or torch.jit.is_tracing():
            return super().forward(placeholder, threshold)
        return _TQTScale.apply(self.value, torch.abs(threshold), min_val)

    @property
    def _log_threshold(self) -> nn.Parameter:
        """The trained log2 of the threshold (the scale is 2^ceil of it over the integer threshold), by the
        name of AMD Quark's ``TQTObserver._log_threshold``."""
        return self.value


TQTObserver.register(TQTParameterScaling)


class Pof2MinMSEStats(nn.Module):
    """AMD Quark's ``PerTensorPowOf2MinMSEObserver`` as a weight's (or bias's) statistic, at every forward:
    the power of two of least squared error among the five around the min-max one
    (``observer.pof2.pof2_mse_scale``), returned as the threshold Quark's integer threshold turns back
    into exactly that scale. Brevitas' MSE statistic searches float scales, not Quark's five powers of two."""

    def __init__(self, pof2_mse_grid: tuple[int, int]) -> None:
        super().__init__()
        self.qmin, self.qmax = pof2_mse_grid
        self.levels = (self.qmax - self.qmin) / 2 if self.qmin < 0 else self.qmax - self.qmin  # QuarkIntScaling's

    def forward(self, x: Tensor) -> Tensor:
        start = pof2(x.detach().abs().max().double() / self.levels)
        best = pof2_mse_scale(x.detach(), start, torch.zeros((), dtype=torch.float64), self.qmin, self.qmax)
        return (best * self.levels).to(x.dtype)


class TQTBias(PerTensorPoTScaling8bit, Int8BiasPerTensorFloatInternalScaling):
    """A bias with its own TQT threshold (AMD Quark's TQT spec on a bias): Brevitas' bias quantizer with
    a learned power-of-two threshold, as TQT's weight quantizer has (``mapping._tqt`` sets the rest;
    the threshold starts from the bias by the spec's observer)."""

    scaling_impl_type = ScalingImplType.PARAMETER


class _Pof2Grid(NamedTuple):
    """An integer grid [qmin, qmax] and the open interval (low, high) of the x / s that round half
    to even onto it: x / s = qmin - 1/2 rounds to qmin when qmin is even (low is then the float32
    just below it), to qmin - 1 when it is odd (low is qmin - 1/2 itself); likewise at qmax."""

    qmin: int
    qmax: int
    low: float
    high: float

    @classmethod
    def of(cls, qmin: int, qmax: int) -> _Pof2Grid:
        def outward(bound: float, direction: float) -> float:
            as32 = functools.partial(torch.tensor, dtype=torch.float32)  # float32's neighbour, whatever the default dtype
            return float(torch.nextafter(as32(bound), as32(direction)))

        low = qmin - 0.5 if qmin % 2 else outward(qmin - 0.5, -math.inf)
        high = qmax + 0.5 if qmax % 2 else outward(qmax + 0.5, math.inf)
        return cls(qmin, qmax, low, high)


#: scales whose grid bounds low * s, high * s are exact float32 numbers (neither overflow nor
#: subnormal) for every grid below 2^23
_EXACT_BOUNDS = (2.0**-100, 2.0**100)


def _in_range(x: Tensor, scale: Tensor, grid: _Pof2Grid) -> Callable[[Tensor], Tensor]:
    """t -> t where round(x / s) lies on the grid, else 0, with what it needs computed once.

    On CPU, one pass of ``hardtanh_backward`` per tensor (it keeps t strictly between its bounds;
    reading s costs nothing there; low * s is exact in float32 for s in ``_EXACT_BOUNDS``, and
    x > low * s exactly when x / s > low, s being a power of two), :func:`_exact_mask` outside
    them. Elsewhere a mask from :func:`_bounds_mask`: no device sync."""
    if x.device.type == "cpu":
        s = float(scale)
        if _EXACT_BOUNDS[0] <= s <= _EXACT_BOUNDS[1]:
            low, high = grid.low * s, grid.high * s
            return lambda t: torch.ops.aten.hardtanh_backward(t, x, low, high)
        mask = _exact_mask(x, scale, grid)
    else:
        mask = _bounds_mask(x, scale, grid)
    return lambda t: t * mask


def _bounds_mask(x: Tensor, scale: Tensor, grid: _Pof2Grid) -> Tensor:
    """x against the grid's bounds times s as float32 tensors. Exact for s in ``_EXACT_BOUNDS``;
    below 2^-125 a tie at the grid's ends may be decided the other way (such a scale's 1/s is at
    most 8 from float32's overflow)."""
    return (x > grid.low * scale) & (x < grid.high * scale)


def _exact_mask(x: Tensor, scale: Tensor, grid: _Pof2Grid) -> Tensor:
    """The definition, round(x / s) compared with the grid: three more passes."""
    r = torch.round(x * torch.reciprocal(scale))
    return (r >= grid.qmin) & (r <= grid.qmax)


class _Pof2FakeQuant(torch.autograd.Function):
    """clamp(round_half_even(x / s), qmin, qmax) * s for a power-of-two scalar s, straight-through.

    Forward: y = clamp(round(x * (1/s))) * s in one new tensor (1/s is exact; rounding, clamping
    and scaling act in place). Backward: d/dx = g where round(x/s) lies on the grid, else 0,
    decided from x against the grid's bounds times s (:class:`_Pof2Grid`), so no mask is kept;
    d/ds = sum(g * (y - x * inside)) / s, i.e. round(x/s) - x/s inside the range and qmin or qmax
    outside (TQT's gradient before the chain rule through 2^ceil(log2 t)). y - x * inside is
    exact (y and x lie within s/2 of each other inside the range) and is summed against g in one
    float32 dot; g . y - g . (x * inside) would cancel two large sums.

    Why this shape: on CPU these operations are memory-bound, and every new tensor is paged in
    afresh, so what costs is passes over memory and new tensors. torch's fake-quantization kernels
    (scalar loops) measured 1.5-2.5x slower than a few float operations, a boolean mask 1.3x; this
    version, one new tensor each way, measured 1.3-1.4x faster per call (forward and backward, 1M
    elements, 2 threads) than the stored-mask chain before it (six new tensors), and a graph-mode
    QAT step took hundreds of page faults or none instead of thousands.
    """

    @staticmethod
    def forward(ctx, x: Tensor, scale: Tensor, grid: _Pof2Grid) -> Tensor:
        y = torch.mul(x, torch.reciprocal(scale))
        y.round_().clamp_(grid.qmin, grid.qmax).mul_(scale)
        ctx.grid = grid
        ctx.save_for_backward(x, y, scale)
        return y

    @staticmethod
    def backward(ctx, grad: Tensor) -> tuple[Tensor, Tensor, None]:
        x, y, scale = ctx.saved_tensors
        inside = _in_range(x, scale, ctx.grid)
        x_inside = inside(x)
        error = torch.sub(y, x_inside, out=x_inside)  # exact: |y - x| <= s / 2 inside the range
        grad_scale = torch.dot(error.reshape(-1), grad.reshape(-1)) / scale
        return inside(grad), grad_scale.reshape(scale.shape), None


class FusedPof2IntQuant(IntQuant):
    """Brevitas' ``IntQuant`` for per-tensor symmetric quantization with power-of-two scales and
    half-even rounding, computed by :class:`_Pof2FakeQuant`.

    Why: the elementwise chain x / s -> round -> clamp -> * s and its backward launch about a
    dozen kernels per tensor, which made a QAT step 1.5x slower than float. The fused kernel
    multiplies by 1/s, exact for a power of two, and rounds half to even, so its output is
    bit-identical to the chain, with the same straight-through gradients. Anything else
    (per-channel scales, a zero point, integer inputs, grids past float32's 24-bit significand)
    takes Brevitas' path.
    """

    def __init__(
        self,
        narrow_range: bool,
        signed: bool,
        input_view_impl: nn.Module,
        float_to_int_impl: nn.Module = RoundSte(),
        tensor_clamp_impl: nn.Module | None = None,
        quant_delay_steps: int = 0,
    ):
        kwargs = {} if tensor_clamp_impl is None else {"tensor_clamp_impl": tensor_clamp_impl}
        super().__init__(narrow_range, signed, input_view_impl, float_to_int_impl, quant_delay_steps=quant_delay_steps, **kwargs)
        self._grid: _Pof2Grid | None = None

    def forward(self, scale: Tensor, zero_point: Tensor, bit_width: Tensor, x: Tensor) -> Tensor:
        if scale.numel() != 1 or zero_point.numel() != 1 or x.dtype != torch.float32 or scale.dtype != torch.float32:
            return super().forward(scale, zero_point, bit_width, x)
        if self._grid is None:  # constant bit width: read once, never a device sync per step
            self._grid = _Pof2Grid.of(int(self.min_int(bit_width)), int(self.max_int(bit_width)))
        if max(-self._grid.qmin, self._grid.qmax) >= 2**23:  # qmax + 1/2 is no longer a float32
            return super().forward(scale, zero_point, bit_width, x)
        y = _Pof2FakeQuant.apply(self.input_view_impl(x), scale.reshape(()), self._grid)
        return self.delay_wrapper(x, y)


class InputGridError(RefusedError):
    """An accumulator-aware layer received an input on another grid than the one its bound was planned for."""


class AccumulatorAwareWeightProxy(DecoupledWeightQuantWithInputProxyFromInjector):
    """Brevitas' A2Q / A2Q+ weight proxy (``DecoupledWeightQuantWithInputProxyFromInjector``) whose
    input bit width and sign come from the plan (``a2q_input_bit_width`` / ``a2q_input_signed`` in
    the injector).

    Why: the L1 bound of A2Q depends on the input's bit width N and sign. Brevitas' proxy reads them
    from the ``IntQuantTensor`` the layer is given at each forward and, without one, from an input
    cached by an earlier inference pass in export mode, else fails ("No cached quant input found").
    Here the input's grid is known before the layer is built (its own input quantizer, or in graph
    mode the site upstream), and there are forwards without a quantized input: calibration runs with
    activation quantization off (the weights must still be those of the deployed model), and
    ``quant_weight()`` without arguments (Brevitas' export handlers, ``freeze``, the tests). So this
    proxy always quantizes with the planned N and sign, and checks that a quantized input it is
    given lies on that grid (another width or sign would break the guarantee): an
    :class:`InputGridError` naming the layer's weight shape and both grids.
    """

    def __init__(self, quant_layer: nn.Module, quant_injector) -> None:
        super().__init__(quant_layer, quant_injector)
        self.input_signed = bool(quant_injector.a2q_input_signed)
        bits = float(quant_injector.a2q_input_bit_width)
        self.register_buffer("input_bit_width", torch.tensor(bits), persistent=False)
        self.accumulator_bit_width = int(quant_injector.accumulator_bit_width)

    def _check_input(self, quant_input: IntQuantTensor, x: Tensor) -> None:
        if torch.jit.is_tracing() or self.export_mode:
            return
        bits, signed = float(quant_input.bit_width), bool(quant_input.signed)
        if (bits, signed) != (float(self.input_bit_width), self.input_signed):
            planned = f"{'int' if self.input_signed else 'uint'}{int(self.input_bit_width)}"
            raise InputGridError(
                f"accumulator-aware weight of shape {tuple(x.shape)} (accumulator {self.accumulator_bit_width} bits) "
                f"was planned for {planned} inputs but received {'int' if signed else 'uint'}{int(bits)}; its L1 "
                "bound holds only for the planned input grid"
            )

    def forward(self, x: Tensor, quant_input: Tensor | IntQuantTensor | None = None) -> Tensor | IntQuantTensor:
        if not self.is_quant_enabled:
            return x
        if isinstance(quant_input, IntQuantTensor):
            self._check_input(quant_input, x)
        impl = self.export_handler if self.export_mode else self.tensor_quant
        out, scale, zero_point, bit_width, _, _ = impl(x, self.input_bit_width, self.input_signed)
        if self.skip_create_quant_tensor:
            return out
        return IntQuantTensor(out, scale, zero_point, bit_width, self.is_signed, self.training)
