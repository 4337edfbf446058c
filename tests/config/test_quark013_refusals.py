"""What this package cannot honour of AMD Quark 0.13's specs is refused by name when the spec is
applied, naming the field, the value and what is allowed; what has no effect on the numbers
(``enable_buffer_reuse``, ``max_input_numel``) is accepted. Pure config: no Brevitas."""

from __future__ import annotations

import pytest

from quark.torch.quantization.config.config import (
    AmdFP4Spec,
    BFP16Spec,
    FP4PerGroupSpec,
    FP8E5M3PerTensorSpec,
    Int8PerTensorSpec,
    MX6Spec,
    OCP_MXFP4DiffsSpec,
    OCP_MXFP4Spec,
    QuantizationSpec,
)
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.observer import (
    LSQObserver,
    PerBlock2DMinMaxObserver,
    PerChannelPowOf2MinMSEObserver,
    PerTensorHistogramObserverPro,
    PerTensorPowOf2MinMSEObserver,
)
from quark.torch.quantization.tensor_quant import normalise

INT8 = {"dtype": Dtype.int8, "qscheme": QSchemeType.per_tensor, "symmetric": True, "is_dynamic": False}

CASES = [
    # (spec, role, message)
    (
        QuantizationSpec(**{**INT8, "qscheme": QSchemeType.per_channel}, ch_axis=0, observer_cls=PerChannelPowOf2MinMSEObserver),
        "weight",
        r"observer_cls=PerChannelPowOf2MinMSEObserver is not supported: Quark's MinMSE search .*activations are quantized per_tensor",
    ),
    (
        QuantizationSpec(dtype=Dtype.fp8_e4m3, qscheme=QSchemeType.per_block, block_size=[128, 128], observer_cls=PerBlock2DMinMaxObserver),
        "weight",
        r"qscheme=QSchemeType\.per_block with block_size=\[128, 128\] is not supported: 2-D weight blocks .*allowed: qscheme per_tensor, per_channel or per_group",
    ),
    (
        OCP_MXFP4DiffsSpec(ch_axis=-1).to_quantization_spec(),
        "weight",
        r"observer_cls=PerBlockMXDiffsObserver is not supported: a per-block search of the shared exponent .*use OCP_MXFP4Spec",
    ),
    (
        QuantizationSpec(**{**INT8, "symmetric": False}, observer_cls=PerTensorPowOf2MinMSEObserver),
        "weight",
        r"observer_cls=PerTensorPowOf2MinMSEObserver on a weight searches a symmetric grid; allowed: symmetric=True",
    ),
    (
        QuantizationSpec(**INT8, observer_cls=PerTensorHistogramObserverPro),
        "weight",
        r"observer_cls=PerTensorHistogramObserverPro is not supported for weights: torch's HistogramObserver search",
    ),
    (
        QuantizationSpec(**{**INT8, "symmetric": False}, observer_cls=LSQObserver),
        "input_tensors",
        r"symmetric=False is not supported with observer_cls=LSQObserver \(a trained scale, zero point 0 as in Quark\); allowed: None, True",
    ),
    (
        QuantizationSpec(**INT8, observer_cls=LSQObserver, scale_type=ScaleType.pof2),
        "weight",
        r"scale_type=ScaleType\.pof2 is not supported with observer_cls=LSQObserver .*allowed: None, ScaleType\.float",
    ),
    (
        FP8E5M3PerTensorSpec().to_quantization_spec(),
        "input_tensors",
        r"dtype=Dtype\.fp8_e5m3 is not supported: an unsigned 8-bit float .*use Dtype\.fp8_e4m3 or Dtype\.fp8_e5m2",
    ),
    (
        AmdFP4Spec(ch_axis=-1, group_size=32).to_quantization_spec(),
        "weight",
        r"scale_type=ScaleType\.float8_e5m3 is not supported: AMD FP4's unsigned e5m3 group scales",
    ),
    (
        QuantizationSpec(**INT8, is_scale_quant=True),
        "weight",
        r"is_scale_quant=True is not supported: .*ScaleQuantSpec.*allowed: False",
    ),
    (
        FP4PerGroupSpec(ch_axis=-1, group_size=32, scale_format="e4m3").to_quantization_spec(),
        "weight",
        r"scale_format=e4m3 is not supported with dtype=Dtype\.fp4 with a float scale .*allowed: None, float32",
    ),
    (
        FP4PerGroupSpec(ch_axis=-1, group_size=32).to_quantization_spec(),
        "input_tensors",
        r"qscheme=per_group is not supported with dtype=Dtype\.fp4 for input_tensors with float scales: .*OCP_MXFP4Spec",
    ),
    (
        QuantizationSpec(**INT8, scale_calculation_mode="floor"),
        "weight",
        r"scale_calculation_mode=floor is not supported with dtype=Dtype\.int8 \(a scaled integer\); allowed: None",
    ),
    (
        QuantizationSpec(**INT8, scale_type=ScaleType.float8_e8m0fnu),
        "weight",
        r"scale_type=ScaleType\.float8_e8m0fnu is not supported with dtype=Dtype\.int8 .*use ScaleType\.pof2",
    ),
    (
        OCP_MXFP4Spec(ch_axis=-1, scale_calculation_mode="round").to_quantization_spec(),
        "weight",
        (r"scale_calculation_mode=round is not supported with dtype=Dtype\.fp4 with observer_cls=PerBlockMXObserver and "
        r"scale_format='e8m0' .*allowed: None, even, floor, ceil"),
    ),
    (
        OCP_MXFP4Spec(ch_axis=-1, is_dynamic=False).to_quantization_spec(),
        "input_tensors",
        r"is_dynamic=False is not supported with dtype=Dtype\.fp4 with observer_cls=PerBlockMXObserver .*allowed: None, True",
    ),
    (
        MX6Spec(ch_axis=1, block_size=16, scale_calculation_mode="floor").to_quantization_spec(),
        "weight",
        r"scale_calculation_mode=floor is not supported with dtype=Dtype\.mx6 .*allowed: None, even",
    ),
    (
        BFP16Spec(ch_axis=1).to_quantization_spec().__class__(dtype=Dtype.bfp16, scale_format="e4m3"),
        "weight",
        r"scale_format=e4m3 is not supported with dtype=Dtype\.bfp16 .*allowed: None, e8m0",
    ),
]


