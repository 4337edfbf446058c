"""Accumulator-aware weights (``A2QSpec``) through both exporters, both backends: the graph is
executed and compared with torch (the exporter's own verification), the weights in the graph are
the integer weights torch trained (rounded toward zero; re-quantizing them with the Quant node's
rounding is exact), and the dynamo exporter, which would re-quantize the float weight half to even,
is refused by name."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch
from onnx import numpy_helper
from torch import nn

from quark.torch.extensions.brevitas._backend.accumulator import layers
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer, UnsupportedExportError
from quark.torch.extensions.brevitas.qat import freeze
from quark.torch.quantization.config.config import A2QSpec, Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, QuantizationMode, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

pytest.importorskip("qonnx")


def _trained(mode: QuantizationMode, zero_centered: bool) -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)
    )
    act = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
    weight = QuantizationSpec(
        dtype=Dtype.int4, qscheme=QSchemeType.per_channel, ch_axis=0, qat_spec=A2QSpec(12, zero_centered=zero_centered)
    )
    config = Config(QuantizationConfig(input_tensors=act, weight=weight), quant_mode=mode)
    data = [torch.randn(8, 1, 8, 8) for _ in range(3)]
    qmodel = ModelQuantizer(config).quantize_model(model, data, progress=False)
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    qmodel.train()
    for x in data:
        optimizer.zero_grad()
        qmodel(x).square().mean().backward()
        optimizer.step()
    return qmodel.eval(), torch.cat(data)


CASES = [
    pytest.param(mode, zc, id=f"{'graph' if mode is QuantizationMode.fx_graph_mode else 'layerwise'}-{'a2q+' if zc else 'a2q'}")
    for mode in (QuantizationMode.eager_mode, QuantizationMode.fx_graph_mode)
    for zc in (True, False)
]


@pytest.mark.parametrize("mode,zero_centered", CASES)
@pytest.mark.parametrize("method", ["export_qonnx_model", "export_onnx_model"])
def test_a2q_model_exports_verified(mode, zero_centered, method, tmp_path):
    qmodel, x = _trained(mode, zero_centered)
    before = copy.deepcopy(qmodel.state_dict())
    report = getattr(ModelExporter(tmp_path / "a2q.onnx"), method)(qmodel, x)
    assert report.passed and report.verified
    assert all(torch.equal(before[k], v) for k, v in qmodel.state_dict().items())  # the model is unchanged
    if method == "export_qonnx_model":
        _assert_weights_are_the_trained_integers(qmodel, tmp_path / "a2q.onnx")


def _assert_weights_are_the_trained_integers(qmodel: nn.Module, path) -> None:
    graph = onnx.load(str(path)).graph
    inits = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    weight_quants = [n for n in graph.node if n.op_type == "Quant" and n.input[0] in inits and inits[n.input[0]].ndim > 1]
    expected = [layer.quant_weight() for _, layer, _ in layers(qmodel)]
    assert len(weight_quants) == len(expected)
    for node, quant in zip(weight_quants, expected):
        value, scale = inits[node.input[0]], inits[node.input[1]]
        codes = value / scale
        np.testing.assert_array_equal(np.round(codes), np.round((quant.value / quant.scale).detach().numpy()))
        assert np.abs(codes - np.round(codes)).max() < 1e-4  # on the grid: the node's rounding changes nothing


def test_frozen_a2q_model_exports_bit_exact(tmp_path):
    qmodel, x = _trained(QuantizationMode.fx_graph_mode, True)
    freeze(qmodel)
    report = ModelExporter(tmp_path / "frozen.onnx").export_qonnx_model(qmodel, x)
    assert report.passed


def test_dynamo_export_of_a2q_weights_is_refused_by_name(tmp_path):
    qmodel, x = _trained(QuantizationMode.eager_mode, True)
    with pytest.raises(UnsupportedExportError, match=r"quantizer '0\.weight_quant' \(weight\): round_method=toward_zero"):
        ModelExporter(tmp_path / "d.onnx", dynamo=True).export_qonnx_model(qmodel, x)
