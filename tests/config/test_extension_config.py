"""Brevitas extension flavour of the config API (quark.torch.extensions.brevitas.config)."""

from __future__ import annotations

import dataclasses
import json
import warnings

import pytest

from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.config import (
    Backend,
    Config,
    ParamType,
    QLayerConfig,
    QTensorConfig,
    QuantizationConfig,
    QuantizationSpec,
    QuantType,
)
from quark.torch.quantization.config import config as main
from quark.torch.quantization.config.type import DeviceType, QSchemeType, ScaleType


def test_enums():
    assert {m.name: m.value for m in Backend} == {"layerwise": "layerwise", "fx": "fx"}
    assert {m.name: m.value for m in QuantType} == {"int_quant": "int_quant", "float_quant": "float_quant"}
    assert {m.name: m.value for m in ParamType} == {"stats": "stats", "mse": "mse"}


def test_spec_defaults():
    spec = QuantizationSpec()
    assert spec.qscheme is QSchemeType.per_tensor
    assert spec.symmetric is True
    assert spec.scale_type is ScaleType.float
    assert spec.quant_type is QuantType.int_quant
    assert spec.param_type is ParamType.stats
    assert spec.bit_width == 8
    assert spec.exponent_bit_width is None and spec.mantissa_bit_width is None


def test_spec_is_frozen():
    spec = QuantizationSpec()
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.bit_width = 4
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.qscheme = QSchemeType.per_channel
    assert spec.bit_width == 8


def test_spec_is_hashable_and_equal_by_value():
    a = QuantizationSpec(bit_width=4, qscheme="per_channel")
    b = QuantizationSpec(bit_width=4, qscheme=QSchemeType.per_channel)
    assert a == b and hash(a) == hash(b)
    assert len({a, b, QuantizationSpec()}) == 2
    assert {a: "w4"}[b] == "w4"


def test_spec_string_coercion():
    spec = QuantizationSpec(
        qscheme="per_channel", scale_type="pof2", quant_type="int_quant", param_type="mse"
    )
    assert spec.qscheme is QSchemeType.per_channel
    assert spec.scale_type is ScaleType.pof2
    assert spec.quant_type is QuantType.int_quant
    assert spec.param_type is ParamType.mse


@pytest.mark.parametrize("bits", [1, 2, 8, 16, 32])
def test_bit_width_bounds_ok(bits):
    assert QuantizationSpec(bit_width=bits).bit_width == bits


@pytest.mark.parametrize("bits", [-1, 0, 33, 64])
def test_bit_width_out_of_bounds(bits):
    with pytest.raises(ValueError, match=rf"QuantizationSpec\.bit_width={bits}: allowed 1\.\.32 \(1: bipolar\)"):
        QuantizationSpec(bit_width=bits)


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"bit_width": 8.0}, r"QuantizationSpec\.bit_width=8\.0: expected int, got float"),
        ({"bit_width": True}, r"QuantizationSpec\.bit_width=True: expected int"),
        ({"bit_width": None}, r"QuantizationSpec\.bit_width=None: expected int, got NoneType"),
        ({"symmetric": "true"}, r"QuantizationSpec\.symmetric='true': expected bool, got str"),
        ({"symmetric": None}, r"QuantizationSpec\.symmetric=None: expected bool"),
        (
            {"quant_type": "float_quant", "exponent_bit_width": 4.0, "mantissa_bit_width": 3},
            r"QuantizationSpec\.exponent_bit_width=4\.0: expected int, got float",
        ),
    ],
)
def test_spec_type_errors(kwargs, pattern):
    with pytest.raises(TypeError, match=pattern):
        QuantizationSpec(**kwargs)


@pytest.mark.parametrize(
    "kwargs,field,bad,allowed",
    [
        (
            {"qscheme": "per_row"},
            "qscheme",
            "'per_row'",
            r"QSchemeType\.per_tensor, QSchemeType\.per_channel",
        ),
        ({"param_type": "percentile"}, "param_type", "'percentile'", r"ParamType\.stats, ParamType\.mse"),
        ({"quant_type": "fp8"}, "quant_type", "'fp8'", r"QuantType\.int_quant, QuantType\.float_quant"),
        ({"scale_type": "log2"}, "scale_type", "'log2'", r"ScaleType\.float, ScaleType\.pof2"),
    ],
)
def test_spec_bad_enum(kwargs, field, bad, allowed):
    with pytest.raises(
        ValueError, match=rf"QuantizationSpec\.{field}={bad} is not valid; allowed: {allowed}"
    ):
        QuantizationSpec(**kwargs)


@pytest.mark.parametrize("field", ["qscheme", "scale_type", "quant_type", "param_type"])
def test_spec_enum_fields_required(field):
    with pytest.raises(ValueError, match=rf"QuantizationSpec\.{field} is required; allowed:"):
        QuantizationSpec(**{field: None})


