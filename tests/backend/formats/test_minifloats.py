"""Scaled minifloats (OCP FP8 E4M3 / E5M2, FNUZ FP8, OCP MX FP6 / FP4, extension float_quant)
against the bit-pattern reference in ``tests/_reference/minifloat.py``.

Every expected value comes from enumerating the codes of each format (never from the package nor
from torch's float8 casts, which serve only as a second cross-check of the reference). A scale of
exactly 1 is obtained by making max|x| equal the format's max finite value (weights: the weight
holds +-max; static activations: calibration data holds +-max), so that the quantizer's output is
the format's own rounding. Comparisons are exact.

Behaviour of the package on non-finite inputs (Brevitas' float quantizers under the hood):
NaN -> NaN for every format; +-inf -> NaN (not +-max_finite as OCP's saturating conversion
defines: see ``test_inf_input_saturates_to_max``).
"""

from __future__ import annotations

import math

import pytest
import torch
from _reference import minifloat as R
from _reference.compare import same
from _shared.configs import layer_config
from _shared.models import qat_model
from _shared.quantize import assert_trains, qat_steps, quantize
from torch import nn

from quark.torch.extensions.brevitas import config as X
from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType
from quark.torch.quantization.observer import (
    PerChannelMinMaxObserver,
    PerTensorMSEObserver,
)

FORMATS = ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz", "fp6_e3m2", "fp6_e2m3", "fp4")
WITH_NAN = ("fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz", "fp8_e5m2fnuz")
TORCH_FP8 = {
    "fp8_e4m3": torch.float8_e4m3fn,
    "fp8_e5m2": torch.float8_e5m2,
    "fp8_e4m3fnuz": torch.float8_e4m3fnuz,
    "fp8_e5m2fnuz": torch.float8_e5m2fnuz,
}
#: OCP / FNUZ definitions: (exponent bits, mantissa bits, bias, max finite, finite value count)
FACTS = {
    "fp8_e4m3": (4, 3, 7, 448.0, 253),  # 256 codes - 2 NaN (S.1111.111) - one of +-0
    "fp8_e5m2": (5, 2, 15, 57344.0, 247),  # 256 - 2 inf - 6 NaN - 1
    "fp8_e4m3fnuz": (4, 3, 8, 240.0, 255),  # 256 - NaN (0x80)
    "fp8_e5m2fnuz": (5, 2, 16, 57344.0, 255),
    "fp6_e3m2": (3, 2, 3, 28.0, 63),  # all codes finite
    "fp6_e2m3": (2, 3, 1, 7.5, 63),
    "fp4": (2, 1, 1, 6.0, 15),
}
QSCHEMES = {  # label -> (qscheme, ch_axis, group_size) for a Linear(64, 16) weight
    "per_tensor": (None, None, None),
    "per_channel_out": ("per_channel", 0, None),
    "per_channel_in": ("per_channel", 1, None),
    "per_group_in": ("per_group", 1, 16),
    "per_group_out": ("per_group", 0, 4),
}
SCALE_TYPES = ("float", "pof2", "float16", "bfloat16", "float32")

# Regression (found by this file, fixed): saturating OCP FP8 quantizer maps +-inf inputs to NaN
# (Brevitas computes inf/inf in the internal scale) instead of +-max_finite as OCP's saturating
# conversion defines
# Regression (found by this file, fixed): scale_type=float16 with max|w|/max_finite below float16's
# smallest subnormal: the scale rounds to 0 and every quantized weight of that tensor/channel is NaN
# (no clamp, no error)


# -- helpers ---------------------------------------------------------------------------------------





def ext_layer_config(**roles) -> X.Config:
    """The extension's config of one global layer config, without pre-processing."""
    return X.Config(global_quant_config=X.QuantizationConfig(**roles), pre_quant_opt_config=[])


