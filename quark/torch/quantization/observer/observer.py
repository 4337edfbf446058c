"""``quark.torch.quantization.observer.observer``: AMD Quark's module of its observer classes, where
Quark's docs import them from (``from quark.torch.quantization.observer.observer import
PerTensorMinMaxObserver``). The classes are this package's (``quark.torch.quantization.observer``);
Quark's kernel helpers of the same module are refused by name (docs/quark013.md).
"""

from __future__ import annotations

from typing import Any

from quark.common.data_type import BaseObserverBase
from quark.common.utils.log import ScreenLogger
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType, ZeroPointType
from quark.torch.quantization.observer.base import ObserverBase, UniformScalingObserver
from quark.torch.quantization.observer.histogram import (
    PerTensorHistogramObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)
from quark.torch.quantization.observer.histogram_pro import PerTensorHistogramObserverPro
from quark.torch.quantization.observer.minmax import PerChannelMinMaxObserver, PerTensorMinMaxObserver
from quark.torch.quantization.observer.pof2 import (
    PerChannelPowOf2MinMaxObserver,
    PerChannelPowOf2MinMSEObserver,
    PerTensorPowOf2MinMaxObserver,
    PerTensorPowOf2MinMSEObserver,
)
from quark.torch.quantization.observer.selectors import (
    PerBlock2DMinMaxObserver,
    PerBlockBFPObserver,
    PerBlockMXBufferReuseObserver,
    PerBlockMXDiffsObserver,
    PerBlockMXObserver,
    PerGroupMinMaxObserver,
    PlaceholderObserver,
)
from quark.torch.quantization.quark013_api import refuse

__all__ = [
    "BaseObserverBase",
    "Dtype",
    "ObserverBase",
    "PerBlock2DMinMaxObserver",
    "PerBlockBFPObserver",
    "PerBlockMXBufferReuseObserver",
    "PerBlockMXDiffsObserver",
    "PerBlockMXObserver",
    "PerChannelMinMaxObserver",
    "PerChannelPowOf2MinMSEObserver",
    "PerChannelPowOf2MinMaxObserver",
    "PerGroupMinMaxObserver",
    "PerTensorHistogramObserver",
    "PerTensorHistogramObserverPro",
    "PerTensorMSEObserver",
    "PerTensorMinMaxObserver",
    "PerTensorPercentileObserver",
    "PerTensorPowOf2MinMSEObserver",
    "PerTensorPowOf2MinMaxObserver",
    "PlaceholderObserver",
    "QSchemeType",
    "ScaleType",
    "ScreenLogger",
    "UniformScalingObserver",
    "ZeroPointType",
]


def __getattr__(name: str) -> Any:
    refuse(__name__, name)
