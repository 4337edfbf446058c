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


class _BlockMaxObserver(_SelectorObserver):
    """A block format's shared scale, from each block's absolute maximum (computed by the quantizer)."""

    qscheme = QSchemeType.per_group
    statistic = "block_max"


class PlaceholderObserver(_SelectorObserver):
    """bfloat16 / float16 casts: no scale, no statistics."""

    statistic = "none"


class PerGroupMinMaxObserver(_SelectorObserver):
    """Min / max per group of ``group_size`` elements along ``ch_axis`` (per_group weights)."""

    qscheme = QSchemeType.per_group
    statistic = "minmax"


class PerBlockMXObserver(_BlockMaxObserver):
    """OCP MX: a power-of-two scale per 32-element block, from the block's absolute maximum."""


#: Quark 0.13's ``PerBlockMXObserver`` that reuses its buffers (a memory option of Quark's kernels,
#: ``enable_buffer_reuse``): the same blocks and scales, so the same observer here
PerBlockMXBufferReuseObserver = PerBlockMXObserver


class PerBlockBFPObserver(_BlockMaxObserver):
    """MX6 / MX9 (block floating point with shared micro-exponents), per 16-element block."""


class PerBlock2DMinMaxObserver(_SelectorObserver):
    """Quark's 2-D block observer (``qscheme=per_block`` with a ``block_size`` pair): refused."""

    qscheme = QSchemeType.per_block
    statistic = "block_minmax"
    refused = (
        "2-D weight blocks (qscheme=per_block, block_size=[rows, columns]) have no quantizer here (Quark uses this "
        "observer only as a placeholder for pre-quantized layers); use qscheme=per_group with a group_size"
    )


class PerBlockMXDiffsObserver(_SelectorObserver):
    """Quark's static MX observer that searches each block's shared exponent (``OCP_MXFP4DiffsSpec``): refused."""

    qscheme = QSchemeType.per_group
    statistic = "block_mse"
    refused = (
        "a per-block search of the shared exponent on the last calibration batch (OCP_MXFP4DiffsSpec) is not "
        "implemented; use OCP_MXFP4Spec (shared exponent from each block's maximum)"
    )