def spec(fmt: str, qscheme=None, ch_axis=None, group_size=None, scale_type=None, **kw) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=Dtype[fmt],
        qscheme=QSchemeType[qscheme] if qscheme else None,
        ch_axis=ch_axis,
        group_size=group_size,
        scale_type=ScaleType[scale_type] if scale_type else None,
        **kw,
    )


def value(t):
    return t.value if hasattr(t, "value") else t


def linear_holding(values: torch.Tensor, fill: float, cols: int = 32) -> nn.Linear:
    """A Linear whose weight holds ``values`` (row-major), padded with ``fill``."""
    n = values.numel()
    rows = math.ceil(n / cols)
    w = torch.full((rows * cols,), fill, dtype=torch.float32)
    w[:n] = values.to(torch.float32)
    lin = nn.Linear(cols, rows)
    lin.weight.data.copy_(w.reshape(rows, cols))
    return lin


def unit_scale_act_layer(fmt: str, cols: int = 32) -> nn.Module:
    """A quantized Linear whose static input quantizer has scale exactly 1 (calibrated on +-max)."""
    mx = R.max_finite(R.FORMATS[fmt])
    calib = [torch.stack([torch.full((cols,), mx), torch.full((cols,), -mx), torch.zeros(cols)])]
    model = quantize(layer_config(input_tensors=spec(fmt)), nn.Sequential(nn.Linear(cols, 4)), calib)
    layer = model[0]
    assert layer.input_quant(torch.zeros(1, cols)).scale.item() == 1.0
    return layer


