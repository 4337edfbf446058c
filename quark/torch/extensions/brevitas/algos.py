"""Algorithms of AMD Quark's Brevitas extension, run around quantization.

Each has a ``name`` and ``apply(model, calib_loader=None) -> model``; the config classes import
without Brevitas, ``apply`` imports it.
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass
from typing import Any, ClassVar

from torch import nn

from quark.torch.quantization.config._fields import from_registry, named_dict

__all__ = ["Preprocess", "algo_from_dict"]

logger = logging.getLogger(__name__)


@dataclass(eq=True)
class _Algo:
    name: ClassVar[str] = ""

    def to_dict(self) -> dict[str, Any]:
        return named_dict(self, self.name)


@dataclass(eq=True)
class Preprocess(_Algo):
    """Float-model preparation before quantization (Brevitas ``preprocess_for_quantize``).

    Traces the model with ``torch.fx``, turns functional calls into modules, merges batch norm into
    the preceding convolution, removes dropout, equalizes weights across layers
    (``equalize_iterations`` rounds) and optionally splits outlier channels. The function of the
    model is preserved (ReLU6 is kept: Brevitas' default replacement by ReLU would change it).

    A model that ``torch.fx`` cannot trace fails here with the tracer's message; pass
    ``Config(..., pre_quant_opt_config=[])`` to quantize it without pre-processing.
    """

    name: ClassVar[str] = "preprocess"
    trace_model: bool = True
    equalize_iterations: int = 20
    equalize_merge_bias: bool = True
    merge_batch_norm: bool = True
    channel_splitting_ratio: float = 0.0
    channel_splitting_split_input: bool = False

    def apply(self, model: nn.Module, calib_loader: Any = None) -> nn.Module:
        from brevitas.graph.quantize import preprocess_for_quantize

        try:
            with warnings.catch_warnings():  # torch.fx internals deprecations, not actionable by users
                warnings.simplefilter("ignore", FutureWarning)
                return preprocess_for_quantize(
                    model,
                    trace_model=self.trace_model,
                    relu6_to_relu=False,
                    equalize_iters=self.equalize_iterations,
                    equalize_merge_bias=self.equalize_merge_bias,
                    merge_bn=self.merge_batch_norm,
                    channel_splitting_ratio=self.channel_splitting_ratio,
                    channel_splitting_split_input=self.channel_splitting_split_input,
                )
        except Exception as err:  # torch.fx raises many types; add what the user can do about it
            raise RuntimeError(
                f"Preprocess could not prepare {type(model).__name__}: {err}. "
                "Pass Config(..., pre_quant_opt_config=[]) to quantize without pre-processing."
            ) from err


ALGOS: dict[str, type[_Algo]] = {c.name: c for c in (Preprocess,)}


def algo_from_dict(data: dict[str, Any]) -> _Algo:
    return from_registry("algorithm", data, ALGOS)
