"""OCP Microscaling (MX spec v1.0): ``Dtype.mx`` with int8 / fp8 / fp6 / fp4 elements, against
``tests/_reference/minifloat.py``.

Reference: 32 consecutive elements along the reduction axis share X = 2^(floor(log2 max|x|) -
emax_elem) (emax 0 / 8 / 15 / 4 / 2 / 2 for int8 / e4m3 / e5m2 / e3m2 / e2m3 / e2m1); each element
is x / X converted to the element format, saturating, ties to even (MXINT8: 8-bit two's
complement times 2^-6). floor(log2) is taken from the binary exponent (exact). Comparisons are exact.

What the package reports as the quantized tensor's ``scale``: X for float elements, the element
step X * 2^-6 for MXINT8 (Brevitas' integer convention: value = int * scale).
"""

from __future__ import annotations

import warnings

import pytest
import torch
from _reference import minifloat as R
from _reference.compare import same
from _shared.configs import layer_config
from _shared.models import qat_model
from _shared.quantize import assert_trains, quantize
from torch import nn

from quark.torch.quantization.config.config import QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType

ELEMENTS = ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4")

# Regression (found by this file, fixed): MX shared exponent is floor(float32 log2(max|x|)); log2
# rounds up to the integer p for a block maximum a few float32 ulps below 2^p (1 ulp at p=-2, 2 at
# p=-5, 11 at p=-19, 39+ at p=-59), so X is 2^(p - emax) instead of 2^(p - 1 - emax): fp8_e4m3 block
# max (2 - 2^-23) * 2^-10 gets X = 2^-17 (spec 2^-18) and keeps 2^-9 instead of saturating to 448 *
# 2^-18; MXINT8 gets element step 2^-15 (spec 2^-16)
# Regression (found by this file, fixed): MX blocks with max|x| below ~1e-10 (all-zero blocks
# included) get the scale clamped at scaling_min_val (1e-10 / 2^emax_elem, e.g. 3.9e-13 for
# fp8_e4m3), which is not a power of two (not E8M0), and nonzero elements of such blocks are flushed
# to 0



@pytest.fixture(autouse=True)
def _no_group_dim_warning():
    with warnings.catch_warnings():  # Brevitas: "Group dim is being selected assuming batched input"
        warnings.filterwarnings("ignore", message="Group dim is being selected")
        yield


# -- helpers ---------------------------------------------------------------------------------------


def mx_weight(element: str, **kw) -> QuantizationSpec:
    return QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype[element], **kw)


def mx_act(element: str, **kw) -> QuantizationSpec:
    kw.setdefault("is_dynamic", True)
    return QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype[element], **kw)




def value(t):
    return t.value if hasattr(t, "value") else t


def reported_block_scale(qt, element: str) -> torch.Tensor:
    """X from the quantized tensor's scale (MXINT8 reports the element step X / 64)."""
    s = qt.scale.detach().to(torch.float64)
    return s * 64 if element == "int8" else s


def is_pof2(t: torch.Tensor) -> bool:
    return bool((torch.frexp(t.to(torch.float64))[0] == 0.5).all())


