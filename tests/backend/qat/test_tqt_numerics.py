"""TQT numerics on the Brevitas backend against the plain-torch reference (Jain et al. 1903.08066).

Expected values come from ``tests/_reference/tqt.py``; forward comparisons are exact (atol=0):

    s = 2^ceil(v) / 2^(b-1) (signed) or 2^ceil(v) / 2^b (unsigned)
    q(x) = clamp(round_half_even(x / s), qmin, qmax) * s

Gradients: dq/dx = 1 inside the grid, 0 outside; dq/dv = s ln2 (round(x/s) - x/s) inside,
s ln2 qmin below, s ln2 qmax above. The autograd gradient of ``sum(w_up * q(x))`` is compared
with the analytic sum (float64).
"""

from __future__ import annotations

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from _reference import tqt as R
from brevitas.core.function_wrapper import RoundSte
from brevitas.core.quant.int_base import IntQuant
from brevitas.core.scaling.standalone import ParameterScaling
from torch import nn

from quark.torch.extensions.brevitas import config as X
from quark.torch.extensions.brevitas._backend.quantizers import (
    FusedPof2IntQuant,
    TQTParameterScaling,
    _bounds_mask,
    _exact_mask,
    _in_range,
    _Pof2Grid,
)
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import (
    Config,
    QuantizationConfig,
    QuantizationSpec,
    TQTSpec,
)
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
)

#: label -> (Dtype, bits, signed)
DTYPES = {
    "int8": (Dtype.int8, 8, True),
    "int4": (Dtype.int4, 4, True),
    "int2": (Dtype.int2, 2, True),
    "uint8": (Dtype.uint8, 8, False),
    "uint4": (Dtype.uint4, 4, False),
    "uint2": (Dtype.uint2, 2, False),
}
#: (flavour, dtype label): the extension has signed TQT grids only (TQT needs symmetric=True,
#: and the extension's symmetric grid is signed)
CASES = [("main", d) for d in DTYPES] + [("ext", d) for d in ("int8", "int4", "int2")]


def _spec(flavour: str, label: str, init=None):
    dtype, bits, _ = DTYPES[label]
    if flavour == "main":
        return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init))
    return X.QuantizationSpec(bit_width=bits, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init))


def _config(flavour: str, weight: str | None, inputs: str | None):
    w = _spec(flavour, weight) if weight else None
    x = _spec(flavour, inputs) if inputs else None
    if flavour == "main":
        return Config(global_quant_config=QuantizationConfig(weight=w, input_tensors=x))
    return X.Config(global_quant_config=X.QuantizationConfig(weight=w, input_tensors=x), pre_quant_opt_config=[])


def _quant_layer(flavour: str, weight: str | None, inputs: str | None, layer: nn.Module | None = None, seed: int = 0):
    torch.manual_seed(seed)
    layer = layer if layer is not None else nn.Linear(24, 12)
    calib = [torch.randn(16, *_input_shape(layer)) for _ in range(2)]
    q = ModelQuantizer(_config(flavour, weight, inputs)).quantize_model(nn.Sequential(layer), calib, progress=False)
    return q[0]


def _input_shape(layer: nn.Module) -> tuple[int, ...]:
    return (layer.in_features,) if isinstance(layer, nn.Linear) else (layer.in_channels, 6, 6)


def _wv(layer) -> nn.Parameter:
    return layer.weight_quant.tensor_quant.scaling_impl.value


def _av(layer) -> nn.Parameter:
    return layer.input_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value


def _set(param: nn.Parameter, value: float) -> None:
    with torch.no_grad():
        param.fill_(value)


# -- forward ------------------------------------------------------------------------------------


