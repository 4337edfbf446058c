"""qonnx 1.0.0's ``InferShapes`` without copying the weights: the same graph.

qonnx hands the whole ``ModelProto`` to ``onnx.shape_inference.infer_shapes``, which serializes it,
parses it in C++, infers, serializes the result and parses it back: four copies of every weight for
shapes that depend on the weights' dims only. FINN's streamlining infers shapes about 250 times on
EfficientNet-Lite0 (its depthwise weights expanded dense, 221 MB): 126 of its 218 s, 63 s of it
serializing and parsing.
"""

from __future__ import annotations

import math

import onnx
import onnx.shape_inference
from qonnx.custom_op.registry import is_custom_op
from qonnx.transformation.base import Transformation
from qonnx.transformation.infer_shapes import _make_shape_compatible_op

from quark.torch.extensions.brevitas._backend.qonnx_passes.indexed import IndexedModel

#: floating-point initializers of more elements than this go to ONNX's shape inference as name, type
#: and dims only (a weight); the inputs whose values it reads (Reshape's shape, Slice's starts, Pad's
#: pads, Resize's scales, Tile's repeats, Expand, ConstantOfShape, Range, TopK's K, ...) hold one value
#: per axis, and all but Resize's scales and Range's bounds are integers, which always keep their data
SHAPE_VALUES_MAX = 1024
_WEIGHT_TYPES = frozenset({1, 10, 11, 16})  # TensorProto FLOAT, FLOAT16, DOUBLE, BFLOAT16


class InferShapes(Transformation):
    """qonnx's ``InferShapes``: custom ops hidden behind their shape-compatible standard ops (qonnx's
    ``make_shape_compatible_op``, once each, given dict lookups), ONNX's shape inference on a copy whose
    large initializers keep their name, type and dims only, every field it returns but the initializers
    written back, value infos added for initializers without one (what qonnx's ``ModelWrapper(...)``
    does to the inferred model: before the custom ops are restored, so an input only a custom op reads,
    such as a ``Quant``'s scale, gets none), then the custom ops restored. Unlike qonnx's, the result
    is the model given, written in place (``transform`` deep-copies first); as qonnx's, a new wrapper
    (``fix_float64`` off)."""

    def apply(self, model):
        view = IndexedModel(model)
        nodes = model.graph.node
        hidden: dict[str, onnx.NodeProto] = {}
        for index in range(len(nodes)):
            node = nodes[index]
            if not is_custom_op(node.domain):
                continue
            standin = _make_shape_compatible_op(node, view)
            standin.name = node.name
            original = onnx.NodeProto()
            original.CopyFrom(node)
            hidden[str(standin)] = original
            nodes[index].CopyFrom(standin)
            view.consumers_changed()  # the stand-in may read fewer inputs
        proto = model.model
        light = onnx.ModelProto()
        _copy_fields(proto, light, skip="graph")
        _copy_fields(proto.graph, light.graph, skip="initializer")
        for tensor in proto.graph.initializer:
            if tensor.data_type not in _WEIGHT_TYPES or math.prod(tensor.dims) <= SHAPE_VALUES_MAX:
                light.graph.initializer.add().CopyFrom(tensor)
            else:
                light.graph.initializer.add(name=tensor.name, data_type=tensor.data_type, dims=tensor.dims)
        inferred = onnx.shape_inference.infer_shapes(light)
        _copy_fields(inferred, proto, skip="graph", clear=True)
        _copy_fields(inferred.graph, proto.graph, skip="initializer", clear=True)
        result = type(model)(proto, fix_missing_initializer_valueinfo=False)  # the caller's wrapper class
        IndexedModel(result).check_all_tensor_shapes_specified(fix_missing_init_shape=True)
        if hidden:
            for node in proto.graph.node:
                original = hidden.get(str(node))
                if original is not None:
                    node.CopyFrom(original)
        return result, False


def _copy_fields(source, target, skip: str, clear: bool = False) -> None:
    """Every field of protobuf message ``source`` but ``skip`` into ``target`` (each field of
    ``target`` cleared first with ``clear``, so that ``target`` ends with ``source``'s)."""
    if clear:
        for field, _ in target.ListFields():
            if field.name != skip:
                target.ClearField(field.name)
    for field, value in source.ListFields():
        if field.name == skip:
            continue
        if _is_repeated(field):
            getattr(target, field.name).extend(value)
        elif field.message_type is not None:
            getattr(target, field.name).CopyFrom(value)
        else:
            setattr(target, field.name, value)


def _is_repeated(field) -> bool:
    """Whether a protobuf field is repeated (``is_repeated`` from protobuf 6.31, ``label`` before)."""
    repeated = getattr(field, "is_repeated", None)
    return field.label == field.LABEL_REPEATED if repeated is None else repeated
