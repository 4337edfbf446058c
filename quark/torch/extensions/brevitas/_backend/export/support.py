"""What each export format can express: a supported-layer table and rules on quantizer specs and
layers (:mod:`..rules` rows, scoped by format and exporter), checked before anything is exported.

Every row was measured with torch 2.13.0, brevitas 0.13.4, onnx 1.21.0, onnxruntime 1.25.1 and
qonnx 1.0.0 (tests/export/test_support.py runs one model per row). :func:`check` collects every
problem of a model and raises one :class:`UnsupportedExportError` naming the modules.
"""

from __future__ import annotations

from collections.abc import Iterable

import brevitas.nn as qnn
from brevitas.nn.equalized_layer import RotatedModule
from brevitas.nn.mixin.base import QuantLayerMixin
from torch import nn

from quark.torch.extensions.brevitas._backend.export.errors import UnsupportedExportError
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.inventory import Module, modules, quantizers
from quark.torch.extensions.brevitas._backend.rewrite.graph import QuantConcat
from quark.torch.extensions.brevitas._backend.rules import ACT, BIAS, WEIGHT, Found, Rule, spec_rule
from quark.torch.extensions.brevitas._backend.rules import markdown as rules_markdown
from quark.torch.extensions.brevitas._backend.rules import problems as collect
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ZeroPointType
from quark.torch.quantization.tensor_quant import Format

QCDQ, QONNX = ExportFormat.qcdq, ExportFormat.qonnx
BOTH = frozenset(ExportFormat)
ANY_EXPORTER = frozenset({False, True})  # dynamo?

#: Brevitas layer -> formats it exports to (with the TorchScript exporter).
LAYER_FORMATS: dict[type[nn.Module], frozenset[ExportFormat]] = {
    qnn.QuantLinear: BOTH,
    qnn.QuantConv1d: BOTH,
    qnn.QuantConv2d: BOTH,
    qnn.QuantConv3d: BOTH,
    qnn.QuantConvTranspose1d: BOTH,
    qnn.QuantConvTranspose2d: BOTH,
    qnn.QuantConvTranspose3d: BOTH,
    qnn.QuantMultiheadAttention: BOTH,
    qnn.QuantIdentity: BOTH,  # stock Brevitas layers, e.g. a FINN-style input quantizer
    qnn.QuantReLU: BOTH,
    qnn.QuantEltwiseAdd: BOTH,  # graph mode: residual additions
    QuantConcat: BOTH,  # graph mode: concatenations
    qnn.TruncAvgPool2d: frozenset({QONNX}),  # graph mode: average pooling (QCDQ: see LAYER_RULES)
    qnn.TruncAdaptiveAvgPool2d: frozenset({QONNX}),
}


def _scope(formats: frozenset[ExportFormat], dynamo: frozenset[bool] = ANY_EXPORTER) -> dict[str, frozenset]:
    return {"format": formats, "dynamo": dynamo}


#: what each format cannot express in a quantizer's spec; subject: a quantizer
SPEC_RULES: tuple[Rule, ...] = (
    spec_rule(
        ACT | WEIGHT,
        "format",
        lambda s: not s.format.block,
        "integer, minifloat or cast formats",
        "Brevitas 0.13.4 has no export handler for block formats (OCP MX, shared micro-exponents); QCDQ takes "
        "BFP16 (handlers.QCDQBlockActHandler), not QONNX",
        shown=lambda s: s.dtype_name,
        scope=_scope(frozenset({QONNX})),
    ),
    spec_rule(
        ACT | WEIGHT,
        "format",
        lambda s: not s.format.block or s.element is Dtype.bfp16,
        "integer formats, casts, bfp16",
        "Brevitas 0.13.4 has no export handler for block formats; BFP16 (one exponent per block) is written as "
        "int8 Q/DQ per block here, OCP MX's E8M0 scales and MX6 / MX9's micro-exponents are not",
        shown=lambda s: s.dtype_name,
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        ACT | WEIGHT,
        "format",
        lambda s: s.format not in (Format.minifloat, Format.bipolar),  # block formats: the row above
        "integer formats, bfloat16 / float16 casts, bfp16",
        "Brevitas 0.13.4's QCDQ minifloat export fails (FP8: NotImplementedError at opsets 17, 19 and 21; other "
        "minifloats: 'Only OCP/FNUZ Standard'); export QONNX (FloatQuant). Casts are written here as "
        "Cast -> Cast (handlers.QCDQCastActHandler). Bipolar: 'Binary quant not supported' (QuantizeLinear has "
        "no sign); export QONNX (BipolarQuant)",
        shown=lambda s: s.dtype_name,
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        ACT,
        "is_dynamic",
        lambda s: not s.is_dynamic or (s.element is Dtype.bfp16 and s.format.block),
        "False",
        "no export handler computes a scale at run time for this quantizer (QONNX has no dynamic Quant; "
        "Brevitas' QCDQ DynamicQuantizeLinear handler takes only its own unsigned min-max quantizer); BFP16 blocks "
        "are computed in the QCDQ graph (handlers.QCDQBlockActHandler)",
        scope=_scope(BOTH),
    ),
    spec_rule(
        ACT,
        "round_method",
        lambda s: s.round_method is RoundType.half_even,
        "half_even",
        "ONNX QuantizeLinear rounds half to even; export QONNX for other rounding",
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        WEIGHT,
        "bit_width",
        lambda s: s.format is not Format.integer or s.bit_width <= 8,
        "2..8",
        "weights are written as int8 / uint8 initializers with DequantizeLinear; export QONNX for wider",
        shown=lambda s: str(s.bit_width),
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        ACT,
        "bit_width",
        lambda s: s.format is not Format.integer or s.bit_width <= 16,
        "2..16",
        "activations are written on int8 / uint8 up to 8 bits, on int16 / uint16 QuantizeLinear / DequantizeLinear "
        "above (com.microsoft before opset 21, handlers.QCDQWideActHandler); export QONNX for wider",
        shown=lambda s: str(s.bit_width),
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        ACT | WEIGHT,
        "zero_point_type",
        lambda s: s.symmetric or s.zero_point_type is not ZeroPointType.float32,
        "int32",
        "ONNX zero points are integers; export QONNX for a float zero point",
        scope=_scope(frozenset({QCDQ})),
    ),
    spec_rule(
        BIAS,
        "bias",
        lambda s: False,
        "float biases (or dynamo=False)",
        "Brevitas' dynamo QCDQ exporter refuses quantized biases",
        problem=lambda s: f"int{s.bit_width} bias",
        scope=_scope(frozenset({QCDQ}), frozenset({True})),
    ),
    spec_rule(
        WEIGHT,
        "qscheme",
        lambda s: s.qscheme is not QSchemeType.per_group,
        "per_tensor, per_channel (or dynamo=False)",
        "per-group export reads the weights' storage, which torch.export hides",
        scope=_scope(BOTH, frozenset({True})),
    ),
    spec_rule(
        WEIGHT,
        "round_method",
        lambda s: s.round_method is RoundType.half_even,
        "half_even (or dynamo=False)",
        "under torch.export the float weight is re-quantized in the graph (Quant ROUND / QuantizeLinear), half to even",
        scope=_scope(BOTH, frozenset({True})),
    ),
)


