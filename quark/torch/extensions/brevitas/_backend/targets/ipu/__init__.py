"""The AMD IPU / NPU (Ryzen AI) target: QDQ graphs at opset 17 in the NPU's precisions.

The precisions are plugins (:mod:`.precisions`, one row each: XINT8, A8W8, A16W8, BF16, BFP16):
each claims the activation quantizers of its form and brings its own quantizer and graph rules
(:mod:`.rules`). :data:`TARGET` is XINT8's; ``TARGET.for_model(model)`` (the exporter calls it)
resolves the precisions the model's activations are in and checks the union of their rules, so a
preset's rules follow it, and a mixed A8W8 / A16W8 model is checked for both.
"""

from __future__ import annotations

from dataclasses import replace

from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.targets.ipu import precisions
from quark.torch.extensions.brevitas._backend.targets.ipu.rules import (
    COMMON_GRAPH_RULES,
    COMPUTE,
    FLOAT_BIAS_LAYER_RULES,
    GRAPH_RULES,
    INTEGER_ONLY,
    LAYER_RULES,
    OPSET,
    QUANTIZER_RULES,
    integer_only,
)
from quark.torch.extensions.brevitas._backend.targets.target import Target
from quark.torch.quantization.config.type import DeviceType

__all__ = [
    "COMMON_GRAPH_RULES",
    "COMPUTE",
    "FLOAT_BIAS_LAYER_RULES",
    "GRAPH_RULES",
    "INTEGER_ONLY",
    "LAYER_RULES",
    "OPSET",
    "QUANTIZER_RULES",
    "TARGET",
    "TARGET_XINT8",
    "integer_only",
    "precisions",
]

#: XINT8 as it is; :data:`TARGET` resolves the precision of each model (``Target.for_model``)
TARGET_XINT8 = Target(
    name="IPU",
    device=DeviceType.IPU,
    format=ExportFormat.qcdq,
    opset=OPSET,
    quantizer_rules=QUANTIZER_RULES,
    layer_rules=LAYER_RULES,
    graph_rules=GRAPH_RULES,
    # ONNX Runtime's QDQ fusion takes Conv / Gemm -> Relu / Clip -> QuantizeLinear as one integer
    # kernel (the graph rule lets them pass); any other activation needs DequantizeLinear before it
    fused_activations=("ReLU", "ReLU6", "Hardtanh"),
)
TARGET = replace(TARGET_XINT8, variant=lambda model: precisions.target_for(model, TARGET_XINT8))
