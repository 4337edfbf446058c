"""The FINN target (``target_device=DeviceType.FINN``): a QONNX graph FINN turns into an integer
dataflow. Requirements as table rows, each with the config field that fixes it:

- :data:`REQUIREMENTS`, per quantizer, and :data:`SITE_REQUIREMENTS`, per graph site, checked
  before export by :func:`check_specs` (every problem reported at once, in one
  :class:`TargetCheckError`); they are what FINN's ``ConvertQONNXtoFINN`` rejects or converts
  into something else than the model computes;
- :func:`check_graph`, on the written QONNX file: static shapes, no shape-computing subgraph;
- :func:`integer_input`, for the hand-off: the network input's quantizer becomes a scale on an
  input FINN sees as integers (``UINT8`` / ``INT8`` ... annotation), as FINN's dataflow takes it.

Measured with finn-plus 1.6.1 / qonnx 1.0.0 (tests/export/test_finn_target.py has a case per row).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.export.errors import TargetCheckError
from quark.torch.extensions.brevitas._backend.export.requirements import (
    Requirement,
    dynamic_shapes,
    spec_problems,
)
from quark.torch.extensions.brevitas._backend.export.support import dtype_name
from quark.torch.extensions.brevitas.graph import GraphInput
from quark.torch.quantization.config.type import RoundType
from quark.torch.quantization.tensor_quant import TensorQuant

logger = logging.getLogger(__name__)

#: widest quantizer FINN's ConvertQONNXtoFINN turns into a MultiThreshold (its default filter)
MAX_BITS = 8


_ACT = frozenset({"activation"})
_DATA = frozenset({"activation", "weight"})


def _finn_rounding(spec: TensorQuant) -> bool:
    # on an unsigned grid (x >= 0 after clamping) ties away from zero are ties up as well
    return spec.round_method is RoundType.half_up or (not spec.signed and spec.round_method is RoundType.round)


REQUIREMENTS: tuple[Requirement, ...] = (
    Requirement(
        _DATA,
        "dtype",
        lambda s: s.format == "int" and s.bit_width <= MAX_BITS,
        dtype_name,
        f"integers of 2..{MAX_BITS} bits",
        f"FINN turns integer quantizers of at most {MAX_BITS} bits into thresholds and integer weights",
    ),
    Requirement(
        _DATA,
        "symmetric",
        lambda s: s.symmetric,
        lambda s: str(s.symmetric),
        "True (zero point 0)",
        "ConvertQONNXtoFINN: 'Only Quant nodes with zero-point == 0 are currently supported'",
    ),
    Requirement(
        _ACT,
        "is_dynamic",
        lambda s: not s.is_dynamic,
        lambda s: str(s.is_dynamic),
        "False",
        "thresholds are fixed in hardware",
    ),
    Requirement(
        _ACT,
        "round_method",
        _finn_rounding,
        lambda s: s.round_method.name,
        "half_up (or round on an unsigned grid)",
        "FINN's MultiThreshold counts x >= (k + 1/2) steps, i.e. rounds ties up, whatever the Quant node says",
    ),
)


@dataclass(frozen=True)
class SiteRequirement:
    """What a graph site must be for FINN: ``problem(plans)`` yields (site, what, field that fixes it)."""

    refuses: str
    problems: Callable[[Sequence[Any]], list[tuple[str, str, str]]]
    reason: str


def _not_graph_mode(plans: Sequence[Any]) -> list[tuple[str, str, str]]:
    if any(p.module_type is GraphInput for p in plans):
        return []
    return [
        (
            "model",
            "quantized layer by layer: the tensors between layers stay float",
            "Config.quant_mode=QuantizationMode.fx_graph_mode (main API) or Config.backend=Backend.fx",
        )
    ]


def _input_float(plans: Sequence[Any]) -> list[tuple[str, str, str]]:
    return [
        (p.name, "network input not quantized", "input_tensors of layer_type_quant_config['GraphInput'] (or global)")
        for p in plans
        if p.module_type is GraphInput and p.specs["input_tensors"] is None
    ]


def _signed_after_relu(plans: Sequence[Any]) -> list[tuple[str, str, str]]:
    return [
        (
            p.name,
            f"ReLU output quantized signed ({dtype_name(p.specs['output_tensors'])})",
            (
                f"an unsigned dtype (uint{p.specs['output_tensors'].bit_width}) for "
                "layer_type_quant_config['ReLU'].output_tensors"
            ),
        )
        for p in plans
        if p.module_type is nn.ReLU and p.specs["output_tensors"] is not None and p.specs["output_tensors"].signed
    ]


SITE_REQUIREMENTS: tuple[SiteRequirement, ...] = (
    SiteRequirement(
        "a model quantized layer by layer",
        _not_graph_mode,
        "FINN streamlines a graph into integers only where every tensor between layers is quantized",
    ),
    SiteRequirement(
        "a float network input",
        _input_float,
        "FINN's dataflow takes integers: the input quantizer becomes the input's integer type",
    ),
    SiteRequirement(
        "a signed quantizer after ReLU",
        _signed_after_relu,
        "ConvertQONNXtoFINN: 'FINN only supports unsigned and non-narrow Quant nodes for Relu activations'",
    ),
)

#: activation types whose quantizer FINN turns into thresholds; others stay float nodes
THRESHOLD_ACTIVATIONS = (nn.ReLU,)


def check_specs(model: nn.Module, plans: Sequence[Any]) -> None:
    """Raise :class:`TargetCheckError` naming every quantizer and site FINN rejects, with the fix."""
    problems = spec_problems(model, REQUIREMENTS, "FINN")
    for req in SITE_REQUIREMENTS:
        problems += [f"site {site!r}: {what}; set {fix} ({req.reason})" for site, what, fix in req.problems(plans)]
    if problems:
        raise TargetCheckError("the config cannot meet the FINN target:\n  " + "\n  ".join(problems), problems)
    kept_float = sorted(
        {f"{p.name} ({p.module_type.__name__})" for p in plans if _activation(p) and p.module_type not in THRESHOLD_ACTIVATIONS}
    )
    if kept_float:
        logger.warning(
            "FINN keeps these activations as float nodes between its integer layers (only ReLU quantizers "
            "become thresholds): %s",
            ", ".join(kept_float),
        )


def _activation(plan: Any) -> bool:
    from quark.torch.extensions.brevitas._backend.rewrite.graph import ACTIVATIONS

    return plan.module_type in ACTIVATIONS and plan.quantized


def check_graph(model) -> list[str]:
    """Check the written QONNX graph; return the checks passed or raise :class:`TargetCheckError`."""
    problems = dynamic_shapes(model)
    shape_ops = [n.name or n.output[0] for n in model.graph.node if n.op_type == "Shape"]
    if shape_ops:
        problems.append(
            f"shape-computing nodes {shape_ops} (e.g. x.view(x.size(0), -1)); FINN needs static shapes: use nn.Flatten"
        )
    if problems:
        raise TargetCheckError("the exported graph does not meet the FINN target:\n  " + "\n  ".join(problems), problems)
    return ["FINN: static input/output shapes", "FINN: no shape-computing subgraph"]


@dataclass(frozen=True)
class IntegerInput:
    """The network input FINN sees: integers of ``datatype``; feed ``round(x / scale)``."""

    name: str
    datatype: str
    scale: float
    narrow: bool = False
    rounding_mode: str = "ROUND"

    def integers(self, x: Any) -> Any:
        """The integers the removed quantizer would have produced from float inputs ``x`` (qonnx's own
        ``int_quant``: clamping and rounding as the ``Quant`` node did)."""
        import numpy as np
        from qonnx.core.datatype import DataType
        from qonnx.custom_op.general.intquant import int_quant

        dtype = DataType[self.datatype]
        x = np.asarray(x, dtype=np.float32)
        bits, signed = np.float32(dtype.bitwidth()), dtype.signed()  # qonnx computes its bounds in numpy
        quantized = int_quant(x, self.scale, 0.0, bits, signed, self.narrow, self.rounding_mode)
        return np.asarray(quantized / self.scale, dtype=np.float32)


def integer_input(qonnx_path: str | os.PathLike, output_path: str | os.PathLike | None = None) -> IntegerInput:
    """Make the QONNX graph's input integer, as FINN's dataflow takes it.

    The input's quantizer (a ``Quant`` node right after the graph input, per-tensor, zero point
    0) becomes a ``Mul`` by its scale, and the input is annotated with the quantizer's integer type
    (``UINT8``, ``INT4``, ...). The same outputs then come from ``round(x / scale)`` (x on the
    quantizer's grid: the values the torch model's input quantizer produces, divided by the scale).
    Writes ``output_path`` (default: overwrite) and returns what the input now is.
    """
    import numpy as np
    from onnx import helper
    from qonnx.core.datatype import DataType
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.util.cleanup import cleanup_model

    model = cleanup_model(ModelWrapper(os.fspath(qonnx_path)))
    name = model.graph.input[0].name
    consumers = model.find_consumers(name)
    quant = consumers[0] if consumers and len(consumers) == 1 else None
    if quant is None or quant.op_type != "Quant":
        raise TargetCheckError(
            f"integer_input: the graph input {name!r} does not feed one Quant node; quantize the network input "
            "(graph mode: input_tensors of the GraphInput site)",
            [f"input {name!r}"],
        )
    scale, zero_point, bits = (model.get_initializer(i) for i in quant.input[1:4])
    if scale is None or np.size(scale) != 1 or np.any(zero_point != 0):
        raise TargetCheckError(
            f"integer_input: the input quantizer of {name!r} must be per tensor with zero point 0",
            [f"input {name!r}"],
        )
    attributes = {a.name: helper.get_attribute_value(a) for a in quant.attribute}
    signed, narrow = bool(attributes.get("signed", 1)), bool(attributes.get("narrow", 0))
    rounding_mode = attributes.get("rounding_mode", b"ROUND").decode()
    datatype = f"{'INT' if signed else 'UINT'}{int(bits)}"
    scale_name = model.make_new_valueinfo_name()
    model.set_initializer(scale_name, np.asarray(scale, dtype=np.float32).reshape(()))
    mul = helper.make_node("Mul", [name, scale_name], [quant.output[0]], name=f"{quant.name}_as_input_scale")
    index = list(model.graph.node).index(quant)
    model.graph.node.remove(quant)
    model.graph.node.insert(index, mul)
    model.set_tensor_datatype(name, DataType[datatype])
    model.save(os.fspath(output_path or qonnx_path))
    return IntegerInput(name, datatype, float(np.asarray(scale).reshape(())), narrow, rounding_mode)


#: FINN graph nodes computing a layer's products
COMPUTE_OPS = frozenset({"Conv", "MatMul", "Gemm", "ConvTranspose"})


def float_operations(model) -> list[str]:
    """Nodes of a FINN graph (a ``ModelWrapper`` or path) that compute on floats between its first
    and last compute node: those whose output qonnx's ``InferDataTypes`` does not find integer.
    An integer dataflow has none; the float scale and bias after the last layer are not counted."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.infer_datatypes import InferDataTypes

    if not isinstance(model, ModelWrapper):
        model = ModelWrapper(os.fspath(model))
    model = model.transform(InferDataTypes())
    nodes = list(model.graph.node)
    compute = [i for i, n in enumerate(nodes) if n.op_type in COMPUTE_OPS]
    if not compute:
        return []
    return [
        f"{n.op_type} {n.name}"
        for n in nodes[compute[0] : compute[-1]]
        if not model.get_tensor_datatype(n.output[0]).is_integer()
    ]


def markdown() -> str:
    """The FINN requirements as a markdown table (docs/export.md embeds it; a test keeps it in sync)."""
    lines = ["| refused | allowed | why |", "|---|---|---|"]
    lines += [
        f"| {'/'.join(sorted(r.roles))} `{r.field}` | {r.allowed} | {r.reason} |" for r in REQUIREMENTS
    ]
    lines += [f"| {r.refuses} | - | {r.reason} |" for r in SITE_REQUIREMENTS]
    return "\n".join(lines)
