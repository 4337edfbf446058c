"""The AMD IPU / NPU (Ryzen AI) target: the XINT8 scheme on a QDQ graph at opset 17.

Rules (each a row of :mod:`...rules`, all problems reported at once in one ``TargetCheckError``):

- before export, per quantizer: symmetric int8 weights and activations, power-of-two scales,
  half-even rounding, static scales; int32 bias with scale = input scale x weight scale; per
  quantized layer: its input, weight and bias quantized (a float operand runs on the CPU);
- on the written graph: opset 17, static shapes, every Q/DQ scale an exact power of two, zero
  points 0, weights int8, biases int32 with scale = s_in * s_w.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.export.onnx_graph import (
    Graph,
    dynamic_shapes,
    is_pof2,
    opset_of,
)
from quark.torch.extensions.brevitas._backend.inventory import Module
from quark.torch.extensions.brevitas._backend.rules import BIAS, DATA, FROM_A_SPEC, Found, Rule, spec_rule
from quark.torch.extensions.brevitas._backend.targets.target import Target
from quark.torch.quantization.config.type import DeviceType, RoundType, ScaleType
from quark.torch.quantization.tensor_quant import Format

OPSET = 17

#: XINT8, per quantizer
QUANTIZER_RULES: tuple[Rule, ...] = (
    FROM_A_SPEC,
    spec_rule(
        DATA,
        "dtype",
        lambda s: s.format is Format.integer and s.bit_width == 8 and s.signed,
        "int8",
        "XINT8 runs signed 8-bit integers",
        shown=lambda s: s.dtype_name,
    ),
    spec_rule(DATA, "symmetric", lambda s: s.symmetric, "True (zero point 0)", "XINT8 zero points are 0"),
    spec_rule(
        DATA | BIAS,
        "scale_type",
        lambda s: s.tqt or s.scale_type is ScaleType.pof2 or s.bias_scale_from_product,
        "pof2 (power-of-two scales)",
        "the NPU rescales by shifts",
    ),
    spec_rule(
        DATA,
        "round_method",
        lambda s: s.round_method is RoundType.half_even,
        "half_even",
        "ONNX QuantizeLinear rounds half to even",
    ),
    spec_rule(DATA, "is_dynamic", lambda s: not s.is_dynamic, "False", "XINT8 scales are fixed at compile time"),
    spec_rule(BIAS, "dtype", lambda s: s.bit_width == 32, "int32", "the NPU accumulates in 32 bits", shown=lambda s: f"int{s.bit_width}"),
    spec_rule(
        BIAS,
        "observer_cls",
        lambda s: s.bias_scale_from_product,
        "None (bias scale = input scale x weight scale)",
        "the bias is added to the integer accumulator",
        shown=lambda s: s.observer.__name__,
    ),
)

_LAYER_ROLES = {"input_quant": "input_tensors", "weight_quant": "weight", "bias_quant": "bias"}


def _operands_quantized(subject: Module) -> Iterable[Found]:
    layer = subject.module
    if not isinstance(layer, QuantWeightBiasInputOutputLayer) or not layer.weight_quant.is_quant_enabled:
        return
    missing = [
        role
        for attr, role in _LAYER_ROLES.items()
        if not getattr(layer, attr).is_quant_enabled
        and (attr != "bias_quant" or layer.bias is not None)
        and (attr != "input_quant" or "input_tensors" not in subject.upstream)
    ]
    if missing:
        yield f"{', '.join(missing)} not quantized"


#: per quantized layer (its input may arrive quantized from upstream in graph mode)
LAYER_RULES: tuple[Rule, ...] = (
    Rule(
        "a quantized layer with a float input, weight or bias",
        _operands_quantized,
        "its input, weight and bias quantized (or the layer excluded)",
        "the IPU runs a layer on the NPU only with its input, weight and bias quantized; a float operand runs on "
        "the CPU",
    ),
)


def _opset(model: Any) -> Iterable[Found]:
    opset = opset_of(model)
    if opset != OPSET:
        yield f"opset {opset}"


def _quantize_nodes(model: Any) -> Iterable[Found]:
    graph = Graph(model)
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        where = f"{node.op_type} {node.name or node.output[0]!r}"
        scale = graph.scale(node)
        if scale is None or not is_pof2(scale):
            yield f"{where}: scale {_show(scale)} is not an exact power of two"
        zero_point = graph.constants.get(node.input[2]) if len(node.input) > 2 else None
        if zero_point is not None and np.any(zero_point != 0):
            yield f"{where}: zero point {_show(zero_point)}"
        if zero_point is not None and zero_point.dtype not in (np.int8, np.int32):
            yield f"{where}: zero point dtype {zero_point.dtype}"


def _compute_nodes(model: Any) -> Iterable[Found]:
    graph = Graph(model)
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            yield from _compute_node(graph, node)


def _compute_node(graph: Graph, node: Any) -> Iterable[Found]:
    where = f"{node.op_type} {node.name or node.output[0]!r}"
    dq = [graph.producer.get(i) if i else None for i in node.input]
    floats = [
        f"{where}: input {index} {name!r} is not dequantized from an integer (float operand)"
        for index, (name, producer) in enumerate(zip(node.input, dq))
        if name and (producer is None or producer.op_type != "DequantizeLinear")
    ]
    if floats:
        yield from floats
        return
    weight = graph.constants.get(dq[1].input[0])
    if node.op_type != "MatMul" and (weight is None or weight.dtype != np.int8):
        yield f"{where}: weight {dq[1].input[0]!r} is {_dtype(weight)}"
    if len(node.input) > 2 and node.input[2]:
        bias = graph.constants.get(dq[2].input[0])
        if bias is None or bias.dtype != np.int32:
            yield f"{where}: bias {dq[2].input[0]!r} is {_dtype(bias)}"
        s_in, s_w, s_b = (graph.scale(p) for p in dq[:3])
        if s_in is not None and s_w is not None and s_b is not None:
            expected = np.asarray(s_in, np.float32) * np.asarray(s_w, np.float32)
            if np.broadcast(expected, s_b).shape != np.shape(s_b) or not np.array_equal(
                np.broadcast_to(expected, np.shape(s_b)), s_b
            ):
                yield f"{where}: bias scale {_show(s_b)} != input scale x weight scale {_show(expected)}"


#: on the written QDQ graph
GRAPH_RULES: tuple[Rule, ...] = (
    Rule("another opset", _opset, f"opset {OPSET}", "the Ryzen AI flow takes opset 17"),
    Rule(
        "dynamic shapes",
        lambda model: dynamic_shapes(model),
        "static input/output shapes",
        "the NPU compiler needs static shapes: a dynamic batch sends the model to the CPU",
    ),
    Rule(
        "Q/DQ scales that are not powers of two, non-zero zero points",
        _quantize_nodes,
        "Q/DQ scales exact powers of two, zero points 0",
        "XINT8 rescales by shifts around symmetric grids",
    ),
    Rule(
        "float operands, weights other than int8, biases other than int32 of scale s_in * s_w",
        _compute_nodes,
        "weights int8, biases int32 with scale = s_in * s_w",
        "the NPU computes integer products and accumulates int32",
    ),
)


def _show(values: Any) -> str:
    if values is None:
        return "(not a constant)"
    flat = np.asarray(values).ravel()
    return f"{flat[:4].tolist()}{'...' if flat.size > 4 else ''}"


def _dtype(values: Any) -> str:
    return "not a constant" if values is None else str(values.dtype)


TARGET = Target(
    name="IPU",
    device=DeviceType.IPU,
    format=ExportFormat.qcdq,
    opset=OPSET,
    quantizer_rules=QUANTIZER_RULES,
    layer_rules=LAYER_RULES,
    graph_rules=GRAPH_RULES,
)
