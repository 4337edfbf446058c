"""``Dtype.bfloat16`` / ``Dtype.float16``: round-to-nearest-even casts (no scale) of weights and
activations, against ``tests/_reference/minifloat.py`` (every 16-bit pattern decoded from its
fields) and, as a second check, against ``x.to(dtype)``.

Conversion is IEEE: ties to even, overflow to +-inf (values from max + ulp/2 up), NaN stays NaN.
Comparisons are exact.
"""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from _reference import minifloat as R
from _reference.compare import same
from _shared.configs import layer_config
from _shared.models import qat_model
from _shared.quantize import assert_trains, quantize
from torch import nn

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType
from quark.torch.quantization.observer import PerTensorMinMaxObserver

CASTS = ("bfloat16", "float16")
#: (exponent bits, mantissa bits, bias, max finite, finite value count with one zero)
FACTS = {
    "bfloat16": (8, 7, 127, (2 - 2.0**-7) * 2.0**127, 2**16 - 2 * 2**7 - 1),
    "float16": (5, 10, 15, 65504.0, 2**16 - 2 * 2**10 - 1),
}

# Regression (found by this file, fixed): CastQuant.forward computes x + (cast(x) - x).detach(): for
# x = +-inf that is inf + (inf - inf) = NaN, so an infinite input gives NaN instead of x.to(dtype) =
# +-inf



# -- helpers ---------------------------------------------------------------------------------------




def cast_spec(name: str, **kw) -> QuantizationSpec:
    return QuantizationSpec(dtype=Dtype[name], **kw)


def value(t):
    return t.value if hasattr(t, "value") else t


def torch_cast(x: torch.Tensor, name: str) -> torch.Tensor:
    return x.to(getattr(torch, name)).float()


def act_layer(name: str, cols: int = 64) -> nn.Module:
    """A quantized Linear with cast inputs (no calibration needed: a cast has no scale)."""
    return quantize(layer_config(input_tensors=cast_spec(name)), nn.Sequential(nn.Linear(cols, 4)), None)[0]


def act(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return value(layer.input_quant(x.to(torch.float32).reshape(1, -1))).reshape(-1)


# -- the reference itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", CASTS)
def test_reference_decodes_every_pattern_like_torch(name):
    f = R.FORMATS[name]
    e, m, bias, mx, count = FACTS[name]
    assert (f.exponent_bits, f.mantissa_bits, f.bias, R.max_finite(f), len(R.values(f))) == (
        e,
        m,
        bias,
        mx,
        count,
    )
    decoded = torch.tensor([R.decode(f, c) for c in f.codes], dtype=torch.float64)
    patterns = torch.arange(2**16, dtype=torch.int32).to(torch.int16).view(getattr(torch, name))
    assert same(patterns.float(), decoded)


# -- every value, ties, overflow, non-finite ----------------------------------------------------------


@pytest.mark.parametrize("name", CASTS)
def test_every_finite_pattern_round_trips_as_weight(name):
    vals = R.values(R.FORMATS[name]).float()
    w = torch.zeros(256 * 256)
    w[: len(vals)] = vals
    w = w.reshape(256, 256)
    lin = nn.Linear(256, 256)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=cast_spec(name)), nn.Sequential(lin))[0].quant_weight()
    assert qw.scale.item() == 1.0 and qw.zero_point.item() == 0.0
    assert same(qw.value, w)


@pytest.mark.parametrize("name", CASTS)
def test_every_finite_pattern_round_trips_as_activation(name):
    vals = R.values(R.FORMATS[name]).float()
    assert same(act(act_layer(name), vals), vals)


@pytest.mark.parametrize("name", CASTS)
def test_midpoints_round_to_even(name):
    f = R.FORMATS[name]
    mids, targets = R.midpoints(f)
    mids = mids.float()  # exact: one bit more than the format
    out = act(act_layer(name), mids)
    assert same(out, targets)
    assert same(out, torch_cast(mids, name))


@pytest.mark.parametrize("name", CASTS)
def test_values_next_to_midpoints_round_to_nearest(name):
    mids = R.midpoints(R.FORMATS[name])[0].float()
    mids = mids[mids != 0]
    x = torch.cat([torch.nextafter(mids, torch.zeros_like(mids)), torch.nextafter(mids, mids * 2)])
    out = act(act_layer(name), x)
    assert same(out, R.round_to(x, R.FORMATS[name], saturate=False))
    assert same(out, torch_cast(x, name))


@pytest.mark.parametrize("name", CASTS)
def test_overflow_gives_inf_like_torch(name):
    f = R.FORMATS[name]
    mx = R.max_finite(f)
    ulp = mx - R.values(f)[-2].item()
    fmax = torch.finfo(torch.float32).max
    big = torch.tensor(
        [mx, mx + ulp / 4, min(mx + ulp / 2, fmax), min(mx + ulp, fmax), fmax], dtype=torch.float64
    ).float()
    x = torch.cat([big, -big])
    out = act(act_layer(name), x)
    assert same(out, torch_cast(x, name))
    assert same(out, R.round_to(x, f, saturate=False))
    if name == "float16":  # 65520 = 65504 + ulp/2: the tie goes to the even neighbour, inf
        assert same(out[:4], torch.tensor([65504.0, 65504.0, math.inf, math.inf]))


def test_float16_weight_beyond_max_becomes_inf():
    lin = nn.Linear(4, 1)
    lin.weight.data.copy_(torch.tensor([[65519.0, 65520.0, -1e6, 1.0]]))
    qw = quantize(layer_config(weight=cast_spec("float16")), nn.Sequential(lin))[0].quant_weight()
    assert same(qw.value, torch.tensor([[65504.0, math.inf, -math.inf, 1.0]]))


