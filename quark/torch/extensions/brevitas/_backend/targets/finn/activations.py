"""Any elementwise activation between two quantizers as FINN's thresholds (``MultiThreshold``, which
FINN turns into ``Thresholding`` layers), before FINN's ``ConvertQONNXtoFINN``.

FINN has hardware for thresholds but none for SiLU, HardSwish, GELU, Sigmoid, Tanh, ... An activation
``f`` whose input is quantized (graph mode quantizes it for the FINN target) and whose output is
quantized is an integer map from the input's levels to output levels: evaluated here on every input
level (in the graph's own ONNX nodes, so the result is what the graph computes), it becomes

- one ``MultiThreshold`` on the input where the map does not decrease (Sigmoid, HardSigmoid, Tanh,
  ELU, ...): a threshold between each two neighbouring input levels whose outputs differ, once per
  output step;
- otherwise (SiLU, HardSwish, GELU, Mish, ...) the difference of two such ``MultiThreshold`` nodes,
  the map's rises and its falls, which FINN takes as two ``Thresholding`` layers and an
  ``ElementwiseSub``.

Thresholds lie halfway between neighbouring input levels, so they stay exact when FINN's streamlining
scales and rounds them onto the input's integers. A channel whose map starts higher than another's
gets that many thresholds at minus infinity, one that steps fewer times pads with thresholds at plus
infinity: every channel has as many thresholds, and the output offset is a scalar.

Written for the package because neither FINN nor qonnx has it (finn-plus' ``PWPolyF`` computes on
floats); what upstream could take: a handler of ``ConvertQuantActToMultiThreshold`` for any
elementwise predecessor, evaluated on the input quantizer's levels as here.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from onnx import TensorProto, helper
from qonnx.transformation.base import Transformation

#: ONNX operators computed value by value (the parts an activation exports to)
ELEMENTWISE = frozenset(
    {
        "Abs", "Add", "Celu", "Clip", "Cos", "Div", "Elu", "Erf", "Exp", "Gelu", "HardSigmoid", "HardSwish",
        "LeakyRelu", "Log", "Max", "Min", "Mish", "Mul", "Neg", "Pow", "PRelu", "Reciprocal", "Relu", "Selu",
        "Sigmoid", "Sin", "Softplus", "Softsign", "Sqrt", "Sub", "Tanh", "ThresholdedRelu",
    }
)  # fmt: skip
#: operators that keep an input's levels a finite set (a scale or an offset by a constant)
_AFFINE = frozenset({"Mul", "Add", "Sub", "Div"})
#: activations no FINN pass or layer computes: one left after this pass is refused before streamlining
NEVER_HARDWARE = ELEMENTWISE - _AFFINE - {"Relu", "Clip", "Max", "Min", "Neg", "Abs"}
#: the widest input and output, in bits (FINN's thresholds take up to 8-bit quantizers by default)
MAX_BITS = 8
#: MultiThreshold's data layout for an NC... tensor of each rank (qonnx guesses NWC for rank 3)
LAYOUTS = {2: "NC", 3: "NCW", 4: "NCHW"}


@dataclass(frozen=True)
class _Region:
    """The nodes computing an activation: from ``source`` (a quantized tensor) to ``end`` (the
    Quant or MultiThreshold quantizing the result)."""

    source: str
    nodes: tuple  # NodeProto, in graph order
    end: object  # NodeProto


class ActivationsAsThresholds(Transformation):
    """Every elementwise computation between a quantized tensor of at most 2^``max_bits`` levels and
    a Quant node of at most ``max_bits`` bits and zero point 0 (FINN's own conditions for
    thresholds) or a MultiThreshold node, other than what FINN converts itself (scales and offsets by
    constants, Relu, Clip), as one ``MultiThreshold`` (a map that does not decrease) or the difference
    of two. Constants in it must be scalars or per channel (axis 1)."""

    def __init__(self, max_bits: int = MAX_BITS):
        super().__init__()
        self.max_bits = max_bits

    def apply(self, model):
        from qonnx.transformation.infer_datatypes import InferDataTypes
        from qonnx.transformation.infer_shapes import InferShapes

        replaced = 0
        for end in [n for n in model.graph.node if n.op_type in ("Quant", "MultiThreshold")]:
            region = _region(model, end, self.max_bits)
            if region is None:
                continue
            levels = _levels(model, region.source)
            if levels is None or len(levels) > 2**self.max_bits:
                continue
            counted = _counts(model, region, levels)
            if counted is not None:
                _replace(model, region, _steps(levels, counted[0]), counted[1])
                replaced += 1
        if replaced:  # the new tensors' shapes and types
            model = model.transform(InferShapes()).transform(InferDataTypes())
        return model, False


# -- which nodes -----------------------------------------------------------------------------------


def _region(model, end, max_bits: int) -> _Region | None:
    """The activation ending at ``end``'s data input, or None (no such region, one FINN converts, or
    one this pass cannot tabulate)."""
    if end.op_type == "Quant" and not _thresholdable(model, end, max_bits):
        return None
    nodes, lines, pending, seen = [], [], [end.input[0]], set()
    while pending:
        tensor = pending.pop()
        if tensor in seen:
            continue
        seen.add(tensor)
        line = _lineage(model, tensor)
        if line:
            lines.append(line)
            continue
        producer = model.find_producer(tensor)
        if producer is None or producer.op_type not in ELEMENTWISE:
            return None
        nodes.append(producer)
        pending.extend(t for t in producer.input if t and model.get_initializer(t) is None)
    # the source: the nearest quantized tensor every levelled input derives from (GELU divides the
    # quantized input by sqrt(2) for erf and multiplies it as it is: both from the quantizer's output)
    common = [t for t in lines[0] if all(t in line for line in lines)] if lines else []
    if not common or all(_finns_own(model, n) for n in nodes):
        return None
    for line in lines:
        nodes += [model.find_producer(t) for t in line[: line.index(common[0])]]
    nodes = list({id(n): n for n in nodes}.values())
    inside = {id(n) for n in nodes} | {id(end)}
    shape = model.get_tensor_shape(common[0])
    if shape is None or len(shape) not in LAYOUTS:
        return None
    for node in nodes:  # the intermediate values feed only the activation
        if any(id(c) not in inside for t in node.output for c in model.find_consumers(t) or []):
            return None
        constants = [model.get_initializer(t) for t in node.input if t and model.get_initializer(t) is not None]
        if any(_per_channel(c, shape[1]) is None for c in constants):
            return None  # a constant varying along another axis than the channels
    order = {id(n): i for i, n in enumerate(model.graph.node)}
    return _Region(common[0], tuple(sorted(nodes, key=lambda n: order[id(n)])), end)


def _thresholdable(model, quant, max_bits: int) -> bool:
    """Whether a Quant node quantizes a computed tensor as FINN's thresholds can: at most ``max_bits``
    bits, zero point 0, scalars or per-channel constants."""
    if model.get_initializer(quant.input[0]) is not None:
        return False  # a weight quantizer
    scale, zero, bits = (model.get_initializer(t) for t in quant.input[1:4])
    return (
        scale is not None
        and zero is not None
        and bits is not None
        and np.asarray(bits).size == 1
        and float(np.asarray(bits).reshape(())) <= max_bits
        and not np.any(zero)
    )


def _finns_own(model, node) -> bool:
    """Whether FINN's conversion and streamlining take ``node`` themselves: Relu, Clip, a scale or an
    offset by a constant."""
    constant = any(model.get_initializer(t) is not None for t in node.input)
    return node.op_type in ("Relu", "Clip") or (node.op_type in _AFFINE and constant)


def _lineage(model, tensor: str) -> list[str]:
    """A tensor taking finitely many values (a quantizer's output, scaled or offset by constants) and
    the tensors it derives from, nearest first, up to the quantizer's output; [] for any other."""
    producer = model.find_producer(tensor)
    if producer is None:
        return []
    if producer.op_type in ("Quant", "MultiThreshold"):
        return [tensor] if model.get_initializer(producer.input[0]) is None else []
    constants = [model.get_initializer(t) is not None for t in producer.input]
    if producer.op_type not in _AFFINE or sum(constants) != 1:
        return []
    inner = _lineage(model, producer.input[constants.index(False)])
    return [tensor, *inner] if inner else []


# -- what they compute -----------------------------------------------------------------------------


def _levels(model, tensor: str) -> np.ndarray | None:
    """Every value ``tensor`` can take, per channel: float32 (levels, channels), computed as the graph
    computes it; None where a constant varies along another axis than the channels."""
    shape = model.get_tensor_shape(tensor)
    channels = shape[1] if len(shape) > 1 else 1
    producer = model.find_producer(tensor)
    if producer.op_type in ("Quant", "MultiThreshold"):
        return _quantizer_levels(model, producer, channels)
    position = next(i for i, t in enumerate(producer.input) if model.get_initializer(t) is None)
    inner = _levels(model, producer.input[position])
    constant = _per_channel(model.get_initializer(producer.input[1 - position]), channels)
    if inner is None or constant is None:
        return None
    operands = (inner, constant) if position == 0 else (constant, inner)
    compute = {"Mul": np.multiply, "Add": np.add, "Sub": np.subtract, "Div": np.divide}[producer.op_type]
    return compute(*operands).astype(np.float32)


def _per_channel(value: np.ndarray, channels: int) -> np.ndarray | None:
    """A constant as a (1, channels) float32 row, or None where it varies along another axis."""
    value = np.asarray(value, dtype=np.float32)
    flat = value.reshape(-1)
    if flat.size == 1:
        return np.full((1, channels), flat[0], dtype=np.float32)
    if value.ndim >= 2 and value.shape[1] == channels and flat.size == channels:
        return flat.reshape(1, channels)
    return None


def _quantizer_levels(model, node, channels: int) -> np.ndarray | None:
    """The values of a Quant (every integer of its range, scaled) or MultiThreshold (every count)."""
    if node.op_type == "MultiThreshold":
        from qonnx.custom_op.registry import getCustomOp

        op = getCustomOp(node)
        counts = np.arange(model.get_initializer(node.input[1]).shape[1] + 1, dtype=np.float32)[:, None]
        out = counts * np.float32(op.get_nodeattr("out_scale")) + np.float32(op.get_nodeattr("out_bias"))
        return np.broadcast_to(out, (len(counts), channels)).astype(np.float32)
    scale, zero, bits = (model.get_initializer(t) for t in node.input[1:4])
    scale, zero = _per_channel(scale, channels), _per_channel(zero, channels)
    if scale is None or zero is None or np.asarray(bits).size != 1:
        return None
    low, high = _integer_range(node, int(np.asarray(bits).reshape(())))
    integers = np.arange(low, high + 1, dtype=np.float32)[:, None]
    return ((integers - zero) * scale).astype(np.float32)


def _integer_range(node, bits: int) -> tuple[int, int]:
    """The integers a Quant node rounds onto (its signed and narrow attributes)."""
    attributes = {a.name: helper.get_attribute_value(a) for a in node.attribute}
    signed, narrow = attributes.get("signed", 1), attributes.get("narrow", 0)
    low = -(2 ** (bits - 1)) + narrow if signed else 0
    high = 2 ** (bits - 1) - 1 if signed else 2**bits - 1 - narrow
    return low, high


@dataclass(frozen=True)
class _Tail:
    """How the count of passed thresholds becomes the quantizer's output: ``count * out_scale +
    out_bias`` (as ``MultiThreshold`` computes it, in ``out_dtype``), then times ``mul`` (None: 1)."""

    out_dtype: str
    out_scale: float
    out_bias: float
    mul: np.ndarray | None
    data_layout: str


def _counts(model, region: _Region, levels: np.ndarray) -> tuple[np.ndarray, _Tail] | None:
    """The count of thresholds each input level passes (levels, channels), from the region and its
    quantizer executed on every level, and how the count becomes the quantizer's output; None for a
    Quant node whose scale varies along another axis than the channels."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    end = region.end
    shape = model.get_tensor_shape(region.source)
    batch = [len(levels), shape[1], *[1] * (len(shape) - 2)]
    nodes = [*region.nodes, end]
    graph = helper.make_graph(
        nodes,
        "activation",
        [helper.make_tensor_value_info(region.source, TensorProto.FLOAT, batch)],
        [helper.make_tensor_value_info(end.output[0], TensorProto.FLOAT, batch)],
    )
    sub = ModelWrapper(helper.make_model(graph, opset_imports=model.model.opset_import))
    for name in {t for n in nodes for t in n.input if t and model.get_initializer(t) is not None}:
        sub.set_initializer(name, model.get_initializer(name))
    out = execute_qonnx(sub.transform(InferShapes()), [levels.reshape(batch)])[0].reshape(len(levels), -1)
    if end.op_type == "MultiThreshold":
        op = getCustomOp(end)
        scale, bias = op.get_nodeattr("out_scale"), op.get_nodeattr("out_bias")
        tail = _Tail(op.get_nodeattr("out_dtype"), scale, bias, None, op.get_nodeattr("data_layout") or LAYOUTS[len(shape)])
        return np.rint((out - np.float32(bias)) / np.float32(scale)).astype(np.int64), tail
    scale, bits = model.get_initializer(end.input[1]), model.get_initializer(end.input[3])
    scale_row = _per_channel(scale, shape[1])
    if scale_row is None:
        return None
    bits = int(np.asarray(bits).reshape(()))
    low, _ = _integer_range(end, bits)
    integers = np.rint(out / scale_row).astype(np.int64)  # zero point 0 (_thresholdable)
    signed = {a.name: helper.get_attribute_value(a) for a in end.attribute}.get("signed", 1)
    tail = _Tail(
        f"{'INT' if signed else 'UINT'}{bits}",
        1.0,
        float(low),
        None if np.all(np.asarray(scale) == 1) else np.asarray(scale, dtype=np.float32),
        LAYOUTS[len(shape)],
    )
    return integers - low, tail


# -- thresholds ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Steps:
    """The thresholds of the map's rises (with its starting count) and of its falls, per channel."""

    rises: np.ndarray  # (channels, thresholds), sorted
    falls: np.ndarray | None  # None: the map does not decrease


def _steps(levels: np.ndarray, counts: np.ndarray) -> _Steps:
    rises, falls = [], []
    for channel in range(levels.shape[1]):
        values, first = np.unique(levels[:, channel], return_index=True)
        out = counts[first, channel]
        middles = ((values[:-1].astype(np.float64) + values[1:]) / 2).astype(np.float32)
        steps = np.diff(out)
        rises.append(np.concatenate([np.full(out[0], -np.inf, np.float32), np.repeat(middles, np.maximum(steps, 0))]))
        falls.append(np.repeat(middles, np.maximum(-steps, 0)))
    return _Steps(_padded(rises), _padded(falls) if any(len(f) for f in falls) else None)


def _padded(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of thresholds as one matrix, the shorter filled with plus infinity (never passed)."""
    width = max(len(r) for r in rows)
    return np.stack([np.concatenate([r, np.full(width - len(r), np.inf, np.float32)]) for r in rows]).astype(np.float32)


def _integer_dtype(low: float, high: float) -> str:
    """The narrowest qonnx integer type holding ``low..high``."""
    from qonnx.core.datatype import DataType

    for bits in range(1, 33):
        for name in (f"UINT{bits}", f"INT{bits}"):
            if DataType[name].min() <= low and high <= DataType[name].max():
                return DataType[name].name
    raise ValueError(f"no integer type of at most 32 bits holds {low}..{high}")


# -- the new nodes ---------------------------------------------------------------------------------


def _replace(model, region: _Region, steps: _Steps, tail: _Tail) -> None:
    """The region and its quantizer replaced by thresholds on the source computing the same output."""
    graph = model.graph
    index = min(list(graph.node).index(n) for n in (*region.nodes, region.end))
    output = region.end.output[0]
    name = region.end.name or output
    shape = model.get_tensor_shape(output)
    new = []

    def tensor() -> str:
        """A new intermediate tensor, its shape known at once (a next activation reads it)."""
        made = model.make_new_valueinfo_name()
        model.set_tensor_shape(made, shape)
        return made

    def threshold(thresholds: np.ndarray, out: str, dtype: str, scale: float = 1.0, bias: float = 0.0) -> str:
        values = model.make_new_valueinfo_name()  # a constant
        model.set_initializer(values, thresholds)
        attributes = {"out_dtype": dtype, "out_scale": float(scale), "out_bias": float(bias), "data_layout": tail.data_layout}
        new.append(
            helper.make_node(
                "MultiThreshold", [region.source, values], [out], f"{name}_{len(new)}", domain="qonnx.custom_op.general", **attributes
            )
        )
        return out

    def binary(op: str, a: str, b: str | np.ndarray, out: str) -> str:
        if isinstance(b, np.ndarray):
            constant, b = b, model.make_new_valueinfo_name()
            model.set_initializer(b, constant)
        new.append(helper.make_node(op, [a, b], [out], f"{name}_{len(new)}"))
        return out

    if steps.falls is None:  # one threshold layer with the quantizer's own attributes
        scales = [tail.mul] if tail.mul is not None else []
        counted = threshold(steps.rises, output if not scales else tensor(), tail.out_dtype, tail.out_scale, tail.out_bias)
    else:  # the rises carry the offset; the count is their difference with the falls, then scaled
        scales = [np.asarray(tail.out_scale, dtype=np.float32)] if tail.out_scale != 1 else []
        scales += [tail.mul] if tail.mul is not None else []
        offset = tail.out_bias / tail.out_scale
        rises = threshold(steps.rises, tensor(), _integer_dtype(offset, offset + steps.rises.shape[1]), bias=offset)
        falls = threshold(steps.falls, tensor(), _integer_dtype(0, steps.falls.shape[1]))
        counted = binary("Sub", rises, falls, output if not scales else tensor())
    for position, scale in enumerate(scales):
        counted = binary("Mul", counted, scale, output if position == len(scales) - 1 else tensor())
    for node in (*region.nodes, region.end):
        graph.node.remove(node)
    for offset, node in enumerate(new):
        graph.node.insert(index + offset, node)