@pytest.mark.parametrize("flavour,label", CASES)
def test_weight_forward_exact(flavour, label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer(flavour, label, None)
    w = layer.weight.detach()
    amax = float(w.abs().max())
    # thresholds below, at and above amax: clipping on both sides, and an unclipped grid
    for v in (math.log2(amax) - 1.4, math.log2(amax) - 0.3, math.log2(amax), math.log2(amax) + 0.7):
        _set(_wv(layer), v)
        qw = layer.quant_weight()
        v_now = _wv(layer).detach()
        assert torch.equal(qw.value, R.quantize(w, v_now, bits, signed)), v
        assert torch.equal(qw.scale.detach().reshape(()), R.scale(v_now, bits, signed)), v
        assert float(qw.bit_width) == bits and bool(qw.signed) == signed


@pytest.mark.parametrize("flavour,label", CASES)
def test_input_forward_exact(flavour, label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer(flavour, None, label)
    x = torch.randn(64, 24, generator=torch.Generator().manual_seed(1)) * 2
    for v in (-1.6, 0.0, 0.45, 2.2):
        _set(_av(layer), v)
        qx = layer.input_quant(x)
        assert torch.equal(qx.value, R.quantize(x, torch.tensor(v), bits, signed)), v
        assert torch.equal(qx.scale.detach().reshape(()), R.scale(v, bits, signed)), v


@pytest.mark.parametrize("label", ["int8", "int2", "uint4"])
def test_ties_round_half_even(label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer("main", label, label)
    _set(_av(layer), 1.0)
    _set(_wv(layer), 1.0)
    s = float(R.scale(1.0, bits, signed))
    ties = (torch.arange(-12, 12, dtype=torch.float32) + 0.5) * s  # every value exactly half-way
    x = ties.repeat(24 * 2)[: 2 * 24].reshape(2, 24)
    expected = R.quantize(x, torch.tensor(1.0), bits, signed)
    assert torch.equal(layer.input_quant(x).value, expected)
    codes = expected / s
    qmin, qmax = R.grid(bits, signed)
    inside = (codes > qmin) & (codes < qmax)
    assert inside.any() and (codes[inside] % 2 == 0).all()  # ties went to even codes
    with torch.no_grad():
        layer.weight.copy_(ties.repeat(12)[: 12 * 24].reshape(12, 24))
    assert torch.equal(layer.quant_weight().value, R.quantize(layer.weight.detach(), torch.tensor(1.0), bits, signed))


@pytest.mark.parametrize("flavour,wl,xl", [("main", "int4", "uint4"), ("main", "int2", "uint2"),
                                           ("main", "uint8", "int8"), ("ext", "int4", "int8")])
@pytest.mark.parametrize("kind", ["linear", "conv"])
def test_layer_output_exact(flavour, wl, xl, kind):
    """Output of the quantized layer = the float op on reference-quantized input and weight."""
    layer = nn.Linear(24, 12) if kind == "linear" else nn.Conv2d(3, 5, 3, padding=1)
    q = _quant_layer(flavour, wl, xl, layer=layer)
    _set(_wv(q), float(_wv(q).detach()) - 0.8)
    _set(_av(q), 0.3)
    x = torch.randn(8, *_input_shape(layer), generator=torch.Generator().manual_seed(2)) * 1.5
    (_, wb, ws), (_, xb, xs) = DTYPES[wl], DTYPES[xl]
    qw = R.quantize(q.weight.detach(), _wv(q).detach(), wb, ws)
    qx = R.quantize(x, _av(q).detach(), xb, xs)
    expected = F.linear(qx, qw, q.bias) if kind == "linear" else F.conv2d(qx, qw, q.bias, padding=1)
    with torch.no_grad():
        assert torch.equal(q(x), expected)


@pytest.mark.parametrize("label", ["int8", "int4", "int2", "uint8", "uint2"])
def test_scale_is_exact_power_of_two_with_ceil(label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer("main", label, label)
    levels = R.levels(bits, signed)
    for v, k in [(-3.0, -3), (-2.9999, -2), (-2.5, -2), (-0.0001, 0), (0.0, 0), (0.0001, 1), (1.3, 2), (4.0, 4)]:
        _set(_wv(layer), v)
        _set(_av(layer), v)
        ws = layer.quant_weight().scale.detach().reshape(())
        xs = layer.input_quant(torch.ones(2, 24)).scale.detach().reshape(())
        for s in (ws, xs):
            assert float(s) == 2.0**k / levels, (v, float(s))
            assert math.log2(float(s)) == k - math.log2(levels)  # an exact power of two


# -- gradients ----------------------------------------------------------------------------------


def _grad_cases():
    return [("main", d) for d in DTYPES] + [("ext", "int4")]


@pytest.mark.parametrize("flavour,label", _grad_cases())
def test_weight_gradients_match_formula(flavour, label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer(flavour, label, None).train()
    w = layer.weight.detach()
    _set(_wv(layer), math.log2(float(w.abs().max())) - 1.3)  # clips at both ends (signed)
    up = torch.randn(w.shape, generator=torch.Generator().manual_seed(3))
    (layer.quant_weight().value * up).sum().backward()
    v = _wv(layer).detach()
    codes = R.codes(w, v, bits, signed)
    qmin, qmax = R.grid(bits, signed)
    assert (codes > qmax).any() and (codes < qmin).any() and ((codes >= qmin) & (codes <= qmax)).any()
    expected_v = float((up.double() * R.grad_v(w, v, bits, signed)).sum())
    assert float(_wv(layer).grad) == pytest.approx(expected_v, rel=1e-5, abs=1e-6)
    assert torch.equal(layer.weight.grad.double(), up.double() * R.grad_x(w, v, bits, signed))


@pytest.mark.parametrize("flavour,label", _grad_cases())
def test_input_gradients_match_formula(flavour, label):
    _, bits, signed = DTYPES[label]
    layer = _quant_layer(flavour, None, label).train()
    _set(_av(layer), 0.6)
    x = (torch.randn(32, 24, generator=torch.Generator().manual_seed(4)) * 3).requires_grad_()
    up = torch.randn(32, 24, generator=torch.Generator().manual_seed(5))
    (layer.input_quant(x).value * up).sum().backward()
    v = _av(layer).detach()
    codes = R.codes(x.detach(), v, bits, signed)
    qmin, qmax = R.grid(bits, signed)
    assert (codes > qmax).any() and (codes < qmin).any()
    expected_v = float((up.double() * R.grad_v(x.detach(), v, bits, signed)).sum())
    assert float(_av(layer).grad) == pytest.approx(expected_v, rel=1e-5, abs=1e-6)
    assert torch.equal(x.grad.double(), up.double() * R.grad_x(x.detach(), v, bits, signed))


def test_gradient_is_per_element_formula():
    """One element at a time: inside (round - x/s), below (qmin), above (qmax), all times s ln2."""
    layer = _quant_layer("main", None, "int4").train()
    _set(_av(layer), 0.0)  # s = 1/8, grid [-8, 7] * s = [-1, 0.875]
    s = 1 / 8
    for x0, inner in [(0.3, round(0.3 / s) - 0.3 / s), (-2.0, -8), (5.0, 7), (0.875, 0.0), (-1.0, 0.0)]:
        _av(layer).grad = None
        x = torch.tensor([[x0]])
        layer.input_quant(x).value.sum().backward()
        assert float(_av(layer).grad) == pytest.approx(s * math.log(2) * inner, rel=1e-6, abs=1e-9), x0


def test_gradients_finite_and_nonzero_through_a_network():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    calib = [torch.randn(8, 3, 6, 6) for _ in range(2)]
    spec = lambda d: QuantizationSpec(
        dtype=d, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD)
    )
    cfg = Config(global_quant_config=QuantizationConfig(weight=spec(Dtype.int4), input_tensors=spec(Dtype.int8)))
    q = ModelQuantizer(cfg).quantize_model(model, calib, progress=False).train()
    x, y = torch.randn(16, 3, 6, 6), torch.randint(0, 10, (16,))
    F.cross_entropy(q(x), y).backward()
    thresholds = [(n, p) for n, p in q.named_parameters() if n.endswith("scaling_impl.value")]
    assert len(thresholds) == 4
    for name, p in thresholds:
        assert p.grad is not None and torch.isfinite(p.grad).all() and (p.grad != 0).all(), name
    for name, p in q.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name


# -- the fused kernel -----------------------------------------------------------------------------


def _int_quants(bits: int, signed: bool, narrow: bool = False):
    kw = {"narrow_range": narrow, "signed": signed, "input_view_impl": nn.Identity(), "float_to_int_impl": RoundSte()}
    return IntQuant(**kw), FusedPof2IntQuant(**kw)


def _as_stock_scaling(scaling: TQTParameterScaling) -> None:
    """The same module run by Brevitas' own ``ParameterScaling.forward``."""
    assert type(scaling) is TQTParameterScaling
    scaling.__class__ = ParameterScaling
    scaling.__dict__.pop("_fused", None)


def _run(mod, x, s, up, bits):
    x = x.clone().requires_grad_()
    s = s.clone().requires_grad_()
    y = mod(s, torch.zeros(()), torch.tensor(float(bits)), x)
    (y * up).sum().backward()
    return y.detach(), x.grad, s.grad


@pytest.mark.parametrize(
    "bits,signed,narrow",
    [(8, True, False), (4, True, False), (2, True, False), (8, False, False), (4, False, False), (2, False, False)]
    + [(8, True, True), (3, True, True), (2, True, True), (1, True, False), (1, False, False), (3, False, False)],
)
@pytest.mark.parametrize("log2_scale", [-7, -2, 0, 3])
def test_fused_matches_stock_intquant(bits, signed, narrow, log2_scale):
    """Outputs and input gradients bit-identical; the scale gradient bit-identical where every
    partial sum is exact (dyadic inputs, integer upstream gradients), else within float32 error.
    The grids cover odd and even ends (narrow int8: qmin -127; int1: qmax 0), where a tie x/s =
    qmin - 1/2 or qmax + 1/2 rounds onto the grid or off it."""
    stock, fused = _int_quants(bits, signed, narrow)
    s = torch.tensor(2.0**log2_scale)
    g = torch.Generator().manual_seed(bits * 10 + log2_scale)
    # dyadic data: multiples of s/16 up to +-2^(b+1) s, ties included (k/16 = .5 happens)
    x = torch.randint(-(2 ** (bits + 5)), 2 ** (bits + 5), (4000,), generator=g).float() * (s / 16)
    up = torch.randint(-3, 4, (4000,), generator=g).float()
    a, b = _run(stock, x, s, up, bits), _run(fused, x, s, up, bits)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1]) and torch.equal(a[2], b[2])

    # general data: outputs and input gradients still bit-identical
    x = torch.randn(20_000, generator=g) * 2.0 ** (log2_scale + bits - 1)
    up = torch.randn(20_000, generator=g)
    a, b = _run(stock, x, s, up, bits), _run(fused, x, s, up, bits)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])
    qmin, qmax = R.grid(bits, signed)
    qmin += int(narrow)
    xs = x.double() / float(s)
    r = torch.round(xs)
    terms = up.double() * torch.where(r < qmin, float(qmin), torch.where(r > qmax, float(qmax), r - xs))
    for grad_s in (a[2], b[2]):
        assert abs(float(grad_s) - float(terms.sum())) <= 1e-6 * float(terms.abs().sum())


