"""The batched executor (``targets/finn/execute.py``) against FINN's Python execution (qonnx's
``execute_onnx``, one sample at a time), identical (atol=0, same dtype): every row of its table on
random inputs of the node's datatypes (a test checks that no row lacks a case), the refusals that
send a graph to FINN's own execution, and the exact accumulator beyond float32's integers. The
real graphs (the demo network's and the FINN zoo's, tensor by tensor): ``test_execute_graphs.py``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

import numpy as np
import pytest

pytest.importorskip("finn.custom_op.fpgadataflow", reason="finn-plus is not installed")

import onnx
from onnx import TensorProto
from onnx import helper as oh
from qonnx.core.datatype import DataType
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.util.basic import qonnx_make_model

from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx
from quark.torch.extensions.brevitas._backend.targets.finn import execute

HW, GENERAL = "finn.custom_op.fpgadataflow", "qonnx.custom_op.general"
BATCH = 7  # samples per case (FINN runs them one by one)


def graph(
    nodes: list[onnx.NodeProto],
    inputs: dict[str, tuple[tuple[int, ...], str]],
    outputs: dict[str, tuple[int, ...]],
    constants: dict[str, tuple[np.ndarray, str | None]] | None = None,
    *,
    int64_outputs: tuple[str, ...] = (),
    between: dict[str, tuple[int, ...]] | None = None,
) -> ModelWrapper:
    """A batch-1 graph: inputs name -> (shape, FINN datatype), outputs name -> shape, constants
    name -> (value, datatype or None); the shapes of the tensors ``between`` nodes given, or else
    from qonnx's shape inference."""
    from qonnx.transformation.infer_shapes import InferShapes

    def info(name, shape, kind=TensorProto.FLOAT):
        return oh.make_tensor_value_info(name, kind, list(shape))

    model = qonnx_make_model(
        oh.make_graph(
            nodes,
            "case",
            [info(n, s) for n, (s, _) in inputs.items()],
            [
                info(n, s, TensorProto.INT64 if n in int64_outputs else TensorProto.FLOAT)
                for n, s in outputs.items()
            ],
        ),
        opset_imports=[oh.make_opsetid("", 13)],
    )
    model = ModelWrapper(model)
    for name, (value, datatype) in (constants or {}).items():
        model.set_initializer(name, value)
        if datatype:
            model.set_tensor_datatype(name, DataType[datatype])
    for name, (_, datatype) in inputs.items():
        model.set_tensor_datatype(name, DataType[datatype])
    if between is None:
        return model.transform(InferShapes())
    for name, shape in between.items():
        model.set_tensor_shape(name, list(shape))
    return model


def hw(op_type: str, inputs: list[str], outputs: list[str], **attributes) -> onnx.NodeProto:
    return oh.make_node(
        op_type, inputs, outputs, domain=HW, backend="fpgadataflow", name=f"{op_type}_0", **attributes
    )


def general(op_type: str, inputs: list[str], outputs: list[str], **attributes) -> onnx.NodeProto:
    return oh.make_node(op_type, inputs, outputs, domain=GENERAL, name=f"{op_type}_0", **attributes)


def standard(op_type: str, inputs: list[str], outputs: list[str], **attributes) -> onnx.NodeProto:
    return oh.make_node(op_type, inputs, outputs, name=f"{op_type}_0", **attributes)


RNG = np.random.default_rng(0)


