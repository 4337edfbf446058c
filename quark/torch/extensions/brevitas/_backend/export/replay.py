"""Verification of QDQ graphs with float operations between their quantizers, quantizer by quantizer.

A layerwise-quantized transformer quantizes its layers' inputs; between them, MatMul, Softmax,
LayerNorm and GELU stay float. torch and ONNX Runtime compute those in different orders (the float
model's export of all-MiniLM-L6-v2 differs by 4e-6 at its output), and a quantizer also rounds a
little differently in each: ONNX's QuantizeLinear computes round(x / s) + zp, Brevitas (and AMD
Quark) round(x / s + zp), which differs where adding zp in float32 loses x / s's last bits or a tie
meets an odd zero point. Wherever a value lies that close to a rounding boundary, the two round it to
neighbouring levels, and each such one-LSB flip moves everything after it: all-MiniLM-L6-v2, A8W8
layerwise, differs by 0.24 at its output (1e-5 allowed) although both compute the same function.

So, where the plain comparison of a graph that is not exact fails (an exact graph, of power-of-two
scales, computes the same in any runtime), the graph is checked quantizer by quantizer (teacher forcing):
each activation quantizer of the torch model is fed the float input the graph computed for its
QuantizeLinear, its result must equal the graph's DequantizeLinear output within one LSB of its own
scale, and only at values within float32's rounding of a rounding boundary (the flips above; another
rounding mode or grid differs elsewhere too), and the graph's values are passed on, so
that every segment between quantizers (the quantized layers' weights and biases, the float operations)
is compared on the same integers with the usual tolerance. The graph's QuantizeLinear nodes pair with
the model's activation quantizers in the order of their calls (the order the exporter traced them
in), each with the next call of the module its name's scope names (a quantizer whose result the graph
does not use has no node: it is left out); a graph where a node finds no call keeps the plain result.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import onnx
import torch
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from brevitas.quant_tensor import QuantTensor
from torch import nn

#: QuantizeLinear nodes added after data movement (:mod:`.qdq`): requantize quantized values, exactly
PROPAGATED = "_qdq_Q"
#: the exporter's scope of a quantizer's nodes: ``/<module path>/export_handler[_<n>]/QuantizeLinear``
HANDLER = "export_handler"


@dataclass(frozen=True)
class Replay:
    """The torch model's outputs replayed on the graph's quantizers, and what the quantizers showed."""

    expected: list[np.ndarray]
    quantizers: int
    flipped: int  # values a torch quantizer put one LSB from the graph's, on the same input
    values: int  # values the quantizers quantized
    worst_lsb: float  # the largest quantizer difference, in its LSBs (a flip away from a rounding boundary: inf)


def quantizer_tensors(onnx_model: onnx.ModelProto) -> list[tuple[str, str, str]]:
    """(the module path in the node's name, the tensor each QuantizeLinear reads, the tensor its
    DequantizeLinear gives), in graph order: the order of the quantizers' calls, which the exporter
    records as it traces the model. The path is the exporter's scope (``/<path>/export_handler/...``),
    which in a ``GraphModule`` holds only the last part of the module's path."""
    dequantized = {n.input[0]: n.output[0] for n in onnx_model.graph.node if n.op_type == "DequantizeLinear"}
    return [
        (node.name.strip("/").split(f"/{HANDLER}")[0].replace("/", "."), node.input[0], dequantized.get(node.output[0], ""))
        for node in onnx_model.graph.node
        if node.op_type == "QuantizeLinear" and not node.name.endswith(PROPAGATED)
    ]


def pair_calls(calls: list[str], nodes: list[tuple[str, str, str]]) -> dict[int, int] | None:
    """Call index -> node index: each node takes the next call whose module path it names (its path, or
    the path's end); calls without a node (a quantizer whose result the graph does not use, dropped by
    the exporter) are left out. None when a node finds no call."""
    paired, node = {}, 0
    for index, path in enumerate(calls):
        if node < len(nodes) and (path == nodes[node][0] or path.endswith("." + nodes[node][0])):
            paired[index] = node
            node += 1
    return paired if node == len(nodes) else None


def quantizer_calls(model: nn.Module, run_model: Callable[[nn.Module], Any]) -> list[str]:
    """The module paths of the activation quantizers that quantize, in the order one forward pass calls them."""
    calls: list[str] = []
    handles = [
        module.register_forward_hook(lambda m, a, o, path=path: calls.append(path))
        for path, module in model.named_modules()
        if isinstance(module, ActQuantProxyFromInjectorBase) and module.is_quant_enabled
    ]
    try:
        with torch.no_grad():
            run_model(model.eval())
    finally:
        for handle in handles:
            handle.remove()
    return calls


