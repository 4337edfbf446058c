"""FINN's dataflow back half on whole-integer FINN-style networks (``_shared/finn_zoo.py``) and real
digits: one dataflow partition of hardware layers whose Python execution equals torch, estimates
checked against FINN's published per-layer formulas, and refusals that name the layer."""

from __future__ import annotations

import json
import logging
import math
from functools import partial
from pathlib import Path

import numpy as np
import onnx
import pytest
import torch
from brevitas.quant import Uint8ActPerTensorFixedPoint
from torch import nn

pytest.importorskip(
    "finn.transformation.fpgadataflow.create_dataflow_partition",
    reason="finn-plus is not installed (pip install --no-deps finn-plus==1.6.1; see docs/export.md)",
)

import _shared.finn_zoo as zoo

from quark.torch.extensions.brevitas import finn_steps
from quark.torch.extensions.brevitas._backend.targets.finn import execute, front_end
from quark.torch.extensions.brevitas._backend.targets.finn import parts as fpga_parts
from quark.torch.extensions.brevitas._backend.targets.finn.build_config import FinnBuildConfig
from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import export_finn_dataflow
from quark.torch.extensions.brevitas._backend.targets.finn.origins import module_of
from quark.torch.extensions.brevitas.api import FinnError, ModelExporter

HW_DOMAIN = "finn.custom_op.fpgadataflow"
PART, CLOCK_MHZ, TARGET_FPS = "xc7z020clg400-1", 100.0, 50_000
#: hardware layers each network must have (besides MVAU and Thresholding)
LAYERS = {
    "tfc": {"MVAU"},
    "cnv": {"MVAU", "ConvolutionInputGenerator", "Pool", "FMPadding"},
    "resnet": {"MVAU", "ElementwiseAdd", "DuplicateStreams", "ConvolutionInputGenerator"},
    "concat": {"MVAU", "StreamingConcat", "DuplicateStreams"},
    "mobilenet": {"MVAU", "VVAU", "ConvolutionInputGenerator"},
}


@pytest.fixture(scope="module")
def digits():
    torch.manual_seed(0)
    return zoo.digits_batches()


@pytest.fixture(scope="module")
def exports(digits, tmp_path_factory):
    """Each zoo network exported once per module: name -> (DataflowExport, torch outputs)."""
    train, test = digits
    done = {}

    def get(name: str):
        if name not in done:
            model = zoo.calibrated(name, train[:4])
            x = test[:24]
            exporter = ModelExporter(tmp_path_factory.mktemp(name))  # the public API: a directory
            result = exporter.export_finn_dataflow(model, x, part=PART, target_fps=TARGET_FPS, clock_mhz=CLOCK_MHZ)
            with torch.no_grad():
                out = model(x)
                done[name] = (result, getattr(out, "value", out).numpy())
        return done[name]

    return get


def _json(path: str):
    return json.loads(Path(path).read_text())


def _op(node: onnx.NodeProto) -> str:
    """A specialized layer's generic type: MVAU_hls -> MVAU."""
    return node.op_type.rsplit("_", 1)[0] if node.op_type.endswith(("_hls", "_rtl")) else node.op_type


