"""Point 5 of issue 11: under load (exports): a quantized model exports under ``torch.inference_mode`` and
``torch.no_grad``."""

from __future__ import annotations

import pytest
import torch
from _shared.configs import W8A8_IO
from _shared.models import batches, mlp
from _shared.quantize import quantize

from quark.torch.extensions.brevitas.api import ModelExporter

GRAD_MODES = {"inference_mode": torch.inference_mode, "no_grad": torch.no_grad}


@pytest.mark.parametrize("mode", GRAD_MODES)
def test_a_quantized_model_runs_and_exports_under_a_grad_mode(mode, onnx_path):
    qmodel = quantize(W8A8_IO, mlp(seed=0), batches(3))
    x = torch.randn(4, 12)
    expected = qmodel(x)
    with GRAD_MODES[mode]():
        assert torch.equal(qmodel(x), expected)
        assert ModelExporter(onnx_path).export_onnx_model(qmodel, x).passed

