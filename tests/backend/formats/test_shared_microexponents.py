"""MX6 / MX9 (shared microexponents, Rouhani et al. 2023) Brevitas injectors against the
independent reference ``tests/_reference/bdr.py`` (exact rational arithmetic, written from the
paper). Every comparison is exact (atol = rtol = 0)."""

from __future__ import annotations

import math

import brevitas.nn as qnn
import pytest
import torch
from _reference import bdr as R
from _reference.compare import exact
from brevitas.quant_tensor import GroupwiseIntQuantTensor

from quark.torch.extensions.brevitas._backend.shared_microexponents import (
    FORMATS,
    MX6,
    MX9,
    MX6Act,
    MX6Weight,
    MX9Act,
    MX9Weight,
    SharedMicroexponentActProxy,
    SharedMicroexponentWeightProxy,
    shared_microexponent_fake_quant,
    shared_microexponent_quant,
)

FMTS = ["mx6", "mx9"]
WEIGHT = {"mx6": MX6Weight, "mx9": MX9Weight}
ACT = {"mx6": MX6Act, "mx9": MX9Act}


def through_act_injector(x: torch.Tensor, fmt: str, axis: int) -> GroupwiseIntQuantTensor:
    """x through the activation injector's Brevitas proxy (a QuantIdentity layer)."""
    injector = shared_microexponent_quant(fmt, "act", axis=axis)
    layer = qnn.QuantIdentity(act_quant=injector, return_quant_tensor=True)
    out = layer(x)
    assert isinstance(out, GroupwiseIntQuantTensor)
    assert isinstance(layer.act_quant, SharedMicroexponentActProxy)
    return out


def check_quant_tensor(qt: GroupwiseIntQuantTensor, x: torch.Tensor, fmt: str, axis: int) -> None:
    """Value, per-element scale, integer codes and bit width of ``qt`` against the reference."""
    exact(qt.value, R.quantize(x, fmt, axis))
    scale = qt.scale.to(torch.float64)
    exact(scale, R.steps(x, fmt, axis))
    finite = torch.isfinite(qt.value)
    codes = qt.value.to(torch.float64)[finite] / scale[finite]
    q_max = 2 ** R.params(fmt)[4] - 1
    assert torch.equal(codes, codes.round()) and codes.abs().max() <= q_max
    assert float(qt.bit_width) == 1 + R.params(fmt)[4]
    assert qt.group_size == 16 and not qt.scale.requires_grad


# ----------------------------------------------------------------------------- random tensors


def _gen(case: str) -> tuple[torch.Tensor, int]:
    g = torch.Generator().manual_seed(sum(map(ord, case)))
    randn = lambda *s: torch.randn(*s, generator=g)
    if case == "normal":
        return randn(6, 64), -1
    if case == "small":
        return randn(4, 32) * 1e-3, -1
    if case == "huge":
        return randn(4, 32) * 1e36, -1
    if case == "subnormal":  # float32 subnormals, alone and next to normal values
        x = randn(4, 32) * 1e-40
        x[1, ::5] = randn(7) * 1e-37
        x[2, ::3] = torch.tensor(1.4e-45)
        return x, -1
    if case == "zeros":
        x = randn(4, 64)
        x[0] = 0.0
        x[1, 16:32] = 0.0
        x[2, ::2] = 0.0
        x[3, 3::4] = -0.0
        return x, -1
    if case == "outlier":  # one huge element per block: the rest mostly loses its bits
        x = randn(8, 64)
        x.view(8, 4, 16)[:, :, 5] *= 1e4
        return x, -1
    if case == "spread":  # elements spanning 60 binades inside blocks
        return randn(6, 64) * torch.exp2(torch.randint(-30, 30, (6, 64), generator=g).float()), -1
    if case == "micro":  # pairs on both sides of 2^E, at it and just below it
        x = randn(16, 16) * 0.4
        x[:, 0] = 5.0  # E = 2 in every block
        x[:, 2] = 4.0  # exactly 2^E: mu = 0
        x[:, 4] = torch.nextafter(torch.tensor(4.0), torch.tensor(0.0))  # just below: mu = 1
        x[:, 6] = 2.0 + randn(16).abs()  # in [2, 4) mostly: mu = 1
        x[:, 9] = -4.5  # mu = 0
        return x, -1
    if case == "axis1_3d":
        return randn(2, 48, 3), 1
    if case == "conv_act":
        return randn(2, 32, 3, 3), 1
    if case == "axis0":
        return randn(32, 5), 0
    raise KeyError(case)


