"""The project's own graph edits for FINN, as qonnx ``Transformation`` s like FINN's passes."""

from __future__ import annotations

import logging

import numpy as np
from qonnx.transformation.base import Transformation
from qonnx.transformation.composed import ComposedTransformation
from qonnx.transformation.general import GiveReadableTensorNames, GiveUniqueNodeNames
from qonnx.transformation.infer_datatypes import InferDataTypes
from qonnx.transformation.infer_shapes import InferShapes
from qonnx.transformation.remove import RemoveIdentityOps

logger = logging.getLogger(__name__)


class AbsorbClipIntoMultiThreshold(Transformation):
    """A Clip(lo, hi) or Relu (a clip at 0) feeding only a MultiThreshold, directly or through
    multiplications and divisions by positive scalars (the export's x / scale before thresholds),
    becomes part of it.

    FINN converts ReLU6 / Hardtanh + quantizer into Clip -> MultiThreshold and has no pass for the Clip,
    which then blocks streamlining; a quantizer the export wrote as thresholds keeps the Relu before
    it, which FINN's conversion absorbs only into the Quant nodes it converts. Exact: with the chain
    c (monotonic, applied in float32 as the graph applies it), counting c(clip(x)) >= t is counting
    always for t <= c(lo), never for t > c(hi), and c(x) >= t between.
    """

    def apply(self, model):
        for node in model.graph.node:
            if node.op_type not in ("Clip", "Relu"):
                continue
            chain = _positive_scalar_chain(model, node.output[0])
            if chain is None:
                continue
            scaling, threshold = chain
            bounds = _clip_bounds(model, node)
            if bounds is None:
                continue  # bounds computed in the graph
            lo, hi = (scaling(bound) for bound in bounds)
            values = model.get_initializer(threshold.input[1])
            values = np.where(values <= lo, -np.inf, np.where(values > hi, np.inf, values)).astype(values.dtype)
            model.set_initializer(threshold.input[1], values)
            reader = model.find_consumers(node.output[0])[0]
            reader.input[:] = [node.input[0] if t == node.output[0] else t for t in reader.input]
            model.graph.node.remove(node)
            return model, True
        return model, False


def _clip_bounds(model, node) -> tuple[np.float32, np.float32] | None:
    """(lo, hi) of a Clip (its optional bound inputs; None where one is computed) or a Relu (0, inf)."""
    if node.op_type == "Relu":
        return np.float32(0), np.float32(np.inf)
    names = [*node.input[1:3], "", ""][:2]  # min, max: optional inputs
    bounds = [model.get_initializer(name) if name else None for name in names]
    if any(name and bound is None for name, bound in zip(names, bounds)):
        return None
    lo = np.float32(-np.inf) if bounds[0] is None else np.float32(bounds[0])
    hi = np.float32(np.inf) if bounds[1] is None else np.float32(bounds[1])
    return lo, hi


def _positive_scalar_chain(model, tensor: str):
    """(the chain as a float32 function, the MultiThreshold) when ``tensor`` feeds only a chain of
    Mul / Div by positive scalar constants (possibly empty) that feeds only a MultiThreshold's data
    input; else None."""
    operations = []
    while True:
        consumers = model.find_consumers(tensor) or []
        if len(consumers) != 1 or consumers[0].input[0] != tensor:
            return None
        node = consumers[0]
        if node.op_type == "MultiThreshold":
            break
        constant = model.get_initializer(node.input[1]) if node.op_type in ("Mul", "Div") and len(node.input) == 2 else None
        if constant is None or constant.size != 1 or not float(constant.reshape(())) > 0:
            return None
        operations.append((node.op_type, np.float32(constant.reshape(()))))
        tensor = node.output[0]

    def scaling(value: np.float32) -> np.float32:
        for op_type, constant in operations:
            value = np.float32(value * constant) if op_type == "Mul" else np.float32(value / constant)
        return value

    return scaling, node


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


