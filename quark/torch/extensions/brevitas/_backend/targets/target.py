"""The :class:`Target` type: a deployment target's format, rules and build."""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.export.errors import TargetCheckError
from quark.torch.extensions.brevitas._backend.export.formats import ExportFormat
from quark.torch.extensions.brevitas._backend.inventory import modules, quantizers
from quark.torch.extensions.brevitas._backend.rules import Rule, passed, problems
from quark.torch.quantization.config.type import DeviceType

logger = logging.getLogger(__name__)

class AveragePooling(Enum):
    """How graph mode quantizes an average pool that has no ``output_tensors`` spec of its own."""

    requantized = "requantized"  # the float average, quantized again with the input's spec (QDQ, FINN's GlobalAccPool)
    truncated = "truncated"  # the integer sum's most significant bits (floor): Brevitas' TruncAvgPool2d, FINN's Pool


@dataclass(frozen=True)
class Target:
    """A deployment target.

    ``quantizer_rules`` take a :class:`~..rules.Quantizer`, ``layer_rules`` a
    :class:`~..inventory.Module` (with the roles its plan takes from upstream), ``site_rules`` the
    model's plans, ``graph_rules`` the written ``onnx.ModelProto``; ``windowed_pools`` the form of
    the average pools it computes (graph mode builds them so); ``fused_activations``, where set, the
    activations its runtime fuses into the layer before them: graph mode quantizes the input of every
    other activation (so that it runs as DequantizeLinear -> op -> QuantizeLinear); ``build()`` the
    function that takes the exported file further (FINN's: the build of a dataflow directory from
    the QONNX file, run by ``ModelExporter.export_finn_dataflow``; None where the target's compiler is
    the user's, as the IPU's); ``advice(plans)`` what to warn about before export (what the target will
    leave float, say); ``thresholds`` whether a QONNX export writes the activation quantizers FINN's
    conversion would round otherwise as exact MultiThreshold nodes (as without a target), or every one
    as a Quant node (a reader that rounds as the node says and knows no MultiThreshold: hls4ml).
    """

    name: str
    device: DeviceType
    format: ExportFormat
    opset: int | None = None
    quantizer_rules: tuple[Rule, ...] = ()
    layer_rules: tuple[Rule, ...] = ()
    site_rules: tuple[Rule, ...] = ()
    graph_rules: tuple[Rule, ...] = ()
    windowed_pools: AveragePooling = AveragePooling.requantized  # global pools are always requantized
    fused_activations: tuple[str, ...] | None = None  # class names; None: activations take any input
    build: Callable[[], Callable[..., Any]] | None = None  # loads the build (and its libraries) when called
    advice: Callable[[Sequence[Any]], str | None] | None = None  # a warning on the plans, said before export
    variant: Callable[[nn.Module], Target] | None = None  # the target for this model (rules that follow the preset)
    thresholds: bool = True

    def for_model(self, model: nn.Module) -> Target:
        """The target whose rules apply to ``model``: a target with precisions (the IPU's XINT8, A8W8,
        A16W8, BF16, BFP16) resolves them from the model's quantizers; others are themselves."""
        return self.variant(model) if self.variant is not None else self

    def config_problems(self, model: nn.Module, plans: Sequence[Any]) -> list[str]:
        """Every quantizer, layer and site of ``model`` (with its recorded ``plans``) the target refuses."""
        found = problems(self.quantizer_rules, quantizers(model), where=str, allows=self.name)
        found += problems(self.layer_rules, modules(model, plans), where=str, allows=self.name)
        return found + problems(self.site_rules, [tuple(plans)], allows=self.name)

    def check_config(self, model: nn.Module, plans: Sequence[Any]) -> None:
        """Raise :class:`TargetCheckError` naming everything the target refuses, before export."""
        found = self.config_problems(model, plans)
        if found:
            raise TargetCheckError(f"the config cannot meet the {self.name} target:\n  " + "\n  ".join(found), found)
        note = self.advice(plans) if self.advice is not None else None
        if note:
            logger.warning("%s", note)

    def check_graph(self, graph: Any) -> list[str]:
        """Check the written graph; return the checks it passed or raise :class:`TargetCheckError`."""
        found = problems(self.graph_rules, [graph], allows=self.name)
        if found:
            raise TargetCheckError(
                f"the exported graph does not meet the {self.name} target:\n  " + "\n  ".join(found), found
            )
        return passed(self.graph_rules, graph, self.name)
