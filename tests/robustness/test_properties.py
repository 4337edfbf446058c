"""Point 4 of issue 11: property-based tests (Hypothesis) over the config space and over tensors.

- every spec either constructs or is refused with a ``ValueError`` / ``TypeError`` naming a field;
- every config the dataclasses accept either quantizes a small model (finite outputs of the right
  shape) or is refused *before the model is rewritten* with a ``ValueError`` / ``TypeError`` /
  ``NotImplementedError`` naming a field, raised by this package (never from inside Brevitas),
  and the user's model is unchanged either way;
- ``to_dict`` / ``from_dict`` (and JSON / YAML text) round-trip every accepted config, both flavours;
- zeros, constants, huge, tiny and subnormal tensors never give a NaN, infinite or zero range in
  the observers, nor a NaN or zero scale or a non-finite output in the quantizers.

Examples are derandomized (conftest.py) and bounded per test (``EXAMPLES``) to keep the suite fast;
``HYPOTHESIS_PROFILE=explore`` draws ten times as many, fresh.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import traceback

import brevitas
import pytest
import torch
import yaml
from hypothesis import given, note, settings
from hypothesis import strategies as st
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas.api import ModelQuantizer
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
    TQT3SDObserver,
    TQTJeffreysObserver,
)
from quark.torch.quantization.observer.selectors import _SelectorObserver
from robustness.helpers import assert_unchanged, snapshot

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


# -- strategies --------------------------------------------------------------------------------------

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


# -- 1. construction --------------------------------------------------------------------------------

#: what a refusal must name: a field of a spec, a layer config or a config
FIELDS = sorted(
    {f.name for cls in (QuantizationSpec, bcfg.QuantizationSpec, QuantizationConfig, Config, bcfg.Config, TQTSpec) for f in dataclasses.fields(cls)}
    | {"bit width", "module", "layer_type_quant_config", "layer_quant_config"}
)
NAMES_A_FIELD = re.compile(r"\b(" + "|".join(map(re.escape, FIELDS)) + r")\b")


@examples("construct")
@given(ANY_SPEC_KWARGS)
def test_every_spec_constructs_or_is_refused_naming_a_field(kwargs):
    try:
        spec = QuantizationSpec(**kwargs)
    except (ValueError, TypeError) as error:
        assert NAMES_A_FIELD.search(str(error)), str(error)
        assert "QuantizationSpec" in str(error) or "qat_spec" in str(error), str(error)
    else:
        assert spec.dtype in Dtype


# -- 2. quantize or refuse before the model is touched ---------------------------------------------


class Small(nn.Module):
    """A 1x1 convolution and a linear layer of 32 channels (a multiple of every block size)."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.conv, self.fc = nn.Conv2d(32, 32, 1), nn.Linear(32, 32)

    def forward(self, x):
        return self.fc(torch.relu(self.conv(x)).mean((2, 3)))


CALIBRATION = [torch.randn(2, 32, 2, 2, generator=torch.Generator().manual_seed(i)) for i in range(2)]
EXAMPLE = torch.randn(3, 32, 2, 2, generator=torch.Generator().manual_seed(9))


BREVITAS = os.path.dirname(brevitas.__file__) + os.sep


class RecordingRewriter:
    """The config's rewriter, recording whether it rewrote the model."""

    def __init__(self, inner):
        self.inner, self.rewritten = inner, False

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def rewrite(self, *args):
        self.rewritten = True
        return self.inner.rewrite(*args)


OUTCOMES: dict[str, int] = {}


