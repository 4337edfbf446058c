"""FINN's dataflow back half: a QONNX file to one dataflow partition of hardware layers, folded
for an FPGA part and a target throughput, with FINN's resource and cycle estimates, and verified by
executing the hardware graph in Python.

The steps are FINN's own transformations in the order of FINN's builder steps
(``step_qonnx_to_finn``, ``step_tidy_up``, ``step_streamline``, ``step_convert_to_hw``,
``step_create_dataflow_partition``, ``step_specialize_layers``,
``step_target_fps_parallelization``, ``step_minimize_bit_width``,
``step_generate_estimate_reports``). They are called directly because
``finn.builder.build_dataflow_steps`` does not import without Vivado (it loads FINN's simulator
and pandas at import time); what this module adds is the verification after every step, the
residual/concat streamlining of FINN's ResNet example, the check that one partition holds every
compute node, and the report against the part's capacity.

FPGA users read: :func:`dataflow_from_qonnx` (steps 1-4 of the module docstring of
``docs/export.md``), :func:`estimate` and :func:`export_finn_dataflow`.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import math
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from functools import partial
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.export.fpga_parts import FpgaPart, resolve

logger = logging.getLogger(__name__)

#: float tolerance of a step against the QONNX graph, relative to max(1, max|output|): FINN folds
#: scales, biases and batch norm into thresholds in float arithmetic
STEP_RTOL = 1e-5
#: FINN's default for ``max_multithreshold_bit_width`` (Quant nodes wider than this are not
#: converted to thresholds) and for the MVAU weight stream width (``mvau_wwidth_max``)
MAX_THRESHOLD_BITS, MVAU_WWIDTH_MAX = 8, 36
#: node metadata key carrying the torch module a node came from
ORIGIN = "quark_module"


class FinnDataflowError(RuntimeError):
    """A FINN step failed, changed the outputs, or left compute outside the dataflow partition.

    ``problems`` has one line per offending node or layer (its torch module where known).
    """

    def __init__(self, message: str, problems: Sequence[str] = ()):
        super().__init__(message if not problems else message + "\n  " + "\n  ".join(problems))
        self.problems = list(problems)


# -- where a node came from ------------------------------------------------------------------------

#: scopes Brevitas adds below a layer in exported node names ('/conv1/weight_quant/export_handler/Quant')
_QUANT_SCOPES = ("export_handler", "activation_impl", "act_quant", "weight_quant", "bias_quant")


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


def _tag_origins(model) -> None:
    """Record on every node the torch module its name carries (cleanup renames the nodes)."""
    for node in model.graph.node:
        module = module_of(node.name)
        if module and _tag(node) is None:
            _set_tag(node, module)


def _transform(model, transform):
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
    for node in model.graph.node:
        if _tag(node) is None:
            weights = [t for t in node.input if model.get_initializer(t) is not None]
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


def _named(model, node) -> str:
    module = origin(model, node)
    return f"{node.name} ({node.op_type}{', module ' + repr(module) if module else ''})"


# -- executing graphs ------------------------------------------------------------------------------


def _execute(model, samples: np.ndarray) -> np.ndarray:
    """Outputs of ``model`` (batch size 1, FINN's) on each sample, stacked."""
    from qonnx.core.onnx_exec import execute_onnx

    name_in, name_out = model.graph.input[0].name, model.graph.output[0].name
    return np.concatenate([execute_onnx(model, {name_in: x[None]})[name_out] for x in samples])


def _max_diff(produced: np.ndarray, reference: np.ndarray) -> float:
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


# -- the steps -------------------------------------------------------------------------------------


def _tidy(model):
    """FINN's ``step_tidy_up``."""
    from qonnx.transformation.fold_constants import FoldConstants
    from qonnx.transformation.general import (
        GiveReadableTensorNames,
        GiveUniqueNodeNames,
        RemoveStaticGraphInputs,
    )
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    for transform in (
        InferShapes(),
        FoldConstants(),
        GiveUniqueNodeNames(),
        GiveReadableTensorNames(),
        InferDataTypes(),
        RemoveStaticGraphInputs(),
    ):
        model = _transform(model, transform)
    return model


def _to_finn(model):
    """FINN's ``step_qonnx_to_finn``: Quant nodes become MultiThreshold nodes and integer weights."""
    from finn.transformation.qonnx.convert_qonnx_to_finn import ConvertQONNXtoFINN
    from finn.transformation.qonnx.quant_act_to_multithreshold import default_filter_function_generator

    convert = ConvertQONNXtoFINN(
        filter_function=default_filter_function_generator(max_multithreshold_bit_width=MAX_THRESHOLD_BITS)
    )
    return _tidy(_transform(model, convert))


def _streamline(model):
    """FINN's ``step_streamline`` (as in its TFC and CNV examples), then the passes FINN's
    residual examples add for forks, joins and concatenations (``StreamlinePlus``: move scales
    and biases past forks, elementwise adds and concats, absorb transposes), and the
    threshold rounding of its ResNet example."""
    from finn.transformation.streamline import Streamline, absorb
    from finn.transformation.streamline.reorder import MakeMaxPoolNHWC
    from finn.transformation.streamline.round_thresholds import RoundAndClipThresholds
    from qonnx.transformation.bipolar_to_xnor import ConvertBipolarMatMulToXnorPopcount
    from qonnx.transformation.general import RemoveUnusedTensors
    from qonnx.transformation.infer_data_layouts import InferDataLayouts
    from qonnx.transformation.lower_convs_to_matmul import LowerConvsToMatMul

    branches = _branches(model)
    passes: list[Any] = [absorb.AbsorbScalarBiasIntoMultiThreshold(), Streamline()]
    if branches:  # before MaxPool becomes MaxPoolNHWC, which scales cannot pass
        passes += [_scales_past_branches(), Streamline()]
    if model.get_nodes_by_op_type("Conv"):
        passes += [
            LowerConvsToMatMul(),
            MakeMaxPoolNHWC(),
            absorb.AbsorbTransposeIntoMultiThreshold(),
            MakeMaxPoolNHWC(),
            absorb.AbsorbConsecutiveTransposes(),
        ]
    passes += [ConvertBipolarMatMulToXnorPopcount(), Streamline()]
    if branches:  # the layout group of StreamlinePlus: transposes past forks and joins, until they cancel
        passes.append(_transposes_past_branches())
    passes += [
        RoundAndClipThresholds(),
        absorb.AbsorbScalarMulAddIntoTopK(),
        InferDataLayouts(),
        RemoveUnusedTensors(),
    ]
    for transform in passes:
        model = _transform(model, transform)
    return _tidy(model)


def _scales_past_branches():
    """The residual and concat groups of FINN's ``StreamlinePlus``: scales and biases through
    forks, residual additions and concatenations (StreamlinePlus whole repeats the standard
    group exhaustively too, which took most of the 40 s the ResNet-like network needed)."""
    from finn.transformation.streamline import reorder
    from qonnx.transformation.composed import ComposedTransformation

    return ComposedTransformation(
        [
            reorder.MoveLinearPastEltwiseAdd(),
            reorder.MoveChannelwiseLinearPastFork(),
            reorder.MoveScalarLinearPastInvariants(),
            reorder.MoveMulPastFork(),
            reorder.MoveMulPastJoinAdd(),
            reorder.MoveAddPastJoinAdd(),
            reorder.MoveConstMulPastJoinMul(),
            reorder.MoveAffinePastJoinConcat(),
            reorder.MoveMulPastJoinConcat(),
            reorder.MoveAddPastJoinConcat(),
        ]
    )


def _transposes_past_branches():
    """The layout group of FINN's ``StreamlinePlus``: transposes through forks and joins."""
    from finn.transformation.streamline import absorb, collapse_repeated, remove, reorder
    from qonnx.transformation.composed import ComposedTransformation

    return ComposedTransformation(
        [
            reorder.MoveTransposePastFork(),
            reorder.MoveTransposePastJoinConcat(),
            reorder.MoveTransposePastEltwise(),
            reorder.MoveTransposePastJoinMul(),
            reorder.MoveTransposePastJoinAdd(),
            collapse_repeated.CollapseRepeatedTranspose(),
            remove.RemoveIdentityTranspose(),
            absorb.AbsorbTransposeIntoMultiThreshold(),
            absorb.AbsorbConsecutiveTransposes(),
        ]
    )


def _branches(model) -> bool:
    """Whether some tensor feeds more than one node (a residual fork or a concat's branches)."""
    uses = Counter(t for n in model.graph.node for t in n.input)
    return any(uses[t] > 1 for t in uses if model.get_initializer(t) is None)


def _top_k(k: int):
    def insert(model):
        from finn.transformation.streamline.absorb import AbsorbScalarMulAddIntoTopK
        from qonnx.transformation.insert_topk import InsertTopK

        model = _transform(model, InsertTopK(k=k))
        return _tidy(_transform(model, AbsorbScalarMulAddIntoTopK()))

    return insert


def _hw_conversions() -> tuple[tuple[tuple[str, ...], Callable[[], Any]], ...]:
    """FINN's ``step_convert_to_hw`` (standalone_thresholds=False, its default): which op types
    trigger which conversion, in FINN's order. An empty trigger runs always."""
    from finn.transformation.fpgadataflow.convert_to_hw import (
        binary_matrix_vector_activation as bmvau,
    )
    from finn.transformation.fpgadataflow.convert_to_hw import (
        concat,
        conv_inp_gen,
        duplicate_streams,
        elementwise_binary_operation,
        fm_padding,
        global_acc_pool,
        label_select,
        pool,
        requant,
        thresholding,
        vector_vector_activation,
    )
    from finn.transformation.fpgadataflow.convert_to_hw import quantized_matrix_vector_activation as mvau
    from finn.transformation.move_reshape import RemoveCNVtoFCFlatten

    elementwise = (
        "Mul",
        "Div",
        "Sub",
        "Add",
        "And",
        "Or",
        "Xor",
        "Equal",
        "Less",
        "LessOrEqual",
        "Greater",
        "GreaterOrEqual",
    )
    return (
        (("XnorPopcountMatMul",), bmvau.InferBinaryMatrixVectorActivation),
        (("MatMul",), mvau.InferQuantizedMatrixVectorActivation),
        (("MatMul",), vector_vector_activation.InferVectorVectorActivation),
        (("TopK",), label_select.InferLabelSelectLayer),
        (
            ("MultiThreshold", "Quant"),
            partial(requant.InferRequantLayer, bitwidth_threshold=MAX_THRESHOLD_BITS + 1),
        ),
        (("MultiThreshold",), thresholding.InferThresholdingLayer),
        (("Pad",), fm_padding.InferFMPadding),
        (("MaxPool", "AveragePool", "MaxPoolNHWC", "QuantAvgPool2d"), pool.InferPool),
        (("Im2Col",), conv_inp_gen.InferConvInpGen),
        (("ConvolutionInputGenerator",), RemoveCNVtoFCFlatten),
        (("Concat",), concat.InferConcatLayer),
        (elementwise, elementwise_binary_operation.InferElementwiseBinaryOperation),
        (("GlobalAveragePool",), global_acc_pool.InferGlobalAccPoolLayer),
        ((), duplicate_streams.InferDuplicateStreamsLayer),
    )


def _to_hw(model):
    from finn.transformation.move_reshape import RemoveCNVtoFCFlatten
    from finn.transformation.streamline import absorb
    from qonnx.transformation.infer_data_layouts import InferDataLayouts

    for triggers, conversion in _hw_conversions():
        if not triggers or any(model.get_nodes_by_op_type(t) for t in triggers):
            model = _transform(model, conversion())
    for transform in (absorb.AbsorbConsecutiveTransposes(), RemoveCNVtoFCFlatten(), InferDataLayouts()):
        model = _transform(model, transform)
    return _tidy(model)


#: the front-end steps, each executed and compared with the QONNX graph
FRONT_END: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("ConvertQONNXtoFINN", _to_finn),
    ("streamline", _streamline),
    ("convert to hardware layers", _to_hw),
)


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
        return [f"{_named(model, n)}: {_fix(n.op_type)}" for n in nodes]
    inner = range(hw[0], hw[-1] + 1)
    return [
        f"{_named(model, n)}: {_fix(n.op_type)}"
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
    model = ModelWrapper(qonnx_path)
    if len(model.graph.input) != 1 or len(model.graph.output) != 1:
        raise FinnDataflowError(
            f"{qonnx_path}: {len(model.graph.input)} inputs and {len(model.graph.output)} outputs; "
            "FINN's dataflow takes one input and one output"
        )
    _tag_origins(model)
    model = cleanup_model(model)
    model = model.transform(ChangeBatchSize(1)).transform(InferShapes()).transform(InferDataTypes())
    samples = np.asarray(inputs, dtype=np.float32)
    reference = _execute(model, samples)
    steps = [StepCheck("QONNX (cleaned, batch 1)", 0.0, dict(Counter(n.op_type for n in model.graph.node)))]
    chain = list(FRONT_END)
    if top_k is not None:
        chain.insert(2, (f"top-{top_k}", _top_k(top_k)))
    labels = _top_indices(reference, top_k) if top_k is not None else None
    allowed = rtol * max(1.0, float(np.max(np.abs(reference))))
    for name, step in chain:
        try:
            model = step(model)
            produced = _execute(model, samples)
        except Exception as error:
            raise FinnDataflowError(
                f"FINN step '{name}' failed on {qonnx_path}: {type(error).__name__}: {error}"
            ) from error
        labelled = labels is not None and any(model.get_nodes_by_op_type(t) for t in ("TopK", "LabelSelect"))
        diff = _max_diff(produced, labels if labelled else reference)
        steps.append(StepCheck(name, diff, dict(Counter(n.op_type for n in model.graph.node))))
        logger.info("FINN %s", steps[-1].describe())
        if not diff <= (0.0 if labelled else allowed):
            raise FinnDataflowError(
                f"FINN step '{name}' changed the outputs of {qonnx_path}: max |diff| {diff:.6g} > allowed "
                f"{0.0 if labelled else allowed:.6g}{_tie_hint(name)}"
            )
    parent, partition = _partition(model, os.path.join(work_dir, "partitions"))
    outside = [_named(parent, n) for n in parent.graph.node if n.op_type != "StreamingDataflowPartition"]
    return Dataflow(parent, partition, steps, outside, _float_layers(partition))


def _top_indices(outputs: np.ndarray, k: int) -> np.ndarray:
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
            found.append(_named(partition, node))
    return found


# -- fit and speed for a part ----------------------------------------------------------------------

#: resources FINN's analytical models estimate (no flip-flop model), compared with the part
ESTIMATED = ("LUT", "BRAM_18K", "URAM", "DSP")
#: folding attributes reported and written to the folding configuration (FINN's list in
#: ``step_target_fps_parallelization``)
FOLDING_ATTRIBUTES = (
    "PE",
    "SIMD",
    "parallel_window",
    "ram_style",
    "ram_style_thresholds",
    "resType",
    "mem_mode",
    "runtime_writeable_weights",
)


@dataclass(frozen=True)
class LayerEstimate:
    """One hardware layer: FINN's resource and cycle estimates at its folding."""

    name: str
    op_type: str
    module: str | None
    resources: dict[str, float]  # ESTIMATED -> count
    cycles: int  # per frame
    folding: dict[str, Any]  # PE, SIMD, ... where the layer has them
    shape: dict[str, Any]  # the attributes that bound the folding (MW, MH, NumChannels, ...)


@dataclass(frozen=True)
class Estimate:
    """Fit and speed of the folded dataflow on a part, at a clock and a target throughput."""

    part: FpgaPart
    clock_mhz: float
    target_fps: float | None
    layers: tuple[LayerEstimate, ...]
    max_cycles: int
    bottleneck: str
    critical_path_cycles: int
    folding_notes: tuple[str, ...]  # what FINN's SetFolding reported
    problems: tuple[str, ...] = ()  # does not fit / misses the target: the layer and what to change

    @property
    def totals(self) -> dict[str, float]:
        return {r: float(sum(layer.resources[r] for layer in self.layers)) for r in ESTIMATED}

    @property
    def utilization(self) -> dict[str, float]:
        capacity = self.part.capacity
        return {
            r: (v / capacity[r] if capacity[r] else (math.inf if v else 0.0)) for r, v in self.totals.items()
        }

    @property
    def fps(self) -> float:
        return self.clock_mhz * 1e6 / self.max_cycles

    @property
    def latency_ms(self) -> float:
        return self.critical_path_cycles / (self.clock_mhz * 1e3)

    @property
    def fits(self) -> bool:
        return all(u <= 1.0 for u in self.utilization.values())

    @property
    def meets_target(self) -> bool:
        return self.target_fps is None or self.fps >= self.target_fps * (1 - 1e-9)

    def to_json(self) -> dict[str, Any]:
        return {
            "part": asdict(self.part),
            "clock_mhz": self.clock_mhz,
            "target_fps": self.target_fps,
            "estimated_fps": self.fps,
            "latency_ms": self.latency_ms,
            "max_cycles": self.max_cycles,
            "bottleneck": self.bottleneck,
            "critical_path_cycles": self.critical_path_cycles,
            "totals": self.totals,
            "utilization": self.utilization,
            "fits": self.fits,
            "meets_target": self.meets_target,
            "problems": list(self.problems),
            "folding_notes": list(self.folding_notes),
            "layers": [asdict(layer) for layer in self.layers],
        }

    def markdown(self) -> str:
        target = f"{self.target_fps:g} fps" if self.target_fps else "none (PE = SIMD = 1)"
        lines = [
            f"# FINN estimate: {self.part.part} at {self.clock_mhz:g} MHz",
            "",
            (
                f"Target: {target}. Estimated: **{self.fps:,.0f} fps**, latency {self.latency_ms:.4g} ms "
                f"({self.critical_path_cycles} cycles), bottleneck {self.bottleneck} ({self.max_cycles} cycles "
                f"per frame). Fits: **{'yes' if self.fits else 'no'}**; meets the target: "
                f"**{'yes' if self.meets_target else 'no'}**."
            ),
            "",
            "| layer | module | folding | cycles | " + " | ".join(ESTIMATED) + " |",
            "|---|---|---|---|" + "---|" * len(ESTIMATED),
        ]
        for layer in self.layers:
            folding = ", ".join(f"{k}={v}" for k, v in layer.folding.items() if k in ("PE", "SIMD"))
            figures = " | ".join(f"{layer.resources[r]:,.0f}" for r in ESTIMATED)
            lines.append(
                f"| {layer.name} | {layer.module or ''} | {folding} | {layer.cycles:,} | {figures} |"
            )
        totals = self.totals
        lines.append("| **total** | | | | " + " | ".join(f"**{totals[r]:,.0f}**" for r in ESTIMATED) + " |")
        lines.append(
            f"| **{self.part.part}** | | | | "
            + " | ".join(f"{self.part.capacity[r]:,}" for r in ESTIMATED)
            + " |"
        )
        lines.append(
            "| **used** | | | | " + " | ".join(f"{100 * self.utilization[r]:.1f} %" for r in ESTIMATED) + " |"
        )
        if self.problems:
            lines += ["", "## Problems", "", *(f"- {p}" for p in self.problems)]
        if self.folding_notes:
            lines += ["", "## FINN's folding notes", "", *(f"- {n}" for n in self.folding_notes)]
        lines += [
            "",
            (
                f"Capacity: {self.part.source}. Estimates: FINN's analytical models (res_estimation, "
                "exp_cycles_per_layer, dataflow_performance); no flip-flop model."
            ),
        ]
        return "\n".join(lines) + "\n"


class _Collect(logging.Handler):
    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(" ".join(record.getMessage().split()))


def fold_and_estimate(
    partition,
    part: str | FpgaPart,
    *,
    target_fps: float | None = None,
    clock_mhz: float = 100.0,
    mvau_wwidth_max: int = MVAU_WWIDTH_MAX,
):
    """Specialize the partition's layers for ``part``, fold them for ``target_fps`` at
    ``clock_mhz`` (FINN's SetFolding; without a target every layer keeps PE = SIMD = 1), minimize
    bit widths, and estimate resources and cycles. Returns (folded model, :class:`Estimate`)."""
    from finn.analysis.fpgadataflow.dataflow_performance import dataflow_performance
    from finn.analysis.fpgadataflow.exp_cycles_per_layer import exp_cycles_per_layer
    from finn.analysis.fpgadataflow.res_estimation import res_estimation
    from finn.transformation.fpgadataflow.annotate_cycles import AnnotateCycles
    from finn.transformation.fpgadataflow.minimize_accumulator_width import MinimizeAccumulatorWidth
    from finn.transformation.fpgadataflow.minimize_weight_bit_width import MinimizeWeightBitWidth
    from finn.transformation.fpgadataflow.set_folding import SetFolding
    from finn.transformation.fpgadataflow.specialize_layers import SpecializeLayers
    from qonnx.transformation.general import GiveUniqueNodeNames
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    fpga = part if isinstance(part, FpgaPart) else resolve(part)
    if not (isinstance(clock_mhz, (int, float)) and clock_mhz > 0):
        raise ValueError(f"clock_mhz={clock_mhz!r}: expected a frequency in MHz > 0")
    if target_fps is not None and not (isinstance(target_fps, (int, float)) and target_fps > 0):
        raise ValueError(f"target_fps={target_fps!r}: expected frames per second > 0, or None")
    model = partition
    for transform in (SpecializeLayers(fpga.part), GiveUniqueNodeNames(), InferShapes(), InferDataTypes()):
        model = _transform(model, transform)
    notes = _Collect()
    finn_log = logging.getLogger("finn_logger")
    finn_log.addHandler(notes)
    propagate, finn_log.propagate = finn_log.propagate, False  # FINN's notes go to the report
    try:
        if target_fps is not None:
            cycles = max(1, int(clock_mhz * 1e6 / target_fps))
            model = _transform(
                model, SetFolding(cycles, mvau_wwidth_max=mvau_wwidth_max, two_pass_relaxation=True)
            )
        for transform in (
            MinimizeWeightBitWidth(),
            MinimizeAccumulatorWidth(),
            InferDataTypes(),
            AnnotateCycles(),
        ):
            model = _transform(model, transform)
    finally:
        finn_log.removeHandler(notes)
        finn_log.propagate = propagate
    resources = model.analysis(partial(res_estimation, fpgapart=fpga.part))
    cycles = model.analysis(exp_cycles_per_layer)
    performance = model.analysis(dataflow_performance)
    layers = tuple(
        _layer_estimate(model, node, resources[node.name], cycles[node.name]) for node in model.graph.node
    )
    estimate = Estimate(
        fpga,
        float(clock_mhz),
        None if target_fps is None else float(target_fps),
        layers,
        int(performance["max_cycles"]),
        str(performance["max_cycles_node_name"]),
        int(performance["critical_path_cycles"]),
        tuple(dict.fromkeys(notes.messages)),
    )
    estimate = Estimate(**{**estimate.__dict__, "problems": tuple(_problems(estimate, mvau_wwidth_max))})
    logger.info("FINN estimate on %s: %.0f fps, %s", fpga.part, estimate.fps, estimate.totals)
    return model, estimate


#: node attributes that bound a layer's folding, reported with it
_SHAPE_ATTRIBUTES = (
    "MW",
    "MH",
    "Channels",
    "NumChannels",
    "IFMChannels",
    "Kernel",
    "Dim",
    "IFMDim",
    "numInputVectors",
)


def _layer_estimate(model, node, resources: dict[str, Any], cycles: float) -> LayerEstimate:
    from qonnx.custom_op.registry import getCustomOp

    op = getCustomOp(node)
    attributes = {a.name for a in node.attribute}

    def attrs(names):
        return {n: _plain(op.get_nodeattr(n)) for n in names if n in attributes}

    return LayerEstimate(
        node.name,
        node.op_type,
        origin(model, node),
        {r: float(resources.get(r, 0)) for r in ESTIMATED},
        int(cycles),
        attrs(FOLDING_ATTRIBUTES),
        attrs(_SHAPE_ATTRIBUTES),
    )


def _plain(value):
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, bytes):
        return value.decode()
    return value.item() if hasattr(value, "item") else value


