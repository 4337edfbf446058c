"""Independent plain-torch reference of batch norm folded into the layer before it during QAT
(Jacob et al. 2018, section 3.2; Krishnamoorthi 2018, section 3.2; PyTorch's ConvBn2d).

Imports nothing from ``quark`` nor ``brevitas``. ``layer(x, w, b)`` is the layer's function
(``F.conv2d`` with its padding, ``F.linear``), ``quant(w)`` the weight quantizer; channels on axis 1
of the output, axis 0 of the weight.

    s         gamma / sqrt(running_var + eps)
    float     bn(layer(x, w, b)) = gamma (layer(x, w, b) - running_mean) / sqrt(running_var + eps) + beta
    eval      layer(x, quant(w s), beta + (b - running_mean) s)                  (merged batch norm)
    train     z = layer(x, quant(w s), 0) / s + b
              y = gamma (z - mean_B z) / sqrt(var_B z + eps) + beta             (biased batch variance)
              running_mean <- (1 - m) running_mean + m mean_B z
              running_var  <- (1 - m) running_var + m var_B z n / (n - 1)       (unbiased)
"""

from __future__ import annotations

from collections.abc import Callable

import torch

Layer = Callable[[torch.Tensor, torch.Tensor, torch.Tensor | None], torch.Tensor]


def _channels(v: torch.Tensor, dims: int, axis: int) -> torch.Tensor:
    shape = [1] * dims
    shape[axis] = -1
    return v.reshape(shape)


def factor(gamma: torch.Tensor, running_var: torch.Tensor, eps: float) -> torch.Tensor:
    """s = gamma / sqrt(running_var + eps)."""
    return gamma / torch.sqrt(running_var + eps)


def conv_then_batch_norm(layer: Layer, x, w, b, gamma, beta, running_mean, running_var, eps: float) -> torch.Tensor:
    """The float layer followed by batch norm in eval mode."""
    z = layer(x, w, b)
    return _channels(gamma, z.dim(), 1) * (z - _channels(running_mean, z.dim(), 1)) / torch.sqrt(
        _channels(running_var, z.dim(), 1) + eps
    ) + _channels(beta, z.dim(), 1)


def folded_eval(layer: Layer, x, w, b, gamma, beta, running_mean, running_var, eps: float, quant) -> torch.Tensor:
    """Merged batch norm: the quantized folded weight and the folded bias."""
    s = factor(gamma, running_var, eps)
    bias = beta + ((b if b is not None else torch.zeros_like(beta)) - running_mean) * s
    return layer(x, quant(w * _channels(s, w.dim(), 0)), bias)


def folded_train(
    layer: Layer, x, w, b, gamma, beta, running_mean, running_var, eps: float, momentum: float, quant
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(output, new running mean, new running var) of one training step with batch statistics."""
    s = factor(gamma, running_var, eps)
    z = layer(x, quant(w * _channels(s, w.dim(), 0)), None)
    z = z / _channels(s, z.dim(), 1)
    if b is not None:
        z = z + _channels(b, z.dim(), 1)
    axes = [d for d in range(z.dim()) if d != 1]
    n = z.numel() // z.shape[1]
    mean = z.mean(dim=axes)
    var = ((z - _channels(mean, z.dim(), 1)) ** 2).mean(dim=axes)
    y = _channels(gamma, z.dim(), 1) * (z - _channels(mean, z.dim(), 1)) / torch.sqrt(
        _channels(var, z.dim(), 1) + eps
    ) + _channels(beta, z.dim(), 1)
    new_mean = (1 - momentum) * running_mean + momentum * mean
    new_var = (1 - momentum) * running_var + momentum * var * n / (n - 1)
    return y, new_mean, new_var