class QuantAvgPoolNHWC(Transformation):
    """A ``QuantAvgPool2d`` (FINN's integer average pool, NCHW as ``ConvertQONNXtoFINN`` makes it)
    after a Transpose into NCHW (a convolution's lowered output) computes in NHWC and the Transpose
    moves past it, as FINN's ``MakeMaxPoolNHWC`` does for max pooling (FINN 1.6.1 has no pass for
    this pool; its ``InferPool`` takes either layout). Exact (the same sums, other axes).

    Left NCHW, the pool's output stays NCHW through the layers after it: a concatenation with
    convolutions' NHWC outputs (DenseNet's transition into the next block) keeps Transposes on
    some inputs only, which no FINN pass moves and no hardware layer takes.
    """

    def apply(self, model):
        from qonnx.custom_op.registry import getCustomOp

        for pool in model.get_nodes_by_op_type("QuantAvgPool2d"):
            op = getCustomOp(pool)
            transpose = model.find_producer(pool.input[0])
            if (
                op.get_nodeattr("data_layout") != "NCHW"
                or transpose is None
                or transpose.op_type != "Transpose"
                or _perm(transpose) != TO_NCHW
                or len(model.find_consumers(transpose.output[0]) or []) != 1
            ):
                continue
            nhwc_in, nchw_out = transpose.input[0], pool.output[0]
            b, c, h, w = model.get_tensor_shape(nchw_out)
            nhwc_out = model.make_new_valueinfo_name()
            model.set_tensor_shape(nhwc_out, [b, h, w, c])
            model.set_tensor_datatype(nhwc_out, model.get_tensor_datatype(nchw_out))
            pool.input[0], pool.output[0] = nhwc_in, nhwc_out
            transpose.input[0], transpose.output[0] = nhwc_out, nchw_out
            op.set_nodeattr("data_layout", "NHWC")
            nodes = model.graph.node  # the Transpose now follows the pool
            nodes.remove(transpose)
            nodes.insert(list(nodes).index(pool) + 1, transpose)
            return model, True
        return model, False


class ComposedCleaningAfterChanges(ComposedTransformation):
    """qonnx's ``ComposedTransformation`` (each transformation to a fixed point, the whole sequence
    again until nothing changes), with its cleanup only after a transformation that changed the graph.

    qonnx deep-copies the model and cleans it up (``cleanup``, identity removal, renaming, shape and
    datatype inference: whole-graph passes) after every transformation, changed or not. In
    EfficientNet-B0's layout group (12 transformations, 8 rounds) that was about 2 s each, most of
    them after transformations that matched nothing; the cleanup of an unchanged graph changes
    nothing. Each transformation runs as the model's ``transform`` would run it (its equivalent on a
    ``FastModelWrapper``: FINN's one-rewrite passes swept)."""

    def apply(self, model):
        changed_any = False
        for transformation in self.transformations:
            equivalent = getattr(model, "equivalent", None)
            transformation = equivalent(transformation) if equivalent is not None else transformation
            changed = False
            while True:
                model, step = transformation.apply(model)
                if not step:
                    break
                changed = True
            if changed:
                changed_any = True
                model.cleanup()
                for cleanup in (RemoveIdentityOps(), GiveUniqueNodeNames(), GiveReadableTensorNames(), InferShapes(),
                                InferDataTypes()):
                    model = model.transform(cleanup)
        return model, changed_any


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


class PoolInputsAsNCHW(Transformation):
    """A ``GlobalAveragePool`` whose input has no data layout gets NCHW, the only layout an ONNX
    GlobalAveragePool has (it averages the axes after the second). qonnx's ``InferDataLayouts``
    leaves a tensor without one past an op it does not know (MobileNetV3's Hardswish), and FINN's
    ``InferGlobalAccPoolLayer`` takes a tensor without one for NHWC: it pooled (1, 96, 2, 2) as 96x2
    pixels of 2 channels and failed on the next execution.
    """

    def apply(self, model):
        from qonnx.core.data_layout import NCHW

        for pool in model.get_nodes_by_op_type("GlobalAveragePool"):
            shape = model.get_tensor_shape(pool.input[0])
            if not model.get_tensor_layout(pool.input[0]) and shape is not None and len(shape) == 4:
                model.set_tensor_layout(pool.input[0], NCHW)
        return model, False


