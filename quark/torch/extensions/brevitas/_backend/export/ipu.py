"""The AMD IPU / NPU (Ryzen AI) hand-off: the XINT8 scheme on a QDQ graph at opset 17.

Two checks, each collecting every problem before raising one :class:`TargetCheckError`:

- :func:`check_specs`, before export: every quantizer of the model follows XINT8 (symmetric int8
  weights and activations, power-of-two scales, half-even rounding, static scales; int32 bias
  with scale = input scale x weight scale), and every quantized layer has its input, weight and
  bias quantized (a float operand runs on the CPU);
- :func:`check_graph`, on the written file: opset 17, static shapes, every Q/DQ scale an exact
  power of two, zero points 0, weights int8, biases int32 with scale = s_in * s_w.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer
from torch import nn

from quark.torch.extensions.brevitas._backend.export.errors import TargetCheckError
from quark.torch.extensions.brevitas._backend.export.requirements import (
    Requirement,
    dynamic_shapes,
    spec_problems,
)
from quark.torch.extensions.brevitas._backend.export.support import dtype_name
from quark.torch.quantization.config.type import RoundType, ScaleType

OPSET = 17


_DATA = frozenset({"activation", "weight"})
_BIAS = frozenset({"bias"})

#: XINT8, per quantizer role
REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        _DATA, "dtype", lambda s: s.format == "int" and s.bit_width == 8 and s.signed, dtype_name, "int8"
    ),
    Requirement(_DATA, "symmetric", lambda s: s.symmetric, lambda s: str(s.symmetric), "True (zero point 0)"),
    Requirement(
        _DATA | _BIAS,
        "scale_type",
        lambda s: s.tqt or s.scale_type is ScaleType.pof2 or s.bias_scale_from_product,
        lambda s: s.scale_type.name,
        "pof2 (power-of-two scales)",
    ),
    Requirement(
        _DATA,
        "round_method",
        lambda s: s.round_method is RoundType.half_even,
        lambda s: s.round_method.name,
        "half_even",
    ),
    Requirement(_DATA, "is_dynamic", lambda s: not s.is_dynamic, lambda s: str(s.is_dynamic), "False"),
    Requirement(_BIAS, "dtype", lambda s: s.bit_width == 32, lambda s: f"int{s.bit_width}", "int32"),
    Requirement(
        _BIAS,
        "observer_cls",
        lambda s: s.bias_scale_from_product,
        lambda s: s.observer.__name__,
        "None (bias scale = input scale x weight scale)",
    ),
)

_LAYER_ROLES = {"input_quant": "input_tensors", "weight_quant": "weight", "bias_quant": "bias"}


def check_specs(model: nn.Module, plans: Sequence[Any] = ()) -> None:
    """Raise :class:`TargetCheckError` unless every quantizer and quantized layer meets XINT8.

    ``plans`` (the model's recorded plans) name the layers whose input arrives quantized from
    upstream (graph mode): those have no input quantizer of their own.
    """
    quantized_upstream = {p.name for p in plans if "input_tensors" in getattr(p, "upstream", {})}
    problems = spec_problems(model, REQUIREMENTS, "IPU")
    for name, layer in model.named_modules():
        if not isinstance(layer, QuantWeightBiasInputOutputLayer) or not layer.weight_quant.is_quant_enabled:
            continue
        missing = [
            role
            for attr, role in _LAYER_ROLES.items()
            if not getattr(layer, attr).is_quant_enabled
            and (attr != "bias_quant" or layer.bias is not None)
            and (attr != "input_quant" or name not in quantized_upstream)
        ]
        if missing:
            problems.append(
                f"module {name!r} ({type(layer).__name__}): {', '.join(missing)} not quantized; the IPU runs a layer "
                "on the NPU only with its input, weight and bias quantized (quantize them or exclude the layer)"
            )
    _raise("the config cannot meet the IPU target (XINT8)", problems)


def check_graph(model) -> list[str]:
    """Check the written QDQ graph; return the checks passed or raise :class:`TargetCheckError`."""
    from quark.torch.extensions.brevitas._backend.export.verify import Graph, is_pof2

    graph = Graph(model)
    problems: list[str] = []
    opset = next((o.version for o in model.opset_import if o.domain in ("", "ai.onnx")), None)
    if opset != OPSET:
        problems.append(f"opset {opset}; the IPU target takes opset {OPSET}")
    problems += dynamic_shapes(model)
    for node in model.graph.node:
        if node.op_type not in ("QuantizeLinear", "DequantizeLinear"):
            continue
        where = f"{node.op_type} {node.name or node.output[0]!r}"
        scale = graph.scale(node)
        if scale is None or not is_pof2(scale):
            problems.append(f"{where}: scale {_show(scale)} is not an exact power of two")
        zero_point = graph.constants.get(node.input[2]) if len(node.input) > 2 else None
        if zero_point is not None and np.any(zero_point != 0):
            problems.append(f"{where}: zero point {_show(zero_point)}; the IPU takes 0")
        if zero_point is not None and zero_point.dtype not in (np.int8, np.int32):
            problems.append(
                f"{where}: zero point dtype {zero_point.dtype}; the IPU takes int8 (int32 for biases)"
            )
    for node in model.graph.node:
        if node.op_type in ("Conv", "Gemm", "MatMul"):
            problems.extend(_check_compute_node(graph, node))
    _raise("the exported graph does not meet the IPU target", problems)
    return [
        f"IPU: opset {OPSET}",
        "IPU: static input/output shapes",
        "IPU: Q/DQ scales exact powers of two, zero points 0",
        "IPU: weights int8, biases int32 with scale = s_in * s_w",
    ]


def _check_compute_node(graph, node) -> list[str]:
    where = f"{node.op_type} {node.name or node.output[0]!r}"
    problems = []
    dq = [graph.producer.get(i) if i else None for i in node.input]
    for index, (name, producer) in enumerate(zip(node.input, dq)):
        if name and (producer is None or producer.op_type != "DequantizeLinear"):
            problems.append(
                f"{where}: input {index} {name!r} is not dequantized from an integer (float operand)"
            )
    if problems:
        return problems
    weight = graph.constants.get(dq[1].input[0])
    if node.op_type != "MatMul" and (weight is None or weight.dtype != np.int8):
        problems.append(f"{where}: weight {dq[1].input[0]!r} is {_dtype(weight)}; the IPU takes int8")
    if len(node.input) > 2 and node.input[2]:
        bias = graph.constants.get(dq[2].input[0])
        if bias is None or bias.dtype != np.int32:
            problems.append(f"{where}: bias {dq[2].input[0]!r} is {_dtype(bias)}; the IPU takes int32")
        s_in, s_w, s_b = (graph.scale(p) for p in dq[:3])
        if s_in is not None and s_w is not None and s_b is not None:
            expected = np.asarray(s_in, np.float32) * np.asarray(s_w, np.float32)
            if np.broadcast(expected, s_b).shape != np.shape(s_b) or not np.array_equal(
                np.broadcast_to(expected, np.shape(s_b)), s_b
            ):
                problems.append(
                    f"{where}: bias scale {_show(s_b)} != input scale x weight scale {_show(expected)}"
                )
    return problems


def _show(values) -> str:
    if values is None:
        return "(not a constant)"
    flat = np.asarray(values).ravel()
    return f"{flat[:4].tolist()}{'...' if flat.size > 4 else ''}"


def _dtype(values) -> str:
    return "not a constant" if values is None else str(values.dtype)


def _raise(message: str, problems: list[str]) -> None:
    if problems:
        raise TargetCheckError(f"{message}:\n  " + "\n  ".join(problems), problems)
