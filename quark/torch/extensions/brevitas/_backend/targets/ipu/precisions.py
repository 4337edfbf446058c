"""The NPU's precisions as plugins: one :class:`Precision` row each, read by the IPU target.

A precision claims the activation quantizers of its form (``claims``) and brings the rules its
quantizers (per role) and its written graphs must meet. :func:`target_for` resolves the precisions
a model's activation quantizers are in and returns the IPU target with their rules: a quantizer
passes when one of those precisions accepts it; the graph must meet the rules of each. A model
whose activations no precision claims gets the list of precisions in its error.

=========  ==============================================  ==========================================
precision  activations                                     weights / bias
=========  ==============================================  ==========================================
XINT8      int8, symmetric, power-of-two scales            int8 symmetric pof2 per tensor; int32 bias
A8W8       int8 / uint8, float scales                      int8 symmetric per tensor or per channel;
                                                           int32 bias = s_in x s_w
A16W8      int16 / uint16, float scales (com.microsoft     as A8W8
           QuantizeLinear / DequantizeLinear at opset 17)
BF16       bfloat16 casts                                  bfloat16 casts; float bias
BFP16      BFP16 blocks of 8 (int8 Q/DQ per block)         BFP16 blocks; float bias
=========  ==============================================  ==========================================
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from torch import nn

from quark.torch.extensions.brevitas._backend.export.onnx_graph import Graph
from quark.torch.extensions.brevitas._backend.inventory import quantizers
from quark.torch.extensions.brevitas._backend.rules import (
    ACT,
    BIAS,
    DATA,
    WEIGHT,
    Found,
    Quantizer,
    Rule,
    spec_rule,
)
from quark.torch.extensions.brevitas._backend.targets.ipu import rules as ipu
from quark.torch.extensions.brevitas._backend.targets.target import Target
from quark.torch.extensions.brevitas.config import Backend
from quark.torch.quantization.config.type import Dtype, QSchemeType, QuantizationMode, RoundType, ScaleType
from quark.torch.quantization.plan import CONFIG_ATTRIBUTE, config_view
from quark.torch.quantization.tensor_quant import Format


@dataclass(frozen=True)
class Precision:
    """One of the NPU's precisions: the activation specs it claims, its rules on quantizers (every
    role) and on the written graph."""

    name: str
    describes: str
    claims: Callable[[Any], bool]
    quantizer_rules: tuple[Rule, ...]
    graph_rules: tuple[Rule, ...]
    layer_rules: tuple[Rule, ...] = ipu.LAYER_RULES
    activation_types: frozenset[type] = frozenset()  # integer types of its activation Q/DQ (none: not integer)


def _pof2(s) -> bool:
    return s.tqt or s.scale_type is ScaleType.pof2


def _integer(s, bits: int) -> bool:
    return s.format is Format.integer and s.bit_width == bits


_STATIC = spec_rule(ACT, "is_dynamic", lambda s: not s.is_dynamic, "False", "NPU scales are fixed at compile time")
_HALF_EVEN = spec_rule(
    DATA, "round_method", lambda s: s.round_method is RoundType.half_even, "half_even", "ONNX QuantizeLinear rounds half to even"
)
_W8 = spec_rule(
    WEIGHT,
    "dtype",
    lambda s: _integer(s, 8) and s.signed and s.symmetric,
    "int8, symmetric",
    "the NPU multiplies int8 weights",
    shown=lambda s: s.dtype_name,
)
_W8_GRANULARITY = spec_rule(
    WEIGHT,
    "qscheme",
    lambda s: s.qscheme in (QSchemeType.per_tensor, QSchemeType.per_channel),
    "per_tensor, per_channel",
    "the Ryzen AI flow takes one weight scale per tensor or per output channel",
)
_BIAS32 = ipu.BIAS32_RULES


def _activations(bits: int, signs: str, reason: str) -> Rule:
    return spec_rule(
        ACT,
        "dtype",
        lambda s: _integer(s, bits),
        signs,
        reason,
        shown=lambda s: s.dtype_name,
    )


def _cast_rule(element: Dtype) -> Rule:
    return spec_rule(
        DATA,
        "dtype",
        lambda s: s.format is Format.cast and s.element is element,
        element.name,
        f"the {element.name} precision casts every activation and weight",
        shown=lambda s: s.dtype_name,
    )


_NO_BIAS_QUANT = spec_rule(
    BIAS, "dtype", lambda s: False, "None (float bias)", "the bias is added in the float format", shown=lambda s: s.dtype_name
)


def _qdq_types(types: frozenset[type]) -> Callable[[Any], Iterable[Found]]:
    """QuantizeLinear nodes whose integer type the precisions do not use (activations; weights and
    biases are checked by ``ipu.COMPUTE``)."""

    def check(model: Any) -> Iterable[Found]:
        graph = Graph(model)
        for node in model.graph.node:
            if node.op_type != "QuantizeLinear" or len(node.input) < 3:
                continue
            zero_point = graph.constants.get(node.input[2])
            if zero_point is not None and zero_point.dtype.type not in types:
                yield f"QuantizeLinear {node.name or node.output[0]!r}: {zero_point.dtype}"

    return check


def _operands(kind: str, accepts: Callable[[Graph, Any, str], bool]) -> Callable[[Any], Iterable[Found]]:
    def check(model: Any) -> Iterable[Found]:
        graph = Graph(model)
        for node in model.graph.node:
            if node.op_type not in ("Conv", "Gemm", "MatMul"):
                continue
            for index, name in enumerate(node.input[:2]):
                if name and not accepts(graph, node, name):
                    yield f"{node.op_type} {node.name or node.output[0]!r}: input {index} {name!r} is not {kind}"

    return check


def _through_moves(graph: Graph, name: str) -> Any:
    node = graph.producer.get(name)
    while node is not None and node.op_type in ipu.MOVES:
        node = graph.producer.get(node.input[0])
    return node


def _bf16_value(graph: Graph, node: Any, name: str) -> bool:
    source = _through_moves(graph, name)
    if source is None:  # a constant: the cast of a weight folds into its initializer
        value = graph.constants.get(name)
        if value is None:
            return False
        bits = np.asarray(value, np.float32).view(np.uint32)
        return bool(np.all(bits & 0xFFFF == 0))  # exactly representable in bfloat16
    cast = source.op_type == "Cast" and graph.producer.get(source.input[0])
    return bool(cast) and cast.op_type == "Cast" and any(a.name == "to" and a.i == 16 for a in cast.attribute)


def _block_value(graph: Graph, node: Any, name: str) -> bool:
    source = _through_moves(graph, name)
    return source is not None and source.op_type == "DequantizeLinear"


def _typed(types: frozenset[type]) -> Rule:
    names = ", ".join(sorted(np.dtype(t).name for t in types))
    return Rule(
        f"activation Q/DQ types other than {names}",
        _qdq_types(types),
        names,
        "the integers of the precisions' activations",
    )


_COMPUTE = ipu.COMPUTE

XINT8 = Precision(
    "XINT8",
    "int8 symmetric, power-of-two scales",
    lambda s: _integer(s, 8) and _pof2(s),
    ipu.QUANTIZER_RULES,
    ipu.GRAPH_RULES[len(ipu.COMMON_GRAPH_RULES) :],
)
A8W8 = Precision(
    "A8W8",
    "int8 / uint8, float scales",
    lambda s: _integer(s, 8) and not _pof2(s),
    (ipu.QUANTIZER_RULES[0], _activations(8, "int8, uint8", "A8W8 activations are 8-bit"), _STATIC, _HALF_EVEN, _W8, _W8_GRANULARITY, *_BIAS32),
    (_COMPUTE, ipu.INTEGER_ONLY),
    activation_types=frozenset({np.int8, np.uint8}),
)
A16W8 = Precision(
    "A16W8",
    "int16 / uint16, float scales",
    lambda s: _integer(s, 16),
    (ipu.QUANTIZER_RULES[0], _activations(16, "int16, uint16", "A16W8 activations are 16-bit"), _STATIC, _HALF_EVEN, _W8, _W8_GRANULARITY, *_BIAS32),
    (_COMPUTE, ipu.INTEGER_ONLY),
    activation_types=frozenset({np.int16}),  # uint16 is written shifted onto int16 (export/handlers.py)
)
BF16 = Precision(
    "BF16",
    "bfloat16 casts",
    lambda s: s.format is Format.cast and s.element is Dtype.bfloat16,
    (ipu.QUANTIZER_RULES[0], _cast_rule(Dtype.bfloat16), _NO_BIAS_QUANT),
    (
        Rule(
            "Conv / Gemm / MatMul operands that are not bfloat16 values",
            _operands("a bfloat16 value (Cast to bfloat16 and back, or a constant exact in bfloat16)", _bf16_value),
            "Conv / Gemm / MatMul operands cast to bfloat16",
            "the NPU computes BF16 layers on bfloat16 operands",
        ),
    ),
    ipu.FLOAT_BIAS_LAYER_RULES,
)
BFP16 = Precision(
    "BFP16",
    "BFP16 blocks",
    lambda s: s.format is Format.bdr and s.element is Dtype.bfp16,
    (
        ipu.QUANTIZER_RULES[0],
        spec_rule(
            DATA,
            "dtype",
            lambda s: s.format is Format.bdr and s.element is Dtype.bfp16,
            "bfp16",
            "the BFP16 precision blocks every activation and weight",
            shown=lambda s: s.dtype_name,
        ),
        _NO_BIAS_QUANT,
    ),
    (
        Rule(
            "Conv / Gemm / MatMul operands that are not dequantized blocks",
            _operands("dequantized from int8 blocks", _block_value),
            "Conv / Gemm / MatMul operands from DequantizeLinear of BFP16 blocks",
            "the NPU computes BFP16 layers on block operands",
        ),
    ),
    ipu.FLOAT_BIAS_LAYER_RULES,
)

#: the NPU's precisions, in the order a model's activation quantizers are matched against them
PRECISIONS: tuple[Precision, ...] = (XINT8, A8W8, A16W8, BF16, BFP16)


def precisions_of(found: Iterable[Quantizer]) -> tuple[list[Precision], list[str]]:
    """(the precisions the activation quantizers are in, the activation quantizers none claims)."""
    chosen: list[Precision] = []
    unclaimed = []
    for q in found:
        if q.role != "activation" or q.spec is None:
            continue
        precision = next((p for p in PRECISIONS if p.claims(q.spec)), None)
        if precision is None:
            unclaimed.append(f"{q}: dtype={q.spec.dtype_name}")
        elif precision not in chosen:
            chosen.append(precision)
    return chosen, unclaimed


def _accepted_by_one(chosen: list[Precision]) -> Rule:
    def check(q: Quantizer) -> Iterable[Found]:
        per_precision = [
            [line for rule in p.quantizer_rules for line in rule.check(q)] for p in chosen
        ]
        if all(per_precision):  # no precision accepts it: the nearest one's problems
            yield from min(per_precision, key=len)

    names = " or ".join(p.name for p in chosen)
    return Rule(f"a quantizer none of {names} accepts", check, names, "the precisions of the model's activations")


def _unclaimed(lines: list[str]) -> Rule:
    listing = "; ".join(f"{p.name} ({p.describes})" for p in PRECISIONS)
    return Rule(
        "activations in no precision of the NPU",
        lambda model: iter(lines),
        f"activations in one of: {listing}",
        "the NPU runs these precisions only",
    )


def layerwise(model: nn.Module) -> bool:
    """Whether ``model`` was quantized layerwise (its recorded config's mode): only its layers' inputs,
    weights and biases are quantized, not the tensors between them."""
    config = getattr(model, CONFIG_ATTRIBUTE, None)
    return config is not None and config_view(config).mode in (QuantizationMode.eager_mode, Backend.layerwise)


def target_for(model: nn.Module, base: Target) -> Target:
    """The IPU target for ``model`` (``base``: XINT8's): the rules of the precisions its activation
    quantizers are in. A layerwise model's integer graphs are checked layer by layer
    (``ipu.LAYER_COMPUTE``) and the float operations between its layers, which Ryzen AI runs on the CPU,
    are named in a warning (``ipu.ON_THE_CPU``); a graph-mode model's must be integer-only
    (``ipu.INTEGER_ONLY``, ``ipu.COMPUTE``)."""
    chosen, unclaimed = precisions_of(quantizers(model))
    if not chosen and not unclaimed:
        return base
    quantizer_rules: tuple[Rule, ...]
    if len(chosen) == 1:
        quantizer_rules = chosen[0].quantizer_rules
    elif chosen:
        quantizer_rules = (_accepted_by_one(chosen),)
    else:
        quantizer_rules = ()
    graph_rules = list(ipu.COMMON_GRAPH_RULES)
    types = frozenset().union(*(p.activation_types for p in chosen))
    if types:
        graph_rules.append(_typed(types))
    layer_rules: list[Rule] = []
    for precision in chosen:
        graph_rules += [r for r in precision.graph_rules if r not in graph_rules]
        layer_rules += [r for r in precision.layer_rules if r not in layer_rules]
    if layerwise(model):
        layer_by_layer = ((ipu.COMPUTE, ipu.LAYER_COMPUTE), (ipu.INTEGER_ONLY, ipu.ON_THE_CPU))
        graph_rules = [next((new for old, new in layer_by_layer if rule is old), rule) for rule in graph_rules]
    site_rules = (_unclaimed(unclaimed),) if unclaimed else ()
    name = "IPU" if chosen in ([], [XINT8]) else f"IPU ({'+'.join(p.name for p in chosen)})"
    return replace(
        base,
        name=name,
        quantizer_rules=quantizer_rules,
        layer_rules=tuple(layer_rules) if chosen else ipu.LAYER_RULES,
        site_rules=site_rules,
        graph_rules=tuple(graph_rules),
        variant=None,
    )