@pytest.mark.parametrize(
    "name",
    ["tfc", *(pytest.param(n, marks=pytest.mark.slow) for n in ("cnv", "resnet", "concat", "mobilenet"))],
)
def test_network_reaches_one_partition_with_torch_outputs(exports, name):
    result, torch_out = exports(name)
    # the files, re-read with plain onnx / json
    parent = onnx.load(result.files["parent"])
    partitions = [n for n in parent.graph.node if n.op_type == "StreamingDataflowPartition"]
    assert len(partitions) == 1
    ops = [n.op_type for n in parent.graph.node]
    outside = set(ops) - {"StreamingDataflowPartition"}
    # on the host: NCHW -> NHWC / flattening of the input, and the output's float scale and bias after the partition
    assert outside <= {"Transpose", "Flatten", "Mul", "Add"}
    partition = ops.index("StreamingDataflowPartition")
    assert all(i > partition for i, op in enumerate(ops) if op in ("Mul", "Add"))
    partition = onnx.load(result.files["partition"])
    assert all(n.domain.startswith(HW_DOMAIN) for n in partition.graph.node)
    assert LAYERS[name] | {"Thresholding"} <= {_op(n) for n in partition.graph.node}
    # the hardware-layer graph, executed batched (bit-exact to FINN's Python execution), against torch
    verification = _json(result.files["verification"])["hardware_graph"]
    assert (
        verification["passed"]
        and verification["predictions_identical"]
        and verification["reference"] == "torch"
        and verification["engine"] == execute.BATCHED
    )
    assert result.verification.max_abs_diff <= 1e-5 * max(1.0, float(np.abs(torch_out).max()))
    assert result.verification.samples == len(torch_out)
    # every step of the build ran, and each one of the front end kept the outputs
    assert [s.name for s in result.steps] == list(finn_steps.DEFAULT_STEPS)
    checked = [s for s in result.steps if s.max_abs_diff is not None]
    assert [s.name for s in checked] == [s.__name__ for s in finn_steps.FRONT_END]
    assert all(s.max_abs_diff <= 1e-5 for s in checked)
    # an estimate report per layer of the partition, in JSON and markdown
    estimate = _json(result.files["estimate_json"])
    assert [layer["name"] for layer in estimate["layers"]] == [n.name for n in partition.graph.node]
    for resource in ("LUT", "BRAM_18K", "URAM", "DSP"):
        assert estimate["totals"][resource] == pytest.approx(
            sum(layer["resources"][resource] for layer in estimate["layers"])
        )
    assert "| **total** |" in Path(result.files["estimate_md"]).read_text()
    folding = _json(result.files["folding_config"])
    assert set(folding) - {"Defaults"} == {n.name for n in partition.graph.node}


def _attr(node: onnx.NodeProto, name: str, default=None):
    """A node attribute; FINN leaves attributes at their default unset (``default``)."""
    value = next((onnx.helper.get_attribute_value(a) for a in node.attribute if a.name == name), default)
    return value.decode() if isinstance(value, bytes) else value


def _finn_r_bram18(omega: float, mem_width: int) -> int:
    """FINN-R (Blott et al., 2018) weight memory in RAMB18 (SDP mode, UG573 table 1-10): a depth of
    omega words of mem_width bits; narrow words pack 16k x 1, 8k x 2, 4k x 4, 2k x 9, 1k x 18,
    512 x 36 (the 36-bit mode only pays off for shallow memories, <= 512 words)."""
    for width, depth in ((1, 16384), (2, 8192), (4, 4096), (9, 2048)):
        if mem_width <= width:
            return math.ceil(omega / depth) * math.ceil(mem_width / width)
    if mem_width <= 18 or omega > 512:
        return math.ceil(omega / 1024) * math.ceil(mem_width / 18)
    return math.ceil(omega / 512) * math.ceil(mem_width / 36)


def test_estimates_follow_finns_published_formulas(exports):
    """MVAU cycles per frame = MH/PE x MW/SIMD x input vectors (FINN's documented folding model),
    BRAM from FINN-R's weight-memory formula; fps = clock / slowest layer's cycles."""
    result, _ = exports("tfc")
    partition = onnx.load(result.files["partition"])
    layers = {layer.name: layer for layer in result.estimate.layers}
    checked_bram = 0
    for node in partition.graph.node:
        if _op(node) != "MVAU":
            continue
        mw, mh, pe, simd = (_attr(node, k) for k in ("MW", "MH", "PE", "SIMD"))
        vectors = int(np.prod(_attr(node, "numInputVectors")))
        assert layers[node.name].cycles == mh // pe * (mw // simd) * vectors
        weight_bits = int("".join(c for c in _attr(node, "weightDataType") if c.isdigit()))
        # FINN's defaults: mem_mode internal_decoupled, ram_style auto (weights in block RAM)
        if _attr(node, "mem_mode", "internal_decoupled") == "internal_decoupled" and _attr(
            node, "ram_style", "auto"
        ) in ("auto", "block"):
            omega = mw * mh / (pe * simd)
            assert layers[node.name].resources["BRAM_18K"] == _finn_r_bram18(omega, pe * simd * weight_bits)
            checked_bram += 1
    assert checked_bram >= 1
    slowest = max(layer.cycles for layer in result.estimate.layers)
    assert result.estimate.fps == pytest.approx(CLOCK_MHZ * 1e6 / slowest)
    assert result.estimate.meets_target and result.estimate.fits and not result.estimate.problems


