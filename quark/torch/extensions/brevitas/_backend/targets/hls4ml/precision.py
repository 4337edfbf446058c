"""The fixed-point type of every tensor of a QONNX graph, so that hls4ml's C++ computes it exactly
and no wider than it must.

hls4ml infers an ``auto`` accumulator from the operands' bit widths: with an int32 bias every
accumulator of the digits CNN became ``ap_fixed<33, ...>`` (hls4ml 1.3.0, measured), where at most
15 bits hold every value; its default input type ``ap_fixed<16,6>`` truncates a float input; and
``auto`` as the model's default did not terminate on a three-layer CNN. So the types are computed
here from the quantizers, as interval arithmetic on integers: a tensor is ``integer x 2^-frac`` with
the integer in ``[lo, hi]``. A Quant node gives its grid (``scale = 2^-frac``) and range; a
convolution or matrix product the bound of its dot products over the actual integer weights, per
output channel, plus the actual bias; an addition aligns the fractional bits; ReLU, max pooling and
the shape operations keep the grid. Every type holds every value the graph can compute on quantized
inputs, so no sum wraps and nothing is rounded before a Quant node rounds it as the model does.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from quark.common.errors import RefusedError


@dataclass(frozen=True)
class Fixed:
    """Values ``integer x 2^-frac``, the integer within ``[lo, hi]``."""

    frac: int
    lo: int
    hi: int

    @property
    def signed(self) -> bool:
        return self.lo < 0

    @property
    def width(self) -> int:
        """Bits of the narrowest two's-complement (or unsigned) integer holding [lo, hi]."""
        if self.signed:
            return max(max(self.hi, 0).bit_length(), (-self.lo - 1).bit_length()) + 1
        return max(self.hi.bit_length(), 1)

    def hls(self) -> str:
        """hls4ml's spelling: ``fixed<W,I>`` / ``ufixed<W,I>`` (I integer bits, sign included). A tensor
        zero everywhere (all-zero weights: timm's zero-initialised last batch norm, merged) is spelled
        ``ufixed<1,1>``: on its grid ``ufixed<1,-45>``, which made ap_types assert and end the process."""
        if self.lo == self.hi == 0:
            return "ufixed<1,1>"
        return f"{'fixed' if self.signed else 'ufixed'}<{self.width},{self.width - self.frac}>"

    def aligned(self, frac: int) -> Fixed:
        """The same values on a grid of ``frac`` fractional bits (``frac >= self.frac``)."""
        shift = 2 ** (frac - self.frac)
        return Fixed(frac, self.lo * shift, self.hi * shift)

    def union(self, other: Fixed) -> Fixed:
        frac = max(self.frac, other.frac)
        a, b = self.aligned(frac), other.aligned(frac)
        return Fixed(frac, min(a.lo, b.lo), max(a.hi, b.hi))


class PrecisionError(RefusedError):
    """A tensor of the graph has no exact fixed-point type (a scale that is no power of two, say)."""


def _named(model, node) -> str:
    """The node with the torch module it came from (recorded before qonnx renamed the nodes)."""
    from quark.torch.extensions.brevitas._backend.targets.finn.origins import named

    return f"node {named(model, node)}"


def frac_of(scale: np.ndarray, where: str) -> int:
    """The fractional bits of a power-of-two ``scale`` (one value per tensor)."""
    values = np.unique(np.asarray(scale, dtype=np.float64))
    if values.size != 1:
        raise PrecisionError(f"{where}: scales {values.tolist()[:4]} differ within the tensor (one scale per tensor)")
    mantissa, exponent = np.frexp(values[0])
    if mantissa != 0.5:
        raise PrecisionError(f"{where}: scale {float(values[0])!r} is not a power of two")
    return 1 - int(exponent)


def quant_attributes(node) -> dict:
    """A Quant node's ``signed``, ``narrow`` and ``rounding_mode`` (qonnx's defaults where absent)."""
    attrs = {"signed": 1, "narrow": 0, "rounding_mode": "ROUND"}
    attrs |= {a.name: (a.s.decode() if a.type == a.STRING else a.i) for a in node.attribute if a.name in attrs}
    return attrs


