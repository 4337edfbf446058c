"""Our own quantizer blocks (``_backend/quantizers.py``) and the upstream behaviour each one replaces.

Every block exists because Brevitas' stock part computes something other than Quark's formula; the
ledger below describes each discrepancy (``BUG_*``), and each test reproduces one on a minimal
tensor that isolates it, against ``tests/_reference/quant.py`` (exact comparisons).
"""

from __future__ import annotations

import pytest
import torch
from _reference import quant as R
from _shared.configs import layer_config
from _shared.numerics import calibration_batches, check_quant_tensor, exact, probe_input, set_weight, spec
from _shared.quantize import quantize
from torch import nn

# The ledger: discrepancies these tests found, fixed since by the blocks of _backend/quantizers.py
# (each isolated by a regression test below):
#
# BUG_CAST_SCALE: mapping.SCALE_RESTRICTS passes ``scale_dtype=...`` but ``CastScale.__init__`` takes
#   ``dtype``, which the Brevitas injector fills with the layer dtype (float32): the cast is a no-op.
#   int8 sym weight with max|w| = 1.0, scale_type=float16: expected float16(1/127.5) = 0.0078430176,
#   got 1/127.5 = 0.0078431377 (bfloat16: expected 0.0078735352). Same for static activations.
# BUG_ZP_ROUNDING: the asymmetric zero point is rounded with the tensor's round_method
#   (Brevitas ``_ScaleShiftZeroPoint`` calls ``int_quant.to_int`` with ``float_to_int_impl``), not
#   round_half_even. uint8 asym weight on [-10.75/128, 244.25/128], RoundType.floor: s = 2^-7,
#   -lo/s = 10.75, expected zp 11, got 10. Static input range [-3, 5]: expected 96, got 95.
# BUG_SYM_UNSIGNED: symmetric unsigned weights (AbsMax stats) and dynamic activations
#   (``DynamicScaling``: x.abs().max()) take the scale from max|x|, not hi = max(max(x), 0).
#   uint8 sym on [-1.0, 0.5, 0.25, 0.1]: expected s = 0.5/255 = 0.00196078, got 1/255 = 0.00392157.
#   Static activations (calibrate.set_range) do use hi.
# BUG_ALL_NEGATIVE: asymmetric weights whose block (tensor / channel / group) is all negative:
#   Brevitas ``AbsMinMax`` clamps min to <= 0 but leaves max < 0, so s = (max - min)/(2^b - 1)
#   instead of (0 - min)/(2^b - 1) and the zero point saturates at 2^b - 1, clipping the minimum.
#   uint8 asym row [-0.5, -0.25, -0.1, -0.3]: expected s = 0.5/255, zp 255, dequant(-0.5) = -0.5;
#   got s = 0.4/255, zp 255, dequant(-0.5) = -0.4. (All-positive blocks are right.)
# BUG_DYNAMIC_POF2: is_dynamic=True ignores scale_type: ``DynamicScaling`` takes ``scale_restrict``
#   but the mapping only provides ``restrict_scale_threshold_impl``. int8 sym dynamic pof2 on
#   max|x| = 1.0: expected 2^round(log2(1/127.5)) = 2^-7 = 0.0078125, got 1/127.5 = 0.0078431377.


@pytest.mark.parametrize("scale_type", ["float16", "bfloat16"])
def test_weight_scale_cast(scale_type):
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    w = torch.tensor([[1.0, -0.3, 0.2, 0.7]])
    set_weight(model[0], w)
    qm = quantize(layer_config(weight=spec("int8", scale_type=scale_type)), model)
    expected = torch.tensor(1 / 127.5).to(getattr(torch, scale_type)).float()
    assert expected != torch.tensor(1 / 127.5)
    exact(qm[0].quant_weight().scale, expected)


@pytest.mark.parametrize("round_method", ["floor"])
def test_weight_zero_point_rounding(round_method):
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    w = torch.tensor([[-10.75, 244.25, 3.3, -1.1]]) / 128  # s = 255/128/255 = 2^-7, -lo/s = 10.75
    set_weight(model[0], w)
    qm = quantize(layer_config(weight=spec("uint8", False, round_method=round_method)), model)
    qt = qm[0].quant_weight()
    exact(qt.scale, torch.tensor(2.0**-7))
    exact(torch.as_tensor(qt.zero_point), torch.tensor(11.0))


