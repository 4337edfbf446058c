"""Export of quantized models to ONNX (QCDQ for ONNX Runtime / AMD IPU, QONNX for FINN), with
verification of the written graph against the torch model.

Importing this package does not import onnx, onnxruntime or qonnx; exporting does.
"""

from quark.torch.extensions.brevitas._backend.export.errors import (
    ExportFailedError,
    ExportVerificationError,
    TargetCheckError,
    UnsupportedExportError,
)
from quark.torch.extensions.brevitas._backend.export.exporter import ModelExporter
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat

__all__ = [
    "ExportFailedError",
    "ExportFormat",
    "ExportVerificationError",
    "ModelExporter",
    "TargetCheckError",
    "UnsupportedExportError",
]
