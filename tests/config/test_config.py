"""Main Quark config API: construction checks, coercion, errors, round trips, save/load, aliases."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml
from torch import nn

from quark.torch.quantization import plan
from quark.torch.quantization.config import config as cfgmod
from quark.torch.quantization.config.config import (
    AWQConfig,
    Config,
    GPTQConfig,
    QConfig,
    QLayerConfig,
    QTensorConfig,
    QuantizationConfig,
    QuantizationSpec,
    SmoothQuantConfig,
)
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    ZeroPointType,
)
from quark.torch.quantization.observer import (
    OBSERVERS,
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
    register_observer,
)
from quark.torch.quantization.tensor_quant import normalise

SUPPORTED = (nn.Linear, nn.Conv2d, nn.MultiheadAttention)


@pytest.fixture
def restore_observers():
    saved = dict(OBSERVERS)
    yield
    OBSERVERS.clear()
    OBSERVERS.update(saved)


# -- specs used by the round trips ------------------------------------------------------------------

INT8_PT_POF2 = QuantizationSpec(
    dtype=Dtype.int8,
    observer_cls=PerTensorMinMaxObserver,
    qscheme=QSchemeType.per_tensor,
    symmetric=True,
    scale_type=ScaleType.pof2,
    round_method=RoundType.half_even,
    is_dynamic=False,
)
INT4_GROUP = QuantizationSpec(
    dtype=Dtype.int4,
    observer_cls=PerChannelMinMaxObserver,
    qscheme=QSchemeType.per_group,
    ch_axis=1,
    group_size=32,
    symmetric=True,
    scale_type=ScaleType.float16,
    round_method=RoundType.round,
)
UINT8_ASYM_FZP = QuantizationSpec(
    dtype=Dtype.uint8,
    observer_cls=PerTensorMinMaxObserver,
    qscheme=QSchemeType.per_tensor,
    symmetric=False,
    zero_point_type=ZeroPointType.float32,
    round_method=RoundType.floor,
    scale_type=ScaleType.float32,
)
PERCENTILE = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerTensorPercentileObserver, qscheme=QSchemeType.per_tensor
)
MSE = QuantizationSpec(
    dtype=Dtype.uint8, observer_cls=PerTensorMSEObserver, symmetric=False, is_dynamic=False
)
PER_CHANNEL = QuantizationSpec(
    dtype=Dtype.int8, observer_cls=PerChannelMinMaxObserver, qscheme="per_channel", ch_axis=0
)
DYNAMIC = QuantizationSpec(dtype=Dtype.int8, is_dynamic=True)

CONFIGS = {
    "int8_per_tensor_pof2": Config(
        QuantizationConfig(
            input_tensors=INT8_PT_POF2, output_tensors=INT8_PT_POF2, weight=INT8_PT_POF2, bias=INT8_PT_POF2
        )
    ),
    "int4_per_group": Config(QuantizationConfig(weight=INT4_GROUP, input_tensors=DYNAMIC)),
    "uint8_asym_float_zp": Config(QuantizationConfig(input_tensors=UINT8_ASYM_FZP, weight=PER_CHANNEL)),
    "percentile_mse": Config(QuantizationConfig(input_tensors=PERCENTILE, output_tensors=MSE, weight=MSE)),
    "layer_type_by_name": Config(
        QuantizationConfig(weight=INT8_PT_POF2),
        layer_type_quant_config={
            "Linear": QuantizationConfig(weight=INT4_GROUP),
            "Conv2d": QuantizationConfig(weight=PER_CHANNEL),
        },
    ),
    "layer_quant_config": Config(
        QuantizationConfig(weight=INT8_PT_POF2, target_device=DeviceType.CPU),
        layer_quant_config={
            "fc1": QuantizationConfig(weight=INT4_GROUP, target_device=DeviceType.IPU),
            "head.*": QuantizationConfig(input_tensors=PERCENTILE),
        },
    ),
    "exclude": Config(QuantizationConfig(weight=INT8_PT_POF2), exclude=["head.0", "conv*"]),
    "fx_graph_mode": Config(
        QuantizationConfig(weight=INT8_PT_POF2), quant_mode=QuantizationMode.fx_graph_mode
    ),
    "algos": Config(
        QuantizationConfig(weight=INT4_GROUP),
        algo_config=[
            SmoothQuantConfig(
                alpha=0.5,
                scale_clamp_min=1e-5,
                scaling_layers=[{"prev_op": "ln", "layers": ["q", "k", "v"], "inp": "q"}],
                model_decoder_layers="model.layers",
                num_attention_heads=8,
                num_key_value_heads=2,
            ),
            AWQConfig(
                scaling_layers=[{"prev_op": "v", "layers": ["o"], "inp": "o"}],
                model_decoder_layers="model.layers",
            ),
            GPTQConfig(
                damp_percent=0.1,
                desc_act=False,
                static_groups=False,
                inside_layer_modules=["q", "k"],
                block_size=64,
            ),
        ],
    ),
    "empty_algos": Config(QuantizationConfig(weight=INT8_PT_POF2), algo_config=[]),
}


# -- round trips -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(CONFIGS))
def test_dict_round_trip(name):
    config = CONFIGS[name]
    data = config.to_dict()
    json.dumps(data)  # plain data only
    back = Config.from_dict(data)
    assert back == config
    assert back.to_dict() == data


@pytest.mark.parametrize("name", list(CONFIGS))
@pytest.mark.parametrize("suffix", [".json", ".yaml", ".yml"])
def test_save_load_round_trip(name, suffix, tmp_path):
    config = CONFIGS[name]
    path = tmp_path / f"config{suffix}"
    config.save(path)
    assert Config.load(path) == config
    assert Config.load(str(path)) == config  # str paths too


def test_saved_files_are_plain_json_and_yaml(tmp_path):
    config = CONFIGS["uint8_asym_float_zp"]
    config.save(tmp_path / "c.json")
    config.save(tmp_path / "c.yaml")
    from_json = json.loads((tmp_path / "c.json").read_text())
    from_yaml = yaml.safe_load((tmp_path / "c.yaml").read_text())
    assert from_json == from_yaml == config.to_dict()
    assert from_json["global_quant_config"]["input_tensors"]["dtype"] == "uint8"
    assert from_json["global_quant_config"]["input_tensors"]["zero_point_type"] == "float32"
    assert from_json["global_quant_config"]["input_tensors"]["observer_cls"] == "PerTensorMinMaxObserver"
    assert from_json["global_quant_config"]["input_tensors"]["round_method"] == "floor"  # enums by name
    assert from_json["quant_mode"] == "eager_mode"


def test_files_that_wrote_enum_values_still_load():
    """Before enums were written by name, files held their values (round_method: 3)."""
    data = CONFIGS["uint8_asym_float_zp"].to_dict()
    data["global_quant_config"]["input_tensors"]["round_method"] = RoundType.floor.value
    assert Config.from_dict(data) == CONFIGS["uint8_asym_float_zp"]


def test_to_dict_serialises_algo_names():
    data = CONFIGS["algos"].to_dict()
    assert [a["name"] for a in data["algo_config"]] == ["smoothquant", "awq", "gptq"]
    assert data["algo_config"][0]["alpha"] == 0.5
    assert data["algo_config"][2]["block_size"] == 64


@pytest.mark.parametrize("suffix", [".txt", ".toml", ""])
def test_save_bad_suffix(suffix, tmp_path):
    path = tmp_path / f"config{suffix}"
    with pytest.raises(ValueError, match=r"suffix must be \.json, \.yaml or \.yml"):
        CONFIGS["exclude"].save(path)
    assert not path.exists()


def test_load_bad_suffix(tmp_path):
    path = tmp_path / "config.txt"
    path.write_text("{}")
    with pytest.raises(ValueError, match=r"config\.txt.*suffix must be \.json, \.yaml or \.yml"):
        Config.load(path)


def test_load_non_mapping(tmp_path):
    path = tmp_path / "config.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="top level must be a mapping, got list"):
        Config.load(path)


def test_layer_type_class_key_round_trips_to_name_key():
    """Class keys serialise by class name: the round trip gives a *name* key (so the configs are not
    equal), and the name key resolves to the same plan as the class key."""
    spec_cfg = QuantizationConfig(weight=INT4_GROUP)
    by_class = Config(QuantizationConfig(weight=INT8_PT_POF2), layer_type_quant_config={nn.Linear: spec_cfg})
    data = by_class.to_dict()
    assert list(data["layer_type_quant_config"]) == ["Linear"]
    back = Config.from_dict(data)
    assert list(back.layer_type_quant_config) == ["Linear"]
    assert back != by_class  # documented: key type changes from class to str
    assert back.layer_type_quant_config["Linear"] == spec_cfg

    model = nn.Sequential(nn.Conv2d(3, 4, 3), nn.Flatten(), nn.Linear(4, 2))
    plans_class = plan.resolve(by_class, plan.module_sites(model, SUPPORTED), plan.module_names(model), SUPPORTED)
    plans_name = plan.resolve(back, plan.module_sites(model, SUPPORTED), plan.module_names(model), SUPPORTED)
    assert [(p.name, p.specs) for p in plans_class] == [(p.name, p.specs) for p in plans_name]
    assert {p.name: p.specs["weight"].bit_width for p in plans_name} == {"0": 8, "2": 4}


def test_from_dict_accepts_quark_quant_method_key():
    data = CONFIGS["exclude"].to_dict()
    data["quant_method"] = "quark"
    assert Config.from_dict(data) == CONFIGS["exclude"]


def test_from_dict_minimal_uses_defaults():
    config = Config.from_dict({"global_quant_config": {"weight": {"dtype": "int8"}}})
    assert config.global_quant_config.weight == QuantizationSpec(dtype=Dtype.int8)
    assert config.layer_type_quant_config == {} and config.layer_quant_config == {} and config.exclude == []
    assert config.algo_config is None
    assert config.quant_mode is QuantizationMode.eager_mode


# -- coercion ----------------------------------------------------------------------------------------


def test_string_coercion():
    spec = QuantizationSpec(
        dtype="int8",
        qscheme="per_channel",
        ch_axis=0,
        round_method="half_even",
        scale_type="pof2",
        zero_point_type="float32",
        observer_cls="PerChannelMinMaxObserver",
    )
    assert spec.dtype is Dtype.int8
    assert spec.qscheme is QSchemeType.per_channel
    assert spec.round_method is RoundType.half_even
    assert spec.scale_type is ScaleType.pof2
    assert spec.zero_point_type is ZeroPointType.float32
    assert spec.observer_cls is PerChannelMinMaxObserver
    assert spec == QuantizationSpec(
        dtype=Dtype.int8,
        qscheme=QSchemeType.per_channel,
        ch_axis=0,
        round_method=RoundType.half_even,
        scale_type=ScaleType.pof2,
        zero_point_type=ZeroPointType.float32,
        observer_cls=PerChannelMinMaxObserver,
    )


def test_round_method_coerced_from_value_and_name():
    assert QuantizationSpec(dtype="int8", round_method=8).round_method is RoundType.half_even
    assert QuantizationSpec(dtype="int8", round_method="floor").round_method is RoundType.floor


def test_target_device_and_quant_mode_coercion():
    assert QuantizationConfig(target_device="ipu").target_device is DeviceType.IPU
    assert QuantizationConfig(target_device="CPU").target_device is DeviceType.CPU
    assert (
        Config(QuantizationConfig(), quant_mode="fx_graph_mode").quant_mode is QuantizationMode.fx_graph_mode
    )


def test_role_given_as_dict_is_converted():
    qc = QuantizationConfig(weight={"dtype": "int4", "qscheme": "per_group", "ch_axis": 1, "group_size": 8})
    assert isinstance(qc.weight, QuantizationSpec)
    assert qc.weight.group_size == 8 and qc.weight.dtype is Dtype.int4


@pytest.mark.parametrize(
    "kwargs,field,bad,allowed",
    [
        ({"dtype": "int7"}, "dtype", "'int7'", "Dtype.int8, Dtype.uint8"),
        (
            {"dtype": "int8", "qscheme": "per_row"},
            "qscheme",
            "'per_row'",
            "QSchemeType.per_tensor, QSchemeType.per_channel",
        ),
        (
            {"dtype": "int8", "round_method": "ceil"},
            "round_method",
            "'ceil'",
            "RoundType.round, RoundType.floor",
        ),
        ({"dtype": "int8", "round_method": 1}, "round_method", "1", "RoundType.half_even"),
        ({"dtype": "int8", "scale_type": "pof3"}, "scale_type", "'pof3'", "ScaleType.float, ScaleType.pof2"),
        (
            {"dtype": "int8", "zero_point_type": "int8"},
            "zero_point_type",
            "'int8'",
            "ZeroPointType.int32, ZeroPointType.float32",
        ),
    ],
)
def test_bad_enum_value(kwargs, field, bad, allowed):
    with pytest.raises(
        ValueError, match=rf"QuantizationSpec\.{field}={bad} is not valid; allowed: .*{allowed}"
    ):
        QuantizationSpec(**kwargs)


def test_dtype_required():
    with pytest.raises(ValueError, match=r"QuantizationSpec\.dtype is required; allowed: Dtype\.int8"):
        QuantizationSpec(dtype=None)


def test_bad_target_device_and_quant_mode():
    with pytest.raises(
        ValueError,
        match=r"QuantizationConfig\.target_device='gpu' is not valid; allowed: DeviceType\.CPU, DeviceType\.IPU",
    ):
        QuantizationConfig(target_device="gpu")
    with pytest.raises(
        ValueError, match=r"Config\.quant_mode='lazy_mode' is not valid; allowed: .*eager_mode"
    ):
        Config(QuantizationConfig(), quant_mode="lazy_mode")


# -- type errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"symmetric": "yes"}, r"QuantizationSpec\.symmetric='yes': expected bool, got str"),
        ({"is_dynamic": 1}, r"QuantizationSpec\.is_dynamic=1: expected bool, got int"),
        (
            {"qscheme": "per_group", "ch_axis": 1, "group_size": True},
            r"QuantizationSpec\.group_size=True: expected int",
        ),
        (
            {"qscheme": "per_group", "ch_axis": 1, "group_size": 8.0},
            r"QuantizationSpec\.group_size=8\.0: expected int, got float",
        ),
        ({"qscheme": "per_channel", "ch_axis": "0"}, r"QuantizationSpec\.ch_axis='0': expected int, got str"),
        ({"qscheme": "per_channel", "ch_axis": False}, r"QuantizationSpec\.ch_axis=False: expected int"),
        (
            {"observer_cls": int},
            r"QuantizationSpec\.observer_cls=<class 'int'>: expected an observer class, one of .*PerTensorMinMaxObserver",
        ),
        (
            {"observer_cls": PerTensorMinMaxObserver()},
            r"QuantizationSpec\.observer_cls=.*: expected an observer class",
        ),
    ],
)
def test_spec_type_errors(kwargs, pattern):
    with pytest.raises(TypeError, match=pattern):
        QuantizationSpec(dtype="int8", **kwargs)


def test_quantization_config_role_type_error():
    with pytest.raises(
        TypeError, match=r"QuantizationConfig\.weight='int8': expected .*QuantizationSpec or None"
    ):
        QuantizationConfig(weight="int8")


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        (
            {"global_quant_config": None},
            r"Config\.global_quant_config: expected quark\.torch\.quantization\.config\.config\.QuantizationConfig, got None",
        ),
        (
            {"global_quant_config": QuantizationSpec(dtype="int8")},
            r"Config\.global_quant_config: expected quark\.torch\.quantization\.config\.config\.QuantizationConfig, got QuantizationSpec\(",
        ),
        ({"layer_type_quant_config": [1]}, r"Config\.layer_type_quant_config: expected a dict, got list"),
        (
            {"layer_quant_config": {"fc": None}},
            r"Config\.layer_quant_config\['fc'\]: expected QuantizationConfig, got None",
        ),
        (
            {"layer_quant_config": {1: QuantizationConfig()}},
            r"Config\.layer_quant_config key 1: expected a module name pattern",
        ),
        (
            {"layer_type_quant_config": {1: QuantizationConfig()}},
            r"Config\.layer_type_quant_config key 1: expected an nn\.Module class",
        ),
        ({"exclude": "fc1"}, r"Config\.exclude='fc1': expected a list of module name patterns"),
        ({"exclude": ["fc1", 2]}, r"Config\.exclude=\['fc1', 2\]: expected a list"),
        (
            {"algo_config": ["gptq"]},
            r"Config\.algo_config entry 'gptq': expected an algorithm config, one of \[.*'awq', .*'gptq', .*'smoothquant'",
        ),
    ],
)
def test_config_type_errors(kwargs, pattern):
    kwargs.setdefault("global_quant_config", QuantizationConfig())
    with pytest.raises(TypeError, match=pattern):
        Config(**kwargs)


def test_single_algo_config_is_wrapped_in_list():
    config = Config(QuantizationConfig(), algo_config=GPTQConfig())
    assert config.algo_config == [GPTQConfig()]


# -- rule errors -------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "kwargs,pattern",
    [
        ({"qscheme": "per_channel"}, r"QuantizationSpec\.ch_axis is required with qscheme=per_channel"),
        (
            {"qscheme": "per_group", "group_size": 32},
            r"QuantizationSpec\.ch_axis is required with qscheme=per_group",
        ),
        (
            {"qscheme": "per_group", "ch_axis": 1},
            r"QuantizationSpec\.group_size is required with qscheme=per_group",
        ),
        (
            {"qscheme": "per_group", "ch_axis": 1, "group_size": 0},
            r"QuantizationSpec\.group_size=0: must be a positive integer",
        ),
        (
            {"qscheme": "per_group", "ch_axis": 1, "group_size": -32},
            r"QuantizationSpec\.group_size=-32: must be a positive integer",
        ),
        (
            {"qscheme": "per_channel", "ch_axis": 0, "group_size": 32},
            r"QuantizationSpec\.group_size=32 is only meaningful with qscheme=per_group, got qscheme=per_channel",
        ),
        (
            {"group_size": 32},
            r"QuantizationSpec\.group_size=32 is only meaningful with qscheme=per_group, got qscheme=None",
        ),
        (
            {"qscheme": "per_channel", "ch_axis": 0, "observer_cls": PerTensorPercentileObserver},
            r"QuantizationSpec\.observer_cls=PerTensorPercentileObserver observes per_tensor but qscheme=per_channel",
        ),
        (
            {"qscheme": "per_channel", "ch_axis": 0, "observer_cls": PerTensorMSEObserver},
            r"QuantizationSpec\.observer_cls=PerTensorMSEObserver observes per_tensor but qscheme=per_channel",
        ),
        (
            {"qscheme": "per_tensor", "observer_cls": PerChannelMinMaxObserver},
            r"QuantizationSpec\.observer_cls=PerChannelMinMaxObserver observes per_channel but qscheme=per_tensor",
        ),
    ],
)
def test_spec_rule_errors(kwargs, pattern):
    with pytest.raises(ValueError, match=pattern):
        QuantizationSpec(dtype="int8", **kwargs)


def test_rule_errors_also_raised_from_dict():
    with pytest.raises(ValueError, match=r"QuantizationSpec\.ch_axis is required with qscheme=per_channel"):
        Config.from_dict({"global_quant_config": {"weight": {"dtype": "int8", "qscheme": "per_channel"}}})


# -- from_dict errors ----------------------------------------------------------------------------------


def test_from_dict_unknown_top_level_key():
    data = CONFIGS["exclude"].to_dict()
    data["excludes"] = ["fc1"]
    with pytest.raises(ValueError, match=r"Config: unknown keys \['excludes'\]; allowed: .*'exclude'"):
        Config.from_dict(data)


def test_from_dict_unknown_layer_key():
    with pytest.raises(
        ValueError, match=r"QuantizationConfig: unknown keys \['weights'\]; allowed: .*'weight'"
    ):
        Config.from_dict({"global_quant_config": {"weights": {"dtype": "int8"}}})


def test_from_dict_unknown_spec_key():
    with pytest.raises(
        ValueError, match=r"QuantizationSpec: unknown keys \['bits'\]; allowed: \['block_size', 'ch_axis', 'dtype'"
    ):
        QuantizationSpec.from_dict({"dtype": "int8", "bits": 8})


def test_from_dict_unknown_algo_name_and_key():
    base = {"global_quant_config": {}}
    with pytest.raises(
        ValueError, match=r"algo_config name='osscar' is not known; allowed: \[.*'awq', .*'gptq', .*'smoothquant'"
    ):
        Config.from_dict({**base, "algo_config": [{"name": "osscar"}]})
    with pytest.raises(ValueError, match=r"GPTQConfig: unknown keys \['damp'\]; allowed: .*'damp_percent'"):
        Config.from_dict({**base, "algo_config": [{"name": "gptq", "damp": 0.1}]})


def test_from_dict_unregistered_observer_name():
    data = {"global_quant_config": {"input_tensors": {"dtype": "int8", "observer_cls": "HistogramObserver"}}}
    with pytest.raises(
        ValueError,
        match=r"QuantizationSpec\.observer_cls='HistogramObserver' is not a registered observer; allowed: .*'PerTensorMinMaxObserver'.*register_observer",
    ):
        Config.from_dict(data)


def test_unregistered_subclass_serialises_but_does_not_load():
    class MyUnregisteredObserver(PerTensorPercentileObserver):
        percentile = 99.0

    config = Config(
        QuantizationConfig(input_tensors=QuantizationSpec(dtype="int8", observer_cls=MyUnregisteredObserver))
    )
    data = config.to_dict()
    assert data["global_quant_config"]["input_tensors"]["observer_cls"] == "MyUnregisteredObserver"
    with pytest.raises(
        ValueError, match=r"observer_cls='MyUnregisteredObserver' is not a registered observer"
    ):
        Config.from_dict(data)


def test_register_observer_percentile_subclass_round_trips(restore_observers, tmp_path):
    class Percentile999(PerTensorPercentileObserver):
        percentile = 99.9

    assert register_observer(Percentile999) is Percentile999
    assert OBSERVERS["Percentile999"] is Percentile999
    spec = QuantizationSpec(dtype="uint8", symmetric=False, observer_cls="Percentile999")
    assert spec.observer_cls is Percentile999
    config = Config(QuantizationConfig(input_tensors=spec))
    assert Config.from_dict(config.to_dict()) == config
    config.save(tmp_path / "c.yaml")
    loaded = Config.load(tmp_path / "c.yaml")
    assert loaded.global_quant_config.input_tensors.observer_cls is Percentile999
    assert normalise(loaded.global_quant_config.input_tensors, "input_tensors", "x").percentile == 99.9


@pytest.mark.parametrize("bad", [int, "PerTensorMinMaxObserver", PerTensorMinMaxObserver()])
def test_register_observer_rejects_non_observer(bad, restore_observers):
    with pytest.raises(TypeError, match=r"register_observer: expected a subclass of ObserverBase, got"):
        register_observer(bad)


# -- aliases -----------------------------------------------------------------------------------------


def test_aliases_are_the_same_classes():
    assert QConfig is Config
    assert QLayerConfig is QuantizationConfig
    assert QTensorConfig is QuantizationSpec
    assert {"QConfig", "QLayerConfig", "QTensorConfig"} <= set(cfgmod.__all__)


def test_aliases_construct_silently():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spec = QTensorConfig(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0)
        layer = QLayerConfig(weight=spec, input_tensors=QTensorConfig(dtype="uint8", symmetric=False))
        config = QConfig(global_quant_config=layer, layer_type_quant_config={nn.Linear: layer})
        config.to_dict()
    assert (
        isinstance(config, Config)
        and isinstance(layer, QuantizationConfig)
        and isinstance(spec, QuantizationSpec)
    )
    assert config == Config(
        QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0),
            input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=False),
        ),
        layer_type_quant_config={nn.Linear: layer},
    )


def test_spec_defaults_follow_quark():
    spec = QuantizationSpec(dtype=Dtype.int8)
    assert spec.observer_cls is None and spec.is_dynamic is None and spec.qscheme is None
    assert spec.ch_axis is None and spec.group_size is None and spec.symmetric is None
    assert spec.round_method is None and spec.scale_type is None
    assert spec.zero_point_type is ZeroPointType.int32
    config = Config(QuantizationConfig())
    assert config.quant_mode is QuantizationMode.eager_mode
    assert config.pre_quant_opt_config == [] and config.algo_config is None and config.exclude == []


def test_pre_quant_opt_config_round_trips_and_rejects_non_transforms():
    from quark.torch.extensions.brevitas.algos import Preprocess

    config = Config(QuantizationConfig(), pre_quant_opt_config=[Preprocess(equalize_iterations=3)])
    assert Config.from_dict(config.to_dict()) == config
    with pytest.raises(TypeError, match=r"Config\.pre_quant_opt_config entry <object.*expected an algorithm config"):
        Config(QuantizationConfig(), pre_quant_opt_config=[object()])


# -- regressions: bugs found in review, fixed -----------------------------------------------------


def test_regression_per_channel_observer_with_default_qscheme():
    with pytest.raises(ValueError, match=r"observer_cls=PerChannelMinMaxObserver observes per_channel but qscheme=None"):
        QuantizationSpec(dtype="int8", observer_cls=PerChannelMinMaxObserver)


def test_regression_quant_mode_bool_accepted():
    with pytest.raises((TypeError, ValueError), match=r"quant_mode=True"):
        Config(QuantizationConfig(), quant_mode=True)


def test_regression_from_dict_bad_quant_mode():
    with pytest.raises(ValueError, match=r"quant_mode='lazy'.*allowed"):
        Config.from_dict({"global_quant_config": {}, "quant_mode": "lazy"})


def test_regression_from_dict_exclude_string():
    with pytest.raises(TypeError, match=r"Config\.exclude='fc1'"):
        Config.from_dict({"global_quant_config": {}, "exclude": "fc1"})


def test_regression_layer_type_class_and_name_key_collide():
    with pytest.raises(ValueError, match=r"names the same layer type twice: \['Linear'\]"):
        Config(
            QuantizationConfig(),
            layer_type_quant_config={
                nn.Linear: QuantizationConfig(weight=INT8_PT_POF2),
                "Linear": QuantizationConfig(weight=INT4_GROUP),
            },
        )


def test_regression_main_config_accepts_extension_layer_config():
    from quark.torch.extensions.brevitas import config as ext

    with pytest.raises(TypeError, match=r"Config\.global_quant_config: expected quark\.torch\.quantization"):
        Config(ext.QuantizationConfig(weight=ext.QuantizationSpec()))
