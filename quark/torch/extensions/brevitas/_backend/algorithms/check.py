"""Does an algorithm help? The output error of a quantized model against the float model on the
calibration data, for ``quantize_model``'s check of its algorithms against round-to-nearest."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.data import calibration_data
from quark.torch.extensions.brevitas._backend.mixing import first_output


@torch.no_grad()
def output_error(reference: nn.Module, model: nn.Module, data: Any, desc: str) -> float:
    """sum (model - reference)^2 / sum reference^2 over the first output of every batch of ``data``."""
    noise = signal = 0.0
    modes = [(m, m.training) for m in (*reference.modules(), *model.modules())]  # the user's model keeps its modes
    reference.eval()
    model.eval()
    try:
        for batch in calibration_data(data).passes(desc):
            expected = first_output(reference, batch).double()
            produced = first_output(model, batch).double()
            noise += float(((produced - expected) ** 2).sum())
            signal += float((expected**2).sum())
    finally:
        for module, training in modes:
            module.training = training
    return noise / signal if signal else noise
