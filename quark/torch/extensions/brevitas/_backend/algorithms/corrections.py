"""The Brevitas extension's ``BiasCorrection`` and ``CalibrateBatchNorm``: Brevitas'
``bias_correction_mode`` and ``norm_correction_mode`` over the calibration data."""

from __future__ import annotations

from typing import Any

import torch
from brevitas.graph.calibrate import bias_correction_mode, norm_correction_mode
from torch import nn

from quark.torch.extensions.brevitas._backend.data import calibration_data, run_batch
from quark.torch.quantization.config.algorithms import (
    BiasCorrection,
    CalibrateBatchNorm,
)


def _one_pass(model: nn.Module, data: Any, mode: Any, desc: str) -> nn.Module:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise RuntimeError(
            f"{desc} runs in a single process: each rank would correct differently (apply it before DDP)"
        )
    was_training = model.training
    model.eval()
    with torch.no_grad(), mode(model):
        for batch in calibration_data(data).passes(desc):
            run_batch(model, batch)
    return model.train(was_training)


def bias_correction(config: BiasCorrection, model: nn.Module, data: Any) -> nn.Module:
    return _one_pass(model, data, bias_correction_mode, "BiasCorrection")


def calibrate_batch_norm(config: CalibrateBatchNorm, model: nn.Module, data: Any) -> nn.Module:
    return _one_pass(model, data, norm_correction_mode, "CalibrateBatchNorm")
