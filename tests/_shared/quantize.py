"""Quantizing in tests (Brevitas): ``quantize()``, a model's state before and after, a few training steps.

``quantize(config, model, data)`` is ``ModelQuantizer(config).quantize_model(model, data)`` without
the progress bar and without the check of the config's algorithms against round-to-nearest (its own
tests: tests/backend/algorithms/test_algorithm_check.py; it quantizes three more times);
``quantize_with`` returns the quantizer too (its plans, summary and rewriter).
"""

from __future__ import annotations

import math

import torch
from torch import nn

from _shared.configs import W8A8
from _shared.models import batches, mlp, unit_batches
from quark.torch.extensions.brevitas.api import ModelQuantizer


def quantize(config, model: nn.Module, data=None, **options) -> nn.Module:
    """``model`` quantized with ``config``, calibrated on ``data`` (``options``: quantize_model's)."""
    return ModelQuantizer(config).quantize_model(model, data, **{"progress": False, "check_algorithms": False, **options})


def quantize_with(config, model: nn.Module, data=None, **options) -> tuple[ModelQuantizer, nn.Module]:
    """The quantizer and the quantized model."""
    quantizer = ModelQuantizer(config)
    return quantizer, quantizer.quantize_model(model, data, **{"progress": False, "check_algorithms": False, **options})


def without_target(config):
    """A copy of ``config`` with no ``target_device`` at any level: quantized so, a model meets the
    target's rules only when exported with ``target_device=`` (``quantize_model`` checks a config's
    own target before calibrating)."""
    import copy

    config = copy.deepcopy(config)
    levels = [config.global_quant_config, *config.layer_quant_config.values(), *config.layer_type_quant_config.values()]
    for level in levels:
        level.target_device = None
    return config


def quantized_mlp(config=W8A8, seed: int = 0) -> nn.Module:
    """``mlp()`` (seeded) quantized with ``config`` on ``batches(seed=seed)``."""
    torch.manual_seed(seed)
    return quantize(config, mlp(), batches(seed=seed))


def quantized_on_unit_batches(config, model: nn.Module | None = None) -> nn.Module:
    """``model`` (default: ``mlp((8, 8, 3))`` built after ``torch.manual_seed(0)``) quantized with ``config``
    on ``unit_batches()``, in eval mode."""
    torch.manual_seed(0)
    return quantize(config, (model or mlp((8, 8, 3))).eval(), unit_batches())


def snapshot(model: nn.Module) -> dict:
    """What an error or an export must leave as it was: parameters and buffers, module tree, modes,
    attributes, which parameters train, export modes."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "modules": [(name, type(m)) for name, m in model.named_modules()],
        "training": [m.training for m in model.modules()],
        "attributes": sorted(vars(model)),
        "requires_grad": {k: p.requires_grad for k, p in model.named_parameters()},
        "export_mode": [getattr(m, "export_mode", None) for m in model.modules()],
    }


def assert_unchanged(before: dict, model: nn.Module) -> None:
    """``model`` is as ``snapshot`` found it, bit for bit."""
    after = snapshot(model)
    for key in ("modules", "training", "attributes", "requires_grad", "export_mode"):
        assert after[key] == before[key], key
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), key


def qat_steps(model: nn.Module, steps: int = 3) -> list[tuple[float, list[torch.Tensor]]]:
    """SGD steps of ``qat_model()`` on fixed random data: (loss, weight gradients of the quantized
    layers) per step."""
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
