"""QDQ propagation: QuantizeLinear / DequantizeLinear after the operations that move quantized
values without computing new ones, so every activation tensor of a QDQ graph is dequantized.

Graph mode hands quantized tensors through max pooling, flattening, reshaping and (same-scale)
concatenation; Brevitas writes them as DequantizeLinear -> MaxPool -> Conv, leaving a float
operand in front of the Conv that NPU compilers (and ``ipu.check_graph``) take as a float layer.
Quantizing the output again with the scale and zero point of the DequantizeLinear before it is
exact (the values are already on that grid, inside its range) and gives the DequantizeLinear ->
op -> QuantizeLinear pattern ONNX Runtime's QDQ rules expect. Written here because ONNX
Runtime's propagation lives inside its own quantizer, which cannot run on a quantized graph.

A weight that the exporter transposes after dequantizing it (a ``Linear`` on a tensor of more than
two dimensions becomes ``DequantizeLinear(W) -> Transpose -> MatMul``) leaves the MatMul a float
operand too; :func:`fold_weight_transposes` transposes the integer initializer instead (exact: a
permutation of integers, the per-axis scales following their axis).
"""

from __future__ import annotations

import numpy as np
import onnx
from onnx import helper, numpy_helper

#: single-data-input operations whose output values are some of their input values (per-tensor
#: quantization only: a per-axis scale would need its axis followed through the operation)
MOVES = frozenset({"MaxPool", "Flatten", "Reshape", "Transpose", "Squeeze", "Unsqueeze", "Identity"})
#: operations joining several inputs: propagated when every input has the same quantization
JOINS = frozenset({"Concat"})


#: integer types of 16-bit QuantizeLinear / DequantizeLinear, and the first ONNX opset that has them
WIDE_TYPES = frozenset({onnx.TensorProto.INT16, onnx.TensorProto.UINT16})
WIDE_OPSET = 21
#: ONNX Runtime's contrib domain, whose QuantizeLinear / DequantizeLinear take int16 / uint16 at any opset
CONTRIB = "com.microsoft"


def wide_domain(model: onnx.ModelProto) -> onnx.ModelProto:
    """Move the 16-bit QuantizeLinear / DequantizeLinear of ``model`` to ``com.microsoft`` where the
    model's ONNX opset is below 21 (the standard ops take int16 / uint16 from opset 21); in place."""
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), 0)
    if opset >= WIDE_OPSET:
        return model
    types = {i.name: i.data_type for i in model.graph.initializer}
    types.update(
        (node.output[0], a.t.data_type)
        for node in model.graph.node
        if node.op_type == "Constant"
        for a in node.attribute
        if a.name == "value"
    )
    moved = False
    for node in model.graph.node:
        quantizes = node.op_type in ("QuantizeLinear", "DequantizeLinear") and len(node.input) > 2
        if quantizes and types.get(node.input[2]) in WIDE_TYPES:
            node.domain = CONTRIB
            moved = True
    if moved and not any(o.domain == CONTRIB for o in model.opset_import):
        model.opset_import.append(helper.make_opsetid(CONTRIB, 1))
    return model


