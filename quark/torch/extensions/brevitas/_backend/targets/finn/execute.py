"""FINN's streamlined and hardware-layer graphs executed on a whole batch in torch, bit for bit as
FINN's Python execution (qonnx's ``execute_onnx``) computes them one sample at a time.

FINN's graphs have batch size 1, and ``execute_onnx`` runs them node by node in numpy (standard
ONNX nodes through one ONNX Runtime session per node): 22 ms a digits image on the demo's
hardware graph, so a real test set is out of reach. Here every node is one row of :data:`KERNELS`
(op type -> builder): the builder reads the node's attributes and initializers as FINN's own
``execute_node`` does (FINN's ``getCustomOp`` accessors, so FINN's defaults), and returns a function
of whole-batch tensors. :func:`compile_graph` builds the rows of a graph once (a
``StreamingDataflowPartition`` is its child model, compiled likewise); :func:`execute` runs it on a
batch in chunks and returns the outputs with the engine that computed them.

Exactness. FINN carries every tensor as float32 holding integers (the datatype annotations say
which); this executor carries the same float32 values, and each row computes what FINN's numpy
code computes:

- comparisons, max, padding, sliding windows, transposes, reshapes and concatenations are exact in
  any arithmetic;
- single IEEE operations (``Mul``, ``Add``, ``Sub``, ``Div`` and FINN's elementwise layers, whose
  numpy code goes through int64 or float64 and back to float32) round once to float32 in numpy,
  ONNX Runtime and torch alike (an int64 or float64 result rounded to float32 equals the float32
  operation on the same float32 operands: float64 holds the exact sum or product of such values,
  and for the quotient double rounding through float64's 53 bits is innocuous for 24-bit results);
- integer dot products and sums (MVAU, VVAU, MatMul of integer operands, XNOR-popcount, pooling
  sums) are exact in float32 while every partial sum stays below 2**24 (float32's 24-bit
  significand), whatever the summation order; each chunk's bound (largest |input| times the largest
  column sum of |weights|, or the window size) is checked and the sum computed in float64 (exact
  below 2**53) where it is not below 2**24. There FINN's own float32 execution rounds in an order
  its BLAS picks; this executor gives the exact integer that FINN's hardware accumulator (of FINN's
  accumulator width) computes.

What is not provably equal is refused: a matrix product or a sum of float (non-integer) operands
adds in an order numpy / ONNX Runtime choose, and op types without a row have no implementation. :func:`execute` then runs FINN's Python
execution on that graph instead, and logs why (a warning): the verification it serves must still
happen, only slower. :func:`compile_graph` raises :class:`Unsupported` for callers that want the
refusal. qonnx's sanitization of integer tensors (rounding of values an integer annotation says
are integers, ``SANITIZE_QUANT_TENSORS``) is applied where FINN applies it.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from quark.common.errors import RefusedError

logger = logging.getLogger(__name__)

#: float32's significand: integers up to this magnitude, and sums that stay below it, are exact
FLOAT32_EXACT = 2**24
#: samples computed together, at most; fewer where the graph's largest tensor of so many samples
#: would pass CHUNK_BYTES (the demo's largest, the sliding windows of a 16-channel 3x3 convolution
#: over 8x8 images, is 37 KB a sample: 2048 samples; a 64-channel one over 32x32 images, 2.4 MB: 56)
CHUNK, CHUNK_BYTES = 2048, 2**27

Kernel = Callable[[list[torch.Tensor]], list[torch.Tensor]]


class Unsupported(RefusedError):
    """A node this executor cannot compute exactly as FINN's Python execution does; says why."""


# -- what a row's builder sees ------------------------------------------------------------------------


@dataclass
class Node:
    """One ONNX node of a FINN graph with the accessors FINN's ``execute_node`` uses."""

    onnx: Any  # onnx.NodeProto
    model: Any  # qonnx ModelWrapper

    @property
    def name(self) -> str:
        return self.onnx.name or self.onnx.op_type

    @property
    def custom(self):
        """FINN's / qonnx's CustomOp instance (attribute defaults included)."""
        from qonnx.custom_op.registry import getCustomOp

        return getCustomOp(self.onnx)

    def attr(self, name: str, default: Any = None) -> Any:
        """An attribute of a standard ONNX node (``default`` where unset)."""
        import onnx

        for attribute in self.onnx.attribute:
            if attribute.name == name:
                value = onnx.helper.get_attribute_value(attribute)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def constant(self, index: int, raw: bool = False) -> np.ndarray:
        """The initializer feeding input ``index``, as FINN's execution context holds it (sanitized,
        see :func:`_sanitized`); ``raw``: as the graph stores it (what VVAU reads)."""
        name = self.onnx.input[index] if index < len(self.onnx.input) else ""
        value = self.model.get_initializer(name) if name else None
        if value is None:
            raise self.refuse(f"input {index} is computed, not a constant")
        if raw:
            return value
        datatype = _annotation(self.model, name, _sanitize_enabled())
        return _sanitized(torch.from_numpy(np.array(value, copy=True)), datatype, name).numpy()

    def has_constant(self, index: int) -> bool:
        name = self.onnx.input[index] if index < len(self.onnx.input) else ""
        return bool(name) and self.model.get_initializer(name) is not None

    def datatype(self, tensor: str):
        return self.model.get_tensor_datatype(tensor)

    def out_shape(self, index: int = 0) -> tuple[int, ...]:
        return tuple(self.model.get_tensor_shape(self.onnx.output[index]))

    def in_shape(self, index: int = 0) -> tuple[int, ...]:
        return tuple(self.model.get_tensor_shape(self.onnx.input[index]))

    def refuse(self, reason: str) -> Unsupported:
        return Unsupported(f"{self.name} ({self.onnx.op_type}): {reason}")


def _batched(shape: Sequence[int], n: int) -> tuple[int, ...]:
    """A batch-1 shape of FINN's graph for ``n`` samples."""
    return (n, *shape[1:])


def _declared(node: Node, value: torch.Tensor, index: int = 0) -> torch.Tensor:
    """``value`` reshaped to the node's declared output shape, as FINN's ``reshape(oshape)``."""
    return value.reshape(_batched(node.out_shape(index), len(value)))


