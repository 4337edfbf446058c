"""The layer rules (``rules.layers.LAYER_RULES``): what a layer cannot honour, every problem of every
layer reported at once, a reason per row, the table embedded in docs/design.md.
"""

from __future__ import annotations

import pytest
import torch
from _shared import REPO
from _shared.configs import INT8
from _shared.models import batches, mlp
from _shared.quantize import assert_unchanged, snapshot
from torch import nn

from quark.torch.extensions.brevitas._backend.rules import layers as rules
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import A2QSpec, Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType
from quark.torch.quantization.plan import module_sites


def test_rule_problems_of_all_layers_are_reported_together():
    config = Config(
        QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=5),
            bias=QuantizationSpec(dtype=Dtype.int32),
        )
    )
    with pytest.raises(ValueError) as caught:
        ModelQuantizer(config).quantize_model(mlp((8, 16, 4), seed=0), progress=False)
    message = str(caught.value)
    assert message.startswith("the config cannot be applied to this model:")
    for line in (
        "module '0' (Linear): bias with scale = input scale x weight scale needs input_tensors and weight",
        "module '0' (Linear): weight group_size=5 does not divide axis 1 of weight (shape (16, 8))",
        "module '2' (Linear): weight group_size=5 does not divide axis 1 of weight (shape (4, 16))",
        "module '2' (Linear): bias with scale = input scale x weight scale needs input_tensors and weight",
    ):
        assert line in message


def test_rules_leave_the_plan_alone():
    """A bias spec for a layer without a bias is pruned by the plan (the site has no bias role)."""
    model = nn.Sequential(nn.Linear(8, 4, bias=False))
    config = Config(QuantizationConfig(weight=INT8, input_tensors=INT8, bias=QuantizationSpec(dtype=Dtype.int32)))
    quantizer = ModelQuantizer(config)
    quantizer.quantize_model(model, batches(2, (4, 8)), progress=False)
    assert quantizer.plans[0].specs["bias"] is None
    assert module_sites(model, (nn.Linear,))[0].roles == ("input_tensors", "output_tensors", "weight")


def test_every_rule_has_a_reason_and_a_row_in_the_design_doc():

    doc = (REPO / "docs" / "design.md").read_text()
    assert all(rule.refuses and rule.reason for rule in rules.LAYER_RULES)
    assert rules.markdown() in doc, "docs/design.md embeds rules.markdown(); paste it anew"


_B32 = QuantizationSpec(dtype=Dtype.int32)  # scale = input scale x weight scale


def _a2q(bits: int = 12, zero_centered: bool = True) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=Dtype.int4, qscheme=QSchemeType.per_channel, ch_axis=0, qat_spec=A2QSpec(bits, zero_centered=zero_centered)
    )

