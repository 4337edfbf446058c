"""The layer rules (``rules.layers.LAYER_RULES``): what a layer cannot honour, every problem of every
layer reported at once, a reason per row, the table embedded in docs/design.md.
"""

from __future__ import annotations

import pytest
from _shared import REPO
from _shared.configs import INT8
from _shared.models import batches, mlp
from torch import nn

from quark.torch.extensions.brevitas._backend.rules import layers as rules
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType
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
