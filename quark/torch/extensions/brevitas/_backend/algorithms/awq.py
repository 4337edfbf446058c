"""AWQ (``AWQConfig``) on the calibrated model, block by block, with each layer's own Brevitas
weight quantizer.

Written here: Brevitas ships no AWQ in the library, and its examples' version
(``brevitas_examples.llm.llm_quant.awq``) is tied to Llama / OPT class names, needs accelerate
and rebuilds the weight quantizers' injectors. Steps per block (Lin et al. 2023):

1. scale search, per pair ``prev -> layers`` (:mod:`.pairs`): ``s = mean|x|^r`` for r in 0, 0.05,
   ..., 0.95, normalised by sqrt(max(s) min(s)); the layers' weights times s are quantized by
   their quantizers and the r giving the smallest output error ``|X W^T - (X/s) Q(W s)^T|^2`` is
   folded in (the float function is unchanged);
2. clipping, per Linear layer with per-channel or per-group weights: each group's range is shrunk
   by up to 50% (steps of 5%) where that lowers the group's output error; per-tensor weights
   are not clipped (one group's clip would not move the tensor's scale).

The searches use the layers' float inputs (activation quantization off), at most ``MAX_ROWS``
input vectors evenly spaced over the calibration set.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import pairs
from quark.torch.extensions.brevitas._backend.algorithms.blocks import (
    Inputs,
    each_block,
    find_blocks,
    observe_inputs,
)
from quark.torch.extensions.brevitas._backend.algorithms.gptq import check_embedding_layers, scope_problems
from quark.torch.extensions.brevitas._backend.algorithms.layers import weight_quantized, weight_spec_problems
from quark.torch.extensions.brevitas._backend.algorithms.smoothquant import block_pairs, warn_unpaired
from quark.torch.extensions.brevitas._backend.data import calibration_data
from quark.torch.quantization.config.algorithms import AWQConfig
from quark.torch.quantization.plan import LayerPlan, Site

logger = logging.getLogger(__name__)

MAX_ROWS = 4096  # input vectors per layer kept for the searches
SCALE_GRID = 20
CLIP_GRID, MAX_SHRINK = 20, 0.5
CHANNEL_CHUNK = 256  # output channels evaluated at once in the clip search


@torch.no_grad()
def layer_inputs(block: nn.Module, names: set[str], inputs: Inputs) -> dict[str, torch.Tensor]:
    """The float inputs of the named Linear layers, as [rows, in_features], evenly subsampled."""
    found: dict[str, list[torch.Tensor]] = {n: [] for n in names}
    observe_inputs(block, [(n, lambda _m, x, n=n: found[n].append(x.reshape(-1, x.shape[-1]))) for n in names], inputs)
    out = {}
    for name, rows in found.items():
        x = torch.cat(rows).float()
        if x.shape[0] > MAX_ROWS:
            x = x[torch.linspace(0, x.shape[0] - 1, MAX_ROWS).round().long()]
        out[name] = x
    return out


def quantized(layer: nn.Module, weight: torch.Tensor) -> torch.Tensor:
    """``weight`` as ``layer``'s weight quantizer quantizes it."""
    original = layer.weight.data
    layer.weight.data = weight
    try:
        return layer.quant_weight().value.detach().float()
    finally:
        layer.weight.data = original


@torch.no_grad()
def search_scale(block: nn.Module, pair: pairs.Pair, x: torch.Tensor) -> torch.Tensor:
    channels = pairs.prev_channels(block, pair)
    mean = pairs.to_prev(x.abs().mean(0), pair, channels)
    layers = [block.get_submodule(n) for n in pair.layers]
    references = [x @ layer.weight.float().T for layer in layers]
    best, best_scale = float("inf"), torch.ones_like(mean)
    for step in range(SCALE_GRID):
        scale = mean.pow(step / SCALE_GRID).clamp(min=1e-4)
        scale = scale / (scale.max() * scale.min()).sqrt()
        expanded = scale if pair.expand is None else scale[pair.expand]
        error = sum(
            float(
                ((x / expanded) @ quantized(layer, layer.weight * expanded.to(layer.weight)).T - ref)
                .pow(2)
                .mean()
            )
            for layer, ref in zip(layers, references)
        )
        if error < best:
            best, best_scale = error, scale
    return best_scale


