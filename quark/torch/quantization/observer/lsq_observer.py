"""``quark.torch.quantization.observer.lsq_observer``: AMD Quark's module of ``LSQObserver``.

In a model quantized with an LSQ spec, every trained scale is an ``LSQObserver``
(``isinstance(module, LSQObserver)``) whose ``scale`` is the parameter Brevitas trains.
"""

from __future__ import annotations

from typing import Any

from quark.common.utils.log import ScreenLogger
from quark.torch.quantization.observer.base import UniformScalingObserver
from quark.torch.quantization.observer.lsq import LSQObserver
from quark.torch.quantization.quark013_api import refuse

__all__ = ["LSQObserver", "ScreenLogger", "UniformScalingObserver"]


def __getattr__(name: str) -> Any:
    refuse(__name__, name)