def ints(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    """Random values of a FINN integer datatype (BIPOLAR: -1 / +1)."""
    dt = DataType[datatype]
    if dt == DataType["BIPOLAR"]:
        return RNG.choice([-1.0, 1.0], size=shape).astype(np.float32)
    return RNG.integers(int(dt.min()), int(dt.max()) + 1, size=shape).astype(np.float32)


def batch(datatype: str, shape: tuple[int, ...]) -> np.ndarray:
    return ints(datatype, (BATCH, *shape[1:]))


def thresholds(channels: int, steps: int, low: int, high: int) -> np.ndarray:
    """Sorted integer thresholds per channel, with repeats (FINN's RoundAndClipThresholds makes them)."""
    return np.sort(RNG.integers(low, high + 1, size=(channels, steps)), axis=1).astype(np.float32)


Case = Callable[[], tuple[ModelWrapper, list[np.ndarray]]]

# -- cases: FINN's hardware layers ------------------------------------------------------------------------


def mvau_conv() -> tuple[ModelWrapper, list[np.ndarray]]:
    """An MVAU after a sliding window (NHWC vectors), 4-bit thresholds."""
    mw, mh = 18, 6
    node = hw(
        "MVAU", ["x", "w", "t"], ["y"], MW=mw, MH=mh, SIMD=1, PE=1, numInputVectors=[1, 4, 4],
        inputDataType="UINT4", weightDataType="INT4", outputDataType="UINT4", ActVal=0, noActivation=0,
    )  # fmt: skip
    constants = {"w": (ints("INT4", (mw, mh)), "INT4"), "t": (thresholds(mh, 15, -200, 200), "INT10")}
    return graph([node], {"x": ((1, 4, 4, mw), "UINT4")}, {"y": (1, 4, 4, mh)}, constants), [
        batch("UINT4", (1, 4, 4, mw))
    ]


def mvau_fc_signed() -> tuple[ModelWrapper, list[np.ndarray]]:
    """A fully connected MVAU with signed thresholds out (ActVal -4: INT3)."""
    mw, mh = 20, 5
    node = hw(
        "MVAU", ["x", "w", "t"], ["y"], MW=mw, MH=mh, SIMD=1, PE=1, numInputVectors=[1],
        inputDataType="INT4", weightDataType="INT2", outputDataType="INT3", ActVal=-4, noActivation=0,
    )  # fmt: skip
    constants = {"w": (ints("INT2", (mw, mh)), "INT2"), "t": (thresholds(mh, 7, -40, 40), None)}
    return graph([node], {"x": ((1, mw), "INT4")}, {"y": (1, mh)}, constants), [batch("INT4", (1, mw))]


def mvau_no_activation() -> tuple[ModelWrapper, list[np.ndarray]]:
    mw, mh = 64, 10
    node = hw(
        "MVAU", ["x", "w"], ["y"], MW=mw, MH=mh, SIMD=1, PE=1, numInputVectors=[1],
        inputDataType="UINT8", weightDataType="INT8", outputDataType="INT24", noActivation=1,
    )  # fmt: skip
    constants = {"w": (ints("INT8", (mw, mh)), "INT8")}
    return graph([node], {"x": ((1, mw), "UINT8")}, {"y": (1, mh)}, constants), [batch("UINT8", (1, mw))]


def mvau_xnor() -> tuple[ModelWrapper, list[np.ndarray]]:
    """FINN's binaryXnorMode: binary operands, XNOR-popcount, bipolar thresholds out."""
    mw, mh = 32, 8
    node = hw(
        "MVAU", ["x", "w", "t"], ["y"], MW=mw, MH=mh, SIMD=1, PE=1, numInputVectors=[1], binaryXnorMode=1,
        inputDataType="BINARY", weightDataType="BINARY", outputDataType="BIPOLAR", ActVal=0, noActivation=0,
    )  # fmt: skip
    constants = {"w": (ints("BINARY", (mw, mh)), "BINARY"), "t": (thresholds(mh, 1, 10, 22), None)}
    return graph([node], {"x": ((1, mw), "BINARY")}, {"y": (1, mh)}, constants), [batch("BINARY", (1, mw))]


def mvau_bipolar() -> tuple[ModelWrapper, list[np.ndarray]]:
    """Bipolar operands without binaryXnorMode: FINN maps them to binary and XNOR-popcounts."""
    mw, mh = 24, 6
    node = hw(
        "MVAU", ["x", "w"], ["y"], MW=mw, MH=mh, SIMD=1, PE=1, numInputVectors=[1],
        inputDataType="BIPOLAR", weightDataType="BIPOLAR", outputDataType="UINT5", noActivation=1,
    )  # fmt: skip
    constants = {"w": (ints("BIPOLAR", (mw, mh)), "BIPOLAR")}
    return graph([node], {"x": ((1, mw), "BIPOLAR")}, {"y": (1, mh)}, constants), [batch("BIPOLAR", (1, mw))]


def _vvau(producer_is_window: bool, **overrides) -> tuple[ModelWrapper, list[np.ndarray]]:
    channels, k, dim = 6, 3, 4
    attributes = {
        "PE": 2, "Channels": channels, "Dim": [dim, dim], "Kernel": [k, k], "inputDataType": "UINT4",
        "weightDataType": "INT4", "outputDataType": "UINT4", "ActVal": 0, "noActivation": 0,
    }  # fmt: skip
    attributes.update(overrides)
    idt, wdt = attributes["inputDataType"], attributes["weightDataType"]
    constants = {"w": (ints(wdt, (channels, 1, k, k)), wdt)}
    names = ["v", "w"]
    if not attributes["noActivation"]:
        constants["t"] = (thresholds(channels, 15, -60, 60), None)
        names.append("t")
    vvau = hw("VVAU", names, ["y"], **attributes)
    if producer_is_window:
        window = hw(
            "ConvolutionInputGenerator", ["x"], ["v"], ConvKernelDim=[k, k], IFMChannels=channels,
            IFMDim=[dim + 2, dim + 2], OFMDim=[dim, dim], SIMD=1, Stride=[1, 1], Dilation=[1, 1],
            inputDataType=idt, outputDataType=idt, depthwise=1,
        )  # fmt: skip
        model = graph(
            [window, vvau],
            {"x": ((1, dim + 2, dim + 2, channels), idt)},
            {"y": (1, dim, dim, channels)},
            constants,
        )
        return model, [batch(idt, (1, dim + 2, dim + 2, channels))]
    shape = (1, dim, dim, k * k * channels)  # channels interleaved by PE: the producer is no window generator
    model = graph([vvau], {"v": (shape, idt)}, {"y": (1, dim, dim, channels)}, constants)
    return model, [batch(idt, shape)]


def thresholding_nhwc() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "Thresholding", ["x", "t"], ["y"], NumChannels=5, PE=1, numSteps=15, numInputVectors=[1, 3, 3],
        inputDataType="INT10", weightDataType="INT10", outputDataType="UINT4", ActVal=0,
    )  # fmt: skip
    constants = {"t": (thresholds(5, 15, -300, 300), "INT10")}
    return graph([node], {"x": ((1, 3, 3, 5), "INT10")}, {"y": (1, 3, 3, 5)}, constants), [
        batch("INT10", (1, 3, 3, 5))
    ]


