"""Enums of AMD Quark's PyTorch quantization config API.

Member names and values follow ``quark.torch.quantization.config.type`` in AMD Quark, so configs
serialised by Quark load here and vice versa; the enums derive from Quark's bases
(:mod:`quark.common.data_type`). Quark 0.13's data-type classes (``Int8``, ``UInt4``, ``FP8_E4M3``,
``MX6``, ``BFP16``, ...) and the lists built on them name torch dtypes: they live in
:mod:`.data_types` and load from here on first use. This module imports nothing but the standard
library.
"""

from __future__ import annotations

from enum import Enum, auto
from typing import Any

from quark.common import data_type
from quark.common.data_type import BaseDtype, BaseQSchemeType, BaseRoundType, BaseScaleType, BaseZeroPointType

__all__ = [
    "DeviceType",
    "Dtype",
    "QSchemeType",
    "QuantFlow",
    "QuantizationMode",
    "RoundType",
    "ScaleType",
    "TQTThresholdInitMeth",
    "ZeroPointType",
]


class QSchemeType(BaseQSchemeType):
    """Granularity of quantization parameters.

    - ``per_tensor``: one scale (and zero point) for the whole tensor.
    - ``per_channel``: one per index of ``ch_axis``.
    - ``per_group``: one per ``group_size`` consecutive elements along ``ch_axis``.
    - ``per_block``: one per 2-D block of ``block_size`` weight elements (Quark >= 0.13); refused
      when a spec is applied (no 2-D block quantizer here), named so that configs using it load.
    """

    per_tensor = "per_tensor"
    per_channel = "per_channel"
    per_group = "per_group"
    per_block = "per_block"


class ZeroPointType(BaseZeroPointType):
    """Type of the zero point of asymmetric quantization: rounded to an integer, or kept as float."""

    int32 = "int32"
    float32 = "float32"


class Dtype(BaseDtype):
    """Element data types.

    Integers: ``int8`` [-128, 127], ``uint8`` [0, 255], ``int16``, ``uint16``, ``int32`` (bias),
    ``int4`` [-8, 7], ``uint4`` [0, 15], ``int3`` [-4, 3], ``int2`` [-2, 1], and beyond Quark's
    list ``uint3`` [0, 7], ``uint2`` [0, 3] (unsigned low-bit activations).
    Floats and block formats: ``bfloat16``, ``float16``, ``fp8_e4m3``, ``fp8_e5m2`` (OCP: max 448
    and 57344), ``fp8_e4m3fnuz``, ``fp8_e5m2fnuz`` (FNUZ: max 240 and 57344; beyond Quark's list),
    ``fp6_e3m2``, ``fp6_e2m3``, ``fp4`` (e2m1; OCP MX element formats, no inf/NaN), ``mx`` (OCP
    microscaling, element type in ``mx_element_dtype``), ``mx6`` / ``mx9`` (shared micro-exponents),
    ``bfp16`` (block floating point: 8-element blocks sharing an 8-bit exponent, 8-bit signed
    elements; AMD Quark 0.13's ``BFP16Spec``), ``fp8_e5m3`` (an unsigned 8-bit float, 5 exponent and
    3 mantissa bits, no sign: AMD Quark 0.13 names it for the scales of ``AmdFP4Spec``; refused as a
    tensor format, see docs/quark013.md).
    Binary and ternary networks, beyond Quark's list: ``bipolar`` (1 bit: {-1, +1} x scale, the sign
    of the tensor; QONNX ``BipolarQuant``, FINN's XNOR-popcount layers), ``ternary`` (2 bits:
    {-1, 0, +1} x scale, a narrow-range int2).
    """

    int8 = "int8"
    uint8 = "uint8"
    int16 = "int16"
    uint16 = "uint16"
    int32 = "int32"
    int4 = "int4"
    uint4 = "uint4"
    int3 = "int3"
    int2 = "int2"
    uint3 = "uint3"  # beyond Quark's enum: unsigned low-bit activations (after ReLU) for FPGAs
    uint2 = "uint2"
    bfloat16 = "bfloat16"
    float16 = "float16"
    fp8_e4m3 = "fp8_e4m3"
    fp8_e5m2 = "fp8_e5m2"
    fp8_e4m3fnuz = "fp8_e4m3fnuz"  # beyond Quark's enum: FNUZ variants (max 240 / 57344)
    fp8_e5m2fnuz = "fp8_e5m2fnuz"
    fp6_e3m2 = "fp6_e3m2"
    fp6_e2m3 = "fp6_e2m3"
    fp4 = "fp4"
    mx = "mx"
    mx6 = "mx6"
    mx9 = "mx9"
    bfp16 = "bfp16"
    fp8_e5m3 = "fp8_e5m3"
    bipolar = "bipolar"  # beyond Quark's enum: binary networks, {-1, +1} x scale
    ternary = "ternary"  # beyond Quark's enum: {-1, 0, +1} x scale

    @property
    def is_integer(self) -> bool:
        return self in _INTEGER_DTYPES

    @property
    def is_block(self) -> bool:
        """Block formats (``mx``, ``mx6``, ``mx9``, ``bfp16``): Quark gives their block as ``ch_axis``
        and ``group_size`` without a ``qscheme``."""
        return self in _BLOCK_DTYPES

    @property
    def bit_width(self) -> int | None:
        """Bits per element for integer dtypes, None for the others."""
        return _INTEGER_DTYPES.get(self, (None, None))[0]

    @property
    def signed(self) -> bool | None:
        """Signedness for integer dtypes, None for the others."""
        return _INTEGER_DTYPES.get(self, (None, None))[1]


