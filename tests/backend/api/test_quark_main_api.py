"""AMD Quark's main entry point on the same machinery, as Quark's own scripts call it:
``ModelQuantizer(config, multi_device=False)``, ``quantize_model(model, dataloader)``, ``freeze``; a
``GraphModule`` from ``torch.export`` in ``fx_graph_mode``; an empty calibration list for TQT / LSQ
(Quark's QAT scripts train directly); the trained thresholds as Quark's ``TQTObserver`` /
``LSQObserver`` modules; TQT on a bias; and the refusals, each naming the name, the reason and what
to use."""

from __future__ import annotations

import re
import warnings

import pytest
import torch
from _reference import tqt as tqt_reference
from _shared.quantize import assert_unchanged, snapshot
from torch import nn

from quark.common.utils.import_utils import export_for_training
from quark.torch import ModelQuantizer
from quark.torch.examples.digits import ResidualCNN
from quark.torch.extensions.brevitas.api import ModelQuantizer as ExtensionQuantizer
from quark.torch.extensions.brevitas.qat import uncalibrated_quantizers
from quark.torch.quantization.config.config import QConfig, QLayerConfig, QTensorConfig, TQTSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QSchemeType,
    QuantizationMode,
    RoundType,
    ScaleType,
    TQTThresholdInitMeth,
)
from quark.torch.quantization.observer.lsq_observer import LSQObserver
from quark.torch.quantization.observer.observer import PerTensorMinMaxObserver
from quark.torch.quantization.observer.tqt_observer import TQTObserver
from quark.torch.quantization.quark013_api import QuarkFeatureRefused


def _spec(observer=PerTensorMinMaxObserver, **extra) -> QTensorConfig:
    """An int8 per-tensor spec written as AMD Quark's vision example writes it."""
    fields = {
        "dtype": Dtype.int8,
        "qscheme": QSchemeType.per_tensor,
        "observer_cls": observer,
        "symmetric": True,
        "scale_type": ScaleType.float,
        "round_method": RoundType.half_even,
        "is_dynamic": False,
    }
    return QTensorConfig(**{**fields, **extra})


def _tqt(meth: TQTThresholdInitMeth) -> QTensorConfig:
    return _spec(TQTObserver, qat_spec=TQTSpec(threshold_init_meth=meth))


def _config(weight, act, bias, mode=QuantizationMode.fx_graph_mode) -> QConfig:
    layer = QLayerConfig(weight=weight, input_tensors=act, output_tensors=act, bias=bias)
    return QConfig(global_quant_config=layer, quant_mode=mode)


TQT = _config(_tqt(TQTThresholdInitMeth._3SD), _tqt(TQTThresholdInitMeth._KL_J), _tqt(TQTThresholdInitMeth._3SD))
LSQ = _config(_spec(LSQObserver), _spec(LSQObserver), _spec(LSQObserver))
A8W8 = _config(_spec(), _spec(), _spec(dtype=Dtype.int32))


def _model() -> nn.Module:
    torch.manual_seed(0)
    return ResidualCNN().eval()


