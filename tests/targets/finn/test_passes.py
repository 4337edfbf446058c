"""The project's own FINN passes (``targets/finn/passes.py``) where the flow needs them: squeeze-excite,
as torchvision, timm and a hand-written model spell it, reaches one dataflow partition equal to
torch, with the deep FIFO its skip branch needs in the folding file and the estimate."""

from __future__ import annotations

import json

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from quark.torch.examples.compat import declare_missing_torchvision_ops
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn

pytest.importorskip("finn.transformation.qonnx.convert_qonnx_to_finn", reason="finn-plus is not installed")


class HandWrittenSE(nn.Module):
    """Squeeze-excite as a user writes it: functional pool, ReLU and sigmoid."""

    def __init__(self, channels: int, squeezed: int):
        super().__init__()
        self.fc1 = nn.Conv2d(channels, squeezed, 1)
        self.fc2 = nn.Conv2d(squeezed, channels, 1)

    def forward(self, x):
        return x * torch.sigmoid(self.fc2(F.relu(self.fc1(F.adaptive_avg_pool2d(x, 1)))))


def _torchvision_se(channels, squeezed):
    declare_missing_torchvision_ops()
    from torchvision.ops import SqueezeExcitation

    return SqueezeExcitation(channels, squeezed)  # ReLU, sigmoid gate; scale * input


def _timm_se(channels, squeezed):
    from timm.layers import SEModule

    return SEModule(channels, rd_channels=squeezed)  # x.mean((2, 3), keepdim=True), ReLU, sigmoid gate


def _quantized(model: nn.Module, samples: int) -> tuple[nn.Module, torch.Tensor]:
    """``model`` (in train mode) with batch-norm statistics of random 3x8x8 images, quantized with the
    FINN preset on two more batches; and ``samples`` images to export and verify on."""
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():  # batch-norm statistics of the data
        for _ in range(4):
            model(torch.rand(16, 3, 8, 8, generator=generator))
    data = [torch.rand(16, 3, 8, 8, generator=generator) for _ in range(2)]
    qmodel = ModelQuantizer(finn(unsigned=("ReLU", "Sigmoid"))).quantize_model(model.eval(), data, progress=False)
    return qmodel, torch.rand(samples, 3, 8, 8, generator=generator)


@pytest.mark.parametrize("spelling", [_torchvision_se, _timm_se, HandWrittenSE], ids=["torchvision", "timm", "hand"])
def test_squeeze_excite_reaches_one_partition_with_its_skip_fifo(tmp_path, spelling):
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 16, 3, padding=1), nn.BatchNorm2d(16), nn.ReLU(),
        spelling(16, 4),
        nn.Conv2d(16, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).train()  # fmt: skip
    qmodel, x = _quantized(model, samples=32)

    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x, integer_input=True)

    assert result.verification.max_abs_diff == 0 and result.verification.identical_predictions == 32
    hardware = result.steps[-1].op_types
    assert hardware["ElementwiseMul_hls"] == 1 and hardware["GlobalAccPool_hls"] == 2 and result.float_layers == ()
    # the map's branch holds the whole 8 x 8 x 16 map (PE 1: one channel a word) while the gate is pooled
    folding = json.loads((tmp_path / "folding_config.json").read_text())
    multiply = folding["ElementwiseMul_hls_0"]["inFIFODepths"]
    assert sorted(multiply) == [2, 8 * 8 * 16]
    assert [k for k, v in folding.items() if "inFIFODepths" in v] == ["ElementwiseMul_hls_0"]
    deep = [g for g in result.estimate.glue if g.folding.get("depth") == 8 * 8 * 16]
    assert len(deep) == 1 and deep[0].resources["BRAM_18K"] + deep[0].resources["LUT"] > 0
    assert "depth 1,024" in (tmp_path / "estimate.md").read_text()


class _ResidualSE(nn.Module):
    """MobileNetV3's inverted residual in small: the block's input added to conv -> squeeze-excite ->
    conv: the residual addition waits for the gate's pool as the multiply does."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.BatchNorm2d(8), nn.ReLU())
        self.body = nn.Sequential(
            nn.Conv2d(8, 16, 1), nn.BatchNorm2d(16), nn.ReLU(), HandWrittenSE(16, 4), nn.Conv2d(16, 8, 1), nn.BatchNorm2d(8)
        )
        self.head = nn.Sequential(nn.ReLU(), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4))

    def forward(self, x):
        x = self.stem(x)
        return self.head(x + self.body(x))


def test_the_residual_skip_around_squeeze_excite_holds_a_frame_too(tmp_path):
    torch.manual_seed(0)
    qmodel, x = _quantized(_ResidualSE().train(), samples=16)

    result = ModelExporter(tmp_path).export_finn_dataflow(qmodel, x, integer_input=True)

    assert result.verification.max_abs_diff == 0
    folding = json.loads((tmp_path / "folding_config.json").read_text())
    deep = {name: v["inFIFODepths"] for name, v in folding.items() if "inFIFODepths" in v}
    # the multiply's map input holds 8 x 8 x 16 words, the addition's skip input 8 x 8 x 8 (PE 1)
    assert sorted(sorted(d) for d in deep.values()) == [[2, 8 * 8 * 8], [2, 8 * 8 * 16]]
    assert any(name.startswith("ElementwiseAdd") for name in deep)
