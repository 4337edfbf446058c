"""The inventory of a built model (``_backend/inventory.py``): its quantizers, each with its role and
the Quark spec it was built from, and its modules with what their plans take from upstream: the
subjects the export and target rules are checked on."""

from __future__ import annotations

import brevitas.nn as qnn
import pytest
import torch
from _shared.configs import A8, B32, W8, layer_config
from _shared.models import batches
from _shared.quantize import quantize_with
from brevitas.proxy.parameter_quant import BiasQuantProxyFromInjectorBase, WeightQuantProxyFromInjectorBase
from brevitas.proxy.runtime_quant import ActQuantProxyFromInjectorBase
from torch import nn

from quark.torch.extensions.brevitas._backend.inventory import PROXY_ROLES, modules, quantizers, spec_of
from quark.torch.quantization.config.config import Config, QuantizationConfig
from quark.torch.quantization.config.type import QuantizationMode

#: proxy class -> (the quantizers of that role in ``_quantized()``, the plan role each was built for)
ROLE_CASES = {
    BiasQuantProxyFromInjectorBase: ({"0.bias_quant": "bias"}, "bias"),
    WeightQuantProxyFromInjectorBase: ({"0.weight_quant": "weight"}, "weight"),
    ActQuantProxyFromInjectorBase: (
        {"0.input_quant": "input_tensors", "0.output_quant": "output_tensors"},
        "activation",
    ),
}


def _quantized():
    torch.manual_seed(0)
    config = layer_config(weight=W8, input_tensors=A8, output_tensors=A8, bias=B32)
    return quantize_with(config, nn.Sequential(nn.Linear(12, 4)), batches(2))


def test_every_proxy_role_row_has_a_case():
    assert set(ROLE_CASES) == {cls for cls, _ in PROXY_ROLES}


@pytest.mark.parametrize("cls", list(ROLE_CASES), ids=lambda c: c.__name__)
def test_every_proxy_role_row_lists_its_quantizers_with_their_specs(cls):
    quantizer, qmodel = _quantized()
    expected, role = ROLE_CASES[cls]
    (plan,) = quantizer.plans
    found = {q.name: q for q in quantizers(qmodel) if q.role == dict(PROXY_ROLES)[cls]}
    assert set(found) == set(expected)
    for name, plan_role in expected.items():
        assert found[name].role == role
        assert found[name].spec == plan.specs[plan_role] == spec_of(qmodel.get_submodule(name))


def test_a_quantizer_not_built_from_a_spec_has_none():
    model = nn.Sequential(qnn.QuantIdentity(return_quant_tensor=False), nn.Linear(4, 2))
    ((name, role, spec),) = [(q.name, q.role, q.spec) for q in quantizers(model)]
    assert (name, role, spec) == ("0.act_quant", "activation", None)


def test_disabled_quantizers_are_not_listed():
    """A layer without an output spec has an output proxy with quantization off: not a quantizer."""
    _, qmodel = quantize_with(layer_config(weight=W8), nn.Sequential(nn.Linear(12, 4)))
    assert [(q.name, q.role) for q in quantizers(qmodel)] == [("0.weight_quant", "weight")]


def test_modules_carry_what_their_plan_takes_from_upstream():
    """Graph mode: each layer's input arrives quantized, from the network input's site and the ReLU's."""
    config = Config(QuantizationConfig(weight=W8, input_tensors=A8), quant_mode=QuantizationMode.fx_graph_mode)
    torch.manual_seed(0)
    quantizer, qmodel = quantize_with(config, nn.Sequential(nn.Linear(12, 8), nn.ReLU(), nn.Linear(8, 4)), batches(2))
    by_name = {m.name: m for m in modules(qmodel, quantizer.plans)}
    assert {p.name: p.upstream for p in quantizer.plans if p.upstream} == {"0": {"input_tensors": "input"}, "2": {"input_tensors": "1"}}
    assert by_name["0"].upstream == by_name["2"].upstream == frozenset({"input_tensors"})
    assert by_name[""].upstream == frozenset()  # the model itself: no plan
    assert str(by_name["2"]) == "module '2' (QuantLinear)"
