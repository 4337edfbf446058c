"""The graph backend: Brevitas graph quantization of a ``torch.fx`` trace, driven by the plan.

What each site is and which config role it takes is documented in
:mod:`quark.torch.extensions.brevitas.graph`. As in Brevitas' own ``brevitas.graph.quantize``,
the network input, every activation and every addition / concatenation get a quantizer, and
quantized tensors travel between modules as Brevitas ``QuantTensor`` s, so a compute layer whose
input arrives quantized needs no input quantizer of its own and its bias takes the input scale
from the tensor. The differences: every quantizer comes from the plan (one spec per site, through
``mapping``'s tables, like the layerwise backend), compute layers are built by
``mapping.build_layer``, and an activation keeps its own float module (followed by a
``QuantIdentity``) because Brevitas' fused activations drop ``Hardtanh`` / ``ReLU6`` when their
quantizer clamps, which changes the function whenever the learned range exceeds the clip.
"""

from __future__ import annotations

import copy
import logging
import operator
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass, field, replace

import brevitas.nn as qnn
import torch
import torch.nn.functional as F
from brevitas.quant.scaled_int import TruncTo8bit
from brevitas.quant_tensor import QuantTensor
from torch import fx, nn

from quark.torch.extensions.brevitas._backend import folding
from quark.torch.extensions.brevitas._backend.mapping import LAYERS, act_quant
from quark.torch.extensions.brevitas._backend.rewrite import tracing
from quark.torch.extensions.brevitas._backend.targets import (
    AveragePooling,
    activation_input_quantized,
    average_pooling,
)
from quark.torch.extensions.brevitas.graph import ACTIVATIONS, Add, Cat, GraphInput, QuantPoint
from quark.torch.quantization.config.spec import ROLES, Role
from quark.torch.quantization.plan import ConfigView, LayerPlan, Site, layer_type
from quark.torch.quantization.tensor_quant import Format, TensorQuant

logger = logging.getLogger(__name__)

#: average pooling: Brevitas' truncating pools keep the sum's most significant bits (FINN's
#: QuantAvgPool2d); padded pooling has no truncating form and stays float
AVG_POOLS: dict[type[nn.Module], Callable[[nn.Module], dict]] = {
    nn.AvgPool2d: lambda m: {
        "kernel_size": m.kernel_size,
        "stride": m.stride,
        "ceil_mode": m.ceil_mode,
        "count_include_pad": m.count_include_pad,
        "divisor_override": m.divisor_override,
    },
    nn.AdaptiveAvgPool2d: lambda m: {"output_size": m.output_size},
}
TRUNC_POOLS: dict[type[nn.Module], type[nn.Module]] = {
    nn.AvgPool2d: qnn.TruncAvgPool2d,
    nn.AdaptiveAvgPool2d: qnn.TruncAdaptiveAvgPool2d,
}
#: layers whose input may arrive quantized from upstream
WEIGHTED: tuple[type[nn.Module], ...] = (*(t for t, row in LAYERS.items() if row.upstream_input), *AVG_POOLS)

#: operations that hand a quantized tensor on, on the same grid (Brevitas' QuantTensor keeps it)
PASS_THROUGH_MODULES = (
    nn.MaxPool1d,
    nn.MaxPool2d,
    nn.MaxPool3d,
    nn.AdaptiveMaxPool1d,
    nn.AdaptiveMaxPool2d,
    nn.AdaptiveMaxPool3d,
    nn.Flatten,
    nn.Identity,
    nn.Dropout,  # the identity in eval mode, where a graph is exported
    nn.Dropout1d,
    nn.Dropout2d,
    nn.Dropout3d,
)
PASS_THROUGH_FUNCTIONS = (
    torch.flatten,
    torch.reshape,
    torch.transpose,
    F.max_pool1d,
    F.max_pool2d,
    F.max_pool3d,
    F.dropout,
)
PASS_THROUGH_METHODS = ("view", "reshape", "flatten", "transpose", "permute", "contiguous")
#: nodes that compute nothing a quantizer could act on
_BOOKKEEPING = ("placeholder", "output", "get_attr")
#: modules that take integer indices: a network input feeding only these is not quantized
INDEX_CONSUMERS = (nn.Embedding, nn.EmbeddingBag)


