"""Block by block: the repeated blocks of a model (transformer layers) and their calibration inputs.

The data-driven algorithms (SmoothQuant's statistics, AWQ, GPTQ, GPFQ) work on one block at a
time: the inputs of the first block are captured once (the model runs up to it and stops), each
block is processed on its own inputs, and its outputs, computed after processing, become the next
block's inputs. Memory holds one block's inputs for the calibration set, never the activations of
the whole model; each layer's statistics are the algorithms' own (a Hessian, a channel maximum).

Written here because Brevitas' ``gpxq_mode`` runs the whole model once per layer (quadratic in
depth) and its examples' block loop (``brevitas_examples.llm``) is tied to Llama / OPT class names
and needs accelerate.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from brevitas.graph.calibrate import quantization_status_manager
from torch import nn
from tqdm.auto import tqdm

from quark.torch.extensions.brevitas._backend.data import CalibrationData, ForwardStopped, run_batch

#: captured inputs of a block, one (args, kwargs) per calibration batch
Inputs = list[tuple[tuple[Any, ...], dict[str, Any]]]


@dataclass(frozen=True)
class Block:
    """One block; ``name`` is "" when the whole model is the block."""

    name: str
    module: nn.Module

    def prefix(self) -> str:
        return f"{self.name}." if self.name else ""


def _repeated_lists(model: nn.Module) -> list[tuple[str, nn.ModuleList]]:
    """ModuleLists of two or more modules of one type that hold weights: the model's repeated blocks."""
    found = []
    for name, module in model.named_modules():
        if isinstance(module, nn.ModuleList) and len(module) > 1:
            types = {type(m) for m in module}
            if len(types) == 1 and any(p.dim() > 1 for p in module.parameters()):
                found.append((name, module))
    return found


def find_blocks(model: nn.Module, path: str | None, owner: str) -> list[Block]:
    """The blocks at ``path`` (``model_decoder_layers``), else the largest repeated ModuleList of the
    model, else the whole model as one block."""
    candidates = _repeated_lists(model)
    if path is None:
        if not candidates:
            return [Block("", model)]
        name, blocks = max(candidates, key=lambda c: sum(p.numel() for p in c[1].parameters()))
        return [Block(f"{name}.{i}", m) for i, m in enumerate(blocks)]
    try:
        container = model.get_submodule(path)
    except AttributeError:
        container = None
    if not isinstance(container, (nn.ModuleList, nn.Sequential)):
        found = [name for name, _ in candidates] or "none"
        raise ValueError(  # noqa: TRY004  (a wrong value of a config field, not a wrong argument type)
            f"{owner}.model_decoder_layers={path!r} is not a ModuleList of the model; repeated blocks found: {found}"
        )
    return [Block(f"{path}.{i}", m) for i, m in enumerate(container)]


@contextlib.contextmanager
def _no_cache(model: nn.Module) -> Iterator[None]:
    """Transformers' key/value caches would grow across the repeated block calls: off meanwhile."""
    config = getattr(model, "config", None)
    previous = getattr(config, "use_cache", None)
    if previous is not None:
        config.use_cache = False
    try:
        yield
    finally:
        if previous is not None:
            config.use_cache = previous


@torch.no_grad()
def capture_inputs(model: nn.Module, block: nn.Module, data: CalibrationData, desc: str) -> Inputs:
    """Run every calibration batch through ``model`` until ``block`` and keep the block's inputs."""
    inputs: Inputs = []

    def hook(_module, args, kwargs):
        inputs.append((args, kwargs))
        raise ForwardStopped

    handle = block.register_forward_pre_hook(hook, with_kwargs=True)
    try:
        with _no_cache(model):
            for batch in data.passes(desc):
                with contextlib.suppress(ForwardStopped):
                    run_batch(model, batch)
    finally:
        handle.remove()
    if not inputs:
        raise ValueError(
            f"{desc}: the calibration data gave no batch (or {type(block).__name__} was never called)"
        )
    return inputs


def call(block: nn.Module, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """The block's output for one captured input; a tuple output gives its first element."""
    out = block(*args, **kwargs)
    return out[0] if isinstance(out, (tuple, list)) else out


@torch.no_grad()
def observe_inputs(
    block: nn.Module, observers: Sequence[tuple[str, Callable[[nn.Module, torch.Tensor], None]]], inputs: Inputs
) -> None:
    """Run the float block (quantization off) over ``inputs``, handing each named layer's first
    input to its observers, ``(layer name, observer(layer, x))``."""
    hooks = [
        block.get_submodule(name).register_forward_pre_hook(lambda m, a, f=observer: f(m, a[0].detach()))
        for name, observer in observers
    ]
    try:
        with quantization_status_manager(
            block, disable_act_quant=True, disable_weight_quant=True, disable_bias_quant=True
        ):
            for args, kwargs in inputs:
                call(block, args, kwargs)
    finally:
        for handle in hooks:
            handle.remove()


@torch.no_grad()
def advance(block: nn.Module, inputs: Inputs) -> Inputs:
    """The next block's inputs: this block's outputs in place of its first argument."""
    if inputs and not inputs[0][0]:
        raise ValueError(
            f"{type(block).__name__} takes its hidden states by keyword; blocks must take them first, positionally"
        )
    return [((call(block, args, kwargs), *args[1:]), kwargs) for args, kwargs in inputs]


def each_block(
    model: nn.Module, blocks: list[Block], data: CalibrationData, desc: str
) -> Iterator[tuple[Block, Inputs]]:
    """Yield each block with its inputs; after the caller is done with a block, its outputs are
    computed (with whatever the caller changed) and passed on. Progress bar over blocks."""
    with _no_cache(model):
        inputs = capture_inputs(model, blocks[0].module, data, f"{desc}: inputs")
        for index, block in enumerate(tqdm(blocks, desc=desc, disable=not data.progress, leave=False)):
            yield block, inputs
            if index + 1 < len(blocks):
                inputs = advance(block.module, inputs)
