"""What the FINN target refuses, as rows of :mod:`....rules`, each with the config field that fixes it:
per quantizer (what FINN's ``ConvertQONNXtoFINN`` rejects or converts into something other than
what the model computes), per graph-mode site, and on the written QONNX graph.

Measured with finn-plus 1.6.1 / qonnx 1.0.0 (tests/targets/finn/test_rules.py has a case per row).
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.export.onnx_graph import (
    dynamic_shapes,
    shape_ops_on_unknown_shapes,
)
from quark.torch.extensions.brevitas._backend.rules import ACT, DATA, FROM_A_SPEC, Found, Rule, spec_rule
from quark.torch.extensions.brevitas.graph import ACTIVATIONS, GraphInput, QuantPoint
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import DeviceType
from quark.torch.quantization.tensor_quant import Format

#: widest quantizer FINN's ConvertQONNXtoFINN turns into a MultiThreshold (its default filter)
MAX_BITS = 8


QUANTIZER_RULES: tuple[Rule, ...] = (
    FROM_A_SPEC,
    spec_rule(
        DATA,
        "dtype",
        lambda s: (s.format is Format.integer and s.bit_width <= MAX_BITS) or s.format is Format.bipolar,
        f"integers of 2..{MAX_BITS} bits, bipolar",
        f"FINN turns integer quantizers of at most {MAX_BITS} bits into thresholds and integer weights, bipolar "
        "ones (BipolarQuant) into bipolar thresholds and weights (XNOR-popcount layers where both are bipolar)",
        shown=lambda s: s.dtype_name,
    ),
    spec_rule(
        DATA,
        "symmetric",
        lambda s: s.symmetric,
        "True (zero point 0)",
        "ConvertQONNXtoFINN: 'Only Quant nodes with zero-point == 0 are currently supported'",
    ),
    spec_rule(ACT, "is_dynamic", lambda s: not s.is_dynamic, "False", "thresholds are fixed in hardware"),
    spec_rule(
        ACT,
        "observer_cls",
        lambda s: s.format is not Format.bipolar or s.statistic == "unit",
        "UnitScaleObserver (bipolar activations of scale 1)",
        "ConvertQONNXtoFINN: 'FINN only supports Bipolar identity activations with out per channel scaling and "
        "the scaling must be 1'",
        shown=lambda s: s.observer.__name__,
    ),
)


def not_graph_mode(plans: Sequence[Any]) -> Iterable[Found]:
    if plans and not any(p.module_type is GraphInput for p in plans):
        yield "site 'model': quantized layer by layer: the tensors between layers stay float"


def input_float(plans: Sequence[Any]) -> Iterable[Found]:
    for p in plans:
        if p.module_type is GraphInput and p.specs[Role.input_tensors] is None:
            yield f"site {p.name!r}: network input not quantized"


def _signed_after_relu(plans: Sequence[Any]) -> Iterable[Found]:
    for p in plans:
        spec = p.specs.get(Role.output_tensors)
        # a bipolar output replaces the ReLU (graph mode: the sign is the activation)
        if p.module_type is nn.ReLU and spec is not None and spec.signed and spec.format is not Format.bipolar:
            yield (
                f"site {p.name!r}: ReLU output quantized signed ({spec.dtype_name})",
                f"an unsigned dtype (uint{spec.bit_width}) for layer_type_quant_config['ReLU'].output_tensors",
            )


#: what FINN needs of the graph-mode sites; subject: the model's plans
SITE_RULES: tuple[Rule, ...] = (
    Rule(
        "a model quantized layer by layer",
        not_graph_mode,
        "Config.quant_mode=QuantizationMode.fx_graph_mode (main API) or Config.backend=Backend.fx",
        "FINN streamlines a graph into integers only where every tensor between layers is quantized",
    ),
    Rule(
        "a float network input",
        input_float,
        "input_tensors of layer_type_quant_config['GraphInput'] (or global)",
        "FINN's dataflow takes integers: the input quantizer becomes the input's integer type",
    ),
    Rule(
        "a signed quantizer after ReLU",
        _signed_after_relu,
        "an unsigned dtype for layer_type_quant_config['ReLU'].output_tensors",
        "ConvertQONNXtoFINN: 'FINN only supports unsigned and non-narrow Quant nodes for Relu activations'",
    ),
)


def _shape_computing(model: Any) -> Iterable[Found]:
    shape_ops = shape_ops_on_unknown_shapes(model)
    if shape_ops:
        yield (
            f"shape-computing nodes {shape_ops} on shapes known only at run time "
            "(e.g. x.view(x.size(0), -1) on a dynamic batch)"
        )


#: on the written QONNX graph
GRAPH_RULES: tuple[Rule, ...] = (
    Rule(
        "dynamic shapes",
        lambda model: dynamic_shapes(model),
        "static input/output shapes",
        "FINN's dataflow has fixed stream sizes",
    ),
    Rule(
        "shape computations on shapes known only at run time",
        _shape_computing,
        "shape computations on static shapes (x.size(), torch.chunk, x.view(n, 2, c // 2, h, w) of a static "
        "input), which qonnx's cleanup folds into constants",
        "FINN's dataflow has fixed stream sizes: a Shape node left in the graph has no hardware layer",
    ),
)

#: activations FINN's own conversion takes on a layer's float output (its quantizer's thresholds absorb
#: them); every other elementwise activation becomes thresholds on its quantized input (.activations),
#: which graph mode quantizes for the FINN target
THRESHOLD_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Hardtanh)
#: quantized sites FINN has no hardware for
NO_HARDWARE = (nn.LayerNorm, nn.Softmax)


def float_activations(plans: Sequence[Any]) -> str | None:
    """A warning naming the quantized activations FINN will keep as float nodes, or None: the
    normalisations, and activations whose input graph mode left float (quantized without
    ``target_device=FINN``)."""
    kept = sorted(
        {
            f"{p.name} ({p.module_type.__name__})"
            for p in plans
            if p.module_type in ACTIVATIONS
            and p.quantized
            and (
                p.module_type in NO_HARDWARE
                or (p.module_type not in (*THRESHOLD_ACTIVATIONS, QuantPoint) and p.target_device is not DeviceType.FINN)
            )
        }
    )
    if not kept:
        return None
    return (
        "FINN will keep these activations as float nodes between its integer layers (FINN has no hardware for "
        "LayerNorm / Softmax; another activation becomes thresholds only on a quantized input, which graph mode "
        f"adds where the config's target_device is DeviceType.FINN): {', '.join(kept)}"
    )


def markdown() -> str:
    """The FINN rules before export as a markdown table (docs/export.md embeds it; a test keeps it in sync)."""
    from quark.torch.extensions.brevitas._backend.rules import markdown as rules_markdown

    return rules_markdown([*QUANTIZER_RULES, *SITE_RULES])
