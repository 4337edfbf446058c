"""``HadamardRotation``: Brevitas' ``LayerwiseActivationRotation`` on the float model, on the chosen
Linear layers (Brevitas rotates every Linear and skips, with an info log only, the widths it has no
Hadamard matrix for: both are decided here, and named). AMD Quark 0.13's ``RotationConfig`` runs its
online rotations (R1 with ``online_r1_rotation=True``, R4) on the same machinery: the layers it names
are rotated as ``HadamardRotation(layers=...)`` rotates them."""

from __future__ import annotations

import fnmatch
import logging
from typing import Any

import torch
from brevitas.graph.equalize import LayerwiseActivationRotation
from brevitas.graph.hadamard import get_hadK
from torch import nn

from quark.torch.quantization.config.algorithms import HadamardRotation, RotationConfig

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


#: RotationConfig.scaling_layers group -> the decoder layer indices it applies to (n layers)
ROTATION_GROUP_LAYERS = {
    "first_layer": lambda n: range(min(1, n)),
    "middle_layers": lambda n: range(1, n),
    "last_layer": lambda n: range(n - 1, n),
}


def rotation_targets(config: RotationConfig, model: nn.Module) -> list[str]:
    """The Linear layers Quark's online rotations rotate: R1's ``target_modules`` (else
    ``next_modules``) of every group, for each decoder layer the group applies to; R4's
    ``<model_decoder_layers>.<i>.<mlp>.down_proj``. A name that is no Linear of the model is an error."""
    try:
        decoder = model.get_submodule(config.model_decoder_layers)
    except AttributeError:
        raise ValueError(
            f"RotationConfig.model_decoder_layers={config.model_decoder_layers!r} is not a module of the model"
        ) from None
    count = len(decoder)
    names: list[str] = []
    if config.r1:
        for group, entries in config.scaling_layers.items():
            for entry in entries:
                modules = entry.get("target_modules", entry.get("next_modules", []))
                for i in ROTATION_GROUP_LAYERS[group](count):
                    names += [m.replace("pre_layer_id", str(i - 1)).replace("layer_id", str(i)) for m in modules]
    if config.r4:
        names += [f"{config.model_decoder_layers}.{i}.{config.mlp}.down_proj" for i in range(count)]
    names = list(dict.fromkeys(names))
    linears = {name for name, module in model.named_modules() if type(module) is nn.Linear}
    missing = [n for n in names if n not in linears]
    if missing:
        raise ValueError(
            f"RotationConfig names layers that are no torch.nn.Linear of the model: {missing[:5]}; "
            f"Linear layers: {sorted(linears)[:10]}"
        )
    if not names:
        raise ValueError("RotationConfig.scaling_layers names no target_modules / next_modules to rotate")
    return names


def rotation_config(config: RotationConfig, model: nn.Module, data: Any = None) -> nn.Module:
    """Quark's online rotations as Hadamard rotations in front of the layers they name."""
    return hadamard_rotation(HadamardRotation(layers=rotation_targets(config, model)), model, data)