def test_too_large_for_the_part_names_the_layer(digits, tmp_path):
    train, test = digits
    model = zoo.calibrated(partial(zoo.tfc, width=1024), train[:2])
    result = ModelExporter(tmp_path).export_finn_dataflow(model, test[:4], part="Pynq-Z1", target_fps=1e6)
    assert not result.estimate.fits and not result.estimate.meets_target
    fit = next(p for p in result.estimate.problems if p.startswith("fit: "))
    assert "LUT estimated, xc7z020clg400-1 has 53,200" in fit
    assert "largest: MVAU_hls_1, module '5'" in fit  # the 1024 x 1024 layer, zoo.tfc's module 5
    assert "lower target_fps" in fit
    speed = next(p for p in result.estimate.problems if p.startswith("throughput: layer "))
    assert "mvau_wwidth_max" in speed and "allows 100" in speed
    assert "Problems" in Path(result.files["estimate_md"]).read_text()
    # the same network fits a larger part at the same folding
    assert fpga_parts.resolve("ZCU104").capacity["LUT"] > result.estimate.totals["LUT"]


def test_node_finn_cannot_map_is_named_with_its_module(digits, tmp_path):
    train, test = digits

    def float_sigmoid():
        return nn.Sequential(
            nn.Flatten(),
            zoo._input_quant(),
            zoo._linear(64, 32),
            nn.Sigmoid(),
            zoo._linear(32, 10, bias=True),
        )

    model = zoo.calibrated(float_sigmoid, train[:2])
    with pytest.raises(FinnError, match=r"could not map 1 node\(s\) to hardware layers \(found before streamlining\)") as error:
        ModelExporter(tmp_path).export_finn_dataflow(model, test[:4])
    (sigmoid,) = error.value.problems
    assert sigmoid.startswith("Sigmoid_0 (Sigmoid, module '3'): an activation FINN computes only as thresholds")
    assert "QuantIdentity before and after the module" in sigmoid
    assert "\n  Sigmoid x1: an activation FINN computes only as thresholds" in str(error.value)
    assert not (tmp_path / "dataflow_partition.onnx").exists()


@pytest.mark.slow
def test_half_even_requantizer_after_a_residual_add_reaches_finn_exactly(digits, tmp_path):
    """FINN's conversion rounds a Quant node's ties up; a Brevitas ReLU of the user's own rounding
    half-even after a residual addition (a sum on a finer grid: ties occur) is written as exact
    thresholds, so the dataflow computes what torch does."""
    train, test = digits
    model = zoo.calibrated(partial(zoo.ResNetLike, relu_quant=Uint8ActPerTensorFixedPoint), train[:4])
    result = ModelExporter(tmp_path).export_finn_dataflow(model, test[:64])
    assert result.verification.passed and result.verification.identical_predictions == 64  # float output: within 1e-5


def test_top_k_becomes_a_label_select_layer(digits, tmp_path):
    """FINN's TFC way: a bias-free head's per-tensor scale is absorbed into TopK, which becomes LabelSelect;
    with a float bias the TopK is refused with the change that fixes it."""
    train, test = digits
    model = zoo.calibrated(partial(zoo.tfc, head_bias=False), train[:2])
    labelled = ModelExporter(tmp_path / "top1").export_finn_dataflow(model, test[:24], top_k=1, part=PART)
    partition = onnx.load(labelled.files["partition"])
    assert _op(partition.graph.node[-1]) == "LabelSelect"
    assert labelled.verification.predictions_identical and labelled.verification.max_abs_diff == 0
    biased = zoo.calibrated("tfc", train[:2])
    with pytest.raises(FinnError, match=r"TopK x1: top-k on a float input .* drop the last") as error:
        ModelExporter(tmp_path / "biased").export_finn_dataflow(biased, test[:4], top_k=1)
    assert error.value.problems == [f"TopK_0 (TopK, module '8'): {front_end.UNMAPPED_FIXES['TopK']}"]


def test_parts_come_from_finns_tables_and_match_the_datasheets():
    # Zynq-7000 DS190: XC7Z020 53,200 LUTs, 106,400 FFs, 140 x 36 Kb block RAM, 220 DSP slices
    assert fpga_parts.resolve("xc7z020clg400-1").capacity == {
        "LUT": 53200,
        "FF": 106400,
        "BRAM_18K": 280,
        "URAM": 0,
        "DSP": 220,
    }
    # Zynq UltraScale+ DS891: XCZU7EV 230,400 LUTs (FINN: 230,000), 312 BRAM36, 96 URAM (FINN: 92), 1,728 DSP
    zu7 = fpga_parts.resolve("ZCU104").capacity
    assert zu7["DSP"] == 1728 and zu7["BRAM_18K"] == 2 * 305
    assert fpga_parts.resolve("xczu3eg-sbva484-1-i").capacity == fpga_parts.resolve("Ultra96").capacity
    assert fpga_parts.resolve("U250").part == "xcu250-figd2104-2L-e"
    assert fpga_parts.resolve("U280").capacity["URAM"] == 960


