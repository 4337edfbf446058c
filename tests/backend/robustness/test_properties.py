"""Point 4 of issue 11: property-based tests (Hypothesis) over the config space and over tensors (quantizing).

- every config the dataclasses accept either quantizes a small model (finite outputs of the right
  shape) or is refused *before the model is rewritten* with a ``ValueError`` / ``TypeError`` /
  ``NotImplementedError`` naming a field, raised by this package (never from inside Brevitas),
  and the user's model is unchanged either way;
- zeros, constants, huge, tiny and subnormal tensors never give a NaN or zero scale or a non-finite
  output in the quantizers.

Construction, round trips and the observers' ranges: ``tests/config/robustness/test_properties.py``.
Examples are derandomized (``_shared/strategies.py``) and bounded per test (``EXAMPLES``) to keep the suite fast;
``HYPOTHESIS_PROFILE=explore`` draws ten times as many, fresh.
"""

from __future__ import annotations

import os
import re
import traceback

import brevitas
import pytest
import torch
from _shared.quantize import assert_unchanged, snapshot
from _shared.strategies import (
    NAMES_A_FIELD,
    WEIGHT_MAGNITUDES,
    examples,
    extension_specs,
    hard_tensors,
    layer_configs,
    main_specs,
    optional,
)
from hypothesis import given, note
from hypothesis import strategies as st
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas.api import ModelQuantizer, TargetCheckError
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.observer import (
    OBSERVERS,
)

pytestmark = pytest.mark.slow  # Hypothesis: hundreds of quantized models, ~15 s


# -- quantize or refuse before the model is touched ---------------------------------------------


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
        # a target's rules read the calibrated quantizers: they refuse on the quantized copy
        assert not quantizer.rewriter.rewritten or isinstance(error, TargetCheckError), f"refused after the model was rewritten: {error}"
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


# -- tensors that break statistics ---------------------------------------------------------------


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