class ChannelwiseLinearPastForks(Transformation):
    """FINN's ``MoveChannelwiseLinearPastFork`` where such forks follow each other (DenseNet-121: a
    scale feeding its copies' consumers, themselves scales that fork). FINN's pass replicates a fork's
    scale in front of each consumer in one sweep and re-infers shapes only at its end, so a consumer
    that is a forking scale itself is reached with an input it just created, without a shape, and
    the pass fails (``TypeError: object of type 'NoneType' has no len()``). Each replication is
    complete before the next node is read, so the graph is consistent there: shapes are inferred and
    the pass runs again, which moves the remaining forks. Any other failure is FINN's, raised, as is
    this one when shape inference leaves the same inputs without a shape (it would repeat forever).
    """

    def __init__(self):
        super().__init__()
        from finn.transformation.streamline.reorder import MoveChannelwiseLinearPastFork

        self._finn = MoveChannelwiseLinearPastFork()

    def apply(self, model):
        from qonnx.transformation.infer_shapes import InferShapes

        try:
            return self._finn.apply(model)
        except TypeError:
            unshaped = _unshaped_linear_forks(model)
            if not unshaped:
                raise
            inferred = model.transform(InferShapes())
            if _unshaped_linear_forks(inferred) == unshaped:
                raise
            return inferred, True


def _unshaped_linear_forks(model) -> list[str]:
    """Forking elementwise scales and biases whose dynamic input has no shape."""
    return [
        node.name
        for node in model.graph.node
        if node.op_type in ("Add", "Sub", "Mul", "Div")
        and model.is_fork_node(node)
        and any(model.get_initializer(i) is None and model.get_tensor_shape(i) is None for i in node.input)
    ]


class GroupedConvAsDense(Transformation):
    """A grouped convolution other than depthwise (RegNet's, ResNeXt's) becomes a plain one whose
    weights are block-diagonal: output channel o of group g keeps its kernel over group g's input
    channels and has zeros over the others. Exact (the zeros add nothing to an integer sum), at the
    price of ``groups`` times the weights and multiply-accumulates of the grouped layer: FINN 1.6.1
    has hardware for plain and depthwise convolutions only (qonnx's ``LowerConvsToMatMul`` refuses
    the rest), and its estimate prices the dense layer. A warning names each layer it widens and its
    module. Depthwise convolutions are left to FINN's VVAU.
    """

    def apply(self, model):
        from qonnx.util.basic import get_by_name

        from quark.torch.extensions.brevitas._backend.targets.finn.origins import named

        for conv in model.get_nodes_by_op_type("Conv"):
            group = get_by_name(conv.attribute, "group")
            groups = group.i if group is not None else 1
            weight = model.get_initializer(conv.input[1])
            if groups == 1 or weight is None or weight.shape[1] == 1 and weight.shape[0] == groups:
                continue
            out_per_group, in_per_group = weight.shape[0] // groups, weight.shape[1]
            dense = np.zeros((weight.shape[0], in_per_group * groups, *weight.shape[2:]), dtype=weight.dtype)
            for g in range(groups):
                rows, columns = slice(g * out_per_group, (g + 1) * out_per_group), slice(g * in_per_group, (g + 1) * in_per_group)
                dense[rows, columns] = weight[rows]
            model.set_initializer(conv.input[1], dense)
            group.i = 1
            logger.warning(
                "FINN: grouped convolution %s (groups=%d) computed as a plain convolution with block-diagonal "
                "weights, %d times its weights and MACs: FINN 1.6.1 has hardware for plain and depthwise "
                "convolutions only",
                named(model, conv),
                groups,
                groups,
            )
        return model, False  # one sweep widens every grouped convolution


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