def _numpy_dtype(*arrays: Any) -> torch.dtype:
    """numpy's result dtype of an operation on float32 data and these constants, as a torch dtype."""
    return getattr(torch, np.result_type(np.float32, *arrays).name)


# -- shared arithmetic ---------------------------------------------------------------------------------


#: up to this many thresholds a channel, they are counted one comparison pass each (into uint8);
#: more (an 8-bit input quantizer's 255), by binary search (measured on the demo's 15: 17 ms against
#: 39 ms for 2M values)
COUNTED_STEPS = 32


def _count_at_least(x: torch.Tensor, thresholds: torch.Tensor) -> torch.Tensor:
    """How many thresholds each value reaches (``x >= t``), channels on the last axis of ``x``;
    ``thresholds`` is (channels or 1, steps), sorted per channel (the count does not depend on the
    order, so they are sorted once when the row is built)."""
    if thresholds.dtype != x.dtype:  # compare in numpy's common dtype (float64 holds float32 exactly)
        common = torch.promote_types(thresholds.dtype, x.dtype)
        x, thresholds = x.to(common), thresholds.to(common)
    steps = thresholds.shape[1]
    if steps <= COUNTED_STEPS:
        counts = torch.zeros(x.shape, dtype=torch.uint8)
        for step in thresholds.T:  # (channels or 1,): broadcast over the last axis
            counts += x >= step
        return counts
    flat = x.reshape(-1, x.shape[-1])
    if thresholds.shape[0] == 1:  # one set for all channels
        counts = torch.searchsorted(thresholds[0], flat.reshape(-1), right=True).reshape(flat.shape)
    else:  # searchsorted(right=True) counts the thresholds <= x, per channel row
        counts = torch.searchsorted(thresholds, flat.T.contiguous(), right=True).T
    return counts.reshape(x.shape)


def _thresholds(node: Node, index: int, raw: bool = False) -> torch.Tensor:
    values = node.constant(index, raw)
    if np.isnan(values).any():
        raise node.refuse("NaN thresholds (numpy's comparisons with NaN are not a count)")
    if values.ndim != 2:
        raise node.refuse(f"thresholds of shape {values.shape}, expected (channels, steps)")
    return torch.from_numpy(np.sort(values, axis=1).copy())


def _multithreshold(
    x: torch.Tensor, thresholds: torch.Tensor, channel_axis: int, scale: Any, bias: Any
) -> torch.Tensor:
    """qonnx's ``multithreshold``: ``scale * count + bias`` in the input's dtype (the scale and bias
    are Python or float32 scalars, which numpy casts to it), the operations one by one as numpy
    does; a scale of 1 and a bias of 0 change nothing (counts are never -0.0) and are skipped."""
    if thresholds.shape[0] not in (1, x.shape[channel_axis]):
        raise Unsupported(f"{thresholds.shape[0]} threshold channels for {x.shape[channel_axis]} channels")
    moved = x.movedim(channel_axis, -1)
    counts = _count_at_least(moved, thresholds).movedim(-1, channel_axis).to(x.dtype)
    if scale != 1:
        counts = counts * torch.as_tensor(scale, dtype=x.dtype)
    return counts + torch.as_tensor(bias, dtype=x.dtype) if bias != 0 else counts


def _largest(x: torch.Tensor) -> float:
    """max |x| (one pass, no temporary: ``aminmax``)."""
    if not x.numel():
        return 0.0
    low, high = torch.aminmax(x)
    return max(-float(low), float(high))


def _column_bound(weights: np.ndarray) -> float:
    """The largest sum of |weights| over the reduced axis 0: a dot product's bound per unit input."""
    return float(np.abs(weights.astype(np.float64)).sum(axis=0).max()) if weights.size else 0.0


def _exact_matmul(x: torch.Tensor, w32: torch.Tensor, w64: torch.Tensor, bound: float) -> torch.Tensor:
    """``x @ w`` of integers, exactly: in float32 while every partial sum stays below 2**24 (then any
    summation order gives the exact integer), else in float64 (exact below 2**53); float32 result."""
    largest = _largest(x)
    if largest * bound < FLOAT32_EXACT:
        return x @ w32
    if largest * bound >= 2**53:
        raise Unsupported(
            f"an integer dot product reaches {largest * bound:.3g}, beyond float64's exact range"
        )
    return (x.to(torch.float64) @ w64).to(torch.float32)


def _exact_sum(x: torch.Tensor, dim: int | tuple[int, ...], terms: int) -> torch.Tensor:
    """A sum of ``terms`` integers per output, exactly (float32 below 2**24, else float64)."""
    largest = _largest(x)
    if largest * terms < FLOAT32_EXACT:
        return x.sum(dim)
    return x.to(torch.float64).sum(dim).to(torch.float32)


def _float32_constants(node: Node) -> None:
    """The data are float32; a constant of another dtype would promote the operation in numpy's or
    ONNX Runtime's own way."""
    for index in range(len(node.onnx.input)):
        if node.has_constant(index) and node.constant(index, raw=True).dtype != np.float32:
            raise node.refuse(
                f"a {node.constant(index, raw=True).dtype} constant operand (the data are float32)"
            )


def _integer_operand(node: Node, datatype: Any, what: str) -> None:
    """Refuse a dot product or sum of a non-integer ``datatype`` (FINN's node attribute for hardware
    layers, the tensor's annotation for qonnx / ONNX nodes)."""
    from qonnx.core.datatype import DataType

    datatype = DataType[datatype] if isinstance(datatype, str) else datatype
    if not datatype.is_integer():
        raise node.refuse(
            f"{what} is {datatype.name}, not integer: a float dot product depends on the summation order"
        )


def _integer_weights(node: Node, weights: np.ndarray) -> None:
    if not np.array_equal(weights, np.round(weights)):
        raise node.refuse("weights are not integers: a float dot product depends on the summation order")


# -- FINN's hardware layers ----------------------------------------------------------------------------


