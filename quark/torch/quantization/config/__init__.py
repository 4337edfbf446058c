"""Quantization configs: pure dataclasses and enums, importable without Brevitas, ONNX or QONNX."""
