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
        """Step of the quantizer that produced graph output ``name`` (the smallest, if per channel)."""
        node = self.producer.get(name)
        while node is not None and node.op_type in GRID_PRESERVING:
            node = self.producer.get(node.input[0])
        if node is None or node.op_type not in ("Quant", "DequantizeLinear", "BipolarQuant"):
            return None
        scale = self.scale(node)
        return None if scale is None else float(np.min(np.abs(scale)))


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