@dataclass(frozen=True)
class SiteKind:
    """A kind of graph site: its roles, the config roles each takes, and what it becomes."""

    roles: tuple[str, ...]
    sources: dict[str, tuple[str, ...]] = field(default_factory=dict)


_ACT_OUTPUT = {"output_tensors": ("output_tensors", "input_tensors")}
KINDS: dict[str, SiteKind] = {
    "input": SiteKind(("input_tensors",)),
    "activation": SiteKind(("output_tensors",), _ACT_OUTPUT),
    "add": SiteKind(("input_tensors", "output_tensors"), _ACT_OUTPUT),
    "cat": SiteKind(("input_tensors", "output_tensors")),
    "pool": SiteKind(("input_tensors", "output_tensors")),
}
#: site type -> kind (compute layers are their own kind)
KIND_OF_TYPE: dict[type, str] = {
    GraphInput: "input",
    Add: "add",
    Cat: "cat",
    **dict.fromkeys(ACTIVATIONS, "activation"),
    **dict.fromkeys(AVG_POOLS, "pool"),
}


class QuantConcat(qnn.QuantCat):
    """Brevitas' QuantCat with a working forward: brevitas 0.13.4's calls ``QuantTensor.cat``,
    which its QuantTensor does not have (AttributeError); ``torch.cat`` dispatches to the
    QuantTensor handler, which checks that the inputs share one scale."""

    def forward(self, tensor_list, dim: int = 1):
        quantized = [self.input_quant(self.unpack_input(t)) for t in tensor_list]
        return self.pack_output(self.output_quant(torch.cat(quantized, dim=dim)))


def float_value(x):
    """The float value of a QuantTensor (graph outputs are plain tensors)."""
    return x.value if isinstance(x, QuantTensor) else x


