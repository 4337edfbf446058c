"""Accumulator-aware weights (``A2QSpec``: A2Q, A2Q+) on the Brevitas backend, against the plain-torch
reference ``tests/_reference/a2q.py`` (the papers' formulas):

- the integer weights are the reference's, exactly (atol=0), layer by layer and in graph mode,
  Linear and Conv2d, signed and unsigned inputs, A2Q and A2Q+;
- every channel's L1 norm is within the bound (A2Q+: each sign's part within half of it), and the
  integer dot product with any input on the layer's grid fits the promised signed accumulator: its
  exact extremes, random and extreme inputs; the same layer without A2Q does not (the check bites);
- EP-init leaves each layer inside its bound (g <= s T, the float weights projected);
- QAT steps keep all of that; a checkpoint round-trips bit for bit; ``freeze`` changes nothing;
- the weights know the input grid without a quantized input (calibration, ``quant_weight()``), and
  refuse a quantized input of another grid.
"""

from __future__ import annotations

import copy

import pytest
import torch
from _reference import a2q as R
from brevitas.quant_tensor import IntQuantTensor
from torch import nn

from quark.torch.extensions.brevitas._backend.accumulator import l1_bound, layers, promises, worst_case_bits
from quark.torch.extensions.brevitas._backend.quantizers import AccumulatorAwareWeightProxy, InputGridError
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.extensions.brevitas.qat import freeze
from quark.torch.quantization.config.algorithms import GPFA2Q, GPFQ, GPTQ, Qronos
from quark.torch.quantization.config.config import (
    A2QSpec,
    Config,
    GPTQConfig,
    QuantizationConfig,
    QuantizationSpec,
)
from quark.torch.quantization.config.type import Dtype, QSchemeType, QuantizationMode, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

#: input dtype -> (bits, signed)
INPUTS = {Dtype.uint4: (4, False), Dtype.int4: (4, True), Dtype.uint8: (8, False)}


def _weight(acc_bits: int, zero_centered: bool, dtype: Dtype = Dtype.int4, scale_type=None) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=dtype,
        qscheme=QSchemeType.per_channel,
        ch_axis=0,
        scale_type=scale_type,
        qat_spec=A2QSpec(acc_bits, zero_centered=zero_centered),
    )


def _input(dtype: Dtype) -> QuantizationSpec:
    return QuantizationSpec(dtype=dtype, observer_cls=PerTensorMinMaxObserver, scale_type=ScaleType.pof2)


def _config(acc_bits, zero_centered, input_dtype, mode=QuantizationMode.eager_mode, scale_type=None) -> Config:
    return Config(
        QuantizationConfig(input_tensors=_input(input_dtype), weight=_weight(acc_bits, zero_centered, scale_type=scale_type)),
        quant_mode=mode,
    )


def _model(kind: str, seed: int = 0) -> tuple[nn.Module, list[torch.Tensor]]:
    """A layer whose weights are large against the bound (so that it binds), and calibration data
    that spans both signs (a signed input grid is then used whole)."""
    torch.manual_seed(seed)
    if kind == "linear":
        model, shape = nn.Sequential(nn.Linear(96, 8)), (16, 96)
    else:
        model, shape = nn.Sequential(nn.Conv2d(6, 8, 3, padding=1)), (4, 6, 6, 6)
    with torch.no_grad():
        model[0].weight.mul_(4.0)
    g = torch.Generator().manual_seed(seed + 1)
    return model, [torch.randn(shape, generator=g) for _ in range(3)]


def _quantize(config, model, data):
    return ModelQuantizer(config).quantize_model(copy.deepcopy(model), data, progress=False)


def _layer(qmodel) -> tuple[str, nn.Module, AccumulatorAwareWeightProxy]:
    (found,) = layers(qmodel)
    return found


def _codes(layer) -> torch.Tensor:
    """The layer's integer weights (C, K): its quantized weight is exactly integer x scale."""
    with torch.no_grad():
        quant = layer.quant_weight()
        q = (quant.value / quant.scale).round()
    assert torch.equal(q * quant.scale, quant.value), "quantized weights off the integer grid"
    return q.reshape(q.shape[0], -1)


