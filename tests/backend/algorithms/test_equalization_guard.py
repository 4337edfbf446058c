"""ActivationEqualization equalizes only the layers where it lowers the quantized output error (issue 22).

The case: a GELU-like input whose few large channels also meet large weights, symmetric int8 per
tensor (the Brevitas extension's default specs), as all-MiniLM-L6-v2's FFN down-projections: the
equalization scales lower the weight error and raise the activation error more.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas import config as bcfg
from quark.torch.extensions.brevitas._backend.algorithms import equalization
from quark.torch.extensions.brevitas.algos import ActivationEqualization
from quark.torch.extensions.brevitas.api import AlgorithmWorseWarning, ModelQuantizer

SPEC = bcfg.QuantizationSpec()  # int8, symmetric, per tensor, float scales


def _model() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(512, 64))
    with torch.no_grad():
        model[0].weight.normal_(0, 0.02)
        model[0].weight[:, :4] *= 25
    return model


def _batch(i: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(i)
    x = torch.nn.functional.gelu(torch.randn(64, 512, generator=g))
    x[:, :4] = torch.rand(64, 4, generator=g) * 20
    return x


DATA = [_batch(i) for i in range(4)]


def _config() -> bcfg.Config:
    return bcfg.Config(
        global_quant_config=bcfg.QuantizationConfig(weight=SPEC, input_tensors=SPEC),
        pre_quant_opt_config=[ActivationEqualization()],
    )


def test_the_guard_leaves_a_layer_unequalized_where_the_scales_hurt():
    quantizer = ModelQuantizer(_config())
    qmodel = quantizer.quantize_model(_model(), DATA, progress=False)
    assert not any(type(m).__name__ == "EqualizedModule" for m in qmodel.modules())
    check = quantizer.algorithm_check
    assert check.error_with == check.error_without  # the same model as round-to-nearest
    assert "left unchanged" in str(check)


def test_without_the_guard_the_same_scales_make_it_worse_and_the_check_says_so(monkeypatch):
    monkeypatch.setattr(equalization, "_harmful_layers", lambda *args: [])
    quantizer = ModelQuantizer(_config())
    with pytest.warns(AlgorithmWorseWarning, match=r"ActivationEqualization increased the output error"):
        qmodel = quantizer.quantize_model(_model(), DATA, progress=False)
    assert any(type(m).__name__ == "EqualizedModule" for m in qmodel.modules())
    assert quantizer.algorithm_check.error_with > 1.1 * quantizer.algorithm_check.error_without


@pytest.mark.parametrize("bits, signed, symmetric", [(8, True, True), (8, False, False), (4, True, False)])
def test_the_guards_grid_follows_the_formula(bits, signed, symmetric):
    g = np.random.default_rng(bits)
    x = g.standard_normal(1000) * 3 + (0 if signed else 2)
    lo, hi = min(x.min(), 0.0), max(x.max(), 0.0)
    qmin, qmax = (-(2 ** (bits - 1)), 2 ** (bits - 1) - 1) if signed else (0, 2**bits - 1)
    if symmetric:
        step, zero = max(-lo, hi) / ((qmax - qmin) / 2), 0.0
    else:
        step = (hi - lo) / (qmax - qmin)
        zero = np.round(qmin - lo / step)
    expected = (np.clip(np.round(x / step) + zero, qmin, qmax) - zero) * step
    got = equalization._fake(torch.from_numpy(x), torch.tensor(lo), torch.tensor(hi), bits, signed, symmetric)
    np.testing.assert_array_equal(got.numpy(), expected)
