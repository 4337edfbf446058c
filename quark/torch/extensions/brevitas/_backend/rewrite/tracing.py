"""Tracing for graph mode: ``torch.fx`` with errors that say what could not be traced, and the
functional calls graph mode quantizes turned into modules, named where they are called.

A model ``torch.fx.symbolic_trace`` cannot trace (data-dependent control flow, Python calls on
tensor values, ...) fails with :class:`UntraceableModelError`, naming the module being traced, the
source line and what to do: use the layerwise backend, or trace it yourself (``concrete_args``
for the values that steer control flow, leaf modules for the parts that cannot be traced) and
pass the resulting ``torch.fx.GraphModule``, which graph mode takes as it is.
"""

from __future__ import annotations

import inspect
import operator
import os
import traceback
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from brevitas.graph.standardize import DuplicateSharedStatelessModule
from torch import fx, nn
from torch.fx.operator_schemas import normalize_function

from quark.common.errors import FailedError
from quark.torch.extensions.brevitas._backend.rewrite import exported
from quark.torch.extensions.brevitas.graph import Add, Cat, QuantPoint
from quark.torch.quantization.plan import layer_type


class UntraceableModelError(FailedError):
    """``torch.fx`` could not trace the model for graph mode."""


#: our own site modules, kept as calls in the trace (torch.fx traces through modules outside torch.nn)
LEAVES: tuple[type[nn.Module], ...] = (QuantPoint,)


def trace(model: nn.Module) -> fx.GraphModule:
    """``model`` as a ``GraphModule`` (a ``GraphModule`` is taken as it is; one from ``torch.export``
    gets its layers back, :mod:`.exported`)."""
    if isinstance(model, fx.GraphModule):
        return exported.as_layers(model) if exported.is_exported(model) else model
    tracer = _Tracer()
    try:
        graph = tracer.trace(model)
    except Exception as error:  # torch.fx raises many types; name the call and the way out
        raise UntraceableModelError(_untraceable_message(model, tracer, error)) from error
    return fx.GraphModule(tracer.root, graph, type(model).__name__)


class _Tracer(fx.Tracer):
    """torch.fx's tracer, keeping our own site modules (``LEAVES``) and equivalent subclasses of torch
    layers (``EQUIVALENT_SUBCLASSES``) as leaves, as it keeps torch's own layers."""

    def is_leaf_module(self, m: nn.Module, module_qualified_name: str) -> bool:
        return (
            isinstance(m, LEAVES)
            or layer_type(m) is not type(m)
            or super().is_leaf_module(m, module_qualified_name)
        )


def _untraceable_message(model: nn.Module, tracer: fx.Tracer, error: Exception) -> str:
    stack = [path for path, _ in tracer.module_stack.values()]
    where = f"module {stack[-1]!r} ({type(model.get_submodule(stack[-1])).__name__})" if stack and stack[-1] else (
        f"{type(model).__name__}.forward"
    )
    frame = _user_frame(error)
    line = f" at {frame.filename}:{frame.lineno}: `{(frame.line or '').strip()}`" if frame else ""
    return (
        f"graph mode: torch.fx could not trace {where}{line}: {type(error).__name__}: {error}. "
        "Use the layerwise backend (Config.backend=Backend.layerwise, or quant_mode=QuantizationMode.eager_mode "
        "with the main API), or trace the model yourself and pass the torch.fx.GraphModule: "
        "torch.fx.symbolic_trace(model, concrete_args={...}) fixes the arguments that steer control flow, "
        "a torch.fx.Tracer subclass whose is_leaf_module returns True keeps a module untraced (left float)"
    )


_LIBRARY_DIRS = tuple(os.path.dirname(m.__file__) for m in (torch, fx))


def _user_frame(error: Exception) -> traceback.FrameSummary | None:
    """The innermost frame of the failing call outside torch: the user's line."""
    frames = traceback.extract_tb(error.__traceback__)
    outside = [f for f in frames if not f.filename.startswith(_LIBRARY_DIRS) and f.filename != __file__]
    return outside[-1] if outside else None