def _problems(estimate: Estimate, mvau_wwidth_max: int) -> list[str]:
    """What keeps the design from the target or the part: the layer, its numbers, what to change."""
    problems = []
    if not estimate.meets_target:
        target_cycles = estimate.clock_mhz * 1e6 / estimate.target_fps
        slow = sorted(
            (layer for layer in estimate.layers if layer.cycles > target_cycles),
            key=lambda item: -item.cycles,
        )
        named = [
            layer
            for layer in slow
            if any(
                note.startswith(layer.name + ":") or f"Node {layer.name} " in note
                for note in estimate.folding_notes
            )
        ]
        limiting = named or slow[:1]
        for layer in limiting:
            problems.append(
                f"throughput: layer {layer.name} ({layer.op_type}{_module(layer)}, {_shape(layer)}) needs "
                f"{layer.cycles:,} cycles per frame at {_folding(layer)}; the target {estimate.target_fps:g} fps at "
                f"{estimate.clock_mhz:g} MHz allows {target_cycles:,.0f}: {_speed_fix(layer, estimate, mvau_wwidth_max)}"
            )
        others = [layer.name for layer in slow if layer not in limiting]
        if others:
            problems.append(
                f"throughput: {len(others)} more layer(s) ({', '.join(others[:6])}{', ...' if len(others) > 6 else ''}) "
                f"were folded only down to the limiting layer's {estimate.max_cycles:,} cycles (FINN's two-pass "
                "relaxation); they follow once it is fixed"
            )
    for resource, used in estimate.utilization.items():
        if used <= 1.0:
            continue
        largest = sorted(estimate.layers, key=lambda item: -item.resources[resource])[:3]
        names = ", ".join(
            f"{layer.name}{_module(layer)} {layer.resources[resource]:,.0f}" for layer in largest
        )
        problems.append(
            f"fit: {estimate.totals[resource]:,.0f} {resource} estimated, {estimate.part.part} has "
            f"{estimate.part.capacity[resource]:,}; largest: {names}: {FIT_FIXES[resource]}"
        )
    return problems


