"""FINN's front end as the package's build steps run it (:mod:`.steps`): conversion
(``ConvertQONNXtoFINN``), streamlining, hardware layers, one dataflow partition, then specialization,
folding and bit widths for the part.

The graph work of each step, in the order of FINN's builder steps (``step_qonnx_to_finn``,
``step_tidy_up``, ``step_streamline``, ``step_convert_to_hw``, ``step_create_dataflow_partition``,
``step_specialize_layers``, ``step_target_fps_parallelization``, ``step_apply_folding_config``,
``step_minimize_bit_width``, ``step_transpose_decomposition``), with FINN's own transformations.
Streamlining adds the passes FINN's residual examples use for forks, joins and concatenations, and the
package's own (:mod:`.passes`). Every node FINN could not map is named with its torch module and the
change that fixes it.
"""

from __future__ import annotations

import logging
from collections import Counter
from collections.abc import Callable, Sequence
from functools import partial
from pathlib import Path
from typing import Any

from quark.torch.extensions.brevitas._backend.targets.finn.build_config import MAX_MULTITHRESHOLD_BITS
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.finn.origins import named, run_transform, tag_origins

logger = logging.getLogger(__name__)


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


def to_finn(model, max_multithreshold_bit_width: int):
    """FINN's ``step_qonnx_to_finn``: Quant nodes become MultiThreshold nodes and integer weights; first,
    every activation between two quantizers becomes thresholds (:mod:`.activations`), and an activation
    left float is refused before any streamlining."""
    from finn.transformation.qonnx import convert_qonnx_to_finn
    from finn.transformation.qonnx.quant_act_to_multithreshold import default_filter_function_generator

    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ActivationsAsThresholds

    model = run_transform(model, ActivationsAsThresholds())
    convert = convert_qonnx_to_finn.ConvertQONNXtoFINN(
        filter_function=default_filter_function_generator(max_multithreshold_bit_width=max_multithreshold_bit_width)
    )
    model = _tidy(run_transform(model, convert))
    refuse_float_activations(model)
    return model


def absorb_clips(model):
    """The clips of ReLU6 / Hardtanh fold into the thresholds they feed (exact; FINN has no hardware
    layer for Clip, and a Clip left in place stops streamlining)."""
    from quark.torch.extensions.brevitas._backend.targets.finn.passes import AbsorbClipIntoMultiThreshold

    return _tidy(run_transform(model, AbsorbClipIntoMultiThreshold()))


def streamline(model):
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

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import (
        CropKernelsToOnePixel,
        ForkAfterNhwcTranspose,
        GroupedConvAsDense,
        QuantAvgPoolNHWC,
    )

    branches = _branches(model)
    passes: list[Any] = [absorb.AbsorbScalarBiasIntoMultiThreshold(), Streamline()]
    if branches:  # before MaxPool becomes MaxPoolNHWC, which scales cannot pass
        passes += [_scales_past_branches(), Streamline()]
    if model.get_nodes_by_op_type("Conv"):
        passes += [
            CropKernelsToOnePixel(),
            GroupedConvAsDense(),
            LowerConvsToMatMul(),
            ForkAfterNhwcTranspose(),
            MakeMaxPoolNHWC(),
            QuantAvgPoolNHWC(),
            absorb.AbsorbTransposeIntoMultiThreshold(),
            MakeMaxPoolNHWC(),
            QuantAvgPoolNHWC(),
            absorb.AbsorbConsecutiveTransposes(),
        ]
    passes += [ConvertBipolarMatMulToXnorPopcount(), Streamline()]
    if branches:  # the layout group of StreamlinePlus: transposes past forks and joins, until they cancel
        passes.append(_transposes_past_branches(model))
    for transform in passes:
        model = run_transform(model, transform)
    if branches and _linear_before_fork(model):
        model = _linear_past_forks(model)
    for transform in (
        RoundAndClipThresholds(),
        absorb.AbsorbScalarMulAddIntoTopK(),
        InferDataLayouts(),
        RemoveUnusedTensors(),
    ):
        model = run_transform(model, transform)
    return _tidy(model)