# -- functional calls -> modules -------------------------------------------------------------------

#: functional activations and pools -> (module class, its keyword arguments taken from the call)
FUNCTIONAL_MODULES: dict[Callable[..., Any], tuple[type[nn.Module], tuple[str, ...]]] = {
    F.relu: (nn.ReLU, ()),
    F.relu_: (nn.ReLU, ()),
    torch.relu: (nn.ReLU, ()),
    torch.relu_: (nn.ReLU, ()),
    F.relu6: (nn.ReLU6, ()),
    F.hardtanh: (nn.Hardtanh, ("min_val", "max_val")),
    F.leaky_relu: (nn.LeakyReLU, ("negative_slope",)),
    F.gelu: (nn.GELU, ("approximate",)),
    F.silu: (nn.SiLU, ()),
    F.hardswish: (nn.Hardswish, ()),
    F.hardsigmoid: (nn.Hardsigmoid, ()),
    F.mish: (nn.Mish, ()),
    F.elu: (nn.ELU, ("alpha",)),
    F.sigmoid: (nn.Sigmoid, ()),
    torch.sigmoid: (nn.Sigmoid, ()),
    F.tanh: (nn.Tanh, ()),
    torch.tanh: (nn.Tanh, ()),
    F.avg_pool2d: (nn.AvgPool2d, ("kernel_size", "stride", "padding", "ceil_mode", "count_include_pad", "divisor_override")),
    F.adaptive_avg_pool2d: (nn.AdaptiveAvgPool2d, ("output_size",)),
    F.softmax: (nn.Softmax, ("dim",)),
    torch.softmax: (nn.Softmax, ("dim",)),
}
#: tensor methods -> module class
METHOD_ACTIVATIONS: dict[str, type[nn.Module]] = {
    "relu": nn.ReLU,
    "relu_": nn.ReLU,
    "sigmoid": nn.Sigmoid,
    "tanh": nn.Tanh,
}
#: additions of two tensors (functions and methods)
ADD_FUNCTIONS = (operator.add, operator.iadd, torch.add)
ADD_METHODS = ("add", "add_")
CAT_FUNCTIONS = (torch.cat, torch.concat, torch.concatenate)
#: calls whose results are sizes, not tensors: an addition of those is no tensor addition
SHAPE_METHODS = ("size", "dim", "numel")


def as_modules(graph_model: fx.GraphModule) -> fx.GraphModule:
    """Functional activations, additions and concatenations as modules, one per call.

    Each new module is registered at ``<path of the calling module>.<function name>`` (``_1``,
    ``_2``, ... when taken), so names, ``layer_quant_config`` patterns and ``exclude`` follow the
    model's hierarchy. Stateless modules called more than once are duplicated (Brevitas'
    ``DuplicateSharedStatelessModule``), so each call can have its own quantizer.
    """
    graph_model = DuplicateSharedStatelessModule().apply(graph_model)
    taken = {name for name, _ in graph_model.named_modules()}
    for node in list(graph_model.graph.nodes):
        made = _module_for(node)
        if made is None:
            continue
        module, base, args, flatten = made
        name = _free_name(_owner(node), base, taken)
        taken.add(name)
        graph_model.add_submodule(name, module)
        with graph_model.graph.inserting_after(node):
            new = graph_model.graph.call_module(name, args)
        new.meta = dict(node.meta)
        if flatten:  # a mean over the spatial axes without keepdim: pooled to 1x1, then flattened
            with graph_model.graph.inserting_after(new):
                new = graph_model.graph.call_function(torch.flatten, (new, 1))
        node.replace_all_uses_with(new)
        graph_model.graph.erase_node(node)
    graph_model.graph.lint()
    graph_model.recompile()
    return graph_model