def _module(layer: LayerEstimate) -> str:
    return f", module {layer.module!r}" if layer.module else ""


def _shape(layer: LayerEstimate) -> str:
    return ", ".join(f"{k}={v}" for k, v in layer.shape.items()) or "no shape attributes"


def _folding(layer: LayerEstimate) -> str:
    return (
        ", ".join(f"{k}={layer.folding[k]}" for k in ("PE", "SIMD") if k in layer.folding)
        or "its only folding"
    )


#: resource -> what lowers it
FIT_FIXES: dict[str, str] = {
    "LUT": "lower target_fps (less parallel layers use fewer LUTs), lower the bit widths of weights and "
    "activations, or choose a larger part",
    "BRAM_18K": "weights and thresholds live in block RAM: use fewer or narrower weights (lower weight bit "
    "width, fewer channels), a part with more BRAM/URAM, or ram_style='distributed' in the folding config",
    "URAM": "use fewer or narrower weights, or a part with more URAM",
    "DSP": "lower target_fps, or weights and activations of at most 4 bits (FINN maps them to LUTs)",
}


def _speed_fix(layer: LayerEstimate, estimate: Estimate, mvau_wwidth_max: int) -> str:
    best = f"at most {estimate.fps:,.0f} fps at this folding"
    shape, folding = layer.shape, layer.folding
    if layer.op_type.startswith("MVAU") and folding.get("SIMD", 0) < shape.get("MW", 0):
        return (
            f"SIMD is bounded by mvau_wwidth_max={mvau_wwidth_max} >= SIMD x weight bits: lower the weight bit "
            f"width, raise mvau_wwidth_max, lower target_fps ({best}) or raise clock_mhz"
        )
    return f"lower target_fps ({best}) or raise clock_mhz; FINN's SetFolding could not fold it further"


