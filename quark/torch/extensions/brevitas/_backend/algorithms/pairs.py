"""Scaling pairs for SmoothQuant and AWQ: a ``prev`` module whose output channels feed ``layers``.

Folding a positive per-channel scale s (``prev``'s output divided by s, the layers' weights
multiplied along their input channels) leaves the float function unchanged exactly when
``prev``'s output reaches nothing but ``layers``, through nothing but channel-wise linear (or
positively homogeneous, like ReLU) operations.

Pairs come from Quark's ``scaling_layers`` (relative to each block) or are found in each block:

- candidates: a norm (or batch norm) whose output tensor is the input tensor of linear layers
  (norm -> linear, as Llama's ``input_layernorm -> q, k, v``), and a linear layer whose output
  width is another's input width (linear -> linear, as ``v_proj -> o_proj``);
- each candidate is *tested*: a random positive scale is folded into a copy of the block, and the
  candidate is kept only if the block's output is unchanged. A post-norm (BERT) norm also feeding
  the residual, or a GELU between two layers, fail the test.

The layers left without a pair are returned, for the algorithms to name in a warning.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from brevitas.graph.calibrate import quantization_status_manager
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms.blocks import Block, Inputs, call, observe_inputs

#: weight axes (output channels, input channels) of the layers a scale can fold into
_CONV = (nn.Conv1d, nn.Conv2d, nn.Conv3d)


def weight_axes(module: nn.Module) -> tuple[int, int] | None:
    """(output axis, input axis) of ``module``'s weight; None for layers a scale cannot fold into."""
    if type(module).__name__ == "Conv1D" and type(module).__module__.startswith("transformers"):
        return 1, 0  # transformers' Conv1D (GPT-2) stores the weight transposed
    if isinstance(module, nn.Linear) or (isinstance(module, _CONV) and module.groups == 1):
        return 0, 1
    return None


def is_norm(module: nn.Module) -> bool:
    """A norm with a per-channel affine weight (LayerNorm, RMSNorm, batch norm)."""
    weight = getattr(module, "weight", None)
    return isinstance(weight, torch.Tensor) and weight.dim() == 1 and weight_axes(module) is None


def _channels(x: torch.Tensor, module: nn.Module) -> torch.Tensor:
    """``x`` (an input of ``module``) as [channels, everything else]."""
    axis = 1 if isinstance(module, _CONV) else -1
    return x.movedim(axis, 0).reshape(x.shape[axis], -1)


@dataclass(frozen=True)
class Pair:
    """``prev`` -> ``layers`` (names relative to the block); ``inp``: the layer whose input is
    measured; ``expand``: for grouped-query attention, the prev channel feeding each input channel."""

    prev: str
    layers: tuple[str, ...]
    inp: str
    alpha: float | None = None
    inspect: str | None = None
    expand: torch.Tensor | None = None


def _module(block: nn.Module, name: str, owner: str, where: str) -> nn.Module:
    try:
        return block.get_submodule(name)
    except AttributeError:
        raise ValueError(f"{owner}.scaling_layers: {name!r} is not a module of {where}") from None


