"""FINN-style Brevitas networks, built by hand the way graph mode will build them: whole-integer.

Every tensor between the input and the last layer sits on an integer grid: a ``QuantIdentity``
quantizes the input, an unsigned ``QuantReLU`` follows each conv / linear (batch norm between
them is absorbed into FINN's thresholds), the inputs of a residual addition and of a
concatenation share one quantizer (so the join is on one grid), and pooling is max pooling. The
last layer's output stays float (FINN keeps its per-channel scale and bias as elementwise layers).

All networks take digits-sized inputs (``[N, 1, 8, 8]`` in ``[0, 1]``: scikit-learn's digits
are k/16) and give 10 logits. Shared by ``tests/targets/finn/test_dataflow.py`` and
``benchmarks/finn_zoo.py``.
"""

from __future__ import annotations

from collections.abc import Callable

import brevitas.nn as qnn
import torch
from brevitas.graph.calibrate import calibration_mode
from brevitas.quant import (
    Int8ActPerTensorFixedPoint,
    Int8WeightPerChannelFloat,
    Int8WeightPerTensorFloat,
    Uint8ActPerTensorFixedPoint,
)
from torch import nn

from quark.torch.extensions.brevitas._backend.quantizers import RoundHalfAwayFromZeroSte
from quark.torch.quantization.config.type import RoundType, ScaleType
from quark.torch.quantization.plan import TensorQuant

WEIGHT_BITS, ACT_BITS = 4, 4

#: FINN's thresholds round ties up (x >= (k + 1/2) step); a ReLU requantizing a grid value (the
#: sum of a residual addition) meets ties, so the ReLUs round half away from zero (= up for
#: x >= 0), as graph mode's FINN target will. ``quark_spec`` makes the exporter write it
#: (``rounding_mode=HALF_UP``); Brevitas' stock handler would write ROUND whatever the quantizer does.
RELU_HALF_UP = Uint8ActPerTensorFixedPoint.let(
    float_to_int_impl=RoundHalfAwayFromZeroSte,
    quark_spec=TensorQuant(
        bit_width=ACT_BITS, signed=False, scale_type=ScaleType.pof2, round_method=RoundType.round
    ),
)


def _input_quant() -> qnn.QuantIdentity:
    """Unsigned 8-bit power-of-two input grid: digits pixels k/16 are on it exactly."""
    return qnn.QuantIdentity(act_quant=Uint8ActPerTensorFixedPoint, return_quant_tensor=True)


def _relu(rounding: type = RELU_HALF_UP) -> qnn.QuantReLU:
    return qnn.QuantReLU(bit_width=ACT_BITS, act_quant=rounding, return_quant_tensor=True)


def _conv(cin: int, cout: int, kernel: int = 3, stride: int = 1, groups: int = 1) -> qnn.QuantConv2d:
    return qnn.QuantConv2d(
        cin,
        cout,
        kernel,
        stride=stride,
        padding=kernel // 2,
        groups=groups,
        bias=False,
        weight_quant=Int8WeightPerChannelFloat,
        weight_bit_width=WEIGHT_BITS,
    )


def _linear(cin: int, cout: int, bias: bool = False) -> qnn.QuantLinear:
    return qnn.QuantLinear(
        cin, cout, bias=bias, weight_quant=Int8WeightPerTensorFloat, weight_bit_width=WEIGHT_BITS
    )


def _conv_bn_relu(cin: int, cout: int, relu_quant: type = RELU_HALF_UP, **kwargs) -> list[nn.Module]:
    return [_conv(cin, cout, **kwargs), nn.BatchNorm2d(cout), _relu(relu_quant)]


def tfc(width: int = 64, head_bias: bool = True) -> nn.Module:
    """FINN's TFC: fully connected layers with batch norm and 4-bit ReLUs on the flattened image.

    ``head_bias=False``: the last layer's output is an integer times one scale, which FINN's
    top-k (LabelSelect) can take, as in FINN's own TFC."""
    return nn.Sequential(
        nn.Flatten(),
        _input_quant(),
        _linear(64, width),
        nn.BatchNorm1d(width),
        _relu(),
        _linear(width, width),
        nn.BatchNorm1d(width),
        _relu(),
        _linear(width, 10, bias=head_bias),
    )


def cnv() -> nn.Module:
    """FINN's CNV shape: conv-BN-ReLU pairs, max pooling, a fully connected head."""
    return nn.Sequential(
        _input_quant(),
        *_conv_bn_relu(1, 16),
        *_conv_bn_relu(16, 16),
        nn.MaxPool2d(2),
        *_conv_bn_relu(16, 32),
        nn.MaxPool2d(2),
        nn.Flatten(),
        _linear(32 * 2 * 2, 32),
        nn.BatchNorm1d(32),
        _relu(),
        _linear(32, 10, bias=True),
    )


