"""Bipolar and ternary quantizers on Brevitas against references written from the formula
(``_reference/binary.py``): values exactly sign(x) x s and s x clamp(round(x / s), -1, 1) with the
scales of the mean |x|, the ternary thresholds, the straight-through gradients; layerwise and
graph mode (the sign replacing ReLU), QAT, freeze and the state_dict round trip."""

from __future__ import annotations

import copy

import pytest
import torch
from _reference import binary as BIN
from _shared.configs import layer_config
from _shared.numerics import exact
from _shared.quantize import quantize, quantize_with
from torch import nn

from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.qat import freeze
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.observer import UnitScaleObserver

BIPOLAR = QuantizationSpec(dtype=Dtype.bipolar)
TERNARY = QuantizationSpec(dtype=Dtype.ternary)
UNIT = QuantizationSpec(dtype=Dtype.bipolar, observer_cls=UnitScaleObserver)


def _weight(shape=(32, 64), seed: int = 3) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g) * torch.logspace(-1, 1, shape[0])[:, None]


def _linear(weight: torch.Tensor) -> nn.Sequential:
    layer = nn.Linear(weight.shape[1], weight.shape[0])
    with torch.no_grad():
        layer.weight.copy_(weight)
    return nn.Sequential(layer)


def _pof2(scale: torch.Tensor) -> torch.Tensor:
    return torch.exp2(torch.round(torch.log2(scale.double()))).float()


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
@pytest.mark.parametrize("scale_type", [ScaleType.float, ScaleType.pof2])
def test_bipolar_weights_are_sign_times_mean_abs(per_channel, scale_type):
    w = _weight()
    qscheme = QSchemeType.per_channel if per_channel else QSchemeType.per_tensor
    spec = QuantizationSpec(dtype=Dtype.bipolar, qscheme=qscheme, ch_axis=0 if per_channel else None, scale_type=scale_type)
    qm = quantize(layer_config(weight=spec), _linear(w))
    scale = BIN.mean_abs(w, dim=1 if per_channel else None, accumulate=torch.float32)  # computed at every forward
    if scale_type is ScaleType.pof2:
        scale = _pof2(scale)
    qw = qm[0].quant_weight()
    exact(qw.value, BIN.bipolar(w, scale))
    assert set(torch.unique(qw.value / qw.scale).tolist()) == {-1.0, 1.0} and int(qw.bit_width) == 1


@pytest.mark.parametrize("per_channel", [False, True], ids=["per_tensor", "per_channel"])
def test_ternary_weights_round_at_seven_tenths_of_the_mean_abs(per_channel):
    w = _weight()
    dim = 1 if per_channel else None
    qscheme = QSchemeType.per_channel if per_channel else QSchemeType.per_tensor
    spec = QuantizationSpec(dtype=Dtype.ternary, qscheme=qscheme, ch_axis=0 if per_channel else None)
    value = quantize(layer_config(weight=spec), _linear(w))[0].quant_weight().value
    scale = BIN.ternary_scale(w, dim, accumulate=torch.float32)
    exact(value, BIN.ternary(w, scale))
    # TWN's thresholds: zero exactly where |w| < 0.7 E|w| (away from the float rounding of the threshold)
    threshold = 0.7 * w.abs().mean(dim=dim, keepdim=per_channel)
    clear = (w.abs() - threshold).abs() > 1e-5 * threshold
    assert torch.equal((value == 0)[clear], (w.abs() < threshold)[clear])
    if per_channel:  # rows of one magnitude: neither nearly all zeros (an abs-max scale) nor none
        assert 0.3 < float((value == 0).float().mean()) < 0.6


def test_calibrated_activations_take_the_mean_abs_scale():
    calib = [torch.randn(8, 16, generator=torch.Generator().manual_seed(i)) * 3 for i in range(3)]
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(9)) * 3
    seen = torch.cat(calib)
    bipolar = quantize(layer_config(input_tensors=BIPOLAR), nn.Sequential(nn.Linear(16, 4)), calib)
    exact(bipolar[0].input_quant(x).value, BIN.bipolar(x, BIN.mean_abs(seen)))
    ternary = quantize(layer_config(input_tensors=TERNARY), nn.Sequential(nn.Linear(16, 4)), calib)
    exact(ternary[0].input_quant(x).value, BIN.ternary(x, BIN.ternary_scale(seen)))


def test_a_unit_scale_activation_is_the_sign_and_needs_no_calibration():
    x = torch.randn(64, 16, generator=torch.Generator().manual_seed(1))
    x[0, :3] = 0.0  # sign(0) = +1, as FINN's bipolar threshold at 0
    qm = quantize(layer_config(input_tensors=UNIT), nn.Sequential(nn.Linear(16, 4)))  # no calibration data
    exact(qm[0].input_quant(x).value, BIN.bipolar(x, 1.0))


def _input_grad(spec: QuantizationSpec, x: torch.Tensor, calib) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    qm = quantize(layer_config(input_tensors=spec), nn.Sequential(nn.Linear(x.shape[1], 4)), calib).train()
    x = x.clone().requires_grad_(True)
    out = qm[0].input_quant(x)
    upstream = torch.randn_like(x)
    (out.value * upstream).sum().backward()
    return x.grad, upstream, out.scale.detach()