def _linear_before_fork(model) -> bool:
    """Whether a Mul / Add with a constant operand feeds more than one node (a scale and bias left
    before a fork: MobileNetV2's projection convolutions feed the next block and its addition)."""
    return any(
        n.op_type in ("Mul", "Add")
        and any(model.get_initializer(i) is not None for i in n.input)
        and len(model.find_consumers(n.output[0]) or []) > 1
        for n in model.graph.node
    )


def _linear_past_forks(model):
    """Scales and biases copied past forks, made channel-wise for FINN's absorption
    (:class:`~.passes.ChannelsLastParamsAsVectors`), then absorbed into the thresholds each branch
    starts with: without this they stay float hardware layers (ElementwiseMul / ElementwiseAdd)."""
    from finn.transformation.streamline import Streamline
    from finn.transformation.streamline.reorder import MoveLinearPastFork
    from qonnx.transformation.infer_data_layouts import InferDataLayouts

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import ChannelsLastParamsAsVectors

    for transform in (MoveLinearPastFork(), InferDataLayouts(), ChannelsLastParamsAsVectors(), Streamline()):
        model = run_transform(model, transform)
    return model


def accumulating_pools(model):
    """Global average pooling of integers as FINN's ``GlobalAccPool`` (the integer sum, a hardware
    layer) and a scalar ``Mul`` by 1/N that streamlining folds into the thresholds that follow, as
    FINN's networks take it (FINN converts it only in ``step_convert_to_hw``, after streamlining,
    where the ``Mul`` is left over); the layout transposes around it then cancel."""
    from finn.transformation.fpgadataflow.convert_to_hw.global_acc_pool import InferGlobalAccPoolLayer
    from finn.transformation.streamline import Streamline, absorb
    from qonnx.transformation.infer_data_layouts import InferDataLayouts

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import PoolInputsAsNCHW

    if not model.get_nodes_by_op_type("GlobalAveragePool"):
        return model
    for transform in (
        InferDataLayouts(),
        PoolInputsAsNCHW(),
        InferGlobalAccPoolLayer(),
        absorb.AbsorbConsecutiveTransposes(),
        Streamline(),
        absorb.AbsorbTransposeIntoMultiThreshold(),
        absorb.AbsorbConsecutiveTransposes(),
        InferDataLayouts(),
    ):
        model = run_transform(model, transform)
    return _tidy(model)


