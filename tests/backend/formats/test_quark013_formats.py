"""AMD Quark 0.13's format spellings quantize, against references written from the formulas.

- OCP MX as Quark writes it (``OCP_MXSpec``: the element dtype with PerBlockMXObserver, ScaleType.float,
  scale_format="e8m0", per_group 32) and ``Dtype.mx`` / ``mx6`` / ``mx9`` / ``bfp16`` with
  ``scale_type=ScaleType.float``: the same quantizer and bit-identical numbers as the pof2 form;
- ``scale_calculation_mode`` "even" / "floor" / "ceil" of OCP MX (``_reference/minifloat.py``);
- BFP16 (``_reference/bfp.py``).

Every comparison is exact (atol = 0).
"""

from __future__ import annotations

import pytest
import torch
from _reference import bfp
from _reference import minifloat as R
from _shared.configs import layer_config
from _shared.models import qat_model
from _shared.quantize import assert_trains, quantize
from torch import nn

from quark.torch.quantization.config.config import (
    BFP16Spec,
    MX6Spec,
    MX9Spec,
    OCP_MXFP4Spec,
    OCP_MXFP6E2M3Spec,
    OCP_MXFP6E3M2Spec,
    OCP_MXFP8E4M3Spec,
    OCP_MXFP8E5M2Spec,
    OCP_MXINT8Spec,
    QuantizationSpec,
)
from quark.torch.quantization.config.type import Dtype, ScaleType
from quark.torch.quantization.tensor_quant import Format, normalise

ELEMENTS = ("int8", "fp8_e4m3", "fp8_e5m2", "fp6_e3m2", "fp6_e2m3", "fp4")
OCP_HELPERS = {
    "fp4": OCP_MXFP4Spec,
    "fp6_e3m2": OCP_MXFP6E3M2Spec,
    "fp6_e2m3": OCP_MXFP6E2M3Spec,
    "fp8_e4m3": OCP_MXFP8E4M3Spec,
    "fp8_e5m2": OCP_MXFP8E5M2Spec,
    "int8": OCP_MXINT8Spec,
}
MODES = ("even", "floor", "ceil")


