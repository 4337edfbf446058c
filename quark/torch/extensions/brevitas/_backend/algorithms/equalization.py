"""The Brevitas extension's ``ActivationEqualization``: Brevitas' ``activation_equalization_mode``
on the float model, statistics from the calibration data (as Quark's extension does)."""

from __future__ import annotations

from typing import Any

import torch
from brevitas.fx import GraphModule
from brevitas.graph.equalize import activation_equalization_mode
from torch import fx, nn

from quark.torch.extensions.brevitas._backend.data import calibration_data, run_batch
from quark.torch.quantization.config.algorithms import ActivationEqualization


def activation_equalization(config: ActivationEqualization, model: nn.Module, data: Any) -> nn.Module:
    if not config.is_layerwise and not isinstance(model, (GraphModule, fx.GraphModule)):
        raise ValueError(
            "ActivationEqualization(is_layerwise=False) folds scales through the traced graph: it needs the torch.fx "
            f"model that Preprocess() makes (put Preprocess() before it), got {type(model).__name__}"
        )
    was_training = model.training
    model.eval()
    with (
        torch.no_grad(),
        activation_equalization_mode(
            model, alpha=config.alpha, layerwise=config.is_layerwise, add_mul_node=config.is_layerwise
        ),
    ):
        for batch in calibration_data(data).passes("ActivationEqualization"):
            run_batch(model, batch)
    return model.train(was_training)