def test_fused_scale_gradient_is_at_least_as_accurate_as_the_stock_chain():
    """The fused kernel sums dy * (q - x/s) in one float32 dot, the stock chain in another order:
    not bit-identical on general data, so both are compared with a float64 sum of the same terms."""
    stock, fused = _int_quants(8, True)
    g = torch.Generator().manual_seed(0)
    x, up = torch.randn(5000, generator=g) * 2, torch.randn(5000, generator=g)
    s = torch.tensor(2.0**-3)
    xs = x.double() / float(s)
    r = torch.round(xs)
    exact = float((up.double() * torch.where(r < -128, -128.0, torch.where(r > 127, 127.0, r - xs))).sum())
    errors = [abs(float(_run(q, x, s, up, 8)[2]) - exact) for q in (stock, fused)]
    assert errors[1] <= max(errors[0], 1e-6 * abs(exact))


@pytest.mark.parametrize("qmin,qmax", [(-128, 127), (-127, 127), (0, 255), (-1, 0), (0, 1), (-4, 3)])
def test_in_range_gradient_is_the_same_on_every_device_path(qmin, qmax):
    """The CPU bounds (one hardtanh_backward) and the tensor bounds used on accelerators pass the
    same gradient: x/s on every tie qmin - 1/2 ... qmax + 1/2 and beside it."""
    grid, s = _Pof2Grid.of(qmin, qmax), torch.tensor([2.0**-3])
    ticks = torch.arange(2 * qmin - 3, 2 * qmax + 4).float() / 2  # every half step, ties included
    x = torch.cat([ticks, torch.nextafter(ticks, ticks + 1), torch.nextafter(ticks, ticks - 1)]) * s
    g = torch.randn(x.shape, generator=torch.Generator().manual_seed(qmax))
    expected = g * ((torch.round(x / s) >= qmin) & (torch.round(x / s) <= qmax))
    assert torch.equal(_in_range(x, s, grid)(g), expected)  # hardtanh_backward
    assert torch.equal(g * _bounds_mask(x, s, grid), expected)  # what an accelerator takes
    assert torch.equal(g * _exact_mask(x, s, grid), expected)  # extreme scales


