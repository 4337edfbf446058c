"""The tables ModelQuantizer is built from: algorithms (with phases), rewriters, rules.

Adding an algorithm or a backend is one registration: none of these tests edits api.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from _shared import REPO
from _shared.configs import INT8
from _shared.models import batches, mlp
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas._backend.rewrite import REWRITERS
from quark.torch.extensions.brevitas._backend.rules import layers as rules
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import (
    AlgoConfig,
    Phase,
    PreQuantOptConfig,
    register_implementation,
)
from quark.torch.quantization.config.algorithms import registry as registry_module
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, QuantizationMode
from quark.torch.quantization.plan import module_sites


@pytest.fixture
def registry(monkeypatch):
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(registry_module, "_REGISTERED", dict(registry_module._REGISTERED))
    return registry_module._REGISTERED


# -- algorithms ---------------------------------------------------------------------------------


@dataclass(eq=True)
class Record(AlgoConfig):
    name: ClassVar[str] = "record"
    tag: str = ""


@dataclass(eq=True)
class RecordBefore(PreQuantOptConfig):
    name: ClassVar[str] = "record_before"


def test_a_registered_algorithm_runs_in_its_phase(registry):
    calls = []

    @register_implementation(Record, Phase.after_calibration, needs_data=True)
    def run(config, model, batches):
        quantized = type(model[0]).__name__
        calls.append((config.tag, quantized, len(list(batches.passes("record")))))
        return model

    @register_implementation(RecordBefore, Phase.before_quantization)
    def run_before(config, model, batches):
        calls.append(("before", type(model[0]).__name__, None))
        return model

    config = Config(
        QuantizationConfig(weight=INT8, input_tensors=INT8), pre_quant_opt_config=RecordBefore(), algo_config=Record("x")
    )
    ModelQuantizer(config).quantize_model(mlp((8, 16, 4), seed=0), batches(2, (4, 8)), progress=False)
    assert calls == [("before", "Linear", None), ("x", "QuantLinear", 2)]  # float model first, then quantized


def test_phase_not_list_decides_when_an_algorithm_runs(registry):
    order = []
    register_implementation(Record, Phase.after_quantization)(lambda c, m, b: order.append("late") or m)
    register_implementation(RecordBefore, Phase.before_quantization)(lambda c, m, b: order.append("early") or m)
    config = Config(QuantizationConfig(weight=INT8), algo_config=[Record(), RecordBefore()])
    ModelQuantizer(config).quantize_model(mlp((8, 16, 4), seed=0), progress=False)
    assert order == ["early", "late"]


def test_an_unregistered_algorithm_is_one_clear_error_before_anything_runs():
    with pytest.raises(NotImplementedError, match=r"Record \(name='record'\) has no implementation in this backend; implemented: \[.*'Preprocess'"):
        ModelQuantizer(Config(QuantizationConfig(weight=INT8), algo_config=[Record()]))


def test_an_algorithm_needing_data_without_data_fails_before_the_model_is_touched(registry):
    register_implementation(Record, Phase.after_calibration, needs_data=True)(lambda c, m, b: m)
    model = mlp((8, 16, 4), seed=0)
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=r"quantize_model: Record needs calibration data; pass calib_loader"):
        ModelQuantizer(Config(QuantizationConfig(weight=INT8), algo_config=[Record()])).quantize_model(model, inplace=True)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_a_user_algorithm_overriding_apply_runs_in_its_base_phase():
    seen = []

    class Halve(algos.AlgoConfig):  # the extension's base, as Quark scripts subclass it
        name = "halve"

        def apply(self, model, calib_loader=None):
            seen.append(type(model[0]).__name__)
            return model

    config = bcfg.Config(bcfg.QuantizationConfig(weight=bcfg.QuantizationSpec()), pre_quant_opt_config=[], algo_config=[Halve()])
    ModelQuantizer(config).quantize_model(mlp((8, 16, 4), seed=0), progress=False)
    assert seen == ["QuantLinear"]  # AlgoConfig: after calibration


@pytest.mark.parametrize("base", [algos.AlgoConfig, algos.PreQuantOptConfig])
def test_the_extension_base_classes_apply_raises_not_implemented(base):
    with pytest.raises(NotImplementedError, match=r"has no implementation in this backend"):
        base().apply(mlp((8, 16, 4), seed=0))


def test_extension_algorithm_apply_runs_the_registered_implementation():
    model = nn.Sequential(nn.Conv2d(1, 4, 3), nn.BatchNorm2d(4), nn.ReLU())
    model.eval()
    x = torch.randn(2, 1, 6, 6)
    out = algos.Preprocess().apply(copy.deepcopy(model))
    assert not any(isinstance(m, nn.BatchNorm2d) for m in out.modules())  # merged
    torch.testing.assert_close(out(x), model(x), rtol=1e-5, atol=1e-5)


# -- rewriters ----------------------------------------------------------------------------------


def test_graph_mode_without_a_rewriter_names_the_available_modes(monkeypatch):
    monkeypatch.delitem(REWRITERS, QuantizationMode.fx_graph_mode, raising=False)
    with pytest.raises(NotImplementedError, match=r"Config\.quant_mode=fx_graph_mode: no rewriter in this backend; available: \['eager_mode'\]"):
        ModelQuantizer(Config(QuantizationConfig(weight=INT8), quant_mode=QuantizationMode.fx_graph_mode))


def test_a_registered_rewriter_is_selected_by_the_config_mode(monkeypatch):
    class OnlyFirstLinear:
        """A no-op-ish backend: offers one site, rewrites nothing, records what it saw."""

        name = "test"
        supported_types = (nn.Linear,)
        seen: ClassVar[list] = []

        def prepare(self, model):
            return model

        def sites(self, model):
            return module_sites(model, self.supported_types)[:1]

        def connect(self, model, plans, sites):
            pass

        def rewrite(self, model, plans, sites):
            self.seen[:] = [(p.name, p.specs["weight"].bit_width) for p in plans]
            return model

    rewriter = OnlyFirstLinear()
    monkeypatch.setitem(REWRITERS, QuantizationMode.fx_graph_mode, rewriter)
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=INT8), quant_mode=QuantizationMode.fx_graph_mode))
    model = quantizer.quantize_model(mlp((8, 16, 4), seed=0), progress=False)
    assert rewriter.seen == [("0", 8)]
    assert [p.name for p in quantizer.plans] == ["0"]
    assert type(model[0]) is nn.Linear  # this backend rewrote nothing


# -- rules --------------------------------------------------------------------------------------


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


# -- the bug: the plan was resolved twice -------------------------------------------------------


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.mark.parametrize("exclude", [["bn"], ["conv", "bn"]])
def test_exclude_naming_a_module_preprocess_merges_away(exclude):
    """Regression: Preprocess merged 'bn' into 'conv', then the second resolve failed with
    "exclude pattern 'bn' matches no module". The plan is resolved once, on the pre-processed
    model; exclude may name any module of the model the user passed."""
    config = Config(
        QuantizationConfig(weight=INT8, input_tensors=INT8), exclude=exclude, pre_quant_opt_config=[algos.Preprocess()]
    )
    quantizer = ModelQuantizer(config)
    qmodel = quantizer.quantize_model(ConvBN(), [torch.randn(2, 1, 6, 6)], progress=False)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in qmodel.modules())
    assert [p.name for p in quantizer.plans] == [n for n in ("conv", "fc") if n not in exclude]


def test_exclude_matching_nothing_anywhere_is_still_an_error():
    config = Config(QuantizationConfig(weight=INT8), exclude=["bnn"], pre_quant_opt_config=[algos.Preprocess()])
    with pytest.raises(ValueError, match=r"exclude pattern 'bnn' matches no module; modules: conv, bn, fc"):
        ModelQuantizer(config).quantize_model(ConvBN(), progress=False)


def test_a_bad_spec_fails_before_preprocess_touches_an_inplace_model():
    model = ConvBN()
    before = copy.deepcopy(model.state_dict())
    bad = QuantizationSpec(dtype=Dtype.fp8_e4m3, symmetric=False)
    config = Config(
        QuantizationConfig(weight=INT8),
        layer_type_quant_config={"Linear": QuantizationConfig(weight=bad)},
        pre_quant_opt_config=[algos.Preprocess()],
    )
    with pytest.raises(ValueError, match=r"layer_type_quant_config\['Linear'\]\.weight: symmetric=False is not supported"):
        ModelQuantizer(config).quantize_model(model, inplace=True, progress=False)
    assert isinstance(model.bn, nn.BatchNorm2d)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
