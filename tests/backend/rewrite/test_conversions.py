"""Conversions (``rewrite/conversions.py``): a layer that computes what a supported layer computes
becomes that layer before quantization, with its parameters, computing exactly the same."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from quark.torch.extensions.brevitas._backend.rewrite.conversions import CONVERSIONS, conversion_of, convert


def _conv1d() -> nn.Module:
    conv1d = pytest.importorskip("transformers.pytorch_utils", reason="transformers is not installed").Conv1D
    torch.manual_seed(0)
    module = conv1d(6, 4)  # nf=6 outputs, nx=4 inputs; weight stored [in, out]
    with torch.no_grad():
        module.bias.normal_()
    return module


def _conv1d_parameters_as_linear(layer: nn.Module) -> dict[str, torch.Tensor]:
    return {"weight": layer.weight.detach().T, "bias": layer.bias.detach()}


#: (module path, class name) -> (the layer, the supported type it becomes, its parameters as that type's)
CONVERSION_CASES = {
    ("transformers.pytorch_utils", "Conv1D"): (_conv1d, nn.Linear, _conv1d_parameters_as_linear),
}


def test_every_conversion_row_has_a_case():
    assert set(CONVERSION_CASES) == set(CONVERSIONS)


@pytest.mark.parametrize("row", list(CONVERSION_CASES), ids=lambda r: ".".join(r))
def test_every_conversion_row_gives_the_same_function(row):
    make, supported, parameters = CONVERSION_CASES[row]
    layer = make()
    assert conversion_of(layer) is CONVERSIONS[row]
    expected_parameters = parameters(layer)
    model = nn.Sequential(layer, nn.ReLU())
    x = torch.randn(3, 5, 4)
    expected = model(x)
    converted = convert(model)
    assert converted is model and type(model[0]) is supported
    for name, value in expected_parameters.items():
        assert torch.equal(getattr(model[0], name), value), name
    torch.testing.assert_close(model(x), expected)  # the same function, to float32 rounding (another summation order)
