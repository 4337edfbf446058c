"""SmoothQuant (``SmoothQuantConfig``, ``pre_quant_opt_config``) on the float model, block by block.

The fold itself is a few lines on the weights (:mod:`.pairs`); Brevitas' equalization computes a
different scale (no ``scale_clamp_min``) through private helpers, so it is written here with
Quark's formula: ``s = max|X|^alpha / max|W|^(1 - alpha)``, clamped below at ``scale_clamp_min``.
"""

from __future__ import annotations

import logging
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import pairs
from quark.torch.extensions.brevitas._backend.algorithms.blocks import each_block, find_blocks
from quark.torch.extensions.brevitas._backend.algorithms.gptq import check_embedding_layers
from quark.torch.extensions.brevitas._backend.data import calibration_data
from quark.torch.quantization.config.algorithms import SmoothQuantConfig

logger = logging.getLogger(__name__)


def block_pairs(
    config: Any, block: pairs.Block, inputs: pairs.Inputs, owner: str, unpaired: list[str]
) -> list[pairs.Pair]:
    """The block's pairs: from ``scaling_layers``, else found (what is left unpaired is collected)."""
    if config.scaling_layers is not None:
        found = pairs.from_scaling_layers(config, block, owner)
        pairs.check_preserving(found, block, inputs, owner, config.scaling_layers)
        return found
    found, left = pairs.discover(block, inputs, config)
    unpaired.extend(left)
    return found


def warn_unpaired(owner: str, unpaired: list[str]) -> None:
    if unpaired:
        logger.warning(
            "%s: no function-preserving scaling pair found for %d layers, left unscaled: %s (their input is not "
            "produced by a norm or linear layer feeding only them, e.g. a post-norm residual or a GELU in between; "
            "give scaling_layers to choose pairs yourself)",
            owner,
            len(unpaired),
            unpaired,
        )


def weight_absmax(block: nn.Module, pair: pairs.Pair) -> torch.Tensor:
    """max |W| per input channel over the pair's layers."""
    maxima = []
    for name in pair.layers:
        layer = block.get_submodule(name)
        _, in_axis = pairs.weight_axes(layer)
        w = layer.weight.detach().float().abs().movedim(in_axis, 0)
        maxima.append(w.reshape(w.shape[0], -1).amax(1))
    return torch.stack(maxima).amax(0)


@torch.no_grad()
def smooth_scale(
    config: SmoothQuantConfig, block: nn.Module, pair: pairs.Pair, act: torch.Tensor
) -> torch.Tensor:
    channels = pairs.prev_channels(block, pair)
    alpha = config.alpha if pair.alpha is None else pair.alpha
    act = pairs.to_prev(act, pair, channels)
    weight = pairs.to_prev(weight_absmax(block, pair).to(act.device), pair, channels)
    scale = act.clamp(min=1e-8).pow(alpha) / weight.clamp(min=1e-8).pow(1 - alpha)
    return scale.clamp(min=config.scale_clamp_min)


def smoothquant(config: SmoothQuantConfig, model: nn.Module, data: Any) -> nn.Module:
    check_embedding_layers(config, model)
    blocks = find_blocks(model, config.model_decoder_layers, "SmoothQuantConfig")
    was_training = model.training
    model.eval()
    unpaired: list[str] = []
    folded = 0
    for block, inputs in each_block(model, blocks, calibration_data(data), "SmoothQuant"):
        found = block_pairs(config, block, inputs, "SmoothQuantConfig", unpaired)
        maxima = pairs.input_absmax(block.module, found, inputs)
        for pair in found:
            pairs.fold(block.module, pair, smooth_scale(config, block.module, pair, maxima[pair]))
        folded += len(found)
    warn_unpaired("SmoothQuantConfig", unpaired)
    logger.info("SmoothQuant: %d pairs in %d blocks", folded, len(blocks))
    return model.train(was_training)