def thresholding_float_input() -> tuple[ModelWrapper, list[np.ndarray]]:
    """A float input (the network input FINN quantizes itself), one set of non-integer thresholds
    for all channels, signed output (ActVal -8)."""
    node = hw(
        "Thresholding", ["x", "t"], ["y"], NumChannels=4, PE=1, numSteps=15, numInputVectors=[1],
        inputDataType="FLOAT32", weightDataType="FLOAT32", outputDataType="INT4", ActVal=-8,
    )  # fmt: skip
    steps = np.sort(RNG.normal(size=(1, 15))).astype(np.float32)
    x = RNG.normal(size=(BATCH, 4)).astype(np.float32)
    x[0, :2] = steps[0, 3:5]  # values on a threshold: counted (x >= t)
    return graph([node], {"x": ((1, 4), "FLOAT32")}, {"y": (1, 4)}, {"t": (steps, None)}), [x]


def thresholding_bipolar() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "Thresholding", ["x", "t"], ["y"], NumChannels=6, PE=1, numSteps=1, numInputVectors=[1],
        inputDataType="INT8", weightDataType="INT8", outputDataType="BIPOLAR", ActVal=0,
    )  # fmt: skip
    constants = {"t": (thresholds(6, 1, -20, 20), None)}
    return graph([node], {"x": ((1, 6), "INT8")}, {"y": (1, 6)}, constants), [batch("INT8", (1, 6))]


def sliding_window(kernel=(3, 3), stride=(1, 1), dilation=(1, 1), dim=(7, 7)) -> Case:
    def case():
        channels = 3
        out = [(d - dl * (k - 1) - 1) // s + 1 for d, k, s, dl in zip(dim, kernel, stride, dilation)]
        node = hw(
            "ConvolutionInputGenerator", ["x"], ["y"], ConvKernelDim=list(kernel), IFMChannels=channels,
            IFMDim=list(dim), OFMDim=out, SIMD=1, Stride=list(stride), Dilation=list(dilation),
            inputDataType="UINT4", outputDataType="UINT4",
        )  # fmt: skip
        shape = (1, *dim, channels)
        model = graph([node], {"x": (shape, "UINT4")}, {"y": (1, *out, kernel[0] * kernel[1] * channels)})
        return model, [batch("UINT4", shape)]

    return case


def padding() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "FMPadding",
        ["x"],
        ["y"],
        ImgDim=[4, 5],
        Padding=[1, 2, 0, 1],
        NumChannels=3,
        SIMD=1,
        inputDataType="INT4",
    )
    return graph([node], {"x": ((1, 4, 5, 3), "INT4")}, {"y": (1, 5, 8, 3)}), [batch("INT4", (1, 4, 5, 3))]


def pool(function: str, datatype: str = "UINT4") -> Case:
    def case():
        channels, k = 4, (2, 2)
        node = hw(
            "Pool", ["x"], ["y"], Channels=channels, PE=1, KernelSize=list(k), Function=function, OutImgDims=[3, 3],
            InputDataType=datatype, OutputDataType="UINT4" if function == "QuantAvgPool" else datatype,
        )  # fmt: skip
        shape = (1, 3, 3, k[0] * k[1] * channels)
        return graph([node], {"x": (shape, datatype)}, {"y": (1, 3, 3, channels)}), [batch(datatype, shape)]

    return case


def global_acc_pool() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "GlobalAccPool", ["x"], ["y"], NumChannels=5, PE=1, inputDataType="UINT4", numInputVectors=[1, 3, 3]
    )
    return graph([node], {"x": ((1, 3, 3, 5), "UINT4")}, {"y": (1, 1, 1, 5)}), [batch("UINT4", (1, 3, 3, 5))]