def apply_quant(node, values: np.ndarray, scale, zero, bits) -> np.ndarray:
    """``values`` through the Quant ``node``, as qonnx executes it (its rounding mode)."""
    from qonnx.custom_op.general.quant import quant

    attrs = quant_attributes(node)
    return quant(np.asarray(values, np.float64), scale, zero, bits, attrs["signed"], attrs["narrow"], attrs["rounding_mode"])


def quant_range(bits: int, signed: bool, narrow: bool) -> tuple[int, int]:
    if signed:
        return -(2 ** (bits - 1)) + int(narrow), 2 ** (bits - 1) - 1
    return 0, 2**bits - 1 - int(narrow)


def _dot_bound(x: Fixed, rows: np.ndarray) -> tuple[int, int]:
    """The least and greatest dot product of a row of integer weights ``rows`` (output, summed) with
    inputs in [x.lo, x.hi] (zero included: padding), over all rows; Python integers (no overflow)."""
    lo_in, hi_in = min(x.lo, 0), max(x.hi, 0)
    positive = np.clip(rows, 0, None).astype(object).sum(axis=1)
    negative = np.clip(rows, None, 0).astype(object).sum(axis=1)
    return int(min(positive * lo_in + negative * hi_in)), int(max(positive * hi_in + negative * lo_in))


#: the domain qonnx's channels-last conversion gives the nodes it converts (hls4ml's pooling handlers need it)
CHANNELS_LAST = "qonnx.custom_op.channels_last"
#: ops that move or reshape values without computing (between the graph input and its quantizer, say)
LAYOUT_OPS = ("Transpose", "Reshape", "Flatten", "Identity")


def input_quant(model):
    """The Quant node of the network input (past the layout ops channels-last conversion puts before
    it), or None."""
    return next_quant(model, model.graph.input[0].name)


def next_quant(model, tensor: str):
    """The Quant node ``tensor`` goes to, past single layout ops (the transposes qonnx's channels-last
    conversion leaves around the nodes it does not convert), or None."""
    while True:
        consumers = model.find_consumers(tensor) or []
        quant = next((n for n in consumers if n.op_type == "Quant"), None)
        if quant is not None or len(consumers) != 1 or consumers[0].op_type not in LAYOUT_OPS:
            return quant
        tensor = consumers[0].output[0]


