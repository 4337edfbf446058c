"""The algorithms' table: each config class has one implementation, registered with its phase; a
registered algorithm runs in its phase, an unregistered one is one clear error before anything runs.

Adding an algorithm is one registration: none of these tests edits api.py.
"""

from __future__ import annotations

import copy
import dataclasses
from dataclasses import dataclass
from typing import ClassVar

import pytest
import torch
from _shared import models
from _shared.configs import FROM_SPEC, INT8, W4C, W4G16
from _shared.models import ONE_LAYER, batches, layer_data, mlp, trained_batch_norm
from torch import nn

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas._backend.algorithms import IMPLEMENTATIONS
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import (
    AlgoConfig,
    AWQConfig,
    GPTQConfig,
    Phase,
    PreQuantOptConfig,
    SmoothQuantConfig,
    register_implementation,
)
from quark.torch.quantization.config.algorithms import registry as registry_module
from quark.torch.quantization.config.config import (
    Config,
    QronosConfig,
    QuantizationConfig,
    QuantizationSpec,
    RotationConfig,
)
from quark.torch.quantization.config.type import Dtype, QSchemeType


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
    ModelQuantizer(config).quantize_model(mlp((8, 16, 4), seed=0), batches(2, (4, 8)), progress=False, check_algorithms=False)
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


# -- the table, row by row --------------------------------------------------------------------------


def _bn_cnn() -> nn.Module:
    torch.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 10))
    return trained_batch_norm(model)


def _images():
    return models.image_batches(4)


def _tokens():
    return models.token_batches(4)


def _one_layer():
    torch.manual_seed(0)
    return ONE_LAYER["linear"]().eval()


def _changed_parameters(plain: nn.Module, tuned: nn.Module) -> bool:
    a, b = plain.state_dict(), tuned.state_dict()
    return a.keys() != b.keys() or any(not torch.equal(a[k], b[k]) for k in a)


def _has(module_type: str):
    return lambda plain, tuned: any(type(m).__name__ == module_type for m in tuned.modules())


def _traced(model: nn.Module) -> bool:
    """A GraphModule (torch.fx's, or Brevitas' backport of it, which Preprocess traces with)."""
    return any(cls.__name__ == "GraphModule" for cls in type(model).__mro__)


def _traced_and_equalized(plain: nn.Module, tuned: nn.Module) -> bool:
    return _traced(tuned) and not _traced(plain) and _changed_parameters(plain, tuned)


def _no_batch_norm(plain: nn.Module, tuned: nn.Module) -> bool:
    return any(isinstance(m, nn.BatchNorm2d) for m in plain.modules()) and not any(
        isinstance(m, nn.BatchNorm2d) for m in tuned.modules()
    )


def _running_stats_changed(plain: nn.Module, tuned: nn.Module) -> bool:
    (bn_plain,), (bn_tuned,) = ([m for m in model.modules() if isinstance(m, nn.BatchNorm2d)] for model in (plain, tuned))
    return not torch.equal(bn_plain.running_mean, bn_tuned.running_mean)


#: AMD Quark 0.13's RotationConfig with an online R1 on the BERT blocks' first Linear layers
_BERT_ROTATION = RotationConfig(
    scaling_layers={"middle_layers": [{"target_modules": ["layers.layer_id.attention.query"]}]},
    model_decoder_layers="layers",
    online_r1_rotation=True,
)
W8C = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0)
#: algorithm config class -> (an instance, the model, its data, weight spec, input spec, what it changes
#: compared with the same quantization without it)
IMPLEMENTATION_CASES = {
    algos.Preprocess: (algos.Preprocess(), models.cnn, _images, W8C, INT8, _traced_and_equalized),
    algos.MergeBatchNorm: (algos.MergeBatchNorm(), _bn_cnn, _images, W8C, INT8, _no_batch_norm),
    algos.HadamardRotation: (algos.HadamardRotation(), models.cnn, _images, W8C, INT8, _has("RotatedModule")),
    algos.ActivationEqualization: (algos.ActivationEqualization(), models.cnn, _images, W8C, INT8, _changed_parameters),
    SmoothQuantConfig: (SmoothQuantConfig(alpha=0.5), models.llama, _tokens, W8C, INT8, _changed_parameters),
    AWQConfig: (AWQConfig(**FROM_SPEC), models.llama, _tokens, W4G16, None, _changed_parameters),
    GPTQConfig: (GPTQConfig(**FROM_SPEC, desc_act=False), _one_layer, layer_data, W4G16, None, _changed_parameters),
    algos.GPTQ: (algos.GPTQ(), _one_layer, layer_data, W4C, None, _changed_parameters),
    algos.GPFQ: (algos.GPFQ(), _one_layer, layer_data, W4C, INT8, _changed_parameters),
    algos.GPFA2Q: (algos.GPFA2Q(accumulator_bit_width=14), _one_layer, layer_data, W8C, INT8, _changed_parameters),
    algos.Qronos: (algos.Qronos(), _one_layer, layer_data, W4C, None, _changed_parameters),
    QronosConfig: (QronosConfig(inside_layer_modules=["output"], model_decoder_layers="layers"), models.bert, _tokens, W4G16, None, _changed_parameters),
    RotationConfig: (_BERT_ROTATION, models.bert, _tokens, W8C, INT8, _has("RotatedModule")),
    algos.BiasCorrection: (algos.BiasCorrection(), models.cnn, _images, W4C, INT8, _changed_parameters),
    algos.CalibrateBatchNorm: (algos.CalibrateBatchNorm(), _bn_cnn, _images, W8C, INT8, _running_stats_changed),
}


def test_every_implementation_row_has_a_case():
    assert set(IMPLEMENTATION_CASES) == set(IMPLEMENTATIONS)


@pytest.mark.parametrize("cls", list(IMPLEMENTATION_CASES), ids=lambda c: c.__name__)
def test_every_implementation_row_runs_in_its_phase_and_changes_the_model(registry, cls):
    """The row's implementation runs once, on the float model before quantization or on the
    quantized model after calibration / last, as its phase says; the result differs from the same
    quantization without the algorithm in what the algorithm does."""
    algo, build, data, weight, inputs, changed = IMPLEMENTATION_CASES[cls]
    row = IMPLEMENTATIONS[cls]
    seen = []

    def recording(config, model, batches, **extra):
        assert ("plans" in extra) is row.wants_plans  # the float model's resolved plans, where the row wants them
        seen.append(any(type(m).__name__.startswith("Quant") for m in model.modules()))
        return row.run(config, model, batches, **extra)

    registry[cls] = dataclasses.replace(row, run=recording)
    before = row.phase is Phase.before_quantization
    config = Config(
        QuantizationConfig(weight=weight, input_tensors=inputs),
        pre_quant_opt_config=[algo] if before else [],
        algo_config=[] if before else [algo],
    )
    # without the check against round-to-nearest (one more quantization; tests/backend/algorithms/test_algorithm_check.py)
    tuned = ModelQuantizer(config).quantize_model(build(), data(), progress=False, check_algorithms=False)
    assert seen == [not before]  # once; quantized layers already there unless it runs before quantization
    plain = ModelQuantizer(Config(QuantizationConfig(weight=weight, input_tensors=inputs))).quantize_model(
        build(), data(), progress=False
    )
    assert changed(plain, tuned)
