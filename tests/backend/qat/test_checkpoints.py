"""Checkpoints of quantized models, the calibrated flag, load_float_weights and freeze."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
import torch.nn.functional as F
from _reference import tqt as R
from _shared.models import batches
from _shared.quantize import quantize
from brevitas.proxy.quant_proxy import QuantProxyFromInjector
from torch import nn

from quark.torch.extensions.brevitas._backend.calibrate import CALIBRATED_FLAG
from quark.torch.extensions.brevitas.api import ModelQuantizer, UncalibratedModelWarning
from quark.torch.extensions.brevitas.qat import freeze, load_float_weights, uncalibrated_quantizers
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType, TQTThresholdInitMeth

# Brevitas' QuantLinear/QuantConv note that an asymmetric input's zero point is not propagated to a
# QuantTensor output; outputs here are plain tensors.
pytestmark = pytest.mark.filterwarnings("ignore:Computing zero point of output accumulator")


def _model(seed: int) -> nn.Module:
    torch.manual_seed(seed)
    return nn.Sequential(
        nn.Conv2d(3, 8, 3, padding=1),
        nn.BatchNorm2d(8),
        nn.ReLU(),
        nn.Conv2d(8, 8, 3, padding=1),
        nn.ReLU(),
        nn.Flatten(),
        nn.Linear(8 * 6 * 6, 10),
    ).eval()


def _tqt(dtype: Dtype, init=TQTThresholdInitMeth._3SD) -> QuantizationSpec:
    return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init))


CONFIGS = {
    "tqt": lambda: Config(global_quant_config=QuantizationConfig(weight=_tqt(Dtype.int4), input_tensors=_tqt(Dtype.int8))),
    "tqt_ll_j": lambda: Config(
        global_quant_config=QuantizationConfig(
            weight=_tqt(Dtype.int4, TQTThresholdInitMeth._LL_J), input_tensors=_tqt(Dtype.uint8, TQTThresholdInitMeth._LL_J)
        )
    ),
    "static": lambda: Config(
        global_quant_config=QuantizationConfig(
            weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0),
            input_tensors=QuantizationSpec(dtype=Dtype.uint8, symmetric=False),
        )
    ),
}
INPUT_QUANTIZERS = ["0.input_quant", "3.input_quant", "6.input_quant"]


def _x(seed: int = 7) -> torch.Tensor:
    return torch.randn(16, 3, 6, 6, generator=torch.Generator().manual_seed(seed))


def _train_steps(q: nn.Module, steps: int = 3) -> None:
    """A few SGD steps, so weights and thresholds move away from their initial values."""
    q.train()
    opt = torch.optim.SGD(q.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(11)
    for _ in range(steps):
        opt.zero_grad()
        x, y = torch.randn(8, 3, 6, 6, generator=g), torch.randint(0, 10, (8,), generator=g)
        F.cross_entropy(q(x), y).backward()
        opt.step()
    q.eval()


def _thresholds(q: nn.Module) -> dict[str, torch.Tensor]:
    return {k: v.detach().clone() for k, v in q.state_dict().items() if k.endswith("scaling_impl.value")}


def _assert_same_state(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for k, v in a.items():
        assert torch.equal(v, b[k]), k


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_state_dict_roundtrip_bit_identical(kind, tmp_path):
    q = quantize(CONFIGS[kind](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    if kind.startswith("tqt"):
        _train_steps(q)
    path = tmp_path / "q.pt"
    torch.save(q.state_dict(), path)

    fresh = quantize(CONFIGS[kind](), _model(1), batches(3, (8, 3, 6, 6), seed=200))  # other weights, other calibration
    with torch.no_grad():
        assert not torch.equal(fresh(_x()), q(_x()))
    fresh.load_state_dict(torch.load(path, weights_only=True))
    _assert_same_state(fresh.state_dict(), q.state_dict())
    if kind.startswith("tqt"):
        assert len(_thresholds(q)) == 6
        _assert_same_state(_thresholds(fresh), _thresholds(q))
    with torch.no_grad():
        assert torch.equal(fresh(_x()), q(_x()))


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_uncalibrated_then_load(kind, tmp_path):
    original = quantize(CONFIGS[kind](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    assert uncalibrated_quantizers(original) == []
    torch.save(original.state_dict(), tmp_path / "q.pt")

    empty = quantize(CONFIGS[kind](), _model(3), None, calibrate=False)  # no data at all
    assert sorted(uncalibrated_quantizers(empty)) == INPUT_QUANTIZERS
    empty.load_state_dict(torch.load(tmp_path / "q.pt", weights_only=True))
    assert uncalibrated_quantizers(empty) == []
    with torch.no_grad():
        assert torch.equal(empty(_x()), original(_x()))


def test_calibrate_false_without_data_is_silent_and_calibrate_true_without_data_warns():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        quantize(CONFIGS["tqt"](), _model(0), None, calibrate=False)
    with pytest.warns(UncalibratedModelWarning, match="calib"):
        q = quantize(CONFIGS["tqt"](), _model(0), None, calibrate=True)
    assert sorted(uncalibrated_quantizers(q)) == INPUT_QUANTIZERS


@pytest.mark.parametrize("kind", ["tqt", "static"])
def test_calibrated_flag_in_state_dict(kind):
    q = quantize(CONFIGS[kind](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    flags = {k: v for k, v in q.state_dict().items() if k.endswith(CALIBRATED_FLAG)}
    assert sorted(flags) == sorted(f"{n}.{CALIBRATED_FLAG}" for n in INPUT_QUANTIZERS)
    assert all(v.dtype == torch.bool and bool(v) for v in flags.values())

    empty = quantize(CONFIGS[kind](), _model(0), None, calibrate=False)
    flags = {k: v for k, v in empty.state_dict().items() if k.endswith(CALIBRATED_FLAG)}
    assert len(flags) == 3 and not any(bool(v) for v in flags.values())

    # an uncalibrated checkpoint stays uncalibrated when loaded
    other = quantize(CONFIGS[kind](), _model(0), None, calibrate=False)
    other.load_state_dict(empty.state_dict())
    assert sorted(uncalibrated_quantizers(other)) == INPUT_QUANTIZERS


def test_calibrated_flag_only_on_static_activation_quantizers():
    cfg = Config(
        global_quant_config=QuantizationConfig(
            weight=_tqt(Dtype.int8), input_tensors=QuantizationSpec(dtype=Dtype.int8, is_dynamic=True)
        )
    )
    q = ModelQuantizer(cfg).quantize_model(_model(0), progress=False)
    assert not any(k.endswith(CALIBRATED_FLAG) for k in q.state_dict())
    assert uncalibrated_quantizers(q) == []


# -- load_float_weights ---------------------------------------------------------------------------

WEIGHT_ONLY = {
    "per_channel": QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0),
    "pof2": QuantizationSpec(dtype=Dtype.int4, scale_type=ScaleType.pof2),
    "uint_asym": QuantizationSpec(dtype=Dtype.uint4, symmetric=False),
}


@pytest.mark.parametrize("label", list(WEIGHT_ONLY))
def test_load_float_weights_equals_fresh_quantization(label):
    cfg = Config(global_quant_config=QuantizationConfig(weight=WEIGHT_ONLY[label]))
    q = ModelQuantizer(cfg).quantize_model(_model(0), progress=False)
    new_float = _model(5)
    load_float_weights(q, new_float.state_dict())
    fresh = ModelQuantizer(cfg).quantize_model(new_float, progress=False)
    with torch.no_grad():
        assert torch.equal(q(_x()), fresh(_x()))
        assert not torch.equal(q(_x()), ModelQuantizer(cfg).quantize_model(_model(0), progress=False)(_x()))


def test_load_float_weights_keeps_quantizer_state():
    q = quantize(CONFIGS["tqt"](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    _train_steps(q)
    before = {k: v.clone() for k, v in q.state_dict().items() if "_quant." in k}
    new_float = _model(6)
    load_float_weights(q, new_float.state_dict())
    after = {k: v for k, v in q.state_dict().items() if "_quant." in k}
    _assert_same_state(after, before)
    for k, v in new_float.state_dict().items():
        # batch norm 1 is folded into conv 0 during QAT (TQTSpec.fold_batch_norm): its keys moved there
        key = "0.bn." + k[2:] if k.startswith("1.") else k
        assert torch.equal(q.state_dict()[key], v), k


def test_load_float_weights_rejects_unknown_keys():
    q = quantize(CONFIGS["tqt"](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    before = copy.deepcopy(q.state_dict())
    state = _model(1).state_dict()
    state["9.weight"] = torch.zeros(3)
    with pytest.raises(KeyError, match=r"9\.weight"):
        load_float_weights(q, state)
    _assert_same_state(q.state_dict(), before)  # nothing was loaded


# -- freeze ---------------------------------------------------------------------------------------


def _quant_params(model: nn.Module) -> list[tuple[str, nn.Parameter]]:
    out = []
    for name, proxy in model.named_modules():
        if isinstance(proxy, QuantProxyFromInjector):
            out += [(f"{name}.{n}", p) for n, p in proxy.named_parameters()]
    return out


@pytest.mark.parametrize("kind", list(CONFIGS))
def test_freeze(kind):
    q = quantize(CONFIGS[kind](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    if kind.startswith("tqt"):
        _train_steps(q)
    q.train()
    x = _x()
    with torch.no_grad():
        expected = q.eval()(x)
    q.train()
    weights_before = {n: m.weight.detach().clone() for n, m in q.named_modules() if hasattr(m, "weight_quant")}
    quant_weights = {n: m.quant_weight().value.detach().clone() for n, m in q.named_modules() if hasattr(m, "weight_quant")}

    assert freeze(q) is q
    assert not q.training and not any(m.training for m in q.modules())
    params = _quant_params(q)
    assert params  # there are learned scales / thresholds / zero points
    assert all(not p.requires_grad for _, p in params)
    with torch.no_grad():
        assert torch.equal(q(x), expected)
    for name, layer in q.named_modules():
        if not hasattr(layer, "weight_quant"):
            continue
        if kind.startswith("tqt"):  # baked: the weight is its quantized value, the quantizer the identity
            assert torch.equal(layer.weight, quant_weights[name]), name
            assert torch.equal(layer.quant_weight().value, layer.weight), name
        else:  # stats-based weight scales: the float weight stays
            assert torch.equal(layer.weight, weights_before[name]), name


def test_freeze_bakes_tqt_weights_onto_the_reference_grid():
    q = quantize(CONFIGS["tqt"](), _model(0), batches(3, (8, 3, 6, 6), seed=100))
    _train_steps(q)
    layer = q[3]
    v = layer.weight_quant.tensor_quant.scaling_impl.value.detach()
    expected = R.quantize(layer.weight.detach(), v, 4, True)
    freeze(q)
    assert torch.equal(layer.weight, expected)
