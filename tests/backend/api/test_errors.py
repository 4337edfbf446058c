"""User-facing errors of ModelQuantizer and its helpers that other files do not cover."""

import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from _reference import quant as R
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype


def test_product_scaled_bias_needs_integer_input_and_weight():
    config = Config(
        global_quant_config=QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.fp8_e4m3),
            input_tensors=QuantizationSpec(dtype=Dtype.int8),
            bias=QuantizationSpec(dtype=Dtype.int32),
        )
    )
    with pytest.raises(ValueError, match=r"module '0' \(Linear\): a bias scaled by input scale x weight scale needs integer weight, got a float format"):
        ModelQuantizer(config).quantize_model(nn.Sequential(nn.Linear(8, 4)), [torch.randn(2, 8)], progress=False)


@pytest.mark.parametrize("count", [0, -3])
def test_num_calib_batches_must_be_positive(count):
    config = Config(global_quant_config=QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.int8)))
    with pytest.raises(ValueError, match=rf"num_calib_batches={count}: must be a positive integer or None"):
        ModelQuantizer(config).quantize_model(nn.Sequential(nn.Linear(8, 4)), [torch.randn(2, 8)], num_calib_batches=count)


class DataDependent(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(4, 4)

    def forward(self, x):
        return self.fc(x) if x.sum() > 0 else -self.fc(x)  # torch.fx cannot trace this branch


def test_untraceable_model_says_how_to_skip_preprocess():
    config = bcfg.Config(global_quant_config=bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec()))
    with pytest.raises(RuntimeError, match=r"Preprocess could not prepare DataDependent: .*pre_quant_opt_config=\[\]"):
        ModelQuantizer(config).quantize_model(DataDependent())
    no_pre = bcfg.Config(global_quant_config=bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec()), pre_quant_opt_config=[])
    model = DataDependent()
    x = torch.ones(1, 4)  # sum > 0: the fc branch
    out = ModelQuantizer(no_pre).quantize_model(model)(x)
    assert out.shape == (1, 4)
    # the extension's default weight spec, from the formula: int8, symmetric, per tensor
    weight = R.fake_quant(model.fc.weight.detach(), 8, True, True)[1]
    torch.testing.assert_close(out, F.linear(x, weight, model.fc.bias), atol=0, rtol=0)


@pytest.mark.slow  # a fresh interpreter importing torch
def test_unsupported_brevitas_version_is_named_at_import():
    code = (
        "import importlib.metadata as m; real = m.version; "
        "m.version = lambda name: '0.11.0' if name == 'brevitas' else real(name); "
        "import quark.torch.extensions.brevitas.api"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert result.returncode != 0
    assert "brevitas 0.11.0 is installed; quark.torch.extensions.brevitas supports brevitas 0.13.x" in result.stderr
