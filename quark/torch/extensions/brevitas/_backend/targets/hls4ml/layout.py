"""qonnx transformations of the package's own for hls4ml: average pools on channels-last tensors, and
max pools on unsigned inputs padded by an explicit zero padding.

qonnx's ``ConvertToChannelsLastAndClean`` converts convolutions and max pools but leaves average
pools (global and windowed) channels-first, between a ``Transpose`` to NCHW and one back (or a
``Flatten``). hls4ml 1.3.0's frontend refuses a channels-first windowed pool, and its ONNX handler of
global pools reads the shape as channels-first while its C++ (``global_pooling2d_cl``) reads the data
as channels-last, so the firmware averaged across channels (measured: it differed from torch by 0.22
on a digits CNN with a global average pool; the package's check caught it). Its windowed pooling
layers read both channels-last. So an average pool fed by a Transpose to channels-first, whose
output goes through elementwise nodes to a Transpose back to channels-last (or, for a 1x1 output, to a
``Flatten``: NHWC and NCHW order a 1x1 map alike), becomes a channels-last windowed pool on the
channels-last tensor (a global pool: one window over the whole map), and the transposes go.

qonnx's conversion also leaves, where a quantized tensor forks (a convolution's output quantizer
feeding both an addition and another quantizer, as timm's MobileNetV4 blocks), a ``Transpose`` whose
annotated output shape is its input shape, unpermuted: a transpose it meant to cancel. hls4ml
builds a transpose layer from it and sizes the next convolution's buffers from the permuted shape
(measured: the compiled MobileNetV4 wrote past a buffer and ended the process). Such transposes go
(:class:`StaleTransposes`); the firmware's comparison with torch checks the result.

hls4ml pads a max pool with the pool's input type's top bit set: the least value of an ``ap_fixed``,
but the greatest of an ``ap_ufixed``. On an unsigned input (a max pool after ReLU, as ResNet stems)
zero is the least value, so the padding becomes a ``Pad`` of zeros (hls4ml's ``ZeroPadding2D``)
before an unpadded pool: the same maxima, in ``io_stream`` too (whose pooling takes no padding).

Upstream: qonnx could convert average pools in its channels-last pass; hls4ml's global pooling handler
could read channels-last shapes as its other pooling handlers do, and its ``pad_val`` could take the
type's least value.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from onnx import helper
from qonnx.transformation.base import Transformation

from quark.torch.extensions.brevitas._backend.targets.hls4ml.precision import CHANNELS_LAST

#: Transposes between channels-last (N, H, W, C) and channels-first (N, C, H, W)
TO_CHANNELS_FIRST, TO_CHANNELS_LAST = [0, 3, 1, 2], [0, 2, 3, 1]
#: nodes between a pool and the Transpose back (or Flatten) that keep the layout's element order
ELEMENTWISE = ("Quant", "Relu", "Identity")
#: the average pools converted (a global one becomes a windowed pool over the whole map: hls4ml's
#: global handler reads shapes channels-first)
AVERAGE_POOLS = ("GlobalAveragePool", "AveragePool")


def _attribute(node, name: str, default=None):
    found = next((a for a in node.attribute if a.name == name), None)
    return default if found is None else helper.get_attribute_value(found)


def _window(node, height: int, width: int) -> dict:
    """The channels-last pool's attributes: a global pool's window is the whole map."""
    if node.op_type == "GlobalAveragePool":
        return {"kernel_shape": [height, width], "strides": [height, width], "pads": [0, 0, 0, 0]}
    kernel = list(_attribute(node, "kernel_shape"))
    return {
        "kernel_shape": kernel,
        "strides": list(_attribute(node, "strides", [1] * len(kernel))),  # ONNX's default
        "pads": list(_attribute(node, "pads", [0, 0, 0, 0])),
        "count_include_pad": int(_attribute(node, "count_include_pad", 0)),
    }


def _floor_size(size: int, kernel: int, stride: int, pad: int) -> int:
    """The output size hls4ml computes (no ``ceil_mode``)."""
    return (size + pad - kernel) // stride + 1


class AveragePoolsChannelsLast(Transformation):
    """Average pools between a Transpose to channels-first and one back (or a Flatten of a 1x1 map):
    channels-last windowed pools on the channels-last tensor. A pool whose windows hang over the map's
    edge (``ceil_mode``: hls4ml computes floor sizes) stays as it was; the hls4ml types refuse it."""

    def apply(self, model):
        graph = model.graph
        for pool in [n for n in graph.node if n.op_type in AVERAGE_POOLS]:
            transpose = model.find_producer(pool.input[0])
            if transpose is None or transpose.op_type != "Transpose" or _attribute(transpose, "perm") != TO_CHANNELS_FIRST:
                continue
            if len(model.find_consumers(transpose.output[0]) or []) != 1:
                continue
            chain = [pool.output[0]]
            consumers = model.find_consumers(chain[-1]) or []
            while len(consumers) == 1 and consumers[0].op_type in ELEMENTWISE:
                chain.append(consumers[0].output[0])
                consumers = model.find_consumers(chain[-1]) or []
            batch, height, width, channels = model.get_tensor_shape(transpose.input[0])
            out_height, out_width = model.get_tensor_shape(pool.output[0])[2:]
            window = _window(pool, height, width)
            sizes = [
                _floor_size(size, k, s, window["pads"][i] + window["pads"][i + 2])
                for i, (size, k, s) in enumerate(zip((height, width), window["kernel_shape"], window["strides"]))
            ]
            if sizes != [out_height, out_width] or len(consumers) != 1:
                continue
            back = consumers[0]
            flattened = back.op_type == "Flatten" and out_height == out_width == 1
            if not flattened and not (back.op_type == "Transpose" and _attribute(back, "perm") == TO_CHANNELS_LAST):
                continue
            if not flattened and back.output[0] in [o.name for o in graph.output]:
                continue
            converted = helper.make_node(
                "AveragePool", [transpose.input[0]], [pool.output[0]], name=pool.name, domain=CHANNELS_LAST, **window
            )
            graph.node.insert(list(graph.node).index(pool), converted)
            graph.node.remove(pool)
            graph.node.remove(transpose)
            if not flattened:  # the Transpose back goes: its consumers read the pool's (channels-last) chain
                for consumer in model.find_consumers(back.output[0]) or []:
                    consumer.input[:] = [chain[-1] if name == back.output[0] else name for name in consumer.input]
                graph.node.remove(back)
            for tensor in chain:
                model.set_tensor_shape(tensor, [batch, out_height, out_width, channels])
        return model, False


class StaleTransposes(Transformation):
    """Transposes whose annotated output shape is their input's, though their permutation moves
    dimensions of different sizes: removed, their consumers reading their input."""

    def apply(self, model):
        graph = model.graph
        outputs = {o.name for o in graph.output}
        for node in [n for n in graph.node if n.op_type == "Transpose"]:
            shape, result = model.get_tensor_shape(node.input[0]), model.get_tensor_shape(node.output[0])
            perm = _attribute(node, "perm", list(reversed(range(len(shape or [])))))  # ONNX's default
            if shape is None or shape != result or [shape[i] for i in perm] == shape or node.output[0] in outputs:
                continue
            for consumer in model.find_consumers(node.output[0]) or []:
                consumer.input[:] = [node.input[0] if name == node.output[0] else name for name in consumer.input]
            graph.node.remove(node)
        return model, False


class ZeroPaddedMaxPools(Transformation):
    """Padded max pools on an input ``unsigned(tensor)`` says is unsigned: a Pad of zeros, then the
    pool unpadded (channels-last, as qonnx's conversion leaves max pools)."""

    def __init__(self, unsigned: Callable[[str], bool]) -> None:
        super().__init__()
        self.unsigned = unsigned

    def apply(self, model):
        graph = model.graph
        for pool in [n for n in graph.node if n.op_type == "MaxPool" and n.domain == CHANNELS_LAST]:
            pads = list(_attribute(pool, "pads", [0, 0, 0, 0]))
            if not any(pads) or not self.unsigned(pool.input[0]):
                continue
            top, left, bottom, right = pads
            batch, height, width, channels = model.get_tensor_shape(pool.input[0])
            amounts = model.make_new_valueinfo_name()
            model.set_initializer(amounts, np.array([0, top, left, 0, 0, bottom, right, 0], dtype=np.int64))
            padded = model.make_new_valueinfo_name()
            model.set_tensor_shape(padded, [batch, height + top + bottom, width + left + right, channels])
            pad = helper.make_node("Pad", [pool.input[0], amounts], [padded], name=f"{pool.name}_pad", mode="constant")
            graph.node.insert(list(graph.node).index(pool), pad)
            pool.input[0] = padded
            for attribute in pool.attribute:
                if attribute.name == "pads":
                    attribute.ints[:] = [0, 0, 0, 0]
        return model, False
