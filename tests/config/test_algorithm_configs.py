"""The algorithm configs and observer names, as Quark documents them (no model, no Brevitas)."""

from __future__ import annotations

import dataclasses
import json

import pytest

from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas import config as ext
from quark.torch.quantization.config.algorithms import (
    AWQConfig,
    GPTQConfig,
    PreQuantOptConfig,
    SmoothQuantConfig,
)
from quark.torch.quantization.config.algorithms.registry import ALGO_CONFIGS
from quark.torch.quantization.config.config import (
    AutoRoundConfig,
    AutoSmoothQuantConfig,
    Config,
    GPTAQConfig,
    QronosConfig,
    QuantizationConfig,
    QuantizationSpec,
    RotationConfig,
    SVDQuantConfig,
)
from quark.torch.quantization.config.type import Dtype, QSchemeType
from quark.torch.quantization.observer import (
    PerBlockBFPObserver,
    PerBlockMXObserver,
    PerChannelMinMaxObserver,
    PerGroupMinMaxObserver,
    PerTensorHistogramObserver,
    PerTensorMinMaxObserver,
    PlaceholderObserver,
)
from quark.torch.quantization.plan import config_specs, config_view

DOCUMENTED = {
    SmoothQuantConfig: {
        "name": "smoothquant",
        "alpha": 1,
        "scale_clamp_min": 1e-3,
        "scaling_layers": None,
        "embedding_layers": None,
        "model_decoder_layers": None,
    },
    AWQConfig: {
        "name": "awq",
        "bit": 4,
        "sym": False,
        "group_size": 128,
        "algo_processor": None,
        "scaling_layers": None,
        "model_decoder_layers": None,
        "embedding_layers": None,
    },
    GPTQConfig: {
        "name": "gptq",
        "bit": 4,
        "sym": False,
        "group_size": 128,
        "damp_percent": 0.01,
        "desc_act": True,
        "static_groups": False,
        "true_sequential": True,
        "inside_layer_modules": None,
        "model_decoder_layers": None,
        "embedding_layers": None,
    },
}


@pytest.mark.parametrize("cls", list(DOCUMENTED))
def test_documented_fields_defaults_and_order(cls):
    config = cls()
    assert {k: getattr(config, k) for k in DOCUMENTED[cls]} == DOCUMENTED[cls]
    # name first, then Quark's documented order (newer Quark's fields follow)
    assert list(config.to_dict())[: len(DOCUMENTED[cls])] == list(DOCUMENTED[cls])


def test_quark_calls_build_and_round_trip():
    gptq = GPTQConfig(bit=4, sym=True, group_size=32)
    assert (gptq.bit, gptq.sym, gptq.group_size) == (4, True, 32)
    config = Config(
        QuantizationConfig(),
        pre_quant_opt_config=SmoothQuantConfig(alpha=0.5),
        algo_config=[AWQConfig(), gptq],
    )
    assert Config.from_dict(config.to_dict()) == config
    assert Config(QuantizationConfig(), pre_quant_opt_config=None).pre_quant_opt_config == []
    # newer Quark's names and values load too
    newer = {
        "name": "smooth",
        "alpha": 0.8,
        "model_decoder_layers": "",
        "num_attention_heads": 32,
        "num_key_value_heads": 8,
    }
    loaded = Config.from_dict({"global_quant_config": {}, "algo_config": [newer]}).algo_config[0]
    assert loaded == SmoothQuantConfig(alpha=0.8, num_attention_heads=32, num_key_value_heads=8)
    assert SmoothQuantConfig(name="smooth").name == "smoothquant"
    assert GPTQConfig(block_size=64, static_groups=True, model_decoder_layers="").model_decoder_layers is None


