"""ShuffleNetV2's constructs to FINN: ``torch.chunk``, a branch, ``torch.cat`` and torchvision's channel
shuffle (``x.size()``, a 5-D view, ``transpose(1, 2)``, a view back), graph mode with the FINN preset,
to one dataflow partition whose hardware graph equals torch; and the passes that get it there
(``passes.SlicesAsSplit``, ``passes.ChannelShuffleToNHWC``), each exact on graphs of their own."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch
from onnx import TensorProto
from onnx import helper as oh
from torch import nn

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

import _shared.finn_zoo as zoo
from qonnx.core.modelwrapper import ModelWrapper
from qonnx.core.onnx_exec import execute_onnx
from qonnx.transformation.infer_shapes import InferShapes
from qonnx.util.basic import qonnx_make_model

from quark.torch.extensions.brevitas._backend.targets.finn import execute
from quark.torch.extensions.brevitas._backend.targets.finn.passes import ChannelShuffleToNHWC, SlicesAsSplit
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn


def channel_shuffle(x: torch.Tensor, groups: int) -> torch.Tensor:
    """torchvision's ``models.shufflenetv2.channel_shuffle``, line for line."""
    batchsize, num_channels, height, width = x.size()
    channels_per_group = num_channels // groups
    x = x.view(batchsize, groups, channels_per_group, height, width)
    x = torch.transpose(x, 1, 2).contiguous()
    x = x.view(batchsize, num_channels, height, width)
    return x