def _gqa_expand(prev: nn.Module, layer: nn.Module, heads: int, kv_heads: int) -> torch.Tensor | None:
    """For v -> o of grouped-query attention: the v channel feeding each o input channel."""
    out_axis, _ = weight_axes(prev)
    _, in_axis = weight_axes(layer)
    width, wanted = prev.weight.shape[out_axis], layer.weight.shape[in_axis]
    if heads <= 0 or kv_heads <= 0 or width * heads != wanted * kv_heads or wanted % heads:
        return None
    head_dim = wanted // heads
    channel = torch.arange(wanted)
    return (channel // head_dim) // (heads // kv_heads) * head_dim + channel % head_dim


def from_scaling_layers(config: Any, block: Block, owner: str) -> list[Pair]:
    """Quark's ``scaling_layers`` entries, resolved in ``block``."""
    pairs = []
    where = f"block {block.name!r}" if block.name else "the model"
    for entry in config.scaling_layers:
        prev = _module(block.module, entry["prev_op"], owner, where)
        layers = [_module(block.module, n, owner, where) for n in entry["layers"]]
        inp = entry.get("inp") or entry["layers"][0]
        _module(block.module, inp, owner, where)
        expand = None
        bad = [n for n, m in zip(entry["layers"], layers) if weight_axes(m) is None]
        if bad or (weight_axes(prev) is None and not is_norm(prev)):
            raise ValueError(
                f"{owner}.scaling_layers entry {entry}: in {where}, {bad or entry['prev_op']} cannot take a per-channel "
                "scale (prev_op: a norm or Linear / Conv layer; layers: Linear / Conv layers)"
            )
        if weight_axes(prev) is not None:
            out_axis, _ = weight_axes(prev)
            _, in_axis = weight_axes(layers[0])
            if prev.weight.shape[out_axis] != layers[0].weight.shape[in_axis]:
                expand = _gqa_expand(prev, layers[0], config.num_attention_heads, config.num_key_value_heads)
                if expand is None:
                    raise ValueError(
                        f"{owner}.scaling_layers entry {entry}: {entry['prev_op']} has {prev.weight.shape[out_axis]} "
                        f"output channels but {entry['layers'][0]} takes {layers[0].weight.shape[in_axis]}; for grouped-"
                        f"query attention set num_attention_heads and num_key_value_heads (got "
                        f"{config.num_attention_heads}, {config.num_key_value_heads})"
                    )
        pairs.append(
            Pair(
                entry["prev_op"],
                tuple(entry["layers"]),
                inp,
                entry.get("alpha"),
                entry.get("module2inspect"),
                expand,
            )
        )
    return pairs


def check_preserving(
    found: Sequence[Pair], block: Block, inputs: Inputs, owner: str, entries: Sequence[dict]
) -> None:
    """A given pair whose fold would change the float function (a residual or a non-linearity in
    between) is an error naming it."""
    args, kwargs = inputs[0]
    reference = _float_outputs(block, args, kwargs)
    for pair, entry in zip(found, entries):
        if not _preserves_function(block.module, pair, args, kwargs, reference):
            raise ValueError(
                f"{owner}.scaling_layers entry {entry} in block {block.name!r}: a scale folded there changes the float "
                f"output ({pair.prev}'s output also reaches other operations, or passes a non-linearity); remove the entry"
            )


@torch.no_grad()
def fold(block: nn.Module, pair: Pair, scale: torch.Tensor) -> None:
    """Divide ``prev``'s output channels by ``scale`` and multiply the layers' input channels by it."""
    prev = block.get_submodule(pair.prev)
    inverse = 1.0 / scale
    if is_norm(prev):
        prev.weight.mul_(inverse.to(prev.weight))
        if getattr(prev, "bias", None) is not None:
            prev.bias.mul_(inverse.to(prev.bias))
    else:
        out_axis, _ = weight_axes(prev)
        shape = [1] * prev.weight.dim()
        shape[out_axis] = -1
        prev.weight.mul_(inverse.view(shape).to(prev.weight))
        if prev.bias is not None:
            prev.bias.mul_(inverse.to(prev.bias))
    expanded = scale if pair.expand is None else scale[pair.expand.to(scale.device)]
    for name in pair.layers:
        layer = block.get_submodule(name)
        _, in_axis = weight_axes(layer)
        shape = [1] * layer.weight.dim()
        shape[in_axis] = -1
        layer.weight.mul_(expanded.view(shape).to(layer.weight))


def prev_channels(block: nn.Module, pair: Pair) -> int:
    prev = block.get_submodule(pair.prev)
    return prev.weight.shape[0 if is_norm(prev) else weight_axes(prev)[0]]


@torch.no_grad()
def input_absmax(block: nn.Module, pairs: Sequence[Pair], inputs: Inputs) -> dict[Pair, torch.Tensor]:
    """max |x| per input channel of each pair's ``inp`` layer, over all inputs (float block)."""
    found: dict[Pair, list[torch.Tensor]] = {pair: [] for pair in pairs}
    observe_inputs(
        block,
        [(p.inp, lambda m, x, p=p: found[p].append(_channels(x.float().abs(), m).amax(1))) for p in pairs],
        inputs,
    )
    return {pair: torch.stack(v).amax(0) for pair, v in found.items() if v}


def to_prev(stat: torch.Tensor, pair: Pair, channels: int) -> torch.Tensor:
    """A statistic over the layers' input channels, as one value per ``prev`` channel (max over the
    channels a grouped-query ``prev`` channel feeds)."""
    if pair.expand is None:
        return stat
    out = torch.zeros(channels, dtype=stat.dtype, device=stat.device)
    return out.scatter_reduce(0, pair.expand.to(stat.device), stat, reduce="amax")


# -- discovery -----------------------------------------------------------------------------------


def _candidates(block: nn.Module, args: tuple, kwargs: dict, config: Any) -> list[Pair]:
    """Norm -> linear (shared input tensor) and linear -> linear (matching widths) candidates."""
    produced: dict[int, str] = {}
    consumed: dict[str, int] = {}
    alive: list[torch.Tensor] = []  # the tensors whose ids are compared stay alive, so no id is reused
    hooks = []

    def output_of(name: str):
        def hook(module, args, out):
            alive.append(out)
            produced.setdefault(id(out), name)

        return hook

    def input_of(name: str):
        def hook(module, args):
            alive.append(args[0])
            consumed.setdefault(name, id(args[0]))

        return hook

    for name, module in block.named_modules():
        if name and is_norm(module):
            hooks.append(module.register_forward_hook(output_of(name)))
        if name and weight_axes(module) is not None:
            hooks.append(module.register_forward_pre_hook(input_of(name)))
    try:
        with quantization_status_manager(
            block, disable_act_quant=True, disable_weight_quant=True, disable_bias_quant=True
        ):
            call(block, args, kwargs)
    finally:
        for handle in hooks:
            handle.remove()
    by_norm: dict[str, list[str]] = {}
    for layer, tensor in consumed.items():
        if tensor in produced:
            by_norm.setdefault(produced[tensor], []).append(layer)
    pairs = [Pair(norm, tuple(layers), layers[0]) for norm, layers in by_norm.items()]
    linears = [n for n in consumed if n not in {lay for p in pairs for lay in p.layers}]
    for prev_name in consumed:
        prev = block.get_submodule(prev_name)
        for name in linears:
            layer = block.get_submodule(name)
            if name == prev_name:
                continue
            out_axis, _ = weight_axes(prev)
            _, in_axis = weight_axes(layer)
            if prev.weight.shape[out_axis] == layer.weight.shape[in_axis]:
                pairs.append(Pair(prev_name, (name,), name))
            else:
                expand = _gqa_expand(prev, layer, config.num_attention_heads, config.num_key_value_heads)
                if expand is not None:
                    pairs.append(Pair(prev_name, (name,), name, expand=expand))
    return pairs


def _output_tensors(out: Any) -> list[torch.Tensor]:
    """The floating-point tensors of a block's output: a tensor, or tuples, lists and dicts of them
    (transformers' ``ModelOutput`` is a dict)."""
    if isinstance(out, torch.Tensor):
        return [out] if out.is_floating_point() else []
    values = out.values() if isinstance(out, Mapping) else out if isinstance(out, (tuple, list)) else ()
    return [t for v in values for t in _output_tensors(v)]


@torch.no_grad()
def _float_outputs(block: Block, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The block's float output tensors with quantization off: the reference a fold must preserve."""
    with quantization_status_manager(
        block.module, disable_act_quant=True, disable_weight_quant=True, disable_bias_quant=True
    ):
        output = call(block.module, args, kwargs)
    reference = _output_tensors(output)
    if not reference:
        raise TypeError(
            f"block {block.name or type(block.module).__name__!r} returned {type(output).__name__} without a "
            "float tensor: pairs are checked on the block's outputs"
        )
    return reference


@torch.no_grad()
def _preserves_function(
    block: nn.Module, pair: Pair, args: tuple, kwargs: dict, reference: list[torch.Tensor]
) -> bool:
    trial = copy.deepcopy(block)
    generator = torch.Generator().manual_seed(0)
    scale = 2.0 ** (torch.rand(prev_channels(block, pair), generator=generator) * 2 - 1)  # in [0.5, 2]
    fold(trial, pair, scale.to(reference[0].device))
    with quantization_status_manager(
        trial, disable_act_quant=True, disable_weight_quant=True, disable_bias_quant=True
    ):
        out = _output_tensors(call(trial, args, kwargs))
    # correct folds differ by float rounding (1e-8..1e-7 of the output range), wrong ones by 1e-3 or more
    return len(out) == len(reference) and all(
        torch.allclose(o, r, rtol=1e-4, atol=1e-4 * float(r.abs().max())) for o, r in zip(out, reference)
    )


def discover(block: Block, inputs: Inputs, config: Any) -> tuple[list[Pair], list[str]]:
    """The function-preserving pairs of ``block`` and the names of its layers left without one."""
    args, kwargs = inputs[0]
    reference = _float_outputs(block, args, kwargs)
    pairs = [
        p
        for p in _candidates(block.module, args, kwargs, config)
        if _preserves_function(block.module, p, args, kwargs, reference)
    ]
    paired = {layer for p in pairs for layer in p.layers}
    layers = [n for n, m in block.module.named_modules() if n and weight_axes(m) is not None]
    return pairs, [block.prefix() + n for n in layers if n not in paired]
