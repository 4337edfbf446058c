"""AMD Quark 0.13's data-type classes of ``quark.torch.quantization.config.type``, by its names.

Each class is its ``quark.common.data_type`` base (bit width, range) with the torch dtype Quark packs
the format's values into for export (``torch_packed_dtype``; absent for the block formats, as in
Quark). ``SUPPORT_DATA_TYPE`` lists the classes. Values recorded from amd-quark 0.13. They describe formats; the numerics are ``config_reference.md``'s.
"""

from __future__ import annotations

import torch

from quark.common import data_type as base

#: Quark 0.13 class name -> (its base, torch_packed_dtype or None), in Quark's order
_CLASSES: dict[str, tuple[type, torch.dtype | None]] = {
    "Int8": (base.BaseInt8, torch.int8),
    "UInt8": (base.BaseUInt8, torch.uint8),
    "UInt16": (base.BaseUInt16, torch.int16),
    "Int16": (base.BaseInt16, torch.int16),
    "Int32": (base.BaseInt32, torch.int32),
    "UInt32": (base.BaseUInt32, torch.uint32),
    "Int4": (base.BaseInt4, torch.int32),
    "UInt4": (base.BaseUInt4, torch.int32),
    "Int3": (base.BaseInt3, torch.uint8),
    "Int2": (base.BaseInt2, torch.int32),
    "UInt2": (base.BaseUInt2, torch.uint8),
    "BFloat16": (base.BaseBFloat16, torch.bfloat16),
    "Float16": (base.BaseFloat16, torch.float16),
    "FP8_E5M2": (base.BaseFP8_E5M2, torch.float8_e5m2),
    "FP8_E4M3": (base.BaseFP8_E4M3, torch.float8_e4m3fn),
    "FP8_E5M3": (base.BaseFP8_E5M3, torch.uint8),
    "FP6_E3M2": (base.BaseFP6_E3M2, torch.uint8),
    "FP6_E2M3": (base.BaseFP6_E2M3, torch.uint8),
    "FP4": (base.BaseFP4, torch.uint8),
    "MX": (base.BaseMX, None),
    "MX6": (base.BaseMX6, None),
    "MX9": (base.BaseMX9, None),
    "BFP16": (base.BaseBFP16, None),
}


def _make(name: str, parent: type, packed: torch.dtype | None) -> type:
    attrs = {"__module__": "quark.torch.quantization.config.type", "__doc__": parent.__doc__}
    if packed is not None:
        attrs["torch_packed_dtype"] = packed
    return type(name, (parent,), attrs)


_MADE = {name: _make(name, parent, packed) for name, (parent, packed) in _CLASSES.items()}
globals().update(_MADE)  # Int8, UInt8, ... as module attributes, by Quark's names

#: Quark's data-type classes, in its order
SUPPORT_DATA_TYPE: list[type] = list(_MADE.values())

#: torch dtype -> the value of the ``Dtype`` whose values it holds (``config.type`` makes Quark's
#: ``TORCH_TO_DTYPE_MAP`` of it: this module imports no config module)
TORCH_DTYPE_VALUES: dict[torch.dtype, str] = {
    torch.int32: "int32",
    torch.int16: "int16",
    torch.uint16: "uint16",
    torch.int8: "int8",
    torch.uint8: "uint8",
    torch.bfloat16: "bfloat16",
    torch.float16: "float16",
    torch.float8_e4m3fn: "fp8_e4m3",
    torch.float8_e5m2: "fp8_e5m2",
}

__all__ = [*_CLASSES, "SUPPORT_DATA_TYPE", "TORCH_DTYPE_VALUES"]  # noqa: PLE0604  (the class names)