@pytest.mark.parametrize("spec, role, match", CASES)
def test_refused_with_field_value_and_allowed(spec, role, match):
    with pytest.raises(ValueError, match=match):
        normalise(spec, role, "layer.role")


def test_buffer_reuse_fields_have_no_effect_and_are_accepted():
    plain = OCP_MXFP4Spec(ch_axis=-1).to_quantization_spec()
    reuse = QuantizationSpec(**{**plain.to_dict(), "enable_buffer_reuse": True, "max_input_numel": 1024})
    assert normalise(reuse, "weight", "w") == normalise(plain, "weight", "w")
    base = Int8PerTensorSpec().to_quantization_spec()
    assert normalise(QuantizationSpec(**{**base.to_dict(), "enable_buffer_reuse": True}), "input_tensors", "a") == normalise(
        base, "input_tensors", "a"
    )


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"max_input_numel": 0}, r"QuantizationSpec\.max_input_numel=0: must be a positive integer"),
        ({"is_scale_quant": 1}, r"QuantizationSpec\.is_scale_quant=1: expected bool"),
        ({"scale_format": 8}, r"QuantizationSpec\.scale_format=8: expected str"),
        ({"block_size": [0, 4]}, r"QuantizationSpec\.block_size=\[0, 4\]: expected None or a list of positive ints"),
    ],
)
def test_quark013_fields_are_type_checked_on_construction(kwargs, match):
    with pytest.raises((TypeError, ValueError), match=match):
        QuantizationSpec(dtype=Dtype.int8, **kwargs)


def test_quark013_spec_round_trips_through_dict():
    spec = OCP_MXFP4Spec(ch_axis=-1).to_quantization_spec()
    assert QuantizationSpec.from_dict(spec.to_dict()) == spec
    assert spec.to_dict()["scale_format"] == "e8m0" and spec.to_dict()["observer_cls"] == "PerBlockMXObserver"
