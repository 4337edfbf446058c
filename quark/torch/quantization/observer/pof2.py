"""AMD Quark's power-of-two observers (``PerTensorPowOf2MinMaxObserver`` and friends).

Quark computes, for every calibration batch, the scale of that batch's range rounded to a power of
two (and, for the ``MinMSE`` variants, the best of the five powers of two around it by the squared
error of that batch), and keeps the scale that most batches chose (the first one chosen among
equals). Their scales are powers of two whatever ``scale_type`` says.

Here the same per-batch choice and vote, on the integer grid of the spec: a batch with range
[lo, hi] (lo <= 0 <= hi; symmetric: +-max|x|) has scale s = (hi - lo) / (qmax - qmin) rounded to
2^round(log2 s), the scale the quantizers of this package compute from that range. The chosen
grid's own range, [(qmin - z) s, (qmax - z) s], is what :meth:`calculate_range` reports, so the
quantizer derives exactly the voted scale; the state is a count per grid chosen, no tensor per batch.

Weights compute their statistic with Brevitas at every forward: ``PowOf2MinMax`` on a weight is its
min/max with a power-of-two scale (one tensor: the vote is that tensor's scale, as in Quark); the
``PerTensorPowOf2MinMSE`` on a weight (or a bias) is its search on that tensor at every forward
(:func:`pof2_mse_scale`, which the weight quantizer's statistic calls); per channel it is refused.
"""

from __future__ import annotations

import math
from collections import Counter
from typing import ClassVar

import torch

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer.base import ObserverBase, last_axis_min_max
from quark.torch.quantization.observer.minmax import PerChannelMinMaxObserver

#: power-of-two scales stay in [2^-127, 2^127], as Quark's scale2pos clamps them
SCALE_EXPONENTS = (-127, 127)
#: the MinMSE search: exponents k - 2 .. k + 2 around the MinMax one
MSE_SHIFTS = (-2, -1, 0, 1, 2)

_NO_PER_CHANNEL_MSE = (
    "Quark's MinMSE search over five powers of two runs per tensor here (PerTensorPowOf2MinMSEObserver); per "
    "channel, use PerChannelPowOf2MinMaxObserver, or PerTensorMSEObserver with scale_type=ScaleType.pof2"
)


def pof2(scale: torch.Tensor) -> torch.Tensor:
    """2^round(log2 s) in float64, the exponent clamped to :data:`SCALE_EXPONENTS` (s = 0 takes the smallest)."""
    lo, hi = SCALE_EXPONENTS
    exponent = torch.round(torch.log2(scale.double().clamp(min=2.0**lo))).clamp(lo, hi)
    return torch.exp2(exponent)


