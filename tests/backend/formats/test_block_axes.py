"""Activation blocks of a features-last layer written ``ch_axis=1`` (AMD Quark's LLM specs write the
features of a 2-D Linear input so): accepted, bit for bit the layer ``ch_axis=-1`` gives, and refused
when the layer runs on a tensor of more dimensions, where axis 1 is not the features, naming the layer
and the shape."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, OCP_MXFP4Spec, OCP_MXINT8Spec, QuantizationConfig


def _quantize(model: nn.Module, spec_helper, ch_axis: int, data: list[torch.Tensor]) -> nn.Module:
    spec = spec_helper(ch_axis=ch_axis, is_dynamic=True).to_quantization_spec()
    config = Config(QuantizationConfig(input_tensors=spec, weight=spec_helper(ch_axis=-1).to_quantization_spec()))
    return ModelQuantizer(config).quantize_model(model, data, progress=False)


@pytest.mark.parametrize("helper", [OCP_MXFP4Spec, OCP_MXINT8Spec], ids=lambda h: h.__name__)
def test_ch_axis_1_on_a_2d_linear_input_is_the_feature_axis(helper):
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(64, 32), nn.ReLU(), nn.Linear(32, 8))
    x = torch.randn(5, 64) * 3
    one, last = (_quantize(model, helper, axis, [x]) for axis in (1, -1))
    with torch.no_grad():
        y1, y2 = one(x), last(x)
    assert torch.equal(y1, y2)
    assert not torch.equal(y1, model(x))  # the blocks did quantize the input


def test_ch_axis_1_on_a_3d_input_is_refused_naming_the_layer_and_the_shape():
    torch.manual_seed(0)
    qmodel = _quantize(nn.Sequential(nn.Linear(64, 32)), OCP_MXFP4Spec, 1, [torch.randn(2, 64)])
    with pytest.raises(ValueError, match=r"0: input_tensors mx fp4 blocks along ch_axis=1 name the features of a 2-D "
                                         r"tensor; this one has 3 dimensions \(shape \(2, 4, 64\)\).*write ch_axis=-1"):  # fmt: skip
        qmodel(torch.randn(2, 4, 64))
    assert qmodel(torch.randn(3, 64)).shape == (3, 32)  # 2-D inputs still run
