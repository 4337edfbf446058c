"""Deployment targets as plugins: one :class:`Target` type, one table (:data:`TARGETS`).

A target says which export format it takes (and at which opset), what it refuses in the config
(rules on quantizers, layers and graph-mode sites, checked before export), what it refuses in the
written graph (checked after), and the pipeline of named passes that takes the graph further
(FINN's front end; empty for the IPU, whose compiler is the user's). Each target is a package
here: :mod:`.ipu`, :mod:`.finn`. A new target is a package and a row.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.targets import finn, ipu
from quark.torch.extensions.brevitas._backend.targets.target import Step, Target
from quark.torch.quantization.config.type import DeviceType

__all__ = ["TARGETS", "Step", "Target"]

#: device -> its target (CPU has none)
TARGETS: dict[DeviceType, Target] = {target.device: target for target in (ipu.TARGET, finn.TARGET)}
