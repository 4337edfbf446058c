"""The project's own graph edits for FINN, as qonnx ``Transformation`` s like FINN's passes."""

from __future__ import annotations

import numpy as np
from qonnx.transformation.base import Transformation


class AbsorbClipIntoMultiThreshold(Transformation):
    """Clip(lo, hi) feeding only a MultiThreshold becomes part of it.

    FINN converts ReLU6 / Hardtanh + quantizer into Clip -> MultiThreshold and has no pass for
    the Clip, which then blocks streamlining (the scale and bias before it stay float). Exact:
    counting clip(x) >= t is counting always for t <= lo, never for t > hi, and x >= t between.
    """

    def apply(self, model):
        for node in model.graph.node:
            consumers = model.find_consumers(node.output[0]) if node.op_type == "Clip" else None
            if not consumers or len(consumers) != 1 or consumers[0].op_type != "MultiThreshold":
                continue
            names = [*node.input[1:3], "", ""][:2]  # min, max: optional inputs
            bounds = [model.get_initializer(name) if name else None for name in names]
            if any(name and bound is None for name, bound in zip(names, bounds)):
                continue  # bounds computed in the graph
            lo = -np.inf if bounds[0] is None else float(bounds[0])
            hi = np.inf if bounds[1] is None else float(bounds[1])
            threshold = consumers[0]
            values = model.get_initializer(threshold.input[1])
            values = np.where(values <= lo, -np.inf, np.where(values > hi, np.inf, values)).astype(values.dtype)
            model.set_initializer(threshold.input[1], values)
            threshold.input[0] = node.input[0]
            model.graph.node.remove(node)
            return model, True
        return model, False


#: ONNX Transpose permutations between FINN's layouts
TO_NHWC, TO_NCHW = [0, 2, 3, 1], [0, 3, 1, 2]


class ForkAfterNhwcTranspose(Transformation):
    """A MaxPool whose output forks to a Transpose into NHWC and to other nodes (a residual
    network's stem: the pool feeds the first block and its shortcut) gets one consumer, the
    Transpose: the other nodes read its output transposed back to NCHW, and identical Transposes
    of the output become one. Exact (transposes only).

    FINN's ``MakeMaxPoolNHWC`` swaps a MaxPool with the Transpose it finds first among the
    consumers and leaves the others reading the pool's former output, which then holds the pool's
    input: the graph computes something else (FINN 1.6.1). After this pass it applies; the
    Transpose back to NCHW is absorbed into the MultiThreshold it feeds by FINN's streamlining.
    """

    def apply(self, model):
        from onnx import helper

        for pool in model.get_nodes_by_op_type("MaxPool"):
            consumers = model.find_consumers(pool.output[0]) or []
            to_nhwc = [c for c in consumers if c.op_type == "Transpose" and _perm(c) == TO_NHWC]
            if len(consumers) < 2 or not to_nhwc:
                continue
            kept, nhwc = to_nhwc[0], to_nhwc[0].output[0]
            back = None
            for node in [c for c in consumers if c is not kept]:
                if node in to_nhwc:  # the same transpose again: its readers read the kept one's output
                    for reader in model.find_consumers(node.output[0]) or []:
                        reader.input[:] = [nhwc if t == node.output[0] else t for t in reader.input]
                    model.graph.node.remove(node)
                    continue
                if back is None:
                    back = model.make_new_valueinfo_name()
                    model.set_tensor_shape(back, model.get_tensor_shape(pool.output[0]))
                    transpose = helper.make_node("Transpose", [nhwc], [back], perm=TO_NCHW, name=f"{pool.name}_to_nchw")
                    # both transposes right after the pool, before every reader: the graph stays sorted
                    model.graph.node.remove(kept)
                    at = list(model.graph.node).index(pool) + 1
                    model.graph.node.insert(at, kept)
                    model.graph.node.insert(at + 1, transpose)
                node.input[:] = [back if t == pool.output[0] else t for t in node.input]
            return model, True
        return model, False


def _perm(node) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