def wide_range(shape, axis: int, seed: int) -> torch.Tensor:
    """Random values whose magnitude varies over 8 decades along ``axis`` (32-blocks differ)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(*shape, generator=g)
    mag = torch.logspace(-4, 4, shape[axis])
    view = [1] * len(shape)
    view[axis] = -1
    return x * mag.reshape(view) * torch.rand(*shape, generator=g).add(0.5)


def element_grid(element: str) -> torch.Tensor:
    """Every element value x / X can take."""
    if element == "int8":
        return torch.arange(-128, 128, dtype=torch.float64) / 64
    return R.values(R.FORMATS[element])


# -- the reference itself ----------------------------------------------------------------------------


@pytest.mark.parametrize("element", ELEMENTS)
def test_reference_emax_is_exponent_of_largest_element(element):
    top = element_grid(element).max().item()
    assert 2.0 ** R.MX_EMAX[element] <= top < 2.0 ** (R.MX_EMAX[element] + 1)
    assert (
        R.MX_EMAX[element]
        == {"int8": 0, "fp8_e4m3": 8, "fp8_e5m2": 15, "fp6_e3m2": 4, "fp6_e2m3": 2, "fp4": 2}[element]
    )


def test_reference_floor_log2_is_exact():
    x = torch.tensor(
        [1.0, 2.0 - 2.0**-23, 2.0, 3.0, 2.0**-126, 2.0**-149, 1.5 * 2.0**100], dtype=torch.float32
    )
    assert R.floor_log2(x).tolist() == [0, 0, 1, 1, -126, -149, 100]


# -- weights -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("element", ELEMENTS)
def test_linear_weight_matches_reference(element):
    w = wide_range((16, 128), axis=0, seed=1) * wide_range((16, 128), axis=1, seed=2).sign()
    w[0, :32] *= torch.logspace(-3, 3, 32)  # one block with a wide spread: small elements underflow
    lin = nn.Linear(128, 16)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    ref, X = R.mx_quantize(w, element, axis=1)
    assert same(qw.value, ref)
    assert same(reported_block_scale(qw, element).expand_as(w), X)
    assert is_pof2(X)


@pytest.mark.parametrize("element", ELEMENTS)
def test_block_scale_formula_on_crafted_blocks(element):
    """Blocks whose max is 2^k, 1.5 * 2^k, 1.99 * 2^k and the element max * 2^k; elements at every
    grid point and midpoint of the block's scale (ties to even), and beyond the element max."""
    emax = R.MX_EMAX[element]
    grid = element_grid(element)
    g = torch.Generator().manual_seed(3)
    rows = []
    for k in (-12, -3, 0, 1, 5, 20):
        for top in (1.0, 1.5, 1.99, grid.max().item() / 2.0**emax):
            amax = top * 2.0**k
            X = 2.0 ** (k - emax)
            pts = torch.cat([grid, (grid[1:] + grid[:-1]) / 2]) * X
            pts = pts[pts.abs() <= amax]
            row = pts[torch.randint(len(pts), (30,), generator=g)]
            rows.append(torch.cat([torch.tensor([amax, -amax], dtype=torch.float64), row]))
    w = torch.stack(rows).float()
    w = torch.cat([w, w.flip(0)], dim=1)  # 2 blocks per row
    lin = nn.Linear(64, w.shape[0])
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    ref, X = R.mx_quantize(w, element, axis=1)
    assert same(qw.value, ref)
    assert same(reported_block_scale(qw, element).expand_as(w), X)


@pytest.mark.parametrize("element", ("fp8_e4m3", "fp6_e3m2", "fp6_e2m3", "fp4"))
def test_block_max_above_element_max_saturates(element):
    """max|x| = 1.99 * 2^k exceeds max_elem * 2^(k - emax) when the element max < 1.99 * 2^emax:
    the block maximum clips to the element max (the MX spec's scale choice)."""
    f = R.FORMATS[element]
    emax = R.MX_EMAX[element]
    top = R.max_finite(f)
    row = torch.zeros(32)
    row[0], row[1] = 1.99 * 2.0**emax, -1.99 * 2.0**emax
    assert 1.99 * 2.0**emax > top
    lin = nn.Linear(32, 1)
    lin.weight.data.copy_(row[None])
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    assert qw.value[0, 0].item() == top and qw.value[0, 1].item() == -top
    assert reported_block_scale(qw, element)[0, 0].item() == 1.0


def test_mxint8_uses_full_twos_complement_range():
    """MXINT8: x / X * 64 rounds half to even, clamped to [-128, 127]: -2.0 is representable."""
    row = torch.zeros(32)
    row[:6] = torch.tensor([1.999, -1.999, -127.5 / 64, 126.5 / 64, 1.5 / 64, 2.5 / 64])
    lin = nn.Linear(32, 1)
    lin.weight.data.copy_(row[None])
    qw = quantize(layer_config(weight=mx_weight("int8")), nn.Sequential(lin))[0].quant_weight()
    expected = torch.tensor([127, -128, -128, 126, 2, 2]) / 64
    assert same(qw.value[0, :6], expected)
    assert qw.scale[0, 0].item() == 2.0**-6


@pytest.mark.parametrize("element", ELEMENTS)
def test_blocks_run_along_linear_input_axis(element):
    """Linear weight [out, in]: each row's 32-element runs along ``in`` share a scale, and the
    scale follows only the block's own max."""
    w = torch.ones(4, 96)
    for r in range(4):
        for b in range(3):
            w[r, 32 * b + 7] = 2.0 ** (3 * r + b)  # block max 2^(3r + b)
    lin = nn.Linear(96, 4)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    X = reported_block_scale(qw, element)
    expected = torch.tensor([[2.0 ** (3 * r + b - R.MX_EMAX[element]) for b in range(3)] for r in range(4)])
    assert same(X.reshape(4, 3, 32), expected[..., None].expand(4, 3, 32))
    assert same(qw.value, R.mx_quantize(w, element, axis=1)[0])


