"""Rules the specs of one layer must obey together, checked before anything is built.

Each rule is a row: what it refuses and why; ``check`` returns the problems of one planned layer
(naming the module, the values and what to change) or nothing. :func:`problems` collects every
problem of every layer and :func:`check` raises them together in one ``ValueError``. No rule
changes the plan. ``docs/support.md`` lists the rows (generated; a test keeps it in sync).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.mapping import OUTPUT_CHANNEL_AXIS, weight_axis, weights
from quark.torch.quantization.config.type import QSchemeType, ScaleType
from quark.torch.quantization.plan import LayerPlan, Site


@dataclass(frozen=True)
class LayerRule:
    refuses: str
    check: Callable[[LayerPlan, nn.Module], Iterable[str]]
    reason: str


def _product_bias(plan: LayerPlan) -> bool:
    bias = plan.specs["bias"]
    return bias is not None and bias.bias_scale_from_product


def _bias_operands_quantized(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    if _product_bias(plan) and (plan.specs["input_tensors"] is None or plan.specs["weight"] is None):
        yield (
            "bias with scale = input scale x weight scale needs input_tensors and weight quantized too; "
            "quantize them, or give the bias spec its own observer_cls"
        )


def _bias_operands_integer(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    if _product_bias(plan):
        for role in ("input_tensors", "weight"):
            spec = plan.specs[role]
            if spec is not None and spec.format != "int":
                yield (
                    f"a bias scaled by input scale x weight scale needs integer {role}, got a {spec.format} format; "
                    "give the bias spec its own observer_cls or leave bias float"
                )


def _bias_input_static(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    spec = plan.specs["input_tensors"]
    if _product_bias(plan) and spec is not None and spec.is_dynamic:
        yield "a bias scaled by the input scale needs a static input_tensors spec, got is_dynamic=True"


def _pof2_bias_operands(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    if _product_bias(plan) and plan.specs["bias"].scale_type is ScaleType.pof2:
        for role in ("input_tensors", "weight"):
            spec = plan.specs[role]
            if spec is not None and spec.scale_type is not ScaleType.pof2:
                yield (
                    f"bias scale_type=pof2 needs pof2 {role} scales (its scale is their product), "
                    f"got {role} scale_type={spec.scale_type.name}"
                )


def _channel_axis_with_input(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    weight = plan.specs["weight"]
    if plan.specs["input_tensors"] is not None and weight is not None and weight.qscheme is QSchemeType.per_channel:
        out_axis = OUTPUT_CHANNEL_AXIS.get(type(module), 0)
        axis = weight_axis(weight, module, weights(module)[0][1])
        if axis != out_axis:
            yield (
                f"per_channel weight scales along axis {axis} cannot combine with a quantized input: "
                f"Brevitas derives the output's scale (input scale x weight scale) per output channel; "
                f"use ch_axis={out_axis} (output channels), per_group, or leave input_tensors float"
            )


def _bias_weight_granularity(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    weight = plan.specs["weight"]
    if _product_bias(plan) and weight is not None and weight.qscheme is not QSchemeType.per_tensor:
        out_axis = OUTPUT_CHANNEL_AXIS.get(type(module), 0)
        axis = weight_axis(weight, module, weights(module)[0][1])
        if weight.qscheme is QSchemeType.per_group or axis != out_axis:
            yield (
                f"a bias scaled by input scale x weight scale needs one weight scale per output channel "
                f"(per_tensor, or per_channel with ch_axis={out_axis}); got weight qscheme={weight.qscheme.name} "
                f"ch_axis={weight.ch_axis}"
            )


def _weight_axis_in_range(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    weight = plan.specs["weight"]
    if weight is not None and weight.ch_axis is not None:
        for name, tensor in weights(module):
            if not -tensor.dim() <= weight.ch_axis < tensor.dim():
                yield f"weight ch_axis={weight.ch_axis} is out of range for {name} of shape {tuple(tensor.shape)}"


def _groups_divide(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    weight = plan.specs["weight"]
    if weight is not None and weight.qscheme is QSchemeType.per_group:
        for name, tensor in weights(module):
            if weight.ch_axis is not None and not -tensor.dim() <= weight.ch_axis < tensor.dim():
                continue  # the axis rule names it
            axis = weight_axis(weight, module, tensor)
            if tensor.shape[axis] % weight.group_size:
                yield (
                    f"weight group_size={weight.group_size} does not divide axis {axis} of {name} "
                    f"(shape {tuple(tensor.shape)}); choose a group_size dividing {tensor.shape[axis]}"
                )


#: role -> the module attributes holding its channel count
_CHANNELS = {
    "input_tensors": ("in_features", "in_channels", "embed_dim"),
    "output_tensors": ("out_features", "out_channels", "embed_dim"),
}


def _blocks_divide_channels(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    for role, attrs in _CHANNELS.items():
        spec = plan.specs[role]
        channels = next((getattr(module, a) for a in attrs if hasattr(module, a)), None)
        if spec is not None and spec.format in ("mx", "bdr") and channels is not None and channels % spec.group_size:
            yield (
                f"{role} {spec.format} {spec.variant} blocks of {spec.group_size} need the channel count to be a "
                f"multiple of {spec.group_size}, got {channels} (padding is not supported)"
            )


def _act_block_axis(module: nn.Module) -> int:
    """The axis an activation's blocks run along: features (last) for Linear-like layers, channels (1) for convolutions."""
    return 1 if isinstance(module, nn.modules.conv._ConvNd) else -1


