"""Layers that compute what a supported layer computes, converted to it before quantization.

One table, shared by the rewriters: class (by module and name, so the owning library need not be
installed) -> function returning the equivalent supported layer.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def _conv1d_to_linear(module: nn.Module) -> nn.Linear:
    """transformers' ``Conv1D`` (GPT-2): ``x @ W + b`` with W stored [in, out]; a Linear stores W^T."""
    weight = module.weight
    linear = nn.Linear(
        weight.shape[0],
        weight.shape[1],
        bias=module.bias is not None,
        device=weight.device,
        dtype=weight.dtype,
    )
    with torch.no_grad():
        linear.weight.copy_(weight.T)
        if module.bias is not None:
            linear.bias.copy_(module.bias)
    linear.train(module.training)
    return linear


#: (module path of the class, class name) -> conversion
CONVERSIONS: dict[tuple[str, str], Callable[[nn.Module], nn.Module]] = {
    ("transformers.pytorch_utils", "Conv1D"): _conv1d_to_linear,
}


def conversion_of(module: nn.Module) -> Callable[[nn.Module], nn.Module] | None:
    cls = type(module)
    return CONVERSIONS.get((cls.__module__, cls.__name__))


def convert(model: nn.Module) -> nn.Module:
    """Replace every convertible layer of ``model`` (in place) by its equivalent; returns ``model``."""
    found = [
        (name, convert_fn) for name, module in model.named_modules() if (convert_fn := conversion_of(module))
    ]
    for name, convert_fn in found:
        model.set_submodule(name, convert_fn(model.get_submodule(name)))
    return model
