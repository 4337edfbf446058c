"""Enum members of quark.torch.quantization.config.type: names and values as in AMD Quark."""

from __future__ import annotations

import pytest

from quark.torch.quantization.config import type as qtype
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)

# enum -> {name: value}; the full, ordered member list (aliases excluded).
EXPECTED = {
    QSchemeType: {"per_tensor": "per_tensor", "per_channel": "per_channel", "per_group": "per_group", "per_block": "per_block"},
    ZeroPointType: {"int32": "int32", "float32": "float32"},
    Dtype: {
        n: n
        for n in (
            "int8",
            "uint8",
            "int16",
            "uint16",
            "int32",
            "int4",
            "uint4",
            "int3",
            "int2",
            "uint3",
            "uint2",
            "bfloat16",
            "float16",
            "fp8_e4m3",
            "fp8_e5m2",
            "fp8_e4m3fnuz",
            "fp8_e5m2fnuz",
            "fp6_e3m2",
            "fp6_e2m3",
            "fp4",
            "mx",
            "mx6",
            "mx9",
            "bfp16",
            "fp8_e5m3",
            "bipolar",
            "ternary",
        )
    },
    ScaleType: {
        "float": "float",
        "pof2": "pof2",
        "float32": "float32",
        "float16": "float16",
        "bfloat16": "bfloat16",
        "float8_e5m3": "float8_e5m3",
        "float8_e8m0fnu": "float8_e8m0fnu",
    },
    RoundType: {"round": 2, "floor": 3, "half_even": 8, "half_up": 9, "toward_zero": 10},
    DeviceType: {"CPU": "cpu", "IPU": "ipu", "FINN": "finn", "HLS4ML": "hls4ml"},
}


@pytest.mark.parametrize("enum_cls", list(EXPECTED), ids=lambda c: c.__name__)
def test_members_names_and_values(enum_cls):
    assert {m.name: m.value for m in enum_cls} == EXPECTED[enum_cls]
    # declaration order is part of the API (allowed-values lists are printed in it)
    assert [m.name for m in enum_cls] == list(EXPECTED[enum_cls])


@pytest.mark.parametrize(
    "enum_cls,name,value",
    [(cls, n, v) for cls, members in EXPECTED.items() for n, v in members.items()],
    ids=lambda x: x.__name__ if isinstance(x, type) else str(x),
)
def test_lookup_by_name_and_value(enum_cls, name, value):
    assert enum_cls[name] is enum_cls(value)
    assert getattr(enum_cls, name).value == value


def test_round_type_values_are_quark_integers():
    assert RoundType.round.value == 2
    assert RoundType.floor.value == 3
    assert RoundType.half_even.value == 8
    assert RoundType(8) is RoundType.half_even
    with pytest.raises(ValueError):
        RoundType(1)


def test_quantization_mode_members():
    assert [m.name for m in QuantizationMode] == ["eager_mode", "fx_graph_mode"]
    assert QuantizationMode.eager_mode is not QuantizationMode.fx_graph_mode
    assert QuantizationMode.eager_mode.value != QuantizationMode.fx_graph_mode.value


def test_tqt_threshold_members_and_alias():
    assert TQTThresholdInitMeth._KL_J is TQTThresholdInitMeth._LL_J
    assert TQTThresholdInitMeth["_KL_J"] is TQTThresholdInitMeth["_LL_J"]
    assert TQTThresholdInitMeth._3SD is not TQTThresholdInitMeth._LL_J
    # iteration yields canonical members only; the alias is in __members__
    assert [m.name for m in TQTThresholdInitMeth] == ["_3SD", "_LL_J"]
    assert set(TQTThresholdInitMeth.__members__) == {"_3SD", "_LL_J", "_KL_J"}
    assert TQTThresholdInitMeth("_kl_j") is TQTThresholdInitMeth._KL_J
    assert TQTThresholdInitMeth("_3sd") is TQTThresholdInitMeth._3SD


def test_dtype_no_duplicate_values():
    values = [m.value for m in Dtype]
    assert len(values) == len(set(values)) == 27


@pytest.mark.parametrize(
    "dtype,bits,signed",
    [
        (Dtype.int8, 8, True),
        (Dtype.uint8, 8, False),
        (Dtype.int16, 16, True),
        (Dtype.uint16, 16, False),
        (Dtype.int32, 32, True),
        (Dtype.int4, 4, True),
        (Dtype.uint4, 4, False),
        (Dtype.int3, 3, True),
        (Dtype.int2, 2, True),
        (Dtype.uint3, 3, False),
        (Dtype.uint2, 2, False),
    ],
)
def test_integer_dtype_properties(dtype, bits, signed):
    assert dtype.is_integer
    assert dtype.bit_width == bits
    assert dtype.signed is signed


@pytest.mark.parametrize("dtype", [d for d in Dtype if not d.name.startswith(("int", "uint"))])
def test_non_integer_dtype_properties(dtype):
    assert not dtype.is_integer
    assert dtype.bit_width is None
    assert dtype.signed is None


def test_all_exports_exist():
    assert set(qtype.__all__) == {
        "QSchemeType",
        "ZeroPointType",
        "Dtype",
        "ScaleType",
        "RoundType",
        "DeviceType",
        "QuantizationMode",
        "QuantFlow",
        "TQTThresholdInitMeth",
    }
    for name in qtype.__all__:
        assert hasattr(qtype, name)
