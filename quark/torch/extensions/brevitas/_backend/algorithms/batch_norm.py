"""``MergeBatchNorm``: Brevitas' ``MergeBatchNorm`` on the traced float model, only where there is
batch norm to fold; a model that does not trace whole is folded part by part (see :mod:`.parts`)."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms.parts import (
    BATCH_NORMS,
    fold_batch_norms,
    fold_by_running,
)
from quark.torch.extensions.brevitas._backend.data import calibration_data, run_batch
from quark.torch.quantization.config.algorithms import MergeBatchNorm

logger = logging.getLogger(__name__)


def merge_batch_norm(config: MergeBatchNorm, model: nn.Module, batches: Any = None) -> nn.Module:
    training = model.training
    merged = fold_batch_norms(model.eval())
    data = calibration_data(batches)
    left = any(isinstance(m, BATCH_NORMS) for m in merged.modules())
    if left and data is not None and not isinstance(data.source, Iterator):  # a one-shot iterator is calibration's
        batch = next(iter(data.passes("MergeBatchNorm")), None)
        if batch is not None:
            merged = fold_by_running(merged, lambda m: run_batch(m, batch))
    merged = merged.train(training)
    kept = [f"{name} ({type(m).__name__})" for name, m in merged.named_modules() if isinstance(m, BATCH_NORMS)]
    if kept:
        logger.warning(
            "MergeBatchNorm: %d batch norm(s) follow no Linear / Conv whose output they alone take (or sit where "
            "torch.fx does not trace), and stay float: %s",
            len(kept),
            ", ".join(kept),
        )
    return merged