def _mvau(node: Node) -> Kernel:
    """``MVAU``: matrix product (XNOR-popcount in ``binaryXnorMode`` or on bipolar operands), then
    thresholds unless ``noActivation`` (``matrixvectoractivation.execute_node``)."""
    from qonnx.core.datatype import DataType

    op = node.custom
    mw, mh = op.get_nodeattr("MW"), op.get_nodeattr("MH")
    vectors = list(op.get_nodeattr("numInputVectors"))
    weights = node.constant(1)
    if weights.shape != (mw, mh):
        raise node.refuse(f"weights of shape {weights.shape}, expected (MW, MH) = ({mw}, {mh})")
    _integer_weights(node, weights)
    bipolar = DataType["BIPOLAR"]
    xnor = bool(op.get_nodeattr("binaryXnorMode"))
    both_bipolar = (
        op.get_nodeattr("inputDataType") == "BIPOLAR" and op.get_nodeattr("weightDataType") == "BIPOLAR"
    )
    if xnor or both_bipolar:
        # qonnx's xnorpopcountmatmul: (bipolar(x) @ bipolar(w) + K) / 2, bipolar(b) = 2b - 1 of binary
        # operands; FINN maps bipolar operands to binary first ((v + 1) / 2), which 2b - 1 undoes
        signs = weights if both_bipolar and not xnor else 2.0 * weights - 1.0
        to_signs = (lambda x: x) if both_bipolar and not xnor else (lambda x: 2.0 * x - 1.0)
        offset = float(mw)
    else:
        _integer_operand(node, op.get_nodeattr("inputDataType"), "the input")
        signs, to_signs, offset = weights, None, None
    w32 = torch.from_numpy(np.ascontiguousarray(signs, dtype=np.float32))
    w64 = w32.to(torch.float64)
    bound = _column_bound(signs)
    activation = op.get_nodeattr("noActivation") == 0
    if activation:
        thresholds = _thresholds(node, 2)
        bipolar_out = DataType[op.get_nodeattr("outputDataType")] == bipolar
        scale, bias = (2, -1) if bipolar_out else (1, op.get_nodeattr("ActVal"))

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0].reshape(_batched([*vectors, mw], len(inputs[0])))
        if to_signs is not None:
            x = to_signs(x)
        result = _exact_matmul(x, w32, w64, bound)
        if offset is not None:
            result = (result + offset) * 0.5
        if activation:  # FINN thresholds NHWC results on their last axis, others on axis 1
            axis = -1 if result.ndim == 4 else 1
            result = _multithreshold(result, thresholds, axis, scale, bias)
        return [_declared(node, result)]

    return run


def _vvau(node: Node) -> Kernel:
    """``VVAU``: depthwise dot products over the kernel window, then thresholds unless
    ``noActivation`` (``vectorvectoractivation.execute_node``: the window's channels arrive
    interleaved by PE unless a sliding window generator produced them)."""
    from qonnx.core.datatype import DataType

    op = node.custom
    k_h, k_w = op.get_nodeattr("Kernel")
    channels = op.get_nodeattr("Channels")
    producer = node.model.find_producer(node.onnx.input[0])
    window = producer is not None and producer.op_type in ("Im2Col", "ConvolutionInputGenerator")
    pe = channels if window else op.get_nodeattr("PE")
    weights = node.constant(1, raw=True)  # (channels, 1, k_h, k_w), read from the graph as FINN does
    if weights.shape != (channels, 1, k_h, k_w):
        raise node.refuse(f"weights of shape {weights.shape}, expected ({channels}, 1, {k_h}, {k_w})")
    _integer_weights(node, weights)
    both_bipolar = (
        op.get_nodeattr("inputDataType") == "BIPOLAR" and op.get_nodeattr("weightDataType") == "BIPOLAR"
    )
    if not both_bipolar:
        _integer_operand(node, op.get_nodeattr("inputDataType"), "the input")
    taps = weights.reshape(channels, k_h * k_w).T  # (k_h * k_w, channels)
    w32 = torch.from_numpy(np.ascontiguousarray(taps, dtype=np.float32))
    bound = float(np.abs(taps.astype(np.float64)).sum(axis=0).max())
    activation = op.get_nodeattr("noActivation") == 0
    if activation:
        thresholds = _thresholds(node, 2, raw=True)
        bipolar_out = DataType[op.get_nodeattr("outputDataType")] == DataType["BIPOLAR"]
        scale, bias = (2, -1) if bipolar_out else (1, op.get_nodeattr("ActVal"))

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0]
        n, dim_h, dim_w = x.shape[:3]
        x = x.reshape(n, dim_h, dim_w, channels // pe, k_h * k_w, pe).transpose(3, 4)
        x = x.reshape(n, dim_h, dim_w, k_h * k_w, channels)
        largest = _largest(x)
        if largest * bound < FLOAT32_EXACT:
            result = (x * w32).sum(3)
        else:
            result = (x.to(torch.float64) * w32.to(torch.float64)).sum(3).to(torch.float32)
        if both_bipolar:
            result = (result + k_h * k_w) / 2
        if activation:
            result = _multithreshold(result, thresholds, -1, scale, bias)
        return [result]

    return run


def _thresholding(node: Node) -> Kernel:
    """``Thresholding``: thresholds on the last axis plus ``ActVal``, bipolar as 2y - 1."""
    from qonnx.core.datatype import DataType

    op = node.custom
    thresholds = _thresholds(node, 1)
    bias = op.get_nodeattr("ActVal")
    bipolar = DataType[op.get_nodeattr("outputDataType")] == DataType["BIPOLAR"]

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0]
        y = _multithreshold(x, thresholds, -1, 1.0, bias)
        if bipolar:
            y = 2 * y - 1
        return [y.to(torch.float32)]

    return run