def test_unknown_part_is_refused_before_anything_is_written(tmp_path):
    with pytest.raises(
        ValueError, match=r"part='xc7z010': not a known FPGA part or board; known: .*xc7z020clg400-1"
    ):
        export_finn_dataflow(
            tmp_path / "missing.onnx", np.zeros((1, 64), np.float32), tmp_path / "out", FinnBuildConfig(part="xc7z010")
        )
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    "node, module",
    [
        ("/blocks/blocks.0/conv1/Conv", "blocks.0.conv1"),
        ("/blocks/blocks.0/add_quant/act_quant/export_handler_1/Quant", "blocks.0.add_quant"),
        ("/0/act_quant/export_handler/Quant", "0"),
        ("/stem/stem.2/act_quant/activation_impl/Relu", "stem.2"),
        ("/blocks/blocks.1/Add", "blocks.1"),
        ("Add_0", None),
    ],
)
def test_module_of_reads_torchscript_node_names(node, module):
    assert module_of(node) == module


class _ResidualStem(nn.Module):
    """A ResNet's stem and first block: the max pool's output feeds the block and its shortcut."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(3, 2, 1))
        self.block = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1))
        self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        x = self.stem(x)
        return self.head(self.block(x) + x)


def test_max_pool_feeding_a_fork_reaches_one_partition(digits, tmp_path):
    """FINN's MakeMaxPoolNHWC rewires only the first consumer of a pool whose output forks (the
    stem of torchvision's ResNets); the pipeline gives it one consumer first (ForkAfterNhwcTranspose)."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    qmodel = ModelQuantizer(finn()).quantize_model(_ResidualStem().eval(), train[:4], progress=False)
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:16], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
    assert result.float_layers == () and "hardware layers computing on floats: none" in str(result)
    assert {"Pool", "DuplicateStreams", "ElementwiseAdd"} <= {  # a padded max pool: FMPadding + Pool
        _op(n) for n in onnx.load(result.files["partition"]).graph.node
    }


