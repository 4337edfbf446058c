"""Calibration (``_backend/calibrate.py``): static activation ranges observed over every batch and
written into the quantizers, against ``tests/_reference/quant.py`` (exact), and the histogram and MSE
observers' ranges as calibration writes them.
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from _reference import quant as R
from _shared.configs import layer_config
from _shared.numerics import (
    DTYPES,
    calibration_batches,
    check_quant_tensor,
    exact,
    near_percentile,
    probe_input,
    spec,
)
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas.api import UncalibratedModelWarning, calibrate
from quark.torch.quantization.observer import (
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)


@pytest.mark.parametrize("dtype", ["int8", "uint8", "int4"])
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("scale_type", ["float", "pof2"])
@pytest.mark.parametrize("zp_type", ["int32", "float32"])
def test_static_input_minmax(dtype, symmetric, scale_type, zp_type):
    _, bits, signed = DTYPES[dtype]
    torch.manual_seed(13)
    model = nn.Sequential(nn.Linear(32, 16))
    batches = calibration_batches()
    act = spec(dtype, symmetric, scale_type=scale_type, zp_type=zp_type)
    qm = quantize(layer_config(input_tensors=act), model, batches)
    x = probe_input()
    rng = (torch.tensor(-3.0), torch.tensor(5.0))
    q, deq, s, zp = R.fake_quant(x, bits, signed, symmetric, scale_type=scale_type, zp_type=zp_type, rng=rng)
    check_quant_tensor(qm[0].input_quant(x), x, q, deq, s, zp)
    exact(qm(x), F.linear(deq, model[0].weight, model[0].bias))


@pytest.mark.parametrize("sign", [-1.0, 1.0], ids=["all_negative", "all_positive"])
@pytest.mark.parametrize("dtype", ["uint8", "int8"])
def test_static_input_one_sided_calibration(sign, dtype):
    """Calibration data of one sign: the range still contains 0 (lo = 0 or hi = 0)."""
    _, bits, signed = DTYPES[dtype]
    g = torch.Generator().manual_seed(40)
    batches = [sign * (0.1 + torch.rand(4, 32, generator=g) * k) for k in (1.0, 3.0)]
    model = nn.Sequential(nn.Linear(32, 16))
    qm = quantize(layer_config(input_tensors=spec(dtype, False)), model, batches)
    allx = torch.cat(batches)
    x = probe_input()
    rng = (allx.min().clamp(max=0), allx.max().clamp(min=0))
    q, deq, s, zp = R.fake_quant(x, bits, signed, False, rng=rng)
    assert float(zp) == (255.0 if sign < 0 else 0.0)
    check_quant_tensor(qm[0].input_quant(x), x, q, deq, s, zp)


class Percentile99(PerTensorPercentileObserver):
    percentile = 99.0


def test_static_input_percentile_observer():
    """The input scale is amax / 127.5, amax the 99th percentile of |x| over all batches, to one bin."""
    g = torch.Generator().manual_seed(16)
    batches = [torch.randn(512, 32, generator=g) * k for k in (1.0, 2.0, 0.5)]
    model = nn.Sequential(nn.Linear(32, 16))
    qm = quantize(layer_config(input_tensors=spec("int8", observer_cls=Percentile99)), model, batches)
    amax = qm[0].input_quant(batches[0]).scale.detach() * 127.5
    allx = torch.cat(batches).abs()
    bin_width = 2 * float(allx.max()) / 2048  # the histogram spans at most twice the data's range
    assert near_percentile(amax, allx, 0.99, bin_width)
    assert abs(float(amax) - float(torch.quantile(allx.flatten(), 0.99))) <= 2 * bin_width
    # and exactly what the observer itself reports on the same data
    obs = Percentile99(symmetric=True)
    for b in batches:
        obs(b)
    torch.testing.assert_close(amax, obs.calculate_range()[1], rtol=1e-6, atol=0)


def test_static_input_mse_observer():
    torch.manual_seed(17)
    batches = [torch.distributions.Laplace(0.0, 1.0).sample((64, 32)) for _ in range(3)]
    batches[1][0, 0] = 40.0
    model = nn.Sequential(nn.Linear(32, 16))
    qm = quantize(layer_config(input_tensors=spec("int8", observer_cls=PerTensorMSEObserver)), model, batches)
    s = qm[0].input_quant(batches[0]).scale.detach()
    obs = PerTensorMSEObserver(symmetric=True, qmin=-128, qmax=127)
    for b in batches:
        obs(b)
    torch.testing.assert_close(s * 127.5, obs.calculate_range()[1], rtol=1e-6, atol=0)
    allx = torch.cat(batches)
    zero = torch.tensor(0.0)

    def mse(scale):
        return ((R.quantize(allx, scale, zero, -128, 127)[1] - allx) ** 2).mean()

    assert mse(s) <= mse(allx.abs().max() / 127.5)


@pytest.mark.parametrize("dtype", ["int8", "uint8"])
@pytest.mark.parametrize("symmetric", [True, False], ids=["sym", "asym"])
@pytest.mark.parametrize("scale_type", ["float", "pof2"])
def test_static_output_minmax(dtype, symmetric, scale_type):
    _, bits, signed = DTYPES[dtype]
    torch.manual_seed(18)
    model = nn.Sequential(nn.Linear(32, 16))
    batches = calibration_batches()
    qm = quantize(layer_config(output_tensors=spec(dtype, symmetric, scale_type=scale_type)), model, batches)
    with torch.no_grad():
        outs = torch.cat([model(b) for b in batches])
        x = probe_input()
        y = model(x)
    rng = (torch.clamp(outs.min(), max=0), torch.clamp(outs.max(), min=0))
    q, deq, s, zp = R.fake_quant(y, bits, signed, symmetric, scale_type=scale_type, rng=rng)
    exact(qm(x), deq)
    check_quant_tensor(qm[0].output_quant(y), y, q, deq, s, zp)


def test_static_output_range_from_quantized_weights_each_quantized_once():
    """Calibration quantizes each weight once, not once per batch, and the output ranges it observes
    are those of the quantized weights (reference: the layers recomputed from the formula)."""
    torch.manual_seed(19)
    model = nn.Sequential(nn.Linear(32, 16), nn.ReLU(), nn.Linear(16, 8))
    batches = calibration_batches()
    int8 = spec("int8", True)
    with pytest.warns(UncalibratedModelWarning):  # built, calibrated below
        qm = quantize(layer_config(weight=int8, output_tensors=int8), model)
    calls = {"0": 0, "2": 0}
    for name in ("0", "2"):
        qm.get_submodule(name).weight_quant.tensor_quant.register_forward_hook(
            lambda *_, name=name: calls.__setitem__(name, calls[name] + 1)
        )
    calibrate(qm, batches)
    assert len(batches) > 1 and calls == {"0": 1, "2": 1}

    def fq(t, rng=None):  # 8-bit symmetric per tensor, max |t| (or the observed range) to 127
        return R.fake_quant(t, 8, True, True, rng=rng or (-t.abs().max(), t.abs().max()))[1]

    w0 = fq(model[0].weight.detach())
    with torch.no_grad():
        h = torch.cat([F.linear(b, w0, model[0].bias) for b in batches])
    rng = (torch.clamp(h.min(), max=0), torch.clamp(h.max(), min=0))
    x = probe_input()
    with torch.no_grad():
        h_probe = fq(F.linear(x, w0, model[0].bias), rng)
    exact(qm[0](x), h_probe)


def test_a_weight_changed_in_place_is_quantized_again():
    from quark.torch.extensions.brevitas._backend.calibrate import _quantize_once

    seen = []
    cached = _quantize_once(lambda w: seen.append(w.clone()) or w.sum())
    weight = torch.ones(3)
    assert cached(weight[:]) == 3 and cached(weight[:]) == 3 and len(seen) == 1  # a new view, same tensor
    weight.mul_(2)
    assert cached(weight[:]) == 6 and len(seen) == 2
    assert cached(torch.ones(3)) == 3 and len(seen) == 3
    with torch.inference_mode():
        frozen = torch.ones(3)  # an inference tensor: no version counter to key on, quantized every call
    assert cached(frozen) == 3 and cached(frozen) == 3 and len(seen) == 5


def test_calibration_puts_back_the_quantizers_forward_even_after_an_error():
    """The weight cache lives only inside calibration: afterwards each quantizer's ``forward`` is what it
    was (a wrapper set on the instance before survives), also when a batch fails."""
    from quark.torch.extensions.brevitas._backend.calibrate import weights_quantized_once

    torch.manual_seed(20)
    with pytest.warns(UncalibratedModelWarning):
        qm = quantize(layer_config(weight=spec("int8", True), output_tensors=spec("int8", True)), nn.Sequential(nn.Linear(32, 16)))
    proxy = qm[0].weight_quant
    assert "forward" not in vars(proxy)
    with pytest.raises(ValueError, match="raised RuntimeError"):
        calibrate(qm, [torch.randn(4, 7)])  # the wrong width: the layer raises
    assert "forward" not in vars(proxy)
    wrapper = proxy.forward
    proxy.forward = wrapper  # another library's wrapper on the instance
    with weights_quantized_once(qm), weights_quantized_once(qm):  # nested too
        assert vars(proxy)["forward"] is not wrapper
    assert vars(proxy)["forward"] is wrapper
