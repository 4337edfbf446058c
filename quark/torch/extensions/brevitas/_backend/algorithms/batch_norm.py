"""``MergeBatchNorm``: Brevitas' ``MergeBatchNorm`` on the traced float model, only where there is
batch norm to fold.

Models that ``torch.fx`` cannot trace as a whole (transformers' models: control flow on their
arguments) are folded part by part: the largest submodules that trace, each replaced by its
folded graph. A model without batch norm is returned as it is, untraced.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

from brevitas.fx import symbolic_trace
from brevitas.graph.fixed_point import MergeBatchNorm as BrevitasMergeBatchNorm
from torch import nn

from quark.torch.quantization.config.algorithms import MergeBatchNorm

logger = logging.getLogger(__name__)

_BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _has_batch_norm(module: nn.Module) -> bool:
    return any(isinstance(m, _BATCH_NORMS) for m in module.modules())


def _folded(module: nn.Module) -> nn.Module:
    """``module`` with its batch norms folded: traced whole if it traces, else child by child."""
    if not _has_batch_norm(module) or isinstance(module, _BATCH_NORMS):
        return module
    try:  # Brevitas' graph transforms take graphs of its own torch.fx backport
        with warnings.catch_warnings():  # the backport's own use of deprecated pytree names
            warnings.simplefilter("ignore", FutureWarning)
            traced = symbolic_trace(module)
    except Exception:  # noqa: BLE001  torch.fx raises many types; the children are tried instead
        for name, child in module.named_children():
            setattr(module, name, _folded(child))
        return module
    return BrevitasMergeBatchNorm().apply(traced)


def merge_batch_norm(config: MergeBatchNorm, model: nn.Module, batches: Any = None) -> nn.Module:
    training = model.training
    merged = _folded(model.eval()).train(training)
    kept = [f"{name} ({type(m).__name__})" for name, m in merged.named_modules() if isinstance(m, _BATCH_NORMS)]
    if kept:
        logger.warning(
            "MergeBatchNorm: %d batch norm(s) follow no Linear / Conv whose output they alone take, and stay "
            "float: %s",
            len(kept),
            ", ".join(kept),
        )
    return merged