def quantizes_or_refuses_cleanly(config) -> str:
    """The property of point 4 for one config; returns 'quantized' or 'refused'."""
    model = Small()
    before = snapshot(model)
    try:
        quantizer = ModelQuantizer(config)
    except NotImplementedError as error:  # an algorithm or mode without an implementation
        assert re.search(r"has no implementation|no rewriter", str(error)), str(error)
        return "refused"
    quantizer.rewriter = RecordingRewriter(quantizer.rewriter)
    try:
        qmodel = quantizer.quantize_model(model, CALIBRATION, progress=False)
    except (ValueError, TypeError, NotImplementedError) as error:
        note(f"refused: {type(error).__name__}: {error}")
        frames = traceback.extract_tb(error.__traceback__)
        assert not frames[-1].filename.startswith(BREVITAS), f"raised inside Brevitas: {frames[-1]}"
        assert not quantizer.rewriter.rewritten, f"refused after the model was rewritten: {error}"
        assert NAMES_A_FIELD.search(str(error)), str(error)
        assert_unchanged(before, model)
        return "refused"
    with torch.no_grad():
        out = qmodel(EXAMPLE)
    assert out.shape == (3, 32) and bool(torch.isfinite(out).all())
    assert_unchanged(before, model)
    return "quantized"


def _count(flavour: str, outcome: str) -> None:
    OUTCOMES[f"{flavour} {outcome}"] = OUTCOMES.get(f"{flavour} {outcome}", 0) + 1


@pytest.mark.filterwarnings("ignore::UserWarning")  # configs that quantize nothing warn (tested elsewhere)
@examples("quantize_main")
@given(
    layer_configs(QuantizationConfig, main_specs),
    optional(layer_configs(QuantizationConfig, main_specs)),
    st.lists(st.sampled_from(["conv", "fc", "c*"]), max_size=1),
)
def test_every_main_config_quantizes_or_is_refused_before_the_model_is_touched(layer, linear, exclude):
    config = Config(layer, layer_type_quant_config={"Linear": linear} if linear else {}, exclude=exclude)
    _count("main", quantizes_or_refuses_cleanly(config))


@pytest.mark.filterwarnings("ignore::UserWarning")
@examples("quantize_extension")
@given(layer_configs(bcfg.QuantizationConfig, extension_specs), st.booleans())
def test_every_extension_config_quantizes_or_is_refused_before_the_model_is_touched(layer, preprocess):
    config = bcfg.Config(layer) if preprocess else bcfg.Config(layer, pre_quant_opt_config=[])
    _count("extension", quantizes_or_refuses_cleanly(config))


def test_the_quantize_properties_saw_both_outcomes():
    """Not vacuous: both properties quantized some configs and refused others (runs after them)."""
    if not OUTCOMES:
        pytest.skip("run with the property tests above")
    assert all(OUTCOMES.get(f"{f} {o}", 0) > 0 for f in ("main", "extension") for o in ("quantized", "refused")), OUTCOMES


# -- 3. round trips ----------------------------------------------------------------------------------


def _round_trips(config) -> None:
    cls = type(config)
    data = config.to_dict()
    again = cls.from_dict(data)
    assert again.to_dict() == data
    names_only = all(isinstance(k, str) for k in getattr(config, "layer_type_quant_config", {}))
    if names_only:  # layer types given as classes serialise by class name
        assert again == config
    assert cls.from_dict(json.loads(json.dumps(data))).to_dict() == data
    assert cls.from_dict(yaml.safe_load(yaml.safe_dump(data, sort_keys=False))).to_dict() == data


@examples("round_trip_main")
@given(main_configs())
def test_every_main_config_round_trips(config):
    _round_trips(config)


@examples("round_trip_extension")
@given(extension_configs())
def test_every_extension_config_round_trips(config):
    _round_trips(config)


# -- 4. tensors that break statistics ---------------------------------------------------------------

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


GRIDS = st.sampled_from([(-128, 127), (0, 255), (-8, 7), (0, 15), (-2, 1), (-32768, 32767), (0, 65535)])
#: the observers that accumulate statistics (Quark's selector names, e.g. PerBlockMXObserver, never observe)
ALL_OBSERVERS = [o for o in OBSERVER_CLASSES if not issubclass(o, _SelectorObserver)] + [TQT3SDObserver, TQTJeffreysObserver]


