"""What each export format can express: a supported-layer table and rules on quantizer specs,
checked before anything is exported.

Every row was measured with torch 2.13.0, brevitas 0.13.4, onnx 1.21.0, onnxruntime 1.25.1 and
qonnx 1.0.0 (tests/export/test_support.py runs one model per row). :func:`check` collects every
problem of a model and raises one :class:`UnsupportedExportError` naming the modules.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import brevitas.nn as qnn
from brevitas.nn.equalized_layer import RotatedModule
from brevitas.nn.mixin.base import QuantLayerMixin
from brevitas.proxy.parameter_quant import BiasQuantProxyFromInjectorBase, WeightQuantProxyFromInjectorBase
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from torch import nn

from quark.torch.extensions.brevitas._backend.export.errors import UnsupportedExportError
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.rewrite.graph import QuantConcat
from quark.torch.quantization.config.type import QSchemeType, RoundType, ZeroPointType
from quark.torch.quantization.tensor_quant import TensorQuant

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

#: quantizer proxy class -> the role it quantizes (first match wins).
PROXY_ROLES: tuple[tuple[type[nn.Module], str], ...] = (
    (BiasQuantProxyFromInjectorBase, "bias"),
    (WeightQuantProxyFromInjectorBase, "weight"),
    (ActQuantProxyFromInjectorBase, "activation"),
)


@dataclass(frozen=True)
class SpecRule:
    """A spec value a format cannot express: ``bad(spec)`` is True for an offending spec."""

    formats: frozenset[ExportFormat]
    dynamo: frozenset[bool]
    roles: frozenset[str]
    field: str
    bad: Callable[[TensorQuant], bool]
    allowed: str
    reason: str


def dtype_name(spec: TensorQuant) -> str:
    """The element type of a spec: int8, uint4, fp8 (e4m3 ocp), mx (fp8_e4m3), ..."""
    if spec.format == "int":
        return f"{'int' if spec.signed else 'uint'}{spec.bit_width}"
    if spec.format == "float":
        return f"fp{spec.bit_width} (e{spec.exponent_bit_width}m{spec.mantissa_bit_width} {spec.variant or ''})".replace(
            " )", ")"
        )
    return f"{spec.format} ({spec.variant})" if spec.variant else spec.format


def _value(spec: TensorQuant, field: str) -> str:
    if field == "format":
        return dtype_name(spec)
    value = getattr(spec, field)
    return value.name if hasattr(value, "name") else repr(value)


ACT, WEIGHT, BIAS = frozenset({"activation"}), frozenset({"weight"}), frozenset({"bias"})

SPEC_RULES: tuple[SpecRule, ...] = (
    SpecRule(
        BOTH,
        ANY_EXPORTER,
        ACT | WEIGHT,
        "format",
        lambda s: s.format in ("mx", "bdr"),
        "integer, minifloat or cast formats",
        "Brevitas 0.13.4 has no export handler for block formats (OCP MX, shared micro-exponents)",
    ),
    SpecRule(
        frozenset({QCDQ}),
        ANY_EXPORTER,
        ACT | WEIGHT,
        "format",
        lambda s: s.format in ("float", "cast"),
        "integer formats",
        "Brevitas 0.13.4's QCDQ minifloat export fails (FP8: NotImplementedError at opsets 17, 19 and 21; other "
        "minifloats and casts: 'Only OCP/FNUZ Standard'); export QONNX (FloatQuant)",
    ),
    SpecRule(
        BOTH,
        ANY_EXPORTER,
        ACT,
        "is_dynamic",
        lambda s: s.is_dynamic,
        "False",
        "no export handler computes a scale at run time for this quantizer (QONNX has no dynamic Quant; "
        "Brevitas' QCDQ DynamicQuantizeLinear handler takes only its own unsigned min-max quantizer)",
    ),
    SpecRule(
        frozenset({QCDQ}),
        ANY_EXPORTER,
        ACT,
        "round_method",
        lambda s: s.round_method is not RoundType.half_even,
        "half_even",
        "ONNX QuantizeLinear rounds half to even; export QONNX for other rounding",
    ),
    SpecRule(
        frozenset({QCDQ}),
        ANY_EXPORTER,
        ACT | WEIGHT,
        "bit_width",
        lambda s: s.format == "int" and s.bit_width > 8,
        "2..8",
        "QuantizeLinear / DequantizeLinear hold int8 / uint8 at the opsets written here; export QONNX for wider",
    ),
    SpecRule(
        frozenset({QCDQ}),
        ANY_EXPORTER,
        ACT | WEIGHT,
        "zero_point_type",
        lambda s: not s.symmetric and s.zero_point_type is ZeroPointType.float32,
        "int32",
        "ONNX zero points are integers; export QONNX for a float zero point",
    ),
    SpecRule(
        frozenset({QCDQ}),
        frozenset({True}),
        BIAS,
        "bias",
        lambda s: True,
        "float biases (or dynamo=False)",
        "Brevitas' dynamo QCDQ exporter refuses quantized biases",
    ),
    SpecRule(
        BOTH,
        frozenset({True}),
        WEIGHT,
        "qscheme",
        lambda s: s.qscheme is QSchemeType.per_group,
        "per_tensor, per_channel (or dynamo=False)",
        "per-group export reads the weights' storage, which torch.export hides",
    ),
    SpecRule(
        BOTH,
        frozenset({True}),
        WEIGHT,
        "round_method",
        lambda s: s.round_method is not RoundType.half_even,
        "half_even (or dynamo=False)",
        "under torch.export the float weight is re-quantized in the graph (Quant ROUND / QuantizeLinear), half to even",
    ),
)


@dataclass(frozen=True)
class LayerRule:
    """A layer configuration a format cannot express."""

    formats: frozenset[ExportFormat]
    dynamo: frozenset[bool]
    layers: tuple[type[nn.Module], ...]
    bad: Callable[[nn.Module], bool]
    problem: str


def spec_of(proxy: nn.Module) -> TensorQuant | None:
    """The normalised spec a proxy was built from (``quark_spec`` in its injector), or None."""
    injector = getattr(proxy, "quant_injector", None)
    return injector.quark_spec if injector is not None and "quark_spec" in injector else None


LAYER_RULES: tuple[LayerRule, ...] = (
    LayerRule(
        frozenset({QCDQ}),
        ANY_EXPORTER,
        (qnn.TruncAvgPool2d, qnn.TruncAdaptiveAvgPool2d),
        lambda layer: True,
        "a truncating average pool; allowed: a requantized average (graph mode: output_tensors of the "
        "AvgPool2d / AdaptiveAvgPool2d site) (QuantizeLinear rounds half to even where the truncation floors: "
        "measured 1 LSB off)",
    ),
    LayerRule(
        BOTH,
        frozenset({True}),
        (qnn.QuantMultiheadAttention,),
        lambda layer: True,
        "dynamo=True; allowed: dynamo=False (Brevitas' QuantMultiheadAttention reads its inputs' data pointers, "
        "which torch.export's fake tensors lack: measured failing in the zoo's encoder, QCDQ and QONNX)",
    ),
    LayerRule(
        frozenset({QONNX}),
        ANY_EXPORTER,
        (RotatedModule,),
        lambda layer: True,
        "an online Hadamard rotation (HadamardRotation), a float transform; allowed: the qcdq export, or no "
        "HadamardRotation (FINN runs no float transform; measured: the QONNX export of a rotated 2-Linear model "
        "did not finish in 600 s)",
    ),
)


def quantizers(model: nn.Module) -> Iterator[tuple[str, str, nn.Module, TensorQuant | None]]:
    """(name, role, proxy, Quark spec or None) of every enabled quantizer of ``model``."""
    for name, module in model.named_modules():
        role = next((r for cls, r in PROXY_ROLES if isinstance(module, cls)), None)
        if role is not None and module.is_quant_enabled:
            yield name, role, module, spec_of(module)


def problems(model: nn.Module, fmt: ExportFormat, dynamo: bool) -> list[str]:
    """One line per module or quantizer that ``fmt`` cannot express."""
    found: list[str] = []
    for name, module in model.named_modules():
        if isinstance(module, (QuantLayerMixin, qnn.QuantMultiheadAttention)):
            formats = LAYER_FORMATS.get(type(module))
            if formats is None or fmt not in formats:
                found.append(
                    f"module {name!r} ({type(module).__name__}): no {fmt.value} export; exportable layers: "
                    f"{sorted(c.__name__ for c, f in LAYER_FORMATS.items() if fmt in f)}"
                )
        for rule in LAYER_RULES:
            if (
                fmt in rule.formats
                and dynamo in rule.dynamo
                and isinstance(module, rule.layers)
                and rule.bad(module)
            ):
                found.append(f"module {name!r} ({type(module).__name__}): {rule.problem}")
    for name, role, _proxy, spec in quantizers(model):
        if spec is None:
            continue
        for rule in SPEC_RULES:
            if fmt in rule.formats and dynamo in rule.dynamo and role in rule.roles and rule.bad(spec):
                value = (
                    f"int{spec.bit_width} bias"
                    if rule.field == "bias"
                    else f"{rule.field}={_value(spec, rule.field)}"
                )
                found.append(
                    f"quantizer {name!r} ({role}): {value}; {fmt.value} allows {rule.allowed}: {rule.reason}"
                )
    return found


def check(model: nn.Module, fmt: ExportFormat, dynamo: bool) -> None:
    """Raise :class:`UnsupportedExportError` listing everything ``fmt`` cannot express."""
    found = problems(model, fmt, dynamo)
    if found:
        exporter = "dynamo" if dynamo else "TorchScript"
        raise UnsupportedExportError(
            f"cannot export to {fmt.value} ({exporter} exporter):\n  " + "\n  ".join(found), found
        )


def markdown() -> str:
    """The support table and the rules as markdown (docs/export.md embeds it; a test keeps it in sync)."""
    formats = list(ExportFormat)
    lines = ["| layer | " + " | ".join(f.value for f in formats) + " |", "|---|" + "---|" * len(formats)]
    for layer, allowed in LAYER_FORMATS.items():
        lines.append(
            f"| `{layer.__name__}` | " + " | ".join("yes" if f in allowed else "-" for f in formats) + " |"
        )
    lines += ["", "| format | exporter | refused | allowed | why |", "|---|---|---|---|---|"]

    def exporters(dynamo: frozenset[bool]) -> str:
        return "any" if dynamo == ANY_EXPORTER else ("dynamo" if True in dynamo else "TorchScript")

    for rule in SPEC_RULES:
        fmts = "both" if rule.formats == BOTH else ", ".join(f.value for f in rule.formats)
        refused = f"{'/'.join(sorted(rule.roles))} `{rule.field}`"
        lines.append(f"| {fmts} | {exporters(rule.dynamo)} | {refused} | {rule.allowed} | {rule.reason} |")
    for rule in LAYER_RULES:
        fmts = "both" if rule.formats == BOTH else ", ".join(f.value for f in rule.formats)
        layers = "/".join(f"`{c.__name__}`" for c in rule.layers)
        refused, _, rest = rule.problem.partition("; allowed: ")
        allowed, _, why = rest.partition(" (")
        lines.append(
            f"| {fmts} | {exporters(rule.dynamo)} | {layers}: {refused} | {allowed} | {why.rstrip(')')} |"
        )
    return "\n".join(lines)