class GraphRewriter:
    name = "fx"
    supported_types: tuple[type, ...] = (GraphInput, Add, Cat, *ACTIVATIONS, *AVG_POOLS, *LAYERS)

    def prepare(self, model: nn.Module) -> fx.GraphModule:
        return tracing.as_modules(tracing.trace(model))

    def sites(self, model: fx.GraphModule) -> list[Site]:
        sites: dict[str, Site] = {}
        left_float = []
        foldable = set(folding.graph_pairs(model).values())  # said in connect, where the plan decides
        for node in model.graph.nodes:
            site = self._site(model, node)
            if site is not None:
                sites.setdefault(site.name, site)
            elif not _transparent(model, node) and node.target not in foldable:
                left_float.append(_describe(model, node))
        if left_float:
            logger.warning(
                "graph mode leaves these operations float (what follows quantizes its own input): %s",
                ", ".join(dict.fromkeys(left_float)),
            )
        return list(sites.values())

    @staticmethod
    def _site(model: fx.GraphModule, node: fx.Node) -> Site | None:
        if node.op == "placeholder":
            if _is_network_input(model, node):  # named by the argument (FX renames `input` to `input_1`)
                return Site(node.target, GraphInput, KINDS["input"].roles)
            return None
        if node.op != "call_module":
            return None
        module = model.get_submodule(node.target)
        if layer_type(module) in LAYERS:
            has_bias = any(n.endswith("bias") and p is not None for n, p in module.named_parameters())
            roles = ROLES if has_bias else tuple(r for r in ROLES if r != "bias")
            return Site(node.target, layer_type(module), roles, module)
        kind = KIND_OF_TYPE.get(type(module))
        if kind is None or (kind == "pool" and getattr(module, "padding", 0) not in (0, (0, 0))):
            return None
        return Site(node.target, type(module), KINDS[kind].roles, module, KINDS[kind].sources)

    def connect(self, model: fx.GraphModule, plans: list[LayerPlan], sites: list[Site], view: ConfigView) -> None:
        """Give each weighted layer whose input arrives quantized the spec of the site upstream.

        The layer then has no input quantizer of its own (the summary shows ``= site``), unless
        its own ``input_tensors`` was set for it specifically (by name or type) and differs:
        that is a requantization the config asks for. With ``view.signs_from_graph`` (the Brevitas
        extension's config), non-negative tensors get unsigned grids first (:func:`_unsigned_where_non_negative`).
        """
        plans_by_name = {p.name: p for p in plans}
        for plan in plans:
            if replaced_by_sign(plan):
                plan.origins[Role.output_tensors] += f" (bipolar: the sign replaces {plan.module_type.__name__})"
        pairs = folding.graph_pairs(model)
        folding.assign(plans, pairs)
        folded = {p.batch_norm for p in plans if p.batch_norm}
        kept = [f"{bn} ({type(model.get_submodule(bn)).__name__})" for bn in pairs.values() if bn not in folded]
        if kept:
            # informative: a float batch norm is a valid graph (FINN absorbs it into thresholds, ONNX Runtime runs it)
            logger.info(
                "graph mode keeps these batch norms as float layers (folding them into the weights during QAT needs "
                "a TQT weight spec, TQTSpec(fold_batch_norm=True); MergeBatchNorm before quantization merges them): %s",
                ", ".join(kept),
            )
        if view.signs_from_graph:
            _unsigned_where_non_negative(model, plans_by_name)
        for node in model.graph.nodes:
            plan = plans_by_name.get(node.target) if node.op == "call_module" else None
            if plan is None or plan.module_type not in (*WEIGHTED, *ACTIVATIONS) or not node.args:
                continue
            producer = _producer(model, node.args[0], folded)
            upstream = plans_by_name.get(_site_name(producer)) if producer is not None else None
            spec = _produced_spec(upstream) if upstream is not None else None
            if spec is None:
                continue
            if plan.module_type in ACTIVATIONS:  # its input arrives quantized (see _activation)
                plan.upstream[Role.input_tensors.value] = upstream.name
                continue
            own = plan.specs[Role.input_tensors]
            if own is not None and own != spec and not plan.origins[Role.input_tensors].startswith("global_quant_config"):
                continue
            plan.specs[Role.input_tensors] = spec
            plan.upstream[Role.input_tensors.value] = upstream.name
            plan.origins[Role.input_tensors.value] = f"upstream {upstream.name!r}"

    def rewrite(self, model: fx.GraphModule, plans: list[LayerPlan], sites: list[Site]) -> fx.GraphModule:
        by_name = {s.name: s for s in sites}
        param = next(model.parameters(), None)
        place = {"device": param.device, "dtype": param.dtype} if param is not None else {}
        # build every replacement first: a failure leaves the model as it was
        built = {p.name: _build(p, by_name[p.name], model).to(**place) for p in plans if p.quantized}
        placeholders = {n.target: n for n in model.graph.nodes if n.op == "placeholder"}
        taken = {name for name, _ in model.named_modules()}
        quantizing = set(built)  # the modules that take and give QuantTensors
        for name, module in built.items():
            if by_name[name].type is GraphInput:
                module_name = tracing._free_name("", f"{name}_quant", taken)
                taken.add(module_name)
                quantizing.add(module_name)
                model.add_submodule(module_name, module)
                node = placeholders[name]
                with model.graph.inserting_after(node):
                    quant = model.graph.call_module(module_name, (node,))
                node.replace_all_uses_with(quant, delete_user_cb=lambda user, q=quant: user is not q)
            else:
                model.set_submodule(name, module)
        for plan in plans:
            if plan.batch_norm is not None and plan.name in built:
                _remove(model, plan.batch_norm)  # the layer computes it now
        _float_inputs(model, quantizing)
        _float_outputs(model)
        model.graph.lint()
        model.recompile()
        return model


