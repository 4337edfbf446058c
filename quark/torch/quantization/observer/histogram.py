"""Histogram observers: percentile, MSE and Quark's histogram (L2) ranges from an exact histogram."""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from quark.torch.quantization.observer.base import ObserverBase

#: histogram bounds stop here, so that the width of [-bound, bound] is finite in float32 (2^128 is inf)
MAX_BOUND = 2.0**126


def _bin_counts(x: torch.Tensor, bound: float, bins: int, symmetric: bool, skip_zeros: bool) -> torch.Tensor:
    """Exact int64 counts of |x| over [0, bound] (symmetric) or of x over [-bound, bound], in ``bins``
    equal bins, the right edge in the last bin, leaving out exact zeros if ``skip_zeros``; every
    value must lie in the range.

    The bins of ``torch.histc``: its float32 arithmetic, (x - lo) * bins / (hi - lo), then
    truncation (toward zero, so taking |x| after it is the same). Where bins / (hi - lo) is a
    power of two in float32's normal range, as with the observers' power-of-two bounds and bin
    counts, one multiplication by it gives the same values (and right ones where histc's x * bins
    overflows, |x| > 2^128 / bins). Why not histc itself: on CPU it is ~10x slower than these few
    passes and ``torch.bincount``. Values are taken in slices of ``_SLICE``: the temporaries of a
    whole large tensor (7 bytes a value) would be fresh memory at every batch, whose page faults
    cost more than the counting (glibc gives big blocks back to the system).
    """
    if skip_zeros and not symmetric:
        raise ValueError("_bin_counts: skip_zeros needs a histogram of |x| (symmetric), where zeros fall in bin 0")
    lo, span = (0.0, bound) if symmetric else (-bound, 2 * bound)
    scale = bins / span
    exact = math.frexp(scale)[0] == 0.5 and 2.0**-126 <= scale <= 2.0**127
    small = torch.int16 if bins < 2**15 else torch.int32  # bin indices, up to bins + 1
    counts = torch.zeros(bins + 1 + skip_zeros, dtype=torch.int64, device=x.device)
    for part in x.reshape(-1).split(_SLICE):
        shifted = part if symmetric else part - lo
        index = (shifted * scale if exact else (shifted * bins).div_(span)).to(small)
        if symmetric:
            index.abs_()
        if skip_zeros:  # exact zeros to slot 0, bin k to slot k + 1 (x.bool() is x != 0, ~5x faster on CPU)
            index += part.bool()
        counts += torch.bincount(index, minlength=counts.numel())
    counts = counts[int(skip_zeros) :]
    counts[bins - 1] += counts[bins]
    return counts[:bins]


#: values per pass of :func:`_bin_counts`
_SLICE = 2**17


class _HistogramObserver(ObserverBase):
    """Histogram of x (or |x| when symmetric) whose range doubles when data exceeds it.

    Doubling the range merges pairs of bins exactly, so the histogram stays an exact count of the
    data at the final resolution, independent of batch order.
    """

    num_bins: ClassVar[int] = 2048
    skip_zeros: ClassVar[bool] = False  # leave exact zeros out (of a symmetric histogram, of |x|)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("hist", torch.zeros(0), persistent=False)
        self.bound = 0.0  # histogram covers [0, bound] (symmetric) or [-bound, bound]
        self.amax = 0.0  # largest |x| seen

    def _observe(self, x: torch.Tensor) -> None:
        lo, hi = (float(v) for v in torch.aminmax(x))
        if not (math.isfinite(lo) and math.isfinite(hi)):
            raise ValueError(
                f"{type(self).__name__}: calibration tensor holds NaN or infinity (min {lo}, max {hi}); "
                "a histogram observer needs finite values"
            )
        amax = max(-lo, hi)
        if self.skip_zeros and amax == 0:
            return
        self.amax = max(self.amax, amax)
        if not self.hist.numel():
            # a power of two, so that histograms of different processes align by doubling
            self.bound = min(2.0 ** math.ceil(math.log2(amax)), MAX_BOUND) if amax > 0 else 1.0
            self.hist = torch.zeros(self.num_bins, device=x.device)
        while amax > self.bound and self.bound < MAX_BOUND:
            self._double_range()
        if amax > MAX_BOUND:  # counted in the outermost bins
            x = x.clamp(-MAX_BOUND, MAX_BOUND)
        self.hist += _bin_counts(x, self.bound, self.num_bins, self.symmetric, self.skip_zeros)

    def _double_range(self) -> None:
        merged = self.hist.view(-1, 2).sum(dim=1)
        new = torch.zeros_like(self.hist)
        if self.symmetric:  # [0, b] -> [0, 2b]: old bins land in the lower half
            new[: merged.numel()] = merged
        else:  # [-b, b] -> [-2b, 2b]: old bins land in the middle half
            start = self.num_bins // 4
            new[start : start + merged.numel()] = merged
        self.hist = new
        self.bound *= 2

    def _sync(self) -> None:
        # bounds are powers of two: doubling the smaller ones aligns every histogram exactly
        dist = torch.distributed
        bound = torch.tensor(self.bound, dtype=torch.float64, device=self.hist.device)
        dist.all_reduce(bound, op=dist.ReduceOp.MAX)
        if not self.hist.numel():  # this rank saw nothing
            self.hist = torch.zeros(self.num_bins, device=self.hist.device)
            self.bound = float(bound)
        while self.bound < float(bound):
            self._double_range()
        dist.all_reduce(self.hist)
        amax = torch.tensor(self.amax, dtype=torch.float64, device=self.hist.device)
        dist.all_reduce(amax, op=dist.ReduceOp.MAX)
        self.amax = float(amax)

    def _edges(self) -> torch.Tensor:
        lo = 0.0 if self.symmetric else -self.bound
        return torch.linspace(lo, self.bound, self.num_bins + 1, device=self.hist.device)