# dtype -> (bit width, signed)
_INTEGER_DTYPES = {
    Dtype.int8: (8, True),
    Dtype.uint8: (8, False),
    Dtype.int16: (16, True),
    Dtype.uint16: (16, False),
    Dtype.int32: (32, True),
    Dtype.int4: (4, True),
    Dtype.uint4: (4, False),
    Dtype.int3: (3, True),
    Dtype.int2: (2, True),
    Dtype.uint3: (3, False),
    Dtype.uint2: (2, False),
}

#: block formats: their scales come from each block, the block is (ch_axis, group_size)
_BLOCK_DTYPES = frozenset({Dtype.mx, Dtype.mx6, Dtype.mx9, Dtype.bfp16})

#: AMD Quark 0.13's Dtype members, in its order (this package's extra ones, uint3 ... ternary, are not Quark's)
ALL_DATA_TYPES: list[Dtype] = [
    Dtype(value)
    for value in (
        "int8", "uint8", "uint16", "int16", "int32", "int4", "uint4", "int3", "int2", "uint2", "bfloat16", "float16",
        "fp8_e5m2", "fp8_e4m3", "fp8_e5m3", "fp6_e3m2", "fp6_e2m3", "fp4", "mx", "mx6", "mx9", "bfp16",
    )
]  # fmt: skip
#: Quark's block formats, which have no packed torch dtype
UNSUPPORTED_TYPES: frozenset[str] = frozenset(dtype.value for dtype in _BLOCK_DTYPES)


class ScaleType(BaseScaleType):
    """Representation of scale factors.

    - ``float``: floating point, in the precision of the model.
    - ``pof2``: powers of two, 2^round(log2(s)) as in Quark.
    - ``float32`` / ``float16`` / ``bfloat16``: floating point, stored and applied in that precision.
    - ``float8_e8m0fnu``: an 8-bit exponent, no mantissa: a power of two (the shared scale of OCP MX,
      where it is the same as ``pof2``; Quark 0.13).
    - ``float8_e5m3``: an unsigned 8-bit float (AMD FP4's per-group scales, Quark 0.13); refused when a
      spec is applied (see docs/quark013.md).
    """

    float = "float"
    pof2 = "pof2"
    float32 = "float32"
    float16 = "float16"
    bfloat16 = "bfloat16"
    float8_e5m3 = "float8_e5m3"
    float8_e8m0fnu = "float8_e8m0fnu"


