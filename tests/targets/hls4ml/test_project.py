"""hls4ml projects of the digits networks, compiled with g++ and run on the whole held-out set: the
firmware equals torch exactly (the precisions from the quantizers), the directory holds what its
README says, the model is unchanged. Needs hls4ml and a C++ compiler."""

from __future__ import annotations

import json
import re
import shutil

import numpy as np
import onnx
import pytest
import torch
from _shared.quantize import assert_unchanged, quantize, snapshot
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import FILES, Hls4mlError
from quark.torch.extensions.brevitas.api import ModelExporter, TargetCheckError

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("g++") is None, reason="hls4ml's compile() needs g++"),
]


@pytest.fixture(scope="module")
def data():
    return digits.load()


def trained(model, data, epochs: int):
    torch.manual_seed(0)
    digits.train(model, data, epochs=epochs)
    return model


@pytest.mark.parametrize(
    "network, bits, io_type",
    [("cnn", 4, "io_parallel"), ("residual", 4, "io_stream"), ("cnn", 2, "io_parallel")],
)
def test_the_compiled_firmware_equals_torch_on_the_whole_test_set(tmp_path, data, network, bits, io_type):
    torch.manual_seed(0)
    model = trained(digits.cnn() if network == "cnn" else digits.ResidualCNN(), data, epochs=2)
    qmodel = quantize(presets.hls4ml(bits, bits), model, data.loader("train"))
    x = data.test.tensors[0]
    before = snapshot(qmodel)
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, x, io_type=io_type)
    assert_unchanged(before, qmodel)
    assert project.exact and project.samples == len(x) and project.agreement == 1.0
    assert project.input_type == "ufixed<8,0>" and project.input_scale == 2**-8
    # what the firmware ran on is in the directory: the quantized inputs, torch's outputs
    fed = np.load(tmp_path / FILES["input"])
    assert np.array_equal(fed * 256, np.round(fed * 256)) and fed.shape == (len(x), 8, 8, 1)
    with torch.no_grad():
        assert np.array_equal(np.load(tmp_path / FILES["expected"]), qmodel(x).numpy())
    settings = json.loads((tmp_path / FILES["config"]).read_text())
    for name, types in project.precisions.items():  # given to hls4ml (a fused Dense's result: set after)
        given = settings["LayerName"][name]["Precision"]
        assert given.get("accum", types.get("accum")) == types.get("accum") and given["result"] in (types["result"], "auto")
    # what hls4ml wrote into the C++: the exact types (independent of the config: read from defines.h)
    defines = (tmp_path / FILES["project"] / "firmware" / "defines.h").read_text()
    assert "ap_fixed<33" not in defines and re.search(r"typedef .*ap_ufixed<8,0>.* input_t;", defines)
    readme = (tmp_path / FILES["readme"]).read_text()
    assert "max |firmware - torch| = 0" in readme and "vitis-run --tcl build_prj.tcl" in readme
    assert (tmp_path / FILES["project"] / "firmware").is_dir()


def test_a_firmware_that_differs_from_torch_is_an_error(tmp_path, data, monkeypatch):
    """The comparison can fail: every layer given a type too narrow for its sums (fixed<6,2>) makes
    the firmware wrap, and the export says so, naming the first layer that differs, why, and the
    config it gave hls4ml."""
    from quark.torch.extensions.brevitas._backend.targets.hls4ml import project

    exact = project.layer_precisions
    narrow = {"accum": "fixed<6,2>", "result": "fixed<6,2>"}
    monkeypatch.setattr(project, "layer_precisions", lambda m, p, f: {k: narrow for k in exact(m, p, f) if k != "global_in"})
    torch.manual_seed(0)
    qmodel = quantize(presets.hls4ml(8, 8), trained(digits.cnn(), data, epochs=2), data.loader("train"))
    message = (
        r"differs from torch: max \|diff\| .* over 359 samples .*; on sample \d+ it first differs at layer Conv2D_Conv_0 "
        r"\(Conv2D, tensor Conv_0_out0, type fixed<6,2,TRN,WRAP,0>\): max \|diff\| .*; \d+ of its 1024 values lie outside "
        r"\[-2, 1.9375\] \(an overflow\); the precisions given to hls4ml are in hls4ml_config.json"
    )
    with pytest.raises(Hls4mlError, match=message):
        ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0])