def act(layer: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return value(layer.input_quant(x.to(torch.float32).reshape(1, -1))).reshape(-1)


# -- the reference itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_reference_matches_format_facts(fmt):
    f = R.FORMATS[fmt]
    e, m, bias, mx, count = FACTS[fmt]
    assert (f.exponent_bits, f.mantissa_bits, f.bias) == (e, m, bias)
    assert R.max_finite(f) == mx
    assert len(R.values(f)) == count
    assert R.min_subnormal(f) == 2.0 ** (1 - bias - m)
    assert R.has_inf(f) == (fmt == "fp8_e5m2")
    nan_codes = [c for c in f.codes if math.isnan(R.decode(f, c))]
    expected_nan = {"fp8_e4m3": [0x7F, 0xFF], "fp8_e5m2": [0x7D, 0x7E, 0x7F, 0xFD, 0xFE, 0xFF]}
    expected_nan.update({"fp8_e4m3fnuz": [0x80], "fp8_e5m2fnuz": [0x80]})
    assert nan_codes == expected_nan.get(fmt, [])


@pytest.mark.parametrize("fmt", WITH_NAN)
def test_reference_cross_checked_with_torch_float8(fmt):
    """Second check only: decoding and in-range rounding agree with torch's float8 dtypes."""
    f, dt = R.FORMATS[fmt], TORCH_FP8[fmt]
    decoded = torch.tensor([R.decode(f, c) for c in f.codes], dtype=torch.float32)
    assert same(torch.arange(256, dtype=torch.uint8).view(dt).float(), decoded)
    torch.manual_seed(0)
    mx = R.max_finite(f)
    x = torch.cat([(torch.rand(20000) * 2 - 1) * mx, R.midpoints(f)[0].float(), torch.logspace(-12, 0, 500)])
    assert same(R.round_to(x, f), x.to(dt).float())


# -- representable values, ties, subnormals, saturation ---------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_representable_weight_round_trips(fmt):
    f = R.FORMATS[fmt]
    vals = R.values(f)
    lin = linear_holding(vals, R.max_finite(f))
    qw = quantize(layer_config(weight=spec(fmt)), nn.Sequential(lin))[0].quant_weight()
    assert qw.scale.item() == 1.0
    assert same(qw.value, lin.weight.data)
    assert same(qw.value.flatten()[: len(vals)], vals)


@pytest.mark.parametrize("fmt", FORMATS)
def test_every_representable_activation_round_trips(fmt):
    f = R.FORMATS[fmt]
    layer = unit_scale_act_layer(fmt)
    vals = R.values(f)
    assert same(act(layer, vals), vals)


@pytest.mark.parametrize("fmt", FORMATS)
def test_midpoints_round_to_even_mantissa(fmt):
    f = R.FORMATS[fmt]
    mids, targets = R.midpoints(f)
    lin = linear_holding(mids, R.max_finite(f))
    qw = quantize(layer_config(weight=spec(fmt)), nn.Sequential(lin))[0].quant_weight()
    assert qw.scale.item() == 1.0
    assert same(qw.value.flatten()[: len(mids)], targets)
    assert same(act(unit_scale_act_layer(fmt), mids), targets)


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_near_midpoints_round_to_nearest(fmt):
    """Just below / above each midpoint (one float32 ulp): the nearer neighbour, not the even one."""
    f = R.FORMATS[fmt]
    mids = R.midpoints(f)[0].float()
    nonzero = mids[mids != 0]
    below = torch.nextafter(nonzero, torch.zeros_like(nonzero))  # towards zero
    above = torch.nextafter(nonzero, nonzero * 2)  # away from zero
    x = torch.cat([below, above])
    layer = unit_scale_act_layer(fmt)
    assert same(act(layer, x), R.round_to(x, f))
    vals = R.values(f)
    lo_idx = torch.searchsorted(vals, nonzero.double())  # neighbour above each midpoint
    towards_zero = torch.where(nonzero > 0, vals[lo_idx - 1], vals[lo_idx])
    assert same(act(layer, below), towards_zero)


@pytest.mark.parametrize("fmt", FORMATS)
def test_subnormals_round_trip(fmt):
    f = R.FORMATS[fmt]
    sub = torch.tensor(R.subnormals(f), dtype=torch.float64)
    tiny = R.min_subnormal(f)
    x = torch.cat([sub, -sub, torch.tensor([R.min_normal(f), tiny / 2, -tiny / 2, tiny * 0.75, tiny * 0.25])])
    expected = torch.cat([sub, -sub, torch.tensor([R.min_normal(f), 0.0, 0.0, tiny, 0.0])])
    assert same(R.round_to(x, f), expected)  # tiny/2 is a tie between 0 (even) and tiny (odd)
    layer = unit_scale_act_layer(fmt)
    assert same(act(layer, x), expected)
    lin = linear_holding(x, R.max_finite(f))
    qw = quantize(layer_config(weight=spec(fmt)), nn.Sequential(lin))[0].quant_weight()
    assert same(qw.value.flatten()[: len(x)], expected)


@pytest.mark.parametrize("fmt", FORMATS)
def test_values_above_max_saturate(fmt):
    f = R.FORMATS[fmt]
    mx = R.max_finite(f)
    ulp = mx - R.values(f)[-2].item()
    big = torch.tensor(
        [mx + ulp / 2, mx + ulp, mx * 1.01, mx * 2, mx * 1000, 3.0e38, torch.finfo(torch.float32).max]
    )
    x = torch.cat([big, -big])
    expected = torch.cat([torch.full_like(big, mx), torch.full_like(big, -mx)])
    assert same(R.round_to(x, f), expected)
    assert same(act(unit_scale_act_layer(fmt), x), expected)


@pytest.mark.parametrize("fmt", WITH_NAN)
def test_nan_input_gives_nan(fmt):
    out = act(unit_scale_act_layer(fmt), torch.tensor([math.nan, 1.0, -math.nan]))
    assert out[0].isnan() and out[2].isnan() and out[1] == 1.0


@pytest.mark.parametrize("fmt", ("fp8_e4m3", "fp8_e5m2"))
def test_inf_input_saturates_to_max(fmt):
    f = R.FORMATS[fmt]
    x = torch.tensor([math.inf, -math.inf])
    expected = R.round_to(x, f)  # saturating conversion: +-max_finite
    assert same(act(unit_scale_act_layer(fmt), x), expected)


#: what the quantized tensor reports: exponent bias, inf codes, NaN codes (mantissa strings)
METADATA = {
    "fp8_e4m3": (7, None, {"111"}),
    "fp8_e5m2": (15, {"00"}, {"01", "10", "11"}),
    "fp8_e4m3fnuz": (8, None, ...),  # no inf; the FNUZ NaN (0x80) has no mantissa-code form: not asserted
    "fp8_e5m2fnuz": (16, None, ...),
    "fp6_e3m2": (3, None, None),
    "fp6_e2m3": (1, None, None),
    "fp4": (1, None, None),
}


@pytest.mark.parametrize("fmt", FORMATS)
def test_quant_tensor_describes_the_format(fmt):
    lin = nn.Linear(32, 4)
    qw = quantize(layer_config(weight=spec(fmt)), nn.Sequential(lin))[0].quant_weight()
    e, m, bias, _, _ = FACTS[fmt]
    exp_bias, infs, nans = METADATA[fmt]
    assert (qw.exponent_bit_width.item(), qw.mantissa_bit_width.item(), qw.exponent_bias.item()) == (
        e,
        m,
        exp_bias,
    )
    assert qw.exponent_bias.item() == bias
    assert bool(qw.saturating)
    assert (set(qw.inf_values) if qw.inf_values else None) == infs
    if nans is not ...:
        assert (set(qw.nan_values) if qw.nan_values else None) == nans


# -- scales ----------------------------------------------------------------------------------------


def _scaled_weight(seed: int = 0) -> torch.Tensor:
    """Linear(64, 16) weight with rows spanning five decades and a few exact format values."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(16, 64, generator=g) * torch.logspace(-2, 2, 16)[:, None]
    w[3, :8] = torch.tensor([0.0, 1.0, -1.0, 0.5, 2.0**-7, -3.0, 1.75, 1e-6])
    return w


@pytest.mark.parametrize("scale_type", SCALE_TYPES)
@pytest.mark.parametrize("qs", QSCHEMES)
@pytest.mark.parametrize("fmt", FORMATS)
def test_weight_scale_and_values_match_reference(fmt, qs, scale_type):
    f = R.FORMATS[fmt]
    qscheme, axis, group = QSCHEMES[qs]
    w = _scaled_weight()
    lin = nn.Linear(64, 16)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=spec(fmt, qscheme, axis, group, scale_type)), nn.Sequential(lin))[0].quant_weight()
    amax = R.absmax(w, qscheme or "per_tensor", axis or 0, group)
    s = R.float_scale(amax, f, scale_type)
    assert same(qw.scale.expand_as(w) if qw.scale.dim() else qw.scale, s.expand_as(w) if s.dim() else s)
    assert same(qw.value, R.quantize_scaled(w, f, s))
    if scale_type == "pof2":
        assert bool((torch.frexp(qw.scale)[0] == 0.5).all())  # exact powers of two
    if scale_type in ("float16", "bfloat16"):
        assert same(qw.scale, qw.scale.to(getattr(torch, scale_type)).float())


@pytest.mark.parametrize("fmt", ("fp8_e4m3", "fp4"))
def test_per_channel_scale_is_amax_over_max_finite_exactly(fmt):
    """Each output channel's max|w| is max_finite * 2^k: scale exactly 2^k, every value kept."""
    f = R.FORMATS[fmt]
    vals = R.values(f)
    rows = []
    for k in range(-3, 5):
        row = vals[torch.randint(len(vals), (31,), generator=torch.Generator().manual_seed(k + 3))]
        rows.append(torch.cat([row, torch.tensor([R.max_finite(f)])]) * 2.0**k)
    w = torch.stack(rows).float()
    lin = nn.Linear(32, 8)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=spec(fmt, "per_channel", 0)), nn.Sequential(lin))[0].quant_weight()
    assert same(qw.scale.flatten(), torch.exp2(torch.arange(-3, 5).float()))
    assert same(qw.value, w)