# -- one call: QONNX file -> directory -------------------------------------------------------------


@dataclass(frozen=True)
class Verification:
    """The hardware-layer graph executed in Python (qonnx ``execute_onnx``) against a reference."""

    reference: str  # "torch" (expected outputs given) or "QONNX"
    samples: int
    max_abs_diff: float
    predictions_identical: bool  # argmax (or the top-k indices) equal on every sample
    allowed: float

    @property
    def passed(self) -> bool:
        return self.predictions_identical and self.max_abs_diff <= self.allowed


@dataclass(frozen=True)
class DataflowExport:
    """What :func:`export_finn_dataflow` wrote and found."""

    directory: str
    files: dict[str, str]  # role -> path
    steps: tuple[StepCheck, ...]
    outside: tuple[str, ...]
    float_layers: tuple[str, ...]
    estimate: Estimate
    verification: Verification

    def __str__(self) -> str:
        v, e = self.verification, self.estimate
        lines = [
            f"FINN dataflow in {self.directory}: one partition of {len(e.layers)} hardware layers; "
            + f"outside: {', '.join(self.outside) or 'nothing'}",
            *("  " + s.describe() for s in self.steps),
            (
                f"  verified on {v.samples} samples against {v.reference}: max |diff| {v.max_abs_diff:.3g} "
                f"(allowed {v.allowed:.3g}), predictions {'identical' if v.predictions_identical else 'DIFFER'} "
                f"-> {'PASS' if v.passed else 'FAIL'}"
            ),
            f"  {e.part.part} at {e.clock_mhz:g} MHz: {e.fps:,.0f} fps, "
            + ", ".join(f"{r} {e.totals[r]:,.0f} ({100 * e.utilization[r]:.1f} %)" for r in ESTIMATED),
            *("  problem: " + p for p in e.problems),
        ]
        return "\n".join(lines)


