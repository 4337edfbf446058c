"""AMD Quark 0.13's DataTypeSpec helpers build the QuantizationSpec Quark builds, field for field.

The expected specs are the facts recorded by running amd-quark 0.13 (each helper instantiated with
``ch_axis=0`` / ``group_size=32`` where required, ``.to_quantization_spec()`` called), kept verbatim in
``tests/_reference/quark013_datatype_specs.md``; every row is a case, and every helper has a row.
Where Quark's own conversion fails, this package's documented choice is checked instead.
"""

from __future__ import annotations

import re
from dataclasses import fields
from pathlib import Path

import pytest

import quark.torch.quantization as package
from quark.torch.quantization.config import config as config_module
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.datatype_specs import DATA_TYPE_SPECS
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType, ZeroPointType
from quark.torch.quantization.observer import OBSERVERS

TABLE = Path(__file__).resolve().parents[1] / "_reference" / "quark013_datatype_specs.md"
ENUMS = {"Dtype": Dtype, "QSchemeType": QSchemeType, "RoundType": RoundType, "ScaleType": ScaleType, "ZeroPointType": ZeroPointType}


def _value(text: str):
    text = text.strip()
    if text in ("True", "False"):
        return text == "True"
    if re.fullmatch(r"-?\d+", text):
        return int(text)
    if text.startswith("'"):
        return text.strip("'")
    if "." in text:
        enum, member = text.split(".")
        return ENUMS[enum][member]
    return OBSERVERS[text]  # an observer class, by name


def _rows() -> dict[str, tuple[str, str]]:
    rows = {}
    for line in TABLE.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`"):
            rows[cells[0].strip("`")] = (cells[1], cells[2])
    return rows


ROWS = _rows()


def _required(helper: type) -> dict:
    """The required fields as the table's facts were taken: ch_axis=0, group_size=32."""
    given = {"ch_axis": 0, "group_size": 32, "block_size": 16}
    return {f.name: given[f.name] for f in fields(helper) if f.name in given and "(required)" in ROWS[helper.__name__][0]}


#: where amd-quark 0.13's conversion fails, what this package does instead (docs/quark013.md)
BETTER_THAN_QUARK = {
    # block_size is the block; Quark drops it and refuses group_size=None
    "MX6Spec": {"dtype": Dtype.mx6, "ch_axis": 0, "group_size": 16, "scale_calculation_mode": "even"},
    "MX9Spec": {"dtype": Dtype.mx9, "ch_axis": 0, "group_size": 16, "scale_calculation_mode": "even"},
    # is_dynamic=None (the helper's default) is a static spec; Quark refuses None
    "Uint4PerChannelSpec": {
        "dtype": Dtype.uint4,
        "observer_cls": OBSERVERS["PerChannelMinMaxObserver"],
        "qscheme": QSchemeType.per_channel,
        "ch_axis": 0,
        "symmetric": False,
        "round_method": RoundType.half_even,
        "scale_type": ScaleType.float,
    },
}


def _expected(cell: str) -> dict:
    return {k.strip(): _value(v) for k, v in (item.split("=", 1) for item in cell.split(", "))}


def test_every_helper_has_a_row_and_every_row_a_helper():
    assert set(DATA_TYPE_SPECS) == set(ROWS)


#: what every spec of amd-quark 0.13 holds besides the helper's own fields
QUARK_DEFAULTS = {"zero_point_type": ZeroPointType.int32, "is_scale_quant": False, "enable_buffer_reuse": False, "max_input_numel": 4194304}


@pytest.mark.parametrize("name", sorted(ROWS))
def test_helper_builds_quarks_spec(name):
    helper = DATA_TYPE_SPECS[name]
    _, result = ROWS[name]
    if name == "OCP_MXSpec":  # Quark fails inside vars(); here the error says which helper to use
        assert result.startswith("error:")
        with pytest.raises(TypeError, match="OCP_MXSpec is the base of the OCP MX helpers.*OCP_MXFP4Spec"):
            helper().to_quantization_spec()
        return
    expected = {**QUARK_DEFAULTS, **BETTER_THAN_QUARK[name]} if result.startswith("error:") else _expected(result)
    spec = helper(**_required(helper)).to_quantization_spec()
    assert type(spec) is QuantizationSpec
    # the table lists the fields that are not None; every other field must be None
    actual = {f.name: getattr(spec, f.name) for f in fields(spec)}
    assert set(expected) <= set(actual)
    for field_name, value in actual.items():
        want = expected.get(field_name)
        assert value == want and type(value) is type(want), (name, field_name, value, want)


@pytest.mark.parametrize("name", sorted(DATA_TYPE_SPECS))
def test_helpers_are_importable_where_quark_has_them(name):
    assert getattr(config_module, name) is DATA_TYPE_SPECS[name]
    assert getattr(package, name) is DATA_TYPE_SPECS[name]


@pytest.mark.parametrize(
    "helper, kwargs, match",
    [
        ("Int8PerTensorSpec", {"scale_type": "pow2"}, r"Int8PerTensorSpec\.scale_type='pow2' is not valid; allowed: .*'power_of_2'"),
        ("Int8PerTensorSpec", {"observer_method": "kl"}, r"Int8PerTensorSpec\.observer_method='kl' is not valid; allowed: 'min_max'"),
        ("Int4PerGroupSpec", {"ch_axis": 1, "group_size": 32, "round_method": "up"}, r"Int4PerGroupSpec\.round_method='up'"),
        ("Uint4PerChannelSpec", {"ch_axis": 0, "zero_point_type": "int8"}, r"Uint4PerChannelSpec\.zero_point_type='int8'"),
        ("OCP_MXINT8Spec", {"ch_axis": 1, "is_dynamic": False}, r"OCP_MXINT8Spec\.is_dynamic=False is not valid; allowed: True"),
    ],
)
def test_string_fields_name_helper_field_value_and_allowed(helper, kwargs, match):
    with pytest.raises(ValueError, match=match):
        DATA_TYPE_SPECS[helper](**kwargs).to_quantization_spec()


def test_amd_fp4_group_size_checked_as_quark_does():
    with pytest.raises(ValueError, match=r"AmdFP4Spec\.group_size=64 is not valid; allowed: 16, 32"):
        DATA_TYPE_SPECS["AmdFP4Spec"](ch_axis=-1, group_size=64)


def test_string_and_enum_spellings_agree():
    spec = DATA_TYPE_SPECS["Int8PerTensorSpec"]
    assert spec(scale_type="power_of_2").to_quantization_spec() == spec(scale_type=ScaleType.pof2).to_quantization_spec()
    assert spec(observer_method="MSE").to_quantization_spec() == spec(observer_method="mse").to_quantization_spec()
