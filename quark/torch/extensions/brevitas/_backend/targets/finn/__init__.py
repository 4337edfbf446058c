"""The FINN target: a QONNX graph that FINN turns into an integer dataflow on an FPGA.

- :mod:`.rules`: what FINN refuses, per quantizer, per graph-mode site and in the written graph;
- :mod:`.pipeline`: FINN's front end as named steps run by the checked runner (the hand-off,
  :func:`~.pipeline.finn_handoff`, is its prefix), to one dataflow partition;
- :mod:`.passes`: the project's own qonnx transformations;
- :mod:`.interface`: the integer network input, the nodes still computing on floats;
- :mod:`.dataflow`: the directory for FINN's build (partition, folding, estimates, verification);
- :mod:`.execute`: FINN's streamlined and hardware-layer graphs executed on whole batches in torch,
  bit-exact to FINN's Python execution (the verification of every sample);
- :mod:`.estimate`, :mod:`.parts`, :mod:`.origins`: FINN's estimates on a part, the parts, which torch
  module a node came from.

Importing this package needs neither finn-plus nor qonnx; the pipeline imports them when run.
"""

from __future__ import annotations

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.targets.finn import rules
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.target import AveragePooling, Step, Target
from quark.torch.quantization.config.type import DeviceType

__all__ = ["TARGET", "FinnError"]


def _pipeline() -> tuple[Step, ...]:
    from quark.torch.extensions.brevitas._backend.targets.finn.pipeline import FRONT_END

    return FRONT_END


TARGET = Target(
    name="FINN",
    device=DeviceType.FINN,
    format=ExportFormat.qonnx,
    quantizer_rules=rules.QUANTIZER_RULES,
    site_rules=rules.SITE_RULES,
    graph_rules=rules.GRAPH_RULES,
    windowed_pools=AveragePooling.truncated,  # FINN's Pool layer; its GlobalAccPool takes a requantized mean
    pipeline=_pipeline,
    advice=rules.float_activations,
)
