"""AMD Quark 0.13's ``DataTypeSpec`` helpers: ``Int8PerTensorSpec(...).to_quantization_spec()`` and the rest.

Each helper is a dataclass with Quark's fields, order and defaults; ``to_quantization_spec()`` builds
the :class:`~quark.torch.quantization.config.config.QuantizationSpec` (``QTensorConfig``) Quark builds,
field for field (``tests/config/test_datatype_specs.py`` compares every helper with what amd-quark 0.13
produces). String fields take Quark's strings: ``observer_method`` ("min_max", "percentile", "MSE" /
"mse", "histogram", "histogrampro"), ``scale_type`` ("float", "power_of_2", "float32", "float16",
"bfloat16", "float8_e5m3"), ``round_method`` ("half_even", "round", "floor"), ``zero_point_type``
("int32", "float32"); an unknown string is an error naming the helper, the field and the allowed
strings. Enum members are accepted too.

Where Quark 0.13's own conversion fails, this one does better, and ``docs/quark013.md`` says so:
``MX6Spec`` / ``MX9Spec`` pass ``block_size`` on as the block (Quark drops it and then refuses the
spec), ``Uint4PerChannelSpec`` with its default ``is_dynamic=None`` gives a static spec (Quark refuses
None), and the base class ``OCP_MXSpec`` says which helper to use (Quark fails inside ``vars()``).

The layout: each helper has Quark's fields, and two class attributes say how they become a spec:
``fixed`` (the spec fields Quark sets whatever the helper holds) and ``renamed`` (helper field ->
spec field, where the names differ). Every other helper field is passed on under its own name,
through the converter of :data:`CONVERTERS` where it is a string field. Helpers that take the same
fields share a private dataclass base that declares them once (``_PerTensorFields``, ...); such a
helper is one line naming its dtype and Quark's defaults where they differ from the base's
(``class Uint4PerTensorSpec(_PerTensorFields, dtype=Dtype.uint4, symmetric=False): ...``, see
``DataTypeSpec.__init_subclass__``). Pure config: no Brevitas.
"""

from __future__ import annotations

from dataclasses import MISSING, dataclass, fields
from typing import Any, ClassVar

from quark.torch.quantization.config.spec import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType, ZeroPointType
from quark.torch.quantization.observer import (
    ObserverBase,
    PerBlockMXDiffsObserver,
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerGroupMinMaxObserver,
    PerTensorHistogramObserver,
    PerTensorHistogramObserverPro,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
    PlaceholderObserver,
)

#: Quark's ``observer_method`` strings (per-tensor helpers); "mse" is accepted beside Quark's "MSE"
OBSERVER_METHODS: dict[str, type[ObserverBase]] = {
    "min_max": PerTensorMinMaxObserver,
    "histogram": PerTensorHistogramObserver,
    "histogrampro": PerTensorHistogramObserverPro,
    "MSE": PerTensorMSEObserver,
    "mse": PerTensorMSEObserver,
    "percentile": PerTensorPercentileObserver,
}
#: Quark's ``scale_type`` strings
SCALE_TYPES: dict[str, ScaleType] = {
    "float32": ScaleType.float32,
    "float16": ScaleType.float16,
    "bfloat16": ScaleType.bfloat16,
    "float": ScaleType.float,
    "power_of_2": ScaleType.pof2,
    "float8_e5m3": ScaleType.float8_e5m3,
}
#: Quark's ``round_method`` strings
ROUND_METHODS: dict[str, RoundType] = {"round": RoundType.round, "floor": RoundType.floor, "half_even": RoundType.half_even}
#: Quark's ``zero_point_type`` strings
ZERO_POINT_TYPES: dict[str, ZeroPointType] = {"int32": ZeroPointType.int32, "float32": ZeroPointType.float32}


def _from_strings(table: dict[str, Any], enum_cls: type | None = None):
    """A converter: None stays None (Quark: "not set"), a string of ``table`` becomes its value, and a
    member of ``enum_cls`` (or an observer class, for ``observer_method``) passes as it is."""

    def convert(owner: str, field: str, value: Any) -> Any:
        if value is None or value == "":
            return None
        if isinstance(value, str) and value in table:
            return table[value]
        if enum_cls is not None and isinstance(value, enum_cls):
            return value
        if enum_cls is None and isinstance(value, type) and issubclass(value, ObserverBase):
            return value
        raise ValueError(f"{owner}.{field}={value!r} is not valid; allowed: {', '.join(map(repr, table))} or None")

    return convert


