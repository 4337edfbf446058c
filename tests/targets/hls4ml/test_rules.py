"""The hls4ml target's refusals, each naming the quantizer, layer, site or module, the value and the
fix, before any hls4ml work and with the model unchanged; the build settings; the preset's arguments."""

from __future__ import annotations

import pytest
import torch
from _shared.models import unit_batches
from _shared.quantize import assert_unchanged, quantize, snapshot
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.targets.hls4ml.build_config import (
    Hls4mlBuildConfig,
    Hls4mlConfigError,
    IOType,
    Strategy,
)
from quark.torch.extensions.brevitas.api import ModelExporter, TargetCheckError
from quark.torch.quantization.config.config import QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import DeviceType, QSchemeType, QuantizationMode, ScaleType
from quark.torch.quantization.observer import PerChannelMinMaxObserver


class SigmoidNet(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1, self.gate, self.fc2 = nn.Linear(8, 8), nn.Sigmoid(), nn.Linear(8, 3)

    def forward(self, x):
        return self.fc2(self.gate(self.fc1(x)))


def quantized(config, model=None):
    torch.manual_seed(0)
    model = model or nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3))
    return quantize(config, model.eval(), unit_batches())


def test_the_preset_meets_the_target():
    config = presets.hls4ml(4, 4)
    assert config.global_quant_config.target_device is DeviceType.HLS4ML
    assert config.quant_mode is QuantizationMode.fx_graph_mode


def _with_weight(**changes):
    config = presets.hls4ml(4, 4)
    old = config.global_quant_config.weight
    fields = {f: getattr(old, f) for f in ("dtype", "observer_cls", "symmetric", "scale_type", "round_method")}
    config.global_quant_config.weight = QuantizationSpec(**{**fields, **changes})
    return config


def test_another_targets_config_is_refused_at_export_for_hls4ml(tmp_path):
    qmodel = quantized(presets.finn(4, 4))
    before = snapshot(qmodel)
    with pytest.raises(TargetCheckError, match=r"round_method=half_up; hls4ml allows half_even or floor"):
        ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, unit_batches()[0], target_device="hls4ml")
    assert_unchanged(before, qmodel)
    assert not (tmp_path / "m.onnx").exists()


@pytest.mark.parametrize(
    "config, message",
    [
        (
            _with_weight(qscheme=QSchemeType.per_channel, ch_axis=0, observer_cls=PerChannelMinMaxObserver),
            r"quantizer '0.weight_quant' \(weight\): qscheme=per_channel; hls4ml allows per_tensor",
        ),
        (_with_weight(scale_type=ScaleType.float), r"quantizer '0.weight_quant' \(weight\): scale_type=float; hls4ml allows pof2"),
        (_with_weight(symmetric=False), r"quantizer '0.weight_quant' \(weight\): symmetric=False; hls4ml allows True"),
    ],
    ids=["per_channel", "float_scale", "asymmetric"],
)
def test_a_config_for_hls4ml_it_cannot_map_is_refused_before_calibration(config, message):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 3)).eval()
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with pytest.raises(TargetCheckError, match=message):
        quantize(config, model, unit_batches())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_float_bias_is_refused_naming_the_layer(tmp_path):
    config = presets.hls4ml(4, 4)
    config.global_quant_config.bias = None
    with pytest.raises(TargetCheckError, match=r"module '.*' \(QuantLinear\): bias not quantized; hls4ml allows bias="):
        ModelExporter(tmp_path / "m.onnx").export_qonnx_model(quantized(config), unit_batches()[0])


def test_a_layerwise_model_is_refused_naming_the_site(tmp_path):
    config = presets.hls4ml(4, 4)
    config.quant_mode = QuantizationMode.eager_mode
    config.layer_type_quant_config = {}
    with pytest.raises(TargetCheckError, match=r"quantized layer by layer.*quant_mode=QuantizationMode.fx_graph_mode"):
        ModelExporter(tmp_path / "m.onnx").export_qonnx_model(quantized(config), unit_batches()[0])


def test_an_activation_hls4ml_does_not_map_is_refused_naming_its_module(tmp_path):
    config = presets.hls4ml(4, 4, unsigned=())
    config.layer_type_quant_config["Sigmoid"] = QuantizationConfig(output_tensors=config.global_quant_config.input_tensors)
    with pytest.raises(TargetCheckError, match=r"1 Sigmoid node\(s\) \(modules gate(\.act)?\); hls4ml allows convolutions"):
        ModelExporter(tmp_path / "m.onnx").export_qonnx_model(quantized(config, SigmoidNet()), unit_batches()[0])


def test_the_export_for_hls4ml_writes_quant_nodes_only(tmp_path):
    import onnx

    path = tmp_path / "m.onnx"
    ModelExporter(path).export_qonnx_model(quantized(presets.hls4ml(4, 4)), unit_batches()[0])
    ops = {n.op_type for n in onnx.load(path).graph.node}
    assert "Quant" in ops and "MultiThreshold" not in ops


@pytest.mark.parametrize(
    "setting, message",
    [
        ({"io_type": "io_serial"}, r"io_type='io_serial': allowed \['io_parallel', 'io_stream'\]"),
        ({"reuse_factor": 0}, r"reuse_factor=0: allowed an integer >= 1"),
        ({"backend": "Quartus"}, r"backend='Quartus': allowed \['Vitis', 'Vivado'\]"),
        ({"project_name": "my-project"}, r"project_name='my-project': allowed a C\+\+ identifier"),
        ({"clock": 5}, r"unknown settings \['clock'\]"),
    ],
)
def test_bad_build_settings_are_refused_by_name(setting, message):
    with pytest.raises(Hls4mlConfigError, match=message):
        Hls4mlBuildConfig().replace(**setting)


def test_build_settings_take_names_and_values():
    config = Hls4mlBuildConfig(io_type="io_stream", strategy="resource")
    assert (config.io_type, config.strategy) == (IOType.io_stream, Strategy.resource)
    assert config.to_dict()["strategy"] == "Resource"


@pytest.mark.parametrize(
    "kwargs, message",
    [({"weight_bits": 5}, r"hls4ml\(weight_bits=5\): allowed \[2, 3, 4, 8, 16\]"), ({"bias_bits": 8}, r"bias_bits=8")],
)
def test_preset_arguments_are_checked(kwargs, message):
    with pytest.raises(ValueError, match=message):
        presets.hls4ml(**kwargs)


def test_docs_embed_the_rules_table():
    from _shared import REPO

    from quark.torch.extensions.brevitas._backend.targets.hls4ml import rules

    docs = (REPO / "docs" / "hls4ml.md").read_text()
    assert rules.markdown() in docs, "docs/hls4ml.md: paste the output of hls4ml rules.markdown()"
