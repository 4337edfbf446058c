"""The export zoo: small networks of the shapes users export, their example inputs and configs.

Shared by tests/export/test_zoo.py, tests/targets/ and benchmarks/export_zoo.py, graph_finn_zoo.py. Brevitas-friendly
structure: inputs are quantized by the first layer's input quantizer, flattening uses nn.Flatten
(no Shape/Gather subgraphs), pooling is max pooling.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from _shared.models import TwoInputs
from quark.torch.extensions.brevitas.presets import xint8
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver


def _bn_relu_conv(cin: int, cout: int) -> list[nn.Module]:
    return [nn.Conv2d(cin, cout, 3, padding=1), nn.BatchNorm2d(cout), nn.ReLU()]


def tfc() -> nn.Module:
    """FINN's TFC shape: fully connected layers on a flattened 8x8 image."""
    return nn.Sequential(
        nn.Flatten(),
        nn.Linear(64, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Linear(64, 64),
        nn.BatchNorm1d(64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def cnv() -> nn.Module:
    """FINN's CNV shape: conv-BN-ReLU pairs, max pooling, fully connected head."""
    return nn.Sequential(
        *_bn_relu_conv(1, 16),
        *_bn_relu_conv(16, 16),
        nn.MaxPool2d(2),
        *_bn_relu_conv(16, 32),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 32),
        nn.BatchNorm1d(32),
        nn.ReLU(),
        nn.Linear(32, 10),
    )


class BasicBlock(nn.Module):
    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(x + self.conv2(self.relu(self.conv1(x))))


class ResNetLike(nn.Module):
    """Stem, two residual blocks (identity shortcuts), max pooling, linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlock(16), BasicBlock(16))
        self.head = nn.Sequential(nn.MaxPool2d(4), nn.Flatten(), nn.Linear(16 * 2 * 2, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class BasicBlockBN(nn.Module):
    """A residual block with batch norm after each convolution (torchvision's BasicBlock shape)."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(channels)
        self.relu = nn.ReLU()
        self.conv2 = nn.Conv2d(channels, channels, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(channels)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.relu(x + self.bn2(self.conv2(self.relu(self.bn1(self.conv1(x))))))


class ResNetBN(nn.Module):
    """Stem with batch norm, two residual blocks with batch norm, max pooling, linear head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU())
        self.blocks = nn.Sequential(BasicBlockBN(16), BasicBlockBN(16))
        self.head = nn.Sequential(nn.MaxPool2d(4), nn.Flatten(), nn.Linear(16 * 2 * 2, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(self.stem(x)))


class ConcatNet(nn.Module):
    """Two convolution branches concatenated along channels (Inception-like), a 1x1 merge, a head."""

    def __init__(self):
        super().__init__()
        self.stem = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU())
        self.branch1 = nn.Sequential(nn.Conv2d(8, 8, 1), nn.ReLU())
        self.branch3 = nn.Sequential(nn.Conv2d(8, 8, 3, padding=1), nn.ReLU())
        self.merge = nn.Sequential(nn.Conv2d(16, 16, 1), nn.ReLU(), nn.MaxPool2d(4))
        self.head = nn.Sequential(nn.Flatten(), nn.Linear(16 * 2 * 2, 10))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        return self.head(self.merge(torch.cat([self.branch1(x), self.branch3(x)], dim=1)))


def mobilenet_like() -> nn.Module:
    """Depthwise-separable blocks (3x3 depthwise, 1x1 pointwise) with ReLU6."""

    def separable(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [
            nn.Conv2d(cin, cin, 3, stride, 1, groups=cin),
            nn.ReLU6(),
            nn.Conv2d(cin, cout, 1),
            nn.ReLU6(),
        ]

    return nn.Sequential(
        nn.Conv2d(3, 16, 3, 2, 1),
        nn.ReLU6(),
        *separable(16, 32, 1),
        *separable(32, 32, 2),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 2 * 2, 10),
    )


def conv1d_net() -> nn.Module:
    """1-D convolutions over a 4-channel sequence of 32 steps."""
    return nn.Sequential(
        nn.Conv1d(4, 16, 5, padding=2),
        nn.ReLU(),
        nn.Conv1d(16, 16, 3, stride=2, padding=1),
        nn.ReLU(),
        nn.MaxPool1d(2),
        nn.Flatten(),
        nn.Linear(16 * 8, 5),
    )


class EncoderLike(nn.Module):
    """A pre-norm transformer encoder block with nn.MultiheadAttention, and a linear head."""

    def __init__(self, dim: int = 16, heads: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.ff1 = nn.Linear(dim, 2 * dim)
        self.ff2 = nn.Linear(2 * dim, dim)
        self.head = nn.Linear(dim, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.norm1(x)
        x = x + self.attn(h, h, h, need_weights=False)[0]
        x = x + self.ff2(torch.relu(self.ff1(self.norm2(x))))
        return self.head(x)


@dataclass(frozen=True)
class ZooEntry:
    build: Callable[[], nn.Module]
    sample: Callable[[torch.Generator], Any]  # one batch of example inputs
    head: str  # name of the last layer (its output is quantized in the zoo configs)


def _image(shape: tuple[int, ...]) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.rand(*shape, generator=g)


def _signal(shape: tuple[int, ...]) -> Callable[[torch.Generator], torch.Tensor]:
    return lambda g: torch.randn(*shape, generator=g)


ZOO: dict[str, ZooEntry] = {
    "tfc": ZooEntry(tfc, _image((8, 1, 8, 8)), "7"),
    "cnv": ZooEntry(cnv, _image((8, 1, 8, 8)), "15"),
    "resnet": ZooEntry(ResNetLike, _image((4, 3, 8, 8)), "head.2"),
    "mobilenet": ZooEntry(mobilenet_like, _image((4, 3, 16, 16)), "12"),
    "resnet_bn": ZooEntry(ResNetBN, _image((4, 3, 8, 8)), "head.2"),
    "concat": ZooEntry(ConcatNet, _image((4, 3, 8, 8)), "head.1"),
    "conv1d": ZooEntry(conv1d_net, _signal((4, 4, 32)), "6"),
    "encoder": ZooEntry(EncoderLike, _signal((2, 6, 16)), "head"),
    "two_inputs": ZooEntry(
        TwoInputs, lambda g: (torch.randn(4, 6, generator=g), torch.randn(4, 3, generator=g)), "head"
    ),
}

_A8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
_A8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver)
_W8_PER_CHANNEL = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, qscheme=QSchemeType.per_channel, ch_axis=0
)


def pof2_config(head: str) -> Config:
    """Integer / power-of-two path: the XINT8 preset's numbers without its IPU target (checked in
    tests/targets/ipu/test_ipu.py), and the head's output quantized too."""
    config = xint8()
    config.global_quant_config.target_device = None
    config.layer_quant_config[head] = QuantizationConfig(output_tensors=_A8_POF2)
    return config


def float_scale_config(head: str) -> Config:
    """Float scales: int8 per-channel weights, int8 inputs, float bias; the head's output quantized."""
    return Config(
        global_quant_config=QuantizationConfig(weight=_W8_PER_CHANNEL, input_tensors=_A8),
        layer_quant_config={head: QuantizationConfig(output_tensors=_A8)},
    )


CONFIGS: dict[str, Callable[[str], Config]] = {"int8-pof2": pof2_config, "int8-float": float_scale_config}


def calibration(entry: ZooEntry, batches: int = 4, seed: int = 0) -> list[Any]:
    g = torch.Generator().manual_seed(seed)
    return [entry.sample(g) for _ in range(batches)]


def quantized(name: str, config: str, seed: int = 0) -> tuple[nn.Module, Any]:
    """The zoo model ``name`` quantized with ``config``, and an example input batch."""
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    entry = ZOO[name]
    torch.manual_seed(seed)
    model = entry.build().eval()
    qmodel = ModelQuantizer(CONFIGS[config](entry.head)).quantize_model(
        model, calibration(entry), progress=False
    )
    example = entry.sample(torch.Generator().manual_seed(seed + 1))
    return qmodel, example


#: the zoo networks graph mode is taken through the targets on (tests/targets/*/test_graph_zoo.py)
GRAPH_ZOO = ("tfc", "cnv", "resnet_bn", "concat", "mobilenet")


def with_statistics(name: str) -> torch.nn.Module:
    """The zoo network with batch-norm statistics of its data (as a trained network has)."""
    torch.manual_seed(0)
    model = ZOO[name].build().train()
    with torch.no_grad():
        for batch in calibration(ZOO[name], batches=4, seed=5):
            model(batch)
    return model.eval()
