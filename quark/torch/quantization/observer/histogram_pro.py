"""AMD Quark's ``PerTensorHistogramObserverPro``: torch's ``HistogramObserver`` (256 bins, its
non-linear search for the range minimising the L2 quantization error), on the spec's integer grid.

Quark wraps the same torch observer; the range reported is the one torch's search returns, and the
quantizers of this package compute the scale from it with torch's (and Quark's) formula. Per tensor,
activations only: weights compute their statistic with Brevitas, which has no such search.
"""

from __future__ import annotations

from typing import ClassVar

import torch

from quark.torch.quantization.observer.base import ObserverBase

#: torch's bins, as Quark configures it
BINS = 256
#: inputs are clamped to +-this before torch's histogram: its search squares bin widths in float32,
#: which overflow (NaN ranges, found by the robustness tests) for ranges beyond about 2^71
MAX_MAGNITUDE = 2.0**60


class PerTensorHistogramObserverPro(ObserverBase):
    """torch's ``HistogramObserver`` (see the module)."""

    statistic: ClassVar[str] = "histogram_pro"
    not_for_weights: ClassVar[str | None] = (
        "torch's HistogramObserver search has no Brevitas weight statistic here; for weights use "
        "PerTensorMinMaxObserver, PerTensorMSEObserver or PerTensorPercentileObserver"
    )

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        from torch.ao.quantization import HistogramObserver  # torch's quantization package: loaded when used

        signed = self.qmin < 0
        wide = self.qmax - self.qmin > 255
        dtype = torch.qint32 if wide else (torch.qint8 if signed else torch.quint8)
        scheme = torch.per_tensor_symmetric if self.symmetric else torch.per_tensor_affine
        self.histogram = HistogramObserver(
            bins=BINS, dtype=dtype, qscheme=scheme, quant_min=self.qmin, quant_max=self.qmax
        )

    def _observe(self, x: torch.Tensor) -> None:
        self.histogram(x.clamp(-MAX_MAGNITUDE, MAX_MAGNITUDE))

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.histogram._non_linear_param_search()

    def _sync(self) -> None:
        raise RuntimeError(
            "PerTensorHistogramObserverPro (torch's HistogramObserver) cannot merge histograms across processes; "
            "calibrate on one rank, or use PerTensorHistogramObserver, which merges exactly"
        )