def _scales_past_branches():
    """The residual and concat groups of FINN's ``StreamlinePlus``: scales and biases through
    forks, residual additions and concatenations (StreamlinePlus whole repeats the standard
    group exhaustively too, which took most of the 40 s the ResNet-like network needed)."""
    from finn.transformation.streamline import reorder

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import (
        ChannelwiseLinearPastForks,
        ComposedCleaningAfterChanges,
    )

    return ComposedCleaningAfterChanges(
        [
            reorder.MoveLinearPastEltwiseAdd(),
            ChannelwiseLinearPastForks(),
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


def _transposes_past_branches(model):
    """The layout group of FINN's ``StreamlinePlus``: transposes through forks and joins; where the
    graph has them, ours for ``torch.chunk`` (its Slices as one Split, :class:`~.passes.SlicesAsSplit`,
    which FINN's ``MoveTransposePastSplit`` takes) and channel shuffles
    (:class:`~.passes.ChannelShuffleToNHWC`: a transpose of more than four axes)."""
    from finn.transformation.streamline import absorb, collapse_repeated, remove, reorder

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import (
        ChannelShuffleToNHWC,
        ComposedCleaningAfterChanges,
        SlicesAsSplit,
        TransposesPastJoinSub,
    )

    chunks = any(model.get_nodes_by_op_type(t) for t in ("Slice", "Split"))
    transposes = model.get_nodes_by_op_type("Transpose")
    shuffles = any(len(model.get_tensor_shape(n.input[0]) or ()) > 4 for n in transposes)
    return ComposedCleaningAfterChanges(
        [
            *([SlicesAsSplit()] if chunks else []),
            *([ChannelShuffleToNHWC()] if shuffles else []),
            *([reorder.MoveTransposePastSplit()] if chunks else []),
            reorder.MoveTransposePastFork(),
            reorder.MoveTransposePastJoinConcat(),
            reorder.MoveTransposePastEltwise(),
            reorder.MoveTransposePastJoinMul(),
            reorder.MoveTransposePastJoinAdd(),
            TransposesPastJoinSub(),
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


def top_k(model, k: int):
    """FINN's ``InsertTopK`` with the output's scalar scale and bias absorbed into it."""
    from finn.transformation.streamline.absorb import AbsorbScalarMulAddIntoTopK
    from qonnx.transformation.insert_topk import InsertTopK

    model = run_transform(model, InsertTopK(k=k))
    return _tidy(run_transform(model, AbsorbScalarMulAddIntoTopK()))


def _hw_conversions(host: set[str]) -> tuple[tuple[tuple[str, ...], Callable[[], Any]], ...]:
    """FINN's ``step_convert_to_hw`` (standalone_thresholds=False, its default): which op types
    trigger which conversion, in FINN's order. An empty trigger runs always. Elementwise operations
    named in ``host`` (the output's float scale and bias) stay on the host."""

    def on_chip(model, node) -> bool:
        return node.name not in host

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
        shuffle,
        split,
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
            partial(requant.InferRequantLayer, bitwidth_threshold=MAX_MULTITHRESHOLD_BITS + 1),
        ),
        (("MultiThreshold",), thresholding.InferThresholdingLayer),
        (("Pad",), fm_padding.InferFMPadding),
        (("MaxPool", "AveragePool", "MaxPoolNHWC", "QuantAvgPool2d"), pool.InferPool),
        (("Im2Col",), conv_inp_gen.InferConvInpGen),
        (("ConvolutionInputGenerator",), RemoveCNVtoFCFlatten),
        (("Concat",), concat.InferConcatLayer),
        (("Split",), split.InferSplitLayer),
        (elementwise, partial(elementwise_binary_operation.InferElementwiseBinaryOperation, on_chip)),
        (("GlobalAveragePool",), global_acc_pool.InferGlobalAccPoolLayer),
        ((), duplicate_streams.InferDuplicateStreamsLayer),
        (("Transpose",), partial(shuffle.InferShuffle, _between_hardware)),
    )


def _between_hardware(model, transpose) -> bool:
    """FINN's ``InferShuffle`` filter: a Transpose (with the Reshapes around it that InferShuffle takes
    along) between hardware layers, a channel shuffle say. The layout changes at the graph's edges stay
    on the host, as FINN's partitioning leaves them (FINN's own filter keeps only the first node)."""
    first = model.find_producer(transpose.input[0])
    source = first.input[0] if first is not None and first.op_type == "Reshape" else transpose.input[0]
    consumers = model.find_consumers(transpose.output[0]) or []
    if len(consumers) == 1 and consumers[0].op_type == "Reshape":
        consumers = model.find_consumers(consumers[0].output[0]) or []
    producer = model.find_producer(source)
    return producer is not None and _is_hw(producer) and bool(consumers) and all(_is_hw(c) for c in consumers)


#: float elementwise operations that may stay on the host after the last hardware layer: the output's
#: scale and bias (FINN's ``reject_output_dequant`` idea, for the whole float tail)
OUTPUT_DEQUANTIZATION = frozenset({"Mul", "Add", "Div", "Sub"})


def output_dequantization(model) -> set[str]:
    """Names of the nodes that only rescale the graph's outputs in float: ``Mul`` / ``Add`` / ... with a
    constant operand and a float result, whose consumers are such nodes or graph outputs. They run on
    the host (FINN's drivers apply the output scale), not as float hardware layers; data movement
    between them and the outputs (the transpose back to NCHW) stays on the host with them."""
    from qonnx.core.datatype import DataType

    outputs = {o.name for o in model.graph.output}
    tail: set[str] = set()
    moves: set[str] = set()  # data movement on the way to the outputs
    for node in reversed(list(model.graph.node)):
        consumers = [c for o in node.output for c in (model.find_consumers(o) or [])]
        ends = all(o in outputs or all(c.name in tail | moves for c in model.find_consumers(o) or []) for o in node.output)
        if node.op_type in LAYOUT_OPS and ends:
            moves.add(node.name)
            continue
        constant = any(model.get_initializer(i) is not None for i in node.input)
        if (
            node.op_type in OUTPUT_DEQUANTIZATION
            and constant
            and ends
            and (consumers or any(o in outputs for o in node.output))
            and model.get_tensor_datatype(node.output[0]) == DataType["FLOAT32"]
        ):
            tail.add(node.name)
    return tail



def convert_to_hw(model):
    from finn.transformation.move_reshape import RemoveCNVtoFCFlatten
    from finn.transformation.streamline import absorb
    from qonnx.transformation.infer_data_layouts import InferDataLayouts

    failed = []
    for triggers, conversion in _hw_conversions(output_dequantization(model)):
        if not triggers or any(model.get_nodes_by_op_type(t) for t in triggers):
            try:
                model = run_transform(model, conversion())
            except Exception as error:  # noqa: BLE001 - named with the nodes it left, below
                # FINN's conversions stop at the first node they cannot take (a layout they do not
                # expect past an op without hardware): the others go on, the nodes left are refused
                failed.append(f"{_conversion_name(conversion)} stopped: {type(error).__name__}: {error}")
    for transform in (absorb.AbsorbConsecutiveTransposes(), RemoveCNVtoFCFlatten(), InferDataLayouts()):
        model = run_transform(model, transform)
    if failed:
        _refuse_unmapped(model, failed)
    return _tidy(model)


def _conversion_name(conversion) -> str:
    return getattr(conversion, "__name__", None) or getattr(conversion, "func", conversion).__name__


def _refuse_unmapped(model, notes: Sequence[str] = ()) -> None:
    """Refuse the nodes that are not hardware layers (named with their modules and the fix), after
    ``notes`` (FINN's conversions that stopped), if there are any."""
    _refuse(model, _unmapped_nodes(model), notes)


def _refuse(model, nodes: Sequence[Any], notes: Sequence[str] = (), when: str = "") -> None:
    """Refuse ``nodes`` (each named with its module and the fix: ``FinnError.problems``); the message
    groups them by operator, with counts, the first few and the fix once per operator."""
    if not nodes and not notes:
        return
    kinds = Counter(n.op_type for n in nodes)
    shown = [*notes]
    for op_type, count in kinds.most_common():
        first = [named(model, n) for n in nodes if n.op_type == op_type][:SHOWN_PER_KIND]
        more = f" and {count - len(first)} more" if count > len(first) else ""
        shown.append(f"{op_type} x{count}: {_fix(op_type)}; {'; '.join(first)}{more}")
    raise FinnError(
        f"FINN could not map {len(nodes)} node(s) to hardware layers{when}; each kind needs the change named",
        [*notes, *(f"{named(model, n)}: {_fix(n.op_type)}" for n in nodes)],
        shown,
    )


#: nodes named per operator in a refusal's message (``FinnError.problems`` has them all)
SHOWN_PER_KIND = 3


def refuse_float_activations(model) -> None:
    """After the conversion, before streamlining: an activation left as a float node (its input or
    output not quantized, or wider than thresholds take) never becomes hardware: refused at once."""
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import NEVER_HARDWARE

    _refuse(model, [n for n in model.graph.node if n.op_type in NEVER_HARDWARE], when=" (found before streamlining)")


# -- the graph the build starts from ----------------------------------------------------------------


def prepare(model):
    """A QONNX graph as FINN's steps take it (see :func:`~.steps.step_quark_prepare`)."""
    from quark.torch.extensions.brevitas._backend.export.safe_graph import check
    from quark.torch.extensions.brevitas._backend.qonnx_passes.wrapper import cleanup_model
    from quark.torch.extensions.brevitas._backend.targets.finn.checks import SOURCE

    source = model.get_metadata_prop(SOURCE) or "the QONNX graph"
    check(model.model, source)  # before qonnx imports what the node domains name
    if len(model.graph.input) != 1 or len(model.graph.output) != 1:
        raise FinnError(
            f"{source}: {len(model.graph.input)} inputs and {len(model.graph.output)} outputs; "
            "FINN's dataflow takes one input and one output"
        )
    tag_origins(model)
    return batch_one(cleanup_model(model))


def batch_one(model):
    """A cleaned QONNX graph as FINN's steps take it: batch size 1, shapes and datatypes inferred,
    and a value_info for every initializer. ``ChangeBatchSize`` drops the value_info and shape
    inference restores it only for standard operations, not for the thresholds of a
    ``MultiThreshold`` the export wrote (a signed half-up quantizer); qonnx's ``GiveUniqueTensorNames``
    renames only what has one, so ``GiveReadableTensorNames`` after ``ConvertQONNXtoFINN`` gave such
    thresholds' name ('MultiThreshold_0_param0') to those of FINN's new MultiThreshold_0 as well and
    failed ('Found multiple get_by_name matches')."""
    from onnx import helper
    from qonnx.transformation.change_batchsize import ChangeBatchSize
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    model = model.transform(ChangeBatchSize(1)).transform(InferShapes())
    described = {v.name for v in (*model.graph.value_info, *model.graph.input, *model.graph.output)}
    for initializer in model.graph.initializer:
        if initializer.name not in described:
            model.graph.value_info.append(
                helper.make_tensor_value_info(initializer.name, initializer.data_type, list(initializer.dims))
            )
    return model.transform(InferDataTypes())


def require_finn() -> None:
    """Fail with how to install FINN when finn-plus is absent."""
    try:
        import finn.transformation.qonnx.convert_qonnx_to_finn  # noqa: F401
    except ImportError as error:
        raise ImportError(
            f"the FINN target needs finn-plus ({error}); install it with "
            "`pip install --no-deps finn-plus==1.6.1` and the pieces listed in docs/export.md"
        ) from error


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
    "Quant": f"a quantizer wider than {MAX_MULTITHRESHOLD_BITS} bits: use at most {MAX_MULTITHRESHOLD_BITS}-bit "
    "activations",
    "Relu": "a float ReLU: use an unsigned QuantReLU (FINN turns it into thresholds)",
    "AveragePool": "float average pooling: use Brevitas' TruncAvgPool2d so the result stays integer",
    "GlobalAveragePool": "float average pooling: use Brevitas' TruncAdaptiveAvgPool2d",
    "BatchNormalization": "batch norm with no quantized activation after it: follow it with a QuantReLU / "
    "QuantIdentity (FINN absorbs it into the thresholds) or merge it into the preceding layer",
    "Transpose": "a layout change FINN could neither move to the graph's edges nor stream as a Shuffle "
    "layer (a transpose between two hardware layers, with a view on either side, as torchvision's "
    "channel_shuffle): keep tensors NCHW and permute channels only between quantized layers",
    "Reshape": "a reshape between hardware layers: flatten once, before the fully connected head "
    "(nn.Flatten), or reshape only around a channel shuffle's transpose",
    "Slice": "a slice FINN cannot stream: split the channels of a quantized tensor into pieces that cover "
    "it (torch.chunk / torch.split(x, sizes, dim=1): a StreamingSplit layer)",
    "Split": "a split FINN cannot stream: split the channels (dim=1) of a quantized tensor",
    "Shape": "a shape computed at run time: export with a static input shape (x.size() of a static input "
    "folds into constants)",
    "TopK": "top-k on a float input (FINN's LabelSelect takes integers): drop the last layer's bias (its "
    "per-tensor scale is absorbed) or quantize its output",
}


#: what an activation FINN left float needs (:mod:`.activations` makes thresholds of the rest)
ACTIVATION_FIX = (
    "an activation FINN computes only as thresholds, between a quantizer of at most "
    f"{MAX_MULTITHRESHOLD_BITS} bits on its input and one on its output: graph mode puts both there where "
    "the config's target_device is DeviceType.FINN (or put a QuantIdentity before and after the module)"
)


def _fix(op_type: str) -> str:
    from quark.torch.extensions.brevitas._backend.targets.finn.activations import ELEMENTWISE

    if op_type in ELEMENTWISE and op_type not in UNMAPPED_FIXES:
        return ACTIVATION_FIX
    return UNMAPPED_FIXES.get(
        op_type, f"FINN 1.6.1 has no hardware layer for {op_type}: replace the module, or run it on the host"
    )


def _is_hw(node) -> bool:
    return node.domain.startswith("finn.custom_op.fpgadataflow")


def _unmapped_nodes(model) -> list[Any]:
    """Nodes that are not hardware layers, except data movement before the first or after the
    last hardware layer and the output's float scale and bias (what FINN's CreateDataflowPartition
    leaves to the host)."""
    nodes = list(model.graph.node)
    hw = [i for i, n in enumerate(nodes) if _is_hw(n)]
    if not hw:
        return nodes
    inner = range(hw[0], hw[-1] + 1)
    host = output_dequantization(model)
    return [
        n
        for i, n in enumerate(nodes)
        if not _is_hw(n) and (i in inner or (n.op_type not in LAYOUT_OPS and n.name not in host))
    ]


def create_dataflow_partition(model, directory: Path):
    """FINN's ``step_create_dataflow_partition``: the partition (returned, the build's metadata carried
    over) and its parent graph, saved as ``dataflow_parent.onnx`` in ``directory`` (FINN's builder's
    intermediate models directory, where its verification reads the parent); the partitions under
    ``supported_op_partitions``. Nodes outside the hardware are refused first."""
    from finn.transformation.fpgadataflow.create_dataflow_partition import CreateDataflowPartition
    from qonnx.custom_op.registry import getCustomOp

    from quark.torch.extensions.brevitas._backend.targets.finn.checks import carry_records
    from quark.torch.extensions.brevitas._backend.targets.finn.sweeps import FinnModelWrapper

    _refuse_unmapped(model)
    directory.mkdir(parents=True, exist_ok=True)
    parent = model.transform(CreateDataflowPartition(partition_model_dir=str(directory / "supported_op_partitions")))
    partitions = parent.get_nodes_by_op_type("StreamingDataflowPartition")
    if len(partitions) != 1:
        raise FinnError(f"FINN made {len(partitions)} dataflow partitions; one is needed")
    parent.save(str(directory / PARENT))
    partition = FinnModelWrapper(getCustomOp(partitions[0]).get_nodeattr("model"))
    carry_records(model, partition)
    return partition


#: the parent graph's file name in the intermediate models directory (FINN's builder's)
PARENT = "dataflow_parent.onnx"


def specialize_layers(model, fpga_part: str):
    """FINN's ``step_specialize_layers``: HLS or RTL implementations for ``fpga_part``, named anew."""
    from finn.transformation.fpgadataflow.specialize_layers import SpecializeLayers
    from qonnx.transformation.general import GiveUniqueNodeNames
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    for transform in (SpecializeLayers(fpga_part), GiveUniqueNodeNames(), InferShapes(), InferDataTypes()):
        model = run_transform(model, transform)
    return model


def set_folding(model, cfg):
    """FINN's SetFolding for ``cfg.target_fps`` at ``cfg.clock_mhz`` (two-pass relaxation, as FINN's
    builder runs it), then ``cfg.folding``'s entries on top, then the FIFO depths a branch beside a
    whole-frame reduction needs (:class:`~.passes.SkipBranchFifoDepths`: squeeze-excite). What FINN's
    SetFolding logs (layers it could not fold further) is kept in the model's metadata for the
    estimate report."""
    import json

    from finn.transformation.fpgadataflow.set_folding import SetFolding

    from quark.torch.extensions.brevitas._backend.targets.finn.estimate import FOLDING_NOTES

    if cfg.target_fps is not None:
        cycles = max(1, int(cfg.clock_mhz * 1e6 / cfg.target_fps))
        notes = _Notes()
        finn_log = logging.getLogger("finn_logger")
        finn_log.addHandler(notes)
        try:
            model = run_transform(model, SetFolding(cycles, mvau_wwidth_max=cfg.mvau_wwidth_max, two_pass_relaxation=True))
        finally:
            finn_log.removeHandler(notes)
        model.set_metadata_prop(FOLDING_NOTES, json.dumps(notes.messages))
    cfg.folding.apply(model)
    from quark.torch.extensions.brevitas._backend.targets.finn.passes import SkipBranchFifoDepths

    return run_transform(model, SkipBranchFifoDepths())


class _Notes(logging.Handler):
    """FINN's log messages while a pass runs, one line each."""

    def __init__(self):
        super().__init__(logging.INFO)
        self.messages: list[str] = []

    def emit(self, record):
        self.messages.append(" ".join(record.getMessage().split()))


def minimize_bit_width(model):
    """FINN's ``step_minimize_bit_width``: weights, then accumulators, as narrow as their values allow."""
    from finn.transformation.fpgadataflow.minimize_accumulator_width import MinimizeAccumulatorWidth
    from finn.transformation.fpgadataflow.minimize_weight_bit_width import MinimizeWeightBitWidth
    from qonnx.transformation.infer_datatypes import InferDataTypes

    for transform in (MinimizeWeightBitWidth(), MinimizeAccumulatorWidth(), InferDataTypes()):
        model = run_transform(model, transform)
    return model


def transpose_decomposition(model, fpga_part: str):
    """FINN's ``step_transpose_decomposition`` (after folding, as in its builder): each ``Shuffle`` (a
    transpose between layers, e.g. a channel shuffle) becomes the InnerShuffle / OuterShuffle layers
    that implement it, specialized for ``fpga_part``; FINN's estimates know only those."""
    from finn.transformation.fpgadataflow.specialize_layers import SpecializeLayers
    from finn.transformation.fpgadataflow.transpose_decomposition import (
        InferInnerOuterShuffles,
        ShuffleDecomposition,
    )
    from qonnx.transformation.general import GiveUniqueNodeNames
    from qonnx.transformation.infer_datatypes import InferDataTypes
    from qonnx.transformation.infer_shapes import InferShapes

    if not model.get_nodes_by_op_type("Shuffle"):
        return model
    for transform in (
        ShuffleDecomposition(),
        InferInnerOuterShuffles(),
        SpecializeLayers(fpga_part),
        InferShapes(),
        InferDataTypes(),
        GiveUniqueNodeNames(),
    ):
        model = run_transform(model, transform)
    return model


def float_layers(partition) -> list[str]:
    """Hardware layers with a float input or output (FINN warns likewise), named with their modules."""
    from qonnx.core.datatype import DataType

    found = []
    for node in partition.graph.node:
        tensors = [t for t in [*node.input, *node.output] if partition.get_initializer(t) is None]
        if any(partition.get_tensor_datatype(t) == DataType["FLOAT32"] for t in tensors):
            found.append(named(partition, node))
    return found