def duplicate() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "DuplicateStreams", ["x"], ["a", "b", "c"], NumChannels=4, PE=1, NumOutputStreams=3,
        inputDataType="INT4", numInputVectors=[1, 2, 2],
    )  # fmt: skip
    shape = (1, 2, 2, 4)
    return graph([node], {"x": (shape, "INT4")}, dict.fromkeys("abc", shape)), [batch("INT4", shape)]


def streaming_concat() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "StreamingConcat", ["a", "b"], ["y"], SIMD=1, ChannelsPerStream=[3, 5], inputDataTypes=["UINT4", "UINT4"],
        numInputVectors=[1, 2, 2],
    )  # fmt: skip
    inputs = {"a": ((1, 2, 2, 3), "UINT4"), "b": ((1, 2, 2, 5), "UINT4")}
    return graph([node], inputs, {"y": (1, 2, 2, 8)}), [batch("UINT4", s) for s, _ in inputs.values()]


def streaming_split() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "StreamingSplit", ["x"], ["a", "b"], SIMD=1, ChannelsPerStream=[3, 5], inputDataType="INT4",
        numInputVectors=[1, 2, 2],
    )  # fmt: skip
    outputs = {"a": (1, 2, 2, 3), "b": (1, 2, 2, 5)}
    return graph([node], {"x": ((1, 2, 2, 8), "INT4")}, outputs), [batch("INT4", (1, 2, 2, 8))]


def shuffle() -> tuple[ModelWrapper, list[np.ndarray]]:
    """A channel shuffle of two groups on NHWC data, as FINN's InferShuffle writes it."""
    node = hw(
        "Shuffle", ["x"], ["y"], in_shape=[1, 2, 3, 8], transpose_in_shape=[1, 2, 3, 2, 4],
        transpose_out_shape=[1, 2, 3, 4, 2], out_shape=[1, 2, 3, 8], perm=[0, 1, 2, 4, 3], data_type="INT4",
        SIMD=1, NumChannels=4,
    )  # fmt: skip
    return graph([node], {"x": ((1, 2, 3, 8), "INT4")}, {"y": (1, 2, 3, 8)}), [batch("INT4", (1, 2, 3, 8))]


def label_select() -> tuple[ModelWrapper, list[np.ndarray]]:
    """Top-3 of 10 labels with ties (values of 3 bits): ONNX Runtime puts the lower index first."""
    node = hw(
        "LabelSelect", ["x"], ["y"], Labels=10, PE=1, K=3, inputDataType="UINT3", outputDataType="UINT4"
    )
    return graph([node], {"x": ((1, 10), "UINT3")}, {"y": (1, 3)}), [batch("UINT3", (1, 10))]


def requant() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = hw(
        "Requant", ["x", "s", "b"], ["y"], NumChannels=4, PE=1, inputDataType="INT6", outputDataType="INT5",
        numInputVectors=[1, 2, 2], narrow=1,
    )  # fmt: skip
    constants = {  # channels 0 and 1 meet ties (x / 2, x / 4): FINN rounds them up (floor(v + 0.5))
        "s": (np.float32([0.5, 0.25, 0.13, 0.37]), None),
        "b": (np.float32([0.0, 0.0, 0.3, -1.7]), None),
    }
    shape = (1, 2, 2, 4)  # INT6 / 2 reaches -16 and 15.5: the narrow INT5 range (-15..15) clips
    return graph([node], {"x": (shape, "INT6")}, {"y": shape}, constants), [batch("INT6", shape)]


def elementwise(op_type: str) -> Case:
    """Two computed operands (lhs INT5, rhs UINT3 or, for Div, 1..7) broadcast per channel."""

    def case():
        lhs, rhs = (1, 2, 3, 4), (1, 1, 1, 4)
        rhs_dtype = "UINT3"
        node = hw(
            op_type, ["a", "b"], ["y"], lhs_dtype="INT5", rhs_dtype=rhs_dtype, out_dtype="INT16",
            lhs_shape=list(lhs), rhs_shape=list(rhs), out_shape=list(lhs),
        )  # fmt: skip
        b = batch(rhs_dtype, rhs)
        if op_type == "ElementwiseDiv":
            b = np.maximum(b, 1.0)
        model = graph([node], {"a": (lhs, "INT5"), "b": (rhs, rhs_dtype)}, {"y": lhs})
        return model, [batch("INT5", lhs), b]

    return case


