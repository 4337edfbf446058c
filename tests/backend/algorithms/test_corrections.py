"""``BiasCorrection`` (``_backend/algorithms/corrections.py``) against its definition: after it, every
weighted layer's per-channel output mean on the calibration data equals the float model's (each layer
corrected in order against the model corrected so far; later corrections do not move earlier
outputs), measured here with whole passes where the correction ends each pass at the measured layer."""

from __future__ import annotations

import torch
from _shared.quantize import quantize
from brevitas.nn.quant_layer import QuantWeightBiasInputOutputLayer
from torch import nn

from quark.torch.extensions.brevitas.presets import finn


def _means(model: nn.Module, data: list[torch.Tensor], kinds: tuple[type, ...]) -> dict[str, torch.Tensor]:
    """Per-channel mean of the output of each layer of ``kinds`` over ``data`` (float64, whole passes)."""
    sums: dict[str, list[torch.Tensor]] = {}

    def hook(name):
        def record(layer, _inputs, output):
            out = (output.value if hasattr(output, "value") else output).detach().double()
            flat = out.reshape(-1, out.shape[-1]) if isinstance(layer, nn.Linear) else out.transpose(0, 1).flatten(1).T
            sums.setdefault(name, []).append(flat)

        return record

    layers = {n: m for n, m in model.named_modules() if isinstance(m, kinds)}
    hooks = [layer.register_forward_hook(hook(name)) for name, layer in layers.items()]
    with torch.no_grad():
        for batch in data:
            model(batch)
    for h in hooks:
        h.remove()
    return {name: torch.cat(parts).mean(0) for name, parts in sums.items()}


def test_every_layer_output_mean_equals_the_float_models_after_bias_correction():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(), nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(8, 4),
    ).eval()  # fmt: skip
    generator = torch.Generator().manual_seed(1)
    data = [torch.rand(8, 3, 8, 8, generator=generator) for _ in range(3)]
    qmodel = quantize(finn(act_bits=3), model, data)  # presets.finn corrects biases by default

    quantized = _means(qmodel, data, (QuantWeightBiasInputOutputLayer,))
    reference = _means(model, data, (nn.Conv2d, nn.Linear))  # the float model, as it was

    assert len(quantized) == 3 and quantized.keys() == reference.keys()
    for name in quantized:
        torch.testing.assert_close(quantized[name], reference[name], rtol=0, atol=1e-5, msg=lambda m, name=name: f"{name}: {m}")