class SlicesAsSplit(Transformation):
    """Slices of one tensor along one axis that together cover it, piece after piece without gaps
    or overlaps (``torch.chunk`` / ``torch.split`` in the TorchScript export), become one ``Split``
    with those sizes. Exact: the same pieces.

    FINN 1.6.1 has no hardware layer for ``Slice``; its ``InferSplitLayer`` (``StreamingSplit``) and
    ``MoveTransposePastSplit`` take ``Split`` (ShuffleNetV2's ``x.chunk(2, dim=1)``).
    """

    def apply(self, model):
        from onnx import helper

        for tensor in sorted({s.input[0] for s in model.get_nodes_by_op_type("Slice")}):
            pieces = _slice_pieces(model, tensor)
            if pieces is None:
                continue
            axis, slices = pieces
            sizes = np.array([end - begin for begin, end, _ in slices], dtype=np.int64)
            name = model.make_new_valueinfo_name()
            model.set_initializer(name, sizes)
            outputs = [node.output[0] for _, _, node in slices]
            split = helper.make_node(
                "Split", [tensor, name], outputs, axis=axis, name=f"{slices[0][2].name}_split"
            )
            split.metadata_props.extend(slices[0][2].metadata_props)  # the torch module it came from
            at = min(list(model.graph.node).index(node) for _, _, node in slices)
            for _, _, node in slices:
                model.graph.node.remove(node)
            model.graph.node.insert(at, split)
            return model, True
        return model, False


def _slice_pieces(model, tensor: str):
    """(axis, [(begin, end, Slice node)] in order) when the Slices reading ``tensor`` cut it along one
    axis into consecutive pieces covering it whole (constant bounds, unit steps), else None."""
    shape = model.get_tensor_shape(tensor)
    slices = [n for n in model.find_consumers(tensor) or [] if n.op_type == "Slice" and n.input[0] == tensor]
    if shape is None or len(slices) < 2:
        return None
    pieces, axes = [], set()
    for node in slices:
        names = [*node.input[1:], "", ""][:4]  # starts, ends, axes, steps (the last two optional)
        starts, ends, axis, steps = (model.get_initializer(name) if name else None for name in names)
        if any(name and value is None for name, value in zip(names, (starts, ends, axis, steps))):
            return None  # bounds computed in the graph
        if starts.size != 1 or (steps is not None and int(steps.flat[0]) != 1):
            return None
        axis = int(axis.flat[0]) if axis is not None else 0
        axis = axis + len(shape) if axis < 0 else axis
        size = shape[axis]
        begin, end = (
            min(max(v + size if v < 0 else v, 0), size) for v in (int(starts.flat[0]), int(ends.flat[0]))
        )
        axes.add(axis)
        pieces.append((begin, end, node))
    pieces.sort(key=lambda piece: piece[0])
    if len(axes) != 1:
        return None
    axis = axes.pop()
    ends = [0, *[end for _, end, _ in pieces]]
    gaps = any(begin != ends[i] or end <= begin for i, (begin, end, _) in enumerate(pieces))
    if gaps or ends[-1] != shape[axis]:
        return None
    return axis, pieces


