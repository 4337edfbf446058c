"""Which torch module a FINN node came from, so refusals and estimates can name it.

TorchScript-exported node names carry the module path; cleanup and FINN's transformations rename
and create nodes, so the path is recorded on every node (``metadata_props``) before, and new nodes
inherit it from the node that used the same weights or tensors.
"""

from __future__ import annotations

import contextlib
import io
import logging

logger = logging.getLogger(__name__)

#: node metadata key carrying the torch module a node came from
ORIGIN = "quark_module"

#: scopes Brevitas adds below a layer in exported node names ('/conv1/weight_quant/export_handler/Quant')
#: (graph mode wraps an activation's quantizer as ``quant``, an addition's as ``input_quant`` /
#: ``output_quant``: the module a user knows is the one above them)
_QUANT_SCOPES = (
    "export_handler",
    "activation_impl",
    "act_quant",
    "weight_quant",
    "bias_quant",
    "quant",
    "input_quant",
    "output_quant",
)


def module_of(node_name: str) -> str | None:
    """The torch module path in a TorchScript-exported node name, or None.

    '/blocks/blocks.0/conv1/Conv' -> 'blocks.0.conv1' (the exporter repeats the parent's name in a
    child's scope); '/0/act_quant/export_handler/Quant' -> '0'.
    """
    if not node_name.startswith("/"):
        return None
    scopes = node_name.strip("/").split("/")[:-1]
    cut = next((i for i, s in enumerate(scopes) if s.rstrip("_0123456789") in _QUANT_SCOPES), len(scopes))
    parts, previous = [], ""
    for scope in scopes[:cut]:
        parts.append(scope[len(previous) + 1 :] if previous and scope.startswith(previous + ".") else scope)
        previous = scope
    return ".".join(parts) or None


def _tag(node) -> str | None:
    return next((p.value for p in node.metadata_props if p.key == ORIGIN), None)


def _set_tag(node, module: str) -> None:
    entry = node.metadata_props.add()
    entry.key, entry.value = ORIGIN, module


def tag_origins(model) -> None:
    """Record on every node the torch module its name carries (cleanup renames the nodes)."""
    for node in model.graph.node:
        module = module_of(node.name)
        if module and _tag(node) is None:
            _set_tag(node, module)


def run_transform(model, transform):
    """``model.transform(transform)``, then untagged new nodes inherit the module of the node that
    used the same weights, or produced or consumed the same tensor, before (FINN builds new nodes
    for hardware layers, keeping tensor names)."""
    before: dict[str, str] = {}
    for node in model.graph.node:
        module = _tag(node)
        if module:
            for tensor in [*node.output, *node.input]:
                before.setdefault(tensor, module)
    with contextlib.redirect_stdout(io.StringIO()) as printed:  # FINN prints its progress
        model = model.transform(transform)
    for line in printed.getvalue().splitlines():
        logger.debug("FINN %s: %s", type(transform).__name__, line)
    initializers = {tensor.name for tensor in model.graph.initializer}
    for node in model.graph.node:
        if _tag(node) is None:
            weights = [t for t in node.input if t in initializers]
            module = next((before[t] for t in [*weights, *node.output, *node.input] if t in before), None)
            if module:
                _set_tag(node, module)
    return model


def origin(model, node, hops: int = 6) -> str | None:
    """The torch module of ``node``: its own tag, else the nearest tagged producer, then consumer."""
    frontier, seen = [node], {node.name}
    for _ in range(hops + 1):
        for candidate in frontier:
            if _tag(candidate):
                return _tag(candidate)
        following = []
        for candidate in frontier:
            neighbours = [model.find_producer(t) for t in candidate.input]
            for t in candidate.output:
                neighbours += model.find_consumers(t) or []
            for n in neighbours:
                if n is not None and n.name not in seen:
                    seen.add(n.name)
                    following.append(n)
        frontier = following
    return None


#: FINN layers that move or reshape a stream for the layer they feed (padding, sliding windows,
#: width converters, FIFOs): they are reported with the module of that layer
_FEEDERS = ("FMPadding", "ConvolutionInputGenerator", "StreamingDataWidthConverter", "StreamingFIFO")
#: FINN layers that scale or shift a layer's output by constants (its float scale and bias)
_ELEMENTWISE = ("ElementwiseMul", "ElementwiseAdd", "ChannelwiseOp")


def _base(op_type: str) -> str:
    return op_type.split("_")[0]  # 'ConvolutionInputGenerator_rtl' -> 'ConvolutionInputGenerator'


def layer_module(model, node, hops: int = 8) -> str | None:
    """The torch module a hardware layer implements (for the estimate report).

    A padding, sliding-window, width-converter or FIFO layer is reported with the module of the
    layer it feeds (a pool's window belongs to the pool); a constant scale or bias of a layer's
    output with that layer; every other layer with its own origin (:func:`origin`).
    """
    base = _base(node.op_type)
    if base in _FEEDERS and hops:
        consumers = [c for t in node.output for c in (model.find_consumers(t) or [])]
        if len(consumers) == 1:
            return layer_module(model, consumers[0], hops - 1)
    if base in _ELEMENTWISE:
        constants = [t for t in node.input if model.get_initializer(t) is not None]
        streams = [t for t in node.input if model.get_initializer(t) is None]
        if constants and len(streams) == 1:
            producer = model.find_producer(streams[0])
            if producer is not None and _base(producer.op_type) in ("MVAU", "VVAU"):
                return layer_module(model, producer, hops - 1 if hops else 0)
    return origin(model, node)


def named(model, node) -> str:
    module = origin(model, node)
    return f"{node.name} ({node.op_type}{', module ' + repr(module) if module else ''})"