def _branch(c_in: int, c_out: int, stride: int) -> nn.Sequential:
    """ShuffleNetV2's branch2: 1x1 conv, BN, ReLU, 3x3 depthwise, BN, 1x1 conv, BN, ReLU."""
    return nn.Sequential(
        nn.Conv2d(c_in, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
        nn.Conv2d(c_out, c_out, 3, stride, 1, groups=c_out, bias=False), nn.BatchNorm2d(c_out),
        nn.Conv2d(c_out, c_out, 1, bias=False), nn.BatchNorm2d(c_out), nn.ReLU(),
    )  # fmt: skip


class _Unit(nn.Module):
    """torchvision's ``InvertedResidual``: stride 1 splits the input with ``chunk`` and passes one half
    through; stride 2 feeds the whole input to two branches (a fork). Then ``cat`` and the shuffle."""

    def __init__(self, c_in: int, c_out: int, stride: int) -> None:
        super().__init__()
        self.stride, half = stride, c_out // 2
        if stride > 1:
            self.branch1 = nn.Sequential(
                nn.Conv2d(c_in, c_in, 3, stride, 1, groups=c_in, bias=False), nn.BatchNorm2d(c_in),
                nn.Conv2d(c_in, half, 1, bias=False), nn.BatchNorm2d(half), nn.ReLU(),
            )  # fmt: skip
        self.branch2 = _branch(c_in if stride > 1 else half, half, stride)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.stride == 1:
            x1, x2 = x.chunk(2, dim=1)
            out = torch.cat((x1, self.branch2(x2)), dim=1)
        else:
            out = torch.cat((self.branch1(x), self.branch2(x)), dim=1)
        return channel_shuffle(out, 2)


class _TinyShuffleNet(nn.Module):
    """A stem, a downsampling unit and a basic unit, global pooling and a classifier (digits: 1x8x8)."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1, bias=False), nn.BatchNorm2d(8), nn.ReLU())
        self.stages = nn.Sequential(_Unit(8, 16, 2), _Unit(16, 16, 1))
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.stages(self.stem(x)))


def _op(node: onnx.NodeProto) -> str:
    return node.op_type.rsplit("_", 1)[0] if node.op_type.endswith(("_hls", "_rtl")) else node.op_type


def test_chunk_branch_cat_and_channel_shuffle_reach_one_partition_equal_to_torch(tmp_path):
    """The QONNX export keeps x.size() only as constants (its Shape nodes fold on the static input),
    the chunk becomes a StreamingSplit, the shuffle one Shuffle layer (an InnerShuffle once FINN
    decomposes it for the part), and the hardware graph gives torch's outputs exactly."""
    from quark.torch.examples.vision_zoo import set_batch_norm_statistics

    train, test = zoo.digits_batches()
    torch.manual_seed(0)
    model = set_batch_norm_statistics(_TinyShuffleNet(), train[:4])
    qmodel = ModelQuantizer(finn()).quantize_model(model, train[:4], progress=False)
    report = ModelExporter(tmp_path / "model.onnx").export_qonnx_model(qmodel, test[:4])
    written = onnx.load(tmp_path / "model.onnx")
    assert "Shape" in {n.op_type for n in written.graph.node}  # x.size() and chunk's bounds, folded later
    assert report.passed and len(report.target_checks) == 2  # both graph rules pass
    result = ModelExporter(tmp_path / "dataflow").export_finn_dataflow(qmodel, test[:32], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
    assert result.verification.identical_predictions == 32 and result.verification.engine == execute.BATCHED
    assert result.float_layers == ()
    assert [o.split(" ")[0].rstrip("_0123456789") for o in result.outside] == ["Transpose", "Mul", "Add"]
    unfolded = [_op(n) for n in onnx.load(result.files["parent"]).graph.node]
    assert unfolded == ["Transpose", "StreamingDataflowPartition", "Mul", "Add"]
    partitions = list((tmp_path / "dataflow" / "partitions").glob("*.onnx"))
    before = {_op(n) for p in partitions for n in onnx.load(p).graph.node}
    assert {"StreamingSplit", "StreamingConcat", "Shuffle", "DuplicateStreams"} <= before
    folded = [_op(n) for n in onnx.load(result.files["partition"]).graph.node]
    assert folded.count("InnerShuffle") == 2 and "Shuffle" not in folded  # one per unit
    assert {layer.op_type for layer in result.estimate.layers} >= {"InnerShuffle_rtl", "StreamingSplit_hls"}


# -- the passes on graphs of their own -----------------------------------------------------------------------


def _model(nodes, inputs, outputs, constants=None) -> ModelWrapper:
    def info(values: dict) -> list:
        return [oh.make_tensor_value_info(name, TensorProto.FLOAT, shape) for name, shape in values.items()]

    graph = oh.make_graph(nodes, "g", info(inputs), info(outputs))
    model = ModelWrapper(qonnx_make_model(graph, opset_imports=[oh.make_opsetid("", 17)]))
    for name, value in (constants or {}).items():
        model.set_initializer(name, value)
    return model.transform(InferShapes())


def _slice(name: str, begin: int, end: int, axis: int = 1) -> tuple[onnx.NodeProto, dict]:
    names = [f"{name}_{p}" for p in ("starts", "ends", "axes")]
    node = oh.make_node("Slice", ["x", *names], [name], name=name)
    return node, dict(zip(names, (np.int64([begin]), np.int64([end]), np.int64([axis]))))


def _run(model: ModelWrapper, x: np.ndarray) -> dict[str, np.ndarray]:
    return execute_onnx(model, {"x": x})


def test_slices_covering_a_tensor_become_one_split_with_the_same_pieces():
    """torch.chunk's Slices (here three, the last up to INT64_MAX as the exporter writes it) become one
    Split; the pieces are the same."""
    pieces = [_slice("a", 0, 2), _slice("b", 2, 5), _slice("c", 5, np.iinfo(np.int64).max)]
    nodes = [node for node, _ in pieces]
    constants = {k: v for _, c in pieces for k, v in c.items()}
    outputs = {"a": [1, 2, 3, 3], "b": [1, 3, 3, 3], "c": [1, 3, 3, 3]}
    model = _model(nodes, {"x": [1, 8, 3, 3]}, outputs, constants)
    x = np.random.default_rng(0).normal(size=(1, 8, 3, 3)).astype(np.float32)
    after = model.transform(SlicesAsSplit())
    assert [n.op_type for n in after.graph.node] == ["Split"]
    assert list(after.get_initializer(after.graph.node[0].input[1])) == [2, 3, 3]
    expected, got = _run(model, x), _run(after, x)
    assert all(np.array_equal(expected[k], got[k]) for k in "abc")


@pytest.mark.parametrize(
    "bounds",
    [[(0, 4), (5, 8)], [(0, 4), (3, 8)], [(0, 4)]],
    ids=["a-gap", "an-overlap", "one-slice"],
)
def test_slices_that_do_not_cover_the_tensor_stay(bounds):
    pieces = [_slice(f"s{i}", begin, end) for i, (begin, end) in enumerate(bounds)]
    constants = {k: v for _, c in pieces for k, v in c.items()}
    outputs = {f"s{i}": [1, end - begin, 3, 3] for i, (begin, end) in enumerate(bounds)}
    model = _model([node for node, _ in pieces], {"x": [1, 8, 3, 3]}, outputs, constants)
    assert [n.op_type for n in model.transform(SlicesAsSplit()).graph.node] == ["Slice"] * len(bounds)


def _shuffle_graph(n_c_h_w, view, perm) -> ModelWrapper:
    """Transpose(NHWC -> NCHW) -> Reshape(view) -> Transpose(perm) -> Reshape back, as the streamlined
    graph holds torchvision's channel_shuffle."""
    n, c, h, w = n_c_h_w
    nodes = [
        oh.make_node("Transpose", ["x"], ["nchw"], perm=[0, 3, 1, 2], name="to_nchw"),
        oh.make_node("Reshape", ["nchw", "view"], ["grouped"], name="view"),
        oh.make_node("Transpose", ["grouped"], ["swapped"], perm=perm, name="transpose"),
        oh.make_node("Reshape", ["swapped", "back"], ["y"], name="view_back"),
    ]
    constants = {"view": np.int64(view), "back": np.int64([n, c, h, w])}
    return _model(nodes, {"x": [n, h, w, c]}, {"y": [n, c, h, w]}, constants)


@pytest.mark.parametrize(
    "view, perm",
    [
        ([1, 2, 6, 3, 2], [0, 2, 1, 3, 4]),
        ([1, 3, 4, 3, 2], [0, 2, 1, 3, 4]),
        ([1, 2, 3, 2, 3, 2], [0, 3, 1, 2, 4, 5]),
    ],
    ids=["2-groups", "3-groups", "three-factors"],
)
def test_a_channel_shuffle_moves_to_nhwc_exactly(view, perm):
    """The shuffle of each pixel's channels in NHWC, then one Transpose to NCHW: the same outputs."""
    model = _shuffle_graph((1, 12, 3, 2), view, perm)
    x = np.random.default_rng(1).normal(size=(1, 3, 2, 12)).astype(np.float32)
    after = model.transform(ChannelShuffleToNHWC())
    ops = [(n.op_type, list(n.attribute[0].ints) if n.attribute else None) for n in after.graph.node]
    nhwc = [0, 1, 2, *(p + 2 for p in perm[1:-2])]  # the same factors, moved behind H and W
    assert ops == [("Reshape", None), ("Transpose", nhwc), ("Reshape", None), ("Transpose", [0, 3, 1, 2])]
    assert np.array_equal(_run(model, x)["y"], _run(after, x)["y"])


@pytest.mark.parametrize(
    "view, perm",
    [([1, 2, 6, 3, 2], [0, 3, 1, 2, 4]), ([1, 6, 2, 6, 1], [0, 2, 1, 3, 4])],
    ids=["moves-a-pixel-axis", "reshapes-across-pixels"],
)
def test_what_is_not_a_channel_shuffle_stays(view, perm):
    model = _shuffle_graph((1, 12, 3, 2), view, perm)
    assert [n.name for n in model.transform(ChannelShuffleToNHWC()).graph.node] == [
        "to_nchw", "view", "transpose", "view_back",
    ]  # fmt: skip


class _HalfTheChannels(nn.Module):
    """Keeps the first half of the channels and drops the rest: a Slice that is no chunk."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, 1, 1), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(4, 8, 3, 1, 1), nn.ReLU())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)[:, :4]))


def test_a_slice_that_is_no_chunk_is_refused_by_name_with_the_fix(tmp_path):
    """``x[:, :4]`` covers half the tensor: no Split, no StreamingSplit. The refusal names the Slice with
    the module next to it and the change that fixes it (and the layout transposes it keeps in place on
    either side)."""
    from quark.torch.extensions.brevitas._backend.targets.finn.front_end import UNMAPPED_FIXES
    from quark.torch.extensions.brevitas.api import FinnError

    train, test = zoo.digits_batches()
    torch.manual_seed(0)
    qmodel = ModelQuantizer(finn()).quantize_model(_HalfTheChannels().eval(), train[:4], progress=False)
    with pytest.raises(FinnError) as caught:
        ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:8], integer_input=True)
    assert [p for p in caught.value.problems if "(Slice," in p] == [
        f"Slice_0 (Slice, module 'body.0'): {UNMAPPED_FIXES['Slice']}"
    ]
    assert [p.split(" (")[0] for p in caught.value.problems] == ["Transpose_1", "Slice_0", "Transpose_2"]
