"""Export of quantized models to ONNX (QCDQ for ONNX Runtime / AMD IPU, QONNX for FINN), with
verification of the written graph against the torch model. The public names are in
:mod:`quark.torch.extensions.brevitas.api` (``ModelExporter``, the errors, ``ExportFormat``).

Importing this package does not import onnx, onnxruntime or qonnx; exporting does.
"""
