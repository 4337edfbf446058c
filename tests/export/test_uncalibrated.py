"""Exports refuse a model quantized without data (AMD Quark's quantize-first flow) until it is
calibrated, naming the quantizers and how to calibrate, and write nothing."""

from __future__ import annotations

import warnings

import pytest
import torch
from _shared.configs import W8A8
from _shared.models import batches, mlp

import quark.torch.extensions.brevitas.api as brevitas_api


@pytest.mark.parametrize("export, name", [("export_onnx_model", "qcdq"), ("export_qonnx_model", "qonnx")])
def test_export_refuses_an_uncalibrated_model(export, name, tmp_path):
    torch.manual_seed(0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", brevitas_api.UncalibratedModelWarning)
        qmodel = brevitas_api.ModelQuantizer(W8A8).quantize_model(mlp(), progress=False)
    x = batches()[0]
    path = tmp_path / "m.onnx"
    with pytest.raises(
        brevitas_api.UncalibratedModelError,
        match=rf"export to {name}: \d+ static activation quantizers? (was|were) never calibrated .*calibrate\(qmodel, calib_loader\)",
    ):
        getattr(brevitas_api.ModelExporter(str(path)), export)(qmodel, x)
    assert not path.exists()
    brevitas_api.calibrate(qmodel, batches(), progress=False)
    getattr(brevitas_api.ModelExporter(str(path)), export)(qmodel, x)  # calibrated: allowed
    assert path.exists()