def export_finn_dataflow(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    output_dir: str | os.PathLike,
    *,
    expected: Any = None,
    part: str = "xc7z020clg400-1",
    target_fps: float | None = None,
    clock_mhz: float = 100.0,
    top_k: int | None = None,
    check_samples: int = 4,
    rtol: float = STEP_RTOL,
    mvau_wwidth_max: int = MVAU_WWIDTH_MAX,
) -> DataflowExport:
    """From a QONNX file to a directory ready for FINN's ``build_dataflow`` (with Vivado).

    Runs :func:`dataflow_from_qonnx` (each step checked on the first ``check_samples`` inputs),
    executes the hardware-layer graph on every input and compares it with ``expected`` (the
    torch model's outputs; default: the QONNX graph's), then :func:`fold_and_estimate` for
    ``part``. Writes to ``output_dir``:

    - ``model.qonnx.onnx``: the QONNX file;
    - ``dataflow_parent.onnx`` / ``dataflow_partition.onnx``: FINN's parent graph (host-side layout
      nodes and one StreamingDataflowPartition) and the partition, specialized for ``part`` and folded;
    - ``folding_config.json``: the folding of every layer (FINN's ``folding_config_file`` format);
    - ``build_config.json``: the settings of FINN's ``DataflowBuildConfig`` for the rest of the build;
    - ``estimate.md`` / ``estimate.json``: per-layer and total resources, cycles, fps, latency against
      the part's capacity, and what keeps the design from the target or the part;
    - ``verification.json``: the step checks and the hardware graph against torch.

    The verified graph is the hardware-layer graph before specialization: the specialized HLS/RTL
    layers run only in FINN's cppsim/rtlsim, which need Vivado; folding does not change what a
    layer computes.

    Raises:
        FinnDataflowError: a step failed or changed the outputs, nodes stayed outside the hardware, or
            the hardware graph differs from ``expected``; names the step, node (and torch module) or
            sample count.
        ValueError: unknown part, bad clock or target.
    """
    from finn.util.config import extract_model_config_to_json
    from qonnx.custom_op.registry import getCustomOp

    samples = _as_array(inputs, "inputs")
    if samples.ndim < 2:
        raise ValueError(f"inputs: expected a batch of samples (batch first), got shape {samples.shape}")
    fpga = resolve(part) if not isinstance(part, FpgaPart) else part  # fail before the long steps
    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    files = {"qonnx": os.path.join(out, "model.qonnx.onnx")}
    if os.path.abspath(qonnx_path) != os.path.abspath(files["qonnx"]):
        shutil.copyfile(os.fspath(qonnx_path), files["qonnx"])
    dataflow = dataflow_from_qonnx(files["qonnx"], samples[:check_samples], out, top_k=top_k, rtol=rtol)
    verification = _verify(dataflow.parent, samples, expected, top_k, rtol, files["qonnx"])
    folded, estimate = fold_and_estimate(
        dataflow.partition, fpga, target_fps=target_fps, clock_mhz=clock_mhz, mvau_wwidth_max=mvau_wwidth_max
    )
    files.update(
        {
            "partition": os.path.join(out, "dataflow_partition.onnx"),
            "parent": os.path.join(out, "dataflow_parent.onnx"),
            "folding_config": os.path.join(out, "folding_config.json"),
            "build_config": os.path.join(out, "build_config.json"),
            "estimate_md": os.path.join(out, "estimate.md"),
            "estimate_json": os.path.join(out, "estimate.json"),
            "verification": os.path.join(out, "verification.json"),
        }
    )
    folded.save(files["partition"])
    getCustomOp(dataflow.parent.get_nodes_by_op_type("StreamingDataflowPartition")[0]).set_nodeattr(
        "model", files["partition"]
    )
    dataflow.parent.save(files["parent"])
    extract_model_config_to_json(folded, files["folding_config"], list(FOLDING_ATTRIBUTES))
    _write_json(files["build_config"], _build_config(fpga, clock_mhz, files["folding_config"]))
    with open(files["estimate_md"], "w") as f:
        f.write(estimate.markdown())
    _write_json(files["estimate_json"], estimate.to_json())
    result = DataflowExport(
        out,
        files,
        tuple(dataflow.steps),
        tuple(dataflow.outside),
        tuple(dataflow.float_layers),
        estimate,
        verification,
    )
    _write_json(
        files["verification"],
        {
            "steps": [asdict(s) for s in result.steps],
            "outside_partition": list(result.outside),
            "float_layers": list(result.float_layers),
            "hardware_graph": {**asdict(verification), "passed": verification.passed},
        },
    )
    if not verification.passed:
        raise FinnDataflowError(
            f"the hardware-layer graph differs from {verification.reference} on {verification.samples} samples: max "
            f"|diff| {verification.max_abs_diff:.6g} (allowed {verification.allowed:.6g}), predictions "
            f"{'identical' if verification.predictions_identical else 'differ'}; files are in {out}"
        )
    logger.info("%s", result)
    return result