def _kind(site: Site) -> str:
    return KIND_OF_TYPE.get(site.type, "compute")


def _build(plan: LayerPlan, site: Site, model: fx.GraphModule) -> nn.Module:
    """The replacement of a site; a compute layer folding a batch norm takes it from ``model``."""
    if _kind(site) == "compute":
        return _compute(plan, site, model)
    return BUILDERS[_kind(site)](plan, site)


def _remove(model: fx.GraphModule, target: str) -> None:
    """The module ``target`` and its call out of the graph, its input passed on to its users."""
    node = next(n for n in model.graph.nodes if n.op == "call_module" and n.target == target)
    node.replace_all_uses_with(node.args[0])
    model.graph.erase_node(node)
    model.delete_submodule(target)


def _quant_identity(spec: TensorQuant) -> nn.Module:
    return qnn.QuantIdentity(act_quant=act_quant(spec), return_quant_tensor=True)


#: the activations that compute element by element: a target may need their float input quantized
#: (not the normalisations, whose inputs arrive from sites or the host's mask arithmetic, nor
#: QuantPoint, which is itself the quantizer)
ELEMENTWISE = tuple(t for t in ACTIVATIONS if t not in (nn.LayerNorm, nn.Softmax, QuantPoint))


def _activation(plan: LayerPlan, site: Site) -> nn.Module:
    """The activation, its output quantized; its input too where the plan's target runs it only
    between DequantizeLinear and QuantizeLinear (``targets.activation_input_quantized``) and it
    arrives float (a layer's output), on the signed grid of the output's spec."""
    output = plan.specs[Role.output_tensors]
    if replaced_by_sign(plan):
        return nn.Sequential(OrderedDict(quant=_quant_identity(output)))
    activation = copy.deepcopy(site.module)
    if getattr(activation, "inplace", False):
        activation.inplace = False  # it may receive a tensor other nodes still read
    stages = OrderedDict(act=activation, quant=_quant_identity(output))
    wants_input = site.type in ELEMENTWISE and activation_input_quantized(plan.target_device, site.type)
    if wants_input and Role.input_tensors not in plan.upstream:
        signed = replace(output, signed=True) if output.format is Format.integer else output
        stages = OrderedDict(input_quant=_quant_identity(signed), **stages)
    return nn.Sequential(stages)


def replaced_by_sign(plan: LayerPlan) -> bool:
    """Whether a bipolar output replaces the activation: the output of a non-negative activation
    (ReLU, ...) has the sign +1 everywhere, and in a binary network the sign is the activation
    (BinaryNet, Courbariaux et al. 2016; Brevitas' bnn_pynq: batch norm, then the sign)."""
    output = plan.specs.get(Role.output_tensors)
    return (
        output is not None
        and output.format is Format.bipolar
        and isinstance(plan.module_type, type)
        and issubclass(plan.module_type, NON_NEGATIVE_ACTIVATIONS)
    )


def _two_sided(layer: type[nn.Module]) -> Callable[[LayerPlan, Site], nn.Module]:
    def build(plan: LayerPlan, site: Site) -> nn.Module:
        specs = plan.specs
        return layer(
            input_quant=act_quant(specs[Role.input_tensors]) if specs[Role.input_tensors] else None,
            output_quant=act_quant(specs[Role.output_tensors]) if specs[Role.output_tensors] else None,
            return_quant_tensor=True,
        )

    return build