@pytest.mark.parametrize(
    "kwargs",
    [
        {"exponent_bit_width": 4},
        {"mantissa_bit_width": 3},
        {"exponent_bit_width": 4, "mantissa_bit_width": 3},
    ],
)
def test_exponent_mantissa_with_int_quant(kwargs):
    with pytest.raises(
        ValueError,
        match=r"exponent_bit_width / mantissa_bit_width are only meaningful with quant_type=QuantType\.float_quant, "
        r"got quant_type=QuantType\.int_quant",
    ):
        QuantizationSpec(**kwargs)


def test_float_quant_with_layout_constructs():
    spec = QuantizationSpec(quant_type="float_quant", exponent_bit_width=4, mantissa_bit_width=3)
    assert spec.quant_type is QuantType.float_quant
    assert (spec.exponent_bit_width, spec.mantissa_bit_width) == (4, 3)


# -- QuantizationConfig / Config ---------------------------------------------------------------------


def test_quantization_config_takes_extension_specs_and_main_specs():
    qc = QuantizationConfig(weight=QuantizationSpec(), input_tensors={"bit_width": 4, "symmetric": False})
    assert qc.input_tensors == QuantizationSpec(bit_width=4, symmetric=False)
    # the main API's spec names the formats the extension's cannot (MX, MX6/MX9, casts, FNUZ)
    mx = main.QuantizationSpec(dtype="mx", mx_element_dtype="fp4")
    qc = QuantizationConfig(weight=mx, input_tensors={"dtype": "bfloat16"})
    assert qc.weight == mx and qc.input_tensors == main.QuantizationSpec(dtype="bfloat16")
    assert QuantizationConfig.from_dict(qc.to_dict()) == qc
    with pytest.raises(
        TypeError,
        match=r"QuantizationConfig\.weight=.*expected quark\.torch\.extensions\.brevitas\.config\.QuantizationSpec or "
        r"quark\.torch\.quantization\.config\.config\.QuantizationSpec or None",
    ):
        QuantizationConfig(weight="int8")
    with pytest.raises(
        ValueError, match=r"QuantizationSpec: unknown keys \['dtype'\]; allowed: .*'bit_width'"
    ):
        QuantizationConfig(weight={"dtype": "int8", "param_type": "stats"})


def test_config_default_pre_quant_opt_config_is_preprocess():
    config = Config(QuantizationConfig(weight=QuantizationSpec()))
    assert config.pre_quant_opt_config == [Preprocess()]
    assert isinstance(config.pre_quant_opt_config[0], Preprocess)
    assert config.algo_config == []
    assert config.backend is Backend.layerwise
    # default list is not shared between instances
    other = Config(QuantizationConfig())
    assert other.pre_quant_opt_config is not config.pre_quant_opt_config


def test_config_empty_pre_quant_opt_config_turns_it_off():
    config = Config(QuantizationConfig(weight=QuantizationSpec()), pre_quant_opt_config=[])
    assert config.pre_quant_opt_config == []
    assert Config.from_dict(config.to_dict()).pre_quant_opt_config == []


def test_from_dict_missing_pre_quant_opt_config_gives_default():
    config = Config.from_dict({"global_quant_config": {"weight": {"bit_width": 4}}})
    assert config.pre_quant_opt_config == [Preprocess()]
    assert config.global_quant_config.weight == QuantizationSpec(bit_width=4)


ROUND_TRIP_CONFIGS = {
    "defaults": Config(QuantizationConfig(weight=QuantizationSpec(), input_tensors=QuantizationSpec())),
    "no_preprocess": Config(
        QuantizationConfig(
            weight=QuantizationSpec(qscheme="per_channel", bit_width=4, param_type="mse", scale_type="pof2"),
            input_tensors=QuantizationSpec(symmetric=False, param_type="mse"),
            output_tensors=QuantizationSpec(bit_width=16),
            bias=QuantizationSpec(bit_width=32),
            target_device=DeviceType.IPU,
        ),
        pre_quant_opt_config=[],
    ),
    "custom_preprocess": Config(
        QuantizationConfig(
            weight=QuantizationSpec(quant_type="float_quant", exponent_bit_width=4, mantissa_bit_width=3)
        ),
        pre_quant_opt_config=[
            Preprocess(equalize_iterations=3, merge_batch_norm=False, channel_splitting_ratio=0.1)
        ],
        backend="layerwise",
    ),
}


@pytest.mark.parametrize("name", list(ROUND_TRIP_CONFIGS))
def test_dict_round_trip(name):
    config = ROUND_TRIP_CONFIGS[name]
    data = config.to_dict()
    json.dumps(data)
    assert Config.from_dict(data) == config
    assert Config.from_dict(data).to_dict() == data


