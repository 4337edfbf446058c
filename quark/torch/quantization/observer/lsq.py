"""AMD Quark's ``LSQObserver``: learned step size quantization (Esser et al., arXiv 1902.08153).

The scale s is a trained parameter, initialised at 2 * mean|x| / sqrt(qmax) (per tensor, or per
channel of ``ch_axis`` for weights) and trained with its gradient scaled by
1 / sqrt(numel(x) * qmax), as Quark does. Quark initialises an activation's s from the first batch it
sees in training mode; here calibration initialises it from the mean |x| of all calibration
batches (a weight's from the weight, when the model is quantized). The zero point stays 0, as in
Quark: ``symmetric=False`` is refused (use an unsigned dtype for non-negative tensors).
"""

from __future__ import annotations

import math
from typing import ClassVar

import torch

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer.base import ObserverBase


def lsq_initial_scale(x: torch.Tensor, qmax: int, ch_axis: int | None = None) -> torch.Tensor:
    """2 * mean|x| / sqrt(qmax), per index of ``ch_axis`` when given (LSQ's initialisation)."""
    magnitude = x.detach().abs().double()
    if ch_axis is not None:
        magnitude = magnitude.movedim(ch_axis, 0).reshape(x.shape[ch_axis], -1)
        mean = magnitude.mean(dim=1)
    else:
        mean = magnitude.mean()
    return (2 * mean / math.sqrt(qmax)).float()


class LSQObserver(ObserverBase):
    """LSQ's initial scale from calibration: 2 * mean|x| / sqrt(qmax) over all calibration data; the
    reported range is the one whose scale on the spec's grid is exactly that s."""

    statistic: ClassVar[str] = "lsq"
    also_observes: ClassVar[tuple[QSchemeType, ...]] = (QSchemeType.per_channel,)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("sums", torch.zeros(2, dtype=torch.float64), persistent=False)

    def _observe(self, x: torch.Tensor) -> None:
        self.sums += torch.stack([x.double().abs().sum(), x.new_tensor(float(x.numel()), dtype=torch.float64)])

    def _sync(self) -> None:
        torch.distributed.all_reduce(self.sums)

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        total, count = self.sums
        scale = (2 * total / count / math.sqrt(self.qmax)).float().clamp(min=torch.finfo(torch.float32).tiny)
        scale = scale.double()  # the range in float64: range / levels gives back exactly this float32 scale
        if self.symmetric:  # signed grid: scale = (hi - lo) / (qmax - qmin)
            half = scale * ((self.qmax - self.qmin) / 2)
            return -half, half
        return torch.zeros_like(scale), scale * (self.qmax - self.qmin)
