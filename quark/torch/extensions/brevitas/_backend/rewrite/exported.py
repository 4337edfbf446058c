"""A ``GraphModule`` from ``torch.export`` (``ExportedProgram.module()``), turned back into the layer
graph that graph mode quantizes.

AMD Quark's examples hand ``ModelQuantizer`` such a graph in ``fx_graph_mode``
(``export_for_training(model, args).module()``). Its nodes are ATen operators (``aten.conv2d``,
``aten.batch_norm``, ``aten.relu_``, ``aten.add_``) reading their parameters through ``get_attr``,
where ``torch.fx.symbolic_trace`` gives calls of the model's layers; graph mode finds its sites
(layers, activations, additions) among the latter. So each ATen call that a ``torch.nn`` layer of
the original model made (``nn_module_stack`` says which) becomes that layer again, at the same path
and holding the same parameter objects (:data:`LAYERS`); the functional calls (an addition in a
residual block, an activation written as ``F.relu``) become the Python functions they stand for
(:data:`FUNCTIONS`), which graph mode turns into modules as it does for a traced model. Any other
operator stays an ATen call: graph mode leaves it float and names it.

``torch.export`` also adds a guard of the example's shapes (``_guards_fn``: "x.size()[0] == 2");
it is removed, so that the quantized model takes other batch sizes as the float model does (its
views stay specialised where ``torch.export`` specialised them), and the removal is logged.
"""

from __future__ import annotations

import copy
import logging
import operator
import warnings
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import fx, nn

logger = logging.getLogger(__name__)

aten = torch.ops.aten


def _tensor(model: fx.GraphModule, node: fx.Node | None) -> torch.Tensor | None:
    """The parameter or buffer a ``get_attr`` node reads (None for an absent argument)."""
    if node is None:
        return None
    try:
        return model.get_parameter(node.target)
    except AttributeError:
        return model.get_buffer(node.target)


def _args(node: fx.Node, names: tuple[str, ...], defaults: tuple[Any, ...] = ()) -> dict[str, Any]:
    """The ATen call's arguments by name; ``defaults`` are those of the last ``len(defaults)`` names."""
    values = dict(zip(names[len(names) - len(defaults) :], defaults, strict=True))
    values.update(zip(names, node.args, strict=False))
    values.update(node.kwargs)
    return {name: values.get(name) for name in names}


def _conv(cls: type[nn.Module]) -> Callable[[fx.GraphModule, fx.Node], nn.Module]:
    def build(model: fx.GraphModule, node: fx.Node) -> nn.Module:
        a = _args(node, ("input", "weight", "bias", "stride", "padding", "dilation", "groups"), (None, 1, 0, 1, 1))
        weight, bias = _tensor(model, a["weight"]), _tensor(model, a["bias"])
        layer = cls(
            weight.shape[1] * a["groups"], weight.shape[0], tuple(weight.shape[2:]), stride=a["stride"], padding=a["padding"],
            dilation=a["dilation"], groups=a["groups"], bias=bias is not None, device="meta",
        )  # fmt: skip
        layer.weight, layer.bias = weight, bias
        return layer

    return build


def _linear(model: fx.GraphModule, node: fx.Node) -> nn.Module:
    a = _args(node, ("input", "weight", "bias"), (None,))
    weight, bias = _tensor(model, a["weight"]), _tensor(model, a["bias"])
    layer = nn.Linear(weight.shape[1], weight.shape[0], bias=bias is not None, device="meta")
    layer.weight, layer.bias = weight, bias
    return layer


def _batch_norm(cls: type[nn.Module]) -> Callable[[fx.GraphModule, fx.Node], nn.Module]:
    def build(model: fx.GraphModule, node: fx.Node) -> nn.Module:
        names = ("input", "weight", "bias", "running_mean", "running_var", "training", "momentum", "eps", "cudnn_enabled")
        a = _args(node, names)
        weight, mean = _tensor(model, a["weight"]), _tensor(model, a["running_mean"])
        layer = cls(
            mean.shape[0], eps=a["eps"], momentum=a["momentum"], affine=weight is not None,
            track_running_stats=mean is not None, device="meta",
        )  # fmt: skip
        layer.weight, layer.bias = weight, _tensor(model, a["bias"])
        layer.running_mean, layer.running_var = mean, _tensor(model, a["running_var"])
        counter = a["running_mean"].target.rpartition(".")[0] + ".num_batches_tracked"
        layer.num_batches_tracked = model.get_buffer(counter) if _has_buffer(model, counter) else torch.tensor(0)
        return layer

    return build


