"""``A2QSpec`` (accumulator-aware weights) in the config layer, both flavours: field checks naming the
field, what it applies to (signed integer weights, per output channel, float scales, rounding toward
zero) and every refusal naming the field, the value and what is allowed; the dict / file round
trip; the normalised spec and its description; ``presets.finn(accumulator_bits=...)``."""

from __future__ import annotations

import pytest

from quark.torch.extensions.brevitas import config as X
from quark.torch.extensions.brevitas import presets
from quark.torch.quantization.config.config import (
    A2QSpec,
    Config,
    QuantizationConfig,
    QuantizationSpec,
    TQTSpec,
)
from quark.torch.quantization.config.spec import (
    MAX_ACCUMULATOR_BITS,
    MIN_ACCUMULATOR_BITS,
    QAT_SPECS,
    QATSpec,
)
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.observer import LSQObserver, PerChannelMinMaxObserver
from quark.torch.quantization.tensor_quant import A2Q_MAIN_FIELDS, normalise

#: the main API's accumulator-aware int4 weight spec (the fields A2Q needs)
MAIN = {"dtype": Dtype.int4, "qscheme": QSchemeType.per_channel, "ch_axis": 0}


def test_a2q_spec_is_registered_and_round_trips():
    assert QAT_SPECS["A2QSpec"] is A2QSpec
    for spec in (A2QSpec(12), A2QSpec(16, zero_centered=False)):
        assert QATSpec.from_dict(spec.to_dict()) == spec
        assert spec.to_dict()["name"] == "A2QSpec"
    assert A2QSpec(12).method == "A2Q+" and A2QSpec(12, zero_centered=False).method == "A2Q"


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"accumulator_bit_width": 12.0}, TypeError, r"A2QSpec\.accumulator_bit_width=12\.0: expected int"),
        ({"accumulator_bit_width": True}, TypeError, r"A2QSpec\.accumulator_bit_width=True: expected int, got bool"),
        ({"accumulator_bit_width": "12"}, TypeError, r"A2QSpec\.accumulator_bit_width='12'"),
        ({"accumulator_bit_width": None}, TypeError, r"A2QSpec\.accumulator_bit_width=None"),
        ({"accumulator_bit_width": MIN_ACCUMULATOR_BITS - 1}, ValueError, r"accumulator_bit_width=1: allowed 2\.\.32"),
        ({"accumulator_bit_width": MAX_ACCUMULATOR_BITS + 1}, ValueError, r"accumulator_bit_width=33: allowed 2\.\.32"),
        ({"accumulator_bit_width": 12, "zero_centered": 1}, TypeError, r"A2QSpec\.zero_centered=1: expected bool"),
        ({"accumulator_bit_width": 12, "zero_centered": None}, TypeError, r"A2QSpec\.zero_centered=None"),
    ],
)
def test_fields_are_checked_naming_the_field(kwargs, error, message):
    with pytest.raises(error, match=message):
        A2QSpec(**kwargs)


def test_a_file_with_a_bad_width_names_the_field():
    with pytest.raises(ValueError, match=r"A2QSpec\.accumulator_bit_width=64: allowed 2\.\.32"):
        QATSpec.from_dict({"name": "A2QSpec", "accumulator_bit_width": 64})


def test_configs_with_a2q_round_trip_through_dict_and_file(tmp_path):
    weight = QuantizationSpec(**MAIN, qat_spec=A2QSpec(12))
    act = QuantizationSpec(dtype=Dtype.uint4, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    cfg = Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=act))
    assert Config.from_dict(cfg.to_dict()) == cfg
    for suffix in ("json", "yaml"):
        cfg.save(tmp_path / f"c.{suffix}")
        assert Config.load(tmp_path / f"c.{suffix}") == cfg
    ext = X.QuantizationSpec(bit_width=4, qscheme=QSchemeType.per_channel, qat_spec=A2QSpec(10, zero_centered=False))
    assert X.QuantizationSpec.from_dict(ext.to_dict()) == ext
    ext_cfg = X.Config(X.QuantizationConfig(weight=ext, input_tensors=X.QuantizationSpec(bit_width=4)))
    assert X.Config.from_dict(ext_cfg.to_dict()) == ext_cfg