def _windows(
    x: torch.Tensor, kernel: Sequence[int], stride: Sequence[int], dilation: Sequence[int]
) -> torch.Tensor:
    """qonnx's ``Im2Col`` of an NHWC batch without padding: (N, OH, OW, k_h * k_w * C), each window's
    pixels in (k_h, k_w, C) order."""
    (k_h, k_w), (s_h, s_w), (d_h, d_w) = kernel, stride, dilation
    n, _, _, c = x.shape
    patches = x.unfold(1, d_h * (k_h - 1) + 1, s_h)[..., ::d_h]  # (N, OH, W, C, k_h)
    patches = patches.unfold(2, d_w * (k_w - 1) + 1, s_w)[..., ::d_w]  # (N, OH, OW, C, k_h, k_w)
    return patches.permute(0, 1, 2, 4, 5, 3).reshape(n, patches.shape[1], patches.shape[2], k_h * k_w * c)


def _sliding_window(node: Node) -> Kernel:
    """``ConvolutionInputGenerator``: qonnx's Im2Col with the node's kernel, stride and dilation."""
    op = node.custom
    kernel, stride, dilation = (op.get_nodeattr(a) for a in ("ConvKernelDim", "Stride", "Dilation"))
    return lambda inputs: [_windows(inputs[0], kernel, stride, dilation)]


def _padding(node: Node) -> Kernel:
    """``FMPadding``: zeros around the image (``Padding`` = top, left, bottom, right), NHWC."""
    top, left, bottom, right = node.custom.get_nodeattr("Padding")
    return lambda inputs: [_declared(node, F.pad(inputs[0], (0, 0, left, right, top, bottom)))]


def _pool(node: Node) -> Kernel:
    """``Pool`` over the windows of a sliding window generator: max, sum, mean or the truncated
    mean (sum shifted right by the bits the output drops), ``pool.execute_node``."""
    from qonnx.core.datatype import DataType

    op = node.custom
    function = op.get_nodeattr("Function")
    k_h, k_w = op.get_nodeattr("KernelSize")
    channels = op.get_nodeattr("Channels")
    terms = k_h * k_w
    if function != "MaxPool":
        _integer_operand(node, op.get_nodeattr("InputDataType"), "the input")
    shift = 0
    if function == "QuantAvgPool":
        in_bits = DataType[op.get_nodeattr("InputDataType")].bitwidth()
        out_bits = DataType[op.get_nodeattr("OutputDataType")].bitwidth()
        shift = max(int((2**in_bits - 1) * terms).bit_length() - out_bits, 0)
    reduce = {
        "MaxPool": lambda v: v.amax(3),
        "AccPool": lambda v: _exact_sum(v, 3, terms),
        "AvgPool": lambda v: _exact_sum(v, 3, terms) / terms,  # numpy's mean: float32 sum / count
        "QuantAvgPool": lambda v: (_exact_sum(v, 3, terms).to(torch.int64) >> shift).to(torch.float32),
    }
    if function not in reduce:
        raise node.refuse(f"Function={function!r}; FINN's Pool computes {sorted(reduce)}")

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0]
        return [_declared(node, reduce[function](x.reshape(*x.shape[:-1], terms, channels)))]

    return run


def _global_acc_pool(node: Node) -> Kernel:
    """``GlobalAccPool``: the sum over the image (axes 1 and 2, NHWC)."""
    _integer_operand(node, node.custom.get_nodeattr("inputDataType"), "the input")
    height, width = node.in_shape()[1:3]
    return lambda inputs: [_declared(node, _exact_sum(inputs[0], (1, 2), height * width))]


def _duplicate(node: Node) -> Kernel:
    """``DuplicateStreams``: the input on every output."""
    count = len(node.onnx.output)
    shape = node.custom.get_normal_input_shape()
    return lambda inputs: [inputs[0].reshape(_batched(shape, len(inputs[0])))] * count


def _concat_last(node: Node) -> Kernel:
    """``StreamingConcat``: concatenation on the last axis."""
    return lambda inputs: [torch.cat(inputs, dim=-1)]


def _split_last(node: Node) -> Kernel:
    """``StreamingSplit``: pieces of ``ChannelsPerStream`` channels on the last axis."""
    sizes = [int(c) for c in node.custom.get_nodeattr("ChannelsPerStream")]
    return lambda inputs: list(torch.split(inputs[0], sizes, dim=-1))


def _shuffle(node: Node) -> Kernel:
    """``Shuffle``: FINN's reshape to ``transpose_in_shape``, transpose by ``perm``, reshape to
    ``out_shape`` (a channel shuffle: the last axis cut into two, swapped); the batch axis first."""
    op = node.custom
    inner, perm = list(op.get_nodeattr("transpose_in_shape")), list(op.get_nodeattr("perm"))
    out = list(op.get_nodeattr("out_shape"))
    if inner[:1] != [1] or out[:1] != [1] or perm[0] != 0:
        raise node.refuse(f"transpose_in_shape={inner}, perm={perm}: the batch axis does not stay first")

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        n = len(inputs[0])
        return [inputs[0].reshape(_batched(inner, n)).permute(*perm).reshape(_batched(out, n))]

    return run


def _label_select(node: Node) -> Kernel:
    """``LabelSelect``: the indices of the K largest values (ONNX Runtime's TopK, ties: lower index
    first), as float32."""
    k = node.custom.get_nodeattr("K")

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        order = torch.sort(inputs[0], dim=-1, descending=True, stable=True).indices[..., :k]
        return [_declared(node, order.to(torch.float32))]

    return run


def _requant(node: Node) -> Kernel:
    """``Requant``: clip(floor(x * scale + bias + 0.5)) to the output datatype's range, scale and
    bias as FINN reads them from the execution context (defaults float64 1 and 0)."""
    from qonnx.custom_op.general.quant import max_int, min_int

    op = node.custom
    scale = node.constant(1) if node.has_constant(1) else np.array([1.0])
    bias = node.constant(2) if node.has_constant(2) else np.array([0.0])
    output = op.get_output_datatype()
    narrow = op.get_nodeattr("narrow")
    lo, hi = (
        min_int(output.signed(), narrow, output.bitwidth()),
        max_int(output.signed(), narrow, output.bitwidth()),
    )
    dtype = _numpy_dtype(scale, bias)
    scale_t, bias_t = torch.from_numpy(scale.copy()).to(dtype), torch.from_numpy(bias.copy()).to(dtype)

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0].to(dtype) * scale_t + bias_t
        return [torch.clamp(torch.floor(x + 0.5), lo, hi).to(torch.float32)]

    return run


