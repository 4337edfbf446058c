"""FINN's front end on a QONNX file: conversion, streamlining, hardware layers, one dataflow
partition; every step executed and compared with the QONNX graph, and every node FINN could not
map named with its torch module and the change that fixes it.
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.export.finn_dataflow.errors import FinnDataflowError
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.origins import named, tag_origins
from quark.torch.extensions.brevitas._backend.export.finn_dataflow.steps import (
    FRONT_END,
    MAX_THRESHOLD_BITS,
    top_k_step,
)
from quark.torch.extensions.brevitas._backend.export.safe_graph import load_checked

logger = logging.getLogger(__name__)

#: float tolerance of a step against the QONNX graph, relative to max(1, max|output|): FINN folds
#: scales, biases and batch norm into thresholds in float arithmetic
STEP_RTOL = 1e-5



def execute(model, samples: np.ndarray) -> np.ndarray:
    """Outputs of ``model`` (batch size 1, FINN's) on each sample, stacked."""
    from qonnx.core.onnx_exec import execute_onnx

    name_in, name_out = model.graph.input[0].name, model.graph.output[0].name
    return np.concatenate([execute_onnx(model, {name_in: x[None]})[name_out] for x in samples])


def max_diff(produced: np.ndarray, reference: np.ndarray) -> float:
    if produced.shape != reference.shape:
        return math.inf
    return float(np.max(np.abs(produced.astype(np.float64) - reference.astype(np.float64))))


@dataclass(frozen=True)
class StepCheck:
    """One FINN step, executed on the check samples and compared with the QONNX graph."""

    name: str
    max_abs_diff: float
    op_types: dict[str, int]

    def describe(self) -> str:
        ops = ", ".join(f"{k} x{v}" for k, v in sorted(self.op_types.items()))
        return f"{self.name}: max |diff| {self.max_abs_diff:.3g}; {ops}"


# -- refusals: what FINN left outside the hardware, and the change that fixes it ------------------

#: data movement FINN leaves to the host at the graph's edges (its driver packs NHWC data)
LAYOUT_OPS = frozenset({"Transpose", "Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity"})

#: op type left outside the hardware -> the model or config change that lets FINN map it
UNMAPPED_FIXES: dict[str, str] = {
    "Mul": "a float scale streamlining could not absorb: follow the layer with a quantized activation "
    "(QuantReLU / QuantIdentity) so the scale folds into its thresholds, and give both inputs of an "
    "addition or concatenation one shared quantizer",
    "Add": "a float bias or sum streamlining could not absorb: requantize after it (QuantReLU / QuantIdentity) "
    "and give both summands of a residual addition one shared quantizer",
    "Sub": "as Add: requantize after it",
    "Div": "a float division: fold it into the preceding layer or requantize after it",
    "MatMul": "a matrix product with a float operand: quantize the layer's input (QuantIdentity / QuantReLU "
    "before it) and its weights to integers",
    "Conv": "a convolution FINN cannot lower (dilation, or groups other than 1 or the channel count): "
    "use dilation 1 and plain or depthwise convolutions",
    "MultiThreshold": "a quantized activation on a float input: quantize the tensor feeding it",
    "Quant": f"a quantizer wider than {MAX_THRESHOLD_BITS} bits: use at most {MAX_THRESHOLD_BITS}-bit "
    "activations",
    "Relu": "a float ReLU: use an unsigned QuantReLU (FINN turns it into thresholds)",
    "Sigmoid": "a float activation: follow it with a quantizer (QuantIdentity) or use QuantHardTanh/QuantReLU",
    "Tanh": "a float activation: follow it with a quantizer (QuantIdentity) or use QuantHardTanh",
    "AveragePool": "float average pooling: use Brevitas' TruncAvgPool2d so the result stays integer",
    "GlobalAveragePool": "float average pooling: use Brevitas' TruncAdaptiveAvgPool2d",
    "BatchNormalization": "batch norm with no quantized activation after it: follow it with a QuantReLU / "
    "QuantIdentity (FINN absorbs it into the thresholds) or merge it into the preceding layer",
    "Transpose": "a layout change between hardware layers: keep tensors NCHW and avoid permute()/transpose()",
    "Reshape": "a reshape between hardware layers: flatten once, before the fully connected head (nn.Flatten)",
    "TopK": "top-k on a float input (FINN's LabelSelect takes integers): drop the last layer's bias (its "
    "per-tensor scale is absorbed) or quantize its output",
}


def _fix(op_type: str) -> str:
    return UNMAPPED_FIXES.get(
        op_type, f"FINN 1.6.1 has no hardware layer for {op_type}: replace the module, or run it on the host"
    )


def _is_hw(node) -> bool:
    return node.domain.startswith("finn.custom_op.fpgadataflow")


def _unmapped(model) -> list[str]:
    """Nodes that are not hardware layers, except data movement before the first or after the
    last hardware layer (what FINN's CreateDataflowPartition leaves to the host)."""
    nodes = list(model.graph.node)
    hw = [i for i, n in enumerate(nodes) if _is_hw(n)]
    if not hw:
        return [f"{named(model, n)}: {_fix(n.op_type)}" for n in nodes]
    inner = range(hw[0], hw[-1] + 1)
    return [
        f"{named(model, n)}: {_fix(n.op_type)}"
        for i, n in enumerate(nodes)
        if not _is_hw(n) and (i in inner or n.op_type not in LAYOUT_OPS)
    ]


def _partition(model, directory: str):
    """FINN's ``step_create_dataflow_partition``: the parent graph and its one partition."""
    from finn.transformation.fpgadataflow.create_dataflow_partition import CreateDataflowPartition
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    problems = _unmapped(model)
    if problems:
        raise FinnDataflowError(
            f"FINN could not map {len(problems)} node(s) to hardware layers; each needs the change named",
            problems,
        )
    parent = model.transform(CreateDataflowPartition(partition_model_dir=directory))
    partitions = parent.get_nodes_by_op_type("StreamingDataflowPartition")
    if len(partitions) != 1:
        raise FinnDataflowError(f"FINN made {len(partitions)} dataflow partitions; one is needed")
    return parent, ModelWrapper(getCustomOp(partitions[0]).get_nodeattr("model"))


@dataclass
class Dataflow:
    """The result of the front end: the parent graph, its one partition, the step checks."""

    parent: Any  # ModelWrapper: host-side layout nodes + one StreamingDataflowPartition
    partition: Any  # ModelWrapper: the hardware layers
    steps: list[StepCheck]
    outside: list[str]  # nodes of the parent graph outside the partition (layout only)
    float_layers: list[str]  # hardware layers with a float input or output (FINN warns likewise)


def dataflow_from_qonnx(
    qonnx_path: str | os.PathLike,
    inputs: np.ndarray,
    work_dir: str | os.PathLike,
    *,
    top_k: int | None = None,
    rtol: float = STEP_RTOL,
) -> Dataflow:
    """FINN's front end on a QONNX file: conversion, streamlining, hardware layers, one partition.

    Every step is executed on ``inputs`` (a few samples, batch first; FINN graphs take one sample
    at a time) and compared with the cleaned QONNX graph within ``rtol * max(1, max|ref|)``
    (with ``top_k`` the last step's indices must equal the reference's top-k).

    Raises:
        FinnDataflowError: a step fails or changes the outputs (names the step), or nodes remain
            outside the hardware (names each with its torch module and the change that fixes it).
    """
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.transformation.change_batchsize import ChangeBatchSize
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes
    from qonnx.util.cleanup import cleanup_model

    qonnx_path, work_dir = os.fspath(qonnx_path), os.fspath(work_dir)
    model = ModelWrapper(load_checked(qonnx_path))  # before qonnx imports what the node domains name
    if len(model.graph.input) != 1 or len(model.graph.output) != 1:
        raise FinnDataflowError(
            f"{qonnx_path}: {len(model.graph.input)} inputs and {len(model.graph.output)} outputs; "
            "FINN's dataflow takes one input and one output"
        )
    tag_origins(model)
    model = cleanup_model(model)
    model = model.transform(ChangeBatchSize(1)).transform(InferShapes()).transform(InferDataTypes())
    samples = np.asarray(inputs, dtype=np.float32)
    reference = execute(model, samples)
    steps = [StepCheck("QONNX (cleaned, batch 1)", 0.0, dict(Counter(n.op_type for n in model.graph.node)))]
    chain = list(FRONT_END)
    if top_k is not None:
        chain.insert(2, (f"top-{top_k}", top_k_step(top_k)))
    labels = top_indices(reference, top_k) if top_k is not None else None
    allowed = rtol * max(1.0, float(np.max(np.abs(reference))))
    for name, step in chain:
        try:
            model = step(model)
            produced = execute(model, samples)
        except Exception as error:
            raise FinnDataflowError(
                f"FINN step '{name}' failed on {qonnx_path}: {type(error).__name__}: {error}"
            ) from error
        labelled = labels is not None and any(model.get_nodes_by_op_type(t) for t in ("TopK", "LabelSelect"))
        diff = max_diff(produced, labels if labelled else reference)
        steps.append(StepCheck(name, diff, dict(Counter(n.op_type for n in model.graph.node))))
        logger.info("FINN %s", steps[-1].describe())
        if not diff <= (0.0 if labelled else allowed):
            raise FinnDataflowError(
                f"FINN step '{name}' changed the outputs of {qonnx_path}: max |diff| {diff:.6g} > allowed "
                f"{0.0 if labelled else allowed:.6g}{_tie_hint(name)}"
            )
    parent, partition = _partition(model, os.path.join(work_dir, "partitions"))
    outside = [named(parent, n) for n in parent.graph.node if n.op_type != "StreamingDataflowPartition"]
    return Dataflow(parent, partition, steps, outside, _float_layers(partition))


def top_indices(outputs: np.ndarray, k: int) -> np.ndarray:
    """Indices of the k largest outputs, largest first (ties: lower index first)."""
    return np.argsort(-outputs, axis=-1, kind="stable")[..., :k]


def _tie_hint(step: str) -> str:
    if step != "ConvertQONNXtoFINN":
        return ""
    return (
        " (FINN's thresholds round ties up, whatever the Quant node's rounding_mode: a quantizer that "
        "requantizes values already on a grid, e.g. after a residual addition, must round half up: "
        "RoundType.round, exported as HALF_UP)"
    )


def _float_layers(partition) -> list[str]:
    from qonnx.core.datatype import DataType

    found = []
    for node in partition.graph.node:
        tensors = [t for t in [*node.input, *node.output] if partition.get_initializer(t) is None]
        if any(partition.get_tensor_datatype(t) == DataType["FLOAT32"] for t in tensors):
            found.append(named(partition, node))
    return found