def replay(
    model: nn.Module,
    run_model: Callable[[nn.Module], Any],
    onnx_model: onnx.ModelProto,
    feeds: Sequence[np.ndarray],
    run_graph: Callable[[onnx.ModelProto, Sequence[np.ndarray]], list[np.ndarray]],
    flatten: Callable[[Any], list[torch.Tensor]],
) -> Replay | None:
    """The quantizer-by-quantizer comparison of the module docstring; None where it does not apply (the
    graph's quantizers and the model's calls do not pair up one to one)."""
    training = model.training
    nodes = quantizer_tensors(onnx_model)
    calls = quantizer_calls(model, run_model)
    paired = pair_calls(calls, nodes) if nodes and all(dq for _, _, dq in nodes) else None
    if paired is None:
        model.train(training)
        return None
    probed = onnx.ModelProto()
    probed.CopyFrom(onnx_model)
    outputs = len(probed.graph.output)
    tensors = list(dict.fromkeys(t for _, q, dq in nodes for t in (q, dq)))
    probed.graph.output.extend(onnx.helper.make_tensor_value_info(t, onnx.TensorProto.FLOAT, None) for t in tensors)
    results = run_graph(probed, feeds)
    if len(results) != outputs + len(tensors):  # a runner that gives the graph's outputs only
        model.train(training)
        return None
    graph = dict(zip(tensors, results[outputs:], strict=True))
    seen: dict[str, Any] = {"call": 0, "fed": 0, "flipped": 0, "values": 0, "worst": 0.0, "mismatched": False, "input": None}

    def feed(module: nn.Module, args: tuple[Any, ...]) -> tuple[Any, ...]:
        if seen["call"] not in paired:  # no node in the graph: runs as it is
            return args
        current = getattr(args[0], "value", args[0])
        given = torch.from_numpy(graph[nodes[paired[seen["call"]]][1]])
        if tuple(given.shape) != tuple(current.shape):
            seen["mismatched"] = True
            return args
        seen["input"] = given.to(current)
        return (seen["input"], *args[1:])

    def take(module: nn.Module, args: tuple[Any, ...], output: Any) -> Any:
        call = seen["call"]
        seen["call"] += 1
        if call not in paired:
            return output
        dq = nodes[paired[call]][2]
        seen["fed"] += 1
        ours = getattr(output, "value", output)
        theirs = torch.from_numpy(graph[dq]).to(ours)
        if seen["mismatched"] or theirs.shape != ours.shape:
            seen["mismatched"] = True
            return output
        quantized = output if isinstance(output, QuantTensor) else None
        scale = torch.as_tensor(quantized.scale if quantized is not None else module.scale()).to(ours)
        zero_point = torch.as_tensor(quantized.zero_point if quantized is not None else module.zero_point()).to(ours)
        steps = ((ours - theirs).abs() / scale).round()
        flips = steps > 0
        seen["flipped"] += int(flips.sum())
        seen["values"] += ours.numel()
        worst = float(steps.max()) if steps.numel() else 0.0
        if flips.any() and not _at_boundaries(seen["input"], scale, zero_point, flips):
            worst = float("inf")
        seen["worst"] = max(seen["worst"], worst)
        return output._replace(value=theirs) if isinstance(output, QuantTensor) else theirs

    handles = []
    for path in dict.fromkeys(calls):
        module = model.get_submodule(path)
        handles += [module.register_forward_pre_hook(feed), module.register_forward_hook(take)]
    try:
        with torch.no_grad():
            produced = flatten(run_model(model.eval()))
    finally:
        for handle in handles:
            handle.remove()
        model.train(training)
    if seen["mismatched"] or seen["fed"] != len(nodes):
        return None
    expected = [t.detach().float().cpu().numpy() for t in produced]
    return Replay(expected, len(nodes), seen["flipped"], seen["values"], seen["worst"])


def _at_boundaries(x: torch.Tensor, scale: torch.Tensor, zero_point: torch.Tensor, flips: torch.Tensor) -> bool:
    """Whether every flipped value's x / s + zp lies within float32's rounding of a half-integer (a
    rounding boundary): where torch's round(x / s + zp) and ONNX's round(x / s) + zp may differ."""
    v = (x.double() / scale.double() + zero_point.double()).expand_as(x)[flips]
    distance = (v - torch.floor(v) - 0.5).abs()
    quotient = (x.double() / scale.double()).expand_as(x)[flips].abs()
    margin = 2 * (_spacing(v.abs()) + _spacing(quotient))
    return bool((distance <= margin).all())


def _spacing(values: torch.Tensor) -> torch.Tensor:
    """float32's spacing at each value."""
    return torch.from_numpy(np.spacing(values.float().numpy())).double()