class PerTensorPercentileObserver(_HistogramObserver):
    """Percentile of |x| (symmetric) or central interval of x (asymmetric), to one bin.

    ``percentile`` defaults to Quark's 99.99999999; subclass to change it::

        class Percentile999(PerTensorPercentileObserver):
            percentile = 99.9
    """

    statistic = "percentile"
    percentile: ClassVar[float] = 99.99999999

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        cdf = torch.cumsum(self.hist, 0) / self.hist.sum()
        edges = self._edges()
        if self.symmetric:
            hi_idx = torch.searchsorted(cdf, torch.tensor(self.percentile / 100, device=cdf.device))
            hi = edges[torch.clamp(hi_idx + 1, max=self.num_bins)]
            return -hi, hi
        tail = (100 - self.percentile) / 200
        lo_idx = torch.searchsorted(cdf, torch.tensor(tail, device=cdf.device), right=True)
        hi_idx = torch.searchsorted(cdf, torch.tensor(1 - tail, device=cdf.device))
        return edges[lo_idx], edges[torch.clamp(hi_idx + 1, max=self.num_bins)]


class PerTensorMSEObserver(_HistogramObserver):
    """Clipping range minimising the mean squared quantization error over the histogram.

    Candidates are the histogram's bin edges (symmetric: amax; asymmetric: the observed range
    shrunk by a common factor). Each candidate is evaluated on the spec's integer grid with
    round-half-even, the error of every bin measured at its centre, weighted by its count.
    """

    statistic = "mse"
    num_candidates: ClassVar[int] = 512

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        edges = self._edges()
        centers = (edges[1:] + edges[:-1]) / 2
        if self.symmetric:
            nonzero = torch.nonzero(self.hist).flatten()
            top = edges[int(nonzero[-1]) + 1] if nonzero.numel() else edges[-1]
            frac = torch.linspace(1 / self.num_candidates, 1, self.num_candidates, device=edges.device)
            amax = (top * frac)[:, None]
            scale = amax / ((self.qmax - self.qmin) / 2) if self.qmin < 0 else amax / self.qmax
            q = torch.clamp(torch.round(centers[None] / scale), self.qmin, self.qmax) * scale
            best = amax[torch.argmin(((q - centers[None]) ** 2 * self.hist[None]).sum(1)), 0]
            return -best, best
        nonzero = torch.nonzero(self.hist).flatten()
        lo0 = torch.clamp(edges[int(nonzero[0])], max=0.0)
        hi0 = torch.clamp(edges[int(nonzero[-1]) + 1], min=0.0)
        frac = torch.linspace(1 / self.num_candidates, 1, self.num_candidates, device=edges.device)[:, None]
        lo, hi = lo0 * frac, hi0 * frac
        scale = torch.clamp((hi - lo) / (self.qmax - self.qmin), min=torch.finfo(torch.float32).tiny)
        zp = self.qmin - torch.round(lo / scale)
        q = (torch.clamp(torch.round(centers[None] / scale) + zp, self.qmin, self.qmax) - zp) * scale
        i = torch.argmin(((q - centers[None]) ** 2 * self.hist[None]).sum(1))
        return lo[i, 0], hi[i, 0]


class PerTensorHistogramObserver(PerTensorMSEObserver):
    """Quark's histogram observer: the range minimising the L2 quantization error of the histogram
    (searched exhaustively over candidate ranges, see :class:`PerTensorMSEObserver`)."""