def elementwise_constant() -> tuple[ModelWrapper, list[np.ndarray]]:
    """A constant right operand (FINN's rhs_style const)."""
    shape = (1, 3, 4)
    node = hw(
        "ElementwiseAdd", ["a", "c"], ["y"], lhs_dtype="INT8", rhs_dtype="INT8", out_dtype="INT9",
        lhs_shape=list(shape), rhs_shape=[4], out_shape=list(shape), rhs_style="const",
    )  # fmt: skip
    model = graph([node], {"a": (shape, "INT8")}, {"y": shape}, {"c": (ints("INT8", (4,)), "INT8")})
    return model, [batch("INT8", shape)]


def partition(tmp_path) -> tuple[ModelWrapper, list[np.ndarray]]:
    """A parent graph around a StreamingDataflowPartition (thresholds inside, a float scale outside)."""
    inner, _ = thresholding_nhwc()
    path = str(tmp_path / "partition.onnx")
    inner.save(path)
    sdp = oh.make_node(
        "StreamingDataflowPartition", ["x"], ["p"], domain="finn.custom_op.fpgadataflow", model=path,
        name="StreamingDataflowPartition_0",
    )  # fmt: skip
    scale = standard("Mul", ["p", "s"], ["y"])
    model = graph(
        [sdp, scale],
        {"x": ((1, 3, 3, 5), "INT10")},
        {"y": (1, 3, 3, 5)},
        {"s": (np.float32([0.37]), None)},
        between={"p": (1, 3, 3, 5)},
    )
    return model, [batch("INT10", (1, 3, 3, 5))]


# -- cases: qonnx's custom nodes -------------------------------------------------------------------------


def multithreshold(layout: str | None, shape: tuple[int, ...], scale: float = 1.0, bias: float = 0.0) -> Case:
    def case():
        channels = shape[layout.index("C")] if layout else shape[1]
        attributes = {"out_dtype": "UINT4", "out_scale": scale, "out_bias": bias}
        if layout:
            attributes["data_layout"] = layout
        node = general("MultiThreshold", ["x", "t"], ["y"], **attributes)
        constants = {"t": (thresholds(channels, 15, -50, 50), None)}
        return graph([node], {"x": (shape, "INT8")}, {"y": shape}, constants), [batch("INT8", shape)]

    return case


def xnor_popcount() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = general("XnorPopcountMatMul", ["x", "w"], ["y"])
    model = graph(
        [node], {"x": ((1, 16), "BINARY")}, {"y": (1, 8)}, {"w": (ints("BINARY", (16, 8)), "BINARY")}
    )
    return model, [batch("BINARY", (1, 16))]


def im2col() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = general(
        "Im2Col", ["x"], ["y"], stride=[2, 2], kernel_size=[3, 3], input_shape="(1,5,6,3)",
        pad_amount=[1, 1, 1, 2], pad_value=0, dilations=[1, 1],
    )  # fmt: skip
    return graph([node], {"x": ((1, 5, 6, 3), "UINT4")}, {"y": (1, 3, 4, 27)}), [batch("UINT4", (1, 5, 6, 3))]


def max_pool_nhwc() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = general("MaxPoolNHWC", ["x"], ["y"], kernel_shape=[2, 2], pads=[0, 0, 0, 0], strides=[2, 2])
    return graph([node], {"x": ((1, 6, 6, 4), "INT4")}, {"y": (1, 3, 3, 4)}), [batch("INT4", (1, 6, 6, 4))]


def quant_avg_pool(layout: str) -> Case:
    def case():
        shape = (1, 4, 6, 6) if layout == "NCHW" else (1, 6, 6, 4)
        out = (1, 4, 3, 3) if layout == "NCHW" else (1, 3, 3, 4)
        node = general(
            "QuantAvgPool2d", ["x"], ["y"], stride=2, kernel=2, ibits=4, obits=4, signed=0, data_layout=layout
        )
        return graph([node], {"x": (shape, "UINT4")}, {"y": out}), [batch("UINT4", shape)]

    return case


# -- cases: standard ONNX nodes ------------------------------------------------------------------------------


def float_elementwise(op_type: str) -> Case:
    """Float operands and a float constant that is no power of two: one IEEE operation, as in ONNX Runtime."""

    def case():
        node = standard(op_type, ["x", "c"], ["y"])
        constant = RNG.normal(size=(1, 5)).astype(np.float32)
        model = graph([node], {"x": ((1, 3, 5), "FLOAT32")}, {"y": (1, 3, 5)}, {"c": (constant, None)})
        return model, [RNG.normal(size=(BATCH, 3, 5)).astype(np.float32) * 100]

    return case


def float_elementwise_computed() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Add", ["a", "b"], ["y"])
    model = graph([node], {"a": ((1, 6), "FLOAT32"), "b": ((1, 6), "FLOAT32")}, {"y": (1, 6)})
    return model, [RNG.normal(size=(BATCH, 6)).astype(np.float32) for _ in range(2)]