CASES = [
    "normal", "small", "huge", "subnormal", "zeros", "outlier",
    "spread", "micro", "axis1_3d", "conv_act", "axis0",
]


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("case", CASES)
def test_act_injector_matches_reference(fmt, case):
    x, axis = _gen(case)
    check_quant_tensor(through_act_injector(x, fmt, axis), x, fmt, axis)


def test_micro_case_takes_both_micro_exponents():
    """The engineered blocks really exercise mu = 0 and mu = 1 pairs (per the reference)."""
    x, _ = _gen("micro")
    mus = [R.encode_block(row.tolist(), "mx6")[1] for row in x]
    assert all(m[0] == 0 and m[1] == 0 and m[2] == 1 for m in mus)  # 5.0 | 4.0 | just below 4
    assert {mu for m in mus for mu in m} == {0, 1}


@pytest.mark.parametrize("fmt", FMTS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float64])
def test_other_dtypes_match_reference(fmt, dtype):
    g = torch.Generator().manual_seed(7)
    binades = torch.exp2(torch.randint(-8, 8, (4, 64), generator=g).float())
    x = (torch.randn(4, 64, generator=g) * binades).to(dtype)
    out = shared_microexponent_fake_quant(x, fmt, -1)
    exact(out, R.quantize(x, fmt, -1))
    exact(through_act_injector(x, fmt, -1).value, R.quantize(x, fmt, -1))


@pytest.mark.parametrize("fmt", FMTS)
def test_large_tensor_rows_match_reference(fmt):
    """A 1M-element tensor in one vectorised call; a few rows checked against the reference."""
    g = torch.Generator().manual_seed(3)
    x = torch.randn(256, 4096, generator=g)
    out = shared_microexponent_fake_quant(x, fmt, -1)
    for row in (0, 97, 255):
        exact(out[row], R.quantize(x[row], fmt, -1))


def test_hand_computed_mx6_block():
    """One MX6 block worked by hand: E = floor(log2 6) = 2, steps 2^(2-3) = 0.5 (mu 0), 0.25 (mu 1)."""
    x = torch.tensor(
        [6.0, 0.3, 0.75, -0.5, 3.9, 0.1, 4.0, 0.2, -5.3, 5.25, 0.0, 0.0, 1.0, -1.125, 0.37, 0.13]
    )
    expected = torch.tensor(
        [6.0, 0.5, 0.75, -0.5, 3.75, 0.0, 4.0, 0.0, -5.5, 5.0, 0.0, 0.0, 1.0, -1.0, 0.25, 0.25]
    )
    # pair (3.9, 0.1): mu 1, 3.9 / 0.25 = 15.6 -> 16, saturates at 15; 5.25 / 0.5 = 10.5 -> 10 (even);
    # -1.125 / 0.25 = -4.5 -> -4 (even)
    exact(shared_microexponent_fake_quant(x, "mx6"), expected)
    assert R.encode_block(x.tolist(), "mx6")[:2] == (2, [0, 1, 1, 0, 0, 1, 1, 1])
    exact(R.quantize(x, "mx6"), expected)


# ----------------------------------------------------------------------------- weights, layers