@pytest.mark.parametrize("zero_centered", [True, False], ids=["A2Q+", "A2Q"])
def test_both_flavours_normalise_to_the_same_tensor_quant(zero_centered):
    main = normalise(QuantizationSpec(**MAIN, qat_spec=A2QSpec(12, zero_centered=zero_centered)), "weight", "w")
    ext = normalise(
        X.QuantizationSpec(bit_width=4, qscheme=QSchemeType.per_channel, qat_spec=A2QSpec(12, zero_centered=zero_centered)),
        "weight",
        "w",
    )
    assert main == ext
    assert (main.accumulator_bits, main.zero_centered, main.narrow) == (12, zero_centered, True)
    assert (main.bit_width, main.signed, main.symmetric, main.qscheme, main.ch_axis) == (4, True, True, QSchemeType.per_channel, 0)
    assert (main.scale_type, main.round_method, main.observer) == (ScaleType.float, RoundType.toward_zero, PerChannelMinMaxObserver)
    assert main.grid == (-7, 7)  # narrow: Brevitas' A2Q grid
    assert main.dtype_name == "int4"
    method = "a2q+" if zero_centered else "a2q"
    assert main.describe() == f"int4 sym per_channel axis=0 float narrow {method} acc12 minmax toward_zero"
    pof2 = QuantizationSpec(**MAIN, scale_type=ScaleType.pof2, qat_spec=A2QSpec(12, zero_centered=zero_centered))
    assert normalise(pof2, "weight", "w").scale_type is ScaleType.pof2


def test_explicit_spellings_of_what_a2q_needs_are_accepted():
    explicit = QuantizationSpec(
        **MAIN,
        symmetric=True,
        scale_type=ScaleType.float,
        round_method=RoundType.toward_zero,
        observer_cls=PerChannelMinMaxObserver,
        is_dynamic=False,
        qat_spec=A2QSpec(12),
    )
    assert normalise(explicit, "weight", "w") == normalise(QuantizationSpec(**MAIN, qat_spec=A2QSpec(12)), "weight", "w")


#: main-API field -> a value A2Q cannot honour (beside MAIN), and the allowed values the message names
MAIN_REFUSALS = {
    "qscheme": ({"qscheme": QSchemeType.per_tensor, "ch_axis": None}, r"qscheme=QSchemeType\.per_tensor", "QSchemeType.per_channel"),
    "ch_axis": ({"ch_axis": 1}, r"ch_axis=1", "0"),
    "symmetric": ({"symmetric": False}, r"symmetric=False", "None, True"),
    "scale_type": ({"scale_type": ScaleType.float16}, r"scale_type=ScaleType\.float16", "None, ScaleType.float, ScaleType.pof2"),
    "round_method": ({"round_method": RoundType.half_even}, r"round_method=RoundType\.half_even", "None, RoundType.toward_zero"),
    "observer_cls": ({"observer_cls": LSQObserver}, r"observer_cls=LSQObserver", "None, PerChannelMinMaxObserver"),
    "is_dynamic": ({"is_dynamic": True}, r"is_dynamic=True", "None, False"),
}


def test_every_a2q_field_row_has_a_refusal_case():
    assert set(MAIN_REFUSALS) == set(A2Q_MAIN_FIELDS)


@pytest.mark.parametrize("field", list(MAIN_REFUSALS))
def test_main_spec_fields_a2q_cannot_honour_are_refused_by_name(field):
    change, shown, allowed = MAIN_REFUSALS[field]
    spec = QuantizationSpec(**{**MAIN, **change}, qat_spec=A2QSpec(12))
    with pytest.raises(ValueError, match=rf"w: {shown} is not supported with qat_spec=A2QSpec .*; allowed: {allowed}"):
        normalise(spec, "weight", "w")


@pytest.mark.parametrize("role", ["input_tensors", "output_tensors", "bias"])
def test_a2q_applies_to_weights_only(role):
    dtype = Dtype.int32 if role == "bias" else Dtype.int4
    spec = QuantizationSpec(**{**MAIN, "dtype": dtype}, qat_spec=A2QSpec(12))
    with pytest.raises(ValueError, match=rf"x: qat_spec=A2QSpec is not supported for {role}: .*allowed: a weight spec"):
        normalise(spec, role, "x")