#: FINN's elementwise layer -> the torch operation on float32 operands (see the module docstring
#: for why it equals FINN's int64 / float64 numpy operation rounded to float32)
ELEMENTWISE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "ElementwiseAdd": torch.add,
    "ElementwiseSub": torch.sub,
    "ElementwiseMul": torch.mul,
    "ElementwiseDiv": torch.div,
    "ElementwiseAnd": torch.logical_and,
    "ElementwiseOr": torch.logical_or,
    "ElementwiseXor": torch.logical_xor,
    "ElementwiseEqual": torch.eq,
    "ElementwiseLess": torch.lt,
    "ElementwiseLessOrEqual": torch.le,
    "ElementwiseGreater": torch.gt,
    "ElementwiseGreaterOrEqual": torch.ge,
}


def _elementwise(node: Node) -> Kernel:
    """FINN's ``Elementwise*`` layers: one numpy operation with broadcasting, float32 result."""
    operation = ELEMENTWISE[node.onnx.op_type]
    _float32_constants(node)
    return lambda inputs: [operation(inputs[0], inputs[1]).to(torch.float32)]


# -- qonnx's custom nodes of the streamlined graph -------------------------------------------------------


def _multithreshold_node(node: Node) -> Kernel:
    """qonnx's ``MultiThreshold``: the channel axis from ``data_layout`` (guessed from the rank
    where unset), ``out_scale * count + out_bias`` in float32."""
    op = node.custom
    thresholds = _thresholds(node, 1)
    scale, bias = np.float32(op.get_nodeattr("out_scale")), np.float32(op.get_nodeattr("out_bias"))
    layout = op.get_nodeattr("data_layout")
    rank = len(node.in_shape())
    if not layout and rank < 5:
        layout = {0: None, 1: None, 2: "NC", 3: "NWC", 4: "NCHW"}[rank]
    axis = layout.index("C") if layout and "C" in layout else 1
    if rank <= axis:
        raise node.refuse(f"channel axis {axis} of a rank-{rank} tensor")

    return lambda inputs: [_multithreshold(inputs[0], thresholds, axis, scale, bias)]


def _xnor_popcount(node: Node) -> Kernel:
    """qonnx's ``XnorPopcountMatMul`` of binary operands: (bipolar(x) @ bipolar(w) + K) / 2."""
    weights = node.constant(1)
    _integer_weights(node, weights)
    signs = 2.0 * weights - 1.0
    w32 = torch.from_numpy(np.ascontiguousarray(signs, dtype=np.float32))
    bound, depth = _column_bound(signs), float(weights.shape[0])
    return lambda inputs: [(_exact_matmul(2.0 * inputs[0] - 1.0, w32, w32.double(), bound) + depth) * 0.5]


def _im2col(node: Node) -> Kernel:
    """qonnx's ``Im2Col``: sliding windows of an NHWC image, padded with ``pad_value``."""
    op = node.custom
    kernel, stride, dilation = (op.get_nodeattr(a) for a in ("kernel_size", "stride", "dilations"))
    top, left, bottom, right = op.get_nodeattr("pad_amount")
    value = float(op.get_nodeattr("pad_value"))

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = F.pad(inputs[0], (0, 0, left, right, top, bottom), value=value)
        return [_windows(x, kernel, stride, dilation)]

    return run


def _max_pool_2d(
    x: torch.Tensor, kernel: Sequence[int], pads: Sequence[int], strides, dilations
) -> torch.Tensor:
    """ONNX ``MaxPool`` (ceil_mode 0) of an NCHW batch: -inf padding, exact maxima."""
    top, left, bottom, right = pads
    x = F.pad(x, (left, right, top, bottom), value=-math.inf)
    return F.max_pool2d(x, kernel, strides, dilation=dilations)


def _max_pool_attributes(node: Node, values: dict[str, Any]):
    """kernel, pads, strides, dilations of a 2-d ONNX MaxPool (``values``: its attributes)."""
    kernel = list(values["kernel_shape"])
    if len(kernel) != 2:
        raise node.refuse(f"a {len(kernel)}-d pool; 2-d pools have a row")
    if values.get("ceil_mode"):
        raise node.refuse("ceil_mode=1 (ONNX Runtime's rounding of the output size)")
    if len(node.onnx.output) > 1:
        raise node.refuse("the Indices output")
    defaults = {"pads": [0] * 4, "strides": [1, 1], "dilations": [1, 1]}
    return kernel, *(list(values.get(name) or default) for name, default in defaults.items())


def _max_pool(node: Node) -> Kernel:
    """ONNX ``MaxPool`` of NCHW data."""
    names = ("kernel_shape", "ceil_mode", "pads", "strides", "dilations")
    kernel, pads, strides, dilations = _max_pool_attributes(node, {a: node.attr(a) for a in names})
    return lambda inputs: [_max_pool_2d(inputs[0], kernel, pads, strides, dilations)]


def _max_pool_nhwc(node: Node) -> Kernel:
    """qonnx's ``MaxPoolNHWC``: ONNX MaxPool on NHWC data."""
    op = node.custom
    names = ("kernel_shape", "ceil_mode", "pads", "strides")  # qonnx's attributes (no dilations)
    kernel, pads, strides, dilations = _max_pool_attributes(node, {a: op.get_nodeattr(a) for a in names})

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        y = _max_pool_2d(inputs[0].permute(0, 3, 1, 2), kernel, pads, strides, dilations)
        return [y.permute(0, 2, 3, 1)]

    return run