def _blocks_along_channels(plan: LayerPlan, module: nn.Module) -> Iterable[str]:
    for role in _CHANNELS:
        spec = plan.specs[role]
        if spec is not None and spec.format in ("mx", "bdr") and spec.ch_axis not in (None, _act_block_axis(module)):
            yield (
                f"{role} {spec.format} {spec.variant} blocks along ch_axis={spec.ch_axis}: activation blocks run along "
                f"the layer's channels, ch_axis={_act_block_axis(module)} for a {type(module).__name__} (or None)"
            )


LAYER_RULES: tuple[LayerRule, ...] = (
    LayerRule(
        "a bias scaled by input x weight scale without both quantized",
        _bias_operands_quantized,
        "the bias scale is the product of the input and weight scales",
    ),
    LayerRule(
        "a bias scaled by input x weight scale with float, cast or block operands",
        _bias_operands_integer,
        "only integer quantizers have one scale per tensor or channel to multiply",
    ),
    LayerRule(
        "a bias scaled by input x weight scale with a dynamic input",
        _bias_input_static,
        "the bias would need re-quantizing at every call",
    ),
    LayerRule(
        "a pof2 bias scale with non-pof2 input or weight scales",
        _pof2_bias_operands,
        "a product of scales is a power of two only if both are",
    ),
    LayerRule(
        "per_channel weight scales off the output-channel axis with a quantized input",
        _channel_axis_with_input,
        "Brevitas derives the output's scale per output channel and fails with a size mismatch",
    ),
    LayerRule(
        "a bias scaled by input x weight scale with per_group (or off-axis per_channel) weights",
        _bias_weight_granularity,
        "a bias element needs one weight scale for its output channel",
    ),
    LayerRule("a weight ch_axis out of range", _weight_axis_in_range, "the axis must exist in every weight"),
    LayerRule(
        "a per_group weight whose group_size does not divide its axis",
        _groups_divide,
        "groups are not padded",
    ),
    LayerRule(
        "MX / shared-exponent activations whose channel count is not a multiple of the block",
        _blocks_divide_channels,
        "blocks are not padded",
    ),
    LayerRule(
        "MX / shared-exponent activations blocked along another axis than the layer's channels",
        _blocks_along_channels,
        "the dot products of a layer pair activation blocks with weight blocks along its input channels",
    ),
)


def problems(plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    """Every problem of every planned layer, one line each, naming the module."""
    modules = {s.name: s.module for s in sites}
    found = []
    for plan in plans:
        module = modules.get(plan.name)
        if module is None:
            continue  # a site without a module has no weights or channels for these rules
        where = f"module {plan.name!r} ({type(module).__name__})"
        found += [f"{where}: {line}" for rule in LAYER_RULES for line in rule.check(plan, module)]
    return found


def algorithm_problems(plans: Sequence[LayerPlan], sites: Sequence[Site], algorithms: Iterable[tuple[Any, Any]]) -> list[str]:
    """What the config's algorithms refuse in the plan (each implementation's ``check``)."""
    return [line for algo, impl in algorithms if impl.check is not None for line in impl.check(algo, plans, sites)]


def check(plans: Sequence[LayerPlan], sites: Sequence[Site], algorithms: Iterable[tuple[Any, Any]] = ()) -> None:
    """Raise one ``ValueError`` listing every problem of the layers and of the algorithms'
    preconditions (``(config, implementation)`` pairs), before anything is built."""
    found = problems(plans, sites) + algorithm_problems(plans, sites, algorithms)
    if found:
        raise ValueError("the config cannot be applied to this model:\n  " + "\n  ".join(found))


def markdown() -> str:
    """The rules as a markdown table (docs/support.md embeds it; a test keeps it in sync)."""
    lines = ["| refused | why |", "|---|---|"]
    lines += [f"| {rule.refuses} | {rule.reason} |" for rule in LAYER_RULES]
    return "\n".join(lines)