def _has_buffer(model: nn.Module, target: str) -> bool:
    try:
        model.get_buffer(target)
    except AttributeError:
        return False
    return True


def _stateless(cls: type[nn.Module], names: tuple[str, ...] = (), defaults: tuple[Any, ...] = ()) -> Callable:
    """A layer without parameters, from the ATen call's arguments after the input (``names``)."""

    def build(model: fx.GraphModule, node: fx.Node) -> nn.Module:
        a = _args(node, ("input", *names), defaults)
        if a.get("stride") == []:  # ATen's "stride = kernel_size"
            a["stride"] = None
        return cls(**{name: a[name] for name in names})

    return build


#: the torch.nn layer that made an ATen call (``nn_module_stack``) -> (the operators it makes, its builder)
LAYERS: dict[type[nn.Module], tuple[tuple[Any, ...], Callable[[fx.GraphModule, fx.Node], nn.Module]]] = {
    nn.Conv1d: ((aten.conv1d.default,), _conv(nn.Conv1d)),
    nn.Conv2d: ((aten.conv2d.default,), _conv(nn.Conv2d)),
    nn.Conv3d: ((aten.conv3d.default,), _conv(nn.Conv3d)),
    nn.Linear: ((aten.linear.default,), _linear),
    nn.BatchNorm1d: ((aten.batch_norm.default,), _batch_norm(nn.BatchNorm1d)),
    nn.BatchNorm2d: ((aten.batch_norm.default,), _batch_norm(nn.BatchNorm2d)),
    nn.BatchNorm3d: ((aten.batch_norm.default,), _batch_norm(nn.BatchNorm3d)),
    nn.ReLU: ((aten.relu.default, aten.relu_.default), _stateless(nn.ReLU)),
    nn.ReLU6: ((aten.hardtanh.default, aten.hardtanh_.default), _stateless(nn.ReLU6)),
    nn.SiLU: ((aten.silu.default, aten.silu_.default), _stateless(nn.SiLU)),
    nn.Sigmoid: ((aten.sigmoid.default,), _stateless(nn.Sigmoid)),
    nn.Tanh: ((aten.tanh.default,), _stateless(nn.Tanh)),
    nn.Hardswish: ((aten.hardswish.default, aten.hardswish_.default), _stateless(nn.Hardswish)),
    nn.Hardsigmoid: ((aten.hardsigmoid.default, aten.hardsigmoid_.default), _stateless(nn.Hardsigmoid)),
    nn.GELU: ((aten.gelu.default,), _stateless(nn.GELU, ("approximate",), ("none",))),
    nn.Mish: ((aten.mish.default, aten.mish_.default), _stateless(nn.Mish)),
    nn.ELU: ((aten.elu.default, aten.elu_.default), _stateless(nn.ELU, ("alpha",), (1.0,))),
    nn.MaxPool2d: (
        (aten.max_pool2d.default,),
        _stateless(nn.MaxPool2d, ("kernel_size", "stride", "padding", "dilation", "ceil_mode"), ((), 0, 1, False)),
    ),
    nn.AvgPool2d: (
        (aten.avg_pool2d.default,),
        _stateless(
            nn.AvgPool2d,
            ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override"),
            ((), 0, False, True, None),
        ),
    ),
    nn.AdaptiveAvgPool2d: ((aten.adaptive_avg_pool2d.default,), _stateless(nn.AdaptiveAvgPool2d, ("output_size",))),
    nn.Dropout: ((aten.dropout.default,), _stateless(nn.Dropout, ("p",), ())),
}