def test_float16_scale_type_never_yields_nan_weights():
    lin = nn.Linear(4, 1)
    lin.weight.data.copy_(torch.tensor([[1e-4, -5e-5, 2e-5, 0.0]]))  # amax / 57344 < 6e-8
    qw = quantize(layer_config(weight=spec("fp8_e5m2", scale_type="float16")), nn.Sequential(lin))[0].quant_weight()
    assert bool(torch.isfinite(qw.value).all())


@pytest.mark.parametrize("scale_type", ("float", "pof2", "float16"))
@pytest.mark.parametrize("fmt", ("fp8_e4m3", "fp8_e5m2fnuz", "fp6_e2m3", "fp4"))
def test_static_activation_scale_from_calibration_amax(fmt, scale_type):
    f = R.FORMATS[fmt]
    g = torch.Generator().manual_seed(1)
    calib = [torch.randn(8, 32, generator=g) * k for k in (1.0, 3.0, 2.0)]
    amax = torch.stack([c.abs().max() for c in calib]).max()
    layer = quantize(layer_config(input_tensors=spec(fmt, scale_type=scale_type)), nn.Sequential(nn.Linear(32, 4)), calib)[
        0
    ]
    x = torch.randn(8, 32, generator=g) * 4  # beyond the calibrated range: saturates
    out = layer.input_quant(x)
    s = R.float_scale(amax, f, scale_type)
    assert out.scale.item() == s.item()
    assert same(value(out), R.quantize_scaled(x, f, s))


