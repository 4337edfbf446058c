"""Observer names that select a behaviour computed elsewhere (casts, per-group weights, blocks):
they never calibrate an activation."""

from __future__ import annotations

import torch

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer.base import ObserverBase


class _SelectorObserver(ObserverBase):
    """An observer name that selects a behaviour computed elsewhere (on the weight by its
    quantizer, or not at all for casts and blocks): it never calibrates an activation."""

    def _observe(self, x: torch.Tensor) -> None:
        raise TypeError(
            f"{type(self).__name__} selects {self.qscheme.name} {self.statistic or 'unscaled'} quantization computed by "
            "the quantizer itself; it does not calibrate activations"
        )


class PlaceholderObserver(_SelectorObserver):
    """bfloat16 / float16 casts: no scale, no statistics."""

    statistic = "none"


class PerGroupMinMaxObserver(_SelectorObserver):
    """Min / max per group of ``group_size`` elements along ``ch_axis`` (per_group weights)."""

    qscheme = QSchemeType.per_group
    statistic = "minmax"


class PerBlockMXObserver(_SelectorObserver):
    """OCP MX: a power-of-two scale per 32-element block, from the block's absolute maximum."""

    qscheme = QSchemeType.per_group
    statistic = "block_max"


class PerBlockBFPObserver(_SelectorObserver):
    """MX6 / MX9 (block floating point with shared micro-exponents), per 16-element block."""

    qscheme = QSchemeType.per_group
    statistic = "block_max"