@pytest.mark.parametrize("name", list(ROUND_TRIP_CONFIGS))
@pytest.mark.parametrize("suffix", [".json", ".yaml"])
def test_file_round_trip(name, suffix, tmp_path):
    config = ROUND_TRIP_CONFIGS[name]
    config.save(tmp_path / f"c{suffix}")
    assert Config.load(tmp_path / f"c{suffix}") == config


def test_to_dict_content():
    data = ROUND_TRIP_CONFIGS["no_preprocess"].to_dict()
    assert data["backend"] == "layerwise"
    assert data["pre_quant_opt_config"] == [] and data["algo_config"] == []
    assert data["global_quant_config"]["weight"] == {
        "qscheme": "per_channel",
        "symmetric": True,
        "scale_type": "pof2",
        "quant_type": "int_quant",
        "param_type": "mse",
        "bit_width": 4,
        "exponent_bit_width": None,
        "mantissa_bit_width": None,
        "qat_spec": None,
    }
    assert data["global_quant_config"]["target_device"] == "IPU"
    assert data["version"] == 1
    assert ROUND_TRIP_CONFIGS["defaults"].to_dict()["pre_quant_opt_config"][0]["name"] == "Pre-Processing"
    # files written before the algorithms took Quark's names still load
    old = {"global_quant_config": {}, "pre_quant_opt_config": [{"name": "preprocess", "equalize_iterations": 2}]}
    assert Config.from_dict(old).pre_quant_opt_config == [Preprocess(equalize_iterations=2)]


def test_save_bad_suffix(tmp_path):
    with pytest.raises(ValueError, match=r"suffix must be \.json, \.yaml or \.yml"):
        ROUND_TRIP_CONFIGS["defaults"].save(tmp_path / "c.ini")


def test_from_dict_errors():
    with pytest.raises(
        ValueError, match=r"Config: unknown keys \['layer_quant_config'\]; allowed: .*'backend'"
    ):
        Config.from_dict({"global_quant_config": {}, "layer_quant_config": {}})
    with pytest.raises(ValueError, match=r"algo_config name='gpfq' is not known; allowed: \[.*'Pre-Processing'"):
        Config.from_dict({"global_quant_config": {}, "algo_config": [{"name": "gpfq"}]})
    with pytest.raises(
        ValueError, match=r"Preprocess: unknown keys \['iterations'\]; allowed: .*'equalize_iterations'"
    ):
        Config.from_dict(
            {"global_quant_config": {}, "pre_quant_opt_config": [{"name": "preprocess", "iterations": 2}]}
        )
    with pytest.raises(
        ValueError, match=r"Config\.backend='graph' is not valid; allowed: Backend\.layerwise"
    ):
        Config.from_dict({"global_quant_config": {}, "backend": "graph"})


@pytest.mark.parametrize(
    "bad,shown",
    [
        (None, "None"),
        (main.QuantizationConfig(), r"QuantizationConfig\("),
        (QuantizationSpec(), r"QuantizationSpec\("),
    ],
)
def test_bad_global_quant_config_type(bad, shown):
    with pytest.raises(
        TypeError,
        match=rf"Config\.global_quant_config: expected quark\.torch\.extensions\.brevitas\.config\.QuantizationConfig, got {shown}",
    ):
        Config(bad)


@pytest.mark.parametrize("field", ["pre_quant_opt_config", "algo_config"])
def test_algorithm_fields_take_none_one_or_a_list(field):
    assert getattr(Config(QuantizationConfig(), **{field: Preprocess()}), field) == [Preprocess()]
    assert getattr(Config(QuantizationConfig(), **{field: None}), field) == []
    with pytest.raises(TypeError, match=rf"Config\.{field}: expected None, an algorithm config or a list of them, got str"):
        Config(QuantizationConfig(), **{field: "preprocess"})
    with pytest.raises(TypeError, match=rf"Config\.{field} entry 'preprocess': expected an algorithm config"):
        Config(QuantizationConfig(), **{field: ["preprocess"]})


def test_aliases_are_silent():
    assert QTensorConfig is QuantizationSpec
    assert QLayerConfig is QuantizationConfig
    assert {"QTensorConfig", "QLayerConfig"} <= set(ext.__all__)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = QTensorConfig(bit_width=4)
        layer = QLayerConfig(weight=spec, input_tensors=QTensorConfig())
        config = Config(global_quant_config=layer)
        config.to_dict()
    assert config.global_quant_config.weight == QuantizationSpec(bit_width=4)
    assert isinstance(layer, QuantizationConfig)


def test_extension_layer_config_is_distinct_from_main():
    assert QuantizationConfig.spec_classes == (QuantizationSpec, main.QuantizationSpec)
    assert main.QuantizationConfig.spec_classes == (main.QuantizationSpec,)
    assert QuantizationSpec is not main.QuantizationSpec