@pytest.mark.parametrize("name", CASTS)
def test_nan_input_gives_nan(name):
    out = act(act_layer(name), torch.tensor([math.nan, 1.0]))
    assert out[0].isnan() and out[1] == 1.0


@pytest.mark.parametrize("name", CASTS)
def test_inf_input_stays_inf(name):
    x = torch.tensor([math.inf, -math.inf, 2.0])
    assert same(act(act_layer(name), x), torch_cast(x, name))


@pytest.mark.parametrize("name", CASTS)
def test_random_tensors_equal_torch_cast(name):
    g = torch.Generator().manual_seed(0)
    f = R.FORMATS[name]
    tiny = R.min_subnormal(f)
    parts = [
        torch.randn(4096, generator=g),
        torch.randn(4096, generator=g) * torch.logspace(-30, 30, 4096).float(),
        (torch.rand(4096, generator=g) - 0.5) * tiny * 300,  # around the subnormals
        (torch.rand(4096, generator=g) * 2 - 1)
        * min(R.max_finite(f) * 1.1, torch.finfo(torch.float32).max),  # overflow
    ]
    x = torch.cat(parts)
    assert bool(torch.isfinite(x).all())
    out = act(act_layer(name, cols=x.numel()), x)
    assert same(out, torch_cast(x, name))
    assert same(out, R.round_to(x, f, saturate=False))


@pytest.mark.parametrize("name", CASTS)
def test_quant_tensor_describes_the_format(name):
    qw = quantize(layer_config(weight=cast_spec(name)), nn.Sequential(nn.Linear(8, 2)))[0].quant_weight()
    e, m, bias, _, _ = FACTS[name]
    assert (qw.exponent_bit_width.item(), qw.mantissa_bit_width.item(), qw.exponent_bias.item()) == (
        e,
        m,
        bias,
    )
    assert not bool(qw.saturating)
    assert tuple(qw.inf_values) == ("0" * m,)
    assert set(qw.nan_values) == {format(i, f"0{m}b") for i in range(1, 2**m)}


@pytest.mark.parametrize("name", CASTS)
def test_layer_output_is_cast_of_cast_inputs(name):
    g = torch.Generator().manual_seed(1)
    lin = nn.Linear(64, 16)
    lin.weight.data.copy_(torch.randn(16, 64, generator=g))
    model = quantize(layer_config(weight=cast_spec(name), input_tensors=cast_spec(name), output_tensors=cast_spec(name)), nn.Sequential(lin))
    x = torch.randn(8, 64, generator=g)
    expected = torch_cast(
        F.linear(torch_cast(x, name), torch_cast(lin.weight.data, name), lin.bias.data), name
    )
    assert same(model(x), expected)


@pytest.mark.parametrize("name", CASTS)
def test_straight_through_gradient(name):
    layer = act_layer(name)
    x = torch.randn(2, 64, requires_grad=True)
    value(layer.input_quant(x)).mul(torch.arange(64.0)).sum().backward()
    assert same(x.grad, torch.arange(64.0).expand(2, 64))


@pytest.mark.parametrize("name", CASTS)
def test_qat_steps_have_finite_nonzero_weight_gradients(name):
    assert_trains(quantize(layer_config(weight=cast_spec(name), input_tensors=cast_spec(name)), qat_model(), None))


# -- config errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"scale_type": ScaleType.pof2},
            r"scale_type=ScaleType\.pof2 is not supported with dtype=Dtype\.{name} \(a cast, no scale\)",
        ),
        (
            {"scale_type": ScaleType.float16},
            r"scale_type=ScaleType\.float16 is not supported with dtype=Dtype\.{name}",
        ),
        (
            {"qscheme": QSchemeType.per_channel, "ch_axis": 0},
            r"qscheme=QSchemeType\.per_channel is not supported with dtype=Dtype\.{name} \(a cast",
        ),
        (
            {"qscheme": QSchemeType.per_group, "ch_axis": 1, "group_size": 8},
            r"qscheme=QSchemeType\.per_group is not supported with dtype=Dtype\.{name}",
        ),
        (
            {"symmetric": False},
            r"symmetric=False is not supported with dtype=Dtype\.{name} \(a cast, no scale\)",
        ),
        (
            {"round_method": RoundType.floor},
            r"round_method=RoundType\.floor is not supported with dtype=Dtype\.{name}",
        ),
        (
            {"observer_cls": PerTensorMinMaxObserver},
            r"observer_cls=.*PerTensorMinMaxObserver.* is not supported with dtype=Dtype\.{name}",
        ),
    ],
)
@pytest.mark.parametrize("name", CASTS)
def test_cast_config_errors(name, kwargs, match):
    with pytest.raises(ValueError, match=match.format(name=name)):
        quantize(layer_config(weight=cast_spec(name, **kwargs)), nn.Sequential(nn.Linear(32, 4)))


@pytest.mark.parametrize("name", CASTS)
def test_cast_bias_is_rejected(name):
    with pytest.raises(ValueError, match=r"bias quantization must be integer; got a cast format"):
        quantize(layer_config(bias=cast_spec(name)), nn.Sequential(nn.Linear(32, 4)))


# Regression (found by this file, fixed): a cast weight spec with is_dynamic=True is accepted
# silently (_cast_from_main drops the field), while every other weight format raises
# 'is_dynamic=True applies to activations'


def test_cast_weight_rejects_is_dynamic_like_other_formats():
    with pytest.raises(ValueError, match=r"is_dynamic=True"):
        quantize(layer_config(weight=cast_spec("bfloat16", is_dynamic=True)), nn.Sequential(nn.Linear(32, 4)))
