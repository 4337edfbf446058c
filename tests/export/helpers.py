"""Shared helpers of the export tests: specs, configs, quantize(), graph readers, state snapshots."""

from __future__ import annotations

import numpy as np
import onnx
import torch
from onnx import numpy_helper
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.observer import PerChannelMinMaxObserver, PerTensorMinMaxObserver

A8 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver)
A8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
W8 = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, qscheme=QSchemeType.per_channel, ch_axis=0
)
W8_POF2 = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)
B32 = QuantizationSpec(dtype=Dtype.int32)


def config(**roles) -> Config:
    return Config(global_quant_config=QuantizationConfig(**roles))


W8A8 = config(weight=W8, input_tensors=A8)
W8A8_POF2 = config(weight=W8_POF2, input_tensors=A8_POF2, bias=B32)


def quantize(cfg: Config, model: nn.Module, batches) -> nn.Module:
    return ModelQuantizer(cfg).quantize_model(model, batches, progress=False)


def mlp() -> nn.Module:
    return nn.Sequential(nn.Linear(12, 16), nn.ReLU(), nn.Linear(16, 4))


def mlp_batches(n: int = 4, seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(8, 12, generator=g) for _ in range(n)]


def quantized_mlp(cfg: Config = W8A8, seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    return quantize(cfg, mlp(), mlp_batches(seed=seed))


def op_types(path) -> list[str]:
    return [n.op_type for n in onnx.load(str(path)).graph.node]


def initializers(path) -> dict[str, np.ndarray]:
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(str(path)).graph.initializer}


def snapshot(model: nn.Module) -> dict:
    """Everything an export must leave unchanged."""
    return {
        "training": model.training,
        "state": {k: v.detach().clone() for k, v in model.state_dict().items()},
        "requires_grad": {k: p.requires_grad for k, p in model.named_parameters()},
        "modules": [(n, type(m).__name__) for n, m in model.named_modules()],
        "export_mode": [getattr(m, "export_mode", None) for m in model.modules()],
    }


def assert_same_state(before: dict, model: nn.Module) -> None:
    after = snapshot(model)
    assert after["training"] == before["training"]
    assert after["requires_grad"] == before["requires_grad"]
    assert after["modules"] == before["modules"]
    assert after["export_mode"] == before["export_mode"]
    assert after["state"].keys() == before["state"].keys()
    for key, value in before["state"].items():
        torch.testing.assert_close(after["state"][key], value, atol=0, rtol=0)
