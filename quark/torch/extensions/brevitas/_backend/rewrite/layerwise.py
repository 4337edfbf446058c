"""The layerwise backend: every supported compute layer swapped for its Brevitas layer.

``prepare`` converts equivalent layers (``rewrite.conversions``: transformers' ``Conv1D`` becomes
``nn.Linear``). Sites are the modules of the types in ``mapping.LAYERS`` (never one inside another: a
MultiheadAttention's ``out_proj`` is quantized as part of it). Only their own tensors (input,
output, weight, bias) are quantized; what flows between them stays float. A layer whose weight
spec folds batch norm during QAT (``TQTSpec.fold_batch_norm``) takes the batch norm that alone
takes its output (found in the ``torch.fx`` graphs of the largest submodules that trace), which
becomes an ``nn.Identity`` where it sat (see :mod:`..folding`).
"""

from __future__ import annotations

from torch import nn

from quark.torch.extensions.brevitas._backend import folding
from quark.torch.extensions.brevitas._backend.mapping import LAYERS
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
        """Every layer quantizes its own tensors; those whose weight spec folds batch norm take theirs."""
        if folding.wants_folding(plans):
            folding.assign(plans, folding.module_pairs(model))

    def rewrite(self, model: nn.Module, plans: list[LayerPlan], sites: list[Site]) -> nn.Module:
        modules = {s.name: s.module for s in sites}
        replacements = {p.name: folding.build(p, modules[p.name], model) for p in plans if p.quantized}
        for name, new in replacements.items():
            model.set_submodule(name, new)
        for plan in plans:
            if plan.batch_norm is not None and plan.name in replacements:
                model.set_submodule(plan.batch_norm, nn.Identity())  # the layer computes it now
        return model


LAYERWISE = LayerwiseRewriter()