class CropKernelsToOnePixel(Transformation):
    """A convolution over an image one pixel high or wide (a 3x3 convolution with padding 1 in the
    last stage of torchvision's ResNet-18 at 32x32) whose output is one pixel there too: only the
    kernel's tap that meets the pixel sees data, the others see padding (zero). The kernel is cropped
    to that tap and the padding along that axis dropped. Exact.

    FINN's ``LowerConvsToMatMul`` refuses a kernel taller than a one-pixel-high image ("Unexpected
    kernel shape and padding for input image of dimensions (N, 1, W, C)", FINN 1.6.1).
    """

    def apply(self, model):
        from qonnx.util.basic import get_by_name

        for conv in model.get_nodes_by_op_type("Conv"):
            weight = model.get_initializer(conv.input[1])
            shape = model.get_tensor_shape(conv.input[0])
            if weight is None or shape is None or len(shape) != 4:
                continue
            kernel = list(weight.shape[2:])
            pads = _ints(get_by_name(conv.attribute, "pads"), [0, 0, 0, 0])
            strides = _ints(get_by_name(conv.attribute, "strides"), [1, 1])
            dilations = _ints(get_by_name(conv.attribute, "dilations"), [1, 1])
            for axis in (0, 1):
                begin, end, k = pads[axis], pads[axis + 2], kernel[axis]
                one_out = (1 + begin + end - k) // strides[axis] + 1 == 1
                if shape[2 + axis] == 1 and k > 1 and dilations[axis] == 1 and one_out and 0 <= begin < k:
                    weight = np.take(weight, [begin], axis=2 + axis)
                    kernel[axis], pads[axis], pads[axis + 2] = 1, 0, 0
            if list(weight.shape[2:]) != list(model.get_initializer(conv.input[1]).shape[2:]):
                model.set_initializer(conv.input[1], weight)
                _set_ints(conv, "kernel_shape", kernel)
                _set_ints(conv, "pads", pads)
        return model, False  # one sweep crops every kernel


def _ints(attribute, default: list[int]) -> list[int]:
    return list(attribute.ints) if attribute is not None else list(default)


def _set_ints(node, name: str, values: list[int]) -> None:
    from onnx import helper

    kept = [a for a in node.attribute if a.name != name]
    del node.attribute[:]
    node.attribute.extend([*kept, helper.make_attribute(name, values)])


class ChannelsLastParamsAsVectors(Transformation):
    """The constant operand of a ``Mul`` / ``Add`` on an NHWC tensor, shaped ``(1, 1, 1, C)``, becomes
    the vector ``(C,)``. Exact: NumPy broadcasting aligns trailing axes either way.

    FINN's ``AbsorbAddIntoMultiThreshold`` / ``AbsorbMulIntoMultiThreshold`` (and its
    ``MoveChannelwiseLinearPastFork``) find the channel axis of a 4-D operand from its layout
    annotation, and without one assume NCHW (axis 1): a channels-last operand is then "not
    channel-wise" and stays a float node. Such operands are what a per-channel scale and bias
    before a fork leave after ``LowerConvsToMatMul`` (MobileNetV2's and EfficientNet-Lite's
    projection convolutions feed the next block and its residual addition): copied past the fork,
    their copies carry no annotation, and the hardware graph kept them as float ElementwiseMul /
    ElementwiseAdd layers (finn-plus 1.6.1). A vector is channel-wise for FINN whatever the annotation.
    """

    def apply(self, model):
        from qonnx.core.data_layout import NHWC

        changed = False
        for node in model.graph.node:
            if node.op_type not in ("Mul", "Add") or len(node.input) != 2:
                continue
            params = [model.get_initializer(name) for name in node.input]
            if (params[0] is None) == (params[1] is None):
                continue  # two data inputs, or two constants
            index = 0 if params[0] is not None else 1
            param, data = params[index], node.input[1 - index]
            if model.get_tensor_layout(data) != NHWC or param.ndim != 4 or param.shape[:3] != (1, 1, 1):
                continue
            model.set_initializer(node.input[index], param.reshape(param.shape[3]))
            changed = True
        return model, changed
