"""GPTQ, GPFQ and accumulator-aware GPFQ on Brevitas, block by block.

Brevitas' ``gptq_mode`` / ``gpfq_mode`` (and ``a2gpfq_mode`` of its examples) do the numerics;
here they run on one block at a time with the block's captured inputs (see :mod:`.blocks`),
restricted to the chosen layers. The main API's ``GPTQConfig`` and the Brevitas extension's
``GPTQ`` / ``GPFQ`` / ``GPFA2Q`` are thin settings over :func:`run`.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Callable
from typing import Any

import torch
from brevitas.graph.gpfq import GPFQ, gpfq_mode
from brevitas.graph.gptq import GPTQ, gptq_mode
from brevitas.graph.qronos import Qronos
from brevitas.graph.utils import remove_weight_orig
from brevitas_examples.common.axe import A2GPFQ, a2gpfq_mode
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import frozen
from quark.torch.extensions.brevitas._backend.algorithms.blocks import Block, each_block, find_blocks
from quark.torch.extensions.brevitas._backend.algorithms.layers import weight_quantized
from quark.torch.extensions.brevitas._backend.data import CalibrationData, calibration_data

logger = logging.getLogger(__name__)


class _Restricted:
    """A ``gpxq_mode`` that optimises only the modules in ``chosen`` (Brevitas takes every
    quantized layer of the model it is given)."""

    chosen: frozenset[int] = frozenset()

    def _is_module_supported(self, module: nn.Module) -> bool:
        return id(module) in self.chosen and super()._is_module_supported(module)


class _GPTQMode(_Restricted, gptq_mode):
    pass


class _GPFQMode(_Restricted, gpfq_mode):
    pass


class _A2GPFQMode(_Restricted, a2gpfq_mode):
    """Accumulator-aware GPFQ whose per-layer optimiser is ``algorithm_impl``'s subsampling variant.

    A layer with one input (``nn.Linear(1, n)``: each output one product) has nothing for AXE to
    split: Brevitas' AXE refuses it ("accumulator tile size needs to be bigger than 1"). One product
    of a b_w-bit weight and a b_x-bit input needs no constraint when it fits the accumulator: such a
    layer is rounded by GPFQ (what AMD Quark's extension does for every layer on Brevitas >= 0.12),
    and said so; one whose product does not fit is an error naming it."""

    def initialize_module_optimizer(self, layer, name, len_parallel_layers, create_weight_orig):
        common = {
            "layer": layer,
            "name": name,
            "act_order": self.act_order,
            "len_parallel_layers": len_parallel_layers,
            "create_weight_orig": create_weight_orig,
            "device": self.device,
            "dtype": self.dtype,
            "fraction": self.fraction,
        }
        if layer.weight[0].numel() > 1:
            return _SubsampledA2GPFQ(
                **common,
                max_accumulator_bit_width=self.max_accumulator_bit_width,
                max_accumulator_tile_size=self.max_accumulator_tile_size,
            )
        _check_one_product(layer, name, int(self.max_accumulator_bit_width))
        return _SubsampledGPFQ(**common)


def _check_one_product(layer: nn.Module, name: str, accumulator_bits: int) -> None:
    """A one-input layer: its single product must fit a signed accumulator of ``accumulator_bits``."""
    weight_bits = int(layer.quant_weight().bit_width)
    proxy = getattr(layer, "input_quant", None)
    if proxy is None or not proxy.is_quant_enabled:
        logger.warning(
            "GPFA2Q: %s has one input, which AXE cannot constrain; rounded by GPFQ. Its input grid is not known here: "
            "one product of an int%d weight and a b-bit input fits a %d-bit accumulator when %d + b <= %d",
            name, weight_bits, accumulator_bits, weight_bits, accumulator_bits,
        )  # fmt: skip
        return
    input_bits = int(proxy.bit_width())
    largest = 2 ** (weight_bits - 1) * (2 ** (input_bits - 1) if proxy.is_signed else 2**input_bits - 1)
    if largest > 2 ** (accumulator_bits - 1) - 1:
        raise ValueError(
            f"GPFA2Q: {name} has one input: each output is one product of an int{weight_bits} weight and a "
            f"{input_bits}-bit input, up to {largest}, beyond a {accumulator_bits}-bit accumulator; AXE needs two inputs "
            f"or more to constrain. Raise accumulator_bit_width to {largest.bit_length() + 1}, or exclude the layer"
        )
    logger.info(
        "GPFA2Q: %s has one input: its int%d x %d-bit product fits the %d-bit accumulator; rounded by GPFQ",
        name, weight_bits, input_bits, accumulator_bits,
    )  # fmt: skip


class _Frozen:
    """Round onto a fixed grid: the layer's weight statistics frozen at its weights before the
    algorithm starts (see :mod:`.frozen`); Linear layers round only the columns asked for."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.frozen = frozen.freeze(self.layer)
        self.grid = frozen.Grid(self.layer) if frozen.Grid.applies(self.layer) else None

    def get_quant_weights(self, i, i1, permutation_list, with_quant_history=False):
        if self.grid is None:
            return super().get_quant_weights(i, i1, permutation_list, with_quant_history)
        column = i1 + i
        order = permutation_list[0]  # one group for Linear layers
        if with_quant_history:
            return self.grid.columns(order[:column]).unsqueeze(0)  # [1, OC, column], as Brevitas returns
        return self.grid.columns(order[column : column + 1]).T  # [1, OC]


class _TunedGPTQ(_Frozen, GPTQ):
    """Brevitas' GPTQ with Quark's ``damp_percent`` and ``block_size`` (Brevitas fixes the damping
    at 0.01 and derives the block size from a number of blocks) and ``static_groups``: False
    recomputes a group's statistic from the updated weights when its first column is reached
    (Linear layers with groups along the input features; other layers keep static groups)."""

    def __init__(
        self,
        *args: Any,
        damp_percent: float = 0.01,
        block_size: int | None = None,
        static_groups: bool = True,
        **kwargs: Any,
    ):
        super().__init__(*args, **kwargs)
        self.damp_percent = damp_percent
        if block_size is not None:
            self.blocksize = block_size
        proxy = self.layer.weight_quant
        dynamic = (
            not static_groups and proxy.is_groupwise and self.layer.weight.dim() == 2 and proxy.group_dim == 1
        )
        self.group_size = proxy.group_size if dynamic else None

    def get_quant_weights(self, i, i1, permutation_list, with_quant_history=False):
        column = i1 + i
        if self.group_size is not None and column % self.group_size == 0:
            for stats in self.frozen:
                stats.refresh(column // self.group_size)
            if self.grid is not None:
                self.grid.refresh()
        return super().get_quant_weights(i, i1, permutation_list, with_quant_history)

    def single_layer_update(self, percdamp: float | None = None, c: float = 1e4) -> None:
        super().single_layer_update(percdamp=self.damp_percent if percdamp is None else percdamp, c=c)


class _Subsample:
    """``percentage_of_processed_inputs``: keep an evenly spaced ``fraction`` of each batch's input
    vectors (the same ones in GPFQ's quantized and float passes, which must pair up)."""

    def __init__(self, *args: Any, fraction: float = 1.0, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.fraction = fraction

    def process_input(self, inp: Any) -> torch.Tensor:
        processed = super().process_input(inp)  # [groups, features, samples]
        samples = processed.shape[-1]
        keep = max(1, round(self.fraction * samples))
        if keep < samples:
            processed = processed[..., torch.linspace(0, samples - 1, keep).round().long()]
        return processed


class _SubsampledGPFQ(_Frozen, _Subsample, GPFQ):
    pass


class _SubsampledA2GPFQ(_Frozen, _Subsample, A2GPFQ):
    pass


class _FrozenQronos(_Frozen, Qronos):
    """Brevitas' Qronos with AMD Quark's ``beta`` (Brevitas fixes it at 1e4) and ``block_size``
    (Brevitas derives it from a number of blocks)."""

    def __init__(self, *args: Any, beta: float = 1e4, block_size: int | None = None, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.beta = beta
        if block_size is not None:
            self.blocksize = block_size

    def single_layer_update(self, beta: float | None = None) -> None:
        super().single_layer_update(beta=self.beta if beta is None else beta)


#: (name, config fields) -> the context manager that runs the algorithm on one block
ModeFactory = Callable[[nn.Module, list[list[str]] | None], Any]


def gptq(
    *,
    act_order: bool,
    damp_percent: float,
    block_size: int | None,
    quant_inputs: bool,
    static_groups: bool = True,
) -> ModeFactory:
    impl = functools.partial(
        _TunedGPTQ, damp_percent=damp_percent, block_size=block_size, static_groups=static_groups
    )
    return lambda block, parallel: _GPTQMode(
        block,
        parallel,
        create_weight_orig=False,
        use_quant_activations=quant_inputs,
        act_order=act_order,
        gptq_class=impl,
    )


def gpfq(*, act_order: bool, fraction: float) -> ModeFactory:
    impl = functools.partial(_SubsampledGPFQ, fraction=fraction)
    return lambda block, parallel: _GPFQMode(
        block, parallel, use_quant_activations=True, act_order=act_order, algorithm_impl=impl
    )


def qronos(*, act_order: bool, alpha: float, beta: float = 1e4, block_size: int | None = None) -> ModeFactory:
    impl = functools.partial(_FrozenQronos, alpha=alpha, beta=beta, block_size=block_size)
    return lambda block, parallel: _GPFQMode(
        block, parallel, use_quant_activations=True, act_order=act_order, algorithm_impl=impl
    )


def gpfa2q(*, act_order: bool, fraction: float, accumulator_bit_width: int) -> ModeFactory:
    def factory(block: nn.Module, parallel: list[list[str]] | None) -> Any:
        mode = _A2GPFQMode(
            block,
            parallel,
            use_quant_activations=True,
            act_order=act_order,
            max_accumulator_bit_width=accumulator_bit_width,
        )
        mode.fraction = fraction
        return mode

    return factory


@torch.no_grad()
def shared_input_groups(block: nn.Module, chosen: dict[str, nn.Module], args: Any, kwargs: Any) -> list[list[str]] | None:
    """The layers of ``chosen`` that read one and the same input tensor, grouped (first seen first;
    groups of two or more), from one forward pass of ``block``: a transformer's query, key and value.

    Processing such a group in one pass is the same as one layer after the other: quantizing one of
    them does not change the input of the others. Brevitas' ``gpxq_mode`` runs one forward pass
    over the block's inputs per group instead of per layer (4 instead of 6 per BERT layer)."""
    seen: dict[tuple, list[str]] = {}
    handles = []
    for name, module in chosen.items():

        def hook(module, inputs, name=name):
            x = inputs[0] if inputs else None
            value = getattr(x, "value", x)
            if isinstance(value, torch.Tensor):
                seen.setdefault((value.data_ptr(), tuple(value.shape), value.dtype), []).append(name)

        handles.append(module.register_forward_pre_hook(hook))
    try:
        block(*args, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    groups = [names for names in seen.values() if len(names) > 1 and len(set(names)) == len(names)]
    return groups or None


@torch.no_grad()
def run(
    model: nn.Module,
    data: Any,
    mode: ModeFactory,
    *,
    desc: str,
    blocks: list[Block] | None = None,
    selected: Callable[[str], bool] = lambda name: True,
    parallel: bool = False,
    group_shared_inputs: bool = False,
) -> nn.Module:
    """Run ``mode`` on every block of ``model`` (found when not given), on the layers whose full
    name ``selected`` accepts; ``parallel``: a block's layers all see the block's unprocessed inputs;
    ``group_shared_inputs``: layers that read the same tensor are processed in one pass
    (:func:`shared_input_groups`; the same result in fewer passes)."""
    data: CalibrationData = calibration_data(data)
    was_training = model.training
    model.eval()
    blocks = blocks or find_blocks(model, None, desc)
    processed = 0
    for block, inputs in each_block(model, blocks, data, desc):
        chosen = {
            name: module
            for name, module in block.module.named_modules()
            if weight_quantized(module) and selected(block.prefix() + name)
        }
        if not chosen:
            continue
        groups = [list(chosen)] if parallel and len(chosen) > 1 else None
        if groups is None and group_shared_inputs and len(chosen) > 1 and inputs:
            groups = shared_input_groups(block.module, chosen, *inputs[0])
        context = mode(block.module, groups)
        context.chosen = frozenset(map(id, chosen.values()))
        try:
            with context as gpxq:
                for _ in range(gpxq.num_layers):
                    for args, kwargs in inputs:
                        gpxq.model(*args, **kwargs)
                    gpxq.update()
        finally:
            block.module.__dict__.pop("forward", None)  # gpxq_mode leaves its bound forward behind
            remove_weight_orig(block.module)
        processed += len(chosen)
    logger.info("%s: %d layers in %d blocks", desc, processed, len(blocks))
    model.train(was_training)
    return model
