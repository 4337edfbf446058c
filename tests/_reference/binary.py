"""Independent plain-torch reference of binary (bipolar) and ternary quantization.

Imports nothing from ``quark`` nor ``brevitas``: the tests compare the package against these
formulas, written from the papers.

    bipolar     q(x) = s if x >= 0 else -s                  (BinaryNet, Courbariaux et al. 2016)
    ternary     q(x) = s * clamp(R(x / s), -1, 1)           R: round to nearest (ties as the spec says)
                     = 0 where |x| < s / 2, else s sign(x)  (thresholds at +-s/2)
    scale       s = E|x| (bipolar: XNOR-Net's L2-optimal scale, Rastegari et al. 2016, eq. 4);
                s = 1.4 E|x| (ternary: TWN's threshold 0.7 E|w|, Li & Liu 2016, at s / 2)
    gradients   (straight-through estimators)
                bipolar weight       dq/dx = 1                (BinaryConnect)
                bipolar activation   dq/dx = 1 where |x| <= s (the gradient of hardtanh), else 0
                ternary activation   dq/dx = 1 where |R(x/s)| <= 1, else 0
"""

from __future__ import annotations

import torch

TWN_THRESHOLD = 0.7


def mean_abs(x: torch.Tensor, dim: int | None = None, accumulate: torch.dtype = torch.float64) -> torch.Tensor:
    """E|x| over the tensor, or along ``dim`` (kept for broadcasting), summed in ``accumulate``
    (float64: a calibration over batches; float32: a weight's statistic, as computed at every
    forward), returned float32."""
    x = x.to(accumulate).abs()
    mean = x.mean() if dim is None else x.mean(dim=dim, keepdim=True)
    return mean.float()


def bipolar(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """sign(x) x s with sign(0) = +1."""
    return torch.where(x >= 0, 1.0, -1.0).to(x.dtype) * scale


def ternary(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """s x clamp(round_half_even(x / s), -1, 1)."""
    return torch.clamp(torch.round(x / scale), -1, 1) * scale


def ternary_scale(x: torch.Tensor, dim: int | None = None, accumulate: torch.dtype = torch.float64) -> torch.Tensor:
    """The ternary scale on E|x|: the rounding threshold s / 2 at 0.7 E|x|."""
    return mean_abs(x, dim, accumulate) / (0.5 / TWN_THRESHOLD)


def bipolar_act_grad(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """d q / d x of a bipolar activation: hardtanh's gradient on [-s, s]."""
    return (x.abs() <= scale).to(x.dtype)


def ternary_act_grad(x: torch.Tensor, scale: torch.Tensor | float) -> torch.Tensor:
    """d q / d x of a ternary activation: 1 where round(x / s) lies on the grid."""
    return (torch.round(x / scale).abs() <= 1).to(x.dtype)