def _as_array(value: Any, name: str) -> np.ndarray:
    if hasattr(value, "detach"):
        value = value.detach().cpu().float().numpy()
    try:
        return np.asarray(value, dtype=np.float32)
    except (TypeError, ValueError) as error:
        raise TypeError(f"{name}: expected one tensor or array, got {type(value).__name__}") from error


def _verify(parent, samples, expected, top_k, rtol, qonnx_path) -> Verification:
    """The hardware-layer graph on every sample against torch's outputs (or the QONNX graph's)."""
    produced = _execute(parent, samples)
    if expected is None:
        from qonnx.core.modelwrapper import ModelWrapper
        from qonnx.transformation.change_batchsize import ChangeBatchSize
        from qonnx.transformation.infer_shapes import InferShapes
        from qonnx.util.cleanup import cleanup_model

        reference = _execute(
            cleanup_model(ModelWrapper(qonnx_path)).transform(ChangeBatchSize(1)).transform(InferShapes()),
            samples,
        )
        name = "QONNX"
    else:
        reference, name = _as_array(expected, "expected"), "torch"
    if top_k is not None:
        labels = _top_indices(reference, top_k)
        diff = _max_diff(produced.reshape(labels.shape), labels)
        return Verification(name, len(samples), diff, diff == 0.0, 0.0)
    diff = _max_diff(produced, reference.reshape(produced.shape))
    identical = bool(np.array_equal(produced.argmax(-1), reference.reshape(produced.shape).argmax(-1)))
    return Verification(
        name, len(samples), diff, identical, rtol * max(1.0, float(np.max(np.abs(reference))))
    )


