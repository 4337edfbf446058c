"""The FINN target: a QONNX graph that FINN turns into an integer dataflow on an FPGA.

- :mod:`.rules`: what FINN refuses, per quantizer, per graph-mode site and in the written graph;
- :mod:`.build_config`: the build's settings (:class:`~.build_config.FinnBuildConfig`, the folding);
- :mod:`.steps`: the build's named steps (FINN builder steps, in a registry), :mod:`.runner` the
  package's runner of them, :mod:`.checks` each step checked against torch, :mod:`.front_end` their
  graph work with FINN's transformations, :mod:`.sweeps` the ``ModelWrapper`` FINN runs on;
- :mod:`.passes`: the project's own qonnx transformations;
- :mod:`.interface`: the integer network input, the nodes still computing on floats;
- :mod:`.dataflow`: the directory for FINN's build (partition, folding, estimates, verification);
- :mod:`.execute`: FINN's streamlined and hardware-layer graphs executed on whole batches in torch,
  bit-exact to FINN's Python execution (the verification of every sample);
- :mod:`.estimate`, :mod:`.parts`, :mod:`.origins`: FINN's estimates on a part, the parts, which torch
  module a node came from.

Importing this package needs neither finn-plus nor qonnx; the build imports them when run.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.targets.finn import rules
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.target import AveragePooling, Target
from quark.torch.quantization.config.type import DeviceType

__all__ = ["TARGET", "FinnError"]


def _build():
    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import export_finn_dataflow

    return export_finn_dataflow


TARGET = Target(
    name="FINN",
    device=DeviceType.FINN,
    format=ExportFormat.qonnx,
    quantizer_rules=rules.QUANTIZER_RULES,
    site_rules=rules.SITE_RULES,
    graph_rules=rules.GRAPH_RULES,
    windowed_pools=AveragePooling.truncated,  # FINN's Pool layer; its GlobalAccPool takes a requantized mean
    # FINN's conversion takes a quantizer after Relu (and a ReLU6 / Hardtanh clip, absorbed); every other
    # activation needs its input quantized too, to become thresholds on the input's levels
    fused_activations=("ReLU", "ReLU6", "Hardtanh"),
    build=_build,
    advice=rules.float_activations,
)
