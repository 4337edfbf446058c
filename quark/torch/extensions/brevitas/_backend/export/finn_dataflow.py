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

import json
import logging
import math
import os
import shutil
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from functools import partial
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.export.fpga_parts import RESOURCES, FpgaPart, resolve

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
    """``model.transform(transform)``, then untagged new nodes inherit the module of the node
    that produced or consumed the same tensor before (FINN builds new nodes for hardware layers,
    keeping tensor names)."""
    before: dict[str, str] = {}
    for node in model.graph.node:
        module = _tag(node)
        if module:
            for tensor in [*node.output, *node.input]:
                before.setdefault(tensor, module)
    model = model.transform(transform)
    for node in model.graph.node:
        if _tag(node) is None:
            module = next((before[t] for t in [*node.output, *node.input] if t in before), None)
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

    for transform in (InferShapes(), FoldConstants(), GiveUniqueNodeNames(), GiveReadableTensorNames(),
                      InferDataTypes(), RemoveStaticGraphInputs()):
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
    import finn.transformation.streamline.absorb as absorb
    from finn.transformation.streamline import Streamline
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
        passes += [LowerConvsToMatMul(), MakeMaxPoolNHWC(), absorb.AbsorbTransposeIntoMultiThreshold(),
                   MakeMaxPoolNHWC(), absorb.AbsorbConsecutiveTransposes()]
    passes += [ConvertBipolarMatMulToXnorPopcount(), Streamline()]
    if branches:  # the layout group of StreamlinePlus: transposes past forks and joins, until they cancel
        passes.append(_transposes_past_branches())
    passes += [RoundAndClipThresholds(), absorb.AbsorbScalarMulAddIntoTopK(), InferDataLayouts(),
               RemoveUnusedTensors()]
    for transform in passes:
        model = _transform(model, transform)
    return _tidy(model)


def _scales_past_branches():
    """The residual and concat groups of FINN's ``StreamlinePlus``: scales and biases through
    forks, residual additions and concatenations (StreamlinePlus whole repeats the standard
    group exhaustively too, which took most of the 40 s the ResNet-like network needed)."""
    from finn.transformation.streamline import reorder
    from qonnx.transformation.composed import ComposedTransformation

    return ComposedTransformation([
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
    ])


def _transposes_past_branches():
    """The layout group of FINN's ``StreamlinePlus``: transposes through forks and joins."""
    from finn.transformation.streamline import absorb, collapse_repeated, remove, reorder
    from qonnx.transformation.composed import ComposedTransformation

    return ComposedTransformation([
        reorder.MoveTransposePastFork(),
        reorder.MoveTransposePastJoinConcat(),
        reorder.MoveTransposePastEltwise(),
        reorder.MoveTransposePastJoinMul(),
        reorder.MoveTransposePastJoinAdd(),
        collapse_repeated.CollapseRepeatedTranspose(),
        remove.RemoveIdentityTranspose(),
        absorb.AbsorbTransposeIntoMultiThreshold(),
        absorb.AbsorbConsecutiveTransposes(),
    ])


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

    elementwise = ("Mul", "Div", "Sub", "Add", "And", "Or", "Xor", "Equal", "Less", "LessOrEqual",
                   "Greater", "GreaterOrEqual")
    return (
        (("XnorPopcountMatMul",), bmvau.InferBinaryMatrixVectorActivation),
        (("MatMul",), mvau.InferQuantizedMatrixVectorActivation),
        (("MatMul",), vector_vector_activation.InferVectorVectorActivation),
        (("TopK",), label_select.InferLabelSelectLayer),
        (("MultiThreshold", "Quant"), partial(requant.InferRequantLayer, bitwidth_threshold=MAX_THRESHOLD_BITS + 1)),
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
    import finn.transformation.streamline.absorb as absorb
    from finn.transformation.move_reshape import RemoveCNVtoFCFlatten
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
    "TopK": "top-k on a float input: quantize the last layer's output",
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
            f"FINN could not map {len(problems)} node(s) to hardware layers; each needs the change named", problems
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