#: helper field -> converter of its value (Quark's string fields)
CONVERTERS = {
    "observer_method": _from_strings(OBSERVER_METHODS),
    "scale_type": _from_strings(SCALE_TYPES, ScaleType),
    "round_method": _from_strings(ROUND_METHODS, RoundType),
    "zero_point_type": _from_strings(ZERO_POINT_TYPES, ZeroPointType),
}


class DataTypeSpec:
    """Base of the helpers: ``to_quantization_spec()`` builds Quark's ``QTensorConfig`` (see the module)."""

    #: spec fields set whatever the helper holds
    fixed: ClassVar[dict[str, Any]] = {}
    #: helper field -> spec field, where the names differ
    renamed: ClassVar[dict[str, str]] = {"observer_method": "observer_cls"}
    #: helper fields Quark does not pass on, with the only value that means the same here
    unused: ClassVar[dict[str, tuple[Any, str]]] = {}
    #: on a base of helpers that share fields: what each of them fixes beside the dtype it names
    _fixed_beside_dtype: ClassVar[dict[str, Any]] = {}

    def __init_subclass__(cls, dtype: Dtype | None = None, **defaults: Any) -> None:
        """A helper on a base of shared fields is one line, ``class Uint4PerTensorSpec(_PerTensorFields,
        dtype=Dtype.uint4, symmetric=False): ...``: it is made a dataclass whose ``fixed`` is the dtype with
        what the base fixes for all its helpers, and each further keyword is Quark's default of an inherited
        field (as if the field were written again in the class: it keeps its place)."""
        if dtype is None:
            super().__init_subclass__(**defaults)
            return
        super().__init_subclass__()
        cls.fixed = {"dtype": dtype, **cls._fixed_beside_dtype}
        inherited = {f.name: f.type for f in fields(cls)}  # type: ignore[arg-type]
        for name, default in defaults.items():
            if name not in inherited:
                base = cls.__mro__[1].__name__
                raise TypeError(f"{cls.__name__}: {name}={default!r} names no field of {base}")
            cls.__annotations__[name] = inherited[name]
            setattr(cls, name, default)
        dataclass(cls)

    def to_quantization_spec(self) -> QuantizationSpec:
        owner = type(self).__name__
        kwargs = dict(self.fixed)
        for f in fields(self):  # type: ignore[arg-type]
            value = getattr(self, f.name)
            if f.name in self.unused:
                allowed, why = self.unused[f.name]
                if value != allowed:
                    raise ValueError(f"{owner}.{f.name}={value!r} is not valid; allowed: {allowed!r} ({why})")
                continue
            converter = CONVERTERS.get(f.name)
            kwargs[self.renamed.get(f.name, f.name)] = converter(owner, f.name, value) if converter else value
        return QuantizationSpec(**kwargs)


#: Quark's per-group minifloats (``FP8E4M3PerGroupSpec``, ...): abs-max scales per group
_FLOAT_PER_GROUP = {
    "observer_cls": PerBlockMXObserver,
    "symmetric": None,
    "scale_type": ScaleType.float,
    "round_method": RoundType.half_even,
    "qscheme": QSchemeType.per_group,
}


# -- the fields the helpers share, in Quark's order -----------------------------------------------
# A helper on one of these bases is one line (see DataTypeSpec.__init_subclass__): its dtype, and
# Quark's default of a field where it is not the base's. Quark's ``symmetric`` default varies from
# helper to helper without a rule, so each integer helper names it.


@dataclass
class _PerTensorFields(DataTypeSpec):
    """The fields of Quark's per-tensor integer helpers (and of ``FP8E5M2PerTensorSpec``)."""

    observer_method: str | None = "min_max"
    symmetric: bool | None = True
    scale_type: str | None = "float"
    round_method: str | None = "half_even"
    is_dynamic: bool | None = False

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = {"qscheme": QSchemeType.per_tensor}