class ResidualBlock(nn.Module):
    """conv-BN-ReLU-conv-BN, added to the block input; both summands share one quantizer, then ReLU."""

    def __init__(self, channels: int, relu_quant: type = RELU_HALF_UP):
        super().__init__()
        self.conv1, self.bn1, self.relu1 = _conv_bn_relu(channels, channels, relu_quant)
        self.conv2, self.bn2 = _conv(channels, channels), nn.BatchNorm2d(channels)
        self.add_quant = qnn.QuantIdentity(act_quant=Int8ActPerTensorFixedPoint, return_quant_tensor=True)
        self.relu = _relu(relu_quant)

    def forward(self, x):
        branch = self.bn2(self.conv2(self.relu1(self.bn1(self.conv1(x)))))
        return self.relu(self.add_quant(branch) + self.add_quant(x))


class ResNetLike(nn.Module):
    """A stem, two residual blocks with identity shortcuts, max pooling and a linear head.

    ``relu_quant``: the ReLUs' quantizer (default rounds half up, as FINN does)."""

    def __init__(self, channels: int = 16, relu_quant: type = RELU_HALF_UP):
        super().__init__()
        self.input_quant = _input_quant()
        self.stem = nn.Sequential(*_conv_bn_relu(1, channels, relu_quant))
        self.blocks = nn.Sequential(ResidualBlock(channels, relu_quant), ResidualBlock(channels, relu_quant))
        self.pool = nn.MaxPool2d(4)
        self.flatten = nn.Flatten()
        self.head = _linear(channels * 2 * 2, 10, bias=True)

    def forward(self, x):
        return self.head(self.flatten(self.pool(self.blocks(self.stem(self.input_quant(x))))))


class ConcatNet(nn.Module):
    """An inception-style block: a 1x1 and a 3x3 branch, concatenated on one shared ReLU grid."""

    def __init__(self):
        super().__init__()
        self.input_quant = _input_quant()
        self.stem = nn.Sequential(*_conv_bn_relu(1, 16))
        self.branch1 = nn.Sequential(_conv(16, 8, kernel=1), nn.BatchNorm2d(8))
        self.branch3 = nn.Sequential(_conv(16, 8, kernel=3), nn.BatchNorm2d(8))
        self.cat_relu = _relu()  # one quantizer for both inputs of the concatenation
        self.pool = nn.MaxPool2d(2)
        self.tail = nn.Sequential(*_conv_bn_relu(16, 16), nn.MaxPool2d(2), nn.Flatten())
        self.head = _linear(16 * 2 * 2, 10, bias=True)

    def forward(self, x):
        x = self.stem(self.input_quant(x))
        x = torch.cat([self.cat_relu(self.branch1(x)), self.cat_relu(self.branch3(x))], dim=1)
        return self.head(self.tail(self.pool(x)))


def mobilenet_like() -> nn.Module:
    """Depthwise-separable blocks: 3x3 depthwise conv-BN-ReLU, then 1x1 pointwise conv-BN-ReLU."""

    def separable(cin: int, cout: int, stride: int) -> list[nn.Module]:
        return [*_conv_bn_relu(cin, cin, stride=stride, groups=cin), *_conv_bn_relu(cin, cout, kernel=1)]

    return nn.Sequential(
        _input_quant(),
        *_conv_bn_relu(1, 16),
        *separable(16, 32, 1),
        *separable(32, 32, 2),
        nn.MaxPool2d(2),
        nn.Flatten(),
        _linear(32 * 2 * 2, 10, bias=True),
    )


FINN_ZOO: dict[str, Callable[[], nn.Module]] = {
    "tfc": tfc,
    "cnv": cnv,
    "resnet": ResNetLike,
    "concat": ConcatNet,
    "mobilenet": mobilenet_like,
}


def digits_batches(batch_size: int = 64, seed: int = 0):
    """(train batches, test images) of scikit-learn's real digits as [N, 1, 8, 8] in [0, 1]."""
    from quark.torch.examples import digits as data

    split = data.load(seed=seed)
    train = [x for x, _ in split.loader("train", batch_size=batch_size)]
    test = torch.cat([x for x, _ in split.loader("test", batch_size=512)])
    return train, test


def calibrated(name: str | Callable[[], nn.Module], calib: list[torch.Tensor], seed: int = 0) -> nn.Module:
    """The zoo network ``name`` (or built by ``name()``), seeded, with batch-norm statistics and
    activation ranges from ``calib``."""
    torch.manual_seed(seed)
    model = FINN_ZOO[name]() if isinstance(name, str) else name()
    with torch.no_grad():
        model.train()
        for x in calib:  # batch-norm running statistics
            model(x)
        model.eval()
        with calibration_mode(model):
            for x in calib:
                model(x)
    return model.eval()