def _learned(proxy, weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(g, s) as the bound sees them, per output channel. Brevitas 0.13.4's pre-scaling module holds
    its own scale parameter (initialised as, and trained beside, the output scale): g / s uses it."""
    pre = proxy.tensor_quant.pre_scaling_impl
    with torch.no_grad():
        g = pre.restrict_clamp_scaling(pre.value).reshape(-1, 1)
        s = pre.scaling_impl(weight.reshape(weight.shape[0], -1)).reshape(-1, 1)
    return g, s


def _reference_codes(layer, proxy, acc_bits, zero_centered) -> torch.Tensor:
    """The reference's integer weights from the layer's float weight and its learned g and s."""
    g, s = _learned(proxy, layer.weight)
    with torch.no_grad():
        w = layer.weight.reshape(layer.weight.shape[0], -1)
    bits = int(proxy.input_bit_width)
    return R.codes(w, g, s, 4, acc_bits, bits, proxy.input_signed, zero_centered)


def _assert_within_promise(q: torch.Tensor, acc_bits: int, input_bits: int, input_signed: bool, zero_centered: bool):
    bound = R.bound(acc_bits, input_bits, input_signed, zero_centered)
    norms = q.abs().sum(dim=1)
    assert float(norms.max()) <= bound, (norms.max(), bound)
    if zero_centered:  # A2Q+: each sign's part holds at most half of the bound
        assert float(q.clamp(min=0).sum(dim=1).max()) <= bound / 2
        assert float((-q).clamp(min=0).sum(dim=1).max()) <= bound / 2
    assert R.fits(q, acc_bits, input_bits, input_signed)
    lo, hi = R.input_range(input_bits, input_signed)
    g = torch.Generator().manual_seed(5)
    x = torch.randint(lo, hi + 1, (512, q.shape[1]), generator=g)
    extremes = torch.stack([torch.full((q.shape[1],), lo), torch.full((q.shape[1],), hi)])
    worst = torch.where(q > 0, hi, lo)  # the input that maximises each channel's dot product
    for inputs in (x, extremes, worst):
        acc = R.dot(q, inputs)
        assert int(acc.min()) >= -(2 ** (acc_bits - 1)) and int(acc.max()) <= 2 ** (acc_bits - 1) - 1


CASES = [
    pytest.param(kind, zc, dtype, acc, id=f"{kind}-{'a2q+' if zc else 'a2q'}-{dtype.name}-P{acc}")
    for kind in ("linear", "conv")
    for zc in (True, False)
    for dtype, acc in ((Dtype.uint4, 12), (Dtype.int4, 12), (Dtype.uint8, 14))
]


@pytest.mark.parametrize("mode", [QuantizationMode.eager_mode, QuantizationMode.fx_graph_mode], ids=["layerwise", "graph"])
@pytest.mark.parametrize("kind,zero_centered,input_dtype,acc_bits", CASES)
def test_integer_weights_are_the_reference_and_fit_the_accumulator(kind, zero_centered, input_dtype, acc_bits, mode):
    model, data = _model(kind)
    qmodel = _quantize(_config(acc_bits, zero_centered, input_dtype, mode), model, data)
    _, layer, proxy = _layer(qmodel)
    bits, signed = INPUTS[input_dtype]
    assert (int(proxy.input_bit_width), proxy.input_signed) == (bits, signed)
    q = _codes(layer)
    torch.testing.assert_close(q, _reference_codes(layer, proxy, acc_bits, zero_centered), atol=0, rtol=0)
    assert int(q.abs().max()) <= 7 and q.abs().sum() > 0  # the narrow int4 grid, not all zero
    _assert_within_promise(q, acc_bits, bits, signed, zero_centered)


@pytest.mark.parametrize("zero_centered", [True, False], ids=["a2q+", "a2q"])
def test_power_of_two_scales_keep_the_reference_and_the_bound(zero_centered):
    """``scale_type=pof2``: the learned scale rounded to a power of two (both of Brevitas' copies),
    the integer weights still the reference's and within the bound, through QAT steps."""
    model, data = _model("conv")
    qmodel = _quantize(_config(12, zero_centered, Dtype.int4, QuantizationMode.fx_graph_mode, ScaleType.pof2), model, data)
    _, layer, proxy = _layer(qmodel)
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    qmodel.train()
    for x in [*data, *data]:
        _, s = _learned(proxy, layer.weight)
        scale = layer.quant_weight().scale
        for value in (s, scale):
            assert torch.equal(value, torch.exp2(torch.log2(value).round()))
        q = _codes(layer)
        torch.testing.assert_close(q, _reference_codes(layer, proxy, 12, zero_centered), atol=0, rtol=0)
        _assert_within_promise(q, 12, 4, True, zero_centered)
        optimizer.zero_grad()
        qmodel(x).square().mean().backward()
        optimizer.step()


@pytest.mark.parametrize("zero_centered", [True, False], ids=["a2q+", "a2q"])
def test_without_a2q_the_same_layer_overflows_the_accumulator(zero_centered):
    """The check is not vacuous: per-channel int4 weights of the same layer need a wider accumulator."""
    model, data = _model("linear")
    plain = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_channel, ch_axis=0)
    config = Config(QuantizationConfig(input_tensors=_input(Dtype.uint4), weight=plain))
    qmodel = _quantize(config, model, data)
    with torch.no_grad():
        quant = qmodel[0].quant_weight()
    q = (quant.value / quant.scale).round()
    assert not R.fits(q, 12, 4, False)
    assert R.fits(q, worst_case_bits(4, 4, False, 96), 4, False)


def test_bound_formulas_match_the_reference():
    for acc in (8, 10, 12, 16, 32):
        for bits, signed in INPUTS.values():
            for zc in (True, False):
                assert l1_bound(acc, bits, signed, zc) == R.bound(acc, bits, signed, zc)


@pytest.mark.parametrize("zero_centered", [True, False], ids=["a2q+", "a2q"])
def test_ep_init_starts_every_layer_inside_its_bound(zero_centered):
    """After the build, g <= s T and the float weights lie in the L1 ball of radius s T (EP-init)."""
    model, data = _model("conv")
    before = model[0].weight.detach().clone()
    qmodel = _quantize(_config(10, zero_centered, Dtype.uint4), model, data)
    _, layer, proxy = _layer(qmodel)
    bound = R.bound(10, 4, False, zero_centered)
    g, s = (t.flatten() for t in _learned(proxy, layer.weight))
    with torch.no_grad():
        norms = layer.weight.abs().flatten(1).sum(1)
        assert torch.equal(s, layer.quant_weight().scale.flatten())  # one scale until training moves them apart
    radius = s * bound
    assert bool((g <= radius * (1 + 1e-5)).all())
    assert bool((norms <= radius * (1 + 1e-4)).all())
    assert bool((before.abs().flatten(1).sum(1) > radius).any()), "the case must start outside the bound"
    assert not torch.equal(layer.weight.detach(), before)  # projected


@pytest.mark.parametrize("mode", [QuantizationMode.eager_mode, QuantizationMode.fx_graph_mode], ids=["layerwise", "graph"])
@pytest.mark.parametrize("zero_centered", [True, False], ids=["a2q+", "a2q"])
def test_qat_steps_keep_the_bound(zero_centered, mode):
    model, data = _model("linear")
    qmodel = _quantize(_config(10, zero_centered, Dtype.uint4, mode), model, data)
    _, layer, proxy = _layer(qmodel)
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=3e-2)
    target = torch.randn(16, 8, generator=torch.Generator().manual_seed(3))
    start = layer.weight.detach().clone()
    qmodel.train()
    for step in range(15):
        optimizer.zero_grad()
        loss = ((qmodel(data[step % 3]) - target * 10) ** 2).mean()
        loss.backward()
        optimizer.step()
        q = _codes(layer)
        torch.testing.assert_close(q, _reference_codes(layer, proxy, 10, zero_centered), atol=0, rtol=0)
        _assert_within_promise(q, 10, 4, False, zero_centered)
    assert not torch.equal(layer.weight.detach(), start)