def _quant_avg_pool(node: Node) -> Kernel:
    """qonnx's ``QuantAvgPool2d``: the window sums (ONNX Runtime's mean times k*k, rounded: the
    exact sum while it stays below 2**22, so that the mean's float32 rounding is undone), shifted
    right by the bits the output drops."""
    op = node.custom
    k, s = op.get_nodeattr("kernel"), op.get_nodeattr("stride")
    shift = op.get_shifts()
    nhwc = op.get_nodeattr("data_layout") == "NHWC"
    _integer_operand(node, node.datatype(node.onnx.input[0]), "the input")

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0].permute(0, 3, 1, 2) if nhwc else inputs[0]
        largest = _largest(x)
        if largest * k * k >= 2**22:
            raise node.refuse(
                f"window sums up to {largest * k * k:.3g}: ONNX Runtime's mean no longer rounds back"
            )
        sums = F.avg_pool2d(x, k, s, divisor_override=1)
        y = (sums.to(torch.int64) >> shift).to(torch.float32)
        return [y.permute(0, 2, 3, 1) if nhwc else y]

    return run


# -- standard ONNX nodes (FINN runs them in ONNX Runtime, one node at a time) ---------------------------


def _same_rank(node: Node) -> None:
    """Broadcasting keeps the batch axis first only when every computed input has the output's rank."""
    rank = len(node.out_shape())
    for name in node.onnx.input:
        if (
            name
            and node.model.get_initializer(name) is None
            and len(node.model.get_tensor_shape(name)) != rank
        ):
            raise node.refuse("a computed input of lower rank than the output (the batch axis would move)")


#: ONNX's elementwise operations: one IEEE operation each, the same in ONNX Runtime and torch
STANDARD_ELEMENTWISE: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {
    "Add": torch.add,
    "Sub": torch.sub,
    "Mul": torch.mul,
    "Div": torch.div,
}


def _standard_elementwise(node: Node) -> Kernel:
    operation = STANDARD_ELEMENTWISE[node.onnx.op_type]
    _same_rank(node)
    _float32_constants(node)
    return lambda inputs: [operation(inputs[0], inputs[1])]


def _matmul(node: Node) -> Kernel:
    """ONNX ``MatMul`` of an integer input by integer weights: exact (see ``_exact_matmul``)."""
    weights = node.constant(1)
    if weights.ndim != 2:
        raise node.refuse(f"weights of rank {weights.ndim}")
    _integer_operand(node, node.datatype(node.onnx.input[0]), "the input")
    _integer_weights(node, weights)
    w32 = torch.from_numpy(np.ascontiguousarray(weights, dtype=np.float32))
    bound = _column_bound(weights)
    return lambda inputs: [_exact_matmul(inputs[0], w32, w32.double(), bound)]


def _transpose(node: Node) -> Kernel:
    perm = list(node.attr("perm", None) or reversed(range(len(node.in_shape()))))
    if perm[0] != 0:
        raise node.refuse(f"perm={perm} moves the batch axis")
    return lambda inputs: [inputs[0].permute(*perm)]


def _reshape(node: Node) -> Kernel:
    """``Reshape`` / ``Flatten`` / ``Squeeze`` / ``Unsqueeze`` / ``Identity``: the declared output shape
    for the batch (valid while the batch axis stays first: every sample's values are contiguous)."""
    if node.in_shape()[:1] != (1,) or node.out_shape()[:1] != (1,):
        raise node.refuse(f"{node.in_shape()} -> {node.out_shape()} does not keep the batch axis first")
    shape = node.out_shape()
    return lambda inputs: [inputs[0].reshape(_batched(shape, len(inputs[0])))]


def _concat(node: Node) -> Kernel:
    axis = node.attr("axis")
    if axis % len(node.out_shape()) == 0:
        raise node.refuse("concatenation along the batch axis")
    return lambda inputs: [torch.cat(inputs, dim=axis)]


def _split(node: Node) -> Kernel:
    """ONNX ``Split`` with constant sizes (``torch.chunk`` after the pipeline's ``SlicesAsSplit``)."""
    axis = node.attr("axis", 0)
    if axis % len(node.in_shape()) == 0:
        raise node.refuse("a split along the batch axis")
    sizes = [int(v) for v in node.constant(1, raw=True)] if node.has_constant(1) else node.attr("split")
    if sizes is None:
        raise node.refuse("split sizes neither a constant input nor an attribute")
    return lambda inputs: list(torch.split(inputs[0], list(sizes), dim=axis))


def _global_average_pool(node: Node) -> Kernel:
    """ONNX ``GlobalAveragePool`` of integers (NCHW): ONNX Runtime divides the float32 sum by the
    count (measured with onnxruntime 1.25.1; its row test fails if that changes), and the sum of
    integers is exact while it stays below 2**24 (beyond, ONNX Runtime's summation order decides:
    refused)."""
    _integer_operand(node, node.datatype(node.onnx.input[0]), "the input")
    terms = math.prod(node.in_shape()[2:])

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        x = inputs[0]
        if _largest(x) * terms >= FLOAT32_EXACT:
            raise node.refuse(f"sums of {terms} values up to {_largest(x):g}: ONNX Runtime's order decides")
        return [(x.sum(tuple(range(2, x.ndim)), keepdim=True) / terms).to(x.dtype)]

    return run