@pytest.mark.parametrize("qscheme", ["per_tensor", "per_channel"])
def test_weight_symmetric_unsigned_uses_max(qscheme):
    model = nn.Sequential(nn.Linear(4, 1, bias=False))
    w = torch.tensor([[-1.0, 0.5, 0.25, 0.1]])
    set_weight(model[0], w)
    axis = 0 if qscheme == "per_channel" else None
    qm = quantize(layer_config(weight=spec("uint8", True, qscheme, axis)), model)
    q, deq, s, zp = R.fake_quant(w, 8, False, True, qscheme, 0)
    exact(s, torch.tensor(0.5 / 255))
    check_quant_tensor(qm[0].quant_weight(), w, q, deq, s, zp)


@pytest.mark.parametrize("qscheme", ["per_tensor", "per_channel", "per_group"])
def test_weight_asymmetric_all_negative_block(qscheme):
    model = nn.Sequential(nn.Linear(4, 2, bias=False))
    w = torch.tensor([[-0.5, -0.25, -0.1, -0.3], [0.4, -0.2, 0.1, -0.05]])
    if qscheme == "per_tensor":
        w = -w.abs()
    set_weight(model[0], w)
    axis, gsize = {"per_tensor": (None, None), "per_channel": (0, None), "per_group": (1, 2)}[qscheme]
    qm = quantize(layer_config(weight=spec("uint8", False, qscheme, axis, gsize)), model)
    q, deq, s, zp = R.fake_quant(w, 8, False, False, qscheme, axis or 0, gsize)
    torch.testing.assert_close(deq[0, 0], torch.tensor(-0.5))  # the block minimum is representable
    check_quant_tensor(qm[0].quant_weight(), w, q, deq, s, zp)


def test_weight_asymmetric_all_positive_block():
    """The mirror case is right: an all-positive channel has lo = 0, zp = 0, s = max / (2^b - 1)."""
    model = nn.Sequential(nn.Linear(4, 2, bias=False))
    w = torch.tensor([[0.5, 0.25, 0.1, 0.3], [0.4, -0.2, 0.1, -0.05]])
    set_weight(model[0], w)
    qm = quantize(layer_config(weight=spec("uint8", False, "per_channel", 0)), model)
    q, deq, s, zp = R.fake_quant(w, 8, False, False, "per_channel", 0)
    assert zp[0, 0] == 0 and s[0, 0] == torch.tensor(0.5) / 255
    check_quant_tensor(qm[0].quant_weight(), w, q, deq, s, zp)


def test_static_input_zero_point_rounding_floor():
    """Range [-3, 5], uint8 asym: s = 8/255, -lo/s = 95.625: expected zp 96 (half even), floor gives 95."""
    model = nn.Sequential(nn.Linear(32, 16))
    act = spec("uint8", False, round_method="floor")
    qm = quantize(layer_config(input_tensors=act), model, calibration_batches())
    exact(torch.as_tensor(qm[0].input_quant(probe_input()).zero_point), torch.tensor(96.0))


def test_static_input_scale_cast():
    model = nn.Sequential(nn.Linear(32, 16))
    qm = quantize(layer_config(input_tensors=spec("int8", scale_type="float16")), model, calibration_batches())
    expected = torch.tensor(5.0 / 127.5).half().float()
    exact(qm[0].input_quant(probe_input()).scale, expected)


def test_dynamic_symmetric_unsigned_uses_max():
    model = nn.Sequential(nn.Linear(4, 1))
    qm = quantize(layer_config(input_tensors=spec("uint8", True, is_dynamic=True)), model)
    x = torch.tensor([[-1.0, 0.5, 0.25, 0.1]])
    exact(qm[0].input_quant(x).scale, torch.tensor(0.5 / 255))


def test_dynamic_pof2_scale():
    model = nn.Sequential(nn.Linear(4, 1))
    qm = quantize(layer_config(input_tensors=spec("int8", True, is_dynamic=True, scale_type="pof2")), model)
    x = torch.tensor([[1.0, -0.5, 0.25, 0.1]])
    exact(qm[0].input_quant(x).scale, torch.tensor(2.0**-7))
