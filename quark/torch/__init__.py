"""AMD Quark's PyTorch quantization API, executed on Brevitas.

As in Quark, the main entry points are here: ``ModelQuantizer`` (the Brevitas extension's: one
machinery for both APIs), ``export_onnx``, ``export_safetensors``, ``import_model_from_safetensors``,
``save_params``, ``load_params`` and Quark's earlier ``ModelExporter``. They load on first use, so
that ``import quark.torch`` imports neither Brevitas nor ONNX. Quark's names for LLM serving stacks
(``LLMTemplate``, ``ModelPruner``, ``export_gguf``, native inference) exist and refuse, when used,
with the reason and what to use instead (docs/quark013.md).
"""

from __future__ import annotations

import importlib
from typing import Any

from quark.torch.quantization.quark013_api import refuse, refused_class, refused_function

#: name -> the module that defines it, imported on first use
LAZY = {
    "ModelQuantizer": "quark.torch.extensions.brevitas.api",
    "export_onnx": "quark.torch.export.api",
    "export_safetensors": "quark.torch.export.api",
    "import_model_from_safetensors": "quark.torch.export.api",
    "save_params": "quark.torch.export.api",
    "load_params": "quark.torch.export.api",
    "export_gguf": "quark.torch.export.api",
    "ModelExporter": "quark.torch.export.api",
    "QuantFlow": "quark.torch.quantization.config.type",
}
#: Quark's subpackages here, imported on first use
SUBPACKAGES = ("export", "quantization", "extensions", "examples")

LLMTemplate = refused_class(__name__, "LLMTemplate")
ModelPruner = refused_class(__name__, "ModelPruner")
RuntimeOptions = refused_class(__name__, "RuntimeOptions")
enable_native_inference = refused_function(__name__, "enable_native_inference")
disable_native_inference = refused_function(__name__, "disable_native_inference")

__all__ = [
    "LLMTemplate",
    "ModelExporter",
    "ModelPruner",
    "ModelQuantizer",
    "QuantFlow",
    "RuntimeOptions",
    "disable_native_inference",
    "enable_native_inference",
    "export_gguf",
    "export_onnx",
    "export_safetensors",
    "import_model_from_safetensors",
    "load_params",
    "save_params",
]


def __getattr__(name: str) -> Any:
    if name in LAZY:
        return getattr(importlib.import_module(LAZY[name]), name)
    if name in SUBPACKAGES:
        return importlib.import_module(f"{__name__}.{name}")
    refuse(__name__, name)
