"""quantize_model checks its algorithms against round-to-nearest on the calibration data (issue 22),
and fitted on half of it against the other half: the errors follow their formula, an algorithm that
makes the output worse, or that fits its calibration data and does worse on data it did not see, is
named in a warning."""

from __future__ import annotations

import warnings

import pytest
import torch
from _shared.configs import INT8, U8_ASYM
from torch import nn

from quark.torch.extensions.brevitas.api import AlgorithmWorseWarning, ModelQuantizer
from quark.torch.quantization.config.algorithms import PreQuantOptConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig


class ScaleUp(PreQuantOptConfig):
    """A harmful pre-quantization 'algorithm': multiplies the first layer's weight by 1e3 and divides the
    second layer's by 1e3 (the float function is kept; 8-bit per-tensor activations suffer)."""

    def apply(self, model, calib_loader=None):
        with torch.no_grad():
            model[0].weight[0] *= 1e3
            model[0].bias[0] *= 1e3
            model[2].weight[:, 0] /= 1e3
        return model


class Nothing(PreQuantOptConfig):
    def apply(self, model, calib_loader=None):
        return model


def _model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))


DATA = [torch.randn(8, 8, generator=torch.Generator().manual_seed(i)) for i in range(3)]


def _error(reference, model) -> float:
    with torch.no_grad():
        f = torch.cat([reference(x) for x in DATA]).double()
        q = torch.cat([model(x) for x in DATA]).double()
    return float(((q - f) ** 2).sum() / (f**2).sum())


def test_a_harmful_algorithm_is_named_with_both_errors():
    model = _model()
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM), pre_quant_opt_config=[ScaleUp()]))
    with pytest.warns(AlgorithmWorseWarning, match=r"ScaleUp increased the output error on the calibration data: \S+ without it, \S+ with"):
        qmodel = quantizer.quantize_model(model, DATA, progress=False)
    check = quantizer.algorithm_check
    rtn = ModelQuantizer(Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM))).quantize_model(model, DATA, progress=False)
    assert check.worse and check.error_with == pytest.approx(_error(model, qmodel), rel=1e-9)
    assert check.error_without == pytest.approx(_error(model, rtn), rel=1e-9)
    assert check.error_with > 10 * check.error_without


def test_a_harmless_algorithm_gives_no_warning_and_the_check_can_be_skipped():
    config = Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM), pre_quant_opt_config=[Nothing()])
    quantizer = ModelQuantizer(config)
    with warnings.catch_warnings():
        warnings.simplefilter("error", AlgorithmWorseWarning)
        quantizer.quantize_model(_model(), DATA, progress=False)
    assert quantizer.algorithm_check is not None and quantizer.algorithm_check.error_with == quantizer.algorithm_check.error_without
    quantizer.quantize_model(_model(), DATA, progress=False, check_algorithms=False)
    assert quantizer.algorithm_check is None
    quantizer.quantize_model(_model(), iter(DATA), progress=False)  # a one-shot iterator cannot be read again
    assert quantizer.algorithm_check is None


class WithCache(nn.Module):
    """The MLP's output, then something that is no tensor (as transformers' DynamicCache after the hidden states)."""

    def __init__(self):
        super().__init__()
        self.net = _model()

    def forward(self, x):
        return self.net(x), object()


def test_the_check_reads_the_first_output_only():
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM), pre_quant_opt_config=[Nothing()]))
    qmodel = quantizer.quantize_model(WithCache(), DATA, progress=False)
    check = quantizer.algorithm_check
    assert check.error_with == check.error_without == pytest.approx(_error(lambda x: _model()(x), lambda x: qmodel(x)[0]), rel=1e-9)


def _with_batch_norm() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 4))
    model.train()
    with torch.no_grad():
        for x in DATA:
            model(x)
    return model.eval()


def test_merge_batch_norm_is_structural_kept_on_both_sides():
    """MergeBatchNorm (XINT8 folds batch norm, as the NPU needs) is no accuracy algorithm: alone it
    is not checked (no second quantization, no warning); beside another algorithm the check's
    baseline folds batch norm too, so only the other algorithm is compared."""
    from quark.torch.quantization.config.algorithms import MergeBatchNorm

    layer = QuantizationConfig(weight=INT8, input_tensors=U8_ASYM)
    quantizer = ModelQuantizer(Config(layer, pre_quant_opt_config=[MergeBatchNorm()]))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantizer.quantize_model(_with_batch_norm(), DATA, progress=False)
    assert quantizer.algorithm_check is None

    quantizer = ModelQuantizer(Config(layer, pre_quant_opt_config=[MergeBatchNorm(), Nothing()]))
    qmodel = quantizer.quantize_model(_with_batch_norm(), DATA, progress=False)
    check = quantizer.algorithm_check
    assert check.algorithms == ("Nothing",)
    assert check.error_with == check.error_without == pytest.approx(_error(_with_batch_norm(), qmodel), rel=1e-9)


def test_an_algorithm_that_fits_its_data_too_closely_is_named():
    """GPTQ on 8 samples a batch for 64 inputs: far better than round-to-nearest on the calibration
    data, worse on the half it was not fitted on; the unseen errors follow the formula."""
    from _shared.configs import A8, W4C

    from quark.torch.quantization.config.algorithms import GPTQ

    torch.manual_seed(0)
    wide = nn.Sequential(nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 8))
    data = [torch.randn(4, 64, generator=torch.Generator().manual_seed(i)) for i in range(4)]
    layer = QuantizationConfig(weight=W4C, input_tensors=A8)
    quantizer = ModelQuantizer(Config(layer, algo_config=[GPTQ()]))
    with pytest.warns(
        AlgorithmWorseWarning,
        match=r"GPTQ reduced the output error on the calibration data: \S+ without it, \S+ with; fitted on the first 2 "
        r"calibration batches, it increased it on the other 2: \S+ without, \S+ with; consider more calibration data",
    ):
        quantizer.quantize_model(wide, data, progress=False)
    check = quantizer.algorithm_check
    assert check.error_with < check.error_without and check.unseen_with > check.unseen_without and check.worse
    fitted = {
        "without": ModelQuantizer(Config(layer)).quantize_model(wide, data[:2], progress=False),
        "with": ModelQuantizer(Config(layer, algo_config=[GPTQ()])).quantize_model(wide, data[:2], progress=False, check_algorithms=False),
    }

    def unseen_error(q) -> float:
        with torch.no_grad():
            f = torch.cat([wide(x) for x in data[2:]]).double()
            e = torch.cat([q(x) for x in data[2:]]).double()
        return float(((e - f) ** 2).sum() / (f**2).sum())

    assert check.unseen_without == pytest.approx(unseen_error(fitted["without"]), rel=1e-9)
    assert check.unseen_with == pytest.approx(unseen_error(fitted["with"]), rel=1e-9)
    assert (check.fitted_batches, check.unseen_batches) == (2, 2)


def test_one_batch_is_checked_on_the_calibration_data_only():
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=INT8, input_tensors=U8_ASYM), pre_quant_opt_config=[Nothing()]))
    quantizer.quantize_model(_model(), DATA[:1], progress=False)
    check = quantizer.algorithm_check
    assert check.unseen_with is None and check.unseen_without is None and not check.worse
    assert "fitted on" not in str(check)