def test_checkpoint_round_trips_bit_for_bit(tmp_path):
    model, data = _model("conv")
    config = _config(12, True, Dtype.int4, QuantizationMode.fx_graph_mode)
    qmodel = _quantize(config, model, data)
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    qmodel.train()
    for x in data:
        optimizer.zero_grad()
        qmodel(x).square().mean().backward()
        optimizer.step()
    qmodel.eval()
    torch.save(qmodel.state_dict(), tmp_path / "a2q.pt")
    fresh = ModelQuantizer(config).quantize_model(copy.deepcopy(model), calibrate=False, progress=False)
    fresh.load_state_dict(torch.load(tmp_path / "a2q.pt", weights_only=True))
    fresh.eval()
    with torch.no_grad():
        for x in data:
            assert torch.equal(fresh(x), qmodel(x))
        assert torch.equal(_layer(fresh)[1].quant_weight().value, _layer(qmodel)[1].quant_weight().value)


def test_freeze_changes_no_output_and_keeps_the_float_weights():
    model, data = _model("linear")
    qmodel = _quantize(_config(12, True, Dtype.uint4), model, data)
    weight = qmodel[0].weight.detach().clone()
    with torch.no_grad():
        before = [qmodel(x) for x in data]
    freeze(qmodel)
    with torch.no_grad():
        assert all(torch.equal(qmodel(x), b) for x, b in zip(data, before))
    assert torch.equal(qmodel[0].weight, weight)  # baking q * s would move A2Q's own norm statistic
    assert not any(p.requires_grad for p in qmodel[0].weight_quant.parameters())