#: an ATen call outside those layers -> the function it stands for (same arguments)
FUNCTIONS: dict[Any, Callable[..., Any]] = {
    aten.relu.default: F.relu,
    aten.relu_.default: F.relu,
    aten.hardtanh.default: F.hardtanh,
    aten.hardtanh_.default: F.hardtanh,
    aten.silu.default: F.silu,
    aten.silu_.default: F.silu,
    aten.sigmoid.default: torch.sigmoid,
    aten.tanh.default: torch.tanh,
    aten.hardswish.default: F.hardswish,
    aten.hardsigmoid.default: F.hardsigmoid,
    aten.gelu.default: F.gelu,
    aten.mish.default: F.mish,
    aten.elu.default: F.elu,
    aten.add.Tensor: operator.add,
    aten.add_.Tensor: operator.add,
    aten.cat.default: torch.cat,
    aten.max_pool2d.default: F.max_pool2d,
    aten.avg_pool2d.default: F.avg_pool2d,
    aten.adaptive_avg_pool2d.default: F.adaptive_avg_pool2d,
    aten.mean.dim: torch.mean,
    aten.flatten.using_ints: torch.flatten,
    aten.reshape.default: torch.reshape,
    aten.transpose.int: torch.transpose,
    aten.dropout.default: F.dropout,
}
#: ATen calls that are tensor methods of the same arguments
METHODS: dict[Any, str] = {aten.view.default: "view", aten.permute.default: "permute"}

#: the torch.nn classes of LAYERS by the name ``nn_module_stack`` records
_BY_NAME = {f"{cls.__module__}.{cls.__qualname__}": cls for cls in LAYERS}


def is_exported(model: fx.GraphModule) -> bool:
    """Whether ``model`` is a graph of ATen operators (``torch.export``), not of the model's layers."""
    return any(node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) for node in model.graph.nodes)


def as_layers(model: fx.GraphModule) -> fx.GraphModule:
    """``model``'s ATen calls of ``torch.nn`` layers as those layers, its functional calls as Python
    functions, its shape guards removed (see the module)."""
    graph = model.graph
    guards = [n for n in graph.nodes if n.op == "call_module" and n.target == "_guards_fn"]
    for node in guards:
        graph.erase_node(node)
    if guards:
        delattr(model, "_guards_fn")
        logger.info("graph mode: removed torch.export's guard of the example's shapes, so that other batch sizes run")
    for node in list(graph.nodes):
        if node.op != "call_function":
            continue
        layer = _layer_of(node)
        if layer is not None:
            path, cls = layer
            _set_layer(model, path, LAYERS[cls][1](model, node))
            with graph.inserting_before(node):
                new = graph.call_module(path, (node.args[0],))
        elif node.target in FUNCTIONS and not (node.target in (aten.add.Tensor, aten.add_.Tensor) and "alpha" in node.kwargs):
            with graph.inserting_before(node):
                new = graph.call_function(FUNCTIONS[node.target], node.args, node.kwargs)
        elif node.target in METHODS:
            with graph.inserting_before(node):
                new = graph.call_method(METHODS[node.target], node.args, node.kwargs)
        else:
            continue
        new.meta = dict(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
    graph.eliminate_dead_code()
    graph.lint()
    model.delete_all_unused_submodules()
    model.recompile()
    return model


def _layer_of(node: fx.Node) -> tuple[str, type[nn.Module]] | None:
    """(path, class) of the ``torch.nn`` layer of :data:`LAYERS` whose forward made this ATen call."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return None
    path, cls_name = list(stack.values())[-1]
    cls = _BY_NAME.get(cls_name if isinstance(cls_name, str) else f"{cls_name.__module__}.{cls_name.__qualname__}")
    if cls is None or node.target not in LAYERS[cls][0] or not path:
        return None
    return path, cls


def _set_layer(model: fx.GraphModule, path: str, layer: nn.Module) -> None:
    """Put ``layer`` at ``path``, where ``torch.export`` left a plain container of its parameters (or nothing)."""
    parent_path, _, name = path.rpartition(".")
    parent = model.get_submodule(parent_path) if parent_path else model
    existing = parent._modules.get(name)
    if existing is not None and type(existing) is type(layer):  # the same layer called again (a shared ReLU)
        return
    parent._modules[name] = layer


def copy_model(model: nn.Module) -> nn.Module:
    """A deep copy of ``model``. torch 2.13 warns inside its own copy of a ``torch.export`` graph's input
    spec (``isinstance(treespec, LeafSpec)`` is deprecated, from torch's TreeSpec code): not the user's to
    act on, so that warning alone is silenced here."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"`isinstance\(treespec, LeafSpec\)` is deprecated", category=FutureWarning)
        return copy.deepcopy(model)
