"""GPTQ: the main API's ``GPTQConfig`` and the Brevitas extension's ``GPTQ``, on Brevitas' ``gptq_mode``."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import gpxq
from quark.torch.extensions.brevitas._backend.algorithms.blocks import find_blocks
from quark.torch.extensions.brevitas._backend.algorithms.layers import (
    in_scope,
    quantized_weight_plans,
    unmatched_patterns,
    weight_quantized,
    weight_spec_problems,
)
from quark.torch.quantization.config.algorithms import GPTQ, GPTQConfig
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.plan import LayerPlan, Site

logger = logging.getLogger(__name__)


def scope_problems(
    config: Any, plans: Sequence[LayerPlan], patterns: Sequence[str] | None
) -> tuple[list[str], list[str]]:
    """(layers in the algorithm's scope, problems): patterns of ``inside_layer_modules`` that match
    no quantized layer, and no quantized weight at all."""
    owner = type(config).__name__
    names = [p.name for p in quantized_weight_plans(plans)]
    problems = []
    if not names:
        problems.append(f"{owner} quantizes weights, but the config quantizes no weight")
    missing = unmatched_patterns(names, config.model_decoder_layers, patterns)
    if missing:
        problems.append(
            f"{owner}.inside_layer_modules {missing} match no layer with a quantized weight"
            + (
                f" under model_decoder_layers={config.model_decoder_layers!r}"
                if config.model_decoder_layers
                else ""
            )
            + f"; layers: {names[:10]}"
        )
    return [n for n in names if in_scope(n, config.model_decoder_layers, patterns)], problems


def check_embedding_layers(config: Any, model: nn.Module) -> None:
    """``embedding_layers`` run before the first block anyway; they must exist."""
    known = {name for name, _ in model.named_modules()}
    missing = [n for n in config.embedding_layers or () if n not in known]
    if missing:
        raise ValueError(f"{type(config).__name__}.embedding_layers {missing} are not modules of the model")


def check(config: GPTQConfig, plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    scope, problems = scope_problems(config, plans, config.inside_layer_modules)
    problems += weight_spec_problems(config, plans, scope)
    grouped = [
        p.name for p in plans if p.name in scope and p.specs[Role.weight].qscheme is QSchemeType.per_group
    ]
    if config.desc_act and not config.static_groups and grouped:
        problems.append(
            f"GPTQConfig.desc_act=True with static_groups=False on per_group weights ({grouped[:3]}...): groups "
            "found in activation order are not contiguous, and the weight spec's groups are; set static_groups=True "
            "or desc_act=False (AMD Quark refuses this combination too)"
        )
    return problems


def gptq_config(config: GPTQConfig, model: nn.Module, data: Any) -> nn.Module:
    check_embedding_layers(config, model)
    blocks = find_blocks(model, config.model_decoder_layers, "GPTQConfig")
    inside = {b.prefix() + n for b in blocks for n, m in b.module.named_modules() if weight_quantized(m)}
    outside = [n for n, m in model.named_modules() if weight_quantized(m) and n not in inside]
    if outside:
        logger.warning("GPTQConfig: layers outside the blocks keep round-to-nearest weights: %s", outside)
    mode = gpxq.gptq(
        act_order=config.desc_act,
        damp_percent=config.damp_percent,
        block_size=config.block_size,
        quant_inputs=True,
        static_groups=config.static_groups,
    )
    return gpxq.run(
        model,
        data,
        mode,
        desc="GPTQ",
        blocks=blocks,
        selected=lambda name: in_scope(name, config.model_decoder_layers, config.inside_layer_modules),
        parallel=not config.true_sequential,
        group_shared_inputs=True,
    )


def gptq_extension(config: GPTQ, model: nn.Module, data: Any) -> nn.Module:
    """As Quark's extension: float activations while the Hessians are collected, Brevitas' damping."""
    mode = gpxq.gptq(act_order=config.act_order, damp_percent=0.01, block_size=None, quant_inputs=False)
    return gpxq.run(model, data, mode, desc="GPTQ", group_shared_inputs=True)