def matmul() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("MatMul", ["x", "w"], ["y"])
    model = graph(
        [node], {"x": ((1, 2, 12), "INT4")}, {"y": (1, 2, 5)}, {"w": (ints("INT4", (12, 5)), "INT4")}
    )
    return model, [batch("INT4", (1, 2, 12))]


def transpose() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Transpose", ["x"], ["y"], perm=[0, 2, 3, 1])
    return graph([node], {"x": ((1, 3, 4, 5), "INT4")}, {"y": (1, 4, 5, 3)}), [batch("INT4", (1, 3, 4, 5))]


def reshape() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Reshape", ["x", "shape"], ["y"])
    model = graph([node], {"x": ((1, 3, 4), "INT4")}, {"y": (1, 12)}, {"shape": (np.int64([1, -1]), None)})
    return model, [batch("INT4", (1, 3, 4))]


def flatten() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Flatten", ["x"], ["y"], axis=1)
    return graph([node], {"x": ((1, 2, 2, 3), "INT4")}, {"y": (1, 12)}), [batch("INT4", (1, 2, 2, 3))]


def squeeze() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Squeeze", ["x", "axes"], ["y"])
    model = graph([node], {"x": ((1, 4, 1, 3), "INT4")}, {"y": (1, 4, 3)}, {"axes": (np.int64([2]), None)})
    return model, [batch("INT4", (1, 4, 1, 3))]


def unsqueeze() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Unsqueeze", ["x", "axes"], ["y"])
    model = graph([node], {"x": ((1, 4, 3), "INT4")}, {"y": (1, 4, 1, 3)}, {"axes": (np.int64([2]), None)})
    return model, [batch("INT4", (1, 4, 3))]


def identity() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Identity", ["x"], ["y"])
    return graph([node], {"x": ((1, 5), "INT4")}, {"y": (1, 5)}), [batch("INT4", (1, 5))]


def concat() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Concat", ["a", "b"], ["y"], axis=1)
    inputs = {"a": ((1, 2, 3), "INT4"), "b": ((1, 4, 3), "INT4")}
    return graph([node], inputs, {"y": (1, 6, 3)}), [batch("INT4", s) for s, _ in inputs.values()]


def split() -> tuple[ModelWrapper, list[np.ndarray]]:
    node = standard("Split", ["x", "sizes"], ["a", "b"], axis=3)
    outputs = {"a": (1, 2, 2, 3), "b": (1, 2, 2, 5)}
    model = graph([node], {"x": ((1, 2, 2, 8), "INT4")}, outputs, {"sizes": (np.int64([3, 5]), None)})
    return model, [batch("INT4", (1, 2, 2, 8))]


def max_pool(pads: list[int], kernel: int, stride: int) -> Case:
    def case():
        node = standard("MaxPool", ["x"], ["y"], kernel_shape=[kernel] * 2, pads=pads, strides=[stride] * 2)
        height = 6
        out = (height + pads[0] + pads[2] - kernel) // stride + 1
        model = graph([node], {"x": ((1, 3, height, height), "INT4")}, {"y": (1, 3, out, out)})
        return model, [batch("INT4", (1, 3, height, height))]

    return case


def global_average_pool(height: int, width: int) -> Case:
    """Sums divided by 49 or 15 (no power of two: ONNX Runtime's division, not a reciprocal's product)."""

    def case():
        node = standard("GlobalAveragePool", ["x"], ["y"])
        shape = (1, 64, height, width)
        return graph([node], {"x": (shape, "INT8")}, {"y": (1, 64, 1, 1)}), [batch("INT8", shape)]

    return case


def top_k() -> tuple[ModelWrapper, list[np.ndarray]]:
    """Top-4 of 10 with ties: ONNX Runtime puts the lower index first."""
    node = standard("TopK", ["x", "k"], ["values", "indices"], axis=-1)
    model = graph(
        [node], {"x": ((1, 10), "UINT2")}, {"values": (1, 4), "indices": (1, 4)}, {"k": (np.int64([4]), None)},
        int64_outputs=("indices",),
    )  # fmt: skip
    return model, [batch("UINT2", (1, 10))]