def _top_k(node: Node) -> Kernel:
    """ONNX ``TopK`` (ONNX Runtime: sorted, ties lower index first): values and int64 indices."""
    k = int(np.asarray(node.constant(1)).reshape(-1)[0])
    axis, largest = node.attr("axis", -1), node.attr("largest", 1)
    if axis % len(node.in_shape()) == 0:
        raise node.refuse("top-k along the batch axis")
    if not node.attr("sorted", 1):
        raise node.refuse("sorted=0 (ONNX Runtime's unsorted order)")

    def run(inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        order = torch.sort(inputs[0], dim=axis, descending=bool(largest), stable=True).indices.narrow(
            axis, 0, k
        )
        return [torch.gather(inputs[0], axis, order), order]

    return run


# -- the table ---------------------------------------------------------------------------------------------

#: op type -> builder of its batched kernel. A graph with an op type not here runs in FINN's Python
#: execution (:func:`execute`).
KERNELS: dict[str, Callable[[Node], Kernel]] = {
    "StreamingDataflowPartition": lambda node: _partition(node),  # defined below, with the program
    # FINN's hardware layers (finn.custom_op.fpgadataflow)
    "MVAU": _mvau,
    "VVAU": _vvau,
    "Thresholding": _thresholding,
    "ConvolutionInputGenerator": _sliding_window,
    "FMPadding": _padding,
    "Pool": _pool,
    "GlobalAccPool": _global_acc_pool,
    "DuplicateStreams": _duplicate,
    "StreamingConcat": _concat_last,
    "StreamingSplit": _split_last,
    "Shuffle": _shuffle,
    "LabelSelect": _label_select,
    "Requant": _requant,
    **dict.fromkeys(ELEMENTWISE, _elementwise),
    # qonnx's custom nodes of the streamlined graph (qonnx.custom_op.general)
    "MultiThreshold": _multithreshold_node,
    "XnorPopcountMatMul": _xnor_popcount,
    "Im2Col": _im2col,
    "MaxPoolNHWC": _max_pool_nhwc,
    "QuantAvgPool2d": _quant_avg_pool,
    # standard ONNX
    **dict.fromkeys(STANDARD_ELEMENTWISE, _standard_elementwise),
    "MatMul": _matmul,
    "Transpose": _transpose,
    "Reshape": _reshape,
    "Flatten": _reshape,
    "Squeeze": _reshape,
    "Unsqueeze": _reshape,
    "Identity": _reshape,
    "Concat": _concat,
    "Split": _split,
    "MaxPool": _max_pool,
    "GlobalAveragePool": _global_average_pool,
    "TopK": _top_k,
}


# -- the compiled graph ----------------------------------------------------------------------------------


@dataclass
class _Step:
    node: str
    op_type: str
    inputs: list[str]
    outputs: list[str]
    shapes: list[tuple[int, ...]]  # declared (batch 1) output shapes
    kernel: Kernel
    sanitize: list[Any]  # per output: the integer datatype to sanitize it to, or None


@dataclass
class Program:
    """A FINN graph compiled into batched kernels: :meth:`run` maps named input tensors to every tensor."""

    inputs: list[str]
    outputs: list[str]
    constants: dict[str, torch.Tensor]
    steps: list[_Step] = field(default_factory=list)
    sanitize_inputs: list[Any] = field(default_factory=list)
    sample_elements: int = 1  # of the largest tensor a sample (child partitions included)

    def run(self, feeds: dict[str, torch.Tensor], keep: bool = False) -> dict[str, torch.Tensor]:
        """The graph's outputs (every tensor with ``keep``), for a batch of samples."""
        env = dict(self.constants)
        for name, datatype in zip(self.inputs, self.sanitize_inputs):
            env[name] = _sanitized(feeds[name], datatype, name)
        n = len(feeds[self.inputs[0]])
        uses = _last_uses(self) if not keep else {}
        for index, step in enumerate(self.steps):
            produced = step.kernel([env[t] if t else None for t in step.inputs])
            for name, value, shape, datatype in zip(step.outputs, produced, step.shapes, step.sanitize):
                if tuple(value.shape) != _batched(shape, n):
                    raise RuntimeError(
                        f"batched execution of {step.node} ({step.op_type}) gave {name} the shape "
                        f"{tuple(value.shape)}, FINN's graph declares {shape} a sample"
                    )
                env[name] = _sanitized(value, datatype, name)
            for name in uses.get(index, ()):
                env.pop(name, None)  # free what no later node reads
        return env if keep else {name: env[name] for name in self.outputs}


def _last_uses(program: Program) -> dict[int, list[str]]:
    last: dict[str, int] = {}
    for index, step in enumerate(program.steps):
        for name in step.inputs:
            last[name] = index
    keep = set(program.outputs) | set(program.constants)
    found: dict[int, list[str]] = {}
    for name, index in last.items():
        if name not in keep:
            found.setdefault(index, []).append(name)
    return found


def _sanitize_enabled() -> bool:
    from qonnx.util.basic import get_sanitize_quant_tensors

    return get_sanitize_quant_tensors() != 0


def _sanitized(value: torch.Tensor, datatype: Any, name: str) -> torch.Tensor:
    """qonnx's ``sanitize_quant_values``: values an integer annotation holds that are not integers are
    rounded (half to even, numpy's round), and a rounding beyond qonnx's threshold fails as there."""
    if datatype is None or not value.is_floating_point():
        return value
    rounded = torch.round(value)
    if torch.equal(rounded, value):
        return value
    from qonnx.util.basic import get_execution_error_thresh

    error = float((value - rounded).abs().max())
    if error > get_execution_error_thresh():
        raise RuntimeError(
            f"Rounding error is too high to match set QONNX datatype ({datatype.name}) for input {name}"
        )
    return rounded


#: op types whose outputs are integers whenever their inputs are: their integer-annotated outputs
#: need no sanitizing (the check is a pass over every tensor: +40 % of the demo's time), as their
#: integer-annotated inputs were sanitized where they were produced (MultiThreshold: where its
#: out_scale and out_bias are integers, :func:`_integral`)
INTEGRAL = frozenset(
    {
        "MVAU", "VVAU", "Thresholding", "ConvolutionInputGenerator", "FMPadding", "GlobalAccPool",
        "DuplicateStreams", "StreamingConcat", "StreamingSplit", "Shuffle", "LabelSelect", "Requant",
        "XnorPopcountMatMul", "Im2Col", "MaxPoolNHWC", "QuantAvgPool2d", "MatMul", "Transpose", "Reshape",
        "Flatten", "Squeeze", "Unsqueeze", "Identity", "Concat", "Split", "MaxPool", "TopK",
        "ElementwiseAdd", "ElementwiseSub", "ElementwiseMul",
    }
)  # fmt: skip


def _integral(node: Node) -> bool:
    if node.onnx.op_type == "MultiThreshold":
        op = node.custom
        return all(float(op.get_nodeattr(a)).is_integer() for a in ("out_scale", "out_bias"))
    return node.onnx.op_type in INTEGRAL


def _annotation(model, name: str, sanitize: bool):
    datatype = model.get_tensor_datatype(name)
    return datatype if sanitize and datatype.is_integer() else None


def compile_graph(model) -> Program:
    """Build every node's kernel once (a ``StreamingDataflowPartition``'s child model likewise).

    Raises:
        Unsupported: a node has no row or a row refuses it (the message names the node and why).
    """
    from qonnx.core.modelwrapper import ModelWrapper

    model = model if isinstance(model, ModelWrapper) else ModelWrapper(model)
    sanitize = _sanitize_enabled()
    inputs = [i.name for i in model.graph.input if model.get_initializer(i.name) is None]
    for name in inputs:
        shape = model.get_tensor_shape(name)
        if not shape or shape[0] != 1:
            raise Unsupported(
                f"graph input {name} has shape {shape}; FINN's graphs take one sample (batch 1)"
            )
    constants = {}
    for tensor in model.graph.initializer:
        value = model.get_initializer(tensor.name)
        constants[tensor.name] = _sanitized(
            torch.from_numpy(np.array(value, copy=True)),
            _annotation(model, tensor.name, sanitize),
            tensor.name,
        )
    program = Program(
        inputs, [o.name for o in model.graph.output], constants,
        sanitize_inputs=[_annotation(model, name, sanitize) for name in inputs],
    )  # fmt: skip
    available = set(inputs) | set(constants) | {""}
    for onnx_node in model.graph.node:
        node = Node(onnx_node, model)
        if not set(onnx_node.input) <= available:
            raise node.refuse("an input computed later: the graph is not sorted topologically")
        available.update(onnx_node.output)
        if onnx_node.op_type in KERNELS:
            kernel = KERNELS[onnx_node.op_type](node)
        else:
            raise Unsupported(
                f"{node.name} ({onnx_node.op_type}): no row for {onnx_node.op_type} in execute.KERNELS"
            )
        integral = _integral(node)
        shapes = [node.out_shape(i) for i in range(len(onnx_node.output))]
        inner = kernel.program.sample_elements if isinstance(kernel, _Child) else 1
        program.sample_elements = max(program.sample_elements, inner, *(math.prod(s[1:]) for s in shapes))
        program.steps.append(
            _Step(
                node.name,
                onnx_node.op_type,
                list(onnx_node.input),
                list(onnx_node.output),
                shapes,
                kernel,
                [None if integral else _annotation(model, o, sanitize) for o in onnx_node.output],
            )
        )
    return program


@dataclass
class _Child:
    """The kernel of a ``StreamingDataflowPartition``: its child model's program, inputs and outputs
    matched by position (as FINN's ``execute_node`` renames them)."""

    program: Program

    def __call__(self, inputs: list[torch.Tensor]) -> list[torch.Tensor]:
        produced = self.program.run(dict(zip(self.program.inputs, inputs)))
        return [produced[name] for name in self.program.outputs]


def _partition(node: Node) -> Kernel:
    """``StreamingDataflowPartition``: its child model, compiled likewise."""
    from qonnx.core.modelwrapper import ModelWrapper

    path = node.custom.get_nodeattr("model")
    if not os.path.isfile(path):
        raise node.refuse(f"its child model {path} does not exist")
    return _Child(compile_graph(ModelWrapper(path)))


# -- the entry point ---------------------------------------------------------------------------------------


#: :attr:`Execution.engine` of each path
BATCHED = "batched torch executor (bit-exact to FINN's Python execution)"
FINN_PYTHON = "FINN's Python execution (qonnx execute_onnx, one sample at a time)"


@dataclass(frozen=True)
class Execution:
    """The outputs of a FINN graph on a batch, and what computed them."""

    outputs: list[np.ndarray]
    engine: str  # BATCHED or FINN_PYTHON
    reason: str = ""  # why FINN's Python execution ran instead, where it did


def run_program(program: Program, inputs: Sequence[np.ndarray], chunk: int = CHUNK, keep: bool = False):
    """``program`` on ``inputs`` (batch first, matched with the graph inputs by position), ``chunk``
    samples at a time (fewer for large tensors, see :data:`CHUNK_BYTES`); the outputs as numpy
    (every tensor with ``keep``: name -> array)."""
    chunk = max(1, min(chunk, CHUNK_BYTES // (4 * program.sample_elements)))
    tensors = [torch.from_numpy(np.ascontiguousarray(x)) for x in inputs]
    total = len(tensors[0])
    parts: dict[str, list[torch.Tensor]] = {}
    with torch.no_grad():
        for start in range(0, total, chunk):
            feeds = {name: x[start : start + chunk] for name, x in zip(program.inputs, tensors)}
            for name, value in program.run(feeds, keep=keep).items():
                parts.setdefault(name, []).append(value)
    if not keep:
        return [torch.cat(parts[name]).numpy() for name in program.outputs]
    return {
        name: torch.cat(values).numpy() if name not in program.constants else values[0].numpy()
        for name, values in parts.items()
    }


def execute(model, inputs: Sequence[np.ndarray], *, chunk: int = CHUNK) -> Execution:
    """The outputs of a FINN graph (a qonnx ``ModelWrapper`` of batch size 1, streamlined or
    hardware-layer, with its ``StreamingDataflowPartition``) on a batch of samples, bit-exact to
    ``execute_qonnx`` (FINN's Python execution, one sample at a time).

    A graph the table cannot compute exactly (an op type without a row, or a row that refuses a
    node: see the module docstring) runs in FINN's Python execution instead, with a logged warning
    naming the node and the reason, rather than raising: the callers verify graphs, and a slower
    verification is better than none. ``compile_graph`` raises instead, for callers that want that.
    """
    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    try:
        program = compile_graph(model)
        if any(np.asarray(x).dtype != np.float32 for x in inputs):
            raise Unsupported("inputs that are not float32 (FINN's graphs take float32 tensors)")
    except Unsupported as refusal:
        logger.warning("FINN graph executed in FINN's Python execution, one sample at a time: %s", refusal)
        return Execution(execute_qonnx(model, inputs), FINN_PYTHON, str(refusal))
    try:
        return Execution(run_program(program, inputs, chunk), BATCHED)
    except Unsupported as refusal:  # a data-dependent refusal (a sum beyond what the row computes exactly)
        logger.warning("FINN graph executed in FINN's Python execution, one sample at a time: %s", refusal)
        return Execution(execute_qonnx(model, inputs), FINN_PYTHON, str(refusal))