@torch.no_grad()
def clip(layer: nn.Module, x: torch.Tensor) -> None:
    """Shrink each group's range where that lowers its output error; the chosen ranges clamp the weight."""
    proxy = layer.weight_quant
    weight = layer.weight.detach().float()
    out_features, in_features = weight.shape
    size = proxy.group_size if proxy.is_groupwise and getattr(proxy, "group_dim", None) == 1 else in_features
    groups = in_features // size
    xg = x.view(x.shape[0], groups, size)
    wg = weight.view(out_features, groups, size)
    original_max = wg.abs().amax(-1, keepdim=True)  # [out, groups, 1]
    best_max = original_max.clone()
    best_error = torch.full_like(original_max, float("inf"))
    for step in range(int(MAX_SHRINK * CLIP_GRID)):
        limit = original_max * (1 - step / CLIP_GRID)
        q = quantized(layer, torch.clamp(wg, -limit, limit).view_as(weight).to(layer.weight)).view_as(wg)
        for start in range(0, out_features, CHANNEL_CHUNK):
            rows = slice(start, start + CHANNEL_CHUNK)
            diff = torch.einsum("ngk,cgk->cgn", xg, wg[rows] - q[rows])  # [chunk, groups, n]
            error = diff.pow(2).mean(-1, keepdim=True)
            better = error < best_error[rows]
            best_error[rows] = torch.where(better, error, best_error[rows])
            best_max[rows] = torch.where(better, limit[rows], best_max[rows])
    layer.weight.data = torch.clamp(wg, -best_max, best_max).view_as(weight).to(layer.weight)


def check(config: AWQConfig, plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    scope, problems = scope_problems(config, plans, None)
    return problems + weight_spec_problems(config, plans, scope)


def awq(config: AWQConfig, model: nn.Module, data: Any) -> nn.Module:
    check_embedding_layers(config, model)
    if any(entry.get("module2inspect") for entry in config.scaling_layers or ()):
        logger.warning(
            "AWQConfig: module2inspect is not used; each scale is searched on the output error of its layers"
        )
    blocks = find_blocks(model, config.model_decoder_layers, "AWQConfig")
    was_training = model.training
    model.eval()
    unpaired: list[str] = []
    skipped: list[str] = []
    for block, inputs in each_block(model, blocks, calibration_data(data), "AWQ"):
        found = block_pairs(config, block, inputs, "AWQConfig", unpaired)
        linear = [
            p for p in found if all(isinstance(block.module.get_submodule(n), nn.Linear) for n in p.layers)
        ]
        skipped += [block.prefix() + n for p in found if p not in linear for n in p.layers]
        if linear:
            features = layer_inputs(block.module, {p.inp for p in linear}, inputs)
            for pair in linear:
                pairs.fold(block.module, pair, search_scale(block.module, pair, features[pair.inp]))
        clipped = {
            n
            for n, m in block.module.named_modules()
            if isinstance(m, nn.Linear)
            and weight_quantized(m)
            and (m.weight_quant.is_groupwise or _per_channel(m))
        }
        if clipped:
            features = layer_inputs(block.module, clipped, inputs)
            for name in sorted(clipped):
                clip(block.module.get_submodule(name), features[name])
    warn_unpaired("AWQConfig", unpaired)
    if skipped:
        logger.warning("AWQConfig: scales are searched for Linear layers only; left unscaled: %s", skipped)
    return model.train(was_training)


def _per_channel(layer: nn.Module) -> bool:
    spec = getattr(layer.weight_quant.quant_injector, "quark_spec", None)
    return spec is not None and spec.qscheme.name == "per_channel"
