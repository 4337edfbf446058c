"""Graph mode on the export zoo's NPU shapes: the XINT8 preset in graph mode; the QDQ export passes the
IPU checks and every activation tensor, residual sums and concatenations included, lies between
QuantizeLinear and DequantizeLinear (checked here again with plain onnx)."""

from __future__ import annotations

import onnx
import pytest
import torch
from _shared.zoo import GRAPH_ZOO, ZOO, calibration, with_statistics

from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import xint8
from quark.torch.quantization.config.algorithms import Preprocess
from quark.torch.quantization.config.type import QuantizationMode


def _between_qdq(model: onnx.ModelProto) -> list[str]:
    """Activation tensors not produced by DequantizeLinear (inputs of computing nodes) or not
    consumed by QuantizeLinear (outputs), written independently of the exporter's checks."""
    graph = model.graph
    constants = {i.name for i in graph.initializer} | {n.output[0] for n in graph.node if n.op_type == "Constant"}
    producer = {o: n for n in graph.node for o in n.output}
    consumers: dict[str, list] = {}
    for n in graph.node:
        for i in n.input:
            consumers.setdefault(i, []).append(n)
    outputs = {o.name for o in graph.output}
    activation_fns = ("Relu", "Clip")  # Conv -> Relu -> QuantizeLinear is one quantized step
    problems = []
    for node in graph.node:
        if node.op_type in ("QuantizeLinear", "DequantizeLinear", "Constant"):
            continue
        for name in node.input:
            if not name or name in constants:
                continue
            source = producer.get(name)
            fused = node.op_type in activation_fns and source is not None and source.op_type in ("Conv", "Gemm")
            if (source is None or source.op_type != "DequantizeLinear") and not fused:
                problems.append(f"input {name} of {node.op_type}")
        for name in node.output:
            users = consumers.get(name, [])
            quantized = users and all(
                u.op_type == "QuantizeLinear" or (u.op_type in activation_fns and node.op_type in ("Conv", "Gemm"))
                for u in users
            )
            if name not in outputs and not quantized:
                problems.append(f"output {name} of {node.op_type}")
    return problems


@pytest.mark.parametrize("name", GRAPH_ZOO)
def test_xint8_graph_mode_qdq_export_passes_the_ipu_checks_with_every_activation_between_qdq(tmp_path, name):
    config = xint8()
    config.quant_mode = QuantizationMode.fx_graph_mode
    config.pre_quant_opt_config = [Preprocess(equalize_iterations=0)]  # batch norm merged, as for deployment
    qmodel = ModelQuantizer(config).quantize_model(with_statistics(name), calibration(ZOO[name]), progress=False)
    x = ZOO[name].sample(torch.Generator().manual_seed(1))
    path = tmp_path / f"{name}.onnx"
    report = ModelExporter(path).export_onnx_model(qmodel, x)
    assert report.passed and report.exact and len(report.target_checks) == 4
    model = onnx.load(str(path))
    assert _between_qdq(model) == []
    ops = [n.op_type for n in model.graph.node]
    if name == "resnet_bn":
        assert ops.count("Add") == 2
    if name == "concat":
        assert ops.count("Concat") == 1
