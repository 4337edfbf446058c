"""Does an algorithm help? The output error of a quantized model against the float model on the
calibration data, and the calibration data split in two (fitted on the first part, measured on the
rest), for ``quantize_model``'s check of its algorithms against round-to-nearest."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.data import batches, calibration_data
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


def halves(data: Any, num_batches: int | None) -> tuple[list[Any], list[Any]] | None:
    """The calibration batches (at most ``num_batches``) as (the first half, rounded up; the rest),
    read once and held in memory so that both parts are the same batches on every pass (a shuffling
    DataLoader would mix them); None with fewer than two batches."""
    read = list(batches(data, num_batches, progress=False))
    if len(read) < 2:
        return None
    half = (len(read) + 1) // 2
    return read[:half], read[half:]