def test_convolution_over_a_one_pixel_image_reaches_one_partition(digits, tmp_path):
    """A 3x3 (and a 1x3) convolution with padding over a 1x1 image (ResNet-18's last stage at 32x32,
    SqueezeNet's last fire modules): only the centre tap sees data; FINN refuses the kernel until the
    pipeline crops it (CropKernelsToOnePixel), exactly."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), *(nn.MaxPool2d(2) for _ in range(3)),  # 8x8 -> 1x1
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, (1, 3), padding=(0, 1)), nn.ReLU(),
        nn.Flatten(), nn.Linear(8, 10),
    ).eval()
    qmodel = ModelQuantizer(finn()).quantize_model(model, train[:4], progress=False)
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:16], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
    assert len(result.outside) <= 3  # the input's transpose, the output's scale and bias


def _inverted_residual(c_in: int, c_out: int) -> nn.Sequential:
    """MobileNetV2's block without its addition: expand, depthwise, project (no activation after)."""
    hidden = 2 * c_in
    return nn.Sequential(
        nn.Conv2d(c_in, hidden, 1, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
        nn.Conv2d(hidden, hidden, 3, padding=1, groups=hidden, bias=False), nn.BatchNorm2d(hidden), nn.ReLU6(),
        nn.Conv2d(hidden, c_out, 1, bias=False), nn.BatchNorm2d(c_out),
    )  # fmt: skip


class _StageTransition(nn.Module):
    """MobileNetV2's stage transition: a block that changes the width (no addition) feeds the next
    block and that block's residual addition; nothing requantizes the sum's operands in between."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU6())
        self.widen, self.block = _inverted_residual(8, 12), _inverted_residual(12, 12)
        self.head = nn.Sequential(nn.Conv2d(12, 16, 1), nn.ReLU6(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10))

    def forward(self, x):
        x = self.widen(self.stem(x))
        return self.head(x + self.block(x))


def test_a_scale_and_bias_before_a_fork_fold_into_the_thresholds_of_both_branches(digits, tmp_path):
    """The projection's per-channel scale and bias feed two quantizers (the next block's input and its
    addition's): FINN's streamlining leaves them before the fork (its absorption takes a channels-last
    operand for a per-tensor one), and they became float ElementwiseMul / ElementwiseAdd hardware
    layers (MobileNetV2, EfficientNet-Lite0). The pipeline copies them past the fork and FINN absorbs
    each copy: an integer dataflow, equal to torch."""
    from quark.torch.examples.vision_zoo import set_batch_norm_statistics
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    model = set_batch_norm_statistics(_StageTransition(), train[:4])
    qmodel = ModelQuantizer(finn(unsigned=("ReLU6",))).quantize_model(model, train[:4], progress=False)
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:16], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
    assert result.float_layers == ()
    ops = [_op(n) for n in onnx.load(result.files["partition"]).graph.node]
    assert "ElementwiseAdd" in ops and "ElementwiseMul" not in ops  # the residual sum, on integers


def test_channels_last_operands_become_vectors_and_nchw_ones_stay():
    from onnx import TensorProto, helper
    from qonnx.core.data_layout import NCHW, NHWC
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import ChannelsLastParamsAsVectors

    shape = [1, 2, 3, 4]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["m"]), helper.make_node("Add", ["m", "b"], ["y"]),
         helper.make_node("Mul", ["z", "t"], ["w"])],
        "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("x", "z")],
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, shape) for n in ("y", "w")],
        value_info=[helper.make_tensor_value_info("m", TensorProto.FLOAT, shape)],
    )  # fmt: skip
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    for name in ("s", "b", "t"):
        model.set_initializer(name, rng.normal(size=(1, 1, 1, 4)).astype(np.float32))
    for name, layout in (("x", NHWC), ("m", NHWC), ("z", NCHW)):
        model.set_tensor_layout(name, layout)
    feeds = {"x": rng.normal(size=shape).astype(np.float32), "z": rng.normal(size=shape).astype(np.float32)}
    before = execute_onnx(model, feeds)
    after_model = model.transform(ChannelsLastParamsAsVectors())
    after = execute_onnx(after_model, feeds)
    assert [after_model.get_initializer(n).shape for n in ("s", "b", "t")] == [(4,), (4,), (1, 1, 1, 4)]
    assert all(np.array_equal(before[k], after[k]) for k in ("y", "w"))


def test_a_grouped_convolution_runs_as_a_block_diagonal_one_named_in_a_warning(digits, tmp_path, caplog):
    """RegNet's and ResNeXt's grouped convolutions (groups neither 1 nor the channels): FINN 1.6.1
    lowers plain and depthwise ones only. The pipeline computes each as a plain convolution with
    zeros outside its groups' blocks: exact, equal to torch, the MVAU's weights as wide as a plain
    layer's, and a warning names the module and the factor."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1, groups=4), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10),
    ).eval()  # fmt: skip
    qmodel = ModelQuantizer(finn()).quantize_model(model, train[:4], progress=False)
    with caplog.at_level(logging.WARNING):
        result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:16], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
    assert result.float_layers == ()
    assert "module '2'" in caplog.text and "(groups=4)" in caplog.text and "4 times its weights" in caplog.text
    partition = onnx.load(result.files["partition"])
    widths = sorted(
        next(a.i for a in n.attribute if a.name == "MW") for n in partition.graph.node if _op(n) == "MVAU"
    )
    assert widths == [8, 9, 72]  # conv1 (1x3x3), the classifier (8), the grouped conv as 8x3x3, not 2x3x3


