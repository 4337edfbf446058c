"""TQT threshold initialisation as observers: ``_3SD`` and ``_LL_J`` (Jeffreys divergence)."""

from __future__ import annotations

import math

import torch

from quark.torch.quantization.observer.base import ObserverBase
from quark.torch.quantization.observer.histogram import _HistogramObserver
from quark.torch.quantization.observer.selectors import _SelectorObserver
from quark.torch.quantization.tqt_init import jeffreys_threshold, three_sd


class TQT3SDObserver(ObserverBase):
    """TQT ``_3SD`` threshold: |mean| + 3 std of all calibration data (running moments in float64).

    On CPU each batch (float32, as every observer receives it) is reduced in float32 about its own
    mean: sum(x) and sum((x - m)^2) by torch's cascaded sums, then added to the float64 moments as
    n m and sum((x - m)^2) + n m^2, so that a large mean cancels nothing; a batch that overflows
    float32 is reduced again in float64. Why not float64 throughout: copying each activation to
    float64 first measured 2.5x the time of these passes, a third of a graph-mode calibration's
    overhead over the float forward pass. On an accelerator, float64 throughout.
    """

    statistic = "3sd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("moments", torch.zeros(3, dtype=torch.float64), persistent=False)

    def _observe(self, x: torch.Tensor) -> None:
        x, count = x.flatten(), x.numel()
        if x.is_cpu:
            mean, spread = self._centred_moments(x)
            if not torch.isfinite(spread):  # float32 overflowed (values of 1e19 and more)
                mean, spread = self._centred_moments(x.double())
        else:  # an accelerator is not memory-bound here, and testing for overflow would sync it
            mean, spread = self._centred_moments(x.double())
        spread, mean = spread.double(), mean.double()
        self.moments += torch.stack([mean.new_tensor(float(count)), mean * count, spread + mean * mean * count])

    @staticmethod
    def _centred_moments(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """mean(x), sum((x - mean)^2) of a flat tensor, in its dtype."""
        mean = x.sum() / x.numel()
        return mean, torch.sub(x, mean).square_().sum()

    def _sync(self) -> None:
        torch.distributed.all_reduce(self.moments)

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        count, total, squares = self.moments
        mean = total / count
        std = torch.sqrt(torch.clamp(squares / count - mean * mean, min=0))
        t = three_sd(mean, std).clamp(max=torch.finfo(torch.float32).max).float()  # float64 moments may exceed float32
        return -t, t


class TQTJeffreysObserver(_HistogramObserver):
    """TQT ``_LL_J`` threshold: Settle et al.'s Algorithm 1 on the histogram of |x| (see tqt_init).

    The search runs on the histogram merged to about sqrt(n) bins for n observed values (the
    square-root rule, a power of two up to ``num_bins``): a finer histogram of few values is too
    sparse for a divergence to mean anything. With no more bins than quantization levels there is
    nothing to search: the threshold is max|x|. Exact zeros (after a ReLU, most values) are left
    out: they are exact at any threshold, and their spike in the first bin, spread over its group
    by Q, drives the search to a threshold of a few bins (TensorRT's calibrator skips zeros too).
    """

    statistic = "ll_j"
    skip_zeros = True

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.symmetric = True  # the histogram is of |x|

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        count = float(self.hist.sum()) if self.hist.numel() else 0.0
        bins = min(self.num_bins, 2 ** max(0, math.ceil(math.log2(math.sqrt(count))))) if count else 1
        levels = self.qmax + 1
        if bins <= levels:
            t = torch.tensor(self.amax, device=self.hist.device if self.hist.numel() else None)
        else:
            t = jeffreys_threshold(self.hist.view(bins, -1).sum(dim=1), self.bound / bins, levels=levels)
        return -t, t


class TQTObserver(_SelectorObserver):
    """AMD Quark's name for the TQT quantizer: ``QuantizationSpec(observer_cls=TQTObserver,
    qat_spec=TQTSpec(threshold_init_meth=...))``. It selects TQT (the threshold is initialised by
    ``_3SD`` or ``_LL_J``, see :data:`quark.torch.quantization.tensor_quant.TQT_OBSERVERS`); with
    ``threshold_init_meth=None`` the threshold starts at the calibration data's abs-max (Quark leaves
    it at 2^0 = 1). It needs ``qat_spec=TQTSpec(...)``, as in Quark."""

    statistic = "tqt"