@pytest.mark.parametrize(
    "dtype,message",
    [
        (Dtype.uint4, r"dtype=Dtype\.uint4 is not supported with qat_spec=A2QSpec: .*allowed: a signed integer dtype"),
        (Dtype.fp8_e4m3, r"qat_spec=A2QSpec\(accumulator_bit_width=12, zero_centered=True\) is not supported with dtype=Dtype\.fp8_e4m3"),
        (Dtype.ternary, r"qat_spec=A2QSpec\(accumulator_bit_width=12, zero_centered=True\) is not supported with dtype=Dtype\.ternary"),
        (Dtype.bipolar, r"qat_spec=A2QSpec\(accumulator_bit_width=12, zero_centered=True\) is not supported with dtype=Dtype\.bipolar"),
    ],
)
def test_a2q_refuses_other_dtypes_naming_them(dtype, message):
    with pytest.raises(ValueError, match=message):
        normalise(QuantizationSpec(**{**MAIN, "dtype": dtype}, qat_spec=A2QSpec(12)), "weight", "w")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({"qscheme": QSchemeType.per_tensor}, r"qscheme=per_tensor is not supported with qat_spec=A2QSpec .*allowed: per_channel"),
        ({"scale_type": ScaleType.bfloat16}, r"scale_type=bfloat16 is not supported with qat_spec=A2QSpec .*allowed: float, pof2"),
        ({"param_type": X.ParamType.mse}, r"param_type=mse is not supported with qat_spec=A2QSpec .*allowed: stats"),
        ({"symmetric": False}, r"symmetric=False \(an unsigned grid\) is not supported with qat_spec=A2QSpec"),
        (
            {"quant_type": X.QuantType.float_quant, "bit_width": 8, "exponent_bit_width": 4, "mantissa_bit_width": 3},
            r"quant_type=float_quant is not supported with qat_spec=A2QSpec .*allowed: int_quant",
        ),
    ],
)
def test_extension_spec_fields_a2q_cannot_honour_are_refused_by_name(kwargs, message):
    spec = X.QuantizationSpec(**{"bit_width": 4, "qscheme": QSchemeType.per_channel, **kwargs}, qat_spec=A2QSpec(12))
    with pytest.raises(ValueError, match=message):
        normalise(spec, "weight", "w")


def test_extension_activation_and_bias_refuse_a2q():
    spec = X.QuantizationSpec(bit_width=4, qscheme=QSchemeType.per_channel, qat_spec=A2QSpec(12))
    with pytest.raises(ValueError, match=r"qat_spec=A2QSpec is not supported for input_tensors"):
        normalise(spec, "input_tensors", "x")
    with pytest.raises(ValueError, match=r"qat_spec=A2QSpec\(accumulator_bit_width=12, zero_centered=True\) cannot be honoured"):
        normalise(X.QuantizationSpec(bit_width=16, qat_spec=A2QSpec(12)), "bias", "b")
    with pytest.raises(ValueError, match=r"qat_spec=A2QSpec.* is not supported with bit_width=1"):
        normalise(X.QuantizationSpec(bit_width=1, qat_spec=A2QSpec(12)), "weight", "w")


def test_qat_spec_of_another_type_is_refused():
    with pytest.raises(TypeError, match=r"qat_spec='A2Q': expected one of \['A2QSpec', 'TQTSpec'\]"):
        QuantizationSpec(**MAIN, qat_spec="A2Q")


# -- presets.finn(accumulator_bits=...) -----------------------------------------------------------


def test_finn_preset_takes_an_accumulator_width():
    cfg = presets.finn(4, 4, accumulator_bits=12)
    weight = cfg.global_quant_config.weight
    assert weight.qat_spec == A2QSpec(12) and weight.scale_type is ScaleType.pof2  # the preset's scales: exact graphs
    tq = normalise(weight, "weight", "w")
    assert (tq.accumulator_bits, tq.zero_centered, tq.bit_width, tq.scale_type) == (12, True, 4, ScaleType.pof2)
    a2q = presets.finn(4, 4, accumulator_bits=10, zero_centered=False).global_quant_config.weight
    assert a2q.qat_spec == A2QSpec(10, zero_centered=False)
    assert presets.finn(4, 4).global_quant_config.weight.qat_spec is None  # unconstrained by default


def test_finn_preset_per_layer_accumulators_override_and_combine_with_weight_bits():
    cfg = presets.finn(
        4, 4, accumulator_bits=12, layer_accumulator_bits={"0": None, "fc": 14}, layer_weight_bits={"fc": 8, "head": 2}
    )
    layers = cfg.layer_quant_config
    assert layers["0"].weight.qat_spec is None and layers["0"].weight.scale_type is ScaleType.pof2  # unconstrained
    assert layers["fc"].weight.qat_spec == A2QSpec(14) and layers["fc"].weight.dtype is Dtype.int8
    assert layers["head"].weight.qat_spec == A2QSpec(12) and layers["head"].weight.dtype is Dtype.int2
    assert Config.from_dict(cfg.to_dict()) == cfg


@pytest.mark.parametrize(
    "kwargs,error,message",
    [
        ({"accumulator_bits": 40}, ValueError, r"A2QSpec\.accumulator_bit_width=40: allowed 2\.\.32"),
        ({"accumulator_bits": 12, "layer_accumulator_bits": {"fc": 1}}, ValueError, r"accumulator_bit_width=1"),
        ({"accumulator_bits": 12, "zero_centered": "yes"}, TypeError, r"finn\(zero_centered='yes'\)"),
        ({"accumulator_bits": 12, "weight_bits": 1}, ValueError, r"finn\(accumulator_bits\) with bipolar weights"),
    ],
)
def test_finn_preset_refuses_accumulators_it_cannot_build(kwargs, error, message):
    with pytest.raises(error, match=message):
        presets.finn(**kwargs)
