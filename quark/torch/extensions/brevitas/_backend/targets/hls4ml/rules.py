"""What the hls4ml target refuses, as rows of :mod:`....rules`, each with the config field that fixes
it: per quantizer (what hls4ml 1.3.0's QONNX frontend maps exactly into fixed-point types), per
quantized layer, per graph-mode site and on the written QONNX graph.

hls4ml's frontend turns a Quant node with one power-of-two scale and zero point 0 into a fixed-point
type (``quant_opt.QuantToActivation`` / ``FuseQuantWithConstant``), rounding ``ROUND`` (half to even,
``AP_RND_CONV``) or ``FLOOR`` (``AP_TRN``); anything else becomes float ``ApplyAlpha`` scalings, which
are not exact, or is refused by hls4ml itself ("Rounding mode HALF_UP not supported").
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer

from quark.torch.extensions.brevitas._backend.export.onnx_graph import dynamic_shapes
from quark.torch.extensions.brevitas._backend.inventory import Module
from quark.torch.extensions.brevitas._backend.rules import (
    ACT,
    BIAS,
    DATA,
    FROM_A_SPEC,
    WEIGHT,
    Found,
    Rule,
    spec_rule,
)
from quark.torch.extensions.brevitas._backend.targets.finn.origins import module_of
from quark.torch.extensions.brevitas._backend.targets.finn.rules import input_float, not_graph_mode
from quark.torch.extensions.brevitas._backend.targets.hls4ml.precision import TYPED_OPS
from quark.torch.quantization.config.type import QSchemeType, RoundType, ScaleType
from quark.torch.quantization.tensor_quant import Format

#: widest integer quantizer of the target (the sums' types grow from it)
MAX_BITS = 16
#: roundings hls4ml's Quant mapping takes (QONNX ROUND -> AP_RND_CONV, FLOOR -> AP_TRN)
ROUNDINGS = (RoundType.half_even, RoundType.floor)

QUANTIZER_RULES: tuple[Rule, ...] = (
    FROM_A_SPEC,
    spec_rule(
        DATA | BIAS,
        "dtype",
        lambda s: s.format is Format.integer and 2 <= s.bit_width <= (32 if s.bias_scale_from_product else MAX_BITS),
        f"integers of 2..{MAX_BITS} bits (biases up to 32)",
        "hls4ml maps an integer quantizer to an ap_fixed type",
        shown=lambda s: s.dtype_name,
    ),
    spec_rule(DATA, "symmetric", lambda s: s.symmetric, "True (zero point 0)", "hls4ml maps Quant nodes of zero point 0 to fixed-point types"),
    spec_rule(
        DATA | BIAS,
        "scale_type",
        lambda s: s.tqt or s.scale_type is ScaleType.pof2 or s.bias_scale_from_product,
        "pof2 (power-of-two scales)",
        "a power-of-two scale is a fixed-point type's binary point; other scales become float multiplications",
    ),
    spec_rule(
        DATA | BIAS,
        "round_method",
        lambda s: s.round_method in ROUNDINGS,
        " or ".join(r.name for r in ROUNDINGS),
        "hls4ml rounds a Quant node ROUND (half to even) or FLOOR only",
        shown=lambda s: s.round_method.name,
    ),
    spec_rule(
        WEIGHT,
        "qscheme",
        lambda s: s.qscheme is QSchemeType.per_tensor,
        "per_tensor",
        "hls4ml folds a weight's Quant node into its type only with one scale per tensor",
        shown=lambda s: s.qscheme.name,
    ),
    spec_rule(ACT, "is_dynamic", lambda s: not s.is_dynamic, "False", "the types are fixed in the firmware"),
)


def _float_bias(subject: Module) -> Iterable[Found]:
    layer = subject.module
    if (
        isinstance(layer, QuantWeightBiasInputOutputLayer)
        and layer.weight_quant.is_quant_enabled
        and layer.bias is not None
        and not layer.bias_quant.is_quant_enabled
    ):
        yield "bias not quantized"


#: per quantized layer
LAYER_RULES: tuple[Rule, ...] = (
    Rule(
        "a quantized layer with a float bias",
        _float_bias,
        "bias=QuantizationSpec(dtype=Dtype.int16 or int32) (scale = input scale x weight scale), as presets.hls4ml()",
        "a float bias has no fixed-point grid: hls4ml gives it a configured type, which rounds it",
    ),
)

#: on the model's plans
SITE_RULES: tuple[Rule, ...] = (
    Rule(
        "a model quantized layer by layer",
        not_graph_mode,
        "Config.quant_mode=QuantizationMode.fx_graph_mode (main API) or Config.backend=Backend.fx",
        "hls4ml computes in fixed point only where every tensor between layers is quantized",
    ),
    Rule(
        "a float network input",
        input_float,
        "input_tensors of layer_type_quant_config['GraphInput'] (or global)",
        "the firmware takes the input quantizer's fixed-point type",
    ),
)


#: shape computations on static shapes, which qonnx's cleanup folds into constants before hls4ml reads the graph
FOLDED_OPS = frozenset({"Shape", "Gather", "Unsqueeze", "Squeeze", "Constant", "Cast", "Slice"})


def _unmapped_ops(model: Any) -> Iterable[Found]:
    """Nodes of op types hls4ml's frontend (with this package's exact types) does not take, by module."""
    found: dict[str, list[str]] = {}
    for node in model.graph.node:
        if node.op_type not in TYPED_OPS | FOLDED_OPS | {"Gemm"}:  # Gemm: MatMul once prepared
            found.setdefault(node.op_type, []).append(module_of(node.name) or node.name)
    for op_type, where in sorted(found.items()):
        shown = ", ".join(sorted(set(where))[:5]) + (f" and {len(set(where)) - 5} more" if len(set(where)) > 5 else "")
        yield f"{len(where)} {op_type} node(s) (modules {shown})"


#: on the written QONNX graph
GRAPH_RULES: tuple[Rule, ...] = (
    Rule("dynamic shapes", lambda model: dynamic_shapes(model), "static input/output shapes", "hls4ml's arrays have fixed sizes"),
    Rule(
        "layers hls4ml's frontend does not map exactly",
        _unmapped_ops,
        "convolutions, linear layers, ReLU, max and average pooling (windows within the map), additions, "
        "concatenations, flatten / reshape, batch norm merged (MergeBatchNorm, as presets.hls4ml())",
        "each other layer has no exact fixed-point mapping in hls4ml 1.3.0 (its activation tables round)",
    ),
)


def markdown() -> str:
    """The hls4ml rules before export as a markdown table (docs/hls4ml.md embeds it)."""
    from quark.torch.extensions.brevitas._backend.rules import markdown as rules_markdown

    return rules_markdown([*QUANTIZER_RULES, *LAYER_RULES, *SITE_RULES])
