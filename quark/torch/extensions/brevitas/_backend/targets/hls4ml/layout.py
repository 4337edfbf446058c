"""A qonnx transformation of the package's own for hls4ml: global pools on channels-last tensors.

qonnx's ``ConvertToChannelsLastAndClean`` converts convolutions and max pools but leaves a global
pool channels-first, behind a ``Transpose`` back to NCHW; hls4ml 1.3.0's ONNX handler of global pools
reads the shape as channels-first but its C++ (``global_pooling2d_cl``) reads the data as
channels-last, so the firmware averaged across channels (measured: it differed from torch by 0.22 on
a digits CNN with a global average pool; the package's check caught it). Its windowed pooling layers
read both channels-last. So a global pool fed by a Transpose to channels-first, whose 1x1 output goes
through elementwise nodes to a ``Flatten`` (NHWC and NCHW order a 1x1 map alike), becomes a
channels-last pool whose window is the whole map, on the channels-last tensor. Upstream: qonnx could
convert global pools in its channels-last pass, and hls4ml's global pooling handler read channels-last
shapes as its other pooling handlers do.
"""

from __future__ import annotations

from onnx import helper
from qonnx.transformation.base import Transformation

#: a Transpose from channels-last to channels-first (N, H, W, C) -> (N, C, H, W)
TO_CHANNELS_FIRST = [0, 3, 1, 2]
#: nodes between a 1x1 pool and its Flatten that keep the layout's element order
ELEMENTWISE = ("Quant", "Relu", "Identity")
#: global pool -> the windowed pool that computes it over the whole map (the hls4ml target's graph rule
#: lets no other global pool through)
WINDOWED = {"GlobalAveragePool": "AveragePool"}
#: the domain qonnx's channels-last conversion gives the nodes it converts (hls4ml's pooling handlers need it)
CHANNELS_LAST = "qonnx.custom_op.channels_last"


def _perm(node) -> list[int]:
    return next((list(a.ints) for a in node.attribute if a.name == "perm"), [])


class GlobalPoolsChannelsLast(Transformation):
    """Global pools fed by a Transpose to channels-first, flattened after elementwise nodes: channels-last
    pools over the whole map, on the channels-last tensor."""

    def apply(self, model):
        graph = model.graph
        for pool in [n for n in graph.node if n.op_type in WINDOWED]:
            transpose = model.find_producer(pool.input[0])
            if transpose is None or transpose.op_type != "Transpose" or _perm(transpose) != TO_CHANNELS_FIRST:
                continue
            if len(model.find_consumers(transpose.output[0]) or []) != 1:
                continue
            chain = [pool.output[0]]
            consumers = model.find_consumers(chain[-1]) or []
            while len(consumers) == 1 and consumers[0].op_type in ELEMENTWISE:
                chain.append(consumers[0].output[0])
                consumers = model.find_consumers(chain[-1]) or []
            if len(consumers) != 1 or consumers[0].op_type != "Flatten":
                continue
            batch, height, width, channels = model.get_tensor_shape(transpose.input[0])
            window = helper.make_node(
                WINDOWED[pool.op_type],
                [transpose.input[0]],
                [pool.output[0]],
                name=pool.name,
                domain=CHANNELS_LAST,
                kernel_shape=[height, width],
                strides=[height, width],
                pads=[0, 0, 0, 0],
            )
            index = list(graph.node).index(pool)
            graph.node.remove(pool)
            graph.node.insert(index, window)
            graph.node.remove(transpose)
            for tensor in chain:
                model.set_tensor_shape(tensor, [batch, 1, 1, channels])
        return model, False
