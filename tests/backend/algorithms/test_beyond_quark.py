"""Algorithms beyond AMD Quark, from Brevitas: Hadamard rotation keeps the float function and
lowers the per-tensor W8A8 error on outlier channels; Qronos beats round-to-nearest."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from _shared import models
from _shared.configs import INT8, U4G16, U8_ASYM, W4C, W4G16, W4T, algo_config
from _shared.models import ONE_LAYER, error, layer_data, outputs
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas import algos
from quark.torch.quantization.config.config import Config, QuantizationConfig


@pytest.mark.parametrize("build", [models.bert, models.llama])
def test_hadamard_rotation_keeps_the_float_function(build):
    model, data = build(), models.token_batches(4)
    reference = outputs(model, data)
    rotated = algos.HadamardRotation().apply(copy.deepcopy(model))
    linears = sum(isinstance(m, nn.Linear) for m in model.modules())
    assert sum(type(m).__name__ == "RotatedModule" for m in rotated.modules()) == linears
    torch.testing.assert_close(outputs(rotated, data), reference, rtol=1e-4, atol=1e-4)


def test_hadamard_rotation_reduces_w8a8_per_tensor_error_on_outliers():
    model, data = models.bert(), models.token_batches(8)
    reference = outputs(model, data)
    rtn = error(quantize(algo_config(INT8, inputs=U8_ASYM), model, data), reference, data)
    rotated = error(quantize(algo_config(INT8, pre=[algos.HadamardRotation()], inputs=U8_ASYM), model, data), reference, data)
    assert rotated < 0.5 * rtn


def test_hadamard_rotation_layers_limits_the_rotation():
    model = models.bert()
    rotated = algos.HadamardRotation(layers=["*.output"]).apply(copy.deepcopy(model))
    wrapped = [n for n, m in rotated.named_modules() if type(m).__name__ == "RotatedModule"]
    assert wrapped == ["layers.0.output", "layers.1.output"]


class _Odd(nn.Module):
    def __init__(self):
        super().__init__()
        self.good, self.odd = nn.Linear(10, 16), nn.Linear(16, 10)  # no Hadamard matrix of size 10

    def forward(self, x):
        return self.odd(self.good(x))


def test_hadamard_rotation_names_the_layers_it_cannot_rotate(caplog):
    with caplog.at_level(logging.WARNING):
        rotated = algos.HadamardRotation().apply(_Odd())
    assert "no Hadamard matrix for the input width of {'good': 10}; left unrotated" in caplog.text
    assert type(rotated.odd).__name__ == "RotatedModule" and type(rotated.good) is nn.Linear


@pytest.mark.parametrize(
    "layers, match",
    [
        (["good"], r"HadamardRotation\.layers: no Hadamard matrix for the input width of \{'good': 10\}"),
        (["missing*"], r"HadamardRotation\.layers \['missing\*'\] match no torch\.nn\.Linear of the model"),
    ],
)
def test_hadamard_rotation_errors_leave_the_model_untouched(layers, match):
    model = _Odd()
    before = copy.deepcopy(model.state_dict())
    config = Config(QuantizationConfig(weight=INT8), pre_quant_opt_config=[algos.HadamardRotation(layers=layers)])
    from quark.torch.extensions.brevitas.api import ModelQuantizer

    with pytest.raises(ValueError, match=match):
        ModelQuantizer(config).quantize_model(model, [torch.randn(2, 10)], progress=False, inplace=True)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
    assert type(model.odd) is nn.Linear


def test_hadamard_rotation_config_checks_and_round_trips():
    with pytest.raises(ValueError, match=r"HadamardRotation\.layers=\[\] is not valid"):
        algos.HadamardRotation(layers=[])
    config = Config(QuantizationConfig(weight=INT8), pre_quant_opt_config=[algos.HadamardRotation(layers=["*.fc"])])
    assert Config.from_dict(config.to_dict()) == config


@pytest.mark.parametrize("weight", [W4G16, U4G16, W4C, W4T])
@pytest.mark.parametrize("act_order", [False, True])
def test_qronos_beats_round_to_nearest(weight, act_order):
    torch.manual_seed(0)
    model, data = ONE_LAYER["linear"]().eval(), layer_data()
    reference = torch.cat([model(x) for x in data]).detach()
    batches = [(x,) for x in data]
    rtn = error(quantize(algo_config(weight), model, data), reference, batches)
    qronos = quantize(algo_config(weight, post=[algos.Qronos(act_order=act_order)]), model, data)
    assert error(qronos, reference, batches) < 0.8 * rtn
    assert not hasattr(qronos[0], "weight_orig")  # Brevitas' copy of the float weight is removed


@pytest.mark.slow  # two transformer blocks, twice: ~3 s
def test_qronos_on_transformer_blocks_beats_round_to_nearest():
    model, data, test = models.bert(), models.token_batches(8), models.token_batches(4, seed=7)
    reference = outputs(model, test)
    rtn = error(quantize(algo_config(U4G16), model, data), reference, test)
    assert error(quantize(algo_config(U4G16, post=[algos.Qronos()]), model, data), reference, test) < 0.9 * rtn


def test_qronos_config_checks_and_needs_data():
    with pytest.raises(ValueError, match=r"Qronos\.alpha=0 is not valid; allowed: a number in \(0, 1\)"):
        algos.Qronos(alpha=0)
    with pytest.raises(ValueError, match=r"Qronos \(Qronos\) needs calibration data"):
        algos.Qronos().apply(object())


