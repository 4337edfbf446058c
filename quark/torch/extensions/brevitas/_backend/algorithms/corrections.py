"""The Brevitas extension's ``BiasCorrection`` and ``CalibrateBatchNorm`` over the calibration data.

``BiasCorrection`` is empirical bias correction (Nagel et al. 2019, section 4.2) written here
rather than Brevitas' ``bias_correction_mode``, which takes the float reference of each layer on
its already quantized input (so corrects the layer's own weight error only) and assumes layerwise
quantizers (graph mode's activation quantizers have no ``is_quant_enabled``). What loses accuracy
at 4 bits is the mean shift the activation quantizers add: a ReLU output whose mass lies below
half a step rounds to 0 more often than up, and a global average pool keeps exactly that shift
while averaging the noise away (measured: ``benchmarks/first_hour.py``). So the reference here is
the same model with every quantizer off, and the layers are corrected one after another in the
order they run, each against the output of the quantized model corrected so far: one pass over
the calibration data for the reference and one per layer.
"""

from __future__ import annotations

from typing import Any

import torch
from brevitas.graph.calibrate import norm_correction_mode
from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer
from torch import nn

from quark.torch.extensions.brevitas._backend.data import (
    CalibrationData,
    ForwardStopped,
    calibration_data,
    run_batch,
)
from quark.torch.extensions.brevitas._backend.evaluation import in_eval, plain
from quark.torch.extensions.brevitas._backend.switches import off
from quark.torch.quantization.config.algorithms import (
    BiasCorrection,
    CalibrateBatchNorm,
)


def _single_process(desc: str) -> None:
    if torch.distributed.is_available() and torch.distributed.is_initialized():
        raise RuntimeError(f"{desc} runs in a single process: each rank would correct differently (apply it before DDP)")


class _ChannelMeans:
    """Per-channel means of layers' outputs (channels: dim 1 of a convolution's, the last of a linear's)."""

    def __init__(self, stop: bool = False) -> None:
        self.sums: dict[str, torch.Tensor] = {}
        self.counts: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.order: list[str] = []
        self.batches = 0
        self.stop = stop  # end each pass once a layer is recorded (nothing after it is needed)

    def hook(self, name: str):
        def record(layer: nn.Module, _inputs: Any, output: Any) -> None:
            out = plain(output).detach().double()
            channels = out.reshape(-1, out.shape[-1]) if isinstance(layer, nn.Linear) else out.transpose(0, 1).flatten(1).T
            if name not in self.sums:
                self.order.append(name)
                self.sums[name], self.counts[name], self.calls[name] = channels.sum(0), 0, 0
            else:
                self.sums[name] += channels.sum(0)
            self.counts[name] += channels.shape[0]
            self.calls[name] += 1
            if self.stop:
                raise ForwardStopped

        return record

    def mean(self, name: str) -> torch.Tensor:
        return self.sums[name] / self.counts[name]


def _means(model: nn.Module, layers: dict[str, nn.Module], data: CalibrationData, desc: str, stop: bool = False) -> _ChannelMeans:
    """The per-channel means of ``layers``' outputs over ``data``; ``stop``: each batch's pass ends at
    the (one) layer's output, the layers after it not run."""
    means = _ChannelMeans(stop)
    hooks = [layer.register_forward_hook(means.hook(name)) for name, layer in layers.items()]
    try:
        for batch in data.passes(desc):
            means.batches += 1
            try:
                run_batch(model, batch)
            except ForwardStopped:
                pass
    finally:
        for hook in hooks:
            hook.remove()
    return means


def _weighted_layers(model: nn.Module) -> dict[str, nn.Module]:
    return {name: m for name, m in model.named_modules() if isinstance(m, QuantWeightBiasInputOutputLayer)}


def _add_bias(layer: nn.Module, value: torch.Tensor) -> None:
    layer.register_parameter("bias", nn.Parameter(value.to(device=layer.weight.device, dtype=layer.weight.dtype)))


def _shift(layer: nn.Module, shift: torch.Tensor) -> None:
    """Add ``shift`` to the layer's output per channel: through its bias, which it gets if it has
    none, or, with batch norm folded in during QAT, the parameter the folded bias reads
    (``FoldedBatchNorm.shift_output``, looked up by name: the folding module imports this package)."""
    shift_output = getattr(layer, "shift_output", None)
    if shift_output is not None and shift_output(shift):
        return
    if layer.bias is None:
        _add_bias(layer, shift)
    else:
        layer.bias.add_(shift.to(layer.bias))


@torch.no_grad()
def add_biases(model: nn.Module) -> nn.Module:
    """A zero bias on every weighted layer without one: the parameters ``bias_correction`` adds."""
    for layer in _weighted_layers(model).values():
        _shift(layer, torch.zeros(layer.weight.shape[1 if getattr(layer, "transposed", False) else 0]))
    return model


@torch.no_grad()
def bias_correction(config: BiasCorrection, model: nn.Module, data: Any) -> nn.Module:
    """Each weighted layer's bias absorbs the mean shift of its output that quantization (of its
    weight and of everything before it) causes; a layer without a bias gets one (with batch norm
    folded in during QAT, its beta takes it: ``FoldedBatchNorm.shift_output``)."""
    _single_process("BiasCorrection")
    data = calibration_data(data)
    layers = _weighted_layers(model)
    with in_eval(model):
        with off(model):
            reference = _means(model, layers, data, "BiasCorrection: float reference")
        for name in reference.order:  # the order the layers run in
            layer = layers[name]
            # a layer run once per batch is measured by passes that end at it (a shared one, run
            # more often, by whole passes)
            once = reference.calls[name] == reference.batches
            quantized = _means(model, {name: layer}, data, f"BiasCorrection: {name}", stop=once)
            _shift(layer, reference.mean(name) - quantized.mean(name))
    return model


def calibrate_batch_norm(config: CalibrateBatchNorm, model: nn.Module, data: Any) -> nn.Module:
    _single_process("CalibrateBatchNorm")
    with in_eval(model), torch.no_grad(), norm_correction_mode(model):
        for batch in calibration_data(data).passes("CalibrateBatchNorm"):
            run_batch(model, batch)
    return model
