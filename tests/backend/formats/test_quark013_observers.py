"""AMD Quark 0.13's observers, against their formulas: the power-of-two vote (``PerTensorPowOf2MinMaxObserver``,
``PerTensorPowOf2MinMSEObserver``, ``PerChannelPowOf2MinMaxObserver``), LSQ's initial scale and scaled
gradient (``LSQObserver``), torch's histogram search (``PerTensorHistogramObserverPro``) and
``TQTObserver``. Scales that are powers of two compare exactly."""

from __future__ import annotations

import math
from collections import Counter

import pytest
import torch
from _shared.configs import layer_config
from _shared.models import qat_model
from _shared.quantize import assert_trains, quantize
from torch import nn

from quark.torch.quantization.config.config import QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType, TQTThresholdInitMeth
from quark.torch.quantization.observer import (
    LSQObserver,
    PerChannelPowOf2MinMaxObserver,
    PerTensorHistogramObserverPro,
    PerTensorMinMaxObserver,
    PerTensorPowOf2MinMaxObserver,
    PerTensorPowOf2MinMSEObserver,
    TQT3SDObserver,
    TQTObserver,
)
from quark.torch.quantization.tensor_quant import normalise


def _act(observer, dtype=Dtype.int8, **kw) -> QuantizationSpec:
    return QuantizationSpec(dtype=dtype, observer_cls=observer, qscheme=QSchemeType.per_tensor, is_dynamic=False, **kw)


def _input_scale(spec: QuantizationSpec, batches: list[torch.Tensor]) -> torch.Tensor:
    model = quantize(layer_config(input_tensors=spec), nn.Sequential(nn.Linear(batches[0].shape[-1], 4)), batches)
    return model[0].input_quant(batches[0]).scale


def _pof2(s: float) -> float:
    return 2.0 ** round(math.log2(s))


def test_pof2_minmax_keeps_the_scale_most_batches_chose():
    """Batch maxima 1.0, 1.1 and 3.0 on int8: scales 2^round(log2(2 amax / 255)) = 2^-7, 2^-7, 2^-5;
    Quark keeps the most common, 2^-7 (the plain MinMax observer takes the overall maximum: 2^-5)."""
    batches = [torch.full((2, 8), v) * torch.tensor([1.0, -1.0]).repeat(4)[None] for v in (1.0, 1.1, 3.0)]
    votes = Counter(_pof2(2 * float(b.abs().max()) / 255) for b in batches)
    assert votes.most_common(1)[0][0] == 2.0**-7
    assert _input_scale(_act(PerTensorPowOf2MinMaxObserver, scale_type=ScaleType.float), batches).item() == 2.0**-7
    assert _input_scale(_act(PerTensorMinMaxObserver, scale_type=ScaleType.pof2), batches).item() == 2.0**-5


def _mse_choice(x: torch.Tensor, qmin: int = -128, qmax: int = 127) -> float:
    """Quark's MinMSE on one batch: of 2^(k-2) .. 2^(k+2) around the MinMax power of two, the least
    squared error (round half to even, clamped), the first among equals."""
    start = _pof2(2 * float(x.abs().max()) / (qmax - qmin))
    errors = []
    for shift in (-2, -1, 0, 1, 2):
        s = start * 2.0**shift
        q = torch.clamp(torch.round(x.double() / s), qmin, qmax) * s
        errors.append((float(((q - x.double()) ** 2).sum()), s))
    return min(errors, key=lambda e: e[0])[1]


def test_pof2_minmse_votes_over_each_batch_best_power_of_two():
    g = torch.Generator().manual_seed(0)
    batches = [torch.randn(16, 32, generator=g) * s for s in (1.0, 1.0, 4.0)]
    batches[0][0, 0] = batches[1][0, 0] = 20.0  # an outlier
    choices = [_mse_choice(b) for b in batches]
    expected = Counter(choices).most_common(1)[0][0]
    minmax = [_pof2(2 * float(b.abs().max()) / 255) for b in batches]
    assert choices != minmax  # the search changes some batch's scale: the case is not vacuous
    assert _input_scale(_act(PerTensorPowOf2MinMSEObserver), batches).item() == expected


def test_pof2_minmse_weights_take_the_best_power_of_two_of_the_weight():
    """Quark's vision example (--mse_powof2) gives weights and biases PerTensorPowOf2MinMSEObserver: the
    search runs on the tensor itself."""
    torch.manual_seed(0)
    layer = nn.Linear(64, 8)
    with torch.no_grad():  # max |w| = 1.4 x 127.5 x 2^-6: MinMax's power of two rounds down to 2^-6 and clips
        layer.weight.mul_(1.4 * 127.5 * 2.0**-6 / layer.weight.abs().max())
    w = layer.weight.data.clone()
    spec = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorPowOf2MinMSEObserver, symmetric=True)
    qlayer = quantize(layer_config(weight=spec, bias=spec), nn.Sequential(layer))[0]
    assert _mse_choice(w) != _pof2(2 * float(w.abs().max()) / 255)  # the search moves the scale: not vacuous
    assert qlayer.quant_weight().scale.item() == _mse_choice(w)
    assert qlayer.quant_bias().scale.item() == _mse_choice(layer.bias.data)


def test_pof2_per_channel_minmax_weights_are_per_channel_powers_of_two():
    torch.manual_seed(0)
    layer = nn.Linear(16, 4)
    w = layer.weight.data.clone()
    spec = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerChannelPowOf2MinMaxObserver, qscheme="per_channel", ch_axis=0, symmetric=True)
    scale = quantize(layer_config(weight=spec), nn.Sequential(layer))[0].quant_weight().scale.flatten()
    expected = torch.tensor([_pof2(2 * float(row.abs().max()) / 255) for row in w])
    assert torch.equal(scale, expected)
    assert normalise(spec, "weight", "w").scale_type is ScaleType.pof2  # whatever scale_type says, as in Quark