@pytest.mark.parametrize(
    "build, match",
    [
        (lambda: GPTQConfig(name="awq"), r"GPTQConfig\.name='awq': allowed \['gptq'\]"),
        (
            lambda: SmoothQuantConfig(name="x"),
            r"SmoothQuantConfig\.name='x': allowed \['smoothquant', 'smooth'\]",
        ),
        (
            lambda: GPTQConfig(bit=1),
            r"GPTQConfig\.bit=1 is not valid; allowed: None \(the weight spec's\) or an int in 2\.\.16",
        ),
        (
            lambda: GPTQConfig(group_size=0),
            r"GPTQConfig\.group_size=0 is not valid; allowed: None .*-1 .*positive int",
        ),
        (
            lambda: GPTQConfig(sym="yes"),
            r"GPTQConfig\.sym='yes' is not valid; allowed: None \(the weight spec's\) or a bool",
        ),
        (
            lambda: GPTQConfig(damp_percent=2.0),
            r"GPTQConfig\.damp_percent=2\.0 is not valid; allowed: a number in \[0, 1\)",
        ),
        (lambda: GPTQConfig(block_size=0), r"GPTQConfig\.block_size=0 is not valid; allowed: a positive int"),
        (
            lambda: GPTQConfig(inside_layer_modules="q_proj"),
            r"GPTQConfig\.inside_layer_modules='q_proj' is not valid",
        ),
        (
            lambda: SmoothQuantConfig(alpha=1.5),
            r"SmoothQuantConfig\.alpha=1\.5 is not valid; allowed: a number in \[0, 1\]",
        ),
        (lambda: SmoothQuantConfig(scale_clamp_min=0), r"SmoothQuantConfig\.scale_clamp_min=0 is not valid"),
        (
            lambda: SmoothQuantConfig(scaling_layers=[{"prev_op": "ln", "layer": ["q"]}]),
            r"SmoothQuantConfig\.scaling_layers=.* allowed: None .* 'prev_op' \(str\) and 'layers'",
        ),
        (
            lambda: AWQConfig(num_attention_heads=0),
            r"AWQConfig\.num_attention_heads=0 is not valid; allowed: -1",
        ),
        (lambda: algos.ActivationEqualization(alpha=2), r"ActivationEqualization\.alpha=2 is not valid"),
        (
            lambda: algos.GPFQ(percentage_of_processed_inputs=0),
            r"GPFQ\.percentage_of_processed_inputs=0 is not valid",
        ),
        (
            lambda: algos.GPFA2Q(accumulator_bit_width=1),
            r"GPFA2Q\.accumulator_bit_width=1 is not valid; allowed: an int in 2\.\.64",
        ),
        (lambda: algos.GPTQ(act_order=1), r"GPTQ\.act_order=1 is not valid; allowed: True or False"),
    ],
)
def test_field_errors_name_field_value_and_allowed(build, match):
    with pytest.raises(ValueError, match=match):
        build()


def test_algo_processor_accepted_with_a_warning():
    class AwqProcessor:  # what Quark scripts pass
        pass

    with pytest.warns(UserWarning, match=r"AWQConfig\.algo_processor=.*AwqProcessor.* is ignored"):
        config = AWQConfig(algo_processor=AwqProcessor)
    assert config.to_dict()["algo_processor"] is None


EXTENSION = {
    algos.Preprocess: "Pre-Processing",
    algos.ActivationEqualization: "Activation Equalization",
    algos.GPTQ: "GPTQ",
    algos.GPFQ: "GPFQ",
    algos.GPFA2Q: "GPFA2Q",
    algos.BiasCorrection: "Bias Correction",
    algos.CalibrateBatchNorm: "Calibrate Batch Norm",
}


