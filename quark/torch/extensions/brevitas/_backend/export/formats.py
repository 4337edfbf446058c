"""Export formats and exporter settings, pinned to what was measured to work with torch 2.13.

``torch.onnx.export`` has two exporters. torch 2.9+ defaults to the dynamo one (``torch.export``)
and so do Brevitas' ``export_qonnx`` / ``export_onnx_qcdq``; we default to the TorchScript one
(``dynamo=False``) because, measured with torch 2.13.0 / brevitas 0.13.4 / onnxscript 0.7.2:

- dynamo cannot write opset 17 (its lowest is 18; converting down fails "No Adapter From Version
  $14 for Reshape"), which the IPU target needs;
- dynamo QCDQ refuses quantized biases (Brevitas: "QCDQ export with `dynamo=True` does not support
  quantized bias") and stores weights as float + Q + DQ instead of integers + DQ;
- ``QuantMultiheadAttention`` fails under dynamo (Brevitas reads its inputs' data pointers, which
  torch.export's fake tensors lack), and per-group weights need the weights' storage too;
- TorchScript exported and verified every zoo model in both formats (benchmarks/export_zoo.py).

``dynamo=True`` stays available (``ModelExporter(..., dynamo=True)``) and is tested on the plain
layers; its known refusals are rows of :mod:`.support`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class ExportFormat(Enum):
    """``qcdq``: standard ONNX QuantizeLinear / Clip / DequantizeLinear (ONNX Runtime, AMD IPU).
    ``qonnx``: QONNX Quant / BipolarQuant / Trunc nodes (FINN)."""

    qcdq = "qcdq"
    qonnx = "qonnx"


@dataclass(frozen=True)
class FormatInfo:
    runtime: str  # what executes the graph for verification
    opset: dict[bool, int]  # dynamo? -> default ONNX opset


FORMATS: dict[ExportFormat, FormatInfo] = {
    ExportFormat.qcdq: FormatInfo("onnxruntime", {False: 17, True: 18}),  # QuantizeLinear/Clip/DequantizeLinear
    ExportFormat.qonnx: FormatInfo("qonnx", {False: 17, True: 18}),  # Quant/BipolarQuant/Trunc
}

#: dynamo? -> (name, lowest opset it writes)
EXPORTERS: dict[bool, tuple[str, int]] = {
    False: ("TorchScript exporter (torch.onnx.export(dynamo=False))", 13),
    True: ("dynamo exporter (torch.onnx.export(dynamo=True))", 18),
}