class _PowerOfTwoVote(ObserverBase):
    """Per-batch power-of-two scale and zero point, the most common pair kept (see the module)."""

    power_of_two: ClassVar[bool] = True
    statistic: ClassVar[str] = "minmax"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.votes: Counter = Counter()  # (scale, zero point) grid -> batches that chose it
        self.shape = torch.Size()  # of a range: one value per tensor, or per channel

    def _observe(self, x: torch.Tensor) -> None:
        lo, hi = (v.double() for v in self._batch_range(x))  # float64: hi - lo of float32 extremes stays finite
        lo, hi = torch.clamp(lo, max=0.0), torch.clamp(hi, min=0.0)
        if self.symmetric:
            amax = torch.maximum(-lo, hi)
            lo, hi = -amax, amax
        lo, hi = self._choose(x, lo, hi)
        scale = pof2((hi - lo) / (self.qmax - self.qmin))
        key = (tuple(scale.flatten().tolist()), tuple(self._zero_point(lo, scale).flatten().tolist()))
        self.votes[key] += 1
        self.shape = lo.shape

    def _zero_point(self, lo: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
        """0 on a symmetric grid; else the integer that lo maps to qmin (rounded half to even)."""
        return torch.zeros_like(scale) if self.symmetric else torch.round(self.qmin - lo / scale)

    def _batch_range(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        view = self._view(x)
        return last_axis_min_max(view)

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        return x.reshape(-1)

    def _choose(self, x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The batch's range (MinMax); the MSE variants replace it by the best power of two's."""
        return lo, hi

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        (scales, zero_points), _ = self.votes.most_common(1)[0]  # Counter keeps first-seen order among equals
        scale = torch.tensor(scales, dtype=torch.float64).reshape(self.shape)
        zero_point = torch.tensor(zero_points, dtype=torch.float64).reshape(self.shape)
        # the grid's own range: the quantizer derives exactly this scale (and zero point) from it; float32
        # keeps it finite (a grid of 2^122 steps reaches past float32's largest value)
        largest = torch.finfo(torch.float32).max
        lo, hi = ((self.qmin - zero_point) * scale, (self.qmax - zero_point) * scale)
        return lo.clamp(-largest, largest).float(), hi.clamp(-largest, largest).float()

    def _sync(self) -> None:
        raise RuntimeError(
            f"{type(self).__name__} votes over the batches of one process; with torch.distributed, calibrate on "
            "one rank (or use PerTensorMinMaxObserver with scale_type=ScaleType.pof2, which merges across ranks)"
        )


class PerTensorPowOf2MinMaxObserver(_PowerOfTwoVote):
    """Quark's per-tensor power-of-two MinMax observer: each batch's min/max scale as a power of two,
    the most common one kept."""


class PerChannelPowOf2MinMaxObserver(_PowerOfTwoVote):
    """Quark's per-channel power-of-two MinMax observer (weights: per-channel min/max, power-of-two
    scales)."""

    qscheme: ClassVar[QSchemeType] = QSchemeType.per_channel

    def _view(self, x: torch.Tensor) -> torch.Tensor:
        return PerChannelMinMaxObserver._view(self, x)


def pof2_mse_scale(x: torch.Tensor, start: torch.Tensor, zero_point: torch.Tensor, qmin: int, qmax: int) -> torch.Tensor:
    """Quark's MinMSE power of two: of the five powers of two around ``start`` (exponent -2 .. +2), the one
    whose grid (round half to even, clamped to [qmin, qmax], the zero point kept) quantizes ``x`` with the
    least squared error, the first among equals (float64)."""
    best, best_error, x = start, math.inf, x.double()
    for shift in MSE_SHIFTS:
        scale = (start * 2.0**shift).clamp(2.0 ** SCALE_EXPONENTS[0], 2.0 ** SCALE_EXPONENTS[1])
        q = torch.clamp(torch.round(x / scale) + zero_point, qmin, qmax)
        error = float(((q - zero_point) * scale - x).pow(2).sum())
        if error < best_error:
            best, best_error = scale, error
    return best


class _MinMSE(_PowerOfTwoVote):
    """The five powers of two around the MinMax one (exponent -2 .. +2), the zero point kept; the
    one with the least squared error on the batch (round half to even, clamped to the grid) wins,
    the first among equals (:func:`pof2_mse_scale`)."""

    statistic: ClassVar[str] = "pof2_mse"

    def _choose(self, x: torch.Tensor, lo: torch.Tensor, hi: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        start = pof2((hi - lo) / (self.qmax - self.qmin))
        zero_point = self._zero_point(lo, start)
        best = pof2_mse_scale(x, start, zero_point, self.qmin, self.qmax)
        if self.symmetric:  # the range whose scale (hi - lo) / (qmax - qmin) is exactly ``best``
            half = best * ((self.qmax - self.qmin) / 2)
            return -half, half
        return (self.qmin - zero_point) * best, (self.qmax - zero_point) * best


class PerTensorPowOf2MinMSEObserver(_MinMSE):
    """Quark's per-tensor power-of-two MinMSE observer (activations; weights and biases: the same search
    on the tensor, at every forward)."""


class PerChannelPowOf2MinMSEObserver(_MinMSE):
    """Quark's per-channel power-of-two MinMSE observer: refused (per-channel activations are not
    quantized here, and the weights' search runs per tensor)."""

    qscheme: ClassVar[QSchemeType] = QSchemeType.per_channel
    refused: ClassVar[str | None] = _NO_PER_CHANNEL_MSE + "; activations are quantized per_tensor"


__all__ = [
    "PerChannelPowOf2MinMSEObserver",
    "PerChannelPowOf2MinMaxObserver",
    "PerTensorPowOf2MinMSEObserver",
    "PerTensorPowOf2MinMaxObserver",
]