@dataclass
class _PerChannelFields(DataTypeSpec):
    """The fields of Quark's per-channel helpers."""

    ch_axis: int
    symmetric: bool | None = True
    scale_type: str | None = "float"
    round_method: str | None = "half_even"
    is_dynamic: bool | None = False

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = {
        "observer_cls": PerChannelMinMaxObserver,
        "qscheme": QSchemeType.per_channel,
    }


@dataclass
class _PerGroupFields(DataTypeSpec):
    """The fields of Quark's per-group integer helpers."""

    ch_axis: int
    group_size: int
    symmetric: bool | None = True
    scale_type: str | None = "float"
    round_method: str | None = "half_even"
    is_dynamic: bool | None = False

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = {
        "observer_cls": PerGroupMinMaxObserver,
        "qscheme": QSchemeType.per_group,
    }


@dataclass
class _Int4PerGroupFields(DataTypeSpec):
    """The fields of Quark's 4-bit per-group helpers: ``is_dynamic`` comes before the scale and rounding."""

    ch_axis: int
    group_size: int
    symmetric: bool | None = True
    is_dynamic: bool | None = False
    scale_type: str | None = "float"
    round_method: str | None = "half_even"

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = _PerGroupFields._fixed_beside_dtype


@dataclass
class _FP8PerTensorFields(DataTypeSpec):
    """The fields of Quark's FP8 per-tensor helpers (their symmetry and rounding are fixed)."""

    observer_method: str | None = "min_max"
    scale_type: str | None = None
    is_dynamic: bool | None = False

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = {
        "symmetric": True,
        "round_method": RoundType.half_even,
        "qscheme": QSchemeType.per_tensor,
    }


@dataclass
class _FloatPerGroupFields(DataTypeSpec):
    """The fields of Quark's per-group minifloat helpers."""

    ch_axis: int
    group_size: int
    scale_format: str | None = "float32"
    scale_calculation_mode: str | None = None
    is_dynamic: bool | None = True

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = _FLOAT_PER_GROUP


# -- integers -------------------------------------------------------------------------------------

class Uint4PerTensorSpec(_PerTensorFields, dtype=Dtype.uint4, symmetric=False): ...
class Int4PerTensorSpec(_PerTensorFields, dtype=Dtype.int4, symmetric=True): ...
class Uint8PerTensorSpec(_PerTensorFields, dtype=Dtype.uint8, symmetric=False): ...
class Int8PerTensorSpec(_PerTensorFields, dtype=Dtype.int8, symmetric=True): ...


class Uint4PerChannelSpec(_PerChannelFields, dtype=Dtype.uint4, symmetric=False, is_dynamic=None):
    # is_dynamic=None: Quark 0.13 then refuses its own spec; None is static here
    zero_point_type: str | None = "int32"


class Int3PerChannelSpec(_PerChannelFields, dtype=Dtype.int3, symmetric=False): ...
class Int4PerChannelSpec(_PerChannelFields, dtype=Dtype.int4, symmetric=True): ...
class Uint8PerChannelSpec(_PerChannelFields, dtype=Dtype.uint8, symmetric=True): ...
class Int8PerChannelSpec(_PerChannelFields, dtype=Dtype.int8, symmetric=False): ...
class Int2PerGroupSpec(_PerGroupFields, dtype=Dtype.int2, symmetric=True): ...
class Int3PerGroupSpec(_PerGroupFields, dtype=Dtype.int3, symmetric=True): ...
class Uint4PerGroupSpec(_Int4PerGroupFields, dtype=Dtype.uint4, symmetric=False): ...
class Int4PerGroupSpec(_Int4PerGroupFields, dtype=Dtype.int4, symmetric=True): ...
class Uint8PerGroupSpec(_PerGroupFields, dtype=Dtype.uint8, symmetric=False): ...
class Int8PerGroupSpec(_PerGroupFields, dtype=Dtype.int8, symmetric=True): ...


# -- minifloats -----------------------------------------------------------------------------------

