"""The Brevitas extension's ``ActivationEqualization``: Brevitas' ``activation_equalization_mode``
on the float model, statistics from the calibration data (as Quark's extension does), with a guard.

Why the guard (measured on all-MiniLM-L6-v2, W8A8 per tensor, issue 22): Brevitas' layerwise
equalization puts x' = x * s in front of every Linear and W' = W / s into it, with
s_j = max|W_:j|^(1 - alpha) / max|X_j|^alpha per input channel, whatever the quantizers are. On the
FFN down-projections (their input is GELU's output: a long positive tail in a few channels, -0.17 at
most below zero) it moves range from the activations into the weights as intended (weight-only
output error of layer 0: 1.9e-2 -> 6.9e-3), but raises the activation error more than that when the
activations are symmetric int8 (6.0e-3 -> 2.9e-2; both together 2.7e-2 -> 3.5e-2): the per-tensor
step shrinks by 1.8x, while the channels whose weights were divided by s < 1 carry the step's error
into the output 3 to 10 times larger. With asymmetric uint8 activations the same scales help (both
2.2e-2 -> 1.4e-2). Equalizing every layer took the sentence-embedding cosine from 0.949 to 0.921
with the extension's default (symmetric) specs; equalizing only the down-projections, to 0.920.

The guard: when the algorithm knows each layer's resolved specs (``plans``, given by
``quantize_model``), it estimates each Linear's quantized output error on a sample of its
calibration inputs with and without the scales (the specs' integer grids: per-tensor activations
on the calibration range, symmetric or not; weights per tensor or per channel) and equalizes only
the layers where the error goes down. ``alpha`` is used as given wherever it is applied. Layers whose
specs are not integer grids (minifloats, blocks) are equalized as Brevitas does.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any

import torch
from brevitas.fx import GraphModule
from brevitas.graph.equalize import activation_equalization_mode
from torch import fx, nn

from quark.torch.extensions.brevitas._backend.data import calibration_data, run_batch
from quark.torch.quantization.config.algorithms import ActivationEqualization
from quark.torch.quantization.config.spec import Role
from quark.torch.quantization.config.type import QSchemeType
from quark.torch.quantization.tensor_quant import Format

logger = logging.getLogger(__name__)

#: calibration rows kept per layer to estimate its output error (evenly spaced over each batch)
SAMPLE_ROWS = 1024
#: Brevitas' threshold below which a channel is not equalized (``brevitas.graph.equalize.EPSILON``)
EPSILON = 1e-9


def activation_equalization(
    config: ActivationEqualization, model: nn.Module, data: Any, plans: Mapping[str, Any] | None = None
) -> nn.Module:
    if not config.is_layerwise and not isinstance(model, (GraphModule, fx.GraphModule)):
        raise ValueError(
            "ActivationEqualization(is_layerwise=False) folds scales through the traced graph: it needs the torch.fx "
            f"model that Preprocess() makes (put Preprocess() before it), got {type(model).__name__}"
        )
    was_training = model.training
    model.eval()
    skipped = _harmful_layers(config.alpha, model, data, plans) if config.is_layerwise and plans else []
    if skipped:
        logger.info(
            "ActivationEqualization: %d layers left unequalized, where the scales increased the layer's quantized "
            "output error on the calibration data: %s",
            len(skipped),
            ", ".join(skipped),
        )
    with (
        torch.no_grad(),
        activation_equalization_mode(
            model,
            alpha=config.alpha,
            layerwise=config.is_layerwise,
            add_mul_node=config.is_layerwise,
            blacklist_layers=skipped or None,
        ),
    ):
        for batch in calibration_data(data).passes("ActivationEqualization"):
            run_batch(model, batch)
    return model.train(was_training)


def _guarded(plan: Any) -> bool:
    specs = getattr(plan, "specs", {})
    act, weight = specs.get(Role.input_tensors), specs.get(Role.weight)
    return (
        act is not None
        and weight is not None
        and act.format is Format.integer
        and weight.format is Format.integer
        and act.qscheme is QSchemeType.per_tensor
        and weight.qscheme in (QSchemeType.per_tensor, QSchemeType.per_channel)
    )


class _Inputs:
    """Per-channel min, max and max |x| of a Linear's input over the calibration data, and a sample of rows."""

    def __init__(self) -> None:
        self.low = self.high = None
        self.rows: list[torch.Tensor] = []
        self.count = 0

    def __call__(self, module: nn.Module, inputs: tuple) -> None:
        x = inputs[0].detach().reshape(-1, inputs[0].shape[-1]).double()
        low, high = x.amin(0), x.amax(0)
        self.low = low if self.low is None else torch.minimum(self.low, low)
        self.high = high if self.high is None else torch.maximum(self.high, high)
        step = max(1, x.shape[0] // max(1, SAMPLE_ROWS // 8))
        self.rows.append(x[::step])
        self.count += 1


@torch.no_grad()
def _harmful_layers(alpha: float, model: nn.Module, data: Any, plans: Mapping[str, Any]) -> list[str]:
    """The Linear layers whose quantized output error the equalization scales would increase."""
    layers = {
        name: m for name, m in model.named_modules() if isinstance(m, nn.Linear) and _guarded(plans.get(name))
    }
    stats = {name: _Inputs() for name in layers}
    handles = [layers[name].register_forward_pre_hook(stats[name]) for name in layers]
    try:
        for batch in calibration_data(data).passes("ActivationEqualization (guard)"):
            run_batch(model, batch)
    finally:
        for handle in handles:
            handle.remove()
    harmful = []
    for name, layer in layers.items():
        seen = stats[name]
        if seen.low is None:
            continue
        x = torch.cat(seen.rows)[: SAMPLE_ROWS * 4]
        w = layer.weight.detach().double()
        act_range = torch.maximum(seen.high, -seen.low)
        w_range = w.abs().amax(0)
        keep = (act_range > EPSILON) & (w_range > EPSILON)
        scale = torch.where(keep, w_range.pow(1 - alpha) / act_range.pow(alpha), torch.ones_like(w_range))
        plan = plans[name]
        before = _output_error(x, w, seen.low, seen.high, torch.ones_like(scale), plan)
        after = _output_error(x, w, seen.low, seen.high, scale, plan)
        if after > before:
            harmful.append(name)
    return harmful


def _output_error(x, w, low, high, scale, plan) -> float:
    """Relative error of (x * s) W'^T, both on the specs' integer grids (W' = W / s), against x W^T."""
    reference = x @ w.T
    act, weight = plan.specs[Role.input_tensors], plan.specs[Role.weight]
    lo = torch.minimum((low * scale).min(), torch.tensor(0.0, dtype=x.dtype))
    hi = torch.maximum((high * scale).max(), torch.tensor(0.0, dtype=x.dtype))
    xq = _fake(x * scale, lo, hi, act.bit_width, act.signed, act.symmetric)
    ws = w / scale
    if weight.qscheme is QSchemeType.per_channel:
        wlo, whi = ws.amin(1, keepdim=True).clamp(max=0), ws.amax(1, keepdim=True).clamp(min=0)
    else:
        wlo, whi = ws.min().clamp(max=0), ws.max().clamp(min=0)
    wq = _fake(ws, wlo, whi, weight.bit_width, weight.signed, weight.symmetric)
    return float(((xq @ wq.T - reference) ** 2).sum() / (reference**2).sum().clamp(min=1e-30))


def _fake(x, lo, hi, bits: int, signed: bool, symmetric: bool):
    """x on the integer grid of [lo, hi]: symmetric (zero point 0, scale amax / ((qmax - qmin) / 2))
    or asymmetric (scale (hi - lo) / (qmax - qmin), integer zero point), round half to even."""
    qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if symmetric:
        amax = torch.maximum(-lo, hi)
        step = (amax / ((qmax - qmin) / 2)).clamp(min=1e-30)
        zero = torch.zeros_like(step)
    else:
        step = ((hi - lo) / (qmax - qmin)).clamp(min=1e-30)
        zero = torch.round(qmin - lo / step)
    return (torch.clamp(torch.round(x / step) + zero, qmin, qmax) - zero) * step
