"""GPFQ, accumulator-aware GPFQ and Qronos (the Brevitas extension's ``GPFQ`` / ``GPFA2Q``; ``Qronos``
beyond it) on Brevitas: they share GPFQ's paired quantized / float passes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import gpxq
from quark.torch.extensions.brevitas._backend.algorithms.blocks import find_blocks
from quark.torch.extensions.brevitas._backend.algorithms.gptq import scope_problems
from quark.torch.extensions.brevitas._backend.algorithms.layers import in_scope
from quark.torch.quantization.config.algorithms import GPFA2Q, GPFQ, Qronos, QronosConfig
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.plan import LayerPlan, Site
from quark.torch.quantization.tensor_quant import Format


def gpfq(config: GPFQ, model: nn.Module, data: Any) -> nn.Module:
    mode = gpxq.gpfq(act_order=config.act_order, fraction=config.percentage_of_processed_inputs)
    return gpxq.run(model, data, mode, desc="GPFQ")


def check_a2q(config: GPFA2Q, plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    """The accumulator bound depends on the input's integer range: every integer-weight layer needs
    an integer input quantizer."""
    bare = [
        p.name
        for p in plans
        if p.specs[Role.weight] is not None
        and (
            p.specs[Role.input_tensors] is None
            or p.specs[Role.input_tensors].format is not Format.integer
            or p.specs[Role.input_tensors].is_dynamic
        )
    ]
    if bare:
        return [
            (
                f"GPFA2Q bounds the accumulator from the input's integer range: layers {bare[:5]} need a static "
                "integer input_tensors spec"
            )
        ]
    return []


def gpfa2q(config: GPFA2Q, model: nn.Module, data: Any) -> nn.Module:
    mode = gpxq.gpfa2q(
        act_order=config.act_order,
        fraction=config.percentage_of_processed_inputs,
        accumulator_bit_width=config.accumulator_bit_width,
    )
    return gpxq.run(model, data, mode, desc="GPFA2Q")


def qronos(config: Qronos, model: nn.Module, data: Any) -> nn.Module:
    return gpxq.run(model, data, gpxq.qronos(act_order=config.act_order, alpha=config.alpha), desc="Qronos")


def check_qronos_config(config: QronosConfig, plans: Sequence[LayerPlan], sites: Sequence[Site]) -> list[str]:
    """``inside_layer_modules`` must match quantized weights (as GPTQConfig's)."""
    return scope_problems(config, plans, config.inside_layer_modules)[1]


def qronos_config(config: QronosConfig, model: nn.Module, data: Any) -> nn.Module:
    """AMD Quark's QronosConfig: Qronos on the layers ``inside_layer_modules`` names in each block of
    ``model_decoder_layers``, with its ``desc_act``, ``alpha``, ``beta`` and ``block_size``."""
    blocks = find_blocks(model, config.model_decoder_layers, "QronosConfig")
    mode = gpxq.qronos(act_order=config.desc_act, alpha=config.alpha, beta=config.beta, block_size=config.block_size)
    return gpxq.run(
        model,
        data,
        mode,
        desc="Qronos",
        blocks=blocks,
        selected=lambda name: in_scope(name, config.model_decoder_layers, config.inside_layer_modules),
    )