def test_grid_bounds_whatever_the_default_dtype():
    """The bounds are float32 neighbours even under a float64 default dtype (else x/s = -128.5,
    which rounds onto int8's grid, lost its gradient)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        grid = _Pof2Grid.of(-128, 127)
    finally:
        torch.set_default_dtype(previous)
    assert grid == _Pof2Grid.of(-128, 127)
    stock, fused = _int_quants(8, True)
    x, s = torch.tensor([-128.5, -128.50002, 127.5, 127.49999]), torch.tensor(1.0)
    a, b = _run(stock, x, s, torch.ones(4), 8), _run(fused, x, s, torch.ones(4), 8)
    assert torch.equal(a[1], b[1]) and a[1].tolist() == [1.0, 0.0, 0.0, 1.0]


@pytest.mark.parametrize("log2_scale", [-110, 105, 121, 126])
def test_extreme_scales_match_stock(log2_scale):
    """Scales whose grid bounds would overflow float32 or fall below its normal range take the
    exact in-range test on CPU: same outputs and input gradients as Brevitas, no error."""
    stock, fused = _int_quants(8, True)
    s = torch.tensor(2.0**log2_scale)
    ticks = torch.arange(-260, 260).float() / 2
    x = torch.cat([ticks, torch.nextafter(ticks, ticks + 1), torch.nextafter(ticks, ticks - 1)]) * s
    x = x[torch.isfinite(x)]
    up = torch.ones_like(x)
    a, b = _run(stock, x, s, up, 8), _run(fused, x, s, up, 8)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


def test_zero_dimensional_input_and_float64_scale():
    """A 0-d tensor keeps its shape forward and backward; a float64 scale takes Brevitas' path
    (its output dtype and all)."""
    stock, fused = _int_quants(8, True)
    x, s = torch.tensor(0.3), torch.tensor(2.0**-4)
    a, b = _run(stock, x, s, torch.tensor(2.0), 8), _run(fused, x, s, torch.tensor(2.0), 8)
    assert b[0].shape == b[1].shape == a[0].shape == () and all(torch.equal(u, v) for u, v in zip(a, b))
    s64 = torch.tensor(2.0**-4, dtype=torch.float64)
    x = torch.randn(50)
    a, b = _run(stock, x, s64, torch.ones(50), 8), _run(fused, x, s64, torch.ones(50), 8)
    assert b[0].dtype == a[0].dtype and all(torch.equal(u, v) for u, v in zip(a, b))


def test_wide_grids_take_brevitas_path():
    """Past float32's significand (int24 and wider) qmin - 1/2 is no float32: Brevitas' chain runs."""
    stock, fused = _int_quants(24, True)
    x, s = torch.randn(100) * 1e6, torch.tensor(1.0)
    a, b = _run(stock, x, s, torch.ones(100), 24), _run(fused, x, s, torch.ones(100), 24)
    assert all(torch.equal(u, v) for u, v in zip(a, b))


@pytest.mark.parametrize("flavour,label", [("main", "int8"), ("main", "uint4"), ("ext", "int2")])
def test_tqt_scaling_matches_brevitas_chain(flavour, label):
    """The fused TQT scale: value and threshold gradient bit-identical to Brevitas' nine-module
    chain, across thresholds on and off a power of two, negative ones and one whose power of two
    falls below Brevitas' minimum scale (1e-10)."""
    layer = _quant_layer(flavour, label, label)
    fused = layer.weight_quant.tensor_quant.scaling_impl
    assert type(fused) is TQTParameterScaling and fused._fused[0]
    stock = copy.deepcopy(fused)
    _as_stock_scaling(stock)
    threshold = layer.weight_quant.tensor_quant.int_scaling_impl(layer.weight_quant.bit_width())
    for v in (-3.7, -3.0, -0.2, 0.0, 0.4, 2.0, 5.5, -40.0):
        results = []
        for scaling in (stock, fused):
            _set(scaling.value, v)
            scaling.value.grad = None
            scale = scaling(layer.weight, threshold)
            (scale * 3.0).sum().backward()
            results.append((scale.detach(), scaling.value.grad.clone()))
        assert torch.equal(results[0][0], results[1][0]) and torch.equal(results[0][1], results[1][1]), v


