"""The bases of AMD Quark 0.13's config enums and data-type classes, by Quark's names.

``Dtype``, ``QSchemeType``, ``RoundType``, ``ScaleType`` and ``ZeroPointType``
(:mod:`quark.torch.quantization.config.type`) derive from the empty enums here, as in Quark, so that
``isinstance(Dtype.int8, BaseDtype)`` holds. The data-type classes describe a format by its bit width
and representable range (values recorded from amd-quark 0.13); the MicroeXponent ones (MX4 / MX6 /
MX9) by their two block levels. Standard library only.
"""

from __future__ import annotations

from enum import Enum


class BaseDtype(Enum):
    """Base of ``Dtype``."""


class BaseQSchemeType(Enum):
    """Base of ``QSchemeType``."""


class BaseRoundType(Enum):
    """Base of ``RoundType``."""


class BaseScaleType(Enum):
    """Base of ``ScaleType``."""


class BaseZeroPointType(Enum):
    """Base of ``ZeroPointType``."""


class BaseObserverBase:
    """Base of ``ObserverBase``."""


class BaseDataType:
    """A quantization data type: ``bitwidth`` and the range [``min_value``, ``max_value``] (absent for
    the float casts and block formats, as in Quark)."""

    bitwidth: int
    min_value: float | int
    max_value: float | int


class BaseMX(BaseDataType):
    """OCP microscaling (its element type is the spec's ``mx_element_dtype``)."""


class BaseMicroexponent(BaseDataType):
    """MicroeXponent two-level block formats: ``k1`` elements share a ``d1``-bit exponent, ``k2`` of
    them a ``d2``-bit micro-exponent; ``mantissa_bits`` per element (``element_bits`` with the sign);
    ``avg_bits_per_element`` = element_bits + d1 / k1 + d2 / k2, the number in the name; ``bitwidth``
    is the ONNX format selector Quark writes, not a width."""

    k1: int = 16
    k2: int = 2
    d1: int = 8
    d2: int = 1
    mantissa_bits: int
    element_bits: int
    avg_bits_per_element: int


def _data_type(
    name: str, bitwidth: int, lo: float | None = None, hi: float | None = None, base: type = BaseDataType
) -> type:
    attrs: dict = {"bitwidth": bitwidth, "__module__": __name__, "__doc__": f"{name[4:]}: {bitwidth} bits"}
    if lo is not None:
        attrs |= {"min_value": lo, "max_value": hi, "__doc__": f"{name[4:]}: {bitwidth} bits, [{lo}, {hi}]"}
    return type(name, (base,), attrs)


def _microexponent(name: str, bitwidth: int, mantissa_bits: int) -> type:
    attrs = {
        "bitwidth": bitwidth,
        "mantissa_bits": mantissa_bits,
        "element_bits": mantissa_bits + 1,
        "avg_bits_per_element": mantissa_bits + 2,
        "__module__": __name__,
        "__doc__": f"{name[4:]}: {mantissa_bits}-bit mantissas in 16-element blocks",
    }
    return type(name, (BaseMicroexponent,), attrs)


BaseInt2 = _data_type("BaseInt2", 2, -2, 1)
BaseUInt2 = _data_type("BaseUInt2", 2, 0, 3)
BaseInt3 = _data_type("BaseInt3", 3, -4, 3)
BaseInt4 = _data_type("BaseInt4", 4, -8, 7)
BaseUInt4 = _data_type("BaseUInt4", 4, 0, 15)
BaseInt8 = _data_type("BaseInt8", 8, -128, 127)
BaseUInt8 = _data_type("BaseUInt8", 8, 0, 255)
BaseInt16 = _data_type("BaseInt16", 16, -32768, 32767)
BaseUInt16 = _data_type("BaseUInt16", 16, 0, 65535)
BaseInt32 = _data_type("BaseInt32", 32, -(2**31), 2**31 - 1)
BaseUInt32 = _data_type("BaseUInt32", 32, 0, 2**32 - 1)
BaseFloat16 = _data_type("BaseFloat16", 16)
BaseBFloat16 = _data_type("BaseBFloat16", 16)
BaseBFP16 = _data_type("BaseBFP16", 16)
BaseFP8_E5M2 = _data_type("BaseFP8_E5M2", 8, -57344.0, 57344.0)
BaseFP8_E4M3 = _data_type("BaseFP8_E4M3", 8, -448.0, 448.0)
BaseFP8_E5M3 = _data_type("BaseFP8_E5M3", 8, 0.0, 114688.0)
BaseFP6_E3M2 = _data_type("BaseFP6_E3M2", 6, -28.0, 28.0)
BaseFP6_E2M3 = _data_type("BaseFP6_E2M3", 6, -7.5, 7.5)
BaseFP4 = _data_type("BaseFP4", 4, -6.0, 6.0)
BaseMXFP8_E5M2 = _data_type("BaseMXFP8_E5M2", 8, -57344.0, 57344.0)
BaseMXFP8_E4M3 = _data_type("BaseMXFP8_E4M3", 8, -448.0, 448.0)
BaseMXFP6_E3M2 = _data_type("BaseMXFP6_E3M2", 6, -28.0, 28.0)
BaseMXFP6_E2M3 = _data_type("BaseMXFP6_E2M3", 6, -7.5, 7.5)
BaseMXFP4_E2M1 = _data_type("BaseMXFP4_E2M1", 4, -6.0, 6.0)
BaseMXInt8 = _data_type("BaseMXInt8", 8, -128, 127)
BaseMX4 = _microexponent("BaseMX4", 11, 2)
BaseMX6 = _microexponent("BaseMX6", 13, 4)
BaseMX9 = _microexponent("BaseMX9", 16, 7)
