"""Normalisation (``tensor_quant.normalise``): a spec of either flavour becomes one TensorQuant, the
backend-neutral description of a tensor's quantization; what a role cannot have is refused, naming
the field, the value and what is allowed."""

from __future__ import annotations

import pytest

from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.config.config import QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    ZeroPointType,
)
from quark.torch.quantization.observer import (
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)
from quark.torch.quantization.tensor_quant import (
    BDR_BITS,
    BDR_FORMATS,
    CAST_DTYPES,
    DTYPE_NAMES,
    FLOAT_DTYPES,
    INT_DTYPES,
    MAIN_FORMATS,
    SIGN_DTYPES,
    Format,
    TensorQuant,
    normalise,
)


def S(dtype="int8", **kw):
    return QuantizationSpec(dtype=dtype, **kw)


@pytest.mark.parametrize(
    "spec,role,observer,percentile",
    [
        (ext.QuantizationSpec(), "weight", PerTensorMinMaxObserver, None),
        (ext.QuantizationSpec(qscheme="per_channel"), "weight", PerChannelMinMaxObserver, None),
        (ext.QuantizationSpec(), "input_tensors", PerTensorPercentileObserver, 99.999),
        (ext.QuantizationSpec(), "output_tensors", PerTensorPercentileObserver, 99.999),
        (ext.QuantizationSpec(param_type="mse"), "weight", PerTensorMSEObserver, None),
        (ext.QuantizationSpec(param_type="mse", qscheme="per_channel"), "weight", PerTensorMSEObserver, None),
        (ext.QuantizationSpec(param_type="mse"), "input_tensors", PerTensorMSEObserver, None),
    ],
)
def test_extension_statistic_mapping(spec, role, observer, percentile):
    tq = normalise(spec, role, "x")
    assert tq.observer is observer
    assert tq.percentile == percentile
    assert tq.statistic == observer.statistic
    assert tq.qscheme is spec.qscheme


def test_extension_statistic_names():
    assert normalise(ext.QuantizationSpec(), "weight", "x").statistic == "minmax"
    assert normalise(ext.QuantizationSpec(), "input_tensors", "x").statistic == "percentile"
    assert normalise(ext.QuantizationSpec(param_type="mse"), "weight", "x").statistic == "mse"


def test_extension_asymmetric_is_unsigned():
    tq = normalise(ext.QuantizationSpec(symmetric=False, bit_width=4), "input_tensors", "x")
    assert (tq.signed, tq.symmetric, tq.grid) == (False, False, (0, 15))


def test_extension_bias_scale_from_product():
    tq = normalise(ext.QuantizationSpec(bit_width=32), "bias", "x")
    assert tq.bias_scale_from_product and tq.signed and tq.bit_width == 32


@pytest.mark.parametrize(
    "spec,role,pattern",
    [
        (
            ext.QuantizationSpec(quant_type="float_quant", bit_width=6, exponent_bit_width=4, mantissa_bit_width=3),
            "weight",
            r"where: bit_width=6 must equal 1 \+ exponent_bit_width \+ mantissa_bit_width \(1 \+ 4 \+ 3\)",
        ),
        (
            ext.QuantizationSpec(quant_type="float_quant"),
            "weight",
            r"where: quant_type=QuantType\.float_quant needs exponent_bit_width and mantissa_bit_width",
        ),
        (
            ext.QuantizationSpec(quant_type="float_quant", symmetric=False, exponent_bit_width=4, mantissa_bit_width=3),
            "input_tensors",
            r"where: quant_type=QuantType\.float_quant is symmetric: symmetric=False is not supported",
        ),
        (
            ext.QuantizationSpec(quant_type="float_quant", exponent_bit_width=4, mantissa_bit_width=3),
            "bias",
            r"where: bias quantization must be integer \(quant_type=QuantType\.int_quant\)",
        ),
        (
            ext.QuantizationSpec(qscheme="per_channel"),
            "input_tensors",
            (
                r"where: param_type=stats with qscheme=per_channel is not supported for input_tensors; "
                r"supported param_type/qscheme: \['mse/per_tensor', 'stats/per_tensor'\]"
            ),
        ),
        (
            ext.QuantizationSpec(bit_width=17),
            "weight",
            r"where: bit width 17 is not supported for weight; allowed 2\.\.16",
        ),
        (
            ext.QuantizationSpec(bit_width=24),
            "input_tensors",
            r"bit width 24 is not supported for input_tensors; allowed 2\.\.16",
        ),
    ],
)
def test_extension_normalise_errors(spec, role, pattern):
    with pytest.raises(ValueError, match=pattern):
        normalise(spec, role, "where")


