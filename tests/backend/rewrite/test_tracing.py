"""Tracing for graph mode (``rewrite/tracing.py``): the functional calls of ``FUNCTIONAL_MODULES``
and the tensor methods of ``METHOD_ACTIVATIONS`` become modules, one per call, taking the call's
arguments, so that each can get a quantizer; the traced model computes exactly what the model did."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from quark.torch.extensions.brevitas._backend.rewrite.tracing import (
    FUNCTIONAL_MODULES,
    METHOD_ACTIVATIONS,
    as_modules,
    trace,
)

#: function -> (the call as the model writes it, the module's attributes it must carry)
FUNCTIONAL_CASES = {
    F.relu: (lambda x: F.relu(x), {}),
    F.relu_: (lambda x: F.relu_(x), {}),
    torch.relu: (lambda x: torch.relu(x), {}),
    torch.relu_: (lambda x: torch.relu_(x), {}),
    F.relu6: (lambda x: F.relu6(x), {}),
    F.hardtanh: (lambda x: F.hardtanh(x, -0.5, 0.75), {"min_val": -0.5, "max_val": 0.75}),
    F.leaky_relu: (lambda x: F.leaky_relu(x, negative_slope=0.3), {"negative_slope": 0.3}),
    F.gelu: (lambda x: F.gelu(x, approximate="tanh"), {"approximate": "tanh"}),
    F.silu: (lambda x: F.silu(x), {}),
    F.hardswish: (lambda x: F.hardswish(x), {}),
    F.hardsigmoid: (lambda x: F.hardsigmoid(x), {}),
    F.mish: (lambda x: F.mish(x), {}),
    F.elu: (lambda x: F.elu(x, alpha=0.5), {"alpha": 0.5}),
    F.sigmoid: (lambda x: F.sigmoid(x), {}),
    torch.sigmoid: (lambda x: torch.sigmoid(x), {}),
    F.tanh: (lambda x: F.tanh(x), {}),
    torch.tanh: (lambda x: torch.tanh(x), {}),
    F.avg_pool2d: (lambda x: F.avg_pool2d(x, 2, stride=1, padding=1), {"kernel_size": 2, "stride": 1, "padding": 1}),
    F.adaptive_avg_pool2d: (lambda x: F.adaptive_avg_pool2d(x, (2, 1)), {"output_size": (2, 1)}),
    F.softmax: (lambda x: F.softmax(x, dim=1), {"dim": 1}),
    torch.softmax: (lambda x: torch.softmax(x, -1), {"dim": -1}),
}


class _Calls(nn.Module):
    """A convolution, then the call; the call is traced as a function, not a module."""

    def __init__(self, call):
        super().__init__()
        self.conv, self.call = nn.Conv2d(3, 4, 3, padding=1), call

    def forward(self, x):
        return self.call(self.conv(x))


def test_every_functional_row_has_a_case():
    assert set(FUNCTIONAL_CASES) == set(FUNCTIONAL_MODULES)


@pytest.mark.parametrize("function", list(FUNCTIONAL_CASES), ids=lambda f: f"{f.__module__}.{f.__name__}")
def test_every_functional_row_becomes_its_module_with_the_call_arguments(function):
    call, attributes = FUNCTIONAL_CASES[function]
    torch.manual_seed(0)
    model = _Calls(call).eval()
    traced = as_modules(trace(model))
    cls = FUNCTIONAL_MODULES[function][0]
    made = [m for name, m in traced.named_modules() if type(m) is cls and name != "conv"]
    assert len(made) == 1, [type(m).__name__ for m in traced.modules()]
    assert {k: getattr(made[0], k) for k in attributes} == attributes
    assert not any(n.op == "call_function" and n.target is function for n in traced.graph.nodes)
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(traced(x), model(x), atol=0, rtol=0)


#: tensor method -> its call as the model writes it
METHOD_CASES = {
    "relu": lambda x: x.relu(),
    "relu_": lambda x: x.relu_(),
    "sigmoid": lambda x: x.sigmoid(),
    "tanh": lambda x: x.tanh(),
}


def test_every_method_row_has_a_case():
    assert set(METHOD_CASES) == set(METHOD_ACTIVATIONS)


@pytest.mark.parametrize("method", list(METHOD_CASES))
def test_every_method_row_becomes_its_module(method):
    torch.manual_seed(0)
    model = _Calls(METHOD_CASES[method]).eval()
    traced = as_modules(trace(model))
    made = [m for name, m in traced.named_modules() if type(m) is METHOD_ACTIVATIONS[method]]
    assert len(made) == 1
    assert not any(n.op == "call_method" and n.target == method for n in traced.graph.nodes)
    x = torch.randn(2, 3, 5, 5)
    torch.testing.assert_close(traced(x), model(x), atol=0, rtol=0)
