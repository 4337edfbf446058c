"""Backends as rewriters: the table from a config's mode to the rewriter that quantizes the model.

A rewriter says where it can quantize (``sites``), and rewrites the model from the resolved plan
(``rewrite``). Both config flavours select one: the main API by ``Config.quant_mode``, the
Brevitas extension by ``Config.backend``. A new backend is one entry in :data:`REWRITERS`.
"""

from __future__ import annotations

from enum import Enum
from typing import Protocol

from torch import nn

from quark.torch.extensions.brevitas._backend.rewrite.graph import GRAPH
from quark.torch.extensions.brevitas._backend.rewrite.layerwise import LAYERWISE
from quark.torch.extensions.brevitas.config import Backend
from quark.torch.quantization.config.type import QuantizationMode
from quark.torch.quantization.plan import ConfigView, LayerPlan, Site


class Rewriter(Protocol):
    """How a backend quantizes a model.

    ``prepare`` returns the model the plan is resolved on (the layerwise backend: the model
    itself; graph mode: its traced graph); ``sites`` lists where the plan may put quantizers, and
    ``supported_types`` the types it can quantize (for the messages); ``connect`` completes the
    resolved plans with what the sites hand each other (graph mode: a layer whose input arrives
    quantized takes the upstream spec; the signs of the config's view), before the rules check them; ``rewrite`` builds every
    replacement first, then swaps them in.
    """

    name: str
    supported_types: tuple[type, ...]

    def prepare(self, model: nn.Module) -> nn.Module: ...

    def sites(self, model: nn.Module) -> list[Site]: ...

    def connect(self, model: nn.Module, plans: list[LayerPlan], sites: list[Site], view: ConfigView) -> None: ...

    def rewrite(self, model: nn.Module, plans: list[LayerPlan], sites: list[Site]) -> nn.Module: ...


#: config mode -> rewriter
REWRITERS: dict[Enum, Rewriter] = {
    QuantizationMode.eager_mode: LAYERWISE,
    QuantizationMode.fx_graph_mode: GRAPH,
    Backend.layerwise: LAYERWISE,
    Backend.fx: GRAPH,
}


def rewriter_for(mode: Enum) -> Rewriter:
    """The rewriter of ``mode``, or a ``NotImplementedError`` naming the modes that have one."""
    try:
        return REWRITERS[mode]
    except KeyError:
        field = "backend" if isinstance(mode, Backend) else "quant_mode"
        available = sorted(m.name for m in REWRITERS if type(m) is type(mode))
        raise NotImplementedError(
            f"Config.{field}={mode.name}: no rewriter in this backend; available: {available}"
        ) from None