@pytest.mark.parametrize(
    "spec,role,pattern",
    [
        (
            S("fp8_e4m3", symmetric=False),
            "weight",
            r"w: symmetric=False is not supported with dtype=Dtype\.fp8_e4m3; allowed: None, True",
        ),
        (
            S("fp8_e4m3", round_method="floor"),
            "weight",
            r"w: round_method=RoundType\.floor is not supported with dtype=Dtype\.fp8_e4m3",
        ),
        (
            S("fp8_e4m3", observer_cls=PerTensorMSEObserver),
            "input_tensors",
            r"w: observer_cls=PerTensorMSEObserver searches an integer grid; not supported with dtype=Dtype\.fp8_e4m3",
        ),
        (
            S("mx", mx_element_dtype="fp4", is_dynamic=False),
            "input_tensors",
            r"w: is_dynamic=False is not supported with dtype=Dtype\.mx \(32-element blocks",
        ),
        (
            S("mx", mx_element_dtype="int4"),
            "weight",
            r"w: mx_element_dtype=Dtype\.int4 not supported; allowed: \['int8', 'fp8_e4m3'",
        ),
        (S("mx", mx_element_dtype="int8", group_size=16, qscheme="per_group", ch_axis=1), "weight", r"w: group_size=16 is not supported with dtype=Dtype\.mx"),
        (S("bfloat16", scale_type="pof2"), "weight", r"w: scale_type=ScaleType\.pof2 is not supported with dtype=Dtype\.bfloat16 \(a cast, no scale\)"),
        (S("fp8_e4m3"), "bias", r"w: bias quantization must be integer; got a float format"),
        (
            S(is_dynamic=True),
            "weight",
            r"w: is_dynamic=True applies to activations; weights are always quantized",
        ),
        (
            S(qscheme="per_group", ch_axis=1, group_size=16),
            "input_tensors",
            r"w: qscheme=per_group is not supported for input_tensors \(static or dynamic\); activations are quantized per_tensor",
        ),
        (
            S(qscheme="per_group", ch_axis=1, group_size=16),
            "output_tensors",
            r"qscheme=per_group is not supported for output_tensors",
        ),
        (S(symmetric=False), "bias", r"w: bias quantization must be symmetric \(symmetric=True\)"),
        (S("uint8", symmetric=False), "bias", r"bias quantization must be symmetric"),
        (S(is_dynamic=True), "bias", r"is_dynamic=True does not apply to bias"),
        (
            S(qscheme="per_channel", ch_axis=1, is_dynamic=True),
            "input_tensors",
            r"qscheme=per_channel is not supported for input_tensors \(static or dynamic\)",
        ),
        (
            S(qscheme="per_channel", ch_axis=0, observer_cls=PerChannelMinMaxObserver),
            "bias",
            r"a bias with its own observer must be per_tensor",
        ),
    ],
)
def test_normalise_errors(spec, role, pattern):
    with pytest.raises(ValueError, match=pattern):
        normalise(spec, role, "w")


def test_static_per_channel_activation_is_rejected_not_ignored():
    spec = S(qscheme="per_channel", ch_axis=1, observer_cls=PerChannelMinMaxObserver)
    with pytest.raises(ValueError, match=r"qscheme=per_channel is not supported for output_tensors"):
        normalise(spec, "output_tensors", "w")


def test_per_group_with_a_per_tensor_observer_is_rejected_on_construction():
    with pytest.raises(ValueError, match=r"observer_cls=PerTensorMinMaxObserver: qscheme=per_group takes"):
        S(qscheme="per_group", ch_axis=1, group_size=8, observer_cls=PerTensorMinMaxObserver)


def test_normalise_rejects_non_spec():
    with pytest.raises(TypeError, match=r"here: expected a QuantizationSpec \(.*\), got QuantizationConfig"):
        normalise(QuantizationConfig(), "weight", "here")


@pytest.mark.parametrize(
    "spec,grid",
    [
        (S("int8", symmetric=True), (-128, 127)),
        (S("int8"), (-128, 127)),  # symmetric defaults to True
        (S("uint8", symmetric=True), (0, 255)),
        (S("int4", symmetric=False), (0, 15)),
        (S("int4"), (-8, 7)),
        (S("uint4"), (0, 15)),
        (S("int8", symmetric=False), (0, 255)),
    ],
)
def test_grid(spec, grid):
    assert normalise(spec, "weight", "x").grid == grid


