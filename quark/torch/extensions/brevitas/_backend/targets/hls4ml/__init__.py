"""The hls4ml target: a QONNX graph that hls4ml turns into HLS C++ firmware in fixed point.

- :mod:`.rules`: what hls4ml's frontend does not map exactly, per quantizer, layer, site and node;
- :mod:`.precision`: the exact fixed-point type of every tensor, from the quantizers;
- :mod:`.build_config`: the project's settings (:class:`~.build_config.Hls4mlBuildConfig`);
- :mod:`.project`: the project written by hls4ml, compiled with g++ and run against torch.

The QONNX export for this target writes every activation quantizer as a Quant node (hls4ml maps no
MultiThreshold). Importing this package needs neither hls4ml nor qonnx; the build imports them.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.targets.hls4ml import rules
from quark.torch.extensions.brevitas._backend.targets.target import Target
from quark.torch.quantization.config.type import DeviceType

__all__ = ["TARGET"]


def _build():
    from quark.torch.extensions.brevitas._backend.targets.hls4ml.project import build

    return build


TARGET = Target(
    name="hls4ml",
    device=DeviceType.HLS4ML,
    format=ExportFormat.qonnx,
    quantizer_rules=rules.QUANTIZER_RULES,
    layer_rules=rules.LAYER_RULES,
    site_rules=rules.SITE_RULES,
    graph_rules=rules.GRAPH_RULES,
    build=_build,
    thresholds=False,
)
