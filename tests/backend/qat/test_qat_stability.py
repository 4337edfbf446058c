"""Signed quantizers on non-negative inputs: calibration names them, and following its advice steadies QAT.

``benchmarks/qat_stability.py`` traced the swinging QAT runs of issue 9 (TQT, batch norm kept, Adam
1e-3) to this above all: a signed b-bit grid on an image in [0, 1] or a ReLU output keeps only its
2^(b-1) non-negative levels. Thresholds were not the cause (their power of two rarely changed, and
runs with frozen thresholds were identical), nor were batch-norm statistics (frozen or
re-estimated statistics did not steady the runs).
"""

from __future__ import annotations

import copy
import logging
import re

import pytest
import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import config as ext
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth

CALIBRATE_LOGGER = "quark.torch.extensions.brevitas._backend.calibrate"


def _tqt(dtype: Dtype) -> QuantizationSpec:
    """TQT with the batch norm kept a float layer (what issue 9 measured; folding it during QAT, the
    default since, steadies signed inputs too: ``tests/backend/qat/test_batch_norm_folding.py``)."""
    qat = TQTSpec(TQTThresholdInitMeth._3SD, fold_batch_norm=False)
    return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=qat)


def _config(act: Dtype, weight: Dtype = Dtype.int4) -> Config:
    return Config(global_quant_config=QuantizationConfig(weight=_tqt(weight), input_tensors=_tqt(act)))


def _net() -> nn.Module:
    """Inputs of 0 (image in [0, 1]) and 2 (after ReLU) are non-negative; of 5 (a conv's output)
    and 7 (after Tanh) are not."""
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(1, 4, 3),
        nn.ReLU(),
        nn.Conv2d(4, 4, 3),
        nn.Flatten(),
        nn.Identity(),
        nn.Linear(4 * 4 * 4, 8),
        nn.Tanh(),
        nn.Linear(8, 3),
    ).eval()


def _images(n: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.rand(8, 1, 8, 8, generator=g) for _ in range(n)]


def _warnings(caplog) -> list[str]:
    return [
        r.getMessage() for r in caplog.records if r.name == CALIBRATE_LOGGER and r.levelno == logging.WARNING
    ]


def test_signed_inputs_that_never_go_negative_are_named_with_the_unsigned_dtype(caplog):
    with caplog.at_level(logging.WARNING, logger=CALIBRATE_LOGGER):
        ModelQuantizer(_config(Dtype.int4)).quantize_model(_net(), _images(), progress=False)
    (message,) = _warnings(caplog)
    named = dict(re.findall(r"(\d+)\.input_quant: int4, min [^ ]+ -> (Dtype\.\w+)", message))
    assert named == {"0": "Dtype.uint4", "2": "Dtype.uint4"}


@pytest.mark.parametrize(
    "config",
    [
        pytest.param(lambda: _config(Dtype.uint4), id="unsigned"),
        pytest.param(
            lambda: Config(
                global_quant_config=QuantizationConfig(
                    input_tensors=QuantizationSpec(dtype=Dtype.int8, symmetric=False)
                )
            ),
            id="asymmetric",
        ),
    ],
)
def test_grids_that_fit_non_negative_inputs_are_not_named(caplog, config):
    with caplog.at_level(logging.WARNING, logger=CALIBRATE_LOGGER):
        ModelQuantizer(config()).quantize_model(_net(), _images(), progress=False)
    assert _warnings(caplog) == []


def test_from_8_bits_the_unused_sign_is_info_not_a_warning(caplog):
    """The AMD IPU (XINT8) requires signed int8 activations: its users get no warning they cannot act on."""
    with caplog.at_level(logging.INFO, logger=CALIBRATE_LOGGER):
        ModelQuantizer(_config(Dtype.int8)).quantize_model(_net(), _images(), progress=False)
    assert _warnings(caplog) == []
    infos = [
        r.getMessage()
        for r in caplog.records
        if r.name == CALIBRATE_LOGGER and "half of their grid" in r.getMessage()
    ]
    assert len(infos) == 1 and infos[0].count("-> Dtype.uint8") == 2


def test_a_width_without_unsigned_dtype_gets_the_extension_advice(caplog):
    spec = ext.QuantizationSpec(bit_width=5)
    config = ext.Config(global_quant_config=ext.QuantizationConfig(weight=spec, input_tensors=spec))
    with caplog.at_level(logging.WARNING, logger=CALIBRATE_LOGGER):
        ModelQuantizer(config).quantize_model(_net(), _images(), progress=False)
    (message,) = _warnings(caplog)
    assert re.findall(r"(\d+)\.input_quant: int5, min [^ ]+ -> symmetric=False", message) == ["0", "2"]


QAT_EPOCHS = 4
STEADY_FROM = 2  # epochs 2..4 must all hold the bound


def _qat_accuracies(model: nn.Module, data: digits.DigitsData, config: Config) -> list[float]:
    """``digits.train``'s loop (Adam 1e-3, seed 0), with the held-out accuracy after each epoch."""
    q = ModelQuantizer(config).quantize_model(
        copy.deepcopy(model), data.loader("train", batch_size=64), progress=False
    )
    torch.manual_seed(0)
    optimizer = torch.optim.Adam(q.parameters(), lr=1e-3)
    accuracies = []
    for _ in range(QAT_EPOCHS):
        q.train()
        for x, y in data.loader("train", shuffle=True, seed=0):
            optimizer.zero_grad()
            nn.functional.cross_entropy(q(x), y).backward()
            optimizer.step()
        accuracies.append(digits.accuracy(q, data))
    return accuracies


@pytest.mark.slow
def test_unsigned_inputs_as_advised_hold_w2a2_qat_steady(caplog):
    """W2A2 TQT, batch norm kept (issue 9's recipe at 2 bits), seed 0, one thread.

    Measured (float CNN trained 8 epochs, then 4 QAT epochs): signed int2 inputs 11.1, 15.9, 41.2,
    30.1 %; unsigned 83.8, 91.4, 92.5, 84.7 %. On seeds 1-4 the lowest of epochs 2-4 was 67.1, 81.9,
    75.2, 24.8 % signed and 86.9, 89.7, 89.1, 76.0 % unsigned. Asserted: unsigned >= 80 % from
    epoch 2 on, and signed below that (the test is not vacuous).
    """
    model, data = digits.trained_cnn(seed=0, epochs=8)
    with caplog.at_level(logging.WARNING, logger=CALIBRATE_LOGGER):
        signed = _qat_accuracies(model, data, _config(Dtype.int2, weight=Dtype.int2))
    (message,) = _warnings(caplog)
    assert message.count("-> Dtype.uint2") == 4  # every layer input: the image and three ReLU outputs
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger=CALIBRATE_LOGGER):
        unsigned = _qat_accuracies(model, data, _config(Dtype.uint2, weight=Dtype.int2))
    assert _warnings(caplog) == []
    print(f"W2A2 per-epoch accuracy: signed {signed}, unsigned {unsigned}")
    assert min(unsigned[STEADY_FROM - 1 :]) >= 80.0
    assert min(signed[STEADY_FROM - 1 :]) < 80.0