def test_extension_algorithms_have_quarks_names_and_defaults():
    assert {cls: cls.name for cls in EXTENSION} == EXTENSION
    assert algos.ActivationEqualization() == algos.ActivationEqualization(is_layerwise=True, alpha=0.5)
    assert algos.GPTQ() == algos.GPTQ(act_order=False)
    assert algos.GPFQ() == algos.GPFQ(act_order=False, percentage_of_processed_inputs=1.0)
    assert algos.GPFA2Q() == algos.GPFA2Q(
        act_order=False, percentage_of_processed_inputs=1.0, accumulator_bit_width=16
    )
    assert algos.GPTQ(True).act_order  # Quark's positional order
    assert issubclass(algos.ActivationEqualization, algos.PreQuantOptConfig)
    assert issubclass(algos.GPFQ, algos.AlgoConfig) and not issubclass(algos.GPFQ, algos.PreQuantOptConfig)
    config = ext.Config(
        ext.QuantizationConfig(weight=ext.QuantizationSpec()),
        pre_quant_opt_config=[algos.Preprocess(), algos.ActivationEqualization(alpha=0.3)],
        algo_config=[algos.GPFA2Q(accumulator_bit_width=20), algos.BiasCorrection()],
    )
    assert ext.Config.from_dict(config.to_dict()) == config


# -- observers -----------------------------------------------------------------------------------

QUARK_SPECS = {
    # Quark's own templates (MXSpec, Bfloat16Spec, per-group int4)
    "mxfp4 PerBlockMXObserver": QuantizationSpec(
        dtype=Dtype.mx,
        mx_element_dtype=Dtype.fp4,
        observer_cls=PerBlockMXObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=-1,
        group_size=32,
        is_dynamic=True,
    ),
    "mxfp8 MinMax of its granularity": QuantizationSpec(
        dtype=Dtype.mx,
        mx_element_dtype=Dtype.fp8_e4m3,
        observer_cls=PerGroupMinMaxObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=1,
        group_size=32,
    ),
    "mx6 PerBlockBFPObserver": QuantizationSpec(
        dtype=Dtype.mx6,
        observer_cls=PerBlockBFPObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=-1,
        group_size=16,
    ),
    "mx9 PerChannelMinMaxObserver": QuantizationSpec(
        dtype=Dtype.mx9,
        observer_cls=PerChannelMinMaxObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=1,
        group_size=16,
    ),
    "bf16 PlaceholderObserver": QuantizationSpec(dtype=Dtype.bfloat16, observer_cls=PlaceholderObserver),
    "int4 PerGroupMinMaxObserver": QuantizationSpec(
        dtype=Dtype.uint4,
        symmetric=False,
        observer_cls=PerGroupMinMaxObserver,
        qscheme=QSchemeType.per_group,
        ch_axis=1,
        group_size=128,
    ),
}


@pytest.mark.parametrize("name", list(QUARK_SPECS))
def test_quark_observer_specs_load_and_normalise(name):
    spec = QUARK_SPECS[name]
    config = Config(QuantizationConfig(weight=spec))
    ((_, tq),) = config_specs(config_view(config))
    assert Config.from_dict(config.to_dict()) == config  # the observer serialises by name
    assert tq.qscheme is (QSchemeType.per_tensor if spec.dtype is Dtype.bfloat16 else QSchemeType.per_group)


def test_histogram_observer_is_an_l2_search():
    spec = QuantizationSpec(dtype=Dtype.int8, observer_cls=PerTensorHistogramObserver)
    ((_, tq),) = config_specs(config_view(Config(QuantizationConfig(input_tensors=spec))))
    assert tq.statistic == "mse"


@pytest.mark.parametrize(
    "spec, match",
    [
        (
            QuantizationSpec(dtype=Dtype.int8, observer_cls=PlaceholderObserver),
            r"observer_cls=PlaceholderObserver is not supported with dtype=Dtype\.int8",
        ),
        (
            QuantizationSpec(dtype=Dtype.bfloat16, observer_cls=PerTensorMinMaxObserver),
            r"observer_cls=PerTensorMinMaxObserver is not supported with dtype=Dtype\.bfloat16 .*allowed: None, PlaceholderObserver",
        ),
        (
            QuantizationSpec(
                dtype=Dtype.mx6,
                observer_cls=PerBlockMXObserver,
                qscheme=QSchemeType.per_group,
                ch_axis=1,
                group_size=16,
            ),
            r"observer_cls=PerBlockMXObserver is not supported with dtype=Dtype\.mx6 .*allowed: None, PerBlockBFPObserver",
        ),
    ],
)
def test_observer_for_the_wrong_format_is_refused(spec, match):
    with pytest.raises(ValueError, match=match):
        config_specs(config_view(Config(QuantizationConfig(weight=spec))))