def test_grouped_as_dense_keeps_each_groups_kernel_and_zeros_elsewhere(caplog):
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import GroupedConvAsDense

    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w"], ["y"], group=3, pads=[1, 1, 1, 1], name="conv"),
         helper.make_node("Conv", ["y", "d"], ["z"], group=6, name="depthwise")],
        "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 6, 5, 5])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT, [1, 6, 3, 3])],
    )  # fmt: skip
    model = ModelWrapper(helper.make_model(graph))
    rng = np.random.default_rng(0)
    weight = rng.integers(-8, 8, size=(6, 2, 3, 3)).astype(np.float32)
    model.set_initializer("w", weight)
    model.set_initializer("d", rng.integers(-8, 8, size=(6, 1, 3, 3)).astype(np.float32))
    model = model.transform(InferShapes())
    feeds = {"x": rng.integers(0, 16, size=(1, 6, 5, 5)).astype(np.float32)}
    before = execute_onnx(model, feeds)["z"]
    with caplog.at_level(logging.WARNING):
        after_model = model.transform(GroupedConvAsDense())
    dense = after_model.get_initializer("w")
    assert dense.shape == (6, 6, 3, 3) and after_model.get_initializer("d").shape == (6, 1, 3, 3)
    for o in range(6):
        g = o // 2
        assert np.array_equal(dense[o, 2 * g : 2 * g + 2], weight[o])
        assert not np.delete(dense[o], [2 * g, 2 * g + 1], axis=0).any()
    assert np.array_equal(execute_onnx(after_model, feeds)["z"], before)
    widened = [r.getMessage() for r in caplog.records if "grouped convolution" in r.getMessage()]
    assert len(widened) == 1 and "conv (Conv) (groups=3)" in widened[0] and "3 times its weights" in widened[0]


class _SqueezeExciteHardswish(nn.Module):
    """MobileNetV3's block in small: Hardswish, and a squeeze-excite gate through Hardsigmoid."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU())
        self.body = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.Hardswish())
        self.gate = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Conv2d(8, 8, 1), nn.Hardsigmoid())
        self.head = nn.Sequential(nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 10))

    def forward(self, x):
        x = self.body(self.stem(x))
        return self.head(x * self.gate(x))


def test_a_mobilenet_v3_block_reaches_one_partition_equal_to_torch(digits, tmp_path):
    """Hardswish and a squeeze-excite gate through Hardsigmoid: both become thresholds on their
    quantized inputs, the gate's product an ElementwiseMul whose map input holds the whole frame.
    (Past a Hardswish qonnx infers no data layout: FINN's global pooling took such a tensor for
    channels-last; the pooling gets ONNX's layout.)"""
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    qmodel = ModelQuantizer(finn(unsigned=("ReLU", "Hardsigmoid"))).quantize_model(
        _SqueezeExciteHardswish().eval(), train[:4], progress=False
    )
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:32], integer_input=True)
    assert result.verification.max_abs_diff == 0 and result.verification.identical_predictions == 32
    assert result.steps[-1].op_types["ElementwiseMul_hls"] == 1 and result.float_layers == ()


def test_activations_left_float_are_refused_by_module_before_streamlining(digits, tmp_path):
    """The same block quantized without the FINN target: graph mode leaves the activations' inputs
    float, so no thresholds can compute them; refused per operator, with the module and the fix,
    right after the conversion, nothing written."""
    from _shared.quantize import without_target

    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    qmodel = ModelQuantizer(without_target(finn(unsigned=("ReLU", "Hardsigmoid")))).quantize_model(
        _SqueezeExciteHardswish().eval(), train[:4], progress=False
    )
    with pytest.raises(FinnError, match=r"could not map 2 node\(s\) to hardware layers \(found before streamlining\)") as error:
        ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:4], integer_input=True)
    assert "step 'convert to hardware layers' failed" not in str(error.value)
    for op, module in (("HardSwish", "body.1.act"), ("HardSigmoid", "gate.2.act")):
        assert f"\n  {op} x1: an activation FINN computes only as thresholds" in str(error.value)
        assert any(p.startswith(f"{op}_0 ({op}, module '{module}'): an activation FINN") for p in error.value.problems)
    assert not (tmp_path / "dataflow_partition.onnx").exists()