@pytest.mark.parametrize("scale_type", ("float", "pof2", "bfloat16"))
@pytest.mark.parametrize("fmt", ("fp8_e4m3", "fp8_e4m3fnuz", "fp6_e3m2", "fp4"))
def test_dynamic_activation_scale_per_call(fmt, scale_type):
    f = R.FORMATS[fmt]
    layer = quantize(layer_config(input_tensors=spec(fmt, scale_type=scale_type, is_dynamic=True)), nn.Sequential(nn.Linear(32, 4)), None)[0]
    g = torch.Generator().manual_seed(2)
    for k in (0.01, 1.0, 300.0):
        x = torch.randn(4, 32, generator=g) * k
        out = layer.input_quant(x)
        s = R.float_scale(x.abs().max(), f, scale_type)
        assert out.scale.item() == s.item()
        assert same(value(out), R.quantize_scaled(x, f, s))


def test_conv_weight_per_channel_default_axis_is_output_channels():
    g = torch.Generator().manual_seed(3)
    conv = nn.Conv2d(8, 6, 3)
    w = torch.randn(6, 8, 3, 3, generator=g) * torch.logspace(-1, 1, 6)[:, None, None, None]
    conv.weight.data.copy_(w)
    qw = quantize(layer_config(weight=spec("fp8_e4m3", "per_channel", 0)), nn.Sequential(conv))[0].quant_weight()
    s = R.float_scale(R.absmax(w, "per_channel", 0), R.FORMATS["fp8_e4m3"])
    assert same(qw.scale.reshape(-1), s.reshape(-1))
    assert same(qw.value, R.quantize_scaled(w, R.FORMATS["fp8_e4m3"], s))


# -- Brevitas extension: QuantType.float_quant ------------------------------------------------------

#: (E, M): OCP FP8 layouts, OCP MX element layouts, and other layouts (all codes finite)
EXT_LAYOUTS = ((4, 3), (5, 2), (3, 2), (2, 3), (2, 1), (3, 4), (4, 2), (2, 2), (1, 2), (3, 3), (5, 10))


def ext_float(e: int, m: int, **kw) -> X.QuantizationSpec:
    return X.QuantizationSpec(
        quant_type=X.QuantType.float_quant,
        bit_width=1 + e + m,
        exponent_bit_width=e,
        mantissa_bit_width=m,
        **kw,
    )