class Precisions:
    """The :class:`Fixed` type of every tensor of a (cleaned, channels-last) QONNX ``ModelWrapper``,
    the graph input taking its quantizer's grid (the firmware is fed the quantized input)."""

    def __init__(self, model) -> None:
        self.model = model
        self.types: dict[str, Fixed] = {}
        self.accumulators: dict[str, Fixed] = {}  # tensor -> its layer's accumulator, where it differs
        self.constants: dict[str, tuple[np.ndarray, int]] = {}  # quantized constant -> (integers, frac)
        quant = input_quant(model)
        if quant is not None:
            self.types[model.graph.input[0].name] = self._quant(quant)
        self._infer()

    def _infer(self) -> None:
        for node in self.model.graph.node:
            rule = _RULES.get(node.op_type)
            if rule is None:
                raise PrecisionError(f"{_named(self.model, node)}: no fixed-point type rule")
            result = rule(self, node)
            if result is not None:
                self.types[node.output[0]] = result

    def of(self, tensor: str, node) -> Fixed:
        if tensor in self.types:
            return self.types[tensor]
        raise PrecisionError(f"{_named(self.model, node)}: input {tensor!r} has no fixed-point type")

    def constant(self, tensor: str) -> tuple[np.ndarray, int] | None:
        return self.constants.get(tensor)

    # -- one method per op type ---------------------------------------------------------------

    def _quant(self, node) -> Fixed | None:
        init = self.model.get_initializer
        scale, zero, bits = (init(name) for name in node.input[1:4])
        where = f"Quant node {node.name}"
        if scale is None or zero is None or bits is None:
            raise PrecisionError(f"{where}: scale, zero point and bit width must be constants")
        if np.any(zero != 0):
            raise PrecisionError(f"{where}: zero point {np.unique(zero).tolist()[:4]} (hls4ml maps zero point 0)")
        attrs = quant_attributes(node)
        frac = frac_of(scale, where)
        lo, hi = quant_range(int(np.asarray(bits).item()), bool(attrs["signed"]), bool(attrs["narrow"]))
        value = init(node.input[0])
        if value is not None:  # a weight or bias: its integers, as qonnx's Quant computes them (its rounding mode)
            quantized = np.round(apply_quant(node, value, scale, zero, bits) * 2.0**frac)
            self.constants[node.output[0]] = (quantized.astype(np.int64), frac)
            return Fixed(frac, int(quantized.min()), int(quantized.max()))
        return Fixed(frac, lo, hi)

    def _weighted(self, node, rows: Callable[[np.ndarray], np.ndarray]) -> Fixed:
        """A sum of products with a quantized constant weight (``rows``: its (output, summed) matrix)
        and an optional bias (Conv's third input)."""
        x = self.of(node.input[0], node)
        weight = self.constant(node.input[1])
        if weight is None:
            raise PrecisionError(f"{_named(self.model, node)}: its weight is not quantized (an excluded layer?)")
        integers, frac = weight
        lo, hi = _dot_bound(x, rows(integers))
        result = Fixed(x.frac + frac, lo, hi)
        if len(node.input) > 2 and node.input[2]:
            result = _plus_constant(self.model, result, self.constant(node.input[2]), node)
        return result

    def _conv(self, node) -> Fixed:
        return self._weighted(node, lambda w: w.reshape(w.shape[0], -1))  # (out, in / group, kh, kw)

    def _matmul(self, node) -> Fixed:
        return self._weighted(node, lambda w: w.T)  # (in, out)

    def _add(self, node) -> Fixed:
        a = self.of(node.input[0], node)
        constant = self.constant(node.input[1])
        if constant is not None:
            return _plus_constant(self.model, a, constant, node)
        b = self.of(node.input[1], node)
        frac = max(a.frac, b.frac)
        a, b = a.aligned(frac), b.aligned(frac)
        return Fixed(frac, a.lo + b.lo, a.hi + b.hi)

    def _relu(self, node) -> Fixed:
        x = self.of(node.input[0], node)
        return Fixed(x.frac, max(x.lo, 0), max(x.hi, 0))

    def _same(self, node) -> Fixed:
        return self.of(node.input[0], node)

    def _global_average(self, node) -> Fixed:
        """A global pool :func:`prepare` could not make channels-last (its output is not flattened):
        hls4ml would read its data channels-last but its shape channels-first."""
        count = int(np.prod(self.model.get_tensor_shape(node.input[0])[2:]))
        if count > 1:
            raise PrecisionError(
                f"{_named(self.model, node)}: a global average pool whose output is not flattened (x.flatten(1), "
                "nn.Flatten) stays channels-first, and hls4ml 1.3.0 averages such a pool across channels"
            )
        return self.of(node.input[0], node)

    def _windowed_average(self, node) -> Fixed:
        """An average pool made channels-last (:mod:`.layout`), its windows within the map: each the
        average of the same number of values."""
        attributes = {a.name: list(a.ints) for a in node.attribute}
        if any(attributes.get("pads", ())):
            raise PrecisionError(
                f"{_named(self.model, node)}: an average pool with padding: hls4ml divides a border window by "
                "its size or by the values inside the map, and no type makes both exact (pool without padding)"
            )
        if node.domain != CHANNELS_LAST:
            raise PrecisionError(
                f"{_named(self.model, node)}: an average pool left channels-first (its windows leave the map "
                "with ceil_mode, or it is flattened over a map larger than 1x1, which hls4ml 1.3.0 reads "
                "channels-last): pool without ceil_mode, and follow it with a layer or a global pool"
            )
        return self._average(node, int(np.prod(attributes["kernel_shape"])))

    def _zero_padded(self, node) -> Fixed:
        """An explicit zero padding (:class:`.layout.ZeroPaddedMaxPools`): the input's values and zero."""
        x = self.of(node.input[0], node)
        return Fixed(x.frac, min(x.lo, 0), max(x.hi, 0))

    def _average(self, node, count: int) -> Fixed:
        """hls4ml sums in the accumulator type and divides there (``y /= N``: truncated). On grid
        2^-g, g = max(f, k + 1) (f: the sum's grid, k: the next quantizer's), both the quotient and the
        rounding boundaries of 2^-k are multiples of 1 / (N 2^g), so a quotient that is no boundary lies
        at least that far from one: with g + ceil(log2 N) fractional bits the truncated quotient rounds
        as the exact one. So the pool must be requantized, and its types carry those bits."""
        x = self.of(node.input[0], node)
        if count == 1:
            return x
        quant = next_quant(self.model, node.output[0])
        if quant is None:
            raise PrecisionError(f"{_named(self.model, node)}: an average of {count} values not quantized again")
        k = frac_of(self.model.get_initializer(quant.input[1]), f"Quant node {quant.name}")
        frac = average_frac(x.frac, k, count)
        shift = 2 ** (frac - x.frac)
        self.accumulators[node.output[0]] = Fixed(frac, min(x.lo, 0) * count * shift, max(x.hi, 0) * count * shift)
        return Fixed(frac, x.lo * shift, x.hi * shift)

    def _concat(self, node) -> Fixed:
        types = [self.of(name, node) for name in node.input]
        result = types[0]
        for other in types[1:]:
            result = result.union(other)
        return result


