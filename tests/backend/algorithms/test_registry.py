"""The algorithms' table: each config class has one implementation, registered with its phase; a
registered algorithm runs in its phase, an unregistered one is one clear error before anything runs.

Adding an algorithm is one registration: none of these tests edits api.py.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from _shared.configs import INT8
from _shared.models import batches, mlp
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import (
    AlgoConfig,
    Phase,
    PreQuantOptConfig,
    register_implementation,
)
from quark.torch.quantization.config.algorithms import registry as registry_module
from quark.torch.quantization.config.config import Config, QuantizationConfig


@pytest.fixture
def registry(monkeypatch):
    """Registrations made by a test vanish after it."""
    monkeypatch.setattr(registry_module, "_REGISTERED", dict(registry_module._REGISTERED))
    return registry_module._REGISTERED


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


def test_base_classes_apply_raises_not_implemented():
    with pytest.raises(NotImplementedError, match="has no implementation"):
        algos.AlgoConfig().apply(None)
    with pytest.raises(NotImplementedError, match="has no implementation"):
        algos.PreQuantOptConfig().apply(None)


@pytest.mark.parametrize(
    "algo",
    [
        algos.ActivationEqualization(),
        algos.GPTQ(),
        algos.GPFQ(),
        algos.GPFA2Q(),
        algos.BiasCorrection(),
        algos.CalibrateBatchNorm(),
    ],
)
def test_apply_without_data_raises(algo):
    with pytest.raises(
        ValueError, match=rf"{type(algo).__name__} \({algo.name}\) needs calibration data: pass calib_loader"
    ):
        algo.apply(object())