#: op type -> its cases (name -> builder); every row of execute.KERNELS has at least one
CASES: dict[str, dict[str, Callable]] = {
    "MVAU": {
        "conv": mvau_conv, "fc-signed": mvau_fc_signed, "no-activation": mvau_no_activation,
        "xnor": mvau_xnor, "bipolar": mvau_bipolar,
    },
    "VVAU": {
        "after-window": lambda: _vvau(True),
        "interleaved": lambda: _vvau(False),
        "no-activation": lambda: _vvau(True, noActivation=1, outputDataType="INT16"),
        "bipolar": lambda: _vvau(False, inputDataType="BIPOLAR", weightDataType="BIPOLAR", outputDataType="UINT4"),
    },
    "Thresholding": {"nhwc": thresholding_nhwc, "float-input": thresholding_float_input, "bipolar": thresholding_bipolar},
    "ConvolutionInputGenerator": {
        "3x3": sliding_window(),
        "2x2-stride-2": sliding_window((2, 2), (2, 2), dim=(6, 6)),
        "dilated": sliding_window(dilation=(2, 2)),
        "1d": sliding_window((1, 3), dim=(1, 9)),
    },
    "FMPadding": {"asymmetric": padding},
    "Pool": {
        "max": pool("MaxPool", "INT4"), "acc": pool("AccPool"), "avg": pool("AvgPool"),
        "quant-avg": pool("QuantAvgPool"),
    },
    "GlobalAccPool": {"nhwc": global_acc_pool},
    "DuplicateStreams": {"three": duplicate},
    "StreamingConcat": {"two": streaming_concat},
    "StreamingSplit": {"two": streaming_split},
    "Shuffle": {"channels-nhwc": shuffle},
    "LabelSelect": {"ties": label_select},
    "Requant": {"per-channel": requant},
    **{op: {"computed": elementwise(op)} for op in execute.ELEMENTWISE},
    "StreamingDataflowPartition": {"parent": partition},
    "MultiThreshold": {
        "nchw": multithreshold(None, (1, 4, 3, 3)),
        "nc-scaled": multithreshold(None, (1, 6), scale=0.37, bias=-1.5),
        "nhwc": multithreshold("NHWC", (1, 3, 3, 4), bias=-8.0),
    },
    "XnorPopcountMatMul": {"binary": xnor_popcount},
    "Im2Col": {"padded-stride-2": im2col},
    "MaxPoolNHWC": {"2x2": max_pool_nhwc},
    "QuantAvgPool2d": {"nchw": quant_avg_pool("NCHW"), "nhwc": quant_avg_pool("NHWC")},
    **{op: {"float": float_elementwise(op)} for op in execute.STANDARD_ELEMENTWISE},
    "MatMul": {"integer": matmul},
    "Transpose": {"nchw-to-nhwc": transpose},
    "Reshape": {"flatten": reshape},
    "Flatten": {"axis-1": flatten},
    "Squeeze": {"axis-2": squeeze},
    "Unsqueeze": {"axis-2": unsqueeze},
    "Identity": {"copy": identity},
    "Concat": {"axis-1": concat},
    "Split": {"channels-last": split},
    "MaxPool": {"2x2": max_pool([0, 0, 0, 0], 2, 2), "3x3-padded": max_pool([1, 1, 1, 1], 3, 2)},
    "GlobalAveragePool": {"7x7": global_average_pool(7, 7), "3x5": global_average_pool(3, 5)},
    "TopK": {"ties": top_k},
}  # fmt: skip
CASES["ElementwiseAdd"]["constant"] = elementwise_constant
CASES["Add"]["computed"] = float_elementwise_computed
CASES["Thresholding"]["nhwc"] = thresholding_nhwc


def test_every_row_has_a_case():
    assert set(CASES) == set(execute.KERNELS)


def _build(builder, tmp_path):
    return builder(tmp_path) if builder is partition else builder()


def assert_identical(ours: list[np.ndarray], finn: list[np.ndarray]) -> None:
    assert len(ours) == len(finn)
    for mine, theirs in zip(ours, finn):
        assert mine.dtype == theirs.dtype and mine.shape == theirs.shape
        np.testing.assert_array_equal(mine, theirs)  # atol=0


@pytest.mark.parametrize(
    "op_type, variant",
    [pytest.param(op, name, id=f"{op}-{name}") for op, variants in CASES.items() for name in variants],
)
def test_row_equals_finns_python_execution(tmp_path, op_type, variant):
    model, inputs = _build(CASES[op_type][variant], tmp_path)
    assert op_type in {n.op_type for n in model.graph.node}
    program = execute.compile_graph(model)  # raises where a row refuses: every case must compile
    ours = execute.run_program(program, inputs, chunk=3)  # chunks of 3: the batch split and joined
    assert_identical(ours, execute_qonnx(model, inputs))


# -- refusals: FINN's own execution, with the reason logged -------------------------------------------------


def test_an_op_type_without_a_row_runs_in_finns_execution_with_a_logged_reason(caplog):
    node = standard("Softsign", ["x"], ["y"])
    model = graph([node], {"x": ((1, 3, 4), "FLOAT32")}, {"y": (1, 3, 4)})
    x = RNG.normal(size=(BATCH, 3, 4)).astype(np.float32)
    with pytest.raises(execute.Unsupported, match=r"Softsign_0 \(Softsign\): no row"):
        execute.compile_graph(model)
    with caplog.at_level(logging.WARNING, logger=execute.__name__):
        result = execute.execute(model, [x])
    assert result.engine == execute.FINN_PYTHON and "no row for Softsign" in result.reason
    assert "Softsign_0 (Softsign): no row" in caplog.text
    assert_identical(result.outputs, execute_qonnx(model, [x]))


