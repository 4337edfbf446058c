"""Shared pieces of the robustness tests: small models, configs and a snapshot of a model's state."""

from __future__ import annotations

import torch
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType
from quark.torch.quantization.observer import PerChannelMinMaxObserver

A8 = QuantizationSpec(dtype=Dtype.int8)
W8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, qscheme=QSchemeType.per_channel, ch_axis=0)
W8A8 = Config(global_quant_config=QuantizationConfig(weight=W8, input_tensors=A8, output_tensors=A8))


def mlp(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))


def batches(n: int = 3, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 12, generator=g) for _ in range(n)]


def quantize(model: nn.Module, data, config: Config = W8A8, **options) -> nn.Module:
    return ModelQuantizer(config).quantize_model(model, data, progress=False, **options)


def snapshot(model: nn.Module) -> dict:
    """What an error must leave as it was: parameters and buffers, module tree, modes, attributes."""
    return {
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "modules": [(name, type(m)) for name, m in model.named_modules()],
        "training": [m.training for m in model.modules()],
        "attributes": sorted(vars(model)),
    }


def assert_unchanged(before: dict, model: nn.Module) -> None:
    after = snapshot(model)
    assert after["modules"] == before["modules"]
    assert after["training"] == before["training"]
    assert after["attributes"] == before["attributes"]
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        assert torch.equal(after["state"][key], value), key
