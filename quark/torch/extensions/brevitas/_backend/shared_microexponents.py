"""MX6 / MX9 ("shared microexponents") and AMD's BFP16 as Brevitas quantizer injectors.

Why this module exists: Brevitas 0.13 ships OCP Microscaling (one E8M0 scale per block of 32,
``brevitas.quant.experimental.mx_quant_ocp``) but nothing with a *second*, finer scale level. The
block data representations of Rouhani et al., "With Shared Microexponents, A Little Shifting Goes
a Long Way" (ISCA 2023, arXiv 2302.08007), need two: an 8-bit exponent shared by a block of 16
elements and a 1-bit micro-exponent shared by each pair inside the block. This module supplies
the missing pieces (a tensor-quant module, a block view and two proxy classes) and assembles
them into stock-shaped injectors, :class:`MX6Weight`, :class:`MX6Act`, :class:`MX9Weight`,
:class:`MX9Act`, that plug into ``brevitas.nn.QuantLinear(weight_quant=..., input_quant=...)``,
``QuantConv*`` and ``QuantIdentity`` like any Brevitas quantizer.

Definition implemented (paper, Section 3 / Table 1, BDR parameters (k1, d1, k2, d2, m)):

    MX9 = (16, 8, 2, 1, 7)     MX6 = (16, 8, 2, 1, 4)
    bits per element = 1 (sign) + m + d1 / k1 + d2 / k2      (9 and 6)

For a block x_1..x_k1 of consecutive elements along the reduction axis, split into sub-blocks
(pairs) j of k2 elements:

    E      = clamp(floor(log2(max_i |x_i|)), -(2^(d1-1) - 1), 2^(d1-1) - 1)      shared exponent
             ([-127, 127] for d1 = 8, the E8M0 range; an all-zero block takes -127)
    mu_j   = clamp(E - floor(log2(max_{i in j} |x_i|)), 0, 2^d2 - 1)               micro-exponent
             (d2 = 1: mu_j = 1 exactly when the pair's max |x| < 2^E, i.e. fits one binade
             lower; an all-zero pair takes 2^d2 - 1)
    step_i = 2^(E - mu_j - (m - 1))               element i in sub-block j: 1 integer bit, m - 1
                                                  fraction bits, scaled by 2^(E - mu_j)
    q_i    = clamp(round_half_even(x_i / step_i), -(2^m - 1), 2^m - 1)  sign + m-bit magnitude
    x^_i   = q_i * step_i

BFP16 (AMD Quark 0.13's ``Dtype.bfp16`` / ``BFP16Spec``; AMD's "to_bfp" block floating point) is the
same family with one level, (k1, d1, k2, d2, m) = (8, 8, 8, 0, 7), and two differences that AMD's
definition makes, both options of :class:`SharedMicroexponentFormat`:

- elements are 8-bit two's complement, q in [-2^m, 2^m - 1] = [-128, 127] (``twos_complement``);
- the shared exponent is raised by one where an element would round past the largest code:
  E = floor(log2 max|x|) + 1 if some round_half_even(x_i / 2^(E - m + 1)) > 2^m - 1, else floor(log2
  max|x|) (``exponent_from_rounded``; AMD Quark's emulation ``fake_quantize_bfp16`` does the same,
  reading only the positive side: a value rounding to -128 fits). So a block's maximum never
  saturates, and E is clamped to [-127, 127] as MX6 / MX9's (Quark does not clamp; it differs only
  for blocks whose maximum is below 2^-127 or above 2^127).

Largest magnitude of a block: (2^m - 1) * 2^(E - m + 1) = 2^(E+1) - 2^(E-m+1); of a pair with
mu = 1: (2^m - 1) * 2^(E - m). Values that round past these saturate: the exponents are chosen
from the unrounded maxima (floor(log2 max |x|)) and never bumped after rounding. Rounding is to
nearest with ties to even (the IEEE default, and what AMD Quark's emulations use with
``torch.round`` / rounding_mode 2, see below). Non-finite inputs: NaN and +-inf
are ignored when choosing the exponents (as zeros); NaN stays NaN, +-inf saturates to the
largest magnitude of its pair.

Computed in float32 (float64 for float64 inputs) with exact powers of two built from their bit
patterns, so every step is exact, float32 subnormals included; fp16 / bf16 inputs are computed
in float32 and the result cast back (exact except where the MX grid is finer than the input
format's subnormals). Vectorised: one reshape to (outer, blocks, pairs, k2, inner), two
reductions, no Python loop over blocks. Runs on the tensor's device.

Gradient: straight-through, d x^/d x = 1 everywhere; the exponents and the returned scale carry
no gradient, so QAT trains the float weights.

Layout: blocks run along ``group_dim`` (the reduction axis), which must be a multiple of 16
(no padding: a ``ValueError`` names the shape, the axis and the block size):

- Linear weight [out, in]: axis 1; ConvNd weight [out, in/groups, *k]: axis 1, one block per
  16 input channels *at each kernel tap* (kernel dims are not flattened into the blocks), so a
  weight block meets exactly one activation block in the convolution's dot products;
  ConvTransposeNd weight [in, out/groups, *k]: axis 0.
- activations: the channel axis, last dim for Linear inputs, dim 1 for (batched) conv inputs.

The Brevitas representation: the proxies return a ``GroupwiseIntQuantTensor`` with group_size 16
(the block), integer values q in [-(2^m - 1), 2^m - 1] (bit width m + 1, signed, narrow range)
and a per-element scale step_i (constant over each pair), zero point 0. The activation proxy is
a ``DynamicActQuantProxyFromInjector`` (its scale depends on the input, nothing to calibrate).

Differences from AMD Quark's emulation (``fake_quantize_mx6_mx9`` in
``quark/torch/kernel/hw_emulation/hw_emulation_interface.py``; same E, mu, step and
round-half-even):

- Quark clamps every element to (2^(E+1) - step_i) / step_i, which for a mu = 1 pair is
  2^(m+1) - 1, i.e. no saturation: a pair max just below 2^E rounds to 2^E (integer 2^m, which
  an m-bit magnitude cannot hold). Here it saturates to (2^m - 1) * 2^(E - m).
- Quark reads exponents from the float32 exponent field: every float32 subnormal counts as
  exponent -127, so in a block with E = -127 a pair of values below 2^-127 gets mu = 0 in Quark
  and mu = 1 here (here floor(log2) is exact for subnormals too).
- Quark pads a ragged last block with zeros; here that is an error.
- Quark's ONNX kernel (``BFPPrimeCPUKernel`` in
  ``quark/onnx/operators/custom_ops/src/bfp/cpu/bfp_kernel.cc``, bfp_method "to_bfp_prime",
  bit_width 13 / 16 for MX6 / MX9) additionally flushes float32 subnormal inputs to zero, turns
  a block holding inf or NaN into NaNs, and does not saturate at all (2^(E+1) can come out).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from fractions import Fraction

import torch
from brevitas.inject import ExtendedInjector
from brevitas.inject.enum import FloatToIntImplType, ScalingPerOutputType
from brevitas.proxy.groupwise_int_parameter_quant import GroupwiseWeightQuantProxyFromInjector
from brevitas.proxy.groupwise_int_runtime_quant import GroupwiseActQuantProxyFromInjector
from brevitas.proxy.runtime_quant import DynamicActQuantProxyFromInjector
from dependencies import value
from torch import Tensor, nn

__all__ = [
    "BFP16",
    "FORMATS",
    "MX6",
    "MX9",
    "BFP16Act",
    "BFP16Weight",
    "MX6Act",
    "MX6Weight",
    "MX9Act",
    "MX9Weight",
    "SharedMicroexponentActProxy",
    "SharedMicroexponentBlockView",
    "SharedMicroexponentFormat",
    "SharedMicroexponentQuant",
    "SharedMicroexponentTensorQuant",
    "SharedMicroexponentWeightProxy",
    "shared_microexponent_fake_quant",
    "shared_microexponent_quant",
]


@dataclass(frozen=True)
class SharedMicroexponentFormat:
    """A block data representation with shared micro-exponents, (k1, d1, k2, d2, m) of the paper.

    ``block_size`` (k1) elements share a ``shared_exponent_bits`` (d1) exponent, each
    ``sub_block_size`` (k2) of them a ``micro_exponent_bits`` (d2) micro-exponent; each element
    is a sign bit and a ``mantissa_bits`` (m) magnitude with one integer bit.
    """

    name: str
    block_size: int
    shared_exponent_bits: int
    sub_block_size: int
    micro_exponent_bits: int
    mantissa_bits: int
    #: codes in [-2^m, 2^m - 1] (two's complement) instead of [-(2^m - 1), 2^m - 1]
    twos_complement: bool = False
    #: the shared exponent rises by one where an element would round past the largest code
    exponent_from_rounded: bool = False

    def __post_init__(self) -> None:
        if self.block_size % self.sub_block_size:
            raise ValueError(
                f"{self.name}: sub-block size {self.sub_block_size} does not divide "
                f"block size {self.block_size}"
            )
        sizes = (self.block_size, self.shared_exponent_bits, self.sub_block_size, self.mantissa_bits)
        if min(sizes) < 1 or self.micro_exponent_bits < 0:
            raise ValueError(f"{self.name}: invalid parameters {self}")
        if self.smallest_step_exponent < -149:  # float32 computation: the finest step must be exact
            raise ValueError(
                f"{self.name}: steps down to 2^{self.smallest_step_exponent} are below float32's 2^-149"
            )

    @property
    def emin(self) -> int:
        """Smallest shared exponent: -(2^(d1-1) - 1) (-127 for d1 = 8, E8M0)."""
        return -(2 ** (self.shared_exponent_bits - 1) - 1)

    @property
    def emax(self) -> int:
        """Largest shared exponent: 2^(d1-1) - 1 (127 for d1 = 8)."""
        return 2 ** (self.shared_exponent_bits - 1) - 1

    @property
    def mu_max(self) -> int:
        """Largest micro-exponent: 2^d2 - 1."""
        return 2**self.micro_exponent_bits - 1

    @property
    def max_code(self) -> int:
        """Largest integer magnitude of an element: 2^m - 1."""
        return 2**self.mantissa_bits - 1

    @property
    def min_code(self) -> int:
        """Smallest integer code: -2^m (two's complement) or -(2^m - 1)."""
        return -(2**self.mantissa_bits) if self.twos_complement else -self.max_code

    @property
    def element_bit_width(self) -> int:
        """Bits stored per element: sign + m."""
        return 1 + self.mantissa_bits

    @property
    def bits_per_element(self) -> Fraction:
        """Storage per element including the shared exponents: 1 + m + d1/k1 + d2/k2."""
        return (
            self.element_bit_width
            + Fraction(self.shared_exponent_bits, self.block_size)
            + Fraction(self.micro_exponent_bits, self.sub_block_size)
        )

    @property
    def smallest_step_exponent(self) -> int:
        return self.emin - self.mu_max - (self.mantissa_bits - 1)


#: Table 1 of the paper: MX9 = (16, 8, 2, 1, 7), MX6 = (16, 8, 2, 1, 4)
MX9 = SharedMicroexponentFormat(
    "mx9", block_size=16, shared_exponent_bits=8, sub_block_size=2, micro_exponent_bits=1, mantissa_bits=7
)
MX6 = SharedMicroexponentFormat(
    "mx6", block_size=16, shared_exponent_bits=8, sub_block_size=2, micro_exponent_bits=1, mantissa_bits=4
)
#: AMD's BFP16: 8-element blocks, one 8-bit exponent, 8-bit two's complement elements (see the module)
BFP16 = SharedMicroexponentFormat(
    "bfp16",
    block_size=8,
    shared_exponent_bits=8,
    sub_block_size=8,
    micro_exponent_bits=0,
    mantissa_bits=7,
    twos_complement=True,
    exponent_from_rounded=True,
)
FORMATS: dict[str, SharedMicroexponentFormat] = {"mx6": MX6, "mx9": MX9, "bfp16": BFP16}

#: floor(log2(0)) stand-in: far below any exponent, so mu clamps to its maximum
_ZERO_EXPONENT = -(2**20)


def _reduction_axis(shape: torch.Size, axis: int, fmt: SharedMicroexponentFormat) -> int:
    """``axis`` as a non-negative dim of ``shape``, checked to hold whole blocks."""
    if len(shape) == 0 or not -len(shape) <= axis < len(shape):
        raise ValueError(
            f"{fmt.name} quantization: axis {axis} is not a dimension of a tensor of shape {tuple(shape)} "
            f"(blocks of {fmt.block_size} run along the reduction axis)"
        )
    dim = axis % len(shape)
    if shape[dim] % fmt.block_size:
        raise ValueError(
            f"{fmt.name} quantization: tensor of shape {tuple(shape)} has {shape[dim]} elements along axis "
            f"{axis}, not a multiple of the block size {fmt.block_size}; padding is not supported: "
            f"quantize a layer whose reduction dimension is a multiple of {fmt.block_size}, "
            "or leave this layer unquantized"
        )
    return dim


def _floor_log2(t: Tensor) -> Tensor:
    """floor(log2(t)) as int32, exact (subnormals included); t == 0 gives a very negative number."""
    _, exponent = torch.frexp(t)  # t = mantissa * 2^exponent, mantissa in [0.5, 1)
    return torch.where(t > 0, exponent - 1, torch.full_like(exponent, _ZERO_EXPONENT))


def _pow2(k: Tensor, dtype: torch.dtype) -> Tensor:
    """2^k for integer tensor k, built from the IEEE bit pattern (exact, device-independent)."""
    if dtype == torch.float64:
        return ((k.to(torch.int64) + 1023) << 52).view(torch.float64)
    k = k.to(torch.int32)
    normal = (k + 127).clamp(min=1) << 23
    subnormal = torch.ones_like(k) << (k + 149).clamp(0, 22)
    return torch.where(k >= -126, normal, subnormal).view(torch.float32)


def _quantize(x: Tensor, fmt: SharedMicroexponentFormat, axis: int) -> tuple[Tensor, Tensor]:
    """(x^ in x's shape and dtype, step_i in x's shape and the compute dtype), no gradient."""
    if not x.is_floating_point():
        raise TypeError(f"{fmt.name} quantization needs a floating-point tensor, got {x.dtype}")
    dim = _reduction_axis(x.shape, axis, fmt)
    compute = torch.float64 if x.dtype == torch.float64 else torch.float32
    shape = x.shape
    outer, inner = math.prod(shape[:dim]), math.prod(shape[dim + 1 :])
    k1, k2 = fmt.block_size, fmt.sub_block_size
    xb = x.detach().to(compute).reshape(outer, shape[dim] // k1, k1 // k2, k2, inner)
    magnitude = torch.nan_to_num(xb.abs(), nan=0.0, posinf=0.0)
    pair_max = magnitude.amax(dim=3, keepdim=True)
    block_max = pair_max.amax(dim=2, keepdim=True)
    shared = _floor_log2(block_max).clamp(fmt.emin, fmt.emax)
    if fmt.exponent_from_rounded:  # one binade up where a code would pass the largest (the block's max)
        step = _pow2(shared - (fmt.mantissa_bits - 1), compute)
        past = torch.round(torch.nan_to_num(xb, nan=0.0, posinf=0.0, neginf=0.0) / step) > fmt.max_code
        past = past.any(dim=3, keepdim=True).any(dim=2, keepdim=True)  # per block: (outer, blocks, 1, 1, inner)
        shared = (shared + past.to(shared.dtype)).clamp(fmt.emin, fmt.emax)
    micro = (shared - _floor_log2(pair_max)).clamp(0, fmt.mu_max)
    step = _pow2(shared - micro - (fmt.mantissa_bits - 1), compute)
    codes = torch.round(xb / step).clamp(fmt.min_code, fmt.max_code)  # torch.round: half to even
    out = (codes * step).reshape(shape).to(x.dtype)
    return out, step.expand_as(xb).reshape(shape)


class _SharedMicroexponentSte(torch.autograd.Function):
    """Forward: (x^, step); backward: d x^/d x = 1, the step (exponents) carries no gradient."""

    @staticmethod
    def forward(  # type: ignore[override]
        ctx, x: Tensor, fmt: SharedMicroexponentFormat, axis: int
    ) -> tuple[Tensor, Tensor]:
        out, step = _quantize(x, fmt, axis)
        ctx.mark_non_differentiable(step)
        return out, step

    @staticmethod
    def backward(  # type: ignore[override]
        ctx, grad_out: Tensor, grad_step: Tensor
    ) -> tuple[Tensor, None, None]:
        return grad_out, None, None


def shared_microexponent_fake_quant(
    x: Tensor, fmt: str | SharedMicroexponentFormat, axis: int = -1
) -> Tensor:
    """x quantized to ``fmt`` ("mx6" / "mx9") along ``axis`` and dequantized, straight-through gradient."""
    fmt = _format(fmt)
    return _SharedMicroexponentSte.apply(x, fmt, axis)[0]


def _format(fmt: str | SharedMicroexponentFormat) -> SharedMicroexponentFormat:
    if isinstance(fmt, SharedMicroexponentFormat):
        return fmt
    try:
        return FORMATS[str(fmt).lower()]
    except KeyError:
        raise ValueError(
            f"unknown shared-microexponent format {fmt!r}: expected one of {sorted(FORMATS)}"
        ) from None


class SharedMicroexponentBlockView(nn.Module):
    """x -> view with ``group_dim`` split into (blocks, block_size), Brevitas' groupwise layout."""

    def __init__(self, block_size: int, group_dim: int) -> None:
        super().__init__()
        self.block_size = block_size
        self.group_dim = group_dim

    def forward(self, x: Tensor) -> Tensor:
        dim = self.group_dim % x.dim()
        return x.unflatten(dim, (x.shape[dim] // self.block_size, self.block_size))


class SharedMicroexponentTensorQuant(nn.Module):
    """Brevitas ``tensor_quant``: x -> (x^, step, 0, m + 1), x^ and step in the grouped view.

    Shaped like ``brevitas.core.quant.int.RescalingIntQuant``'s output (value, scale, zero
    point, bit width) with the groupwise layout of Brevitas' MX quantizers: value and scale are
    viewed as [..., blocks, 16, ...] at ``group_dim`` (the per-element scale is constant over
    each pair). The format and group_dim are resolved by name from the injector.
    """

    def __init__(self, shared_microexponent_format: SharedMicroexponentFormat, group_dim: int) -> None:
        super().__init__()
        self.fmt = shared_microexponent_format
        self.group_dim = int(group_dim)
        self.input_view_impl = SharedMicroexponentBlockView(self.fmt.block_size, self.group_dim)
        self.register_buffer("bit_width", torch.tensor(float(self.fmt.element_bit_width)), persistent=False)
        self.register_buffer("zero_point", torch.tensor(0.0), persistent=False)

    def forward(self, x: Tensor) -> tuple[Tensor, Tensor, Tensor, Tensor]:
        out, step = _SharedMicroexponentSte.apply(x, self.fmt, self.group_dim)
        return (
            self.input_view_impl(out),
            self.input_view_impl(step),
            self.zero_point.to(device=x.device, dtype=step.dtype),
            self.bit_width.to(x.device),
        )

    def extra_repr(self) -> str:
        return f"format={self.fmt.name}, group_dim={self.group_dim}"


class _ViewFromTensorQuant:
    @property
    def input_view_impl(self) -> nn.Module:
        tensor_quant = self._shared_microexponent_tensor_quant()
        return tensor_quant.input_view_impl if tensor_quant is not None else nn.Identity()

    @property
    def shared_microexponent_format(self) -> SharedMicroexponentFormat:
        return self.quant_injector.shared_microexponent_format


class SharedMicroexponentWeightProxy(_ViewFromTensorQuant, GroupwiseWeightQuantProxyFromInjector):
    """Brevitas' groupwise weight proxy (a ``WeightQuantProxyFromInjector``) for MX6 / MX9."""

    def _shared_microexponent_tensor_quant(self) -> SharedMicroexponentTensorQuant | None:
        return self.tensor_quant


class SharedMicroexponentActProxy(
    _ViewFromTensorQuant, GroupwiseActQuantProxyFromInjector, DynamicActQuantProxyFromInjector
):
    """Brevitas' groupwise activation proxy (an ``ActQuantProxyFromInjector``), dynamic: the
    exponents come from each input, so ``scale()`` raises and calibration skips it."""

    def _shared_microexponent_tensor_quant(self) -> SharedMicroexponentTensorQuant | None:
        fused = self.fused_activation_quant_proxy
        return fused.tensor_quant if fused is not None else None


class SharedMicroexponentQuant(ExtendedInjector):
    """Base injector of the shared-microexponent family; subclasses set the format and role.

    Format parameters (k1, d1, k2, d2, m) are the attributes ``block_size``,
    ``shared_exponent_bit_width``, ``sub_block_size``, ``micro_exponent_bit_width``,
    ``mantissa_bit_width``; ``group_dim`` is the reduction axis. See the module docstring for
    the format definition.
    """

    tensor_quant = SharedMicroexponentTensorQuant
    signed = True
    narrow_range = True  # integer magnitudes 0 .. 2^m - 1 on both sides of zero
    float_to_int_impl_type = FloatToIntImplType.ROUND  # half to even
    scaling_per_output = ScalingPerOutputType.GROUP
    scaling_per_output_type = ScalingPerOutputType.GROUP
    block_size = 16
    shared_exponent_bit_width = 8
    sub_block_size = 2
    micro_exponent_bit_width = 1

    @value
    def group_size(block_size):
        return block_size

    @value
    def bit_width(mantissa_bit_width):
        return mantissa_bit_width + 1

    twos_complement = False
    exponent_from_rounded = False

    @value
    def shared_microexponent_format(
        shared_microexponent_name,
        block_size,
        shared_exponent_bit_width,
        sub_block_size,
        micro_exponent_bit_width,
        mantissa_bit_width,
        twos_complement,
        exponent_from_rounded,
    ):
        return SharedMicroexponentFormat(
            shared_microexponent_name,
            block_size,
            shared_exponent_bit_width,
            sub_block_size,
            micro_exponent_bit_width,
            mantissa_bit_width,
            twos_complement,
            exponent_from_rounded,
        )


_CONV_LAYERS = (nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def _first_module(module):
    return module[0] if isinstance(module, tuple) else module


class _WeightRole(ExtendedInjector):
    proxy_class = SharedMicroexponentWeightProxy

    @value
    def group_dim(module):
        """Weight reduction axis: input channels, dim 1 (dim 0 for transposed convolutions)."""
        return 0 if getattr(_first_module(module), "transposed", False) else 1


class _ActRole(ExtendedInjector):
    proxy_class = SharedMicroexponentActProxy

    @value
    def group_dim(module=None):
        """Activation reduction axis: the last dim for Linear inputs, dim 1 for batched conv inputs."""
        layer = _first_module(module)
        if isinstance(layer, nn.Linear):
            return -1
        if isinstance(layer, _CONV_LAYERS):
            return 1
        raise RuntimeError(
            f"shared-microexponent activation quantizer on {type(layer).__name__}: cannot tell the reduction "
            "axis; use shared_microexponent_quant(fmt, 'act', axis=...)"
        )


class _MX6Format(ExtendedInjector):
    shared_microexponent_name = "mx6"
    mantissa_bit_width = 4


class _MX9Format(ExtendedInjector):
    shared_microexponent_name = "mx9"
    mantissa_bit_width = 7


class _BFP16Format(ExtendedInjector):
    shared_microexponent_name = "bfp16"
    mantissa_bit_width = 7
    block_size = 8
    sub_block_size = 8
    micro_exponent_bit_width = 0
    twos_complement = True
    exponent_from_rounded = True
    narrow_range = False  # codes -128 .. 127


class MX6Weight(_WeightRole, _MX6Format, SharedMicroexponentQuant):
    """MX6 weights: blocks of 16 along the input channels share an 8-bit exponent E, pairs a
    1-bit micro-exponent mu, each element is a sign and a 4-bit magnitude:
    x^ = clamp(round_half_even(x / 2^(E - mu - 3)), -15, 15) * 2^(E - mu - 3), with
    E = floor(log2 max_block |x|) in [-127, 127] and mu = 1 iff the pair's max |x| < 2^E.
    6 bits per element. Reduction axis: dim 1 of Linear / conv weights (0 for transposed)."""


class MX6Act(_ActRole, _MX6Format, SharedMicroexponentQuant):
    """MX6 activations (format as :class:`MX6Weight`), exponents from each input at run time;
    blocks along the last dim of Linear inputs and dim 1 of conv inputs."""


class MX9Weight(_WeightRole, _MX9Format, SharedMicroexponentQuant):
    """MX9 weights: blocks of 16 along the input channels share an 8-bit exponent E, pairs a
    1-bit micro-exponent mu, each element is a sign and a 7-bit magnitude:
    x^ = clamp(round_half_even(x / 2^(E - mu - 6)), -127, 127) * 2^(E - mu - 6), with
    E = floor(log2 max_block |x|) in [-127, 127] and mu = 1 iff the pair's max |x| < 2^E.
    9 bits per element. Reduction axis: dim 1 of Linear / conv weights (0 for transposed)."""


class MX9Act(_ActRole, _MX9Format, SharedMicroexponentQuant):
    """MX9 activations (format as :class:`MX9Weight`), exponents from each input at run time;
    blocks along the last dim of Linear inputs and dim 1 of conv inputs."""


class BFP16Weight(_WeightRole, _BFP16Format, SharedMicroexponentQuant):
    """BFP16 weights: blocks of 8 along the input channels share an 8-bit exponent E, each element is
    an 8-bit two's complement integer: x^ = clamp(round_half_even(x / 2^(E - 6)), -128, 127) * 2^(E - 6),
    with E = floor(log2 max_block |x|), one more where an element would round past 127, in [-127, 127].
    9 bits per element. Reduction axis as :class:`MX6Weight`."""


class BFP16Act(_ActRole, _BFP16Format, SharedMicroexponentQuant):
    """BFP16 activations (format as :class:`BFP16Weight`), the exponents from each input at run time."""


_INJECTORS = {
    ("bfp16", "weight"): BFP16Weight,
    ("bfp16", "act"): BFP16Act,
    ("mx6", "weight"): MX6Weight,
    ("mx6", "act"): MX6Act,
    ("mx9", "weight"): MX9Weight,
    ("mx9", "act"): MX9Act,
}


def shared_microexponent_quant(fmt: str, role: str, axis: int | None = -1):
    """Injector for ``fmt`` ("mx6" / "mx9") and ``role`` ("weight" / "act") with blocks along ``axis``.

    ``axis`` is the reduction axis of the tensor the quantizer sees: 1 or -1 for a Linear weight
    [out, in], 1 for a ConvNd weight [out, in, *k] (blocks of 16 input channels at each kernel
    tap), 0 for a ConvTransposeNd weight; -1 for Linear inputs, 1 for conv inputs. ``None``
    infers it from the layer the quantizer is attached to (as :class:`MX6Weight` etc. do).
    """
    key = (str(fmt).lower(), str(role).lower())
    if key[0] not in FORMATS:
        raise ValueError(f"unknown shared-microexponent format {fmt!r}: expected one of {sorted(FORMATS)}")
    if key not in _INJECTORS:
        raise ValueError(f"unknown quantizer role {role!r}: expected 'weight' or 'act'")
    injector = _INJECTORS[key]
    if axis is None:
        return injector
    if not isinstance(axis, int) or isinstance(axis, bool):
        raise TypeError(f"axis must be an int or None, got {axis!r}")
    return injector.let(group_dim=axis)
