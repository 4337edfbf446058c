"""Hypothesis strategies over specs, configs and tensors (the config layer), and the suite's profile.

Hypothesis runs derandomized (the same examples on every run, no example database), so CI is
reproducible; ``HYPOTHESIS_PROFILE=explore`` draws fresh random examples, ten times as many.
"""

from __future__ import annotations

import dataclasses
import os
import re

import torch
from hypothesis import HealthCheck, Phase, settings
from hypothesis import strategies as st
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.quantization.config import algorithms
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import (
    DeviceType,
    Dtype,
    QSchemeType,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
    ZeroPointType,
)
from quark.torch.quantization.observer import (
    OBSERVERS,
)

# no "explain" phase in CI: it re-runs a failing example's variations for a minute
settings.register_profile(
    "ci",
    derandomize=True,
    database=None,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink],
)
settings.register_profile(
    "explore", derandomize=False, database=None, deadline=None, suppress_health_check=[HealthCheck.too_slow], print_blob=True
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

_SCALE = 10 if os.environ.get("HYPOTHESIS_PROFILE") == "explore" else 1


#: examples per property (bounded: the whole file runs in about a minute on one core)
EXAMPLES = {
    "construct": 300,
    "quantize_main": 150,
    "quantize_extension": 50,
    "round_trip_main": 150,
    "round_trip_extension": 100,
    "observers": 200,
    "activation_quantizers": 40,
    "weight_quantizers": 60,
}


def examples(name: str):
    return settings(max_examples=EXAMPLES[name] * _SCALE)


def optional(strategy):
    return st.none() | strategy


def rarely(strategy):
    """None two times in three: fields left to their defaults, so that more drawn specs apply."""
    return st.one_of(st.none(), st.none(), strategy)


OBSERVER_CLASSES = [OBSERVERS[name] for name in sorted(OBSERVERS)]


TQT_SPECS = st.builds(TQTSpec, optional(st.sampled_from(list(TQTThresholdInitMeth))))


MX_ELEMENTS = [Dtype.int8, Dtype.fp8_e4m3, Dtype.fp8_e5m2, Dtype.fp6_e3m2, Dtype.fp6_e2m3, Dtype.fp4]


#: any keyword arguments of the main QuantizationSpec, most of them refused together
ANY_SPEC_KWARGS = st.fixed_dictionaries(
    {"dtype": st.sampled_from(list(Dtype)) | st.sampled_from(["int8", "int17", "fp8", 8, None])},
    optional={
        "observer_cls": optional(st.sampled_from([*OBSERVER_CLASSES, "PerTensorMinMaxObserver", "os.system", int])),
        "is_dynamic": optional(st.booleans() | st.just(1)),
        "qscheme": optional(st.sampled_from([*QSchemeType, "per_block"])),
        "ch_axis": optional(st.integers(-4, 4) | st.just(1.0)),
        "group_size": optional(st.sampled_from([-1, 0, 1, 2, 3, 32, True])),
        "symmetric": optional(st.booleans()),
        "round_method": optional(st.sampled_from([*RoundType, 5])),
        "scale_type": optional(st.sampled_from(list(ScaleType))),
        "zero_point_type": optional(st.sampled_from(list(ZeroPointType))),
        "qat_spec": optional(TQT_SPECS),
        "mx_element_dtype": optional(st.sampled_from(list(Dtype))),
    },
)


@st.composite
def main_specs(draw, role: str):
    """Main-API specs, drawn so that most construct (fields that go together drawn together) and
    many apply (activations mostly per tensor, biases mostly plain integers)."""
    if role == "bias" and draw(st.booleans()):
        return QuantizationSpec(dtype=draw(st.sampled_from([Dtype.int32, Dtype.int16, Dtype.int8])))
    dtype = draw(st.sampled_from(list(Dtype)))
    kwargs = {"dtype": dtype}
    if dtype is Dtype.mx:
        kwargs["mx_element_dtype"] = draw(st.sampled_from(MX_ELEMENTS))
    likely = [None, QSchemeType.per_tensor] * 2 if role in ("input_tensors", "output_tensors") else [None]
    qscheme = draw(st.sampled_from([*likely, *QSchemeType]))
    kwargs["qscheme"] = qscheme
    if qscheme in (QSchemeType.per_channel, QSchemeType.per_group):
        kwargs["ch_axis"] = draw(st.sampled_from([0, 1, -1] if role in ("weight", "bias") else [1, -1]))
    if qscheme is QSchemeType.per_group:
        kwargs["group_size"] = draw(st.sampled_from([2, 8, 16, 32]))
    kwargs["symmetric"] = draw(rarely(st.booleans()))
    kwargs["is_dynamic"] = draw(rarely(st.booleans()))
    kwargs["round_method"] = draw(rarely(st.sampled_from(list(RoundType))))
    kwargs["scale_type"] = draw(rarely(st.sampled_from(list(ScaleType))))
    kwargs["zero_point_type"] = draw(st.sampled_from(list(ZeroPointType)))
    observers = [o for o in OBSERVER_CLASSES if o.qscheme is (QSchemeType.per_channel if qscheme is QSchemeType.per_group else (qscheme or QSchemeType.per_tensor))]
    kwargs["observer_cls"] = draw(rarely(st.sampled_from(observers))) if observers else None
    if draw(st.integers(0, 4)) == 0:
        kwargs.update(scale_type=ScaleType.pof2, symmetric=True, qscheme=None, is_dynamic=False, qat_spec=draw(TQT_SPECS))
        kwargs.pop("ch_axis", None), kwargs.pop("group_size", None)
    return QuantizationSpec(**kwargs)


@st.composite
def extension_specs(draw):
    quant_type = draw(st.sampled_from(list(bcfg.QuantType)))
    kwargs = {
        "qscheme": draw(st.sampled_from([QSchemeType.per_tensor] * 3 + list(QSchemeType))),
        "symmetric": draw(st.booleans()),
        "scale_type": draw(st.sampled_from(list(ScaleType))),
        "quant_type": quant_type,
        "param_type": draw(st.sampled_from(list(bcfg.ParamType))),
        "bit_width": draw(st.integers(2, 16) | st.integers(0, 40)),
    }
    if quant_type is bcfg.QuantType.float_quant:
        kwargs["exponent_bit_width"] = draw(optional(st.integers(0, 8)))
        kwargs["mantissa_bit_width"] = draw(optional(st.integers(0, 8)))
    if draw(st.integers(0, 4)) == 0:
        kwargs.update(scale_type=ScaleType.pof2, symmetric=True, qscheme=QSchemeType.per_tensor, qat_spec=draw(TQT_SPECS))
    return bcfg.QuantizationSpec(**kwargs)


def accepted(spec_strategy):
    """Specs as drawn, or None where the dataclass refused the combination (checked by test_construct)."""

    @st.composite
    def draw_one(draw):
        try:
            return draw(spec_strategy)
        except (ValueError, TypeError):
            return None

    return draw_one()


def layer_configs(layer_cls, spec):
    roles = ("input_tensors", "output_tensors", "weight", "bias")
    return st.builds(
        layer_cls,
        **{role: optional(accepted(spec(role) if spec is main_specs else spec())) for role in roles},
        target_device=optional(st.sampled_from(list(DeviceType))),
    )


NAMES = st.text(alphabet="abcfl.*0123456789", min_size=1, max_size=6)


def _accepted(cls):
    """``cls(**fields)``, or None when the config refuses the drawn values (naming the class)."""

    def build(**fields):
        try:
            return cls(**fields)
        except (ValueError, TypeError) as error:
            assert cls.__name__ in str(error), error
            return None

    return build


#: algorithm configs the dataclasses accept, with drawn field values
ALGORITHMS = st.sampled_from([algorithms.SmoothQuantConfig, algorithms.AWQConfig, algorithms.GPTQConfig, algorithms.Preprocess]).flatmap(
    lambda cls: st.builds(_accepted(cls), **{f.name: _field_values(f) for f in dataclasses.fields(cls) if _field_values(f) is not None})
).filter(lambda algo: algo is not None)


def _field_values(f: dataclasses.Field):
    kinds = {"float": st.floats(-10, 10, allow_nan=False), "int": st.integers(-5, 200), "bool": st.booleans(),
             "str | None": optional(NAMES), "list[str] | None": optional(st.lists(NAMES, max_size=3))}  # fmt: skip
    return kinds.get(str(f.type))


def main_configs(specs=main_specs):
    layer = layer_configs(QuantizationConfig, specs)
    return st.builds(
        Config,
        global_quant_config=layer,
        layer_type_quant_config=st.dictionaries(st.sampled_from(["Linear", "Conv2d"]), layer, max_size=2).flatmap(
            lambda by_name: st.sampled_from([by_name, {getattr(nn, k): v for k, v in by_name.items()}])  # names or classes
        ),
        layer_quant_config=st.dictionaries(NAMES, layer, max_size=2),
        exclude=st.lists(NAMES, max_size=2),
        algo_config=optional(st.lists(ALGORITHMS, max_size=2)),
        pre_quant_opt_config=st.lists(ALGORITHMS, max_size=2),
    )


def extension_configs():
    layer = layer_configs(bcfg.QuantizationConfig, extension_specs)
    return st.builds(
        bcfg.Config,
        global_quant_config=layer,
        pre_quant_opt_config=st.lists(ALGORITHMS, max_size=2),
        algo_config=st.lists(ALGORITHMS, max_size=2),
    )


#: what a refusal must name: a field of a spec, a layer config or a config
FIELDS = sorted(
    {f.name for cls in (QuantizationSpec, bcfg.QuantizationSpec, QuantizationConfig, Config, bcfg.Config, TQTSpec) for f in dataclasses.fields(cls)}
    | {"bit width", "module", "layer_type_quant_config", "layer_quant_config"}
)


NAMES_A_FIELD = re.compile(r"\b(" + "|".join(map(re.escape, FIELDS)) + r")\b")


TINY, SUBNORMAL, HUGE = torch.finfo(torch.float32).tiny, 1e-45, torch.finfo(torch.float32).max


MAGNITUDES = [0.0, SUBNORMAL, 1e-40, TINY, 1e-20, 1.0, 1e20, 1e37, HUGE]


#: weights stop at 1e38: a weight within 1/256 of float32's largest value overflows when
#: quantized, because Quark's symmetric grid reaches -128 x amax / 127.5 (documented, not handled)
WEIGHT_MAGNITUDES = [*MAGNITUDES[:-1], 1e38]


@st.composite
def hard_tensors(draw, shape=(4, 8), magnitudes=MAGNITUDES):
    """Zeros, constants, one magnitude (huge, tiny, subnormal), mixtures of them, signs mixed or not."""
    kind = draw(st.sampled_from(["zeros", "constant", "one magnitude", "mixed"]))
    n = shape[0] * shape[1]
    if kind == "zeros":
        values = [0.0] * n
    elif kind == "constant":
        values = [draw(st.sampled_from(magnitudes)) * draw(st.sampled_from([1, -1]))] * n
    elif kind == "one magnitude":
        m = draw(st.sampled_from(magnitudes))
        values = [m * draw(st.floats(-1, 1, allow_nan=False, width=32)) for _ in range(n)]
    else:
        values = [draw(st.sampled_from(magnitudes)) * draw(st.sampled_from([1, -1, 0.5])) for _ in range(n)]
    sign = draw(st.sampled_from(["any", "positive", "negative"]))
    t = torch.tensor(values, dtype=torch.float32).reshape(shape)
    return t.abs() if sign == "positive" else -t.abs() if sign == "negative" else t