class RoundType(BaseRoundType):
    """Rounding of scaled values to the integer grid.

    - ``round``: to nearest, ties away from zero (C ``round``; 2.5 -> 3, -2.5 -> -3).
    - ``floor``: towards minus infinity (2.5 -> 2, -2.5 -> -3).
    - ``half_even``: to nearest, ties to even (2.5 -> 2, 3.5 -> 4; ONNX QuantizeLinear).
    - ``half_up``: to nearest, ties up, floor(x + 0.5) (2.5 -> 3, -2.5 -> -2): what FINN's
      MultiThreshold computes. Beyond Quark's enum.
    - ``toward_zero``: truncation, sign(x) * floor(|x|) (2.5 -> 2, -2.5 -> -2, -0.5 -> 0): what
      accumulator-aware weights (``A2QSpec``) round with, so that no rounding step raises a weight's
      magnitude past the bound. QONNX ``DOWN``. Beyond Quark's enum.
    """

    round = 2
    floor = 3
    half_even = 8
    half_up = 9  # beyond Quark's enum: FINN's MultiThreshold rounding
    toward_zero = 10  # beyond Quark's enum: A2Q's rounding (Brevitas' RoundToZeroSte)


class DeviceType(Enum):
    """Deployment target.

    - ``CPU``, ``IPU``: as Quark (the IPU is checked at QDQ export).
    - ``FINN``: FPGA dataflow accelerators built by FINN from a QONNX export (checked at QONNX
      export). Beyond Quark's enum.
    - ``HLS4ML``: FPGA firmware written by hls4ml from a QONNX export (HLS C++ in fixed point,
      compiled and checked against torch). Beyond Quark's enum.
    """

    CPU = "cpu"
    IPU = "ipu"
    FINN = "finn"  # beyond Quark's enum
    HLS4ML = "hls4ml"  # beyond Quark's enum


class QuantizationMode(Enum):
    """How the model is rewritten: module swap (eager) or on a traced graph."""

    eager_mode = auto()
    fx_graph_mode = auto()


class QuantFlow(Enum):
    """AMD Quark 0.13's quantization flows. ``standard`` (the model in memory) is this package's only
    one; ``file2file`` (safetensors shards quantized on disk) and ``per_block`` (decoder blocks loaded
    one at a time) serve LLM checkpoints too large for memory and are refused where Quark takes them
    (``ModelQuantizer.direct_quantize_checkpoint``)."""

    standard = auto()
    file2file = auto()
    per_block = auto()


class TQTThresholdInitMeth(Enum):
    """Threshold initialisation of TQT (Jain et al., arXiv 1903.08066, Table 2).

    - ``_3SD``: |mean| + 3 standard deviations of the tensor.
    - ``_LL_J``: Algorithm 1 of Settle et al. (arXiv 1805.07941), the threshold minimising the
      symmetric (Jeffreys) KL divergence. Current Quark spells it ``_KL_J``; both names denote the
      same member.
    """

    _3SD = "_3sd"
    _LL_J = "_kl_j"
    _KL_J = "_kl_j"  # alias of _LL_J (same value), Quark's current spelling


def __getattr__(name: str) -> Any:
    """Quark 0.13's names beyond the enums: the bases of :mod:`quark.common.data_type`, and the
    data-type classes and lists of :mod:`.data_types` (which imports torch), on first use."""
    from quark.torch.quantization.quark013_api import API_NAMES, PROVIDED, refuse

    if API_NAMES[__name__].get(name, ("",))[0] != PROVIDED:
        refuse(__name__, name)
    if hasattr(data_type, name):
        return getattr(data_type, name)
    from quark.torch.quantization.config import data_types

    if name == "TORCH_TO_DTYPE_MAP":  # torch dtype -> Dtype
        return {torch_dtype: Dtype(value) for torch_dtype, value in data_types.TORCH_DTYPE_VALUES.items()}
    return getattr(data_types, name)