def _module_for(node: fx.Node) -> tuple[nn.Module, str, tuple[Any, ...], bool] | None:
    """(module, base name, call arguments, flatten its result?) replacing ``node``, or None."""
    if node.op == "call_function" and node.target in FUNCTIONAL_MODULES:
        cls, names = FUNCTIONAL_MODULES[node.target]
        bound = _bind(node)
        if bound is None:
            return None
        first, *_ = bound.values()
        return cls(**{k: v for k, v in bound.items() if k in names}), cls.__name__.lower(), (first,), False
    if node.op == "call_method" and node.target in METHOD_ACTIVATIONS and len(node.args) == 1 and not node.kwargs:
        cls = METHOD_ACTIVATIONS[node.target]
        return cls(), cls.__name__.lower(), (node.args[0],), False
    if _is_tensor_add(node):
        return Add(), "add", tuple(node.args), False
    if node.op == "call_function" and node.target in CAT_FUNCTIONS and set(node.kwargs) <= {"dim", "axis"}:
        tensors, *rest = node.args
        dim = rest[0] if rest else next(iter(node.kwargs.values()), 0)
        return Cat(), "cat", (tensors, dim), False
    spatial_mean = _spatial_mean(node)
    if spatial_mean is not None:
        return nn.AdaptiveAvgPool2d(1), "mean", (node.args[0],), not spatial_mean
    return None


def _spatial_mean(node: fx.Node) -> bool | None:
    """``x.mean((2, 3))`` / ``torch.mean(x, (-2, -1), keepdim)`` of a 4-D tensor: its keepdim; else None."""
    if not ((node.op == "call_method" and node.target == "mean") or (node.op == "call_function" and node.target is torch.mean)):
        return None
    args = dict(zip(("input", "dim", "keepdim"), node.args)) | dict(node.kwargs)
    if set(args) - {"input", "dim", "keepdim"} or not isinstance(args.get("dim"), (tuple, list)):
        return None
    return bool(args.get("keepdim", False)) if sorted(args["dim"]) in ([2, 3], [-2, -1]) else None


def _bind(node: fx.Node) -> dict[str, Any] | None:
    """The call's arguments by parameter name, defaults included (torch's operator schemas for
    builtins); None when the call does not fit one signature."""
    try:
        normalized = normalize_function(node.target, tuple(node.args), dict(node.kwargs), normalize_to_only_use_kwargs=True)
    except (TypeError, ValueError, RuntimeError):
        normalized = None
    if normalized is not None:
        return dict(normalized.kwargs)
    try:
        bound = inspect.signature(node.target).bind(*node.args, **node.kwargs)
    except (TypeError, ValueError):
        if len(node.args) == 1 and not node.kwargs:  # no schema found: the input alone
            return {"input": node.args[0]}
        return None
    bound.apply_defaults()
    return dict(bound.arguments)


def _is_tensor_add(node: fx.Node) -> bool:
    is_add = (node.op == "call_function" and node.target in ADD_FUNCTIONS) or (
        node.op == "call_method" and node.target in ADD_METHODS
    )
    return (
        is_add
        and len(node.args) == 2
        and not node.kwargs
        and all(isinstance(a, fx.Node) and not _is_shape_value(a) for a in node.args)
    )


def _is_shape_value(node: fx.Node, depth: int = 8) -> bool:
    """Whether ``node`` computes a size (x.size(0), x.shape[1] + 1, ...) rather than a tensor."""
    if depth == 0:
        return False
    if node.op == "call_method" and node.target in SHAPE_METHODS:
        return True
    if node.op == "call_function" and node.target is getattr and node.args[1:2] == ("shape",):
        return True
    if node.op == "call_function" and node.target in (operator.getitem, *ADD_FUNCTIONS, operator.mul, operator.sub):
        return any(isinstance(a, fx.Node) and _is_shape_value(a, depth - 1) for a in node.args)
    return False


def _owner(node: fx.Node) -> str:
    """Path of the module whose forward makes the call ('' at the top level)."""
    stack = node.meta.get("nn_module_stack") or {}
    if not stack:
        return ""
    path, _ = list(stack.values())[-1]
    return path


def _free_name(owner: str, base: str, taken: set[str]) -> str:
    prefix = f"{owner}." if owner else ""
    name, index = f"{prefix}{base}", 0
    while name in taken:
        index += 1
        name = f"{prefix}{base}_{index}"
    return name