def _layer_rule(layers: tuple[type[nn.Module], ...], what: str, allowed: str, reason: str, scope) -> Rule:
    def check(subject: Module) -> Iterable[Found]:
        if isinstance(subject.module, layers):
            yield what

    return Rule(f"{'/'.join(f'`{c.__name__}`' for c in layers)}: {what}", check, allowed, reason, scope)


def _exportable(subject: Module, fmt: ExportFormat) -> Iterable[Found]:
    if isinstance(subject.module, (QuantLayerMixin, qnn.QuantMultiheadAttention)):
        formats = LAYER_FORMATS.get(type(subject.module))
        if formats is None or fmt not in formats:
            exportable = sorted(c.__name__ for c, f in LAYER_FORMATS.items() if fmt in f)
            yield f"no {fmt.value} export", f"the exportable layers {exportable}"


#: what each format cannot express in a layer; subject: a module
LAYER_RULES: tuple[Rule, ...] = (
    *(
        Rule(
            f"a layer without a {fmt.value} export",
            lambda subject, fmt=fmt: _exportable(subject, fmt),
            "the layers of the table above",
            "Brevitas exports these layers only",
            _scope(frozenset({fmt})),
        )
        for fmt in ExportFormat
    ),
    _layer_rule(
        (qnn.TruncAvgPool2d, qnn.TruncAdaptiveAvgPool2d),
        "a truncating average pool",
        "a requantized average (graph mode builds one for every target but FINN)",
        "QuantizeLinear rounds half to even where the truncation floors: measured 1 LSB off",
        _scope(frozenset({QCDQ})),
    ),
    _layer_rule(
        (qnn.QuantMultiheadAttention,),
        "dynamo=True",
        "dynamo=False",
        "Brevitas' QuantMultiheadAttention reads its inputs' data pointers, which torch.export's fake tensors lack: "
        "measured failing in the zoo's encoder, QCDQ and QONNX",
        _scope(BOTH, frozenset({True})),
    ),
    _layer_rule(
        (RotatedModule,),
        "an online Hadamard rotation (HadamardRotation), a float transform",
        "the qcdq export, or no HadamardRotation",
        "FINN runs no float transform; measured: the QONNX export of a rotated 2-Linear model did not finish in 600 s",
        _scope(frozenset({QONNX})),
    ),
)


def problems(model: nn.Module, fmt: ExportFormat, dynamo: bool) -> list[str]:
    """One line per module or quantizer that ``fmt`` cannot express."""
    context = {"format": fmt, "dynamo": dynamo}
    found = collect(LAYER_RULES, modules(model), where=str, allows=fmt.value, context=context)
    return found + collect(SPEC_RULES, quantizers(model), where=str, allows=fmt.value, context=context)


def check(model: nn.Module, fmt: ExportFormat, dynamo: bool) -> None:
    """Raise :class:`UnsupportedExportError` listing everything ``fmt`` cannot express."""
    found = problems(model, fmt, dynamo)
    if found:
        exporter = "dynamo" if dynamo else "TorchScript"
        raise UnsupportedExportError(
            f"cannot export to {fmt.value} ({exporter} exporter):\n  " + "\n  ".join(found), found
        )


def _formats(rule: Rule) -> str:
    formats = rule.scope.get("format", BOTH)
    return "both" if formats == BOTH else ", ".join(sorted(f.value for f in formats))


def _exporters(rule: Rule) -> str:
    dynamo = rule.scope.get("dynamo", ANY_EXPORTER)
    return "any" if dynamo == ANY_EXPORTER else ("dynamo" if True in dynamo else "TorchScript")


def markdown() -> str:
    """The support table and the rules as markdown (docs/export.md embeds it; a test keeps it in sync)."""
    formats = list(ExportFormat)
    lines = ["| layer | " + " | ".join(f.value for f in formats) + " |", "|---|" + "---|" * len(formats)]
    for layer, allowed in LAYER_FORMATS.items():
        lines.append(f"| `{layer.__name__}` | " + " | ".join("yes" if f in allowed else "-" for f in formats) + " |")
    rules = rules_markdown([*SPEC_RULES, *LAYER_RULES], {"format": _formats, "exporter": _exporters})
    return "\n".join(lines) + "\n\n" + rules
