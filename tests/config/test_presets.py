"""The presets (``extensions/brevitas/presets.py``): the configs they build, the arguments they refuse,
and that they import without Brevitas or ONNX."""

from __future__ import annotations

import subprocess
import sys

import pytest
from _shared import REPO

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.algos import MergeBatchNorm
from quark.torch.extensions.brevitas.presets import finn, xint8
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
)


def test_xint8_without_merging_keeps_batch_norm():
    assert presets.xint8(merge_batch_norm=False).pre_quant_opt_config == []
    assert presets.xint8().pre_quant_opt_config == [MergeBatchNorm()]


def test_xint8_preset_is_the_documented_scheme():
    layer = xint8().global_quant_config
    assert layer.target_device is DeviceType.IPU
    for spec in (layer.input_tensors, layer.weight):
        assert (
            spec.dtype,
            spec.symmetric,
            spec.scale_type,
            spec.round_method,
            spec.qscheme,
            spec.is_dynamic,
        ) == (Dtype.int8, True, ScaleType.pof2, RoundType.half_even, QSchemeType.per_tensor, False)
    assert layer.bias.dtype is Dtype.int32 and layer.bias.observer_cls is None  # scale = s_in * s_w
    assert layer.output_tensors is None and xint8(exclude=["head"]).exclude == ["head"]


@pytest.mark.slow  # a fresh interpreter importing torch
def test_presets_import_without_brevitas_or_onnx():
    code = (
        "import sys\n"
        "for n in ('brevitas', 'onnx', 'onnxruntime', 'qonnx'): sys.modules[n] = None\n"
        "from quark.torch.extensions.brevitas.presets import xint8\n"
        "assert xint8().global_quant_config.weight.scale_type.name == 'pof2'\n"
    )
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", code], cwd=REPO, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0 and result.stdout == "" and result.stderr == "", result.stderr


@pytest.mark.parametrize("argument", ["weight_bits", "act_bits", "input_bits", "add_bits"])
def test_the_preset_names_a_bit_width_it_cannot_build(argument):
    with pytest.raises(ValueError, match=rf"finn\({argument}=5\): allowed \[1, 2, 3, 4, 8\]"):
        finn(**{argument: 5})


def test_the_preset_names_a_layer_weight_width_it_cannot_build():
    with pytest.raises(ValueError, match=r"finn\(layer_weight_bits\['fc'\]=6\): allowed \[1, 2, 3, 4, 8\]"):
        finn(layer_weight_bits={"fc": 6})


@pytest.mark.parametrize(
    "call, match",
    [
        (lambda: presets.a16w8(weights="per_group"), r"a16w8\(weights='per_group'\): allowed \['per_channel', 'per_tensor'\]"),
        (lambda: presets.activation_spec(4), r"activation_spec\(bits=4\): allowed \[8, 16\]"),
        (lambda: presets.a8w8(calibration="entropy"), r"a8w8\(calibration='entropy'\): allowed 'minmax', 'mse'"),
        (lambda: presets.activation_spec(8, calibration="MSE"), r"activation_spec\(calibration='MSE'\): allowed 'minmax', 'mse'"),
    ],
)
def test_the_npu_presets_check_their_arguments(call, match):
    with pytest.raises(ValueError, match=match):
        call()


def test_the_npu_preset_fields_are_the_documented_scheme():
    layer = presets.a16w8(weights="per_tensor", symmetric_activations=True).global_quant_config
    assert (layer.input_tensors.dtype, layer.input_tensors.symmetric, layer.input_tensors.scale_type) == (
        Dtype.int16,
        True,
        ScaleType.float,
    )
    assert (layer.weight.dtype, layer.weight.qscheme, layer.weight.symmetric) == (Dtype.int8, QSchemeType.per_tensor, True)
    assert layer.bias.dtype is Dtype.int32 and layer.bias.observer_cls is None and layer.target_device is DeviceType.IPU
    assert presets.a8w8().global_quant_config.input_tensors.dtype is Dtype.uint8
    assert presets.bfp16().global_quant_config.weight.dtype is Dtype.bfp16
    assert presets.bf16().global_quant_config.weight.dtype is Dtype.bfloat16


@pytest.mark.parametrize("preset", [presets.a8w8, presets.a16w8])
@pytest.mark.parametrize(
    "calibration, observer",
    [("minmax", "PerTensorMinMaxObserver"), ("mse", "PerTensorMSEObserver")],
)
def test_the_npu_presets_calibrate_activations_as_asked(preset, calibration, observer):
    layer = preset(calibration=calibration).global_quant_config
    assert layer.input_tensors.observer_cls.__name__ == observer
    assert layer.weight.observer_cls.__name__ == "PerChannelMinMaxObserver"  # weights keep their statistic
    assert preset().global_quant_config.input_tensors.observer_cls.__name__ == "PerTensorMinMaxObserver"