def test_lsq_initial_scales_are_twice_the_mean_magnitude_over_sqrt_qmax():
    g = torch.Generator().manual_seed(1)
    batches = [torch.randn(8, 16, generator=g) for _ in range(3)]
    mean = torch.cat([b.flatten() for b in batches]).double().abs().mean()
    expected_act = (2 * mean / math.sqrt(127)).float()
    assert _input_scale(_act(LSQObserver), batches).item() == expected_act.item()
    torch.manual_seed(0)
    layer = nn.Linear(16, 4)
    w = layer.weight.data.clone()
    per_channel = QuantizationSpec(dtype=Dtype.int4, observer_cls=LSQObserver, qscheme="per_channel", ch_axis=0, symmetric=True)
    scale = quantize(layer_config(weight=per_channel), nn.Sequential(layer))[0].quant_weight().scale.flatten()
    assert torch.equal(scale, (2 * w.double().abs().mean(dim=1) / math.sqrt(7)).float())


def test_lsq_scale_gradient_is_lsqs_scaled_by_one_over_sqrt_numel_qmax():
    """d/ds of clamp(round(x / s), -128, 127) * s: round(x/s) - x/s inside the grid, the bound outside;
    times Quark's factor 1 / sqrt(numel(x) * qmax)."""
    g = torch.Generator().manual_seed(2)
    x = torch.randn(4, 16, generator=g) * 3
    model = quantize(layer_config(input_tensors=_act(LSQObserver)), nn.Sequential(nn.Linear(16, 4)), [x])
    proxy = model[0].input_quant
    scaling = proxy.fused_activation_quant_proxy.tensor_quant.scaling_impl
    r = torch.randn(4, 16, generator=g)
    (proxy(x).value * r).sum().backward()
    s = scaling.value.detach().double()
    v = x.double() / s
    inside = (torch.round(v) >= -128) & (torch.round(v) <= 127)
    local = torch.where(inside, torch.round(v) - v, torch.clamp(torch.round(v), -128, 127))
    expected = (local * r.double()).sum() / math.sqrt(x.numel() * 127)
    assert torch.allclose(scaling.value.grad.double(), expected, rtol=1e-5, atol=0)


def test_lsq_trains():
    act = _act(LSQObserver, dtype=Dtype.uint8, symmetric=True)
    weight = QuantizationSpec(dtype=Dtype.int4, observer_cls=LSQObserver, qscheme="per_tensor", symmetric=True)
    model = quantize(layer_config(weight=weight, input_tensors=act), qat_model(), [torch.rand(4, 32, 2, 2)])
    assert_trains(model)
    assert all(p.requires_grad for n, p in model.named_parameters() if n.endswith("scaling_impl.value"))


@pytest.mark.parametrize("dtype, symmetric", [(Dtype.int8, True), (Dtype.uint8, False)])
def test_histogram_pro_is_torchs_histogram_search(dtype, symmetric):
    from torch.ao.quantization import HistogramObserver

    g = torch.Generator().manual_seed(3)
    batches = [torch.randn(32, 16, generator=g) * (i + 1) for i in range(3)]
    qmin, qmax = (-128, 127) if symmetric else (0, 255)
    torch_observer = HistogramObserver(
        bins=256,
        dtype=torch.qint8 if symmetric else torch.quint8,
        qscheme=torch.per_tensor_symmetric if symmetric else torch.per_tensor_affine,
        quant_min=qmin,
        quant_max=qmax,
    )
    for b in batches:
        torch_observer(b)
    expected_scale, _ = torch_observer.calculate_qparams()
    scale = _input_scale(_act(PerTensorHistogramObserverPro, dtype=dtype, symmetric=symmetric), batches)
    assert torch.allclose(scale.flatten(), expected_scale.float(), rtol=1e-6, atol=0)


def test_tqt_observer_is_quarks_name_for_tqt():
    tqt = TQTSpec(threshold_init_meth=TQTThresholdInitMeth._3SD)
    named = QuantizationSpec(dtype=Dtype.int8, observer_cls=TQTObserver, scale_type=ScaleType.pof2, qat_spec=tqt)
    plain = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=tqt)
    assert normalise(named, "input_tensors", "a") == normalise(plain, "input_tensors", "a")
    assert normalise(named, "input_tensors", "a").observer is TQT3SDObserver
    no_init = QuantizationSpec(dtype=Dtype.int8, observer_cls=TQTObserver, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    assert normalise(no_init, "weight", "w").observer is PerTensorMinMaxObserver
    with pytest.raises(ValueError, match=r"observer_cls=TQTObserver needs qat_spec=TQTSpec"):
        normalise(QuantizationSpec(dtype=Dtype.int8, observer_cls=TQTObserver), "weight", "w")


def test_lsq_scale_stays_positive_as_brevitas_learned_scales():
    """|s| with a sign gradient: a step past zero flips the parameter's sign, not the scale's."""
    x = torch.randn(4, 16)
    model = quantize(layer_config(input_tensors=_act(LSQObserver)), nn.Sequential(nn.Linear(16, 4)), [x])
    proxy = model[0].input_quant
    scaling = proxy.fused_activation_quant_proxy.tensor_quant.scaling_impl
    before = proxy(x).scale.item()
    with torch.no_grad():
        scaling.value.neg_()
    assert proxy(x).scale.item() == before > 0
