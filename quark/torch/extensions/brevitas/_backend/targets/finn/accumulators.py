"""The accumulators of accumulator-aware layers (``A2QSpec``) in FINN's dataflow: checked against
their promise, and what they save.

After FINN's ``MinimizeAccumulatorWidth`` (in :func:`.estimate.fold_and_estimate`), every MVAU /
VVAU that computes a layer promising a P-bit accumulator must have an ``accDataType`` within P
signed bits (a ``UINT<k>`` takes k + 1): :func:`check` finds each layer's hardware node, compares,
and raises one :class:`~.errors.FinnError` naming every layer that breaks its promise (module,
promised and FINN's width). FINN sizes the accumulator from the actual weights and the input's
type (qonnx ``calculate_matvec_accumulator_range``), then rounds the output stream of a last layer
without activation up to whole bytes: for such a node the range's width is checked (FINN's rule
before the rounding) and both are reported.

The saving is measured against the same node with the accumulator it needs without the bound: the
worst case of its weight type (the spec's bits, INT<b>), input type and dot-product length, FINN's
data-type bound (``minimize_accumulator_width(datatype_only=True)``'s rule; ``accumulator.worst_case_bits``).
Why the worst case and not the accumulator of a network trained without the bound: the export has
one model, and the worst case is what the layer needs for any weights its type holds (FINN sizes
it so for runtime-writeable weights); benchmarks/a2q_digits.py also reports FINN's widths on the
unconstrained trained network. The LUTs and BRAMs are FINN's analytical estimates of the node
(``lut_estimation``, ``bram_estimation``) with only ``accDataType`` changed.

Hardware nodes are found by their weights, not by node names (cleanup and FINN rename them): the
node whose weight matrix has the layer's dot-product length and output channels and, per output
channel, the same L1 norm of integer weights as the torch layer.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.accumulator import Promise
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError

#: FINN layers whose accumulator an accumulator-aware layer bounds
ACCUMULATING = ("MVAU", "VVAU")


@dataclass(frozen=True)
class AccumulatorCheck:
    """One accumulator-aware layer in FINN's dataflow."""

    module: str
    node: str
    method: str  # A2Q+ / A2Q
    promised_bits: int
    input_type: str  # FINN's input datatype of the node
    weight_type: str  # FINN's weight datatype (after MinimizeWeightBitWidth)
    dot_length: int
    acc_type: str  # FINN's accDataType after MinimizeAccumulatorWidth
    range_bits: int  # signed bits of FINN's accumulator range (its rule before a last layer's byte rounding)
    checked_bits: int  # the width compared with the promise (acc_type's, or range_bits where FINN rounded to bytes)
    unconstrained_bits: int  # signed bits of the same node without the bound (data-type worst case)
    luts: float
    luts_unconstrained: float
    bram: float
    bram_unconstrained: float

    @property
    def holds(self) -> bool:
        return self.checked_bits <= self.promised_bits

    @property
    def luts_saved(self) -> float:
        return self.luts_unconstrained - self.luts

    @property
    def rounded_to_bytes(self) -> bool:
        return self.checked_bits != signed_bits(self.acc_type)

    def describe(self) -> str:
        rounded = f" (FINN's range needs {self.range_bits} bits; it rounds the last layer's output to bytes)" if self.rounded_to_bytes else ""
        return (
            f"{self.module} ({self.node}, {self.method}): promised {self.promised_bits} bits, FINN {self.acc_type}{rounded}, "
            f"{'within' if self.holds else 'BEYOND'} the promise; unconstrained INT{self.unconstrained_bits}: "
            f"LUT {self.luts:,.0f} vs {self.luts_unconstrained:,.0f} ({self.luts_saved:+,.0f} saved), "
            f"BRAM_18K {self.bram:g} vs {self.bram_unconstrained:g}"
        )

    def to_json(self) -> dict[str, Any]:
        return {**asdict(self), "holds": self.holds, "luts_saved": self.luts_saved}


def signed_bits(datatype: str) -> int:
    """Signed bits that hold a FINN integer datatype: INT<k> -> k, UINT<k> -> k + 1."""
    from qonnx.core.datatype import DataType

    dt = DataType[datatype]
    return dt.bitwidth() + (0 if dt.signed() else 1)


def _range_bits(low: float, high: float) -> int:
    """FINN's ``minimize_accumulator_width`` rule as signed bits: UINT ceil(log2(max + 1)) when the
    range is non-negative (one more bit signed), else INT ceil(log2(max(-min, 1 + max))) + 1."""
    if low >= 0:
        return max(1, math.ceil(math.log2(high + 1))) + 1
    return math.ceil(math.log2(max(-low, 1 + high))) + 1


def _channels(op, weights: np.ndarray) -> np.ndarray:
    """The node's integer weights as (dot-product length, output channels)."""
    if op.onnx_node.op_type.startswith("VVAU"):
        k_h, k_w = op.get_nodeattr("Kernel")
        return weights.reshape(op.get_nodeattr("Channels"), k_h * k_w).T
    return weights


def _signature(matrix: np.ndarray) -> tuple[int, ...]:
    return tuple(int(v) for v in np.abs(matrix).sum(axis=0).round())