class FP8E4M3PerTensorSpec(_FP8PerTensorFields, dtype=Dtype.fp8_e4m3): ...
class FP8E5M3PerTensorSpec(_FP8PerTensorFields, dtype=Dtype.fp8_e5m3): ...
class FP8E5M2PerTensorSpec(_PerTensorFields, dtype=Dtype.fp8_e5m2, symmetric=True): ...
class FP8E4M3PerChannelSpec(_PerChannelFields, dtype=Dtype.fp8_e4m3, symmetric=True): ...
class FP8E5M2PerChannelSpec(_PerChannelFields, dtype=Dtype.fp8_e5m2, symmetric=True): ...
class FP8E4M3PerGroupSpec(_FloatPerGroupFields, dtype=Dtype.fp8_e4m3): ...
class FP8E5M2PerGroupSpec(_FloatPerGroupFields, dtype=Dtype.fp8_e5m2): ...
class FP6E2M3PerGroupSpec(_FloatPerGroupFields, dtype=Dtype.fp6_e2m3): ...
class FP6E3M2PerGroupSpec(_FloatPerGroupFields, dtype=Dtype.fp6_e3m2): ...


@dataclass
class FP4PerGroupSpec(_FloatPerGroupFields):
    scale_type: str | None = "float"

    fixed: ClassVar[dict[str, Any]] = {
        "dtype": Dtype.fp4,
        **{k: v for k, v in _FLOAT_PER_GROUP.items() if k != "scale_type"},
    }


@dataclass
class AmdFP4Spec(DataTypeSpec):
    """AMD FP4: fp4 elements, per-group scales in an unsigned e5m3 float (refused when applied:
    no e5m3 scale quantizer here)."""

    ch_axis: int
    group_size: int
    is_dynamic: bool = True

    fixed: ClassVar[dict[str, Any]] = {
        "dtype": Dtype.fp4,
        **_FLOAT_PER_GROUP,
        "scale_type": ScaleType.float8_e5m3,
        "scale_format": "e5m3",
        "scale_calculation_mode": None,
    }

    def __post_init__(self) -> None:
        if self.group_size not in (16, 32):
            raise ValueError(f"AmdFP4Spec.group_size={self.group_size!r} is not valid; allowed: 16, 32")


# -- casts ----------------------------------------------------------------------------------------


@dataclass(eq=True)
class Float16Spec(DataTypeSpec):
    fixed: ClassVar[dict[str, Any]] = {"dtype": Dtype.float16, "observer_cls": PlaceholderObserver}


@dataclass(eq=True)
class Bfloat16Spec(DataTypeSpec):
    fixed: ClassVar[dict[str, Any]] = {"dtype": Dtype.bfloat16, "observer_cls": PlaceholderObserver}


# -- OCP MX and block formats ---------------------------------------------------------------------


class OCP_MXSpec(DataTypeSpec):
    """Base of the OCP MX helpers: the element dtype with ``PerBlockMXObserver``, an e8m0 scale per
    block of 32. It names no element type itself: use one of its subclasses."""

    OCP_MX_SPEC_KWARGS: ClassVar[dict[str, Any]] = {
        "observer_cls": PerBlockMXObserver,
        "symmetric": None,
        "scale_type": ScaleType.float,
        "round_method": RoundType.half_even,
        "scale_format": "e8m0",
        "qscheme": QSchemeType.per_group,
        "group_size": 32,
    }

    def to_quantization_spec(self) -> QuantizationSpec:
        if type(self) is OCP_MXSpec:
            helpers = ", ".join(cls.__name__ for cls in OCP_MX_HELPERS)
            raise TypeError(f"OCP_MXSpec is the base of the OCP MX helpers and names no element type; use one of {helpers}")
        return super().to_quantization_spec()


@dataclass
class _OCP_MXFields(OCP_MXSpec):
    """The fields of Quark's OCP MX helpers (``OCP_MXSpec`` itself has none)."""

    ch_axis: int
    is_dynamic: bool = True
    scale_calculation_mode: str = "even"

    _fixed_beside_dtype: ClassVar[dict[str, Any]] = OCP_MXSpec.OCP_MX_SPEC_KWARGS


class OCP_MXFP8E4M3Spec(_OCP_MXFields, dtype=Dtype.fp8_e4m3): ...
class OCP_MXFP8E5M2Spec(_OCP_MXFields, dtype=Dtype.fp8_e5m2): ...
class OCP_MXFP6E3M2Spec(_OCP_MXFields, dtype=Dtype.fp6_e3m2): ...
class OCP_MXFP6E2M3Spec(_OCP_MXFields, dtype=Dtype.fp6_e2m3): ...
class OCP_MXFP4Spec(_OCP_MXFields, dtype=Dtype.fp4): ...


