"""Binary (bipolar) and ternary specs, both flavours: what they normalise to, and every combination
that makes no sense refused, naming the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.spec import TQTSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.observer import MeanAbsObserver, PerTensorMinMaxObserver, UnitScaleObserver
from quark.torch.quantization.tensor_quant import Format, normalise


@pytest.mark.parametrize(
    "spec, role, expected",
    [
        # (format, bits, grid, narrow, statistic, threshold levels: scale = statistic / levels)
        (QuantizationSpec(dtype=Dtype.bipolar), "weight", (Format.bipolar, 1, (-1, 1), False, "mean_abs", 1.0)),
        (QuantizationSpec(dtype=Dtype.bipolar, observer_cls=UnitScaleObserver), "input_tensors", (Format.bipolar, 1, (-1, 1), False, "unit", 1.0)),
        (QuantizationSpec(dtype=Dtype.ternary), "weight", (Format.integer, 2, (-1, 1), True, "mean_abs", 0.5 / 0.7)),
        # ternary on the abs-max: the narrow grid's own levels, (qmax - qmin) / 2
        (QuantizationSpec(dtype=Dtype.ternary, observer_cls=PerTensorMinMaxObserver), "input_tensors", (Format.integer, 2, (-1, 1), True, "minmax", 1.0)),
        (ext.QuantizationSpec(bit_width=1), "weight", (Format.bipolar, 1, (-1, 1), False, "mean_abs", 1.0)),
        (ext.QuantizationSpec(bit_width=1), "input_tensors", (Format.bipolar, 1, (-1, 1), False, "unit", 1.0)),
    ],
)
def test_binary_and_ternary_specs_normalise(spec, role, expected):
    tq = normalise(spec, role, "s")
    assert (tq.format, tq.bit_width, tq.grid, tq.narrow, tq.statistic, tq.threshold_levels) == expected
    assert tq.signed and tq.symmetric
    assert tq.dtype_name == ("ternary" if tq.narrow else "bipolar") and tq.describe().startswith(tq.dtype_name)
    assert tq.needs_calibration is (tq.statistic != "unit")  # read for activations only


def test_per_channel_weights_and_pof2_scales_are_taken():
    tq = normalise(QuantizationSpec(dtype=Dtype.bipolar, qscheme=QSchemeType.per_channel, ch_axis=0, scale_type=ScaleType.pof2), "weight", "w")
    assert (tq.qscheme, tq.ch_axis, tq.scale_type, tq.observer) == (QSchemeType.per_channel, 0, ScaleType.pof2, MeanAbsObserver)


@pytest.mark.parametrize(
    "spec, role, match",
    [
        # a zero point
        (QuantizationSpec(dtype=Dtype.bipolar, symmetric=False), "weight", r"w: symmetric=False is not supported with dtype=Dtype.bipolar \(a zero point"),
        (QuantizationSpec(dtype=Dtype.ternary, symmetric=False), "input_tensors", r"symmetric=False is not supported with dtype=Dtype.ternary"),
        (ext.QuantizationSpec(bit_width=1, symmetric=False), "weight", r"symmetric=False is not supported with bit_width=1 \(a bipolar tensor has no zero point"),
        # a bias
        (QuantizationSpec(dtype=Dtype.bipolar), "bias", r"dtype=Dtype.bipolar is not supported for bias: .*allowed|leave bias=None"),
        (QuantizationSpec(dtype=Dtype.ternary), "bias", r"dtype=Dtype.ternary is not supported for bias"),
        (ext.QuantizationSpec(bit_width=1), "bias", r"bit_width=1 is not supported for bias: .*allowed 2..32"),
        # TQT, rounding, dynamic, per group, the unit scale on a weight, a statistic with no meaning here
        (QuantizationSpec(dtype=Dtype.bipolar, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD)), "input_tensors", r"qat_spec=.*is not supported with dtype=Dtype.bipolar \(TQT"),
        (ext.QuantizationSpec(bit_width=1, scale_type=ScaleType.pof2, qat_spec=TQTSpec()), "weight", r"qat_spec=.* is not supported with bit_width=1"),
        (QuantizationSpec(dtype=Dtype.bipolar, round_method=RoundType.half_up), "input_tensors", r"round_method=RoundType.half_up is not supported with dtype=Dtype.bipolar \(rounding: bipolar is sign\(x\)"),
        (QuantizationSpec(dtype=Dtype.bipolar, is_dynamic=True), "input_tensors", r"is_dynamic=True is not supported with dtype=Dtype.bipolar; allowed: None, False"),
        (QuantizationSpec(dtype=Dtype.ternary, qscheme=QSchemeType.per_group, ch_axis=1, group_size=8), "weight", r"qscheme=QSchemeType.per_group is not supported with dtype=Dtype.ternary"),
        (QuantizationSpec(dtype=Dtype.bipolar, qscheme=QSchemeType.per_channel, ch_axis=0), "input_tensors", r"qscheme=per_channel is not supported for input_tensors"),
        (QuantizationSpec(dtype=Dtype.bipolar, observer_cls=UnitScaleObserver), "weight", r"observer_cls=UnitScaleObserver is not supported for weights"),
        (QuantizationSpec(dtype=Dtype.ternary, observer_cls=UnitScaleObserver), "input_tensors", r"observer_cls=UnitScaleObserver is not supported with dtype=Dtype.ternary"),
        (ext.QuantizationSpec(bit_width=1, param_type=ext.ParamType.mse), "weight", r"param_type=ParamType.mse is not supported with bit_width=1 \(no search"),
        (ext.QuantizationSpec(bit_width=1, quant_type=ext.QuantType.float_quant), "weight", r"quant_type=QuantType.float_quant is not supported with bit_width=1"),
    ],
)
def test_combinations_that_make_no_sense_are_refused_naming_the_field(spec, role, match):
    with pytest.raises(ValueError, match=match):
        normalise(spec, role, "w")


def test_the_finn_preset_builds_binary_and_mixed_widths():
    w1a1 = finn(weight_bits=1, act_bits=1)
    layer = w1a1.global_quant_config
    assert layer.weight.dtype is Dtype.bipolar and layer.weight.qat_spec is None
    assert layer.input_tensors.dtype is Dtype.bipolar and layer.input_tensors.observer_cls is UnitScaleObserver
    assert w1a1.layer_type_quant_config["ReLU"].output_tensors.dtype is Dtype.bipolar  # the sign replaces it
    assert w1a1.layer_type_quant_config["GraphInput"].input_tensors.dtype is Dtype.uint8
    w1a2 = finn(weight_bits=1, act_bits=2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    assert w1a2.global_quant_config.weight.dtype is Dtype.bipolar and w1a2.global_quant_config.weight.qat_spec is None
    relu = w1a2.layer_type_quant_config["ReLU"].output_tensors
    assert relu.dtype is Dtype.uint2 and relu.qat_spec is not None  # TQT where it applies
    assert finn(weight_bits=2, act_bits=2).global_quant_config.weight.dtype is Dtype.int2
    per_channel = finn(weight_bits=1, per_channel_weights=True).global_quant_config.weight
    assert (per_channel.dtype, per_channel.qscheme, per_channel.ch_axis) == (Dtype.bipolar, QSchemeType.per_channel, 0)


def test_the_finn_preset_refuses_a_bipolar_input_of_non_negative_pixels():
    with pytest.raises(ValueError, match=r"finn\(input_bits=1\) needs input_signed=True: the sign of a non-negative input"):
        finn(weight_bits=1, act_bits=1, input_bits=1)
    assert finn(input_bits=1, input_signed=True).layer_type_quant_config["GraphInput"].input_tensors.dtype is Dtype.bipolar