def test_weights_need_no_quantized_input_but_refuse_another_grid():
    model, data = _model("linear")
    qmodel = _quantize(_config(12, True, Dtype.uint4), model, data)
    layer = qmodel[0]
    reference = layer.quant_weight().value  # no input at hand: the planned uint4 grid
    x = data[0].abs()
    with torch.no_grad():
        same = layer.input_quant(x)
        assert torch.equal(layer.quant_weight(same).value, reference)
        wider = IntQuantTensor(x, torch.tensor(1.0), torch.tensor(0.0), torch.tensor(8.0), False, False)
        with pytest.raises(InputGridError, match=r"planned for uint4 inputs but received uint8"):
            layer.quant_weight(wider)
        signed = IntQuantTensor(x, torch.tensor(1.0), torch.tensor(0.0), torch.tensor(4.0), True, False)
        with pytest.raises(InputGridError, match=r"planned for uint4 inputs but received int4"):
            layer.quant_weight(signed)


def test_graph_mode_bounds_each_layer_against_the_site_upstream():
    """The FINN preset on a CNN: uint8 network input to the first layer, uint4 ReLU outputs after;
    each layer's proxy takes its upstream site's grid, and its promise says so."""
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)
    )
    data = [torch.rand(8, 1, 8, 8) for _ in range(2)]
    quantizer = ModelQuantizer(finn(4, 4, accumulator_bits=14, layer_accumulator_bits={"4": 12}))
    qmodel = quantizer.quantize_model(model, data, progress=False)
    found = promises(qmodel)
    assert {name: (p.accumulator_bits, p.input_bits, p.input_signed, p.dot_length) for name, p in found.items()} == {
        "0": (14, 8, False, 9),
        "4": (12, 4, False, 128),
    }
    plans = {p.name: p for p in quantizer.plans}
    assert plans["4"].upstream["input_tensors"] == "1"
    for name, layer, proxy in layers(qmodel):
        promise = found[name]
        q = _codes(layer)
        assert promise.channel_norms == tuple(int(v) for v in q.abs().sum(1))
        _assert_within_promise(q, promise.accumulator_bits, promise.input_bits, promise.input_signed, True)
    qmodel.train()
    qmodel(data[0]).sum().backward()  # QuantTensors from upstream reach the weight proxies in training too


@pytest.mark.parametrize(
    "algorithm",
    [GPTQConfig(sym=None, group_size=None), GPTQ(), GPFQ(), GPFA2Q(), Qronos()],  # QronosConfig: LLM blocks
    ids=lambda a: type(a).__name__,
)
def test_algorithms_that_round_weights_themselves_refuse_a2q_weights(algorithm):
    """Brevitas' GPxQ takes no weight quantizer that needs the layer's quantized input: refused before
    the model is touched, naming the algorithm, the modules and what is allowed."""
    model, data = _model("linear")
    config = _config(12, True, Dtype.uint4)
    config.algo_config = [algorithm]
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=rf"{type(algorithm).__name__} with accumulator-aware weights \(qat_spec=A2QSpec\) "
                       r"in modules \['0'\]; allowed: A2QSpec weights without it"):
        ModelQuantizer(config).quantize_model(model, data, progress=False, inplace=True)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