@pytest.mark.parametrize("fmt", FMTS)
def test_weight_injectors_match_reference_per_layer_kind(fmt):
    torch.manual_seed(0)
    layers = [
        (qnn.QuantLinear(64, 8, bias=False, weight_quant=WEIGHT[fmt]), 1),
        (qnn.QuantConv2d(32, 4, 3, bias=False, weight_quant=WEIGHT[fmt]), 1),  # blocks along in, per tap
        (qnn.QuantConv1d(16, 3, 5, bias=False, weight_quant=WEIGHT[fmt]), 1),
        # weight [in, out, k, k]: blocks along dim 0
        (qnn.QuantConvTranspose2d(32, 8, 3, bias=False, weight_quant=WEIGHT[fmt]), 0),
    ]
    for layer, axis in layers:
        with torch.no_grad():
            layer.weight.mul_(torch.exp2(torch.randint(-6, 6, layer.weight.shape).float()))
        assert isinstance(layer.weight_quant, SharedMicroexponentWeightProxy)
        check_quant_tensor(layer.quant_weight(), layer.weight, fmt, axis)
        assert float(layer.weight_quant.bit_width()) == FORMATS[fmt].element_bit_width


@pytest.mark.parametrize("fmt", FMTS)
def test_act_injector_axis_inferred_from_layer(fmt):
    """MX*Act blocks along the last dim of Linear inputs and along channels (dim 1) of conv inputs."""
    torch.manual_seed(1)
    seen = {}
    lin = qnn.QuantLinear(32, 4, bias=False, input_quant=ACT[fmt])
    conv = qnn.QuantConv2d(16, 4, 1, bias=False, input_quant=ACT[fmt])
    lin.input_quant.register_forward_hook(lambda m, a, out: seen.__setitem__("lin", (a[0], out)))
    conv.input_quant.register_forward_hook(lambda m, a, out: seen.__setitem__("conv", (a[0], out)))
    lin(torch.randn(2, 5, 32))
    conv(torch.randn(2, 16, 3, 3))
    for name, axis in (("lin", -1), ("conv", 1)):
        x, out = seen[name]
        check_quant_tensor(out, x, fmt, axis)


def test_function_returns_injectors_and_validates():
    assert shared_microexponent_quant("mx6", "weight", axis=None) is MX6Weight
    assert shared_microexponent_quant("MX9", "act", axis=None) is MX9Act
    assert shared_microexponent_quant("mx9", "weight", axis=1).group_dim == 1
    with pytest.raises(ValueError, match="unknown shared-microexponent format 'mx4'"):
        shared_microexponent_quant("mx4", "weight")
    with pytest.raises(ValueError, match="unknown quantizer role 'bias'"):
        shared_microexponent_quant("mx6", "bias")
    with pytest.raises(RuntimeError, match="QuantIdentity: cannot tell the reduction axis"):
        qnn.QuantIdentity(act_quant=MX6Act)  # no layer to infer the axis from: axis= is required


# ----------------------------------------------------------------------------- representable values


def _roundtrip_tensor(fmt: str, E: int) -> torch.Tensor:
    """Blocks holding every magnitude of both micro-exponents in a block of shared exponent E.

    mu = 0 pairs: (c * s0, (2^m - 1) * s0), the partner forcing mu = 0 and E; mu = 1 pairs:
    (c * s1, (2^m - 1 - c) * s1), both below 2^E. Each block: 4 pairs of each kind.
    """
    m = R.params(fmt)[4]
    top = 2**m - 1
    mags0 = R.representable_magnitudes(fmt, E, 0)
    mu0 = [(mags0[c], mags0[top]) for c in range(top + 1)]
    mags1 = R.representable_magnitudes(fmt, E, 1)
    mu1 = [(mags1[c], mags1[top - c]) for c in range(top + 1)]
    blocks = []
    for i in range(0, top + 1, 4):
        blocks.append([v for pair in mu0[i : i + 4] + mu1[i : i + 4] for v in pair])
    x = torch.tensor(blocks, dtype=torch.float64)
    coin = torch.rand(x.shape, generator=torch.Generator().manual_seed(E + 500))
    signs = torch.where(coin < 0.5, -1.0, 1.0)
    return (x * signs).to(torch.float32)