class Blocks(nn.Module):
    """A stem with batch norm (merged), a depthwise-separable branch beside a plain convolution,
    concatenated, max pooled, a linear head: the blocks of efficient CNNs hls4ml maps."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.bn = nn.Conv2d(1, 8, 3, padding=1), nn.BatchNorm2d(8)
        self.dw, self.pw = nn.Conv2d(8, 8, 3, padding=1, groups=8), nn.Conv2d(8, 8, 1)
        self.other = nn.Conv2d(8, 4, 3, padding=1)
        self.head = nn.Linear(12 * 4 * 4, 10)

    def forward(self, x):
        x = torch.relu(self.bn(self.stem(x)))
        y = torch.cat([torch.relu(self.pw(torch.relu(self.dw(x)))), torch.relu(self.other(x))], 1)
        return self.head(nn.functional.max_pool2d(y, 2).flatten(1))


def test_depthwise_convolutions_and_concatenations_compile_exactly(tmp_path, data):
    torch.manual_seed(0)
    model = trained(Blocks(), data, epochs=1)
    qmodel = quantize(presets.hls4ml(4, 4), model, data.loader("train"))
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0], io_type="io_stream")
    assert project.exact and project.samples == len(data.test.tensors[0])


def test_a_global_average_over_36_values_compiles_exactly(tmp_path, data):
    """hls4ml divides the sum in its accumulator type, truncating: with the fractional bits the types
    carry (see precision._global_average) the truncated quotient rounds as torch's average does."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 16, 3), nn.ReLU(), nn.Conv2d(16, 16, 1), nn.ReLU(),  # 8x8 -> 6x6: 36 values per channel
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(16, 10),
    )  # fmt: skip
    qmodel = quantize(presets.hls4ml(4, 4), trained(model, data, epochs=2), data.loader("train"))
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0])
    assert project.exact
    pool = next(name for name in project.precisions if name.startswith("GlobalAveragePool"))
    assert project.precisions[pool]["accum"] != project.precisions[pool]["result"]  # the sum is wider


def test_a_padded_max_pool_on_a_signed_input_in_io_stream_is_refused_before_hls4ml_runs(tmp_path, data):
    """hls4ml's streamed pooling asserts against padding in C++, which aborts the process in predict()."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Conv2d(4, 4, 1), nn.MaxPool2d(3, 2, padding=1), nn.Flatten(), nn.Linear(64, 10)
    )
    qmodel = quantize(presets.hls4ml(4, 4), model.eval(), data.loader("train"))
    out = tmp_path / "project"
    with pytest.raises(TargetCheckError, match=r"MaxPool_0 \(MaxPool, module '3'\): padded on a signed input; io_type=io_stream"):
        ModelExporter(out).export_hls4ml_project(qmodel, data.test.tensors[0][:4], io_type="io_stream")
    assert not out.exists()  # nothing left behind


def test_overlapping_pool_windows_in_io_stream_are_refused_before_hls4ml_runs(tmp_path, data):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), nn.MaxPool2d(3, 1), nn.Flatten(), nn.Linear(64, 10))
    qmodel = quantize(presets.hls4ml(4, 4), model.eval(), data.loader("train"))
    with pytest.raises(TargetCheckError, match=r"module '2'\): window \[3, 3\] with stride \[1, 1\]; io_type=io_stream"):
        ModelExporter(tmp_path / "p").export_hls4ml_project(qmodel, data.test.tensors[0][:4], io_type="io_stream")


@pytest.mark.xfail(
    strict=False,
    reason="open defect: the firmware was off torch in 2 of about 5 full parallel runs (io_parallel) and once "
    "for io_stream right after io_parallel in the same process, never alone; suspect: a project compiled "
    "earlier in the process (same names) or torch's float32 sums against the exact firmware",
)
@pytest.mark.parametrize("io_type, window, outputs", [("io_parallel", 3, 4 * 4), ("io_stream", 2, 5 * 5)])
def test_a_padded_max_pool_after_relu_compiles_exactly(tmp_path, data, io_type, window, outputs):
    """hls4ml pads a max pool with the top bit set (for ap_ufixed the greatest value): after ReLU the
    padding is an explicit zero padding before an unpadded pool (ResNet stems), in either io type."""
    torch.manual_seed(0)
    pool = nn.MaxPool2d(window, 2, padding=1)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), pool, nn.Flatten(), nn.Linear(4 * outputs, 10))
    qmodel = quantize(presets.hls4ml(4, 4), trained(model, data, epochs=1), data.loader("train"))
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0], io_type=io_type)
    assert project.exact
    prepared = onnx.load(tmp_path / FILES["prepared"])
    assert [n.op_type for n in prepared.graph.node if n.op_type in ("Pad", "MaxPool")] == ["Pad", "MaxPool"]


class PooledHead(nn.Module):
    """A windowed average pool inside the network (resnet-d shortcuts) and a 1x1 convolution after the
    global pool (MobileNetV4's head): both pools channels-first in qonnx's conversion."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.conv = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1)
        self.head, self.fc = nn.Conv2d(8, 16, 1), nn.Linear(16, 10)

    def forward(self, x):
        x = nn.functional.avg_pool2d(torch.relu(self.stem(x)), 2)  # 8x8 -> 4x4
        x = nn.functional.adaptive_avg_pool2d(torch.relu(self.conv(x)), 1)
        return self.fc(torch.relu(self.head(x)).flatten(1))


def test_windowed_average_pools_and_a_convolution_after_the_global_pool_compile_exactly(tmp_path, data):
    torch.manual_seed(0)
    qmodel = quantize(presets.hls4ml(4, 4), trained(PooledHead(), data, epochs=1), data.loader("train"))
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0])
    assert project.exact
    prepared = onnx.load(tmp_path / FILES["prepared"])
    assert "Transpose" not in [n.op_type for n in prepared.graph.node]
    pools = [n for n in prepared.graph.node if n.op_type == "AveragePool"]
    kernels = [next(list(a.ints) for a in p.attribute if a.name == "kernel_shape") for p in pools]
    assert kernels == [[2, 2], [4, 4]] and {p.domain for p in pools} == {"qonnx.custom_op.channels_last"}