def _batches(n: int = 2, batch: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(1)
    return [torch.rand(batch, 1, 8, 8, generator=g) for _ in range(n)]


def test_quark_torch_model_quantizer_is_the_extension_s():
    assert ModelQuantizer is ExtensionQuantizer


def test_an_exported_graph_quantizes_as_the_traced_model_bit_for_bit():
    """Quark's vision example: export_for_training(model, args).module() in fx_graph_mode. Its layers are
    recovered from the ATen calls (same names, same parameters): the result equals graph mode's on
    the model itself; the example's batch size is not baked in (torch.export's guard is removed)."""
    model, data = _model(), _batches()
    graph = export_for_training(model, (torch.rand(2, 1, 8, 8),)).module()
    traced_q, exported_q = ModelQuantizer(A8W8), ModelQuantizer(A8W8)
    from_model = traced_q.quantize_model(model, data, progress=False)
    from_graph = exported_q.quantize_model(graph, dataloader=data, progress=False)
    assert [p.name for p in traced_q.plans] == [p.name for p in exported_q.plans]
    x = torch.rand(5, 1, 8, 8)  # not the example's batch size
    with torch.no_grad():
        assert torch.equal(from_model(x), from_graph(x))


def test_dataloader_is_quark_s_name_of_calib_loader():
    data = _batches()
    a = ModelQuantizer(A8W8).quantize_model(_model(), data, progress=False)
    b = ModelQuantizer(A8W8).quantize_model(_model(), dataloader=data, progress=False)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        assert torch.equal(a(x), b(x))
    with pytest.raises(TypeError, match="calib_loader and dataloader name the same data; give one of them"):
        ModelQuantizer(A8W8).quantize_model(_model(), data, dataloader=data)


def test_tqt_with_an_empty_calibration_list_calibrates_on_the_first_call():
    """Quark's QAT scripts pass [] and train: the first call calibrates the TQT activations on its own
    inputs, as calibrating on that batch would."""
    x = _batches(1)[0]
    late = ModelQuantizer(TQT).quantize_model(_model(), [], progress=False)
    assert len(uncalibrated_quantizers(late)) > 0
    early = ModelQuantizer(TQT).quantize_model(_model(), [x], progress=False)
    with torch.no_grad():
        assert torch.equal(late(x), early(x))
    assert uncalibrated_quantizers(late) == []
    with torch.no_grad():  # the hook is gone: later calls do not calibrate again
        assert torch.equal(late(x * 2), early(x * 2))


def test_an_empty_calibration_list_for_fixed_ranges_names_the_quantizers_and_leaves_the_model():
    model = _model()
    before = snapshot(model)
    with pytest.raises(ValueError, match=r"calibration received no batch \(calib_loader / dataloader is empty\), .* static activation quantizers take their "
                                         r"range from it \(stem\.0\.output_quant, .*only trained TQT / LSQ"):  # fmt: skip
        ModelQuantizer(A8W8).quantize_model(model, [], progress=False)
    assert_unchanged(before, model)


def test_tqt_thresholds_are_quark_s_tqt_observers_trained_by_quark_s_param_groups():
    """Quark's vision example: [m._log_threshold for m in model.modules() if isinstance(m, TQTObserver)]
    as the quantizer param group. They are parameters of the model, and training them moves the
    scales Brevitas quantizes with (2^ceil(log2 t) / 2^(b-1), TQT's formula)."""
    qmodel = ModelQuantizer(TQT).quantize_model(_model(), _batches(), progress=False)
    observers = [m for m in qmodel.modules() if isinstance(m, TQTObserver)]
    thresholds = [m._log_threshold for m in observers]
    params = {id(p) for p in qmodel.parameters()}
    assert len(observers) > 10 and all(id(t) in params and t.requires_grad for t in thresholds)
    conv = qmodel.get_submodule("stem.0")
    log_t = conv.weight_quant.tensor_quant.scaling_impl._log_threshold
    assert torch.equal(conv.quant_weight().scale.reshape(()), tqt_reference.scale(log_t.detach(), 8, True))
    weights = [p for p in qmodel.parameters() if id(p) not in {id(t) for t in thresholds}]
    optimizer = torch.optim.SGD([{"params": thresholds, "lr": 1.0}, {"params": weights, "lr": 0.0}])
    before = log_t.detach().clone()
    with torch.no_grad():
        log_t.sub_(1.0)  # one step of one threshold, as an optimizer would take it
    optimizer.zero_grad()
    assert not torch.equal(log_t.detach(), before)
    assert torch.equal(conv.quant_weight().scale.reshape(()), tqt_reference.scale(log_t.detach(), 8, True))


def test_lsq_scales_are_quark_s_lsq_observers():
    qmodel = ModelQuantizer(LSQ).quantize_model(_model(), _batches(), progress=False)
    observers = [m for m in qmodel.modules() if isinstance(m, LSQObserver)]
    params = {id(p) for p in qmodel.parameters()}
    assert len(observers) > 10 and all(id(m.scale) in params for m in observers)
    conv = qmodel.get_submodule("stem.0")
    with torch.no_grad():
        conv.weight_quant.tensor_quant.scaling_impl.scale.mul_(2)
    assert conv.quant_weight().scale.reshape(()).item() == pytest.approx(
        float(conv.weight_quant.tensor_quant.scaling_impl.scale.detach().abs()), rel=1e-6
    )


def test_tqt_on_a_bias_quantizes_it_on_its_own_trained_threshold():
    """Quark's vision example gives the bias the TQT weight spec: the bias's threshold starts at its 3 SD
    and is trained; the bias is quantized as TQT's formula says."""
    qmodel = ModelQuantizer(TQT).quantize_model(_model(), _batches(), progress=False)
    head = qmodel.get_submodule("head.2")
    log_t = head.bias_quant.tensor_quant.scaling_impl._log_threshold
    assert isinstance(head.bias_quant.tensor_quant.scaling_impl, TQTObserver)
    expected = tqt_reference.quantize(head.bias.detach(), log_t.detach(), 8, True)
    assert torch.equal(head.quant_bias().value, expected)
    assert float(log_t.detach()) == pytest.approx(float(torch.log2(torch.tensor(tqt_reference.three_sd(head.bias.detach())))), rel=1e-5)


def test_freeze_as_quark_calls_it():
    qmodel = ModelQuantizer(TQT).quantize_model(_model(), _batches(), progress=False)
    x = torch.rand(3, 1, 8, 8)
    with torch.no_grad():
        y = qmodel(x)
    weight = qmodel.get_submodule("stem.0").weight.detach().clone()
    frozen = ModelQuantizer.freeze(qmodel, quantize=False)  # a staticmethod in Quark too
    assert frozen is qmodel and not frozen.training
    assert torch.equal(frozen.get_submodule("stem.0").weight, weight)  # quantize=False: float weights kept
    with torch.no_grad():
        assert torch.equal(frozen(x), y)
    assert not any(p.requires_grad for p in frozen.get_submodule("stem.0").weight_quant.parameters())


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (lambda: ModelQuantizer(A8W8, multi_device=True), r"multi_device=True\): spreading one model over several devices .* Use multi_device=False"),
        (lambda: ModelQuantizer(A8W8).direct_quantize_checkpoint("in", "out"), r"direct_quantize_checkpoint: quantizing safetensors shards on disk .* quantize_model\(model, dataloader\)"),
        (lambda: ModelQuantizer.freeze(nn.Sequential(), runtime_options=object()), r"freeze\(runtime_options=.*\): Quark's native inference kernels .* leave runtime_options=None"),
    ],
    ids=["multi_device", "direct_quantize_checkpoint", "runtime_options"],
)
def test_refusals_name_the_name_the_reason_and_what_to_use(call, match):
    with pytest.raises(QuarkFeatureRefused, match=match):
        call()


def test_quark_s_own_llm_names_exist_and_refuse_when_used():
    from quark.torch import LLMTemplate, ModelPruner, enable_native_inference

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for use, name in ((lambda: LLMTemplate.get("llama"), "LLMTemplate.get"), (lambda: ModelPruner(None), "ModelPruner(...)"),
                          (lambda: enable_native_inference(nn.Linear(1, 1)), "enable_native_inference")):  # fmt: skip
            with pytest.raises(QuarkFeatureRefused, match=rf"^{re.escape(name)}: Quark's"):
                use()
