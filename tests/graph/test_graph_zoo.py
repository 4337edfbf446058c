"""Graph mode on the export zoo's FPGA / NPU shapes: a TFC-like MLP, a CNV-like CNN, a ResNet-like
network with batch norm, a network with a concatenation and a MobileNet-like network with
depthwise convolutions.

- FINN: the FINN preset, PTQ and a few QAT steps, QONNX export verified, the network input made
  integer, ConvertQONNXtoFINN and StreamlinePlus; the streamlined graph computes exactly what the
  torch model does, and between the first and last compute layer only integer nodes remain.
- IPU: the XINT8 preset in graph mode; the QDQ export passes the IPU checks and every activation
  tensor, residual sums and concatenations included, lies between QuantizeLinear and
  DequantizeLinear (checked here again with plain onnx).
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
import torch.nn.functional as F
from export.zoo import ZOO, calibration

from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn, xint8
from quark.torch.quantization.config.algorithms import Preprocess
from quark.torch.quantization.config.config import TQTSpec
from quark.torch.quantization.config.type import QuantizationMode, TQTThresholdInitMeth

NETWORKS = ("tfc", "cnv", "resnet_bn", "concat", "mobilenet")
#: network -> activation types with non-negative outputs
UNSIGNED = {"mobilenet": ("ReLU6",)}
#: network -> float nodes FINN leaves between its first and last compute layer (ReLU6's Clip is
#: absorbed into the thresholds by the hand-off)
FLOAT_OPERATIONS = dict.fromkeys(NETWORKS, 0)


def _model(name: str) -> torch.nn.Module:
    """The zoo network with batch-norm statistics of its data (as a trained network has)."""
    torch.manual_seed(0)
    model = ZOO[name].build().train()
    with torch.no_grad():
        for batch in calibration(ZOO[name], batches=4, seed=5):
            model(batch)
    return model.eval()


def _qat_steps(model: torch.nn.Module, name: str, steps: int = 3) -> None:
    g = torch.Generator().manual_seed(9)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    model.train()
    for _ in range(steps):
        x = ZOO[name].sample(g)
        optimizer.zero_grad()
        F.cross_entropy(model(x), torch.randint(0, 10, (x.shape[0],), generator=g)).backward()
        optimizer.step()
    model.eval()


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_finn_streamlines_the_graph_into_an_integer_dataflow_equal_to_torch(tmp_path, name):
    from quark.torch.extensions.brevitas.api import finn_handoff

    pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")
    config = finn(unsigned=UNSIGNED.get(name, ("ReLU",)), qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    qmodel = ModelQuantizer(config).quantize_model(_model(name), calibration(ZOO[name]), progress=False)
    _qat_steps(qmodel, name)
    x = ZOO[name].sample(torch.Generator().manual_seed(1))
    path = tmp_path / f"{name}.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    assert report.passed and report.target_checks  # the FINN target's graph checks ran

    integer = finn_interface.integer_input(path, tmp_path / f"{name}_int.onnx")
    assert integer.datatype == "UINT8"
    x_int = torch.clamp(torch.floor(x / integer.scale + 0.5), 0, 255)
    handoff = finn_handoff(tmp_path / f"{name}_int.onnx", x_int)
    assert handoff.input_datatypes == ("UINT8",)
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    streamlined = ModelWrapper(handoff.path)
    produced = execute_qonnx(streamlined, [x_int.numpy()])[0]  # the hand-off's graph takes one sample at a time
    with torch.no_grad():
        expected = qmodel(x).numpy()
    np.testing.assert_array_equal(produced, expected)
    floats = finn_interface.float_operations(streamlined)
    assert len(floats) == FLOAT_OPERATIONS[name], floats
    assert "MultiThreshold" in handoff.steps[-1].op_types and "Quant" not in handoff.steps[-1].op_types


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


@pytest.mark.parametrize("name", NETWORKS)
def test_xint8_graph_mode_qdq_export_passes_the_ipu_checks_with_every_activation_between_qdq(tmp_path, name):
    config = xint8()
    config.quant_mode = QuantizationMode.fx_graph_mode
    config.pre_quant_opt_config = [Preprocess(equalize_iterations=0)]  # batch norm merged, as for deployment
    qmodel = ModelQuantizer(config).quantize_model(_model(name), calibration(ZOO[name]), progress=False)
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


@pytest.mark.slow
@pytest.mark.parametrize("name", NETWORKS)
def test_graph_mode_reaches_one_finn_dataflow_partition_equal_to_torch(tmp_path, name):
    """Issue 12 from a float model and a Quark config: FINN preset, graph mode, QAT steps, then
    ``export_finn_dataflow`` with an integer input: one partition of hardware layers (only the input
    layout change on the host), its Python execution equal to torch, an estimate for the part."""
    pytest.importorskip("finn.transformation.fpgadataflow.create_dataflow_partition", reason="finn-plus is not installed")
    config = finn(unsigned=UNSIGNED.get(name, ("ReLU",)), qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    qmodel = ModelQuantizer(config).quantize_model(_model(name), calibration(ZOO[name]), progress=False)
    _qat_steps(qmodel, name)
    x = torch.cat([ZOO[name].sample(torch.Generator().manual_seed(s)) for s in range(2)])
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel.eval(), x, part="xc7z020clg400-1", integer_input=True)
    assert result.verification.passed and result.verification.samples == len(x)
    assert result.verification.max_abs_diff == 0.0
    # on the host: the input's layout change and the output's float scale and bias
    # (each named "<node> (<op>[, module '<torch module>'])")
    ops = [o.split(" (", 1)[1].split(",")[0].rstrip(")") for o in result.outside]
    assert all(op in ("Transpose", "Flatten", "Mul", "Add") for op in ops), result.outside
    assert result.estimate.fps > 0 and result.estimate.totals["LUT"] > 0
