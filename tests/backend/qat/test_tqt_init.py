"""TQT threshold initialisation through quantize_model: weights and activations initialised by
``_3SD`` / ``_LL_J`` get the thresholds of ``tests/_reference/tqt.py`` (the functions and
observers themselves: ``tests/config/test_tqt_init.py``)."""

from __future__ import annotations

import math

import pytest
import torch
from _reference import tqt as R
from _shared.numerics import samples
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth


def _tqt(dtype: Dtype, init: TQTThresholdInitMeth | None) -> QuantizationSpec:
    return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init))


def _weight_threshold(weight: torch.Tensor, dtype: Dtype, init) -> float:
    model = nn.Sequential(nn.Linear(weight.shape[1], weight.shape[0], bias=False))
    with torch.no_grad():
        model[0].weight.copy_(weight)
    cfg = Config(global_quant_config=QuantizationConfig(weight=_tqt(dtype, init)))
    q = ModelQuantizer(cfg).quantize_model(model, progress=False)
    return 2.0 ** float(q[0].weight_quant.tensor_quant.scaling_impl.value.detach())


def _small_weight(seed: int = 9) -> torch.Tensor:
    w = torch.randn(32, 64, generator=torch.Generator().manual_seed(seed)) * 0.1
    amax = float(w.abs().max())
    assert math.log2(amax) != math.ceil(math.log2(amax))  # not a power of two
    return w


def test_weight_init_3sd_matches_reference():
    w = _small_weight()
    assert _weight_threshold(w, Dtype.int8, TQTThresholdInitMeth._3SD) == pytest.approx(R.three_sd(w), rel=1e-6)


def test_weight_init_default_is_abs_max():
    w = _small_weight()
    assert _weight_threshold(w, Dtype.int4, None) == pytest.approx(float(w.abs().max()), rel=1e-6)


@pytest.mark.parametrize(
    "dtype", [Dtype.int8, Dtype.int4, Dtype.int2], ids=["int8", "int4", "int2"]
)
def test_weight_init_ll_j_small_tensor_is_sane(dtype):
    w = _small_weight()
    amax = float(w.abs().max())
    t = _weight_threshold(w, dtype, TQTThresholdInitMeth._LL_J)
    # read back as 2 ** v with v = log2(t) stored in float32: equal to amax up to float32 rounding
    assert 0.25 * amax <= t <= amax * (1 + 1e-6), (t, amax)


def test_activation_init_3sd_over_calibration_batches():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 4))
    batches = [samples("laplace", 16 * n, seed=10 + n).reshape(n, 16) for n in (8, 32, 5)]
    cfg = Config(global_quant_config=QuantizationConfig(input_tensors=_tqt(Dtype.int8, TQTThresholdInitMeth._3SD)))
    q = ModelQuantizer(cfg).quantize_model(model, batches, progress=False)
    v = q[0].input_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value
    assert 2.0 ** float(v.detach()) == pytest.approx(R.three_sd(torch.cat(batches)), rel=1e-6)


@pytest.mark.parametrize(
    "init",
    [None, TQTThresholdInitMeth._3SD, TQTThresholdInitMeth._LL_J],
    ids=["minmax", "3sd", "ll_j"],
)
def test_weight_init_all_zero_weight_gives_finite_threshold(init):
    """A zero-initialised layer (common for last layers / residual branches) must stay trainable."""
    t = _weight_threshold(torch.zeros(4, 8), Dtype.int8, init)
    assert t > 0 and math.isfinite(math.log2(t)), t
