"""docs/support.md is generated from the translation rules and must stay in sync with them."""


import pytest
from _shared import REPO

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.support import DOC_HEADER, support_table
from quark.torch.quantization.tensor_quant import normalise

DOC = REPO / "docs" / "support.md"


def test_support_doc_is_current():
    expected = DOC_HEADER + "\n" + support_table() + "\n"
    assert DOC.read_text() == expected, "regenerate: python -m quark.torch.quantization.support > docs/support.md"


def test_table_reflects_rules():
    table = support_table()
    assert "| `int32` | - | - | per_tensor; scales: float, pof2 |" in table  # 32 bits: bias only
    assert "| `bfloat16` | round-to-nearest-even cast, no scale |" in table
    # the e8m0 shared scale is a power of two: Quark's ScaleType.float form and pof2 both name it
    assert "| `mx` | per_group (block 32); scales: float, pof2, float8_e8m0fnu |" in table
    assert "| `bfp16` | per_group (block 8); scales: float, pof2, float8_e8m0fnu |" in table
    assert "| `fp8_e5m3` | - | - | - |" in table


@pytest.mark.parametrize(
    "fields, match",
    [
        ({"qscheme": "per_channel", "ch_axis": 0}, r"b: qscheme=QSchemeType\.per_channel is not supported with a bias whose scale"),
        ({"scale_type": "float16"}, r"b: scale_type=ScaleType\.float16 is not supported with a bias whose scale is input scale x weight scale"),
    ],
)
def test_product_scaled_bias_rejects_fields_it_cannot_honour(fields, match):
    with pytest.raises(ValueError, match=match):
        normalise(QuantizationSpec(dtype="int32", **fields), "bias", "b")