@pytest.mark.parametrize("fmt", FMTS)
def test_every_representable_magnitude_round_trips(fmt):
    m = R.params(fmt)[4]
    for E in (-127, -126, -60, -1, 0, 1, 60, 127):
        x = _roundtrip_tensor(fmt, E)
        assert x.isfinite().all() and x.numel() == 2 * 2 * 2**m
        for row in x:  # the construction really has E and both micro-exponents
            E_ref, mus, _ = R.encode_block(row.tolist(), fmt)
            assert E_ref == E and mus == [0, 0, 0, 0, 1, 1, 1, 1]
        exact(shared_microexponent_fake_quant(x, fmt), x)
        exact(through_act_injector(x, fmt, -1).value, x)
        exact(R.quantize(x, fmt), x)


@pytest.mark.parametrize("fmt", FMTS)
def test_ties_round_half_to_even(fmt):
    """Midpoints between neighbouring codes go to the even code, both signs, both micro-exponents."""
    m = R.params(fmt)[4]
    top = 2**m - 1
    E = 3
    s0, s1 = 2.0 ** (E - (m - 1)), 2.0 ** (E - 1 - (m - 1))
    rows, expected = [], []
    for c in range(top):  # c + 0.5 for c = 0 .. 2^m - 2
        even = c if c % 2 == 0 else c + 1
        sign = -1.0 if c % 3 == 0 else 1.0
        # pair 0: the block max (forces E, mu 0); pair 1: a tie at mu 0; pair 2: a tie at mu 1
        row = [top * s0, 0.0, sign * (c + 0.5) * s0, top * s0, sign * (c + 0.5) * s1, 0.0] + [0.0] * 10
        exp = [top * s0, 0.0, sign * even * s0, top * s0, sign * even * s1, 0.0] + [0.0] * 10
        rows.append(row)
        expected.append(exp)
    x, want = torch.tensor(rows), torch.tensor(expected)
    exact(shared_microexponent_fake_quant(x, fmt), want)
    exact(R.quantize(x, fmt), want)


@pytest.mark.parametrize("fmt", FMTS)
def test_saturation(fmt):
    m = R.params(fmt)[4]
    top = 2**m - 1
    E = 0
    s0, s1 = 2.0 ** (E - (m - 1)), 2.0 ** (E - 1 - (m - 1))
    x = torch.zeros(4, 16)
    x[0, 0] = 2.0 - s0 / 4  # block max rounds up to 2^(E+1) = 2^m steps: saturates at 2^m - 1
    x[0, 1] = -(2.0 - s0 / 4)
    x[1, 0] = 1.5  # E = 0
    x[1, 2] = 1.0 - s1 / 4  # pair max just below 2^E: mu = 1, rounds to 2^m steps: saturates
    x[2, 0] = torch.finfo(torch.float32).max  # E = 127
    x[2, 1] = -torch.finfo(torch.float32).max
    x[3, 0] = 1.0
    x[3, 1] = float("inf")  # ignored for E, saturates
    x[3, 3] = float("-inf")  # alone in its pair: mu = 1
    x[3, 4] = float("nan")
    want = torch.zeros(4, 16)
    want[0, 0], want[0, 1] = top * s0, -top * s0
    want[1, 0], want[1, 2] = 1.5, top * s1
    big = top * 2.0 ** (127 - (m - 1))
    want[2, 0], want[2, 1] = big, -big
    want[3, 0], want[3, 1], want[3, 3], want[3, 4] = 1.0, top * s0, -top * s1, float("nan")
    exact(shared_microexponent_fake_quant(x, fmt), want)
    exact(R.quantize(x, fmt), want)
    # float64 beyond the shared exponent's range saturates at E = 127
    huge = torch.zeros(1, 16, dtype=torch.float64)
    huge[0, 0] = 1e300
    exact(shared_microexponent_fake_quant(huge, fmt)[0, 0], torch.tensor(big, dtype=torch.float64))
    exact(R.quantize(huge, fmt), shared_microexponent_fake_quant(huge, fmt))


# ----------------------------------------------------------------------------- errors