def test_channelwise_scales_move_past_forks_that_follow_each_other():
    """DenseNet-121: a per-channel scale that forks feeds a scale that forks too. FINN's
    MoveChannelwiseLinearPastFork reaches the second with an input it has just created, without a
    shape, and fails; the pipeline's pass infers the shapes and goes on: the second scale replicated
    before each of its consumers, the same outputs."""
    from finn.transformation.streamline.reorder import MoveChannelwiseLinearPastFork
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx
    from qonnx.transformation.infer_shapes import InferShapes

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import ChannelwiseLinearPastForks

    shape = [1, 2, 3, 3]
    graph = helper.make_graph(
        [helper.make_node("Mul", ["x", "s"], ["a"], name="first"),
         helper.make_node("Relu", ["a"], ["r1"], name="relu1"),
         helper.make_node("Mul", ["a", "t"], ["b"], name="second"),
         helper.make_node("Relu", ["b"], ["r2"], name="relu2"),
         helper.make_node("Neg", ["b"], ["r3"], name="neg"),
         helper.make_node("Concat", ["r1", "r2", "r3"], ["y"], axis=1, name="concat")],
        "chained_forks",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 3, 3])],
    )  # fmt: skip
    model = ModelWrapper(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]))
    rng = np.random.default_rng(0)
    model.set_initializer("s", rng.normal(size=(1,)).astype(np.float32))  # channel-wise by broadcasting
    model.set_initializer("t", rng.normal(size=(1,)).astype(np.float32))
    model = model.transform(InferShapes())
    feeds = {"x": rng.normal(size=shape).astype(np.float32)}
    with pytest.raises(TypeError, match="NoneType"):
        model.transform(MoveChannelwiseLinearPastFork())
    moved = model.transform(ChannelwiseLinearPastForks())
    assert "second" not in [n.name for n in moved.graph.node if n.op_type == "Mul" and moved.is_fork_node(n)]
    assert [n.name for n in moved.graph.node].count("second") == 2  # one copy before each consumer
    np.testing.assert_allclose(execute_onnx(moved, feeds)["y"], execute_onnx(model, feeds)["y"], rtol=1e-6)


def test_scales_past_forks_refuse_inputs_whose_shape_cannot_be_inferred():
    """Shape inference that cannot give a forking scale's input a shape would make the retry repeat
    forever: FINN's TypeError is raised instead."""
    from onnx import TensorProto, helper
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.targets.finn.passes import ChannelwiseLinearPastForks

    graph = helper.make_graph(
        [helper.make_node("Opaque", ["x"], ["o"], domain="user.ops", name="opaque"),  # no shape inference
         helper.make_node("Mul", ["o", "s"], ["a"], name="scale"),
         helper.make_node("Relu", ["a"], ["r1"]), helper.make_node("Neg", ["a"], ["r2"]),
         helper.make_node("Add", ["r1", "r2"], ["y"])],
        "unshaped", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 3, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 3, 3])],
    )  # fmt: skip
    opsets = [helper.make_opsetid("", 13), helper.make_opsetid("user.ops", 1)]
    model = ModelWrapper(helper.make_model(graph, opset_imports=opsets))
    model.set_initializer("s", np.ones(1, np.float32))
    with pytest.raises(TypeError, match="object of type 'NoneType' has no len"):
        model.transform(ChannelwiseLinearPastForks())


class _DenseTransition(nn.Module):
    """DenseNet's transition and the dense layer after it: an average pool whose requantized output
    feeds both the next layer and the concatenation of the block."""

    def __init__(self) -> None:
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.transition = nn.Sequential(nn.Conv2d(8, 8, 1, bias=False), nn.AvgPool2d(2))
        self.layer = nn.Sequential(nn.BatchNorm2d(8), nn.ReLU(), nn.Conv2d(8, 4, 3, padding=1, bias=False))
        self.head = nn.Sequential(nn.BatchNorm2d(12), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(12, 10))

    def forward(self, x):
        x = self.transition(self.stem(x))
        return self.head(torch.cat([x, self.layer(x)], 1))


def test_a_dense_transition_keeps_its_thresholds_channels_first(digits, tmp_path):
    """The pool's output is requantized half up, exported as a MultiThreshold: without a
    ``data_layout`` qonnx's layout inference left its output unknown, the nodes after it guessed
    NHWC, and FINN's conversion wrote NHWC into the next batch norm's per-channel thresholds on an
    NCHW tensor (DenseNet-121: 'Threshold shape incorrect' after streamlining)."""
    from quark.torch.examples.vision_zoo import set_batch_norm_statistics
    from quark.torch.extensions.brevitas.api import ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    train, test = digits
    torch.manual_seed(0)
    model = set_batch_norm_statistics(_DenseTransition(), train[:4])
    qmodel = ModelQuantizer(finn()).quantize_model(model, train[:4], progress=False)
    ModelExporter(tmp_path / "m.onnx").export_qonnx_model(qmodel, test[:2])
    layouts = {
        n.name: onnx.helper.get_attribute_value(a)
        for n in onnx.load(tmp_path / "m.onnx").graph.node
        if n.op_type == "MultiThreshold"
        for a in n.attribute
        if a.name == "data_layout"
    }
    assert layouts and set(layouts.values()) == {b"NCHW"}
    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, test[:16], integer_input=True)
    assert result.verification.passed and result.verification.max_abs_diff == 0.0
