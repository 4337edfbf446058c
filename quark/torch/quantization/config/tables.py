"""AMD Quark 0.13's module-level tables of ``config.config``, by its names and with its values.

The string tables of the ``DataTypeSpec`` helpers (``SCALE_TYPE_MAP``, ...; this package's own,
:mod:`.datatype_specs`, also take ``"mse"``) and Quark's lookups on them (``get_scale_type("float")``:
None for None or "", a ValueError naming the allowed strings for an unknown one); the dtype lists
Quark's verification reads and its map of layer types by name.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn

from quark.torch.quantization.config.datatype_specs import (
    OBSERVER_METHODS,
    ROUND_METHODS,
    SCALE_TYPES,
    ZERO_POINT_TYPES,
)
from quark.torch.quantization.config.type import Dtype

PER_TENSOR_OBSERVER_METHOD_MAP = {name: cls for name, cls in OBSERVER_METHODS.items() if name != "mse"}
SCALE_TYPE_MAP = dict(SCALE_TYPES)
ROUND_METHOD_MAP = dict(ROUND_METHODS)
ZERO_POINT_TYPE_MAP = dict(ZERO_POINT_TYPES)

#: the MicroeXponent dtypes and their block size k1
MICROEXPONENT_DTYPES = {Dtype.mx6: 16, Dtype.mx9: 16}
#: dtypes that are casts (no scale): PlaceholderObserver's
ONLY_DTYPE_CHANGE = [Dtype.bfloat16, Dtype.float16]
#: block formats whose scale is not a calibrated one
USING_NON_SCALED_QUANT = [Dtype.mx, Dtype.mx6, Dtype.mx9, Dtype.bfp16]
#: the layer types Quark's ``Config.from_dict`` takes by name (this package takes any class name)
QUARK_LAYER_TYPES = {"Conv2d": nn.Conv2d, "Linear": nn.Linear, "ConvTranspose2d": nn.ConvTranspose2d}


def _lookup(table: dict[str, Any], field: str, name: str) -> Callable[[str | None], Any]:
    def get(value: str | None = None) -> Any:
        if not value:
            return None
        if value not in table:
            raise ValueError(f"{field}={value!r} is not valid; allowed: {', '.join(map(repr, table))}")
        return table[value]

    get.__name__ = get.__qualname__ = name
    get.__doc__ = f"Quark's lookup of a ``{field}`` string: None for None or '', else its value in the table."
    return get


get_per_tensor_observer = _lookup(
    PER_TENSOR_OBSERVER_METHOD_MAP, "observer_method", "get_per_tensor_observer"
)
get_scale_type = _lookup(SCALE_TYPE_MAP, "scale_type", "get_scale_type")
get_round_method = _lookup(ROUND_METHOD_MAP, "round_method", "get_round_method")
get_zero_point_type = _lookup(ZERO_POINT_TYPE_MAP, "zero_point_type", "get_zero_point_type")

__all__ = [
    "MICROEXPONENT_DTYPES",
    "ONLY_DTYPE_CHANGE",
    "PER_TENSOR_OBSERVER_METHOD_MAP",
    "QUARK_LAYER_TYPES",
    "ROUND_METHOD_MAP",
    "SCALE_TYPE_MAP",
    "USING_NON_SCALED_QUANT",
    "ZERO_POINT_TYPE_MAP",
    "get_per_tensor_observer",
    "get_round_method",
    "get_scale_type",
    "get_zero_point_type",
]
