"""Models the algorithms changed export and verify: GPTQ's frozen weight quantizers, a Hadamard
rotation (refused by the QONNX export, exported as QCDQ), batch norm merged by the XINT8 preset."""

from __future__ import annotations

import pytest
import torch
from _shared.configs import FROM_SPEC, INT8, U8_ASYM, W4C, W4G16, W4T, algo_config
from _shared.models import ONE_LAYER, layer_data, trained_batch_norm
from _shared.quantize import quantize
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import algos, presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype


@pytest.mark.parametrize("method", ["export_onnx_model", "export_qonnx_model"])
@pytest.mark.parametrize("weight", [W4G16, W4C, W4T], ids=["per_group", "per_channel", "per_tensor"])
def test_gptq_models_export_and_verify(tmp_path, method, weight):
    """GPTQ freezes each weight quantizer into a subclass of Brevitas' proxy class; the export
    still finds its handler (it found none: "'NoneType' object is not callable") and the written
    graph, executed, matches the GPTQ'd torch model."""
    model, data = ONE_LAYER["linear"]().eval(), layer_data()
    a8 = QuantizationSpec(dtype=Dtype.int8)
    qmodel = quantize(algo_config(weight, post=[GPTQConfig(**FROM_SPEC, desc_act=False)], inputs=a8), model, data)
    rtn = quantize(algo_config(weight, inputs=a8), model, data)
    assert not torch.equal(qmodel[0].quant_weight().value, rtn[0].quant_weight().value)  # GPTQ ran
    report = getattr(ModelExporter(tmp_path / "gptq.onnx"), method)(qmodel, data[0][:4])
    with torch.no_grad():
        scale = float(qmodel(data[0][:4]).abs().max())
    assert report.passed and report.max_abs_diff <= 1e-4 * scale


def test_hadamard_rotation_refused_by_the_qonnx_export_before_it_runs(tmp_path):
    from quark.torch.extensions.brevitas._backend.export.errors import UnsupportedExportError
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer

    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).eval()
    data = [torch.randn(4, 16) for _ in range(2)]
    config = Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM), pre_quant_opt_config=[algos.HadamardRotation()])
    quantized = ModelQuantizer(config).quantize_model(model, data, progress=False)
    with pytest.raises(UnsupportedExportError, match=r"module '0' \(RotatedModule\): an online Hadamard rotation"):
        ModelExporter(str(tmp_path / "m.qonnx")).export_qonnx_model(quantized, data[0])
    report = ModelExporter(str(tmp_path / "m.onnx")).export_onnx_model(quantized, data[0])
    assert "PASS" in str(report)


@pytest.mark.parametrize("graph", [False, True], ids=["layerwise", "graph"])
def test_xint8_folds_batch_norm_into_an_integer_graph_onnx_runtime_computes_exactly(tmp_path, graph):
    """Before the preset folded batch norm, the graph kept a float BatchNormalization between each
    Conv and its quantizer, and ONNX Runtime's float arithmetic flipped a rounding of torch's
    (0.07 on the logits of the trained digits network)."""
    import onnx

    data = digits.load(0)
    torch.manual_seed(0)
    model = trained_batch_norm(digits.ResidualCNN())
    x_test = torch.cat([x for x, _ in data.loader("test", batch_size=512)])
    quantizer = ModelQuantizer(presets.xint8(graph=graph))
    qmodel = quantizer.quantize_model(model, data.loader("train"), progress=False)
    path = tmp_path / "digits.onnx"
    report = ModelExporter(path).export_onnx_model(qmodel, x_test, plans=quantizer.plans)
    # layer by layer, the residual addition runs on float values, on the CPU: the IPU checks the layers and says so
    layer_by_layer = any("float operations run on the CPU" in check for check in report.target_checks)
    assert layer_by_layer is not graph
    assert report.exact and report.max_abs_diff == 0.0
    assert "BatchNormalization" not in {n.op_type for n in onnx.load(path).graph.node}
