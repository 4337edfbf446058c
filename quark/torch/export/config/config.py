"""AMD Quark's export configs, by its names, fields and defaults: ``ExporterConfig`` with its
``JsonExporterConfig`` (the safetensors / json formats) and ``OnnxExporterConfig``; ``ModelExporter``
(``quark.torch.export.api``) reads them. Each field is honoured or refused on construction, naming
the field, the value and what is allowed. Pure config: no Brevitas.
"""

from __future__ import annotations

from dataclasses import dataclass, field

WEIGHT_FORMATS = ("real_quantized", "fake_quantized")
PACK_METHODS = ("reorder", "order")


@dataclass(eq=True)
class JsonExporterConfig:
    """Options of Quark's json / safetensors exports.

    Args:
        weight_merge_groups: Quark's groups of layers sharing one weight scale; only None (this
            package gives each layer its own scale).
        kv_cache_group: Quark's KV-cache layers; only [] (no KV cache is quantized here).
        min_kv_scale: only 0.0 (no KV cache).
        weight_format: ``"real_quantized"`` (integers) or ``"fake_quantized"`` (dequantized values).
        pack_method: ``"reorder"`` or ``"order"``: Quark's order of 4-bit values packed in an int32.
    """

    weight_merge_groups: list[list[str]] | None = None
    kv_cache_group: list[str] = field(default_factory=list)
    min_kv_scale: float = 0.0
    weight_format: str = "real_quantized"
    pack_method: str = "reorder"

    def __post_init__(self) -> None:
        owner = type(self).__name__
        refused = {
            "weight_merge_groups": (self.weight_merge_groups is None, "None (one weight scale per layer here)"),
            "kv_cache_group": (self.kv_cache_group == [], "[] (no KV cache is quantized here)"),
            "min_kv_scale": (self.min_kv_scale == 0.0, "0.0 (no KV cache is quantized here)"),
            "weight_format": (self.weight_format in WEIGHT_FORMATS, " or ".join(map(repr, WEIGHT_FORMATS))),
            "pack_method": (self.pack_method in PACK_METHODS, " or ".join(map(repr, PACK_METHODS))),
        }
        for name, (ok, allowed) in refused.items():
            if not ok:
                raise ValueError(f"{owner}.{name}={getattr(self, name)!r} is not supported; allowed: {allowed}")


@dataclass(eq=True)
class OnnxExporterConfig:
    """Quark's ONNX export options (none: ``export_onnx``'s arguments say everything)."""


@dataclass(eq=True)
class ExporterConfig:
    """Quark's export config: ``json_export_config`` for the json / safetensors formats,
    ``onnx_export_config`` for ONNX (None or an :class:`OnnxExporterConfig`)."""

    json_export_config: JsonExporterConfig
    onnx_export_config: OnnxExporterConfig | None = None

    def __post_init__(self) -> None:
        if not isinstance(self.json_export_config, JsonExporterConfig):
            raise TypeError(f"ExporterConfig.json_export_config={self.json_export_config!r}: expected a JsonExporterConfig")
        if self.onnx_export_config is not None and not isinstance(self.onnx_export_config, OnnxExporterConfig):
            raise TypeError(f"ExporterConfig.onnx_export_config={self.onnx_export_config!r}: expected an OnnxExporterConfig or None")


__all__ = ["ExporterConfig", "JsonExporterConfig", "OnnxExporterConfig"]
