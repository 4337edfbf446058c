"""Calibration observers, usable as ``QuantizationSpec.observer_cls``.

Each observer accumulates a statistic of the tensors it sees during calibration and reports the
range to quantize: ``calculate_range() -> (lo, hi)``, with ``lo <= 0 <= hi`` so that zero is
always representable. Weights use the same statistic, computed on the weight itself by Brevitas
at every forward (so it tracks the weight during QAT); observers are what static activations use.

Why our own accumulators: Brevitas' runtime-statistics scaling averages per-batch statistics,
which is not the MinMax of the calibration set that the Quark config asks for.

=============================== ======================================================
observer                        range over all calibration data
=============================== ======================================================
PerTensorMinMaxObserver         min / max
PerChannelMinMaxObserver        min / max per index of ``ch_axis``
PerTensorPercentileObserver     the ``percentile`` of |x| (symmetric) or the central
                                ``percentile`` interval of x (asymmetric), from a histogram
PerTensorMSEObserver            the clipping range minimising the quantization MSE of the
                                histogram on the integer grid of the spec
PerTensorHistogramObserver      Quark's name for the same objective (torch's
                                HistogramObserver minimises the L2 quantization error
                                of a histogram by a greedy search; this one searches
                                exhaustively, as PerTensorMSEObserver)
=============================== ======================================================

Quark's observers of formats whose scales never come from calibration select a behaviour and
observe nothing: ``PlaceholderObserver`` (bfloat16 / float16 casts), ``PerGroupMinMaxObserver``
(per-group min / max, computed on the weight by its quantizer), ``PerBlockMXObserver`` (OCP MX
blocks) and ``PerBlockBFPObserver`` (MX6 / MX9 blocks); the block formats also take the MinMax
observers of their granularity (``PerGroupMinMaxObserver``, ``PerChannelMinMaxObserver``).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch
from torch import nn

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.tqt_init import jeffreys_threshold, three_sd

__all__ = [
    "OBSERVERS",
    "ObserverBase",
    "PerBlockBFPObserver",
    "PerBlockMXObserver",
    "PerChannelMinMaxObserver",
    "PerGroupMinMaxObserver",
    "PerTensorHistogramObserver",
    "PerTensorMSEObserver",
    "PerTensorMinMaxObserver",
    "PerTensorPercentileObserver",
    "PlaceholderObserver",
    "TQT3SDObserver",
    "TQTJeffreysObserver",
    "register_observer",
]


class ObserverBase(nn.Module):
    """Base of all observers.

    Args:
        symmetric: whether the quantizer is symmetric (the statistic is then taken on |x|).
        qmin, qmax: integer grid of the quantizer (used by the MSE search).
        ch_axis: channel axis of per-channel observers.
    """

    qscheme: ClassVar[QSchemeType] = QSchemeType.per_tensor
    statistic: ClassVar[str] = ""

    def __init__(self, symmetric: bool = True, qmin: int = -128, qmax: int = 127, ch_axis: int | None = None):
        super().__init__()
        self.symmetric = symmetric
        self.qmin, self.qmax = qmin, qmax
        self.ch_axis = ch_axis
        self.num_batches = 0

    @torch.no_grad()
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if x.numel():
            self._observe(x.detach().float())
            self.num_batches += 1
        return x

    def _observe(self, x: torch.Tensor) -> None:
        raise NotImplementedError

    def sync(self) -> None:
        """Merge the statistics of all processes (``torch.distributed``), so every rank gets the same range."""
        if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
            return
        count = torch.tensor(float(self.num_batches), device=self._device())
        torch.distributed.all_reduce(count)
        self.num_batches = int(count)
        if self.num_batches:
            self._sync()

    def _device(self) -> torch.device:
        return next(iter(self.buffers()), torch.zeros(0)).device

    def _sync(self) -> None:
        raise NotImplementedError

    def calculate_range(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Range ``(lo, hi)`` to quantize, with ``lo <= 0 <= hi``."""
        if not self.num_batches:
            raise RuntimeError(f"{type(self).__name__} saw no data; run calibration batches through the model first")
        lo, hi = self._range()
        lo, hi = torch.clamp(lo, max=0.0), torch.clamp(hi, min=0.0)
        if self.symmetric:
            amax = torch.maximum(-lo, hi)
            lo, hi = -amax, amax
        return lo, hi

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        raise NotImplementedError


class PerTensorMinMaxObserver(ObserverBase):
    """Running minimum and maximum over all calibration batches."""

    statistic = "minmax"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("min_val", torch.tensor(float("inf")), persistent=False)
        self.register_buffer("max_val", torch.tensor(float("-inf")), persistent=False)

    def _observe(self, x: torch.Tensor) -> None:
        lo, hi = torch.aminmax(self._view(x), dim=-1)
        if self.min_val.shape != lo.shape:  # first batch of a per-channel observer
            self.min_val, self.max_val = lo, hi
        else:
            torch.minimum(self.min_val, lo, out=self.min_val)
            torch.maximum(self.max_val, hi, out=self.max_val)

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1)

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        return self.min_val.clone(), self.max_val.clone()

    def _sync(self) -> None:
        dist = torch.distributed
        dist.all_reduce(self.min_val, op=dist.ReduceOp.MIN)
        dist.all_reduce(self.max_val, op=dist.ReduceOp.MAX)


class PerChannelMinMaxObserver(PerTensorMinMaxObserver):
    """Running minimum and maximum per index of ``ch_axis``."""

    qscheme = QSchemeType.per_channel

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        if self.ch_axis is None:
            raise ValueError("PerChannelMinMaxObserver needs ch_axis")
        return x.movedim(self.ch_axis, 0).reshape(x.shape[self.ch_axis], -1)


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


class TQT3SDObserver(ObserverBase):
    """TQT ``_3SD`` threshold: |mean| + 3 std of all calibration data (running moments in float64)."""

    statistic = "3sd"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("moments", torch.zeros(3, dtype=torch.float64), persistent=False)

    def _observe(self, x: torch.Tensor) -> None:
        # the work of a float64 mean and std, less: one float64 copy, a sum and a dot (no x * x copy)
        x = x.double().flatten()
        self.moments += torch.stack([x.new_tensor(float(x.numel())), x.sum(), torch.dot(x, x)])

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


#: name -> class, for serialisation and for the translation tables.
OBSERVERS: dict[str, type[ObserverBase]] = {
    cls.__name__: cls
    for cls in (
        PerTensorMinMaxObserver,
        PerChannelMinMaxObserver,
        PerGroupMinMaxObserver,
        PerTensorPercentileObserver,
        PerTensorMSEObserver,
        PerTensorHistogramObserver,
        PlaceholderObserver,
        PerBlockMXObserver,
        PerBlockBFPObserver,
    )
}


def register_observer(cls: type[ObserverBase]) -> type[ObserverBase]:
    """Make a custom observer (e.g. a percentile subclass) usable by name in serialised configs."""
    if not (isinstance(cls, type) and issubclass(cls, ObserverBase)):
        raise TypeError(f"register_observer: expected a subclass of ObserverBase, got {cls!r}")
    OBSERVERS[cls.__name__] = cls
    return cls
