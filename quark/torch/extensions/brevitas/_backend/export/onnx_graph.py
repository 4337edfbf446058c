"""Reading an ONNX graph: its constants, producers and quantizer scales, shapes and opset.

numpy only at import; ``onnx`` is imported when a graph is read.
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: quantizer op -> index of its scale input
SCALE_INPUT: dict[str, int] = {"Quant": 1, "BipolarQuant": 1, "QuantizeLinear": 1, "DequantizeLinear": 1}
#: ops that produce a float on a quantizer's grid from one on it (output LSB lookup walks through them)
GRID_PRESERVING = frozenset(
    {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Identity", "MaxPool", "Relu"}
)
#: ops whose result is exact when their inputs are values on power-of-two grids
EXACT_ARITHMETIC = frozenset({"Conv", "ConvTranspose", "Gemm", "MatMul", "Add", "Sub", "Mul", "Sum", "Neg"})
#: ops that move or select values without computing new ones
DATA_MOVEMENT = GRID_PRESERVING | frozenset(
    {"Concat", "Slice", "Gather", "Split", "Pad", "Shape", "Constant", "Expand", "Clip", "Cast", "Max", "Min"}
)


class Graph:
    """Lookups on an ONNX graph: constants, producers."""

    def __init__(self, model: Any):
        from onnx import numpy_helper

        self.model = model
        self.constants: dict[str, np.ndarray] = {
            i.name: numpy_helper.to_array(i) for i in model.graph.initializer
        }
        for node in model.graph.node:
            if node.op_type == "Constant":
                value = next((a for a in node.attribute if a.name == "value"), None)
                if value is not None:
                    self.constants[node.output[0]] = numpy_helper.to_array(value.t)
        self.producer = {out: node for node in model.graph.node for out in node.output}

    def scale(self, node: Any) -> np.ndarray | None:
        index = SCALE_INPUT.get(node.op_type)
        if index is None or len(node.input) <= index:
            return None
        return self.constants.get(node.input[index])

    def output_lsb(self, name: str) -> float | None:
        """Step of the quantizer that produced graph output ``name`` (the smallest, if per channel): a
        Quant / DequantizeLinear node's scale, or the scale multiplying a MultiThreshold's integers (a
        quantizer the QONNX export wrote as thresholds: (MultiThreshold(x / s) (- z)) * s)."""
        node = self.producer.get(name)
        while node is not None and node.op_type in GRID_PRESERVING:
            node = self.producer.get(node.input[0])
        if node is not None and node.op_type == "Mul":
            return self._threshold_step(node)
        if node is None or node.op_type not in ("Quant", "DequantizeLinear", "BipolarQuant"):
            return None
        scale = self.scale(node)
        return None if scale is None else float(np.min(np.abs(scale)))

    def _threshold_step(self, mul: Any) -> float | None:
        """The scale of ``Mul(integers, scale)`` when the integers come from a MultiThreshold."""
        scale = next((self.constants[i] for i in mul.input if i in self.constants), None)
        data = next((i for i in mul.input if i not in self.constants), None)
        source = self.producer.get(data) if data is not None else None
        if source is not None and source.op_type == "Sub":  # the zero point taken off
            source = self.producer.get(source.input[0])
        if scale is None or source is None or source.op_type != "MultiThreshold":
            return None
        return float(np.min(np.abs(scale)))


def is_pof2(values: np.ndarray) -> bool:
    values = np.asarray(values, dtype=np.float64)
    if values.size == 0 or np.any(values <= 0):
        return False
    exponents = np.log2(values)
    return bool(np.all(exponents == np.round(exponents)))



def opset_of(model: Any) -> int | None:
    """The default-domain opset of an ONNX ``model``."""
    return next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)


def dynamic_shapes(model: Any) -> list[str]:
    """The graph inputs and outputs of an ONNX ``model`` whose shape is not fully static."""
    problems = []
    for value in [*model.graph.input, *model.graph.output]:
        dims = [d.dim_value if d.HasField("dim_value") else (d.dim_param or "?") for d in value.type.tensor_type.shape.dim]
        if any(not isinstance(d, int) or d <= 0 for d in dims):
            kind = "input" if value in model.graph.input else "output"
            problems.append(f"graph {kind} {value.name!r} has dynamic shape {dims}")
    return problems


#: QONNX's elementwise quantizers: their output has their first input's shape
ELEMENTWISE_QUANTIZERS = frozenset(
    {"Quant", "BipolarQuant", "IntQuant", "FloatQuant", "Trunc", "MultiThreshold"}
)
#: constants at most this large are folded while shapes are computed (shape arithmetic: a few int64s)
_SHAPE_CONSTANT = 64


def shape_ops_on_unknown_shapes(model: Any) -> list[str]:
    """The ``Shape`` nodes of an ONNX ``model`` whose input's shape stays unknown when the graph's
    input shapes are known: every shape computation is folded from the static shapes, as qonnx's
    cleanup (``FoldConstants``: a ``Shape`` of a known shape becomes a constant, then the constant
    arithmetic on it) folds them, and what is left computes on shapes known only at run time (a
    dynamic input, a data-dependent shape such as ``NonZero``'s). With every input dimension fixed
    (``dynamic_shapes`` finds none) this is usually empty after one ONNX shape inference with data
    propagation; the folding repeats while it changes something.

    qonnx's own shape inference is not used: it takes an unknown dimension for 0 (its
    ``get_tensor_shape``), and its folding then writes a ``Shape`` of ``NonZero``'s output as
    ``[rank, 0]``. The quantizers (custom ops ONNX cannot infer) stand in as ``Identity``: their output
    has their input's shape; their values are never folded.
    """
    import copy

    import onnx
    from onnx import numpy_helper

    shape_ops = [n for n in model.graph.node if n.op_type == "Shape"]
    if not shape_ops or dynamic_shapes(model):  # a dynamic input: every shape computation waits for it
        return [n.name or n.output[0] for n in shape_ops]
    graph = copy.deepcopy(model)
    stand_ins = set()  # by output name: protobuf's node wrappers have no stable identity
    for node in graph.graph.node:
        if node.op_type in ELEMENTWISE_QUANTIZERS and node.domain not in ("", "ai.onnx"):
            node.op_type, node.domain = "Identity", ""
            del node.input[1:]
            del node.attribute[:]
            stand_ins.add(node.output[0])
    names = {n.output[0]: n.name or n.output[0] for n in graph.graph.node if n.op_type == "Shape"}
    while True:
        try:
            inferred = onnx.shape_inference.infer_shapes(graph, data_prop=True)
        except Exception:  # noqa: BLE001 - ONNX cannot infer the graph: nothing more is known
            break
        shapes = {v.name: _static_dims(v) for v in (*inferred.graph.value_info, *inferred.graph.input)}
        constants = {t.name: numpy_helper.to_array(t) for t in graph.graph.initializer}
        folded = []
        for node in graph.graph.node:
            if node.op_type == "Shape" and shapes.get(node.input[0]) is not None:
                dims = shapes[node.input[0]]
                start = next((a.i for a in node.attribute if a.name == "start"), 0)
                end = next((a.i for a in node.attribute if a.name == "end"), len(dims))
                values = [np.array(dims[start:end], dtype=np.int64)]
            elif (
                node.output[0] not in stand_ins
                and node.domain in ("", "ai.onnx")
                and node.input
                and all(n in constants and constants[n].size <= _SHAPE_CONSTANT for n in node.input if n)
            ):
                values = _evaluate(node, constants)
                if values is None:
                    continue
            else:
                continue
            for name, value in zip(node.output, values):
                constants[name] = value
                graph.graph.initializer.append(numpy_helper.from_array(np.asarray(value), name))
            folded.append(node)
        if not folded:
            break
        for node in folded:
            graph.graph.node.remove(node)
        kept = {o for n in graph.graph.node for o in n.output} | {i.name for i in graph.graph.initializer}
        del graph.graph.value_info[:]  # inferred again; none for the folded tensors
        graph.graph.value_info.extend(
            v for v in inferred.graph.value_info if v.name in kept and v.name not in constants
        )
    return [names[n.output[0]] for n in graph.graph.node if n.op_type == "Shape"]


def _static_dims(value: Any) -> list[int] | None:
    tensor = value.type.tensor_type
    if not tensor.HasField("shape") or not all(d.HasField("dim_value") for d in tensor.shape.dim):
        return None
    return [d.dim_value for d in tensor.shape.dim]


def _evaluate(node: Any, constants: dict[str, np.ndarray]) -> list[np.ndarray] | None:
    """The outputs of one standard ONNX node on constant inputs (ONNX's reference implementation),
    or None where it has none."""
    from onnx.reference import ReferenceEvaluator

    try:
        evaluator = ReferenceEvaluator(node)
        return list(evaluator.run(None, {name: constants[name] for name in node.input if name}))
    except Exception:  # noqa: BLE001 - an op the reference does not run stays unfolded
        return None


def printable(path: str) -> str:
    """The graph of the ONNX file at ``path`` as text (``onnx.helper.printable_graph``)."""
    import onnx

    return onnx.helper.printable_graph(onnx.load(path).graph)