@pytest.mark.parametrize(
    "pool, rest, message",
    [
        (nn.AvgPool2d(3, 1, padding=1), [nn.Conv2d(4, 4, 1), nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(4, 10)],
         "an average pool with padding"),
        (nn.AvgPool2d(2), [nn.Flatten(), nn.Linear(36, 10)], "an average pool left channels-first"),
    ],
    ids=["padded", "flattened"],
)
def test_an_average_pool_hls4ml_cannot_compute_is_refused_before_hls4ml_runs(tmp_path, data, pool, rest, message):
    """hls4ml divides a padded border window by its size or by the values inside the map (no type makes
    both exact), and reads a pool qonnx leaves channels-first (flattened over a 3x3 map) channels-last."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.ReLU(), pool, *rest)
    qmodel = quantize(presets.hls4ml(4, 4), model.eval(), data.loader("train"))
    out = tmp_path / "project"
    with pytest.raises(TargetCheckError, match=rf"module '[0-9.a-z]*'\): {message}"):
        ModelExporter(out).export_hls4ml_project(qmodel, data.test.tensors[0][:4])
    assert not out.exists()


class ZeroedBlock(nn.Module):
    """A residual block whose last batch norm starts at zero (timm's ResNets, ``zero_init_last``):
    merged, the convolution's weights are all zero, its output zero everywhere."""

    def __init__(self) -> None:
        super().__init__()
        self.stem, self.conv, self.bn = nn.Conv2d(1, 8, 3, padding=1), nn.Conv2d(8, 8, 3, padding=1), nn.BatchNorm2d(8)
        nn.init.zeros_(self.bn.weight)
        self.head = nn.Linear(8 * 8 * 8, 10)

    def forward(self, x):
        x = torch.relu(self.stem(x))
        return self.head(torch.relu(x + self.bn(self.conv(x))).flatten(1))


def test_a_convolution_whose_weights_are_all_zero_compiles_exactly(tmp_path, data):
    torch.manual_seed(0)
    qmodel = quantize(presets.hls4ml(4, 4), ZeroedBlock().eval(), data.loader("train"))
    project = ModelExporter(tmp_path).export_hls4ml_project(qmodel, data.test.tensors[0][:64])
    assert project.exact
    zero = [types["result"] for name, types in project.precisions.items() if name.startswith("Conv")]
    assert "ufixed<1,1>" in zero  # the zero tensor on the integer grid, not 2^-(scale's exponent)