@pytest.mark.parametrize("element", ("int8", "fp8_e5m2", "fp4"))
@pytest.mark.parametrize(
    "make,axis",
    [
        (lambda: nn.Conv2d(64, 8, 3), 1),  # [out, in, kh, kw]: blocks along in
        (lambda: nn.Conv1d(32, 16, 3), 1),
        (lambda: nn.ConvTranspose2d(64, 8, 3), 0),  # [in, out, kh, kw]: blocks along in
    ],
    ids=("conv2d", "conv1d", "convtranspose2d"),
)
def test_conv_weight_blocks_along_input_channels(element, make, axis):
    layer = make()
    w = wide_range(tuple(layer.weight.shape), axis=axis, seed=4)
    layer.weight.data.copy_(w)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(layer))[0].quant_weight()
    ref, X = R.mx_quantize(w, element, axis=axis)
    assert same(qw.value, ref)
    assert same(reported_block_scale(qw, element).expand_as(w), X)


@pytest.mark.parametrize("element", ("int8", "fp8_e4m3"))
def test_block_max_just_below_power_of_two(element):
    row = torch.zeros(1, 32)
    row[0, 0] = (2.0 - 2.0**-23) * 2.0**-10  # floor(log2) = -10 exactly
    row[0, 1] = 1.5 * 2.0**-10
    lin = nn.Linear(32, 1)
    lin.weight.data.copy_(row)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    ref, X = R.mx_quantize(row, element, axis=1)
    assert (
        reported_block_scale(qw, element)[0, 0].item() == X[0, 0].item() == 2.0 ** (-10 - R.MX_EMAX[element])
    )
    assert same(qw.value, ref)


def test_zero_block_stays_zero():
    w = torch.zeros(2, 64)
    w[1, 32:] = torch.linspace(-1, 1, 32)
    lin = nn.Linear(64, 2)
    lin.weight.data.copy_(w)
    for element in ELEMENTS:
        qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
        assert same(qw.value, R.mx_quantize(w, element, axis=1)[0])


@pytest.mark.parametrize("element", ("int8", "fp8_e4m3"))
def test_zero_and_tiny_blocks_have_e8m0_scales(element):
    w = torch.zeros(2, 32)
    w[1, 0], w[1, 1] = 2.0**-120, -3 * 2.0**-126
    lin = nn.Linear(32, 2)
    lin.weight.data.copy_(w)
    qw = quantize(layer_config(weight=mx_weight(element)), nn.Sequential(lin))[0].quant_weight()
    assert is_pof2(reported_block_scale(qw, element))
    assert same(qw.value, R.mx_quantize(w, element, axis=1)[0])


# -- activations ---------------------------------------------------------------------------------


@pytest.mark.parametrize("element", ELEMENTS)
def test_linear_activation_blocks_dynamic_per_call(element):
    layer = quantize(layer_config(input_tensors=mx_act(element)), nn.Sequential(nn.Linear(64, 32)))[0]
    for seed in (5, 6):
        x = wide_range((3, 5, 64), axis=2, seed=seed) * (10.0 if seed == 6 else 1.0)
        out = layer.input_quant(x)
        ref, X = R.mx_quantize(x, element, axis=-1)  # Linear: the last axis holds the features
        assert same(value(out), ref)
        assert same(reported_block_scale(out, element).expand_as(x), X)
    # each row's blocks follow that row only
    x = torch.ones(2, 64)
    x[1] *= 1024
    X = reported_block_scale(layer.input_quant(x), element).expand_as(x)
    assert bool((X[1] == X[0] * 1024).all())


@pytest.mark.parametrize("element", ("int8", "fp8_e4m3", "fp4"))
def test_conv_activation_blocks_along_channels(element):
    layer = quantize(layer_config(input_tensors=mx_act(element)), nn.Sequential(nn.Conv2d(64, 8, 3)))[0]
    x = wide_range((2, 64, 5, 5), axis=1, seed=7)
    out = layer.input_quant(x)
    ref, X = R.mx_quantize(x, element, axis=1)
    assert same(value(out), ref)
    assert is_pof2(X)


@pytest.mark.parametrize("element", ("int8", "fp6_e2m3"))
def test_model_forward_uses_quantized_weights_and_inputs(element):
    torch.manual_seed(8)
    lin = nn.Linear(64, 32)
    model = quantize(layer_config(weight=mx_weight(element), input_tensors=mx_act(element)), nn.Sequential(lin))
    x = wide_range((4, 64), axis=1, seed=9)
    qx, _ = R.mx_quantize(x, element, axis=1)
    qw, _ = R.mx_quantize(lin.weight.data, element, axis=1)
    expected = torch.nn.functional.linear(qx, qw, lin.bias.data)
    assert torch.allclose(model(x), expected, rtol=1e-6, atol=1e-6)