class ChannelShuffleToNHWC(Transformation):
    """A channel shuffle on an NHWC tensor brought back to NCHW for it, ``Transpose(0, 3, 1, 2) ->
    Reshape(N, g, C/g, H, W) -> Transpose(0, 2, 1, 3, 4) -> Reshape(N, C, H, W)`` (torchvision's
    ``channel_shuffle`` after ``LowerConvsToMatMul``; any reshape into channel factors and a
    transpose of those factors alone), becomes the same permutation of each pixel's channels in NHWC,
    ``Reshape(N, H, W, g, C/g) -> Transpose(0, 1, 2, 4, 3) -> Reshape(N, H, W, C)``, followed by the
    ``Transpose`` to NCHW. Exact: checked on the tensor's indices before the graph is changed.

    FINN 1.6.1 moves transposes past forks, joins, ``Split`` and thresholds but not past a
    ``Reshape``: the shuffle stays NCHW between NHWC layers, with a layout transpose on either side
    and a 5-D transpose of the channel and group axes inside, none of them a hardware layer. After
    this pass the layout transposes travel on and cancel, and FINN's ``InferShuffle`` takes the
    Reshape -> Transpose -> Reshape, now a swap of the last two axes, as one ``Shuffle`` layer
    (streamed as an ``InnerShuffle``).
    """

    def apply(self, model):
        from onnx import helper

        for first in model.get_nodes_by_op_type("Transpose"):
            chain = _shuffle_chain(model, first)
            if chain is None:
                continue
            reshape_in, transpose, reshape_out, factors, perm = chain
            n, c, h, w = model.get_tensor_shape(reshape_out.output[0])
            nhwc_factors, nhwc_perm = [n, h, w, *factors], [0, 1, 2, *(p + 2 for p in perm[1:-2])]
            if not _same_permutation((n, c, h, w), factors, perm, nhwc_perm):
                continue
            source, result = first.input[0], reshape_out.output[0]
            shapes = [model.make_new_valueinfo_name() for _ in range(2)]
            tensors = [model.make_new_valueinfo_name() for _ in range(3)]
            model.set_initializer(shapes[0], np.array(nhwc_factors, dtype=np.int64))
            model.set_initializer(shapes[1], np.array([n, h, w, c], dtype=np.int64))
            new = [
                helper.make_node(
                    "Reshape", [source, shapes[0]], [tensors[0]], name=f"{reshape_in.name}_nhwc"
                ),
                helper.make_node(
                    "Transpose", [tensors[0]], [tensors[1]], perm=nhwc_perm, name=f"{transpose.name}_nhwc"
                ),
                helper.make_node(
                    "Reshape", [tensors[1], shapes[1]], [tensors[2]], name=f"{reshape_out.name}_nhwc"
                ),
                helper.make_node(
                    "Transpose", [tensors[2]], [result], perm=TO_NCHW, name=f"{first.name}_nchw"
                ),
            ]
            for node, old in zip(new, (reshape_in, transpose, reshape_out, first)):
                node.metadata_props.extend(old.metadata_props)  # the torch module it came from
            datatype = model.get_tensor_datatype(source)
            transposed = [nhwc_factors[i] for i in nhwc_perm]
            for tensor, shape in zip(tensors, (nhwc_factors, transposed, [n, h, w, c])):
                model.set_tensor_shape(tensor, shape)
                model.set_tensor_datatype(tensor, datatype)
            at = list(model.graph.node).index(first)
            for old in (first, reshape_in, transpose, reshape_out):
                model.graph.node.remove(old)
            for offset, node in enumerate(new):
                model.graph.node.insert(at + offset, node)
            return model, True
        return model, False


def _only_consumer(model, node, op_type: str):
    consumers = model.find_consumers(node.output[0]) or []
    if len(consumers) == 1 and consumers[0].op_type == op_type and consumers[0].input[0] == node.output[0]:
        return consumers[0]
    return None


def _shuffle_chain(model, first):
    """(Reshape, Transpose, Reshape, channel factors, transpose perm) when ``first`` is a Transpose to
    NCHW feeding only a channel shuffle (a reshape of the channels into factors, a transpose of the
    factors alone, a reshape back to the 4-D shape), else None."""
    if _perm(first) != TO_NCHW:
        return None
    reshape_in = _only_consumer(model, first, "Reshape")
    transpose = None if reshape_in is None else _only_consumer(model, reshape_in, "Transpose")
    reshape_out = None if transpose is None else _only_consumer(model, transpose, "Reshape")
    if reshape_out is None:
        return None
    shape = model.get_tensor_shape(first.output[0])
    split = model.get_tensor_shape(reshape_in.output[0])
    if shape is None or split is None or len(shape) != 4:
        return None
    if model.get_tensor_shape(reshape_out.output[0]) != shape:
        return None
    n, c, h, w = shape
    factors, perm = split[1:-2], _perm(transpose)
    rank = len(split)
    inner = perm[1:-2]
    if (
        split[0] != n
        or split[-2:] != [h, w]
        or int(np.prod(factors)) != c
        or perm[0] != 0
        or perm[-2:] != [rank - 2, rank - 1]
        or sorted(inner) != list(range(1, rank - 2))
    ):
        return None
    return reshape_in, transpose, reshape_out, list(factors), perm