@pytest.mark.parametrize("flavour,label", [("main", "int4"), ("main", "uint2"), ("ext", "int8")])
def test_fused_layer_matches_stock_layer(flavour, label):
    """The whole TQT layer with the fused kernel against the same layer on Brevitas' IntQuant."""
    fused_layer = _quant_layer(flavour, label, label).train()
    assert isinstance(fused_layer.weight_quant.tensor_quant.int_quant, FusedPof2IntQuant)
    stock_layer = copy.deepcopy(fused_layer)
    _, bits, signed = DTYPES[label]
    for proxy_tq in (stock_layer.weight_quant.tensor_quant, stock_layer.input_quant.fused_activation_quant_proxy.tensor_quant):
        proxy_tq.int_quant = _int_quants(bits, signed)[0]
        _as_stock_scaling(proxy_tq.scaling_impl)
    x = torch.randn(32, 24, generator=torch.Generator().manual_seed(6)) * 2
    results = []
    for layer in (stock_layer, fused_layer):
        xx = x.clone().requires_grad_()
        layer(xx).square().sum().backward()
        results.append((layer(x).detach(), xx.grad, layer.weight.grad, _wv(layer).grad, _av(layer).grad))
    (ya, xa, wa, vwa, vaa), (yb, xb, wb, vwb, vab) = results
    assert torch.equal(ya, yb) and torch.equal(xa, xb) and torch.equal(wa, wb)

    # threshold gradients: the analytic sums in float64 (upstream gradients of sum(out^2))
    w, vw, va = fused_layer.weight.detach(), _wv(fused_layer).detach(), _av(fused_layer).detach()
    qw, qx = R.quantize(w, vw, bits, signed).double(), R.quantize(x, va, bits, signed).double()
    out = F.linear(qx, qw, fused_layer.bias.detach().double())
    terms_w = (2 * out.T @ qx) * R.grad_v(w, vw, bits, signed)
    terms_a = (2 * out @ qw) * R.grad_v(x, va, bits, signed)
    for terms, fused, stock in ((terms_w, vwb, vwa), (terms_a, vab, vaa)):
        size = float(terms.abs().sum())
        assert abs(float(fused) - float(terms.sum())) <= 1e-6 * size
        # Brevitas' chain sums dy*q and -dy*x/s separately and cancels: only close, not exact
        assert abs(float(stock) - float(fused)) <= 1e-4 * size


