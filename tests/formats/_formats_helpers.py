"""Shared helpers of the format tests: quantize a model with a main-API config, and a short QAT run."""

from __future__ import annotations

import math

import torch
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig


def quantize(model: nn.Module, calib=None, **roles) -> nn.Module:
    return ModelQuantizer(Config(global_quant_config=QuantizationConfig(**roles))).quantize_model(
        model, calib, progress=False
    )


def qat_model() -> nn.Module:
    """Conv2d(32 -> 32) and Linear(128 -> 32): channel counts that hold 16- and 32-element blocks."""
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(32, 32, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(32 * 4, 32))


def qat_steps(model: nn.Module, steps: int = 3) -> list[tuple[float, list[torch.Tensor]]]:
    """SGD steps on fixed random data: (loss, weight gradients of the quantized layers) per step."""
    g = torch.Generator().manual_seed(7)
    data = [torch.randn(4, 32, 2, 2, generator=g) for _ in range(2)]
    target = torch.randn(4, 32, generator=g)
    model.train()
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    layers = [m for m in model.modules() if hasattr(m, "quant_weight")]
    history = []
    for step in range(steps):
        opt.zero_grad()
        loss = ((model(data[step % 2]) - target) ** 2).mean()
        loss.backward()
        history.append((loss.item(), [layer.weight.grad.clone() for layer in layers]))
        opt.step()
    return history


def assert_trains(model: nn.Module) -> None:
    """3 QAT steps: finite losses, finite non-zero gradients on both weights, parameters moved."""
    before = [p.detach().clone() for p in model.parameters()]
    history = qat_steps(model)
    for loss, grads in history:
        assert math.isfinite(loss)
        assert len(grads) == 2
        for grad in grads:
            assert bool(torch.isfinite(grad).all()) and grad.abs().sum() > 0
    assert any(not torch.equal(a, b) for a, b in zip(before, model.parameters()))
