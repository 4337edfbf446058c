"""Rules the specs of one layer must obey together, checked before anything is built.

Each rule is a row of :data:`LAYER_RULES` (see :mod:`..rules`): what it refuses, what is allowed
instead and why; :func:`check` collects every problem of every layer, and the algorithms'
preconditions, and raises them together in one ``ValueError``. No rule changes the plan.
``docs/design.md`` embeds the table (generated; a test keeps it in sync).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.accumulator import l1_bound, narrowest_useful
from quark.torch.extensions.brevitas._backend.block_axes import allowed_axes, block_axis
from quark.torch.extensions.brevitas._backend.mapping import OUTPUT_CHANNEL_AXIS, weight_axis, weights
from quark.torch.extensions.brevitas._backend.rules import Found, Rule
from quark.torch.extensions.brevitas._backend.rules import markdown as rules_markdown
from quark.torch.extensions.brevitas._backend.rules import problems as collect
from quark.torch.quantization.config.algorithms import Phase
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import QSchemeType, ScaleType
from quark.torch.quantization.plan import LayerPlan, Site
from quark.torch.quantization.tensor_quant import Format


def _product_bias(plan: LayerPlan) -> bool:
    bias = plan.specs[Role.bias]
    return bias is not None and bias.bias_scale_from_product


def _bias_operands_quantized(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    if _product_bias(plan) and (plan.specs[Role.input_tensors] is None or plan.specs[Role.weight] is None):
        yield (
            "bias with scale = input scale x weight scale needs input_tensors and weight quantized too",
            "quantize them, or give the bias spec its own observer_cls",
        )


def _bias_operands_integer(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    if _product_bias(plan):
        for role in ("input_tensors", "weight"):
            spec = plan.specs[role]
            if spec is not None and spec.format is not Format.integer:
                yield (
                    f"a bias scaled by input scale x weight scale needs integer {role}, got a {spec.format.value} format",
                    "give the bias spec its own observer_cls or leave bias float",
                )


def _bias_input_static(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    spec = plan.specs[Role.input_tensors]
    if _product_bias(plan) and spec is not None and spec.is_dynamic:
        yield "a bias scaled by the input scale needs a static input_tensors spec, got is_dynamic=True"


def _pof2_bias_operands(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    if _product_bias(plan) and plan.specs[Role.bias].scale_type is ScaleType.pof2:
        for role in ("input_tensors", "weight"):
            spec = plan.specs[role]
            if spec is not None and spec.scale_type is not ScaleType.pof2:
                yield f"bias scale_type=pof2 needs pof2 {role} scales, got {role} scale_type={spec.scale_type.name}"


def _channel_axis_with_input(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight = plan.specs[Role.weight]
    if (
        plan.specs[Role.input_tensors] is not None
        and weight is not None
        and weight.qscheme is QSchemeType.per_channel
    ):
        out_axis = OUTPUT_CHANNEL_AXIS.get(type(module), 0)
        axis = weight_axis(weight, module, weights(module)[0][1])
        if axis != out_axis:
            yield (
                f"per_channel weight scales along axis {axis} cannot combine with a quantized input",
                f"ch_axis={out_axis} (output channels), per_group, or float input_tensors",
            )


def _bias_weight_granularity(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight = plan.specs[Role.weight]
    if _product_bias(plan) and weight is not None and weight.qscheme is not QSchemeType.per_tensor:
        out_axis = OUTPUT_CHANNEL_AXIS.get(type(module), 0)
        axis = weight_axis(weight, module, weights(module)[0][1])
        if weight.qscheme is QSchemeType.per_group or axis != out_axis:
            yield (
                (
                    f"a bias scaled by input scale x weight scale needs one weight scale per output channel, got weight "
                    f"qscheme={weight.qscheme.name} ch_axis={weight.ch_axis}"
                ),
                f"per_tensor, or per_channel with ch_axis={out_axis}",
            )


def _weight_axis_in_range(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight = plan.specs[Role.weight]
    if weight is not None and weight.ch_axis is not None:
        for name, tensor in weights(module):
            if not -tensor.dim() <= weight.ch_axis < tensor.dim():
                yield f"weight ch_axis={weight.ch_axis} is out of range for {name} of shape {tuple(tensor.shape)}"


def _groups_divide(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight = plan.specs[Role.weight]
    if weight is not None and weight.qscheme is QSchemeType.per_group:
        for name, tensor in weights(module):
            if weight.ch_axis is not None and not -tensor.dim() <= weight.ch_axis < tensor.dim():
                continue  # the axis rule names it
            axis = weight_axis(weight, module, tensor)
            if tensor.shape[axis] % weight.group_size:
                yield (
                    (
                        f"weight group_size={weight.group_size} does not divide axis {axis} of {name} "
                        f"(shape {tuple(tensor.shape)})"
                    ),
                    f"a group_size dividing {tensor.shape[axis]}",
                )


#: role -> the module attributes holding its channel count
_CHANNELS = {
    "input_tensors": ("in_features", "in_channels", "embed_dim"),
    "output_tensors": ("out_features", "out_channels", "embed_dim"),
}


def _blocks_divide_channels(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    for role, attrs in _CHANNELS.items():
        spec = plan.specs[role]
        channels = next((getattr(module, a) for a in attrs if hasattr(module, a)), None)
        if spec is not None and spec.format.block and channels is not None and channels % spec.group_size:
            yield (
                f"{role} {spec.dtype_name} blocks of {spec.group_size} need the channel count to be a "
                f"multiple of {spec.group_size}, got {channels}"
            )


def _blocks_along_channels(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    for role in _CHANNELS:
        spec = plan.specs[role]
        if spec is not None and spec.format.block and spec.ch_axis not in allowed_axes(module):
            written = "ch_axis=1" if block_axis(module) == 1 else "ch_axis=-1 (or 1, the features of a 2-D tensor)"
            yield (
                f"{role} {spec.dtype_name} blocks along ch_axis={spec.ch_axis}",
                f"blocks along the layer's channels, {written} for a {type(module).__name__} (or None)",
            )


def _a2q(plan: LayerPlan):
    weight = plan.specs[Role.weight]
    return weight if weight is not None and weight.accumulator_bits is not None else None


def _a2q_input(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight, inputs = _a2q(plan), plan.specs[Role.input_tensors]
    if weight is None:
        return
    if inputs is None:
        yield (
            f"weight qat_spec=A2QSpec (accumulator {weight.accumulator_bits} bits) with a float input",
            "an integer input_tensors spec for this layer (its own, or graph mode's quantized upstream site)",
        )
    elif inputs.format is not Format.integer or not inputs.symmetric:
        yield (
            f"weight qat_spec=A2QSpec (accumulator {weight.accumulator_bits} bits) with a {inputs.describe()} input",
            "a symmetric integer input_tensors spec (zero point 0)",
        )


#: the layers accumulator-aware weights are built for
A2Q_LAYERS = (nn.Linear, nn.Conv2d)


def _a2q_layer(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight = _a2q(plan)
    if weight is not None and type(module) not in A2Q_LAYERS:
        yield f"weight qat_spec=A2QSpec on a {type(module).__name__}"


def _a2q_too_narrow(plan: LayerPlan, module: nn.Module) -> Iterable[Found]:
    weight, inputs = _a2q(plan), plan.specs[Role.input_tensors]
    if weight is None or inputs is None or inputs.format is not Format.integer:
        return
    zero_centered = weight.zero_centered
    bound = l1_bound(weight.accumulator_bits, inputs.bit_width, inputs.signed, zero_centered)
    needed = narrowest_useful(inputs.bit_width, inputs.signed, zero_centered)
    if weight.accumulator_bits < needed:
        yield (
            (
                f"A2QSpec(accumulator_bit_width={weight.accumulator_bits}, zero_centered={zero_centered}) with "
                f"{inputs.dtype_name} inputs bounds ||q||_1 per output channel by {bound:.3g}: every weight rounds to 0"
            ),
            f"accumulator_bit_width >= {needed} for {inputs.dtype_name} inputs (or a narrower input)",
        )


#: (refused, check, allowed, reason)
_ROWS: tuple[tuple[str, Callable[[LayerPlan, nn.Module], Iterable[Found]], str, str], ...] = (
    (
        "a bias scaled by input x weight scale without both quantized",
        _bias_operands_quantized,
        "input_tensors and weight quantized, or a bias spec with its own observer_cls",
        "the bias scale is the product of the input and weight scales",
    ),
    (
        "a bias scaled by input x weight scale with float, cast or block operands",
        _bias_operands_integer,
        "integer input_tensors and weight, or a bias spec with its own observer_cls",
        "only integer quantizers have one scale per tensor or channel to multiply",
    ),
    (
        "a bias scaled by input x weight scale with a dynamic input",
        _bias_input_static,
        "a static input_tensors spec",
        "the bias would need re-quantizing at every call",
    ),
    (
        "a pof2 bias scale with non-pof2 input or weight scales",
        _pof2_bias_operands,
        "pof2 input_tensors and weight scales",
        "a product of scales is a power of two only if both are",
    ),
    (
        "per_channel weight scales off the output-channel axis with a quantized input",
        _channel_axis_with_input,
        "ch_axis of the output channels, per_group, or float input_tensors",
        "Brevitas derives the output's scale per output channel and fails with a size mismatch",
    ),
    (
        "a bias scaled by input x weight scale with per_group (or off-axis per_channel) weights",
        _bias_weight_granularity,
        "per_tensor weights, or per_channel along the output channels",
        "a bias element needs one weight scale for its output channel",
    ),
    (
        "a weight ch_axis out of range",
        _weight_axis_in_range,
        "an axis of every weight",
        "the axis must exist in every weight",
    ),
    (
        "a per_group weight whose group_size does not divide its axis",
        _groups_divide,
        "a group_size dividing the axis",
        "groups are not padded",
    ),
    (
        "MX / shared-exponent activations whose channel count is not a multiple of the block",
        _blocks_divide_channels,
        "a channel count that is a multiple of the block",
        "blocks are not padded",
    ),
    (
        "MX / shared-exponent activations blocked along another axis than the layer's channels",
        _blocks_along_channels,
        "blocks along the layer's channels",
        "the dot products of a layer pair activation blocks with weight blocks along its input channels",
    ),
    (
        "accumulator-aware weights (A2QSpec) without a quantized integer input",
        _a2q_input,
        "a symmetric integer input_tensors spec (the layer's own, or graph mode's upstream site)",
        "the L1 bound of A2Q / A2Q+ is derived from the input's bit width and sign",
    ),
    (
        "accumulator-aware weights (A2QSpec) on a layer other than Linear or Conv2d",
        _a2q_layer,
        "nn.Linear, nn.Conv2d (other layers: a weight spec without A2QSpec, e.g. by layer_type_quant_config)",
        "Brevitas' EP-init (apply_ep_init) projects the weights of these two, and FINN's MVAU / VVAU compute them",
    ),
    (
        "an accumulator-aware weight whose accumulator is too narrow for any nonzero weight",
        _a2q_too_narrow,
        "a wider accumulator_bit_width, or a narrower input",
        "A2Q+ needs a bound of at least 2 (a +1 and a -1), A2Q at least 1",
    ),
)

#: the rules the specs of one layer must obey together; subject: a :class:`Layer`
LAYER_RULES: tuple[Rule, ...] = tuple(
    Rule(refuses, lambda layer, check=check: check(layer.plan, layer.module), allowed, reason)
    for refuses, check, allowed, reason in _ROWS
)


@dataclass(frozen=True)
class Layer:
    """A planned layer and its module: the subject of :data:`LAYER_RULES`."""

    plan: LayerPlan
    module: nn.Module

    def __str__(self) -> str:
        return f"module {self.plan.name!r} ({type(self.module).__name__})"


def problems(plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    """Every problem of every planned layer, one line each, naming the module."""
    modules = {s.name: s.module for s in sites}
    # a site without a module (a graph-mode node) has no weights or channels for these rules
    layers = [Layer(plan, modules[plan.name]) for plan in plans if modules.get(plan.name) is not None]
    return collect(LAYER_RULES, layers, where=str)


def algorithm_problems(
    plans: Sequence[LayerPlan], sites: Sequence[Site], algorithms: Iterable[tuple[Any, Any]]
) -> list[str]:
    """What the config's algorithms refuse in the plan (each implementation's ``check``)."""
    return [
        line for algo, impl in algorithms if impl.check is not None for line in impl.check(algo, plans, sites)
    ]


def folding_problems(plans: Sequence[LayerPlan], algorithms: Iterable[tuple[Any, Any]]) -> list[str]:
    """Algorithms that run on the quantized model with batch norm folded into layers during QAT:
    they would edit (or re-estimate) a layer's float weight and bias, not the folded ones it quantizes."""
    folded = [f"{p.name} + {p.batch_norm}" for p in plans if p.batch_norm]
    late = [
        type(algo).__name__
        for algo, impl in algorithms
        if impl.phase is not Phase.before_quantization and not impl.folded_batch_norm
    ]
    if not folded or not late:
        return []
    return [
        (
            f"{', '.join(late)} (run on the quantized model) with batch norm folded into layers during QAT "
        f"({', '.join(folded[:5])}{' ...' if len(folded) > 5 else ''}); allowed: the weight spec's "
        "TQTSpec(fold_batch_norm=False), or batch norm merged before quantization "
        "(pre_quant_opt_config=[MergeBatchNorm()]) (those algorithms edit a layer's own weight and bias, "
            "not the folded ones it quantizes)"
        )
    ]


def check(
    plans: Sequence[LayerPlan], sites: Sequence[Site], algorithms: Iterable[tuple[Any, Any]] = ()
) -> None:
    """Raise one ``ValueError`` listing every problem of the layers and of the algorithms'
    preconditions (``(config, implementation)`` pairs), before anything is built."""
    algorithms = list(algorithms)
    found = problems(plans, sites) + algorithm_problems(plans, sites, algorithms) + folding_problems(plans, algorithms)
    if found:
        raise ValueError("the config cannot be applied to this model:\n  " + "\n  ".join(found))


def markdown() -> str:
    """The rules as a markdown table (docs/design.md embeds it; a test keeps it in sync)."""
    return rules_markdown(LAYER_RULES)
