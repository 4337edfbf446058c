"""Point 1 of issue 11: bad input gets one clear error and changes nothing (the config layer: construction and files)."""

from __future__ import annotations

import pytest
from _shared.configs import W8A8_IO

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.quantization.config.config import Config, QuantizationSpec
from quark.torch.quantization.config.type import Dtype


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda: QuantizationSpec(dtype="int17"), ValueError, r"QuantizationSpec.dtype='int17' is not valid; allowed: Dtype.int8"),
        (lambda: bcfg.QuantizationSpec(bit_width=0), ValueError, r"QuantizationSpec.bit_width=0: allowed 1..32 \(1: bipolar\)"),
        (lambda: bcfg.QuantizationSpec(bit_width=33), ValueError, r"QuantizationSpec.bit_width=33: allowed 1..32"),
        (lambda: bcfg.QuantizationSpec(bit_width=8.0), TypeError, r"bit_width=8.0: expected int, got float"),
        (lambda: bcfg.QuantizationSpec(bit_width=True), TypeError, r"bit_width=True: expected int, got bool"),
        (lambda: QuantizationSpec(dtype=Dtype.int8, group_size=0, qscheme="per_group", ch_axis=0), ValueError, r"group_size=0: must be a positive integer"),
    ],
)
def test_bit_widths_and_fields_out_of_range_are_refused_at_construction(make, error, match):
    with pytest.raises(error, match=match):
        make()


def test_config_saved_into_a_missing_directory_creates_it(tmp_path):
    path = tmp_path / "configs" / "w8a8.yaml"
    W8A8_IO.save(path)
    assert Config.load(path) == W8A8_IO