def test_group_observer_needs_group_qscheme():
    with pytest.raises(
        ValueError, match=r"observer_cls=PerGroupMinMaxObserver observes per_group but qscheme=None"
    ):
        QuantizationSpec(dtype=Dtype.int4, observer_cls=PerGroupMinMaxObserver)


# -- the table, row by row (ALGO_CONFIGS: the names a config file may give) --------------------------

#: name -> a config of that name with a field away from its default (no field: the defaults)
ALGO_CONFIG_CASES = {
    "smoothquant": SmoothQuantConfig(alpha=0.3),
    "awq": AWQConfig(group_size=64),
    "gptq": GPTQConfig(damp_percent=0.05),
    "Pre-Processing": algos.Preprocess(equalize_iterations=3),
    "Merge Batch Norm": algos.MergeBatchNorm(),
    "Activation Equalization": algos.ActivationEqualization(alpha=0.3),
    "Hadamard Rotation": algos.HadamardRotation(layers=["*.fc"]),
    "GPTQ": algos.GPTQ(act_order=True),
    "GPFQ": algos.GPFQ(percentage_of_processed_inputs=0.5),
    "GPFA2Q": algos.GPFA2Q(accumulator_bit_width=20),
    "Qronos": algos.Qronos(alpha=1e-4),
    "Bias Correction": algos.BiasCorrection(),
    "Calibrate Batch Norm": algos.CalibrateBatchNorm(),
    # AMD Quark 0.13's algorithm configs (mapped or refused when quantizing: tests/backend/algorithms)
    "qronos": QronosConfig(inside_layer_modules=["fc"], model_decoder_layers="layers", beta=1e3),
    "rotation": RotationConfig(scaling_layers={"first_layer": [{"target_modules": ["layers.layer_id.fc"]}]}, online_r1_rotation=True),
    "autosmoothquant": AutoSmoothQuantConfig(),
    "gptaq": GPTAQConfig(),
    "autoround": AutoRoundConfig(),
    "svdquant": SVDQuantConfig(),
}


def _required(algo) -> dict:
    """The fields of ``algo`` without a default, as a dict holds them."""
    missing = dataclasses.MISSING
    return {
        f.name: getattr(algo, f.name)
        for f in dataclasses.fields(algo)
        if f.init and f.default is missing and f.default_factory is missing
    }


def test_every_algo_config_row_has_a_case():
    assert set(ALGO_CONFIG_CASES) == set(ALGO_CONFIGS)


@pytest.mark.parametrize("name", list(ALGO_CONFIG_CASES))
def test_every_algo_config_row_round_trips_by_its_name(name):
    """The name builds the row's class (its defaults from the name alone), and a config holding it, in
    the field of its kind, round-trips through a dict and JSON, by that name, in both flavours."""
    algo = ALGO_CONFIG_CASES[name]
    cls = ALGO_CONFIGS[name]
    assert type(algo) is cls and algo.name == name
    field = "pre_quant_opt_config" if isinstance(algo, PreQuantOptConfig) else "algo_config"
    for config in (
        Config(QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int8)), **{field: [algo]}),
        ext.Config(ext.QuantizationConfig(weight=ext.QuantizationSpec()), **{field: [algo]}),
    ):
        data = config.to_dict()
        assert [a["name"] for a in data[field]] == [name]
        assert type(config).from_dict(json.loads(json.dumps(data))) == config
    required = _required(algo)
    alone = Config.from_dict({"global_quant_config": {}, field: [{"name": name, **required}]})
    assert getattr(alone, field) == [cls(**required)]
