"""GPFA2Q on a layer with one input (AMD Quark's own extension test: ``nn.Linear(1, 10)`` first, the
extension's default int8 weight and input specs, ten batches of one sample): Brevitas' AXE cannot
split a dot product of one term, so that layer is rounded by GPFQ when its single product fits the
accumulator (as AMD Quark's extension rounds every layer on Brevitas >= 0.12), and refused naming the
layer when it does not; the layers with more inputs stay accumulator-aware."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.extensions.brevitas.algos import GPFA2Q, GPFQ

CONFIG = brevitas_config.Config(
    global_quant_config=brevitas_config.QuantizationConfig(
        weight=brevitas_config.QuantizationSpec(), input_tensors=brevitas_config.QuantizationSpec()
    )
)


def _amd_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(1, 10), nn.ReLU(), nn.Linear(10, 1))


def _loader() -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.randn(1, 1, generator=g) for _ in range(10)]


def _quantized() -> nn.Module:
    with pytest.warns(brevitas_api.UncalibratedModelWarning):
        return brevitas_api.ModelQuantizer(CONFIG).quantize_model(_amd_model(), progress=False)


def _layer(model: nn.Module, name: str) -> nn.Module:
    return dict(model.named_modules())[name]  # the extension's default Preprocess traces the model


def _worst_accumulator(weight_ints: torch.Tensor) -> int:
    """The largest |integer dot product| of these weights with any int8 input vector (in [-128, 127])."""
    positive, negative = weight_ints.clamp(min=0).sum(), (-weight_ints).clamp(min=0).sum()
    return int(max(positive * 127 + negative * 128, positive * 128 + negative * 127))


def test_amd_extension_test_model_runs_and_its_one_input_layer_is_rounded_by_gpfq(caplog):
    caplog.set_level("INFO", logger="quark.torch.extensions.brevitas._backend.algorithms.gpxq")
    a2q = GPFA2Q().apply(_quantized(), _loader())
    plain = GPFQ().apply(_quantized(), _loader())
    # the first layer sees the same inputs in both runs: GPFQ's rounding
    assert torch.equal(_layer(a2q, "0").quant_weight().value, _layer(plain, "0").quant_weight().value)
    assert "GPFA2Q: 0 has one input: its int8 x 8-bit product fits the 16-bit accumulator; rounded by GPFQ" in caplog.text
    with torch.no_grad():
        assert torch.isfinite(a2q(torch.randn(4, 1))).all()


def test_the_wider_layer_stays_accumulator_aware():
    """Layer 2 (ten inputs): its integer dot product fits the 16-bit accumulator for every int8 input
    after GPFA2Q, and does not after plain GPFQ (the control: the constraint acted)."""
    a2q = GPFA2Q(accumulator_bit_width=16).apply(_quantized(), _loader())
    plain = GPFQ().apply(_quantized(), _loader())
    assert _worst_accumulator(_layer(a2q, "2").quant_weight().int()) <= 2**15 - 1
    assert _worst_accumulator(_layer(plain, "2").quant_weight().int()) > 2**15 - 1


def test_a_one_input_product_beyond_the_accumulator_is_refused_naming_the_layer():
    with pytest.raises(ValueError, match=r"GPFA2Q: 0 has one input: .* up to 16384, beyond a 15-bit accumulator"):
        GPFA2Q(accumulator_bit_width=15).apply(_quantized(), _loader())