@pytest.mark.parametrize(
    "spec, gradient",
    [
        (UNIT, lambda g, x, s: g * BIN.bipolar_act_grad(x, s)),  # hardtanh's: 1 inside [-1, 1]
        (BIPOLAR, lambda g, x, s: (g * s) * BIN.bipolar_act_grad(x, s)),  # sign(clamp(x, -s, s)) x s
        (TERNARY, lambda g, x, s: g * BIN.ternary_act_grad(x, s)),
    ],
    ids=["bipolar-unit", "bipolar-learned", "ternary"],
)
def test_activation_gradients_are_the_straight_through_estimators(spec, gradient):
    g = torch.Generator().manual_seed(4)
    calib = [torch.randn(32, 16, generator=g)]
    x = torch.randn(64, 16, generator=g) * 2
    grad, upstream, scale = _input_grad(spec, x, calib)
    expected = gradient(upstream, x, scale)
    if bool((scale != 1).any()):  # g x s (and / s) rounded in float32 on the way back: 1 ulp
        torch.testing.assert_close(grad, expected, rtol=2.5e-7, atol=0)
        assert torch.equal(grad == 0, expected == 0)
    else:
        exact(grad, expected)
    assert 0 < int((grad == 0).sum()) < grad.numel()  # the clipped ones get none, the others do


def test_bipolar_weight_gradient_passes_straight_through_and_through_the_scale():
    """q(w) = sign_ste(w) E|w|: d sum(g q) / dw = g E|w| + sum(g sign(w)) sign(w) / N."""
    w = _weight((8, 16))
    qm = quantize(layer_config(weight=BIPOLAR), _linear(w)).train()
    upstream = torch.randn(8, 16, generator=torch.Generator().manual_seed(5))
    (qm[0].quant_weight().value * upstream).sum().backward()
    sign = torch.sign(w)
    expected = upstream * w.abs().mean() + (upstream * sign).sum() * sign / w.numel()
    torch.testing.assert_close(qm[0].weight.grad, expected, rtol=1e-6, atol=1e-7)
    assert bool((qm[0].weight.grad != 0).all())  # BinaryConnect: every weight learns, none clipped


def _tfc(seed: int = 0) -> nn.Module:
    torch.manual_seed(seed)
    model = nn.Sequential(
        nn.Flatten(), nn.Linear(16, 12), nn.BatchNorm1d(12), nn.ReLU(), nn.Linear(12, 12), nn.BatchNorm1d(12),
        nn.ReLU(), nn.Linear(12, 3),
    )  # fmt: skip
    model(torch.randn(32, 16))  # batch norm statistics
    return model.eval()


def _data(n: int = 256, seed: int = 0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(n, 16, generator=g)
    y = (x[:, :5].sum(1) > x[:, 5:10].sum(1)).long() + (x[:, 10:].sum(1) > 3.3).long()
    return x, y


def _train(model: nn.Module, steps: int = 60) -> list[float]:
    x, y = _data()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    model.train()
    for step in range(steps):
        batch = slice((step * 32) % 256, (step * 32) % 256 + 32)
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(model(x[batch]), y[batch])
        loss.backward()
        optimizer.step()
        losses.append(float(loss))
    return losses


def test_graph_mode_w1a1_replaces_relu_by_the_sign():
    quantizer, qm = quantize_with(presets.finn(weight_bits=1, act_bits=1), _tfc(), [_data()[0][:64]])
    relu = dict(qm.named_modules())["3"]
    assert not any(isinstance(m, nn.ReLU) for m in relu.modules())
    plan = next(p for p in quantizer.plans if p.name == "3")
    assert plan.origins["output_tensors"].endswith("(bipolar: the sign replaces ReLU)")
    seen = {}
    relu.register_forward_hook(lambda m, args, out: seen.update(x=args[0], y=out))
    with torch.no_grad():
        qm(_data()[0][:16])
    x = getattr(seen["x"], "value", seen["x"])
    exact(seen["y"].value, BIN.bipolar(x, 1.0))  # sign of the batch norm output, not of relu(x)
    assert bool((x < 0).any())


def test_graph_mode_of_the_extension_config_keeps_the_sign_after_relu():
    cfg = ext.Config(
        global_quant_config=ext.QuantizationConfig(input_tensors=ext.QuantizationSpec(bit_width=1), weight=ext.QuantizationSpec(bit_width=1)),
        pre_quant_opt_config=[],
        backend=ext.Backend.fx,
    )
    quantizer, qm = quantize_with(cfg, _tfc(), [_data()[0][:64]])
    plan = next(p for p in quantizer.plans if p.name == "3")
    assert plan.specs["output_tensors"].dtype_name == "bipolar" and "unsigned" not in plan.origins["output_tensors"]
    assert not any(isinstance(m, nn.ReLU) for m in qm.modules())


@pytest.mark.parametrize(
    "make",
    [
        lambda: layer_config(weight=BIPOLAR, input_tensors=UNIT),
        lambda: layer_config(weight=TERNARY, input_tensors=TERNARY),
        lambda: presets.finn(weight_bits=1, act_bits=1),
        lambda: presets.finn(weight_bits=1, act_bits=2),
    ],
    ids=["layerwise-W1A1", "layerwise-ternary", "graph-W1A1", "graph-W1A2"],
)
def test_qat_freeze_and_state_dict_round_trip(make):
    calib = [_data()[0][:64]]
    qm = quantize(make(), _tfc(), calib)
    losses = _train(qm)
    assert sum(losses[-10:]) < sum(losses[:10])  # it learns through the straight-through estimators
    x = _data(64, seed=1)[0]
    qm.eval()
    with torch.no_grad():
        before = qm(x)
    # a fresh quantized model (uncalibrated) takes the trained state and computes the same, bit for bit
    fresh = quantize(make(), _tfc(), calibrate=False)
    fresh.load_state_dict(copy.deepcopy(qm.state_dict()))
    with torch.no_grad():
        exact(fresh.eval()(x), before)
        exact(freeze(qm)(x), before)  # freezing fixes, never changes
    assert not any(p.requires_grad for n, p in qm.named_parameters() if "quant" in n)