def test_a_data_dependent_refusal_falls_back_too(caplog):
    """A global average pool whose sums leave float32's integers: ONNX Runtime's order decides."""
    node = standard("GlobalAveragePool", ["x"], ["y"])
    model = graph([node], {"x": ((1, 2, 8, 8), "INT24")}, {"y": (1, 2, 1, 1)})
    x = batch("INT24", (1, 2, 8, 8))
    with caplog.at_level(logging.WARNING, logger=execute.__name__):
        result = execute.execute(model, [x])
    assert result.engine == execute.FINN_PYTHON and "ONNX Runtime's order decides" in caplog.text
    assert_identical(result.outputs, execute_qonnx(model, [x]))


def test_a_float_matrix_product_is_refused_summation_order():
    node = standard("MatMul", ["x", "w"], ["y"])
    model = graph([node], {"x": ((1, 6), "FLOAT32")}, {"y": (1, 2)}, {"w": (ints("INT4", (6, 2)), "INT4")})
    with pytest.raises(
        execute.Unsupported, match=r"MatMul_0 \(MatMul\): the input is FLOAT32.*summation order"
    ):
        execute.compile_graph(model)


def test_a_supported_graph_runs_batched(tmp_path):
    model, inputs = partition(tmp_path)
    result = execute.execute(model, inputs)
    assert result.engine == execute.BATCHED and result.reason == ""
    assert_identical(result.outputs, execute_qonnx(model, inputs))


def test_non_integers_in_an_integer_tensor_are_rounded_as_qonnx_sanitizes_them():
    """qonnx rounds values an integer annotation says are integers, within its error threshold
    (1e-2), and fails beyond it; so does the executor."""
    model, _ = thresholding_nhwc()
    x = batch("INT10", (1, 3, 3, 5)) + RNG.uniform(-0.009, 0.009, size=(BATCH, 3, 3, 5)).astype(np.float32)
    assert_identical(execute.run_program(execute.compile_graph(model), [x]), execute_qonnx(model, [x]))
    x[0, 0, 0, 0] += 0.3
    with pytest.raises(Exception, match=r"(?s)Rounding error is too high .*INT10.* for input x"):
        execute_qonnx(model, [x])
    with pytest.raises(RuntimeError, match=r"Rounding error is too high .*INT10.* for input x"):
        execute.run_program(execute.compile_graph(model), [x])


# -- the accumulator beyond float32's integers ---------------------------------------------------------------


def _wide_mvau(mw: int, bits: int) -> tuple[ModelWrapper, np.ndarray, np.ndarray]:
    node = hw(
        "MVAU", ["x", "w"], ["y"], MW=mw, MH=3, SIMD=1, PE=1, numInputVectors=[1],
        inputDataType=f"INT{bits}", weightDataType=f"INT{bits}", outputDataType="INT32", noActivation=1,
    )  # fmt: skip
    w = ints(f"INT{bits}", (mw, 3))
    model = graph([node], {"x": ((1, mw), f"INT{bits}")}, {"y": (1, 3)}, {"w": (w, f"INT{bits}")})
    return model, w, ints(f"INT{bits}", (BATCH, mw))


def test_an_accumulator_beyond_2_to_24_is_the_exact_integer():
    """INT12 x INT12 over 256 terms: partial sums up to 2**30, past float32's integers; the executor
    gives the exact integer sum (int64, from the formula) rounded once to float32, as FINN's hardware
    accumulator holds it, where FINN's float32 matmul rounds as its BLAS sums."""
    model, w, x = _wide_mvau(256, 12)
    x[0] = DataType["INT12"].min()  # the largest magnitude
    exact = x.astype(np.int64) @ w.astype(np.int64)
    assert np.abs(exact).max() > 2**24
    ours = execute.run_program(execute.compile_graph(model), [x])[0]
    np.testing.assert_array_equal(ours, exact.astype(np.float32))


def test_an_accumulator_below_2_to_24_computes_in_float32_as_finn():
    model, w, x = _wide_mvau(64, 9)  # 64 * 256 * 256 = 2**22
    assert_identical(execute.run_program(execute.compile_graph(model), [x]), execute_qonnx(model, [x]))
    np.testing.assert_array_equal(
        execute.run_program(execute.compile_graph(model), [x])[0],
        (x.astype(np.int64) @ w.astype(np.int64)).astype(np.float32),
    )