def average_frac(f: int, k: int, count: int) -> int:
    """Fractional bits that make a truncated quotient (a sum on grid 2^-f, by ``count``) round to grid
    2^-k as the exact quotient does (see ``Precisions._average``)."""
    return max(f, k + 1) + (count - 1).bit_length()


def _plus_constant(model, x: Fixed, constant: tuple[np.ndarray, int] | None, node) -> Fixed:
    if constant is None:
        raise PrecisionError(f"{_named(model, node)}: its bias is not quantized")
    integers, frac = constant
    if frac > x.frac:
        raise PrecisionError(
            f"{_named(model, node)}: a bias on a finer grid (2^-{frac}) than the sum (2^-{x.frac}): quantize the "
            "bias on the product of the input and weight scales (a bias spec without observer, as presets.hls4ml())"
        )
    shift = 2 ** (x.frac - frac)
    return Fixed(x.frac, x.lo + int(integers.min()) * shift, x.hi + int(integers.max()) * shift)


#: op type -> how its output's type follows from its inputs'
_RULES: dict[str, Callable[[Precisions, object], Fixed | None]] = {
    "Quant": Precisions._quant,
    "Conv": Precisions._conv,
    "MatMul": Precisions._matmul,
    "Add": Precisions._add,
    "Relu": Precisions._relu,
    "MaxPool": Precisions._same,
    **dict.fromkeys(LAYOUT_OPS, Precisions._same),
    "Dropout": Precisions._same,
    "Concat": Precisions._concat,
    "GlobalAveragePool": Precisions._global_average,
    "AveragePool": Precisions._windowed_average,
    "Pad": Precisions._zero_padded,
}

#: op types with a type rule that the export may hold (the graph rule of the hls4ml target refuses the
#: others; the zero paddings are :mod:`.layout`'s own)
TYPED_OPS = frozenset(_RULES) - {"Pad"}


def layer_precisions(model, precisions: Precisions, fused: dict[str, Fixed]) -> dict[str, dict[str, str]]:
    """The exact ``accum`` and ``result`` type of every non-Quant node, by node name (hls4ml's
    ``LayerName`` entries); a product followed by its bias's addition takes the type of the sum
    (``fused``: :func:`fused_products`). The graph input takes its quantizer's type."""
    entries: dict[str, dict[str, str]] = {}
    graph_input = model.graph.input[0].name
    if graph_input in precisions.types:
        entries[graph_input] = {"result": precisions.types[graph_input].hls()}
    for node in model.graph.node:
        if node.op_type == "Quant" or node.output[0] not in precisions.types:
            continue
        fixed = fused.get(node.name, precisions.types[node.output[0]])
        accumulator = precisions.accumulators.get(node.output[0], fixed)
        entries[node.name] = {"accum": accumulator.hls(), "result": fixed.hls()}
    return entries


def fused_products(model, precisions: Precisions) -> dict[str, Fixed]:
    """Products (MatMul) whose only consumer adds a quantized constant (the bias), by name -> the type
    of both: hls4ml fuses each pair into one Dense layer, but only while the product's result type is
    unset, so that type is set after the conversion."""
    fused = {}
    for node in model.graph.node:
        consumers = model.find_consumers(node.output[0]) or []
        if (
            node.op_type in ("MatMul", "Gemm")
            and len(consumers) == 1
            and consumers[0].op_type == "Add"
            and precisions.constant(consumers[0].input[1]) is not None
        ):
            fused[node.name] = precisions.types[node.output[0]].union(precisions.types[consumers[0].output[0]])
    return fused