def test_normalise_defaults():
    tq = normalise(S("int8"), "weight", "x")
    assert tq == TensorQuant(
        bit_width=8,
        signed=True,
        symmetric=True,
        qscheme=QSchemeType.per_tensor,
        scale_type=ScaleType.float,
        round_method=RoundType.half_even,
        zero_point_type=ZeroPointType.int32,
        observer=PerTensorMinMaxObserver,
        percentile=None,
        is_dynamic=False,
        bias_scale_from_product=False,
    )


def test_normalise_keeps_fields():
    spec = S(
        "uint8",
        symmetric=False,
        observer_cls=PerTensorPercentileObserver,
        scale_type="pof2",
        round_method="floor",
        zero_point_type="float32",
        is_dynamic=False,
    )
    tq = normalise(spec, "input_tensors", "x")
    assert (tq.bit_width, tq.signed, tq.symmetric) == (8, False, False)
    assert tq.scale_type is ScaleType.pof2 and tq.round_method is RoundType.floor
    assert tq.zero_point_type is ZeroPointType.float32
    assert (
        tq.observer is PerTensorPercentileObserver and tq.percentile == PerTensorPercentileObserver.percentile
    )


def test_normalise_per_channel_and_group_default_observer():
    pc = normalise(S(qscheme="per_channel", ch_axis=0), "weight", "x")
    assert pc.observer is PerChannelMinMaxObserver and pc.ch_axis == 0
    pg = normalise(S("int4", qscheme="per_group", ch_axis=1, group_size=32), "weight", "x")
    assert (
        pg.observer is PerChannelMinMaxObserver
        and pg.group_size == 32
        and pg.qscheme is QSchemeType.per_group
    )


def test_normalise_dynamic_activation():
    tq = normalise(S(is_dynamic=True), "input_tensors", "x")
    assert tq.is_dynamic is True


def test_bias_scale_from_product_only_without_observer():
    assert normalise(S("int8"), "bias", "x").bias_scale_from_product is True
    assert (
        normalise(S("int8", observer_cls=PerTensorMinMaxObserver), "bias", "x").bias_scale_from_product
        is False
    )
    assert normalise(S("int8"), "weight", "x").bias_scale_from_product is False


def test_describe():
    assert normalise(S("int8"), "weight", "x").describe() == "int8 sym per_tensor float minmax"
    tq = normalise(
        S("uint8", symmetric=False, zero_point_type="float32", round_method="floor"), "input_tensors", "x"
    )
    assert tq.describe() == "uint8 asym per_tensor float minmax floor zp=float"
    g = normalise(S("int4", qscheme="per_group", ch_axis=1, group_size=32, scale_type="pof2"), "weight", "x")
    assert g.describe() == "int4 sym per_group axis=1 g=32 pof2 minmax"
    assert normalise(S("int8"), "bias", "x").describe() == "int8 sym per_tensor float scale=s_in*s_w"
    assert (
        normalise(ext.QuantizationSpec(), "input_tensors", "x").describe()
        == "int8 sym per_tensor float percentile99.999"
    )


@pytest.mark.parametrize("dtype", ["uint8", "uint4"])
def test_regression_unsigned_bias_accepted(dtype):
    with pytest.raises(ValueError, match=r"bias quantization must use a signed dtype"):
        normalise(S(dtype, symmetric=True), "bias", "b")


def test_regression_extension_asymmetric_bias_silently_symmetric():
    with pytest.raises(ValueError, match=r"a bias spec sets bit_width \(and scale_type\) only.*symmetric=False"):
        normalise(ext.QuantizationSpec(symmetric=False), "bias", "b")


# -- the tables, row by row -------------------------------------------------------------------------

def _ocp_mx(element: str) -> QuantizationSpec:
    """Quark 0.13's OCP MX form: the element dtype, PerBlockMXObserver, e8m0 scales in blocks of 32."""
    return S(element, observer_cls=PerBlockMXObserver, scale_format="e8m0", qscheme="per_group", group_size=32, ch_axis=-1)