def test_padding_error_names_shape_axis_and_block_size():
    msg = r"shape \(3, 20\) has 20 elements along axis -1, not a multiple of the block size 16"
    with pytest.raises(ValueError, match=msg):
        through_act_injector(torch.randn(3, 20), "mx6", -1)
    msg = r"mx9 quantization: tensor of shape \(4, 24\) .* axis 1, .* block size 16"
    with pytest.raises(ValueError, match=msg):
        qnn.QuantLinear(24, 4, weight_quant=MX9Weight)(torch.randn(2, 24))
    with pytest.raises(ValueError, match=r"shape \(8, 3, 3, 3\) has 3 elements along axis 1"):
        qnn.QuantConv2d(3, 8, 3, weight_quant=MX6Weight)(torch.randn(1, 3, 5, 5))
    with pytest.raises(ValueError, match=r"axis 2 is not a dimension of a tensor of shape \(2, 16\)"):
        shared_microexponent_fake_quant(torch.randn(2, 16), "mx6", 2)


# ----------------------------------------------------------------------------- gradients, QAT


@pytest.mark.parametrize("fmt", FMTS)
def test_gradient_is_straight_through(fmt):
    g = torch.Generator().manual_seed(11)
    x = (torch.randn(3, 32, generator=g) * 4).requires_grad_()
    x.data[0, 0] = 2.0**20  # saturating / outlier elements included
    upstream = torch.randn(3, 32, generator=g)
    shared_microexponent_fake_quant(x, fmt).backward(upstream)
    exact(x.grad, upstream)
    qt = through_act_injector(x, fmt, -1)
    assert qt.value.requires_grad and not qt.scale.requires_grad


@pytest.mark.parametrize("fmt", FMTS)
def test_qat_linear_and_conv_train(fmt):
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        qnn.QuantConv2d(16, 16, 3, padding=1, weight_quant=WEIGHT[fmt], input_quant=ACT[fmt]),
        torch.nn.ReLU(),
        torch.nn.Flatten(),
        qnn.QuantLinear(16 * 4 * 4, 10, weight_quant=WEIGHT[fmt], input_quant=ACT[fmt]),
    )
    x, y = torch.randn(8, 16, 4, 4), torch.randint(0, 10, (8,))
    opt = torch.optim.SGD(model.parameters(), lr=0.05)
    before = [p.detach().clone() for p in model.parameters()]
    losses = []
    for _ in range(5):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        for p in model.parameters():
            assert p.grad is not None and torch.isfinite(p.grad).all() and p.grad.abs().sum() > 0
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(v) for v in losses) and losses[-1] < losses[0]
    assert all(not torch.equal(a, b) for a, b in zip(before, model.parameters()))


# ----------------------------------------------------------------------------- format facts


def test_bits_per_element():
    assert MX6.bits_per_element == 6 == R.bits_per_element("mx6")
    assert MX9.bits_per_element == 9 == R.bits_per_element("mx9")
    for fmt in FMTS:
        k1, d1, k2, d2, m = R.params(fmt)
        f = FORMATS[fmt]
        assert (f.block_size, f.shared_exponent_bits, f.sub_block_size) == (k1, d1, k2)
        assert (f.micro_exponent_bits, f.mantissa_bits) == (d2, m)
        assert (f.emin, f.emax) == R.exponent_range(fmt) == (-127, 127)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device")
@pytest.mark.parametrize("fmt", FMTS)
def test_cuda_matches_reference(fmt):
    for case in ("normal", "subnormal", "spread", "micro"):
        x, axis = _gen(case)
        out = shared_microexponent_fake_quant(x.cuda(), fmt, axis)
        assert out.is_cuda
        exact(out.cpu(), R.quantize(x, fmt, axis))
    layer = qnn.QuantLinear(32, 4, weight_quant=WEIGHT[fmt], input_quant=ACT[fmt]).cuda()
    layer(torch.randn(2, 32, device="cuda")).sum().backward()
    assert torch.isfinite(layer.weight.grad).all()
