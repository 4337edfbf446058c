"""AMD Quark's extension flow: ``quantize_model(model)`` without data returns the model (static
activations uncalibrated, one warning naming them), then an algorithm's ``apply(qmodel, loader)``
runs on it. Each such algorithm calibrates the model first, so the result is bit-identical to
quantizing with the same data; freeze refuses a model that was never calibrated."""

from __future__ import annotations

import warnings

import pytest
import torch
from torch import nn

import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.extensions.brevitas.algos import GPFA2Q, GPFQ, GPTQ, BiasCorrection, CalibrateBatchNorm
from quark.torch.extensions.brevitas.qat import freeze, uncalibrated_quantizers

#: the extension tests of AMD Quark that apply an algorithm after quantize_model(model)
QUARK_TESTS = [GPTQ, GPFQ, GPFA2Q, CalibrateBatchNorm, BiasCorrection]


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 6 * 6, 10))


def _loader() -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(4, 3, 8, 8, generator=g), torch.zeros(4)) for _ in range(4)]


#: as the extension's scripts write it: the default Preprocess, 8-bit weights and inputs
CONFIG = brevitas_config.Config(
    global_quant_config=brevitas_config.QuantizationConfig(
        weight=brevitas_config.QuantizationSpec(), input_tensors=brevitas_config.QuantizationSpec()
    )
)


def _quantize_without_data() -> tuple[nn.Module, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        qmodel = brevitas_api.ModelQuantizer(CONFIG).quantize_model(_model(), progress=False)
    return qmodel, [w for w in caught if issubclass(w.category, brevitas_api.UncalibratedModelWarning)]


def test_quantize_without_data_returns_the_model_and_warns_once_naming_the_quantizers():
    qmodel, caught = _quantize_without_data()
    names = uncalibrated_quantizers(qmodel)
    assert len(names) == 2 and len(caught) == 1
    message = str(caught[0].message)
    assert all(name in message for name in names)
    assert "calibrate(qmodel, calib_loader)" in message and "apply(qmodel, calib_loader)" in message


@pytest.mark.parametrize("algo", QUARK_TESTS, ids=lambda c: c.__name__)
def test_algorithm_applied_after_quantize_without_data_calibrates_first(algo):
    loader = _loader()
    late, _ = _quantize_without_data()
    late = algo().apply(late, loader)
    assert uncalibrated_quantizers(late) == []
    early = brevitas_api.ModelQuantizer(CONFIG).quantize_model(_model(), loader, progress=False)
    early = algo().apply(early, loader)
    x = loader[0][0]
    with torch.no_grad():
        assert torch.equal(late.eval()(x), early.eval()(x))  # the same calibration, then the same algorithm


def test_public_calibrate_equals_calibrating_in_quantize_model():
    loader = _loader()
    late, _ = _quantize_without_data()
    assert brevitas_api.calibrate(late, loader, progress=False) is late
    early = brevitas_api.ModelQuantizer(CONFIG).quantize_model(_model(), loader, progress=False)
    with torch.no_grad():
        assert torch.equal(late.eval()(loader[0][0]), early(loader[0][0]))
    assert uncalibrated_quantizers(late) == []


def test_freeze_refuses_an_uncalibrated_model():
    """(exports refuse it too: tests/export/test_uncalibrated.py)"""
    qmodel, _ = _quantize_without_data()
    with pytest.raises(brevitas_api.UncalibratedModelError, match=r"freeze: 2 static activation quantizers were never calibrated .*calibrate\(qmodel, calib_loader\)"):
        freeze(qmodel)
    brevitas_api.calibrate(qmodel, _loader(), progress=False)
    freeze(qmodel)  # calibrated: allowed


def test_a_bad_batch_in_calibrate_names_where_and_changes_nothing():
    qmodel, _ = _quantize_without_data()
    bad = [(torch.full((4, 3, 8, 8), float("nan")), torch.zeros(4))]
    with pytest.raises(ValueError, match=r"calibration, .*holds .*NaN.*the model is as it was"):
        brevitas_api.calibrate(qmodel, bad, progress=False)
    assert len(uncalibrated_quantizers(qmodel)) == 2


def test_weight_only_config_without_data_does_not_warn():
    config = brevitas_config.Config(
        global_quant_config=brevitas_config.QuantizationConfig(weight=brevitas_config.QuantizationSpec())
    )
    with warnings.catch_warnings():
        warnings.simplefilter("error", brevitas_api.UncalibratedModelWarning)
        brevitas_api.ModelQuantizer(config).quantize_model(_model(), progress=False)
