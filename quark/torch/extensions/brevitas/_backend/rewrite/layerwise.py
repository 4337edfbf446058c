"""The layerwise backend: every supported compute layer swapped for its Brevitas layer.

``prepare`` converts equivalent layers (``rewrite.conversions``: transformers' ``Conv1D`` becomes
``nn.Linear``). Sites are the modules of the types in ``mapping.LAYERS`` (never one inside another: a
MultiheadAttention's ``out_proj`` is quantized as part of it). Only their own tensors (input,
output, weight, bias) are quantized; what flows between them stays float.
"""

from __future__ import annotations

from torch import nn

from quark.torch.extensions.brevitas._backend.mapping import LAYERS, build_layer
from quark.torch.extensions.brevitas._backend.rewrite.conversions import convert
from quark.torch.quantization.plan import ConfigView, LayerPlan, Site, module_sites


class LayerwiseRewriter:
    name = "layerwise"
    supported_types: tuple[type, ...] = tuple(LAYERS)

    def prepare(self, model: nn.Module) -> nn.Module:
        """Layers computing what a supported layer computes (transformers' ``Conv1D``) become it."""
        return convert(model)

    def sites(self, model: nn.Module) -> list[Site]:
        return module_sites(model, self.supported_types)

    def connect(self, model: nn.Module, plans: list[LayerPlan], sites: list[Site], view: ConfigView) -> None:
        """Nothing: every layer quantizes its own tensors."""

    def rewrite(self, model: nn.Module, plans: list[LayerPlan], sites: list[Site]) -> nn.Module:
        modules = {s.name: s.module for s in sites}
        replacements = {p.name: build_layer(p, modules[p.name]) for p in plans if p.quantized}
        for name, new in replacements.items():
            model.set_submodule(name, new)
        return model


LAYERWISE = LayerwiseRewriter()