def _same_permutation(shape, factors, perm, nhwc_perm) -> bool:
    """Whether the NCHW shuffle (reshape to the factors, ``perm``, reshape back) and the NHWC one
    (``nhwc_perm`` on the factors of the last axis) move every element of a ``shape`` tensor alike."""
    n, c, h, w = shape
    index = np.arange(n * c * h * w).reshape(n, c, h, w)
    nchw = index.reshape(n, *factors, h, w).transpose(perm).reshape(n, c, h, w)
    nhwc = index.transpose(0, 2, 3, 1).reshape(n, h, w, *factors).transpose(nhwc_perm).reshape(n, h, w, c)
    return bool(np.array_equal(nchw.transpose(0, 2, 3, 1), nhwc))


class TransposesPastJoinSub(Transformation):
    """FINN's ``MoveTransposePastJoinAdd`` for a ``Sub`` of two tensors transposed alike (the
    difference of two threshold layers that computes a non-monotonic activation, :mod:`.activations`):
    one transpose after the difference, which then cancels with the next layer's. FINN has the pass
    for Add and Mul only; its check of the permutations drops its result, so it is made here."""

    def apply(self, model):
        from finn.transformation.streamline.reorder import MoveIdenticalOpPastJoinOp

        class _Past(MoveIdenticalOpPastJoinOp):
            def are_producers_identical(self, model, producers):
                perms = {tuple(p.attribute[0].ints) if p.op_type == "Transpose" else None for p in producers}
                return super().are_producers_identical(model, producers) and len(perms) == 1

        return _Past(["Transpose"], ["Sub"]).apply(model)


#: hardware layers that read a whole frame before their first output
WHOLE_FRAME = ("GlobalAccPool",)


class SkipBranchFifoDepths(Transformation):
    """The input FIFO a join needs on a branch beside a whole-frame reduction: squeeze-excite's
    multiply (the map times a gate computed from its global average) receives the first gate value
    only after the pool read the whole map, which the map's own branch must hold meanwhile: a FIFO of
    that input's words per frame (its folded shape), or the dataflow stalls for good. The same holds
    one level up: the residual addition around a block with squeeze-excite inside. A branch is the
    layers between the join and the nearest layer all its inputs come from. FINN sizes FIFOs only by
    RTL simulation (``step_set_fifo_depths``); set here as ``inFIFODepths``, the depth FINN's
    ``InsertFIFO`` builds (and the estimate prices) and ``folding_config.json`` carries."""

    def apply(self, model):
        from qonnx.custom_op.registry import getCustomOp

        order = {n.name: i for i, n in enumerate(model.graph.node)}
        for node in model.graph.node:
            inputs = [t for t in node.input if model.get_initializer(t) is None]
            if not node.domain.startswith("finn.custom_op.fpgadataflow") or len(inputs) < 2:
                continue
            ancestries = [_ancestors(model, t) for t in inputs]
            common = set.intersection(*(set(a) for a in ancestries))
            if not common:
                continue
            fork = max(common, key=order.__getitem__)  # the nearest: the last in graph order
            fork_inputs = [t for t in ancestries[0][fork].input if model.get_initializer(t) is None]
            shared = {fork}.union(*(_ancestors(model, t) for t in fork_inputs))
            reduces = [
                any(ancestry[n].op_type.startswith(WHOLE_FRAME) for n in ancestry if n not in shared) for ancestry in ancestries
            ]
            if all(reduces) or not any(reduces):
                continue
            op = getCustomOp(node)
            depths = [*op.get_nodeattr("inFIFODepths"), *[2] * len(inputs)][: len(inputs)]
            for index, reduced in enumerate(reduces):
                if not reduced:
                    depths[index] = max(depths[index], int(np.prod(op.get_folded_input_shape(index)[:-1])))
            op.set_nodeattr("inFIFODepths", depths)
        return model, False


def _ancestors(model, tensor: str) -> dict:
    """Every node ``tensor`` is computed from, by name."""
    found: dict = {}
    pending = [tensor]
    while pending:
        producer = model.find_producer(pending.pop())
        if producer is None or producer.name in found:
            continue
        found[producer.name] = producer
        pending += [t for t in producer.input if model.get_initializer(t) is None]
    return found