#: MAIN_FORMATS row (by position) -> (spec, role, the format it normalises to; None: refused) for
#: every dtype the row takes
MAIN_FORMAT_CASES = {
    0: [(S(d), "bias" if d is Dtype.int32 else "weight", Format.integer) for d in INT_DTYPES],
    1: [(_ocp_mx(d.name), "weight", Format.mx) for d in (Dtype.fp8_e4m3, Dtype.fp6_e2m3, Dtype.fp4)],
    2: [(S(d), "weight", Format.minifloat) for d in FLOAT_DTYPES],
    3: [(S(d), "weight", Format.cast) for d in CAST_DTYPES],
    4: [(S("mx", mx_element_dtype="fp8_e4m3"), "weight", Format.mx)] + [(S(d), "weight", Format.bdr) for d in BDR_BITS],
    5: [(S("fp8_e5m3"), "weight", None)],
    6: [(S("bipolar"), "weight", Format.bipolar), (S("ternary"), "weight", Format.integer)],
}


def test_every_main_format_row_has_a_case_and_every_dtype_a_row():
    assert set(MAIN_FORMAT_CASES) == set(range(len(MAIN_FORMATS)))
    covered = {spec.dtype for cases in MAIN_FORMAT_CASES.values() for spec, _, _ in cases}
    assert covered == set(Dtype)


@pytest.mark.parametrize("row", list(MAIN_FORMAT_CASES))
def test_every_main_format_row_normalises_each_of_its_dtypes(row):
    """The row is the first whose predicate takes each of its specs, and its normaliser gives the
    row's format with the dtype's widths (or refuses the dtype by name)."""
    for spec, role, fmt in MAIN_FORMAT_CASES[row]:
        first = next(i for i, (takes, _) in enumerate(MAIN_FORMATS) if takes(spec))
        assert first == row, spec.dtype
        if fmt is None:
            with pytest.raises(ValueError, match=rf"dtype=Dtype.{spec.dtype.name} is not supported"):
                normalise(spec, role, "w")
            continue
        tq = normalise(spec, role, "w")
        assert tq.format is fmt, spec.dtype
        if spec.dtype in SIGN_DTYPES:
            assert (tq.bit_width, tq.format, tq.narrow) == SIGN_DTYPES[spec.dtype]
        elif fmt is Format.integer:
            assert (tq.bit_width, tq.signed) == INT_DTYPES[spec.dtype]
        elif fmt is Format.minifloat:
            exponent, mantissa, fnuz = FLOAT_DTYPES[spec.dtype]
            assert (tq.bit_width, tq.exponent_bit_width, tq.mantissa_bit_width, tq.fnuz) == (1 + exponent + mantissa, exponent, mantissa, fnuz)
        elif fmt is Format.cast:
            assert (tq.exponent_bit_width, tq.mantissa_bit_width) == CAST_DTYPES[spec.dtype] and tq.bit_width == 16
        elif fmt is Format.mx:
            assert tq.group_size == 32  # OCP blocks of 32
        else:
            assert (tq.bit_width, tq.group_size) == (BDR_BITS[spec.dtype], BDR_FORMATS[spec.dtype][0])


#: Format -> (spec, its dtype name) per row of DTYPE_NAMES
DTYPE_NAME_CASES = {
    Format.integer: [(S("int8"), "int8"), (S("uint4"), "uint4"), (S("int3"), "int3"), (S("ternary"), "ternary")],
    Format.minifloat: [(S("fp8_e4m3"), "fp8_e4m3"), (S("fp8_e5m2fnuz"), "fp8_e5m2_fnuz"), (S("fp4"), "fp4_e2m1")],
    Format.cast: [(S("bfloat16"), "bfloat16"), (S("float16"), "float16")],
    Format.mx: [(S("mx", mx_element_dtype="fp8_e4m3"), "mx fp8_e4m3"), (S("mx", mx_element_dtype="int8"), "mx int8")],
    Format.bdr: [(S("mx6"), "mx6"), (S("mx9"), "mx9")],
    Format.bipolar: [(S("bipolar"), "bipolar")],
}


def test_every_dtype_name_row_has_a_case():
    assert set(DTYPE_NAME_CASES) == set(DTYPE_NAMES) == set(Format)


@pytest.mark.parametrize("fmt", list(DTYPE_NAME_CASES), ids=lambda f: f.name)
def test_every_dtype_name_row_names_its_specs(fmt):
    for spec, name in DTYPE_NAME_CASES[fmt]:
        tq = normalise(spec, "weight", "w")
        assert tq.format is fmt and tq.dtype_name == name
        assert tq.describe().split()[: len(name.split())] == name.split()  # the summary's first column
