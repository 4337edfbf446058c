"""``HadamardRotation``: Brevitas' ``LayerwiseActivationRotation`` on the float model, on the chosen
Linear layers (Brevitas rotates every Linear and skips, with an info log only, the widths it has no
Hadamard matrix for: both are decided here, and named)."""

from __future__ import annotations

import fnmatch
import logging
from typing import Any

import torch
from brevitas.graph.equalize import LayerwiseActivationRotation
from brevitas.graph.hadamard import get_hadK
from torch import nn

from quark.torch.quantization.config.algorithms import HadamardRotation

logger = logging.getLogger(__name__)


def has_hadamard(width: int) -> bool:
    """Whether Brevitas has a Hadamard matrix of this size."""
    try:
        get_hadK(width)
    except AssertionError:
        return False
    return True


def chosen_layers(config: HadamardRotation, model: nn.Module) -> list[str]:
    """The Linear layers to rotate; unmatched patterns and unsupported widths raise, the
    unsupported layers of the default scope are named in a warning."""
    linears = {name: m for name, m in model.named_modules() if type(m) is nn.Linear}
    if config.layers is None:
        chosen = list(linears)
    else:
        unmatched = [p for p in config.layers if not any(fnmatch.fnmatchcase(n, p) for n in linears)]
        if unmatched:
            raise ValueError(
                f"HadamardRotation.layers {unmatched} match no torch.nn.Linear of the model; Linear layers: "
                f"{list(linears)[:10]}"
            )
        chosen = [n for n in linears if any(fnmatch.fnmatchcase(n, p) for p in config.layers)]
    unsupported = {n: linears[n].in_features for n in chosen if not has_hadamard(linears[n].in_features)}
    if unsupported and config.layers is not None:
        raise ValueError(
            f"HadamardRotation.layers: no Hadamard matrix for the input width of {unsupported} (allowed: a power of "
            "two times 1, 12, 20, 28, 36, 40, 52, 60, 108, 140, 152, 156 or 172); leave these layers out"
        )
    if unsupported:
        logger.warning(
            "HadamardRotation: no Hadamard matrix for the input width of %s; left unrotated", unsupported
        )
    return [n for n in chosen if n not in unsupported]


def hadamard_rotation(config: HadamardRotation, model: nn.Module, data: Any = None) -> nn.Module:
    chosen = set(chosen_layers(config, model))
    others = [n for n, m in model.named_modules() if isinstance(m, nn.Linear) and n not in chosen]
    with torch.no_grad():
        model = LayerwiseActivationRotation(blacklist_layer=others).apply(model)
    logger.info("HadamardRotation: %d Linear layers rotated", len(chosen))
    return model