def _build_config(fpga: FpgaPart, clock_mhz: float, folding_config: str) -> dict[str, Any]:
    """Settings of FINN's ``DataflowBuildConfig`` (``finn.builder.build_dataflow_config``) that
    continue from ``dataflow_partition.onnx``: it is specialized and folded, so the build starts
    at code generation."""
    return {
        "output_dir": "finn_build",
        "fpga_part": fpga.part,
        "board": fpga.boards[0],
        "shell_flow_type": "vitis_alveo" if fpga.part.startswith("xcu") else "vivado_zynq",
        "synth_clk_period_ns": 1e3 / clock_mhz,
        "folding_config_file": os.path.basename(folding_config),
        "steps": [
            "step_minimize_bit_width",
            "step_generate_estimate_reports",
            "step_hw_codegen",
            "step_hw_ipgen",
            "step_set_fifo_depths",
            "step_create_stitched_ip",
            "step_synthesize_bitfile",
            "step_make_driver",
            "step_deployment_package",
        ],
        "generate_outputs": [
            "estimate_reports",
            "stitched_ip",
            "bitfile",
            "pynq_driver",
            "deployment_package",
        ],
    }


def _write_json(path: str, data: Any) -> None:
    with open(path, "w") as f:
        json.dump(data, f, indent=2, default=_plain)


