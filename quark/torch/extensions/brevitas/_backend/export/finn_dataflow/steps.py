"""FINN's front-end steps on a QONNX graph, in the order of FINN's builder steps
(``step_qonnx_to_finn``, ``step_tidy_up``, ``step_streamline``, ``step_convert_to_hw``), called
directly because ``finn.builder.build_dataflow_steps`` does not import without Vivado (it loads
FINN's simulator and pandas at import time). Streamlining adds the passes FINN's residual
examples use for forks, joins and concatenations.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from functools import partial
from typing import Any

from quark.torch.extensions.brevitas._backend.export.finn_dataflow.origins import run_transform

#: FINN's default ``max_multithreshold_bit_width``: Quant nodes wider than this are not converted to thresholds
MAX_THRESHOLD_BITS = 8


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
        model = run_transform(model, transform)
    return model


def _to_finn(model):
    """FINN's ``step_qonnx_to_finn``: Quant nodes become MultiThreshold nodes and integer weights;
    then the clips of ReLU6 / Hardtanh fold into the thresholds they feed (exact; FINN has no
    hardware layer for Clip)."""
    from finn.transformation.qonnx.convert_qonnx_to_finn import ConvertQONNXtoFINN
    from finn.transformation.qonnx.quant_act_to_multithreshold import default_filter_function_generator

    from quark.torch.extensions.brevitas._backend.export.finn import absorb_clip_into_multithreshold

    convert = ConvertQONNXtoFINN(
        filter_function=default_filter_function_generator(max_multithreshold_bit_width=MAX_THRESHOLD_BITS)
    )
    model = run_transform(model, convert)
    return _tidy(run_transform(model, absorb_clip_into_multithreshold()()))


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
        model = run_transform(model, transform)
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


def top_k_step(k: int):
    def insert(model):
        from finn.transformation.streamline.absorb import AbsorbScalarMulAddIntoTopK
        from qonnx.transformation.insert_topk import InsertTopK

        model = run_transform(model, InsertTopK(k=k))
        return _tidy(run_transform(model, AbsorbScalarMulAddIntoTopK()))

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
            model = run_transform(model, conversion())
    for transform in (absorb.AbsorbConsecutiveTransposes(), RemoveCNVtoFCFlatten(), InferDataLayouts()):
        model = run_transform(model, transform)
    return _tidy(model)


#: the front-end steps, each executed and compared with the QONNX graph
FRONT_END: tuple[tuple[str, Callable[[Any], Any]], ...] = (
    ("ConvertQONNXtoFINN", _to_finn),
    ("streamline", _streamline),
    ("convert to hardware layers", _to_hw),
)
