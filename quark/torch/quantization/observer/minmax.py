"""MinMax observers: running minimum and maximum, per tensor or per channel."""

from __future__ import annotations

import torch

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer.base import ObserverBase, last_axis_min_max


class PerTensorMinMaxObserver(ObserverBase):
    """Running minimum and maximum over all calibration batches."""

    statistic = "minmax"

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("min_val", torch.tensor(float("inf")), persistent=False)
        self.register_buffer("max_val", torch.tensor(float("-inf")), persistent=False)

    def _observe(self, x: torch.Tensor) -> None:
        lo, hi = last_axis_min_max(self._view(x))
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