def check(model, promises: Mapping[str, Promise], fpgapart: str) -> tuple[AccumulatorCheck, ...]:
    """Every promising layer's hardware node in the folded ``model`` (after MinimizeAccumulatorWidth),
    measured (:func:`problems` names those beyond their promise); raises :class:`FinnError` naming
    every layer no single node computes.
    """
    from qonnx.custom_op.registry import getCustomOp
    from qonnx.util.basic import calculate_matvec_accumulator_range

    if not promises:
        return ()
    nodes = [n for n in model.graph.node if n.op_type.split("_")[0] in ACCUMULATING]
    by_signature: dict[tuple, list] = {}
    for node in nodes:
        op = getCustomOp(node)
        matrix = _channels(op, model.get_initializer(node.input[1]))
        by_signature.setdefault((matrix.shape[0], _signature(matrix)), []).append((node, op, matrix))
    found, missing = [], []
    for module, promise in promises.items():
        candidates = by_signature.get((promise.dot_length, promise.channel_norms), [])
        if len(candidates) != 1:
            missing.append(f"{module} ({len(candidates)} hardware layers with its weights)")
            continue
        node, op, matrix = candidates[0]
        idt = op.get_input_datatype(0)
        range_bits = _range_bits(*calculate_matvec_accumulator_range(matrix, idt))
        acc = op.get_nodeattr("accDataType")
        last = op.get_nodeattr("noActivation") and not model.find_direct_successors(node)
        checked = range_bits if last and signed_bits(acc) > range_bits else signed_bits(acc)
        unconstrained = _worst_case(promise, idt)
        wide = copy.deepcopy(node)
        wide_op = getCustomOp(wide)
        # a last layer's accumulator is its output stream: FINN rounds it up to whole bytes, constrained or not
        wide_bits = 8 * math.ceil(unconstrained / 8) if last else unconstrained
        wide_op.set_nodeattr("accDataType", f"INT{wide_bits}")
        found.append(
            AccumulatorCheck(
                module=module,
                node=node.name,
                method=promise.method,
                promised_bits=promise.accumulator_bits,
                input_type=idt.name,
                weight_type=op.get_nodeattr("weightDataType"),
                dot_length=promise.dot_length,
                acc_type=acc,
                range_bits=range_bits,
                checked_bits=checked,
                unconstrained_bits=unconstrained,
                luts=float(op.lut_estimation(fpgapart)),
                luts_unconstrained=float(wide_op.lut_estimation(fpgapart)),
                bram=float(op.bram_estimation(fpgapart)),
                bram_unconstrained=float(wide_op.bram_estimation(fpgapart)),
            )
        )
    if missing:
        raise FinnError(
            "accumulator check: no single hardware layer (MVAU / VVAU) computes these accumulator-aware layers "
            "(matched by dot-product length and per-channel L1 norm of their integer weights)",
            missing,
        )
    return tuple(found)


def problems(checks: Sequence[AccumulatorCheck]) -> list[str]:
    """One line per layer whose accumulator is beyond its promise: module, node, promised and FINN's width."""
    return [
        f"module {c.module!r} ({c.node}, {c.method}): promised {c.promised_bits} signed bits "
        f"(A2QSpec.accumulator_bit_width), FINN's accumulator {c.acc_type} takes {c.checked_bits}"
        for c in checks
        if not c.holds
    ]


def _worst_case(promise: Promise, idt) -> int:
    """Signed accumulator bits of the node without the bound: FINN's data-type bound for INT<b> weights
    (b the spec's) and the node's input type over the dot product."""
    from quark.torch.extensions.brevitas._backend.accumulator import worst_case_bits

    bits, signed = idt.bitwidth(), idt.signed()
    return worst_case_bits(promise.weight_bits, bits, signed, promise.dot_length)


def markdown(checks: Sequence[AccumulatorCheck]) -> str:
    """The checks as a markdown section of the estimate report."""
    if not checks:
        return ""
    lines = [
        "## Accumulators (A2QSpec)",
        "",
        "Every accumulator-aware layer's MVAU / VVAU after FINN's MinimizeAccumulatorWidth, against its promise, and",
        "FINN's estimate of the same node with the accumulator it needs without the bound (data-type worst case).",
        "",
        "| module | node | method | input x weight | dot length | promised | FINN accDataType | within | unconstrained | LUT | LUT unconstrained | LUT saved | BRAM_18K | BRAM_18K unconstrained |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in checks:
        acc = c.acc_type + (f" (range {c.range_bits} bits)" if c.rounded_to_bytes else "")
        lines.append(
            f"| {c.module} | {c.node} | {c.method} | {c.input_type} x {c.weight_type} | {c.dot_length} | INT{c.promised_bits} | "
            f"{acc} | {'yes' if c.holds else '**no**'} | INT{c.unconstrained_bits} | {c.luts:,.0f} | {c.luts_unconstrained:,.0f} | "
            f"{c.luts_saved:,.0f} | {c.bram:g} | {c.bram_unconstrained:g} |"
        )
    saved = sum(c.luts_saved for c in checks)
    total = sum(c.luts_unconstrained for c in checks)
    lines += ["", f"LUTs saved on these layers: {saved:,.0f} of {total:,.0f} ({100 * saved / total if total else 0:.1f} %)."]
    return "\n".join(lines) + "\n"