@dataclass
class OCP_MXINT8Spec(_OCP_MXFields):
    """MXINT8, as Quark writes it: ``Dtype.mx`` with ``mx_element_dtype=Dtype.int8`` (Quark passes
    neither an observer nor ``is_dynamic``: its blocks always take their scales at run time)."""

    fixed: ClassVar[dict[str, Any]] = {"dtype": Dtype.mx, "mx_element_dtype": Dtype.int8, "group_size": 32}
    unused: ClassVar[dict[str, tuple[Any, str]]] = {
        "is_dynamic": (True, "MX blocks take their scales from each tensor; Quark does not pass this field on")
    }


@dataclass
class OCP_MXFP4DiffsSpec(DataTypeSpec):
    """Static MXFP4 whose shared exponents Quark searches per block (``PerBlockMXDiffsObserver``;
    refused when applied)."""

    ch_axis: int
    is_dynamic: bool | None = False
    scale_calculation_mode: str | None = "even"

    fixed: ClassVar[dict[str, Any]] = {
        "dtype": Dtype.fp4,
        **OCP_MXSpec.OCP_MX_SPEC_KWARGS,
        "observer_cls": PerBlockMXDiffsObserver,
    }


@dataclass
class _MXBlockFields(DataTypeSpec):
    """The fields of Quark's MX6 / MX9 helpers: ``block_size`` is the spec's ``group_size``."""

    ch_axis: int
    block_size: int
    scale_calculation_mode: str | None = "even"

    renamed: ClassVar[dict[str, str]] = {"block_size": "group_size"}


class MX6Spec(_MXBlockFields, dtype=Dtype.mx6):
    """MX6 (Rouhani et al.): ``block_size`` is the block (16 here; Quark 0.13 drops it and then refuses
    its own spec for the missing ``group_size``)."""


class MX9Spec(_MXBlockFields, dtype=Dtype.mx9):
    """MX9 (Rouhani et al.); ``block_size`` as in :class:`MX6Spec`."""


@dataclass
class BFP16Spec(DataTypeSpec):
    """Block floating point: 8-element blocks sharing an 8-bit exponent, 8-bit signed elements."""

    ch_axis: int
    scale_calculation_mode: str | None = "even"

    fixed: ClassVar[dict[str, Any]] = {"dtype": Dtype.bfp16, "group_size": 8}


# -- two-stage specs -------------------------------------------------------------------------------


@dataclass
class TwoStageSpec:
    """Quark's two-stage specs: ``to_quantization_spec()`` gives a list of two specs, as Quark's does.
    A layer config refuses such a list (no two-stage quantizer here), naming the role."""

    first_stage: Any
    second_stage: Any

    def to_quantization_spec(self) -> list[QuantizationSpec]:
        return [_stage(self.first_stage), _stage(self.second_stage)]


def _stage(stage: Any) -> QuantizationSpec:
    return stage.to_quantization_spec() if isinstance(stage, DataTypeSpec) else stage


@dataclass
class ProgressiveSpec(TwoStageSpec):
    """Quark's progressive quantization: the first stage's output quantized again by the second."""


@dataclass
class ScaleQuantSpec(TwoStageSpec):
    """Quark's scale quantization: the second stage quantizes the first stage's scales
    (``is_scale_quant=True`` on it, as Quark sets)."""

    def to_quantization_spec(self) -> list[QuantizationSpec]:
        first, second = super().to_quantization_spec()
        second.is_scale_quant = True
        return [first, second]


#: the OCP MX helpers (for OCP_MXSpec's message)
OCP_MX_HELPERS: tuple[type[OCP_MXSpec], ...] = (
    OCP_MXFP4Spec,
    OCP_MXFP6E3M2Spec,
    OCP_MXFP6E2M3Spec,
    OCP_MXFP8E4M3Spec,
    OCP_MXFP8E5M2Spec,
    OCP_MXINT8Spec,
)