def fold_weight_transposes(model: onnx.ModelProto) -> onnx.ModelProto:
    """``DequantizeLinear(constant) -> Transpose`` as ``DequantizeLinear(transposed constant)``, where the
    DequantizeLinear's scale and zero point are constants and the Transpose is its only consumer (in
    place; returned for chaining). A per-axis quantizer's axis moves with the permutation."""
    graph = model.graph
    initializers = {i.name: i for i in graph.initializer}
    producer = {out: node for node in graph.node for out in node.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    folded: set[int] = set()
    for node in graph.node:
        dq = producer.get(node.input[0]) if node.op_type == "Transpose" else None
        if (
            dq is None
            or dq.op_type != "DequantizeLinear"
            or not all(name in initializers for name in dq.input)
            or len(consumers.get(dq.output[0], [])) != 1
        ):
            continue
        values = numpy_helper.to_array(initializers[dq.input[0]])
        perm = next((list(a.ints) for a in node.attribute if a.name == "perm"), list(range(values.ndim))[::-1])
        transposed = numpy_helper.from_array(np.ascontiguousarray(values.transpose(perm)), f"{dq.input[0]}_transposed")
        graph.initializer.append(transposed)
        axis = _axis(dq)
        if "axis" in axis or numpy_helper.to_array(initializers[dq.input[1]]).size > 1:
            axis = {"axis": perm.index(axis.get("axis", 1) % values.ndim)}
        replacement = helper.make_node(
            "DequantizeLinear", [transposed.name, *dq.input[1:]], [node.output[0]], name=f"{dq.name}_transposed", domain=dq.domain, **axis
        )  # fmt: skip
        node.CopyFrom(replacement)
        folded.add(id(dq))
    kept = [n for n in graph.node if id(n) not in folded]
    del graph.node[:]
    graph.node.extend(kept)
    used = {name for n in graph.node for name in n.input}
    unused = [i for i in graph.initializer if i.name not in used]
    for initializer in unused:
        graph.initializer.remove(initializer)
    return model


def propagate(model: onnx.ModelProto) -> onnx.ModelProto:
    """``model`` with a QuantizeLinear / DequantizeLinear pair after every data movement whose
    inputs are dequantized (in place; returned for chaining)."""
    graph = model.graph
    constants = {i.name: numpy_helper.to_array(i) for i in graph.initializer}
    constants.update(
        (node.output[0], numpy_helper.to_array(a.t))
        for node in graph.node
        if node.op_type == "Constant"
        for a in node.attribute
        if a.name == "value"
    )
    producer = {out: node for node in graph.node for out in node.output}
    outputs = {o.name for o in graph.output}
    consumers: dict[str, list[onnx.NodeProto]] = {}
    for node in graph.node:
        for name in node.input:
            consumers.setdefault(name, []).append(node)
    nodes: list[onnx.NodeProto] = []
    for node in graph.node:
        nodes.append(node)
        dq = _source_dequantize(node, producer, constants)
        result = node.output[0] if node.output else None
        if dq is None or result in outputs or _already_quantized(result, consumers):
            continue
        q_name, dq_name = f"{result}_qdq_q", f"{result}_qdq"
        quant = helper.make_node(
            "QuantizeLinear", [result, *dq.input[1:]], [q_name], name=f"{node.name}_qdq_Q", domain=dq.domain, **_axis(dq)
        )
        dequant = helper.make_node(
            "DequantizeLinear", [q_name, *dq.input[1:]], [dq_name], name=f"{node.name}_qdq_DQ", domain=dq.domain, **_axis(dq)
        )
        for user in consumers.get(result, []):
            user.input[:] = [dq_name if i == result else i for i in user.input]
        nodes += [quant, dequant]
        producer[dq_name] = dequant
    del graph.node[:]
    graph.node.extend(nodes)
    return model


def _source_dequantize(
    node: onnx.NodeProto, producer: dict[str, onnx.NodeProto], constants: dict[str, np.ndarray]
) -> onnx.NodeProto | None:
    """The DequantizeLinear every data input of ``node`` comes from (one quantization), or None."""
    if node.op_type in MOVES:
        data = node.input[:1]
    elif node.op_type in JOINS:
        data = list(node.input)
    else:
        return None
    sources = [producer.get(name) for name in data]
    if not sources or any(s is None or s.op_type != "DequantizeLinear" for s in sources):
        return None
    first = sources[0]
    quantization = [_quantization(s, constants) for s in sources]
    if any(q is None or not _same(q, quantization[0]) for q in quantization):
        return None  # different (or not constant) scales: not one grid
    return first


def _quantization(dq: onnx.NodeProto, constants: dict[str, np.ndarray]) -> tuple | None:
    """Scale, zero point (and axis) of a per-tensor DequantizeLinear; None for per-axis ones (a
    reshape or transpose moves their axis) and for scales computed in the graph."""
    values = [constants.get(name) for name in dq.input[1:]]
    if any(v is None for v in values) or values[0].size != 1:
        return None
    return (*values, _axis(dq))


def _same(a: tuple, b: tuple) -> bool:
    return len(a) == len(b) and a[-1] == b[-1] and all(
        x.dtype == y.dtype and np.array_equal(x, y) for x, y in zip(a[:-1], b[:-1])
    )


def _already_quantized(name: str, consumers: dict[str, list[onnx.NodeProto]]) -> bool:
    users = consumers.get(name, [])
    return bool(users) and all(u.op_type == "QuantizeLinear" for u in users)


def _axis(node: onnx.NodeProto) -> dict[str, int]:
    return {a.name: a.i for a in node.attribute if a.name == "axis"}
