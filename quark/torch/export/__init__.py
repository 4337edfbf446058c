"""AMD Quark's export package: ``quark.torch.export.api`` (``export_onnx``, ``export_safetensors``,
``save_params``, ...: it imports Brevitas) and the export configs, reachable from here as in Quark."""

from quark.torch.export.config.config import ExporterConfig, JsonExporterConfig, OnnxExporterConfig

__all__ = ["ExporterConfig", "JsonExporterConfig", "OnnxExporterConfig"]