@examples("observers")
@given(st.sampled_from(ALL_OBSERVERS), st.booleans(), GRIDS, st.lists(hard_tensors(), min_size=1, max_size=3))
def test_observers_give_finite_ranges_around_zero(observer_cls, symmetric, grid, tensors):
    qmin, qmax = grid
    observer = observer_cls(symmetric=symmetric, qmin=qmin, qmax=qmax, ch_axis=0)
    for t in tensors:
        observer(t)
    lo, hi = observer.calculate_range()
    assert bool(torch.isfinite(lo).all() and torch.isfinite(hi).all()), (lo, hi)
    assert bool((lo <= 0).all() and (hi >= 0).all()), (lo, hi)


def _identity_linear() -> nn.Module:
    layer = nn.Linear(8, 8, bias=False)
    with torch.no_grad():
        layer.weight.copy_(torch.eye(8))
    return nn.Sequential(layer)


ACT_SPECS = st.sampled_from(
    [
        QuantizationSpec(dtype=Dtype.int8),
        QuantizationSpec(dtype=Dtype.uint8, symmetric=False),
        QuantizationSpec(dtype=Dtype.int8, symmetric=False),
        QuantizationSpec(dtype=Dtype.int4, scale_type=ScaleType.pof2),
        QuantizationSpec(dtype=Dtype.int8, observer_cls=OBSERVERS["PerTensorPercentileObserver"]),
        QuantizationSpec(dtype=Dtype.int8, observer_cls=OBSERVERS["PerTensorMSEObserver"], symmetric=False),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._LL_J)),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD)),
        QuantizationSpec(dtype=Dtype.fp8_e4m3),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.float16),
    ]
)


@examples("activation_quantizers")
@given(ACT_SPECS, st.lists(hard_tensors((4, 8)), min_size=1, max_size=2), hard_tensors((4, 8)))
def test_activation_quantizers_calibrated_on_hard_tensors_have_finite_scales_and_outputs(spec, calibration, x):
    qmodel = ModelQuantizer(Config(QuantizationConfig(input_tensors=spec))).quantize_model(_identity_linear(), calibration, progress=False)
    with torch.no_grad():
        out = qmodel(x)
        scale = qmodel[0].input_quant.scale()
    assert bool(torch.isfinite(scale).all() and (scale > 0).all()), scale
    assert bool(torch.isfinite(out).all()), out


WEIGHT_SPECS = st.sampled_from(
    [
        QuantizationSpec(dtype=Dtype.int8),
        QuantizationSpec(dtype=Dtype.int8, symmetric=False),
        QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_channel, ch_axis=0, observer_cls=OBSERVERS["PerChannelMinMaxObserver"]),
        QuantizationSpec(dtype=Dtype.uint4, symmetric=False, qscheme=QSchemeType.per_group, ch_axis=1, group_size=4),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.float16),
        QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.bfloat16, symmetric=False),
        QuantizationSpec(dtype=Dtype.int8, observer_cls=OBSERVERS["PerTensorMSEObserver"]),
        QuantizationSpec(dtype=Dtype.fp8_e4m3),
        QuantizationSpec(dtype=Dtype.fp4, qscheme=QSchemeType.per_channel, ch_axis=0, observer_cls=OBSERVERS["PerChannelMinMaxObserver"]),
        QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp8_e4m3, qscheme=QSchemeType.per_group, ch_axis=1, group_size=32),
        QuantizationSpec(dtype=Dtype.mx6, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16),
    ]
)


@examples("weight_quantizers")
@given(WEIGHT_SPECS, hard_tensors((8, 32), WEIGHT_MAGNITUDES))
def test_weight_quantizers_of_hard_weights_have_finite_scales_and_values(spec, weight):
    layer = nn.Linear(32, 8, bias=False)
    with torch.no_grad():
        layer.weight.copy_(weight)
    qmodel = ModelQuantizer(Config(QuantizationConfig(weight=spec))).quantize_model(nn.Sequential(layer), progress=False)
    with torch.no_grad():
        quantized = qmodel[0].quant_weight()
    assert bool(torch.isfinite(quantized.value).all()), quantized.value
    assert bool(torch.isfinite(quantized.scale).all() and (quantized.scale > 0).all()), quantized.scale
