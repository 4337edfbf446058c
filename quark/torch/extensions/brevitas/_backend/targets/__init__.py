"""Deployment targets as plugins: one :class:`Target` type, one table (:data:`TARGETS`).

A target says which export format it takes (and at which opset), what it refuses in the config
(rules on quantizers, layers and graph-mode sites, checked before export), what it refuses in the
written graph (checked after), and the build that takes the graph further (FINN's: named steps
from the QONNX file to a dataflow directory; none for the IPU, whose compiler is the user's). Each target is a package
here: :mod:`.ipu`, :mod:`.finn`, :mod:`.hls4ml`. A new target is a package and a row.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.targets import finn, hls4ml, ipu
from quark.torch.extensions.brevitas._backend.targets.target import AveragePooling, Target
from quark.torch.quantization.config.type import DeviceType

__all__ = ["TARGETS", "AveragePooling", "Target", "activation_input_quantized", "average_pooling"]

#: device -> its target (CPU has none)
TARGETS: dict[DeviceType, Target] = {target.device: target for target in (ipu.TARGET, finn.TARGET, hls4ml.TARGET)}


def average_pooling(device: DeviceType | None, windowed: bool) -> AveragePooling:
    """The form of an average pool on ``device``: global pools requantized everywhere, windowed ones as
    the target computes them (requantized without a target)."""
    target = TARGETS.get(device)
    return target.windowed_pools if windowed and target is not None else AveragePooling.requantized


def activation_input_quantized(device: DeviceType | None, activation: type) -> bool:
    """Whether ``device`` needs the input of an ``activation`` quantized (it runs only the
    activations in its ``fused_activations`` on a layer's float output)."""
    target = TARGETS.get(device)
    fused = target.fused_activations if target is not None else None
    return fused is not None and activation.__name__ not in fused