def _pool(plan: LayerPlan, site: Site) -> nn.Module:
    """Average pooling, in the form the plan's target computes (``targets.average_pooling``): the
    float average requantized with ``output_tensors``, else with the input's spec (what QDQ graphs
    and FINN's GlobalAccPool take), or the sum truncated to the bit width of the input (floor, as
    FINN's QuantAvgPool2d), integer to integer. An input arriving float is quantized first."""
    spec, output = plan.specs[Role.input_tensors], plan.specs[Role.output_tensors]
    module = site.module
    form = average_pooling(plan.target_device, windowed=type(module) is nn.AvgPool2d)
    stages: OrderedDict[str, nn.Module] = OrderedDict()
    if spec is not None and Role.input_tensors not in plan.upstream:
        stages["quant"] = _quant_identity(spec)
    if output is not None or form is AveragePooling.requantized:
        stages["pool"] = copy.deepcopy(module)
        stages["output_quant"] = _quant_identity(output or spec)
    else:
        trunc = TruncTo8bit.let(bit_width=spec.bit_width)
        stages["pool"] = TRUNC_POOLS[type(module)](
            **AVG_POOLS[type(module)](module), trunc_quant=trunc, return_quant_tensor=True
        )
    return stages["pool"] if len(stages) == 1 else nn.Sequential(stages)


def _compute(plan: LayerPlan, site: Site, model: fx.GraphModule | None = None) -> nn.Module:
    own = plan
    if Role.input_tensors in plan.upstream:  # no input quantizer of its own; its weights may bound against it (A2Q)
        own = replace(plan, specs={**plan.specs, Role.input_tensors.value: None})
    return folding.build(
        own,
        site.module,
        model,
        return_quant_tensor=plan.specs[Role.output_tensors] is not None,
        inputs=plan.specs[Role.input_tensors],
    )


#: site kind -> the module that replaces it (an input's quantizer is inserted after the input)
BUILDERS: dict[str, Callable[[LayerPlan, Site], nn.Module]] = {
    "input": lambda plan, site: _quant_identity(plan.specs[Role.input_tensors]),
    "activation": _activation,
    "add": _two_sided(qnn.QuantEltwiseAdd),
    "cat": _two_sided(QuantConcat),
    "pool": _pool,
    "compute": _compute,
}


#: activations whose output is never negative: Brevitas' graph quantization gives them unsigned
#: quantizers (``brevitas.graph.quantize``'s ``UNSIGNED_ACT_TUPLE``)
NON_NEGATIVE_ACTIVATIONS = (nn.ReLU, nn.ReLU6, nn.Sigmoid, nn.Hardsigmoid)
#: sites whose output is non-negative when all their inputs are (they add, join or average them)
SIGN_PRESERVING = (Add, Cat, *AVG_POOLS)


def _unsigned(spec: TensorQuant | None) -> TensorQuant | None:
    """``spec`` on the unsigned grid of its bit width (symmetric integer specs; others as they are)."""
    if spec is None or spec.format is not Format.integer or not spec.symmetric or not spec.signed:
        return spec
    return replace(spec, signed=False)


def _unsigned_where_non_negative(model: fx.GraphModule, plans: dict[str, LayerPlan]) -> None:
    """Brevitas' sign convention, in graph order: the outputs of non-negative activations, and the
    inputs and outputs of additions, concatenations and average pools whose inputs are all
    non-negative (through pass-through operations), take unsigned grids."""
    non_negative: set[str] = set()  # sites whose output is >= 0
    for node in model.graph.nodes:
        plan = plans.get(node.target) if node.op == "call_module" else None
        if plan is None:
            continue
        if replaced_by_sign(plan):  # its output is the sign, -1 or +1
            continue
        if issubclass(plan.module_type, NON_NEGATIVE_ACTIVATIONS):
            roles = ("output_tensors",)
        elif issubclass(plan.module_type, SIGN_PRESERVING) and _all_inputs_non_negative(model, node, non_negative):
            roles = ("input_tensors", "output_tensors")
        else:
            continue
        non_negative.add(plan.name)
        for role in roles:
            if plan.specs.get(role) is not None and plan.specs[role] != _unsigned(plan.specs[role]):
                plan.specs[role] = _unsigned(plan.specs[role])
                plan.origins[role] += " (unsigned: never negative here, Brevitas' convention)"


def _all_inputs_non_negative(model: fx.GraphModule, node: fx.Node, non_negative: set[str]) -> bool:
    inputs = [_producer(model, arg) for arg in node.all_input_nodes]
    return bool(inputs) and all(p is not None and _site_name(p) in non_negative for p in inputs)


