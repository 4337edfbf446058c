"""Two parts of the QDQ export that layerwise transformers need: weights transposed in the integer
initializer (``qdq.fold_weight_transposes``), and the quantizer-by-quantizer comparison of graphs with
float operations between their quantizers (``replay.py``), which must still catch a wrong graph."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from _shared.configs import W8, layer_config
from _shared.quantize import quantize
from onnx import numpy_helper
from torch import nn

from quark.torch.extensions.brevitas._backend.export import replay as replay_module
from quark.torch.extensions.brevitas._backend.export import verify
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.export.inputs import ExampleInputs, flatten_outputs
from quark.torch.extensions.brevitas.api import ModelExporter
from quark.torch.extensions.brevitas.presets import activation_spec

A8_ASYM = activation_spec(8)  # uint8, float scale, a zero point: the A8W8 preset's activations


class Block(nn.Module):
    """Attention-like: Linears on [batch, tokens, features], LayerNorm, a product of two activations, Softmax."""

    def __init__(self) -> None:
        super().__init__()
        self.q, self.k, self.out = nn.Linear(16, 16), nn.Linear(16, 16), nn.Linear(16, 8)
        self.norm = nn.LayerNorm(16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm(x)
        attention = torch.softmax(self.q(h) @ self.k(h).transpose(1, 2), dim=-1)
        return self.out(attention @ h + x)


def _block() -> tuple[nn.Module, torch.Tensor]:
    torch.manual_seed(0)
    data = [torch.randn(4, 6, 16) for _ in range(3)]
    return quantize(layer_config(weight=W8, input_tensors=A8_ASYM), Block(), data), torch.randn(3, 6, 16)


def test_weights_of_linears_on_3d_inputs_are_transposed_in_the_integer_initializer(onnx_path):
    qmodel, x = _block()
    assert ModelExporter(onnx_path).export_onnx_model(qmodel, x).passed
    model = onnx.load(onnx_path)
    producer = {o: n for n in model.graph.node for o in n.output}
    constants = {i.name: numpy_helper.to_array(i) for i in model.graph.initializer}
    weighted = [n for n in model.graph.node if n.op_type == "MatMul" and producer.get(n.input[1]) is not None
                and producer[n.input[1]].op_type == "DequantizeLinear" and producer[n.input[1]].input[0] in constants]  # fmt: skip
    assert len(weighted) == 3  # q, k, out: each MatMul's weight is DequantizeLinear(int8 constant), no Transpose
    for node in weighted:
        dq = producer[node.input[1]]
        weight = constants[dq.input[0]]
        axis = next(a.i for a in dq.attribute if a.name == "axis")
        assert weight.dtype == np.int8 and axis == 1 and constants[dq.input[1]].shape == (weight.shape[1],)
    assert not any(n.op_type == "Transpose" and producer.get(n.input[0], n).op_type == "DequantizeLinear" for n in model.graph.node)


def _replay(onnx_model: onnx.ModelProto, qmodel: nn.Module, x: torch.Tensor):
    inputs = ExampleInputs.of(qmodel, x)
    feeds = [t.numpy() for t in inputs.tensors]
    return replay_module.replay(qmodel, inputs.run, onnx_model, feeds, verify.RUNNERS[ExportFormat.qcdq], flatten_outputs), feeds


def test_replay_maps_every_quantizer_and_agrees_with_the_graph(onnx_path):
    qmodel, x = _block()
    ModelExporter(onnx_path).export_onnx_model(qmodel, x)
    model = onnx.load(onnx_path)
    inputs = ExampleInputs.of(qmodel, x)
    calls = replay_module.quantizer_calls(qmodel, inputs.run)
    assert calls == ["q.input_quant", "k.input_quant", "out.input_quant"]
    nodes = replay_module.quantizer_tensors(model)
    assert [path for path, _, _ in nodes] == calls  # one QuantizeLinear per call, in order, named by its scope
    assert replay_module.pair_calls(calls, nodes) == {0: 0, 1: 1, 2: 2}
    # a quantizer whose result the graph does not use has no node: left out; a node without its call: no pairing
    assert replay_module.pair_calls(["unused.input_quant", *calls], nodes) == {1: 0, 2: 1, 3: 2}
    assert replay_module.pair_calls(calls[:2], nodes) is None
    result, feeds = _replay(model, qmodel, x)
    (produced,) = verify.RUNNERS[ExportFormat.qcdq](model, feeds)
    assert result.quantizers == 3 and result.worst_lsb <= 1
    assert np.abs(produced - result.expected[0]).max() <= verify.float_tolerance(result.expected)


def test_replay_catches_a_quantizer_on_another_grid(onnx_path):
    qmodel, x = _block()
    ModelExporter(onnx_path).export_onnx_model(qmodel, x)
    model = onnx.load(onnx_path)
    q = next(n for n in model.graph.node if n.op_type == "QuantizeLinear" and n.name.startswith("/out/"))
    scale = next(i for i in model.graph.initializer if i.name == q.input[1])
    scale.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(scale) * np.float32(1.5), scale.name))
    result, _ = _replay(model, qmodel, x)
    assert result.worst_lsb > 1


def test_replay_catches_a_wrong_weight(onnx_path):
    qmodel, x = _block()
    ModelExporter(onnx_path).export_onnx_model(qmodel, x)
    model = onnx.load(onnx_path)
    weight = next(i for i in model.graph.initializer if numpy_helper.to_array(i).dtype == np.int8 and numpy_helper.to_array(i).shape == (16, 8))
    values = numpy_helper.to_array(weight).copy()
    values[0, 0] = -values[0, 0] if values[0, 0] else 100
    weight.CopyFrom(numpy_helper.from_array(values, weight.name))
    result, feeds = _replay(model, qmodel, x)
    (produced,) = verify.RUNNERS[ExportFormat.qcdq](model, feeds)
    assert result.worst_lsb <= 1  # the quantizers agree ...
    assert np.abs(produced - result.expected[0]).max() > verify.float_tolerance(result.expected)  # ... the layer does not


@pytest.mark.parametrize(("quotient", "at_boundary"), [(2.5, True), (2.5 + 1e-7, True), (2.3, False), (2.9, False)])
def test_a_one_lsb_difference_is_a_rounding_flip_only_at_a_rounding_boundary(quotient, at_boundary):
    scale, zero_point = torch.tensor(0.25), torch.tensor(3.0)
    x = torch.tensor([quotient * 0.25])
    assert replay_module._at_boundaries(x, scale, zero_point, torch.tensor([True])) is at_boundary