def _int_quant_of(spec, role="weight"):
    cfg = Config(global_quant_config=QuantizationConfig(**{role: spec}))
    q = ModelQuantizer(cfg).quantize_model(nn.Sequential(nn.Linear(8, 4)), [torch.randn(4, 8)], progress=False)[0]
    if role == "weight":
        return q.weight_quant.tensor_quant.int_quant
    return q.input_quant.fused_activation_quant_proxy.tensor_quant.int_quant


def test_fused_kernel_used_for_tqt_and_pof2_only():
    tqt = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    pof2 = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2)
    assert type(_int_quant_of(tqt)) is FusedPof2IntQuant
    assert type(_int_quant_of(tqt, "input_tensors")) is FusedPof2IntQuant
    assert type(_int_quant_of(pof2)) is FusedPof2IntQuant
    not_fused = [
        QuantizationSpec(dtype=Dtype.int8),  # float scale
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.float16),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qscheme=QSchemeType.per_channel, ch_axis=0),
        QuantizationSpec(dtype=Dtype.uint8, scale_type=ScaleType.pof2, symmetric=False),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, round_method=RoundType.floor),
    ]
    for spec in not_fused:
        assert type(_int_quant_of(spec)) is IntQuant, spec
    assert type(_int_quant_of(QuantizationSpec(dtype=Dtype.int8), "input_tensors")) is IntQuant


# -- config errors --------------------------------------------------------------------------------


def test_tqt_on_bias_rejected_main():
    tqt = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    bias = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    cfg = Config(global_quant_config=QuantizationConfig(weight=tqt, input_tensors=tqt, bias=bias))
    with pytest.raises(ValueError, match=r"bias.*qat_spec=TQTSpec"):
        ModelQuantizer(cfg).quantize_model(nn.Sequential(nn.Linear(4, 2)), [torch.randn(2, 4)], progress=False)


def test_tqt_on_bias_rejected_extension():
    tqt = X.QuantizationSpec(bit_width=8, scale_type=ScaleType.pof2, qat_spec=TQTSpec())
    cfg = X.Config(
        global_quant_config=X.QuantizationConfig(weight=tqt, input_tensors=tqt, bias=tqt), pre_quant_opt_config=[]
    )
    with pytest.raises(ValueError, match=r"bias.*qat_spec="):
        ModelQuantizer(cfg).quantize_model(nn.Sequential(nn.Linear(4, 2)), [torch.randn(2, 4)], progress=False)


# -- related finding outside TQT (fixed; regression) ------------------------------------------------


def test_static_symmetric_unsigned_input_scale_uses_max():
    x = torch.tensor([[-5.0, 4.0, 1.0, -1.0]])
    cfg = Config(global_quant_config=QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=True)))
    q = ModelQuantizer(cfg).quantize_model(nn.Sequential(nn.Linear(4, 2)), [x], progress=False)[0]
    assert float(q.input_quant(x).scale.detach()) == pytest.approx(4.0 / 255, rel=1e-6)  # got 5/255