def export_finn_dataflow_model(
    model: Any, example: Any, output_dir: str | os.PathLike, **options: Any
) -> DataflowExport:
    """A quantized torch model to a FINN dataflow directory: QONNX export (verified against torch by
    ``ModelExporter.export_qonnx_model``), then :func:`export_finn_dataflow` with the torch model's
    outputs on ``example`` (one tensor, batch first) as the expected outputs.

    ``options`` are those of :func:`export_finn_dataflow` (``part``, ``target_fps``, ``clock_mhz``,
    ``top_k``, ...). The model is unchanged.
    """
    import torch

    from quark.torch.extensions.brevitas._backend.export.exporter import ModelExporter

    if not isinstance(example, torch.Tensor):
        raise TypeError(
            f"example: FINN's dataflow takes one input tensor (batch first), got {type(example).__name__}"
        )
    path = os.path.join(os.fspath(output_dir), "model.qonnx.onnx")
    ModelExporter(path).export_qonnx_model(model, example)
    training = model.training
    try:
        with torch.no_grad():
            expected = model.eval()(example.to(next(model.parameters()).device))
    finally:
        model.train(training)
    expected = getattr(expected, "value", expected)  # a QuantTensor's float value
    return export_finn_dataflow(path, example, output_dir, expected=expected, **options)
