"""The interface of FINN's dataflow and what it computes on: an integer network input (as FINN's
drivers feed it), and the nodes of a FINN graph that still compute on floats."""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from quark.torch.extensions.brevitas._backend.export.errors import TargetCheckError


@dataclass(frozen=True)
class IntegerInput:
    """The network input FINN sees: integers of ``datatype``; feed ``round(x / scale)`` (rounded as
    the input's quantizer rounds: ``thresholds``, where the export wrote it as thresholds on x / scale,
    else the Quant node's ``rounding_mode``)."""

    name: str
    datatype: str
    scale: float
    narrow: bool = False
    rounding_mode: str = "ROUND"
    thresholds: tuple[float, ...] | None = None  # MultiThreshold's, on x / scale; its lowest integer below
    lowest: float = 0.0

    def integers(self, x: Any) -> Any:
        """The integers the removed quantizer would have produced from float inputs ``x``: qonnx's own
        ``int_quant`` (clamping and rounding as the ``Quant`` node did), or the count of thresholds
        x / scale reaches (as the ``MultiThreshold`` did, in float32)."""
        import numpy as np
        from qonnx.core.datatype import DataType
        from qonnx.custom_op.general.intquant import int_quant

        x = np.asarray(x, dtype=np.float32)
        if self.thresholds is not None:
            u = x / np.float32(self.scale)
            steps = np.asarray(self.thresholds, dtype=np.float32)
            return ((u[..., None] >= steps).sum(-1) + self.lowest).astype(np.float32)
        dtype = DataType[self.datatype]
        bits, signed = np.float32(dtype.bitwidth()), dtype.signed()  # qonnx computes its bounds in numpy
        quantized = int_quant(x, self.scale, 0.0, bits, signed, self.narrow, self.rounding_mode)
        return np.asarray(quantized / self.scale, dtype=np.float32)


def integer_input(qonnx_path: str | os.PathLike, output_path: str | os.PathLike | None = None) -> IntegerInput:
    """Make the QONNX graph's input integer, as FINN's dataflow takes it.

    The input's quantizer (a ``Quant`` node right after the graph input, per-tensor, zero point
    0; or, as the export writes a rounding FINN would change, a ``Div`` by its scale and a
    ``MultiThreshold``) becomes a ``Mul`` by its scale, and the input is annotated with the
    quantizer's integer type (``UINT8``, ``INT4``, ...). The same outputs then come from the integers
    the quantizer makes of an input x (:meth:`IntegerInput.integers`). Writes ``output_path``
    (default: overwrite) and returns what the input now is.
    """
    import numpy as np
    from onnx import helper
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import cleanup_model
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import tag_origins

    model = ModelWrapper(os.fspath(qonnx_path))
    tag_origins(model)  # the torch modules, before cleanup renames the nodes (origins.py)
    model = cleanup_model(model)
    name = model.graph.input[0].name
    consumers = model.find_consumers(name)
    quant = consumers[0] if consumers and len(consumers) == 1 else None
    if quant is not None and quant.op_type == "Div":
        return _thresholded_input(model, quant, output_path or qonnx_path)
    if quant is None or quant.op_type != "Quant":
        raise TargetCheckError(
            f"integer_input: the graph input {name!r} does not feed one Quant node; quantize the network input "
            "(graph mode: input_tensors of the GraphInput site)",
            [f"input {name!r}"],
        )
    scale, zero_point, bits = (model.get_initializer(i) for i in quant.input[1:4])
    if scale is None or np.size(scale) != 1 or np.any(zero_point != 0):
        raise TargetCheckError(
            f"integer_input: the input quantizer of {name!r} must be per tensor with zero point 0",
            [f"input {name!r}"],
        )
    attributes = {a.name: helper.get_attribute_value(a) for a in quant.attribute}
    signed, narrow = bool(attributes.get("signed", 1)), bool(attributes.get("narrow", 0))
    rounding_mode = attributes.get("rounding_mode", b"ROUND").decode()
    datatype = f"{'INT' if signed else 'UINT'}{int(bits)}"
    scale_name = model.make_new_valueinfo_name()
    model.set_initializer(scale_name, np.asarray(scale, dtype=np.float32).reshape(()))
    mul = helper.make_node("Mul", [name, scale_name], [quant.output[0]], name=f"{quant.name}_as_input_scale")
    index = list(model.graph.node).index(quant)
    model.graph.node.remove(quant)
    model.graph.node.insert(index, mul)
    model.set_tensor_datatype(name, DataType[datatype])
    model.save(os.fspath(output_path or qonnx_path))
    return IntegerInput(name, datatype, float(np.asarray(scale).reshape(())), narrow, rounding_mode)


def _thresholded_input(model, div, output_path) -> IntegerInput:
    """The input quantizer as the export writes it where FINN would round otherwise: x -> Div(scale)
    -> MultiThreshold (-> Mul(scale)): the Div and the MultiThreshold go, the input carries their
    integers."""
    import numpy as np
    from qonnx.core.datatype import DataType
    from qonnx.custom_op.registry import getCustomOp

    name = model.graph.input[0].name
    scale = model.get_initializer(div.input[1])
    consumers = model.find_consumers(div.output[0]) or []
    threshold = consumers[0] if len(consumers) == 1 and consumers[0].op_type == "MultiThreshold" else None
    if scale is None or np.size(scale) != 1 or threshold is None:
        raise TargetCheckError(
            f"integer_input: the graph input {name!r} feeds a Div that is not a per-tensor quantizer written as "
            "thresholds; quantize the network input per tensor with zero point 0",
            [f"input {name!r}"],
        )
    op = getCustomOp(threshold)
    steps = model.get_initializer(threshold.input[1])
    datatype = op.get_nodeattr("out_dtype")
    for reader in model.find_consumers(threshold.output[0]) or []:
        reader.input[:] = [name if t == threshold.output[0] else t for t in reader.input]
    model.graph.node.remove(threshold)
    model.graph.node.remove(div)
    model.set_tensor_datatype(name, DataType[datatype])
    model.save(os.fspath(output_path))
    return IntegerInput(
        name,
        datatype,
        float(np.asarray(scale).reshape(())),
        thresholds=tuple(float(t) for t in np.asarray(steps).reshape(-1)),
        lowest=float(op.get_nodeattr("out_bias")),
    )


#: FINN graph nodes computing a layer's products
COMPUTE_OPS = frozenset({"Conv", "MatMul", "Gemm", "ConvTranspose"})


def float_operations(model) -> list[str]:
    """Nodes of a FINN graph (a ``ModelWrapper`` or path) that compute on floats between its first
    and last compute node: those whose output qonnx's ``InferDataTypes`` does not find integer.
    An integer dataflow has none; the float scale and bias after the last layer are not counted."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.infer_datatypes import InferDataTypes

    if not isinstance(model, ModelWrapper):
        model = ModelWrapper(os.fspath(model))
    model = model.transform(InferDataTypes())
    nodes = list(model.graph.node)
    compute = [i for i, n in enumerate(nodes) if n.op_type in COMPUTE_OPS]
    if not compute:
        return []
    return [
        f"{n.op_type} {n.name}"
        for n in nodes[compute[0] : compute[-1]]
        if not model.get_tensor_datatype(n.output[0]).is_integer()
    ]
