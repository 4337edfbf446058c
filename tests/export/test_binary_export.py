"""Bipolar and ternary quantizers export to QONNX (``BipolarQuant``; ternary as a narrow 2-bit
``Quant``), which qonnx executes equal to torch; the graph re-read with plain onnx holds them."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _shared.configs import layer_config
from _shared.quantize import quantize
from onnx import helper, numpy_helper
from torch import nn

from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype
from quark.torch.quantization.observer import UnitScaleObserver

pytest.importorskip("qonnx")


def _mlp() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 4))
    model(torch.randn(32, 16))
    return model.eval()


def _nodes(path) -> list[onnx.NodeProto]:
    return list(onnx.load(str(path)).graph.node)


def test_bipolar_weights_and_inputs_export_as_bipolar_quant(onnx_path):
    config = layer_config(
        weight=QuantizationSpec(dtype=Dtype.bipolar), input_tensors=QuantizationSpec(dtype=Dtype.bipolar, observer_cls=UnitScaleObserver)
    )
    model = quantize(config, _mlp())
    x = torch.randn(64, 16)
    report = ModelExporter(onnx_path).export_qonnx_model(model, x)
    assert report.passed and report.max_abs_diff <= 1e-6  # qonnx executes it as torch (float batch norm between)
    bipolar = [n for n in _nodes(onnx_path) if n.op_type == "BipolarQuant"]
    assert len(bipolar) == 4  # two weights, two layer inputs
    assert all(n.domain.startswith("qonnx") for n in bipolar)
    graph = onnx.load(str(onnx_path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    for node in bipolar:
        if node.input[0] in weights:  # a weight: its float values go in, sign(w) x E|w| comes out
            w = weights[node.input[0]]
            scale = weights[node.input[1]]
            np.testing.assert_allclose(scale, np.abs(w).mean(), rtol=1e-6)


def test_ternary_exports_as_a_narrow_two_bit_quant(onnx_path):
    ternary = QuantizationSpec(dtype=Dtype.ternary)
    model = quantize(layer_config(weight=ternary, input_tensors=ternary), _mlp(), [torch.randn(32, 16)])
    report = ModelExporter(onnx_path).export_qonnx_model(model, torch.randn(64, 16))
    assert report.passed
    graph = onnx.load(str(onnx_path)).graph
    weights = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    quants = [n for n in graph.node if n.op_type == "Quant"]
    assert len(quants) == 2  # the weights; FINN folds them as qonnx executes them
    for node in quants:
        attributes = {a.name: a.i for a in node.attribute if a.name in ("narrow", "signed")}
        assert attributes == {"narrow": 1, "signed": 1} and float(weights[node.input[3]]) == 2.0  # bit width
    # the inputs: half-even onto {-1, 0, 1}, as thresholds FINN takes as they are (it would round a Quant's ties up)
    thresholds = [n for n in graph.node if n.op_type == "MultiThreshold"]
    assert len(thresholds) == 2
    for node in thresholds:
        attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
        assert attributes["out_dtype"] == b"INT2" and attributes["out_bias"] == -1.0


def test_graph_mode_w1a1_exports_for_finn_with_the_target_checks(onnx_path):
    model = quantize(presets.finn(weight_bits=1, act_bits=1), _mlp(), [torch.rand(32, 16)])
    report = ModelExporter(onnx_path).export_qonnx_model(model, torch.rand(64, 16))
    assert report.passed and report.target_checks  # the FINN checks ran, before and after
    ops = [n.op_type for n in _nodes(onnx_path)]
    assert ops.count("BipolarQuant") == 3 and "Relu" not in ops  # 2 weights, the sign after batch norm