# -- QAT ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("element", ELEMENTS)
def test_qat_steps_have_finite_nonzero_weight_gradients(element):
    assert_trains(quantize(layer_config(weight=mx_weight(element), input_tensors=mx_act(element)), qat_model()))


# -- errors ----------------------------------------------------------------------------------------


def test_weight_reduction_dim_not_multiple_of_32():
    with pytest.raises(
        ValueError, match=r"weight group_size=32 does not divide axis 1 of weight \(shape \(8, 48\)\)"
    ):
        quantize(layer_config(weight=mx_weight("fp4")), nn.Sequential(nn.Linear(48, 8)))
    with pytest.raises(ValueError, match=r"does not divide axis 1 of weight \(shape \(32, 48, 3, 3\)\)"):
        quantize(layer_config(weight=mx_weight("fp8_e5m2")), nn.Sequential(nn.Conv2d(48, 32, 3)))


def test_activation_channels_not_multiple_of_32():
    with pytest.raises(
        ValueError,
        match=r"input_tensors mx int8 blocks of 32 need the channel count to be a multiple of 32, got 48",
    ):
        quantize(layer_config(input_tensors=mx_act("int8")), nn.Sequential(nn.Linear(48, 8)))
    with pytest.raises(
        ValueError,
        match=r"output_tensors mx fp4 blocks of 32 need the channel count to be a multiple of 32, got 40",
    ):
        quantize(layer_config(output_tensors=mx_act("fp4")), nn.Sequential(nn.Linear(64, 40)))
    with pytest.raises(ValueError, match=r"need the channel count to be a multiple of 32, got 16"):
        quantize(layer_config(input_tensors=mx_act("fp8_e4m3")), nn.Sequential(nn.Conv2d(16, 32, 3)))


@pytest.mark.parametrize(
    "role,kwargs,match",
    [
        (
            "input_tensors",
            {"mx_element_dtype": Dtype.fp4, "is_dynamic": False},
            r"is_dynamic=False is not supported with dtype=Dtype\.mx",
        ),
        (
            "weight",
            {"mx_element_dtype": Dtype.fp8_e4m3fnuz},
            r"mx_element_dtype=Dtype\.fp8_e4m3fnuz not supported",
        ),
        ("weight", {"mx_element_dtype": Dtype.int4}, r"mx_element_dtype=Dtype\.int4 not supported"),
        (
            "weight",
            {"mx_element_dtype": Dtype.fp4, "qscheme": QSchemeType.per_group, "ch_axis": 1, "group_size": 16},
            r"group_size=16 is not supported with dtype=Dtype\.mx",
        ),
        (
            "weight",
            {"mx_element_dtype": Dtype.fp4, "scale_type": ScaleType.float16},
            r"scale_type=ScaleType\.float16 is not supported with dtype=Dtype\.mx.*allowed: None, ScaleType\.pof2, ScaleType\.float",
        ),
        (
            "weight",
            {"mx_element_dtype": Dtype.fp4, "symmetric": False},
            r"symmetric=False is not supported with dtype=Dtype\.mx",
        ),
    ],
)
def test_mx_config_errors(role, kwargs, match):
    calib = [torch.randn(2, 64)]
    with pytest.raises(ValueError, match=match):
        quantize(layer_config(**{role: QuantizationSpec(dtype=Dtype.mx, **kwargs)}), nn.Sequential(nn.Linear(64, 8)), calib)


def test_mx_weight_takes_quarks_is_dynamic_flag():
    """Quark's MXSpec sets is_dynamic=True for weights too: weights are quantized from their own
    values either way."""
    torch.manual_seed(0)
    model, calib = nn.Sequential(nn.Linear(64, 8)), [torch.randn(2, 64)]
    plain = quantize(layer_config(weight=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp4)), model, calib)
    flagged = quantize(layer_config(weight=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp4, is_dynamic=True)), model, calib)
    assert torch.equal(plain[0].quant_weight().value, flagged[0].quant_weight().value)


def test_mx_needs_an_element_dtype():
    with pytest.raises(ValueError, match=r"Dtype\.mx needs an element dtype, and only Dtype\.mx takes one"):
        QuantizationSpec(dtype=Dtype.mx)
    with pytest.raises(ValueError, match=r"only Dtype\.mx takes one"):
        QuantizationSpec(dtype=Dtype.fp4, mx_element_dtype=Dtype.fp4)
