"""Batch norm folded in models that ``torch.fx`` cannot trace whole (transformers' models: control
flow on their arguments, padding computed from sizes): the batch norm is folded into the layer's
weights, in place, and replaced by an ``nn.Identity`` where it sat (by what it computes after
normalising, for a batch norm with an activation inside: :data:`REMAINDERS`). The model keeps its own
``forward`` and every module its name and attributes (a parent may read a child's ``stride``), so
nothing but the folded batch norms changes.

Two ways to find a layer whose output a batch norm alone takes: the graphs of the largest submodules
that trace (:func:`fold_batch_norms`), and, where none traces, one batch of data run through the
model (:func:`fold_by_running`): a batch norm whose input is the very tensor a layer returned is a
candidate, folded only if the model's outputs on that batch stay the same (a layer output that also
feeds something else changes them)."""

from __future__ import annotations

import copy
import warnings
from collections.abc import Callable
from typing import Any

import torch
from brevitas.fx import GraphModule, symbolic_trace
from brevitas.graph.fixed_point import MergeBatchNorm
from brevitas.graph.utils import get_output_channel_dim
from brevitas.nn.utils import merge_bn
from torch import nn

from quark.torch.quantization.plan import qualified_name


def traced(module: nn.Module) -> GraphModule | None:
    """``module`` traced with Brevitas' ``torch.fx`` backport (its graph transforms take those), or
    None where it does not trace."""
    try:
        with warnings.catch_warnings():  # the backport's own use of deprecated pytree names
            warnings.simplefilter("ignore", FutureWarning)
            return symbolic_trace(module)
    except Exception:  # noqa: BLE001  torch.fx raises many types; the caller tries the children
        return None


BATCH_NORMS = (nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d)


def _holds_batch_norm(module: nn.Module) -> bool:
    return not isinstance(module, BATCH_NORMS) and any(isinstance(m, BATCH_NORMS) for m in module.modules())


def fold_batch_norms(model: nn.Module) -> nn.Module:
    """Fold every batch norm that follows a layer whose output it alone takes, in the largest
    submodules of ``model`` that trace (``model`` itself if it does); returns ``model``, changed in place."""

    def visit(module: nn.Module) -> None:
        if not _holds_batch_norm(module):
            return
        graph = traced(module)
        if graph is None:
            for child in module.children():
                visit(child)
            return
        before = {name for name, m in graph.named_modules() if isinstance(m, BATCH_NORMS)}
        merged = MergeBatchNorm().apply(graph)  # folds into the layers, which the graph shares with module
        after = {name for name, m in merged.named_modules() if isinstance(m, BATCH_NORMS)}
        for name in before - after:
            parent, _, child = name.rpartition(".")
            setattr(module.get_submodule(parent) if parent else module, child, nn.Identity())

    visit(model)
    return model


#: batch norms that compute more after normalising, by qualified class name (no import of their
#: library) -> what stays where one was folded: timm's BatchNormAct2d applies its dropout and activation
REMAINDERS: dict[str, Callable[[nn.Module], nn.Module]] = {
    "timm.layers.norm_act.BatchNormAct2d": lambda bn: nn.Sequential(bn.drop, bn.act),
}


def remainder(bn: nn.Module) -> nn.Module:
    """What replaces ``bn`` once folded: ``nn.Identity``, or what its class computes after normalising."""
    return REMAINDERS.get(qualified_name(type(bn)), lambda _: nn.Identity())(bn)


#: layers a batch norm folds into
FOLDABLE = (nn.Linear, nn.Conv1d, nn.Conv2d, nn.Conv3d, nn.ConvTranspose1d, nn.ConvTranspose2d, nn.ConvTranspose3d)


def fold_by_running(model: nn.Module, run: Callable[[nn.Module], Any]) -> nn.Module:
    """Fold the batch norms left in ``model`` whose input is a layer's output on the batch ``run(model)``
    computes, each kept only if the outputs on that batch stay within float rounding; in place.

    A float32 model is folded and checked in float64 (its inputs cast by a hook), then returned to
    float32: in float32 the rounding a fold brings, amplified by a deep network, passed a fixed
    tolerance on some batch norms of timm's EfficientNet-Lite0 and left them float."""
    floats = {t.dtype for t in (*model.parameters(), *model.buffers()) if t.is_floating_point()}
    if floats != {torch.float32}:
        return _fold_by_running(model, run, rtol=1e-4)
    hook = model.register_forward_pre_hook(_as_float64, with_kwargs=True)
    try:
        return _fold_by_running(model.double(), run, rtol=1e-9)
    finally:
        hook.remove()
        model.float()


def _as_float64(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    cast = lambda t: t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
    return tuple(map(cast, args)), {k: cast(v) for k, v in kwargs.items()}


def _fold_by_running(model: nn.Module, run: Callable[[nn.Module], Any], rtol: float) -> nn.Module:
    names = {m: n for n, m in model.named_modules()}
    produced: dict[int, tuple[nn.Module, torch.Tensor]] = {}
    feeds: dict[nn.Module, torch.Tensor] = {}
    hooks = [m.register_forward_hook(_record(produced)) for m in model.modules() if isinstance(m, FOLDABLE)]
    hooks += [m.register_forward_pre_hook(_record_input(feeds)) for m in model.modules() if isinstance(m, BATCH_NORMS)]
    try:
        with torch.no_grad():
            reference = _flat(run(model))
    finally:
        for hook in hooks:
            hook.remove()
    pairs = [(bn, produced[id(x)][0]) for bn, x in feeds.items() if id(x) in produced]

    def fold(chosen: list[tuple[nn.Module, nn.Module]]) -> Callable[[], None]:
        """Fold ``chosen`` in place; returns what puts them back."""
        undo = []
        for bn, layer in chosen:
            saved, had_bias = copy.deepcopy(layer.state_dict()), layer.bias is not None
            merge_bn(layer, bn, get_output_channel_dim(layer))
            parent, _, child = names[bn].rpartition(".")
            holder = model.get_submodule(parent) if parent else model
            setattr(holder, child, remainder(bn))
            undo.append((holder, child, bn, layer, saved, had_bias))

        def restore() -> None:
            for holder, child, bn, layer, saved, had_bias in reversed(undo):
                setattr(holder, child, bn)
                if not had_bias:
                    layer.bias = None
                layer.load_state_dict(saved)

        return restore

    def unchanged() -> bool:
        with torch.no_grad():
            outputs = _flat(run(model))
        return all(torch.allclose(o, r, rtol=rtol, atol=rtol * float(r.abs().max()) / 10 + 1e-12) for o, r in zip(outputs, reference))

    restore = fold(pairs)  # usually every candidate folds: one check
    if not unchanged():
        restore()
        for pair in pairs:  # else one at a time, keeping those that leave the outputs as they were
            restore = fold([pair])
            if not unchanged():
                restore()  # the layer's output feeds something else too
    return model


def _record(produced: dict) -> Callable:
    def hook(module, inputs, output):
        if isinstance(output, torch.Tensor):
            produced[id(output)] = (module, output)  # the tensor kept: its id stays unique

    return hook


def _record_input(feeds: dict) -> Callable:
    def hook(module, inputs):
        if inputs and isinstance(inputs[0], torch.Tensor):
            feeds.setdefault(module, inputs[0])  # kept alive: a freed tensor's id is given to the next

    return hook


def _flat(output: Any) -> list[torch.Tensor]:
    if isinstance(output, torch.Tensor):
        return [output]
    values = output.values() if isinstance(output, dict) else getattr(output, "__iter__", list)()
    return [t for v in values for t in _flat(v)]