#: refused -> (the layer config, the layer, its input shape, the message of its problem)
RULE_CASES = {
    "a bias scaled by input x weight scale without both quantized": (
        QuantizationConfig(weight=INT8, bias=_B32),
        nn.Linear(8, 4),
        (2, 8),
        r"module '0' \(Linear\): bias with scale = input scale x weight scale needs input_tensors and weight quantized too",
    ),
    "a bias scaled by input x weight scale with float, cast or block operands": (
        QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.fp8_e4m3), input_tensors=INT8, bias=_B32),
        nn.Linear(8, 4),
        (2, 8),
        r"a bias scaled by input scale x weight scale needs integer weight, got a float format",
    ),
    "a bias scaled by input x weight scale with a dynamic input": (
        QuantizationConfig(weight=INT8, input_tensors=QuantizationSpec(dtype=Dtype.int8, is_dynamic=True), bias=_B32),
        nn.Linear(8, 4),
        (2, 8),
        r"a bias scaled by the input scale needs a static input_tensors spec, got is_dynamic=True",
    ),
    "a pof2 bias scale with non-pof2 input or weight scales": (
        QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2),
            input_tensors=INT8,
            bias=QuantizationSpec(dtype=Dtype.int32, scale_type=ScaleType.pof2),
        ),
        nn.Linear(8, 4),
        (2, 8),
        r"bias scale_type=pof2 needs pof2 input_tensors scales, got input_tensors scale_type=float",
    ),
    "per_channel weight scales off the output-channel axis with a quantized input": (
        QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=1), input_tensors=INT8),
        nn.Conv2d(3, 4, 3),
        (2, 3, 6, 6),
        r"per_channel weight scales along axis 1 cannot combine with a quantized input; allowed: ch_axis=0",
    ),
    "a bias scaled by input x weight scale with per_group (or off-axis per_channel) weights": (
        QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=4),
            input_tensors=INT8,
            bias=_B32,
        ),
        nn.Linear(8, 4),
        (2, 8),
        r"needs one weight scale per output channel, got weight qscheme=per_group ch_axis=1",
    ),
    "a weight ch_axis out of range": (
        QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=2)),
        nn.Linear(8, 4),
        (2, 8),
        r"weight ch_axis=2 is out of range for weight of shape \(4, 8\)",
    ),
    "a per_group weight whose group_size does not divide its axis": (
        QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=3)),
        nn.Linear(8, 4),
        (2, 8),
        r"weight group_size=3 does not divide axis 1 of weight \(shape \(4, 8\)\)",
    ),
    "MX / shared-exponent activations whose channel count is not a multiple of the block": (
        QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.int8, is_dynamic=True)),
        nn.Linear(24, 4),
        (2, 24),
        r"input_tensors mx int8 blocks of 32 need the channel count to be a multiple of 32, got 24",
    ),
    "MX / shared-exponent activations blocked along another axis than the layer's channels": (
        QuantizationConfig(
            input_tensors=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.int8, is_dynamic=True, ch_axis=0)
        ),
        nn.Linear(32, 4),
        (32, 32),
        r"input_tensors mx int8 blocks along ch_axis=0; allowed: blocks along the layer.s channels, ch_axis=-1 \(or 1, the features of a 2-D tensor\) for a Linear",
    ),
    "accumulator-aware weights (A2QSpec) without a quantized integer input": (
        QuantizationConfig(weight=_a2q()),
        nn.Linear(8, 4),
        (2, 8),
        (
            r"module '0' \(Linear\): weight qat_spec=A2QSpec \(accumulator 12 bits\) with a float input; allowed: an "
            r"integer input_tensors spec for this layer"
        ),
    ),
    "accumulator-aware weights (A2QSpec) on a layer other than Linear or Conv2d": (
        QuantizationConfig(weight=_a2q(), input_tensors=QuantizationSpec(dtype=Dtype.uint4)),
        nn.Conv1d(3, 4, 3),
        (2, 3, 8),
        r"module '0' \(Conv1d\): weight qat_spec=A2QSpec on a Conv1d; allowed: nn.Linear, nn.Conv2d",
    ),
    "an accumulator-aware weight whose accumulator is too narrow for any nonzero weight": (
        QuantizationConfig(weight=_a2q(8, zero_centered=False), input_tensors=QuantizationSpec(dtype=Dtype.uint8)),
        nn.Linear(8, 4),
        (2, 8),
        (
            r"A2QSpec\(accumulator_bit_width=8, zero_centered=False\) with uint8 inputs bounds \|\|q\|\|_1 per output "
            r"channel by 0.496: every weight rounds to 0; allowed: accumulator_bit_width >= 10 for uint8 inputs"
        ),
    ),
}


def test_every_layer_rule_row_has_a_case():
    assert set(RULE_CASES) == {rule.refuses for rule in rules.LAYER_RULES}


@pytest.mark.parametrize("row", list(RULE_CASES))
def test_every_layer_rule_refuses_its_case_naming_the_layer_and_leaves_the_model_alone(row):
    """Each row's case is refused with that row's problem alone, before the model is touched; without
    the offending spec the same layer quantizes."""
    layer_config, layer, shape, message = RULE_CASES[row]
    (rule,) = [r for r in rules.LAYER_RULES if r.refuses == row]
    model = nn.Sequential(layer)
    before = snapshot(model)
    with pytest.raises(ValueError, match=message) as caught:
        ModelQuantizer(Config(layer_config)).quantize_model(model, [torch.randn(shape)], progress=False, inplace=True)
    problems = str(caught.value).splitlines()[1:]
    assert len(problems) == 1 and f"({rule.reason})" in problems[0], problems
    assert_unchanged(before, model)
