"""The IPU's rules: those of every precision, XINT8's, and the integer-only graph rule.

Rules common to every precision (each a row of :mod:`...rules`, all problems reported at once in
one ``TargetCheckError``): per quantized layer, its input, weight and bias quantized (a float
operand runs on the CPU); on the written graph, opset 17 and static shapes. XINT8's own: symmetric
int8 weights and activations, power-of-two scales, half-even rounding, static scales; int32 bias
with scale = input scale x weight scale; on the graph, every Q/DQ scale an exact power of two, zero
points 0, weights int8, biases int32 with scale = s_in * s_w, and every float operation between
DequantizeLinear and QuantizeLinear (:func:`integer_only`). A layerwise model (its layers quantized,
not the tensors between them) is checked layer by layer instead (:data:`LAYER_COMPUTE`), and what
stays float between its layers, which Ryzen AI runs on the CPU, is named in a warning
(:data:`ON_THE_CPU`); a graph-mode model's graph must be integer-only.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer

from quark.torch.extensions.brevitas._backend.export.onnx_graph import (
    Graph,
    dynamic_shapes,
    is_pof2,
    opset_of,
)
from quark.torch.extensions.brevitas._backend.inventory import Module
from quark.torch.extensions.brevitas._backend.rules import BIAS, DATA, FROM_A_SPEC, Found, Rule, spec_rule
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import RoundType, ScaleType
from quark.torch.quantization.tensor_quant import Format

OPSET = 17

#: int32 biases on the product of the input and weight scales (every integer precision)
BIAS32_RULES: tuple[Rule, ...] = (
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
    *BIAS32_RULES,
)

_LAYER_ROLES = {"input_quant": "input_tensors", "weight_quant": "weight", "bias_quant": "bias"}


def _operands_quantized(subject: Module, roles: tuple[str, ...] = tuple(_LAYER_ROLES)) -> Iterable[Found]:
    layer = subject.module
    if not isinstance(layer, QuantWeightBiasInputOutputLayer) or not layer.weight_quant.is_quant_enabled:
        return
    missing = [
        role
        for attr, role in _LAYER_ROLES.items()
        if attr in roles
        and not getattr(layer, attr).is_quant_enabled
        and (attr != "bias_quant" or layer.bias is not None)
        and (attr != "input_quant" or Role.input_tensors not in subject.upstream)
    ]
    if missing:
        yield f"{', '.join(missing)} not quantized"


#: float-format precisions (BF16, BFP16): the input and weight in the format, the bias float
FLOAT_BIAS_LAYER_RULES: tuple[Rule, ...] = (
    Rule(
        "a quantized layer with a float input or weight",
        lambda subject: _operands_quantized(subject, ("input_quant", "weight_quant")),
        "its input and weight quantized (or the layer excluded); the bias float",
        "the IPU runs a layer on the NPU only with its input and weight in the precision",
    ),
)

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


def _compute_nodes(model: Any, layers_only: bool = False) -> Iterable[Found]:
    """Every Conv / Gemm / MatMul's problems; ``layers_only``: of those with a weight (a constant
    operand, through its DequantizeLinear and data movement), the quantized layers."""
    graph = Graph(model)
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul") and (not layers_only or _has_weight(graph, node)):
            yield from _compute_node(graph, node)


def _has_weight(graph: Graph, node: Any) -> bool:
    name = node.input[1] if len(node.input) > 1 else ""
    producer = graph.producer.get(name)
    while producer is not None and producer.op_type in MOVES | _QDQ:
        name = producer.input[0]
        producer = graph.producer.get(name)
    return name in graph.constants


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


#: on every written QDQ graph, whatever the precision
COMMON_GRAPH_RULES: tuple[Rule, ...] = (
    Rule("another opset", _opset, f"opset {OPSET}", "the Ryzen AI flow takes opset 17"),
    Rule(
        "dynamic shapes",
        lambda model: dynamic_shapes(model),
        "static input/output shapes",
        "the NPU compiler needs static shapes: a dynamic batch sends the model to the CPU",
    ),
)

#: integer precisions: every float operation runs on dequantized values and is quantized again
INTEGER_ONLY = Rule(
    "float operations outside DequantizeLinear -> op -> QuantizeLinear",
    lambda model: integer_only(model),
    "every float operation between DequantizeLinear and QuantizeLinear (data movement, and Relu / Clip before a "
    "QuantizeLinear, pass through)",
    "the NPU runs a float operation (LayerNorm, Softmax, GELU, Add, ...) on quantized tensors only in the QDQ form "
    "DQ -> op -> Q, which ONNX Runtime's QDQ fusion takes; an operation outside it runs on the CPU",
)

#: integer precisions: Conv / Gemm / MatMul on dequantized integers
COMPUTE = Rule(
    "float operands, weights other than int8, biases other than int32 of scale s_in * s_w",
    lambda model: _compute_nodes(model),
    "weights int8, biases int32 with scale = s_in * s_w",
    "the NPU computes integer products and accumulates int32",
)

#: layerwise integer precisions: the quantized layers' Conv / Gemm / MatMul on dequantized integers
LAYER_COMPUTE = Rule(
    "quantized layers with float operands, weights other than int8, biases other than int32 of scale s_in * s_w",
    lambda model: _compute_nodes(model, layers_only=True),
    "each quantized layer's Conv / Gemm / MatMul on int8 weights and a dequantized input, biases int32 with scale "
    "s_in * s_w",
    "layerwise quantization quantizes the layers, not the tensors between them: the NPU computes the layers, Ryzen AI "
    "runs what stays float on the CPU (graph mode quantizes every tensor: an integer-only graph)",
)

def _on_the_cpu(model: Any) -> list[str]:
    """Layerwise: the float operations outside DequantizeLinear -> op -> QuantizeLinear and the products of
    two activations, which run on the CPU (a note of the report, not a refusal)."""
    graph = Graph(model)
    compute = {f"{n.op_type} {n.name or n.output[0]!r}:": _has_weight(graph, n) for n in model.graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    products = [f"{where} a product of two activations" for where, weighted in compute.items() if not weighted]
    found = products + [line for line in integer_only(model) if not line.startswith(tuple(compute))]
    if not found:
        return []
    shown = "; ".join(found[:10]) + (f"; and {len(found) - 10} more" if len(found) > 10 else "")
    return [f"{len(found)} float operations run on the CPU (layerwise: the tensors between layers are not quantized): {shown}"]


#: layerwise integer precisions: what stays float between the layers runs on the CPU, named in the report
ON_THE_CPU = Rule(
    "(nothing: the report names the float operations between layers)",
    lambda model: iter(()),
    "every float operation between DequantizeLinear and QuantizeLinear, or named here as running on the CPU",
    "layerwise quantization leaves the tensors between layers float; Ryzen AI runs those operations on the CPU",
    notes=_on_the_cpu,
)

#: XINT8 on the written QDQ graph
GRAPH_RULES: tuple[Rule, ...] = (
    *COMMON_GRAPH_RULES,
    Rule(
        "Q/DQ scales that are not powers of two, non-zero zero points",
        _quantize_nodes,
        "Q/DQ scales exact powers of two, zero points 0",
        "XINT8 rescales by shifts around symmetric grids",
    ),
    COMPUTE,
    INTEGER_ONLY,
)

#: operations that move or select values (ONNX Runtime drops their Q/DQ or propagates through them)
MOVES = frozenset(
    {"Reshape", "Transpose", "Flatten", "Squeeze", "Unsqueeze", "Identity", "MaxPool", "Slice", "Gather", "Split",
     "Concat", "Expand", "Pad", "Tile", "GatherElements", "Where"}
)
#: the data input of a move, where it is not the first (Where selects from input 1, input 0 is its condition)
DATA_INPUT = {"Where": 1}
#: operations that only compute shapes, indices or constants
BOOKKEEPING = frozenset({"Shape", "Size", "Constant", "ConstantOfShape", "Range"})
#: operations ONNX Runtime folds into the quantizer after them (ReluQuantFusion, ClipQuantFusion)
FOLDED_BEFORE_Q = frozenset({"Relu", "Clip"})
_QDQ = frozenset({"QuantizeLinear", "DequantizeLinear"})


def integer_only(model: Any) -> Iterable[Found]:
    """The float operations of ``model`` not in the form DequantizeLinear -> op -> QuantizeLinear.

    A float operation is any node but Q/DQ, data movement (:data:`MOVES`) and bookkeeping. Its
    tensor inputs must come from a DequantizeLinear (through data movement), a constant, or a
    computation on integer graph inputs and constants only (host preprocessing: an attention mask
    made from token ids); its outputs must reach only QuantizeLinear nodes (through data movement,
    or a Relu / Clip ONNX Runtime folds into that quantizer) or be a graph output (the last layer's
    float result). A function of *one* dequantized tensor that the exporter writes as several nodes
    (GELU at opset 17: Div, Erf, Add, Mul, Mul) counts as one operation: its nodes may feed each
    other. Each offending node is named with the first input or output at fault.
    """
    graph = model.graph
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[Any]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    constants = {i.name for i in graph.initializer}
    float_inputs = {i.name for i in graph.input if i.type.tensor_type.elem_type in (1, 10, 11, 16)}
    outputs = {o.name for o in graph.output}
    memo: dict[str, frozenset[str] | None] = {}

    def data(node: Any) -> str:
        return node.input[DATA_INPUT.get(node.op_type, 0)]

    def sources(name: str) -> frozenset[str] | None:
        """The dequantized tensors ``name`` is computed from (through float operations); empty for
        constants and host values; None when a float graph input feeds it."""
        if name in memo:
            return memo[name]
        memo[name] = frozenset()  # the graph is acyclic; a placeholder for the recursion
        node = producer.get(name)
        if node is None:
            found = None if name in float_inputs else frozenset()
        elif node.op_type == "DequantizeLinear":
            found = frozenset({name})
        elif node.op_type in MOVES:
            found = sources(data(node))
        else:
            parts = [sources(i) for i in node.input if i]
            found = None if any(p is None for p in parts) else frozenset().union(*parts)
        memo[name] = found
        return found

    def from_host(name: str) -> bool:
        return sources(name) == frozenset() and producer.get(name) is not None or name in constants

    def dequantized(name: str) -> bool:
        node = producer.get(name)
        while node is not None and node.op_type in MOVES:
            node = producer.get(data(node))
        return node is not None and node.op_type == "DequantizeLinear"

    def is_float_op(node: Any) -> bool:
        return node.op_type not in _QDQ and node.op_type not in MOVES and node.op_type not in BOOKKEEPING

    def requantized(name: str, island: frozenset[str] | None, folded: bool = True) -> bool:
        if name in outputs:
            return True
        users = consumers.get(name, [])
        return bool(users) and all(
            u.op_type == "QuantizeLinear"
            or (u.op_type in MOVES and all(requantized(o, island, folded) for o in u.output))
            or (folded and u.op_type in FOLDED_BEFORE_Q and all(requantized(o, None, False) for o in u.output))
            or (island is not None and is_float_op(u) and sources(u.output[0]) == island)
            for u in users
        )

    for node in graph.node:
        if not is_float_op(node):
            continue
        if all(not i or i in constants or sources(i) == frozenset() for i in node.input):
            continue  # host preprocessing (mask arithmetic on token ids)
        where = f"{node.op_type} {node.name or node.output[0]!r}"
        if node.op_type in FOLDED_BEFORE_Q and all(requantized(o, None, False) for o in node.output):
            before = producer.get(node.input[0])
            if before is not None and is_float_op(before):
                continue  # folded into the quantizer after it, with the operation before it
        found = sources(node.output[0]) if node.output else None
        island = found if found is not None and len(found) == 1 else None
        bad_in = next(
            (
                i
                for i in node.input
                if i
                and i not in constants
                and sources(i) != frozenset()
                and not dequantized(i)
                and (island is None or sources(i) != island)
            ),
            None,
        )
        if bad_in is not None:
            yield f"{where}: input {bad_in!r} is not dequantized (a float operation outside Q/DQ)"
            continue
        bad_out = next((o for o in node.output if o and not requantized(o, island)), None)
        if bad_out is not None:
            yield f"{where}: output {bad_out!r} is not quantized again (a float operation outside Q/DQ)"


def _show(values: Any) -> str:
    if values is None:
        return "(not a constant)"
    flat = np.asarray(values).ravel()
    return f"{flat[:4].tolist()}{'...' if flat.size > 4 else ''}"


def _dtype(values: Any) -> str:
    return "not a constant" if values is None else str(values.dtype)