@pytest.mark.parametrize("e,m", EXT_LAYOUTS)
def test_extension_float_quant_values_and_ties(e, m):
    f = R.ocp_style(e, m)
    vals = R.values(f)
    mids, targets = R.midpoints(f)
    x = torch.cat([vals, mids])
    expected = torch.cat([vals, targets])
    lin = linear_holding(x, R.max_finite(f))
    qw = quantize(ext_layer_config(weight=ext_float(e, m)), nn.Sequential(lin))[0].quant_weight()
    assert qw.scale.item() == 1.0
    assert (qw.exponent_bit_width.item(), qw.mantissa_bit_width.item(), qw.exponent_bias.item()) == (
        e,
        m,
        f.bias,
    )
    assert same(qw.value.flatten()[: len(x)], expected)


@pytest.mark.parametrize("scale_type", ("float", "pof2"))
@pytest.mark.parametrize("qscheme", ("per_tensor", "per_channel"))
@pytest.mark.parametrize("e,m", ((4, 3), (2, 1), (3, 4)))
def test_extension_float_quant_scales(e, m, qscheme, scale_type):
    f = R.ocp_style(e, m)
    w = _scaled_weight(4)
    lin = nn.Linear(64, 16)
    lin.weight.data.copy_(w)
    s_spec = ext_float(e, m, qscheme=QSchemeType[qscheme], scale_type=ScaleType[scale_type])
    qw = quantize(ext_layer_config(weight=s_spec), nn.Sequential(lin))[0].quant_weight()
    s = R.float_scale(R.absmax(w, qscheme, 0), f, scale_type)
    assert same(qw.scale.reshape(-1), s.reshape(-1))
    assert same(qw.value, R.quantize_scaled(w, f, s))


@pytest.mark.parametrize(
    "fmt,e,m", (("fp8_e4m3", 4, 3), ("fp8_e5m2", 5, 2), ("fp6_e3m2", 3, 2), ("fp6_e2m3", 2, 3), ("fp4", 2, 1))
)
def test_extension_and_main_api_agree(fmt, e, m):
    w = _scaled_weight(5)
    lin = nn.Linear(64, 16)
    lin.weight.data.copy_(w)
    a = quantize(layer_config(weight=spec(fmt)), nn.Sequential(lin))[0].quant_weight()
    b = quantize(ext_layer_config(weight=ext_float(e, m)), nn.Sequential(lin))[0].quant_weight()
    assert same(a.value, b.value) and same(a.scale, b.scale)


# -- QAT ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", FORMATS)
def test_qat_steps_have_finite_nonzero_weight_gradients(fmt):
    assert_trains(quantize(layer_config(weight=spec(fmt), input_tensors=spec(fmt)), qat_model(), [torch.randn(4, 32, 2, 2)]))


def test_qat_extension_float_quant():
    spec_ = ext_float(4, 3)
    model = quantize(ext_layer_config(weight=spec_, input_tensors=spec_), qat_model(), [torch.randn(4, 32, 2, 2)])
    for loss, grads in qat_steps(model):
        assert math.isfinite(loss)
        assert all(bool(torch.isfinite(g).all()) and g.abs().sum() > 0 for g in grads)


# -- config errors -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,match",
    [
        (
            {"dtype": Dtype.fp8_e4m3, "symmetric": False},
            r"symmetric=False is not supported with dtype=Dtype\.fp8_e4m3",
        ),
        (
            {"dtype": Dtype.fp8_e5m2, "symmetric": False},
            r"symmetric=False is not supported with dtype=Dtype\.fp8_e5m2",
        ),
        (
            {"dtype": Dtype.fp8_e5m2, "round_method": RoundType.floor},
            r"round_method=RoundType\.floor is not supported with dtype=Dtype\.fp8_e5m2",
        ),
        (
            {"dtype": Dtype.fp4, "round_method": RoundType.round},
            r"round_method=RoundType\.round is not supported with dtype=Dtype\.fp4",
        ),
        (
            {"dtype": Dtype.fp8_e4m3, "observer_cls": PerTensorMSEObserver},
            r"PerTensorMSEObserver searches an integer grid; not supported with dtype=Dtype\.fp8_e4m3",
        ),
        (
            {"dtype": Dtype.fp6_e2m3, "observer_cls": PerTensorMSEObserver},
            r"PerTensorMSEObserver.*not supported with dtype=Dtype\.fp6_e2m3",
        ),
    ],
)
def test_main_api_float_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        quantize(layer_config(weight=QuantizationSpec(**kwargs)), nn.Sequential(nn.Linear(32, 4)))