def _data(seed: int = 0) -> torch.Tensor:
    """Block maxima spread over many binades, some just below a power of two (where the modes differ)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(6, 64, generator=g) * torch.exp2(torch.randint(-12, 12, (6, 2), generator=g).float()).repeat_interleave(32, 1)
    x[0, :32] = x[0, :32].clamp(-1.0, 1.0)
    x[0, 3] = 1.9999  # below 2: "even" rounds the maximum up for most elements, "ceil" too
    x[1, 40] = -15.99
    x[2, :32] = 0.0  # an all-zero block
    return x


def _outputs(spec_w: QuantizationSpec, spec_a: QuantizationSpec, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    torch.manual_seed(3)
    layer = nn.Linear(64, 32)
    model = quantize(layer_config(weight=spec_w, input_tensors=spec_a), nn.Sequential(layer))
    return model[0].quant_weight().value, model(x)


@pytest.mark.parametrize("element", ELEMENTS)
def test_mx_float_scale_form_is_the_pof2_quantizer_bit_for_bit(element):
    pof2 = QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype[element], ch_axis=-1, scale_type=ScaleType.pof2)
    forms = [
        QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype[element], ch_axis=-1, scale_type=ScaleType.float),
        QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype[element], ch_axis=-1, scale_type=ScaleType.float8_e8m0fnu),
    ]
    # Quark's helper: the element dtype, PerBlockMXObserver, ScaleType.float, e8m0 (MXINT8: Dtype.mx)
    forms.append(OCP_HELPERS[element](ch_axis=-1, scale_calculation_mode="floor").to_quantization_spec())
    x = _data()
    for role in ("weight", "input_tensors"):
        for form in forms:
            assert normalise(form, role, "f") == normalise(pof2, role, "p")
    reference = _outputs(pof2, pof2, x)
    for form in forms:
        got = _outputs(form, form, x)
        assert torch.equal(got[0], reference[0]) and torch.equal(got[1], reference[1])
    torch.manual_seed(3)  # and all of them are the OCP MX reference
    assert torch.equal(reference[0], R.mx_quantize(nn.Linear(64, 32).weight.data, element, axis=1)[0])


@pytest.mark.parametrize("dtype", ("mx6", "mx9", "bfp16"))
def test_block_formats_float_scale_form_is_the_pof2_quantizer_bit_for_bit(dtype):
    block = {"mx6": 16, "mx9": 16, "bfp16": 8}[dtype]
    pof2 = QuantizationSpec(dtype=Dtype[dtype], ch_axis=-1, scale_type=ScaleType.pof2)
    float_form = QuantizationSpec(dtype=Dtype[dtype], ch_axis=-1, group_size=block, scale_type=ScaleType.float)
    for role in ("weight", "input_tensors"):
        assert normalise(float_form, role, "f") == normalise(pof2, role, "p")
    x = _data(1)
    a, b = _outputs(pof2, pof2, x), _outputs(float_form, float_form, x)
    assert torch.equal(a[0], b[0]) and torch.equal(a[1], b[1])


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("element", ELEMENTS)
def test_mx_scale_calculation_mode_against_reference(element, mode):
    spec = OCP_HELPERS[element](ch_axis=-1, scale_calculation_mode=mode).to_quantization_spec()
    x = _data(2)
    torch.manual_seed(3)
    weight = nn.Linear(64, 32).weight.data
    qw, out = _outputs(spec, spec, x)
    assert torch.equal(qw, R.mx_quantize(weight, element, axis=1, mode=mode)[0])
    qx = R.mx_quantize(x, element, axis=1, mode=mode)[0]
    torch.manual_seed(3)
    expected = nn.functional.linear(qx, qw, nn.Linear(64, 32).bias.data)
    assert torch.equal(out, expected)


def test_even_mode_rounds_the_block_maximum_up_where_floor_does_not():
    """fp4 (1 mantissa bit): a maximum of 1.9999 rounds to 2 at that precision: exponent 1 - 2, not 0 - 2."""
    x = torch.zeros(1, 32)
    x[0, 0] = 1.9999
    got = {m: R.mx_quantize(x, "fp4", axis=1, mode=m)[1][0, 0].item() for m in MODES}
    assert got == {"floor": 2.0**-2, "even": 2.0**-1, "ceil": 2.0**-1}
    spec = {m: OCP_MXFP4Spec(ch_axis=-1, scale_calculation_mode=m).to_quantization_spec() for m in MODES}
    layer = {m: quantize(layer_config(input_tensors=spec[m]), nn.Sequential(nn.Identity(), nn.Linear(32, 1)))[1] for m in MODES}
    for m in MODES:
        assert torch.equal(layer[m].input_quant(x).value, R.mx_quantize(x, "fp4", axis=1, mode=m)[0])


def test_mx_scale_calculation_mode_none_is_the_ocp_floor():
    spec = QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp4)
    assert normalise(spec, "weight", "w").scale_rounding == "floor"


@pytest.mark.parametrize("axis_layer", [("linear", 1), ("conv", 1)])
def test_bfp16_weights_and_activations_against_reference(axis_layer):
    kind, axis = axis_layer
    spec = BFP16Spec(ch_axis=1).to_quantization_spec()  # weight blocks along the input channels
    act = BFP16Spec(ch_axis=-1 if kind == "linear" else 1).to_quantization_spec()  # the layer's channels
    torch.manual_seed(0)
    layer = nn.Linear(32, 8) if kind == "linear" else nn.Conv2d(16, 8, 3)
    weight = layer.weight.data.clone()
    model = quantize(layer_config(weight=spec, input_tensors=act), nn.Sequential(layer))
    assert torch.equal(model[0].quant_weight().value, bfp.quantize(weight, axis=axis))
    x = torch.randn(4, 32) * 3 if kind == "linear" else torch.randn(2, 16, 5, 5) * 3
    qx = model[0].input_quant(x).value
    assert torch.equal(qx, bfp.quantize(x, axis=-1 if kind == "linear" else 1))


def test_bfp16_exponent_rises_where_the_maximum_would_round_to_128():
    """Blocks of 8: 127.7 steps rounds to 128, so the exponent rises by one (positive side only)."""
    x = torch.zeros(1, 16)
    x[0, :8] = torch.tensor([127.7, 1, 2, 3, -4, 5, 6, 7]) / 64
    x[0, 8:] = torch.tensor([-127.7, 1, 2, 3, -4, 5, 6, 7]) / 64
    layer = quantize(layer_config(input_tensors=BFP16Spec(ch_axis=-1).to_quantization_spec()), nn.Sequential(nn.Identity(), nn.Linear(16, 1)))[1]
    q = layer.input_quant(x).value * 64
    assert q[0, :8].tolist() == [128, 0, 2, 4, -4, 4, 6, 8]  # step 2^-5: 127.7 / 2 rounds to 64
    assert q[0, 8:].tolist() == [-128, 1, 2, 3, -4, 5, 6, 7]  # -127.7 rounds to -128, which fits
    assert torch.equal(layer.input_quant(x).value, bfp.quantize(x, axis=1))


@pytest.mark.parametrize("helper", [MX6Spec, MX9Spec])
def test_mx6_mx9_helpers_quantize_with_their_block(helper):
    spec = helper(ch_axis=1, block_size=16).to_quantization_spec()
    tq = normalise(spec, "weight", "w")
    assert (tq.format, tq.group_size) == (Format.bdr, 16)
    with pytest.raises(ValueError, match=r"group_size=32 is not supported with dtype=Dtype\.mx[69].*allowed: None, 16"):
        normalise(helper(ch_axis=1, block_size=32).to_quantization_spec(), "weight", "w")


def test_quark_mx_forms_train():
    weight = OCP_MXFP4Spec(ch_axis=1).to_quantization_spec()  # blocks along the input channels of both layers
    act = QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp4, scale_type=ScaleType.float)  # each layer's channels
    assert_trains(quantize(layer_config(weight=weight, input_tensors=act), qat_model()))
    bfp16 = BFP16Spec(ch_axis=1).to_quantization_spec()
    assert_trains(quantize(layer_config(weight=bfp16, input_tensors=QuantizationSpec(dtype=Dtype.bfp16)), qat_model()))


def test_mx_activation_blocks_along_another_axis_are_refused():
    act = OCP_MXFP4Spec(ch_axis=-1).to_quantization_spec()  # a conv input's last axis is its width
    with pytest.raises(ValueError, match=r"input_tensors mx fp4 blocks along ch_axis=-1; allowed: .*ch_axis=1 for a Conv2d"):
        quantize(layer_config(input_tensors=act), nn.Sequential(nn.Conv2d(32, 8, 3)))