#: every helper of Quark 0.13, by name, in Quark's order (a line per element type)
DATA_TYPE_SPECS: dict[str, type[DataTypeSpec]] = {
    cls.__name__: cls
    for cls in (
        Uint4PerTensorSpec, Uint4PerChannelSpec, Uint4PerGroupSpec,
        Int2PerGroupSpec,
        Int3PerGroupSpec, Int3PerChannelSpec,
        Int4PerTensorSpec, Int4PerChannelSpec, Int4PerGroupSpec,
        Uint8PerTensorSpec, Uint8PerChannelSpec, Uint8PerGroupSpec,
        Int8PerTensorSpec, Int8PerChannelSpec, Int8PerGroupSpec,
        FP8E4M3PerTensorSpec, FP8E5M3PerTensorSpec, FP8E4M3PerChannelSpec, FP8E4M3PerGroupSpec,
        FP8E5M2PerTensorSpec, FP8E5M2PerChannelSpec, FP8E5M2PerGroupSpec,
        FP4PerGroupSpec, AmdFP4Spec,
        FP6E2M3PerGroupSpec, FP6E3M2PerGroupSpec,
        Float16Spec, Bfloat16Spec,
        OCP_MXSpec, *OCP_MX_HELPERS, OCP_MXFP4DiffsSpec,
        MX6Spec, MX9Spec,
        BFP16Spec,
    )
}

def _describe(helper: type[DataTypeSpec]) -> str:
    """A helper's docstring from what it fixes and what it takes (Quark's, which its dataclass repr hides)."""
    fixed = ", ".join(
        f"{k}={getattr(v, '__name__', None) or (f'{type(v).__name__}.{v.name}' if hasattr(v, 'name') else repr(v))}"
        for k, v in helper.fixed.items()
    )
    taken = ", ".join(
        f"{f.name}" + ("" if f.default is MISSING else f"={f.default!r}") for f in fields(helper)  # type: ignore[arg-type]
    )
    return (
        f"AMD Quark 0.13's ``{helper.__name__}({taken})``: ``to_quantization_spec()`` gives "
        f"``QuantizationSpec({fixed}, ...)`` with the fields it takes."
    )


for _helper in DATA_TYPE_SPECS.values():
    if not (_helper.__doc__ or "").strip() or _helper.__doc__.startswith(f"{_helper.__name__}("):
        _helper.__doc__ = _describe(_helper)

__all__ = [
    "CONVERTERS",
    "DATA_TYPE_SPECS",
    "OCP_MX_HELPERS",
    "AmdFP4Spec",
    "BFP16Spec",
    "Bfloat16Spec",
    "DataTypeSpec",
    "FP4PerGroupSpec",
    "FP6E2M3PerGroupSpec",
    "FP6E3M2PerGroupSpec",
    "FP8E4M3PerChannelSpec",
    "FP8E4M3PerGroupSpec",
    "FP8E4M3PerTensorSpec",
    "FP8E5M2PerChannelSpec",
    "FP8E5M2PerGroupSpec",
    "FP8E5M2PerTensorSpec",
    "FP8E5M3PerTensorSpec",
    "Float16Spec",
    "Int2PerGroupSpec",
    "Int3PerChannelSpec",
    "Int3PerGroupSpec",
    "Int4PerChannelSpec",
    "Int4PerGroupSpec",
    "Int4PerTensorSpec",
    "Int8PerChannelSpec",
    "Int8PerGroupSpec",
    "Int8PerTensorSpec",
    "MX6Spec",
    "MX9Spec",
    "OCP_MXFP4DiffsSpec",
    "OCP_MXFP4Spec",
    "OCP_MXFP6E2M3Spec",
    "OCP_MXFP6E3M2Spec",
    "OCP_MXFP8E4M3Spec",
    "OCP_MXFP8E5M2Spec",
    "OCP_MXINT8Spec",
    "OCP_MXSpec",
    "ProgressiveSpec",
    "ScaleQuantSpec",
    "TwoStageSpec",
    "Uint4PerChannelSpec",
    "Uint4PerGroupSpec",
    "Uint4PerTensorSpec",
    "Uint8PerChannelSpec",
    "Uint8PerGroupSpec",
    "Uint8PerTensorSpec",
]