def test_float_activation_errors():
    calib = [torch.randn(2, 32)]
    with pytest.raises(ValueError, match=r"input_tensors.*PerTensorMSEObserver searches an integer grid"):
        quantize(layer_config(input_tensors=spec("fp8_e4m3", observer_cls=PerTensorMSEObserver)), nn.Sequential(nn.Linear(32, 4)), calib)
    with pytest.raises(ValueError, match=r"qscheme=per_channel is not supported for input_tensors"):
        quantize(layer_config(input_tensors=spec("fp8_e4m3", "per_channel", 1, observer_cls=PerChannelMinMaxObserver)), nn.Sequential(nn.Linear(32, 4)), calib)
    with pytest.raises(ValueError, match=r"bias quantization must be integer; got a float format"):
        quantize(layer_config(bias=spec("fp8_e4m3")), nn.Sequential(nn.Linear(32, 4)), calib)


def test_float_per_group_not_dividing_raises():
    with pytest.raises(ValueError, match=r"group_size=32 does not divide axis 1"):
        quantize(layer_config(weight=spec("fp8_e4m3", "per_group", 1, 32)), nn.Sequential(nn.Linear(48, 4)))


FQ = X.QuantType.float_quant


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"bit_width": 8}, r"float_quant needs exponent_bit_width and mantissa_bit_width"),
        (
            {"bit_width": 8, "exponent_bit_width": 4},
            r"float_quant needs exponent_bit_width and mantissa_bit_width",
        ),
        (
            {"bit_width": 8, "mantissa_bit_width": 3},
            r"float_quant needs exponent_bit_width and mantissa_bit_width",
        ),
        (
            {"bit_width": 8, "exponent_bit_width": 4, "mantissa_bit_width": 2},
            r"bit_width=8 must equal 1 \+ exponent_bit_width \+ mantissa_bit_width \(1 \+ 4 \+ 2\)",
        ),
        (
            {"bit_width": 6, "exponent_bit_width": 4, "mantissa_bit_width": 3},
            r"bit_width=6 must equal 1 \+ exponent_bit_width",
        ),
        (
            {"exponent_bit_width": 2, "mantissa_bit_width": 1},
            r"bit_width=8 must equal",
        ),  # default bit_width 8
        ({"bit_width": 4, "exponent_bit_width": 0, "mantissa_bit_width": 3}, r"exponent_bit_width >= 1"),
        (
            {"bit_width": 8, "exponent_bit_width": 4, "mantissa_bit_width": 3, "symmetric": False},
            r"float_quant is symmetric: symmetric=False is not supported",
        ),
        (
            {"bit_width": 8, "exponent_bit_width": 4, "mantissa_bit_width": 3, "param_type": X.ParamType.mse},
            r"param_type=ParamType\.mse is not supported with quant_type=QuantType\.float_quant",
        ),
    ],
)
def test_extension_float_quant_config_errors(kwargs, match):
    with pytest.raises(ValueError, match=match):
        quantize(ext_layer_config(weight=X.QuantizationSpec(quant_type=FQ, **kwargs)), nn.Sequential(nn.Linear(32, 4)))


def test_extension_widths_need_float_quant_and_bias_stays_integer():
    with pytest.raises(ValueError, match=r"only meaningful with quant_type=QuantType\.float_quant"):
        X.QuantizationSpec(bit_width=8, exponent_bit_width=4, mantissa_bit_width=3)
    with pytest.raises(
        ValueError, match=r"bias quantization must be integer \(quant_type=QuantType\.int_quant\)"
    ):
        quantize(ext_layer_config(bias=ext_float(4, 3)), nn.Sequential(nn.Linear(32, 4)))