def _produced_spec(plan: LayerPlan) -> TensorQuant | None:
    """The spec on whose grid the site's output lies (None: float)."""
    if plan.module_type is GraphInput:
        return plan.specs[Role.input_tensors]
    if plan.module_type in (Add, Cat):
        return plan.specs[Role.output_tensors] or plan.specs[Role.input_tensors]
    if plan.module_type in AVG_POOLS:  # requantized with the input's spec, or truncated to its bit width and sign
        return plan.specs[Role.output_tensors] or plan.specs[Role.input_tensors]
    return plan.specs[Role.output_tensors]


def _producer(model: fx.GraphModule, node, folded: Collection[str] = ()) -> fx.Node | None:
    """The node that quantized ``node``'s value, walking back through pass-through operations (and
    the batch norms ``folded`` into the layer before them)."""
    while isinstance(node, fx.Node) and (_passes_through(model, node) or (node.op == "call_module" and node.target in folded)):
        node = node.args[0]
    return node if isinstance(node, fx.Node) else None


def _site_name(node: fx.Node) -> str | None:
    if node.op == "placeholder":
        return node.target
    return node.target if node.op == "call_module" else None


def _passes_through(model: fx.GraphModule, node: fx.Node) -> bool:
    if node.op == "call_module":
        return isinstance(model.get_submodule(node.target), PASS_THROUGH_MODULES)
    if node.op == "call_function":
        return node.target in PASS_THROUGH_FUNCTIONS
    return node.op == "call_method" and node.target in PASS_THROUGH_METHODS


def _transparent(model: fx.GraphModule, node: fx.Node) -> bool:
    """Nodes that need no quantizer: bookkeeping, sizes, pass-through, tuple access."""
    return (
        node.op in _BOOKKEEPING
        or _passes_through(model, node)
        or tracing._is_shape_value(node)
        or (node.op == "call_function" and node.target is operator.getitem)
    )


def _describe(model: fx.GraphModule, node: fx.Node) -> str:
    if node.op == "call_module":
        return f"{node.target} ({type(model.get_submodule(node.target)).__name__})"
    target = getattr(node.target, "__name__", str(node.target))
    return f"{tracing._owner(node) or 'forward'}: {target}"


def _is_network_input(model: fx.GraphModule, node: fx.Node) -> bool:
    """A required input (no default) that does not only feed embedding lookups."""
    if node.args:  # a default value: an optional argument, not a network input
        return False
    users = list(node.users)
    index_only = users and all(
        u.op == "call_module" and isinstance(model.get_submodule(u.target), INDEX_CONSUMERS) for u in users
    )
    return not index_only


def _float_inputs(model: fx.GraphModule, quantized: set[str]) -> None:
    """Hand plain tensors to every operation that is neither a quantized site nor a pass-through:
    Brevitas' QuantTensor has only some of a tensor's methods (``x.sum()`` fails on it)."""
    for node in list(model.graph.nodes):
        if node.op in _BOOKKEEPING or node.target in quantized or _passes_through(model, node):
            continue
        if node.op == "call_function" and node.target is float_value:
            continue

        def unpack(arg: fx.Node, user=node) -> fx.Node:
            if arg.op == "placeholder":
                return arg
            with model.graph.inserting_before(user):
                return model.graph.call_function(float_value, (arg,))

        node.args = fx.node.map_arg(node.args, unpack)
        node.kwargs = fx.node.map_arg(node.kwargs, unpack)


def _float_outputs(model: fx.GraphModule) -> None:
    """Unpack QuantTensors at the graph outputs."""
    output = next(n for n in model.graph.nodes if n.op == "output")

    def unpack(node: fx.Node) -> fx.Node:
        with model.graph.inserting_before(output):
            return model.graph.call_function(float_value, (node,))

    output.args = fx.node.map_arg(output.args, unpack)


GRAPH = GraphRewriter()
