"""``quark.torch.quantization.observer.tqt_observer``: AMD Quark's module of ``TQTObserver``.

In a model quantized with a TQT spec, every trained threshold is a ``TQTObserver``
(``isinstance(module, TQTObserver)``) whose ``_log_threshold`` is the parameter Brevitas trains, so
Quark's param-group code (``[m._log_threshold for m in model.modules() if isinstance(m, TQTObserver)]``)
finds the thresholds it means to (docs/qat.md).
"""

from __future__ import annotations

from typing import Any

from quark.torch.quantization.config.type import TQTThresholdInitMeth
from quark.torch.quantization.observer.base import UniformScalingObserver
from quark.torch.quantization.observer.tqt import TQTObserver
from quark.torch.quantization.quark013_api import refuse

__all__ = ["TQTObserver", "TQTThresholdInitMeth", "UniformScalingObserver"]


def __getattr__(name: str) -> Any:
    refuse(__name__, name)
