"""The scales of binary and ternary tensors: the mean absolute value, or exactly 1.

For the sign quantizer q(x) = sign(x) * s, the scale minimising the squared error E[(x - q(x))^2]
is s = E|x| (Rastegari et al., XNOR-Net, 2016, eq. 4), whatever the distribution; ternary
quantizers take their threshold from it too (Li & Liu, Ternary Weight Networks, 2016:
threshold 0.7 E|w|). An abs-max range, the integer grids' statistic, would put every bipolar
value at the tensor's extreme and zero almost every ternary one. Weights compute the same
statistic with Brevitas (``AbsAve``) at every forward.

:class:`UnitScaleObserver` fixes a bipolar activation's scale at 1 (levels exactly -1 and +1), as
FINN requires of bipolar activations and Brevitas' ``bnn_pynq`` networks train them (batch norm
before the sign makes the scale immaterial, except for the window of the straight-through
estimator, [-1, 1]).
"""

from __future__ import annotations

import torch

from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.observer.base import ObserverBase
from quark.torch.quantization.observer.selectors import _SelectorObserver


class MeanAbsObserver(ObserverBase):
    """Mean of |x| over all calibration data (a float64 running sum): range (-E|x|, E|x|). Per tensor
    for activations; a weight's mean |w| is taken per tensor or per output channel, as its qscheme says."""

    statistic = "mean_abs"
    also_observes = (QSchemeType.per_channel,)

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.register_buffer("sums", torch.zeros(2, dtype=torch.float64), persistent=False)  # count, sum |x|

    def _observe(self, x: torch.Tensor) -> None:
        self.sums += torch.stack([x.new_tensor(float(x.numel()), dtype=torch.float64), x.abs().sum(dtype=torch.float64)])

    def _sync(self) -> None:
        torch.distributed.all_reduce(self.sums)

    def _range(self) -> tuple[torch.Tensor, torch.Tensor]:
        count, total = self.sums
        mean = (total / count).float()
        return -mean, mean


class UnitScaleObserver(_SelectorObserver):
    """A bipolar activation with scale 1: sign(x), levels exactly -1 and +1, nothing to calibrate."""

    statistic = "unit"
    not_for_weights = "a weight's scale follows its statistic here; use MeanAbsObserver (mean |w|)"
