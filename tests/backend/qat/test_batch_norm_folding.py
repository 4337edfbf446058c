"""Batch norm folded into the layer before it during QAT (``TQTSpec.fold_batch_norm``,
``_backend/folding.py``), against the formulas in ``_reference/batch_norm.py``: the eval-mode and
frozen forward is merged batch norm (bit for bit against a model merged before quantization), the
training forward normalises with the batch's statistics and updates the running ones, gradients reach
the weight, gamma and beta, the statistics freeze after the configured steps and are then absorbed
into the layer's parameters (the outputs unchanged, an Adam step moving the folded weight by the
learning rate); layerwise and graph mode; Conv1d / Conv2d / Linear with BatchNorm1d / 2d; checkpoints."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F
from _reference import batch_norm as R
from _reference import tqt as T
from torch import nn

from quark.torch.extensions.brevitas import qat
from quark.torch.extensions.brevitas._backend.folding import FoldedBatchNorm
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQ, MergeBatchNorm
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QuantizationMode, ScaleType, TQTThresholdInitMeth

MODES = [QuantizationMode.eager_mode, QuantizationMode.fx_graph_mode]


def conv2d_model() -> nn.Module:
    torch.manual_seed(0)
    return nn.Sequential(
        nn.Conv2d(2, 6, 3, padding=1, bias=False), nn.BatchNorm2d(6), nn.ReLU(), nn.Flatten(), nn.Linear(6 * 5 * 5, 3)
    )


def conv1d_model() -> nn.Module:
    torch.manual_seed(1)
    return nn.Sequential(nn.Conv1d(2, 5, 3, padding=1), nn.BatchNorm1d(5), nn.ReLU(), nn.Flatten(), nn.Linear(5 * 7, 3))


def linear_model() -> nn.Module:
    torch.manual_seed(2)
    return nn.Sequential(nn.Linear(6, 8), nn.BatchNorm1d(8), nn.ReLU(), nn.Linear(8, 3))


#: model, input shape, the first layer's function for the reference
MODELS = {
    "conv2d": (conv2d_model, (16, 2, 5, 5), lambda x, w, b: F.conv2d(x, w, b, padding=1)),
    "conv1d": (conv1d_model, (16, 2, 7), lambda x, w, b: F.conv1d(x, w, b, padding=1)),
    "linear": (linear_model, (16, 6), F.linear),
}


def with_statistics(model: nn.Module, shape, seed: int = 0) -> tuple[nn.Module, list[torch.Tensor]]:
    """``model`` with non-trivial batch-norm parameters and statistics, and batches for it."""
    g = torch.Generator().manual_seed(seed)
    dtype = next(model.parameters()).dtype
    batches = [torch.randn(*shape, generator=g).to(dtype) for _ in range(3)]
    with torch.no_grad():
        for m in model.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.weight.copy_(0.5 + torch.rand(m.num_features, generator=g).to(dtype))
                m.bias.copy_(torch.randn(m.num_features, generator=g).to(dtype) * 0.3)
        model.train()
        for x in batches:
            model(x)
    return model.eval(), batches


def config(mode=QuantizationMode.eager_mode, bits: int = 4, **tqt) -> Config:
    spec = QuantizationSpec(
        dtype={4: Dtype.int4, 8: Dtype.int8}[bits],
        symmetric=True,
        scale_type=ScaleType.pof2,
        qat_spec=TQTSpec(TQTThresholdInitMeth._3SD, **tqt),
    )
    return Config(global_quant_config=QuantizationConfig(weight=spec, input_tensors=spec), quant_mode=mode)


def quantize(model, batches, cfg):
    return ModelQuantizer(cfg).quantize_model(model, batches, progress=False)


def folded(model: nn.Module) -> FoldedBatchNorm:
    return next(m for m in model.modules() if isinstance(m, FoldedBatchNorm))


def threshold(layer) -> torch.Tensor:
    return layer.weight_quant.tensor_quant.scaling_impl.value.detach()


def reference_args(layer, dtype=torch.float64):
    bn = layer.bn
    cast = lambda t: None if t is None else t.detach().to(dtype)
    return (
        cast(layer.weight),
        cast(layer.bias),
        cast(bn.weight),
        cast(bn.bias),
        cast(bn.running_mean),
        cast(bn.running_var),
        bn.eps,
    )


@pytest.mark.parametrize("name", MODELS)
def test_unquantized_folded_layer_is_the_layer_then_batch_norm(name):
    """Quantizers off: the folded layer in eval mode computes the layer then batch norm (float64)."""
    factory, shape, layer_fn = MODELS[name]
    model, batches = with_statistics(factory().double(), shape)
    qmodel = quantize(model, batches, config(absorb_frozen_batch_norm=False))  # absorbed: see below
    layer = folded(qmodel)
    layer.weight_quant.disable_quant = True
    layer.input_quant.disable_quant = True
    x = batches[0]
    expected = R.conv_then_batch_norm(layer_fn, x, *reference_args(layer))
    torch.testing.assert_close(layer(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_eval_forward_is_the_formula_with_the_quantized_folded_weight(name):
    factory, shape, layer_fn = MODELS[name]
    model, batches = with_statistics(factory().double(), shape)
    layer = folded(quantize(model, batches, config(absorb_frozen_batch_norm=False)))
    layer.input_quant.disable_quant = True
    x = batches[1]
    quant = lambda w: T.quantize(w, threshold(layer).double(), 4, True)
    expected = R.folded_eval(layer_fn, x, *reference_args(layer), quant)
    torch.testing.assert_close(layer.eval()(x), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name", MODELS)
def test_training_forward_uses_batch_statistics_and_updates_the_running_ones(name):
    factory, shape, layer_fn = MODELS[name]
    model, batches = with_statistics(factory().double(), shape)
    layer = folded(quantize(model, batches, config(freeze_batch_norm_steps=None)))
    layer.input_quant.disable_quant = True
    x = batches[2]
    quant = lambda w: T.quantize(w, threshold(layer).double(), 4, True)
    expected, mean, var = R.folded_train(layer_fn, x, *reference_args(layer), layer.bn.momentum, quant)
    got = layer.train()(x)
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(layer.bn.running_mean, mean, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(layer.bn.running_var, var, rtol=1e-12, atol=1e-12)
    assert int(layer.batch_norm_steps) == 1 and not bool(layer.batch_norm_frozen)


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_folded_model_equals_batch_norm_merged_before_quantization_bit_for_bit(mode):
    """At PTQ (same thresholds: both start from the merged weight) and frozen, after training."""
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    fold = quantize(model, batches, config(mode, freeze_batch_norm_steps=2))
    merged = ModelQuantizer(
        Config(
            global_quant_config=config(mode).global_quant_config,
            quant_mode=mode,
            pre_quant_opt_config=[MergeBatchNorm()],
        )
    ).quantize_model(model, batches, progress=False)
    assert not any(isinstance(m, FoldedBatchNorm) for m in merged.modules())
    x = batches[0]
    assert torch.equal(fold.eval()(x), merged.eval()(x))
    optimizer = torch.optim.Adam(fold.parameters(), lr=1e-2)
    fold.train()
    for x in batches * 2:  # frozen after the second step
        optimizer.zero_grad()
        fold(x).square().mean().backward()
        optimizer.step()
    assert bool(folded(fold).batch_norm_frozen)
    reference = qat.freeze(copy.deepcopy(fold))  # merged batch norm at the trained parameters
    assert not any(isinstance(m, FoldedBatchNorm) for m in reference.modules())
    for x in batches:
        assert torch.equal(fold.train()(x), reference(x))  # frozen: training mode computes it too
        assert torch.equal(fold.eval()(x), reference(x))


@pytest.mark.parametrize("frozen", [False, True])
def test_gradients_reach_the_weight_gamma_and_beta(frozen):
    """Batch statistics, or frozen ones not absorbed: through ``w * s``."""
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    cfg = config(freeze_batch_norm_steps=0 if frozen else None, absorb_frozen_batch_norm=False)
    qmodel = quantize(model, batches, cfg).train()
    qmodel(batches[0]).square().mean().backward()
    layer = folded(qmodel)
    assert not layer.absorbed
    for p in (layer.weight, layer.bn.weight, layer.bn.bias, threshold_param(layer)):
        assert p.grad is not None and p.grad.abs().sum() > 0


# -- frozen statistics absorbed into the layer's parameters (TQTSpec.absorb_frozen_batch_norm) --------


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_absorbing_holds_the_folded_values_and_changes_no_output(name, mode):
    """Frozen after one step: the next training step absorbs, weight = w * s, bias = beta + (b -
    running_mean) * s (in ``bn.bias`` for a layer without a bias), from the formula, in the same
    parameters; the outputs stay bit for bit; gamma (and beta beside a bias) stop training."""
    factory, shape, _ = MODELS[name]
    model, batches = with_statistics(factory().double(), shape)
    qmodel = quantize(model, batches, config(mode, freeze_batch_norm_steps=1))
    layer = folded(qmodel)
    qmodel.train()(batches[2])  # batch statistics, then frozen
    assert bool(layer.batch_norm_frozen) and not layer.absorbed
    w, b, gamma, beta, mean, var, eps = (a.clone() if torch.is_tensor(a) else a for a in reference_args(layer))
    before = [qmodel.eval()(x) for x in batches]
    weight, bias = layer.weight, layer.bias if layer.bias is not None else layer.bn.bias
    qmodel.train()(batches[0])
    assert layer.absorbed and "absorbed" in repr(layer)
    assert layer.weight is weight and (layer.bias if layer.bias is not None else layer.bn.bias) is bias
    s = R.factor(gamma, var, eps)
    torch.testing.assert_close(layer.weight.detach(), w * s.view(-1, *[1] * (w.dim() - 1)), rtol=1e-12, atol=1e-12)
    expected_bias = beta + ((b if b is not None else torch.zeros_like(beta)) - mean) * s
    torch.testing.assert_close(bias.detach(), expected_bias, rtol=1e-12, atol=1e-12)
    for x, y in zip(batches, before):
        assert torch.equal(qmodel.eval()(x), y)
    assert not layer.bn.weight.requires_grad and layer.bn.bias.requires_grad is (layer.bias is None)


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_frozen_from_the_start_is_absorbed_when_built_and_equals_merged_batch_norm(mode):
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(copy.deepcopy(model), batches, config(mode))
    layer = folded(qmodel)
    assert layer.absorbed and not layer.bn.weight.requires_grad
    s = R.factor(model[1].weight.detach(), model[1].running_var, model[1].eps)
    torch.testing.assert_close(layer.weight.detach(), model[0].weight.detach() * s.view(-1, 1, 1, 1), rtol=1e-6, atol=0)
    merged = ModelQuantizer(
        Config(global_quant_config=config(mode).global_quant_config, quant_mode=mode, pre_quant_opt_config=[MergeBatchNorm()])
    ).quantize_model(model, batches, progress=False)
    for x in batches:
        assert torch.equal(qmodel.eval()(x), merged.eval()(x))


@pytest.mark.parametrize("absorb", [True, False])
def test_gradients_after_absorbing_reach_the_folded_weight_not_gamma(absorb):
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(model, batches, config(absorb_frozen_batch_norm=absorb)).train()
    qmodel(batches[0]).square().mean().backward()
    layer = folded(qmodel)
    assert layer.absorbed is absorb
    assert layer.weight.grad.abs().sum() > 0 and layer.bn.bias.grad.abs().sum() > 0  # the conv has no bias: beta holds it
    assert (layer.bn.weight.grad is None) is absorb


@pytest.mark.parametrize("absorb", [True, False])
def test_an_adam_step_moves_the_folded_weight_by_the_learning_rate_once_absorbed(absorb):
    """Adam's first step is lr * sign(grad) (m / sqrt(v) = g / |g|, less eps) on each parameter. Absorbed,
    the quantized tensor w * s is the parameter: it moves by lr. Not absorbed, w moves by lr, so
    w * s by lr * s per output channel (gamma's own step adds w * dgamma / sqrt(var + eps))."""
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(model, batches, config(absorb_frozen_batch_norm=absorb)).train()
    layer = folded(qmodel)
    lr = 1e-3
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=lr)
    qmodel(batches[0]).square().mean().backward()  # absorbs first (a training forward)
    before = layer.folded_weight().detach().clone()
    s = R.factor(layer.bn.weight.detach(), layer.bn.running_var, layer.bn.eps).view(-1, 1, 1, 1)
    moved = layer.weight.grad != 0
    optimizer.step()
    step = (layer.folded_weight().detach() - before).abs()
    if absorb:  # lr |g| / (|g| + eps), a hair below lr where |g| is small; float32 differences
        torch.testing.assert_close(step[moved], torch.full_like(step[moved], lr), rtol=1e-3, atol=0)
        assert step.max() <= lr * 1.001
    else:  # the channel with s = 1.67 (with_statistics' gamma and variance) moves 1.67 times as far
        assert s.max() > 1.5 and step.max() > 1.5 * lr


def test_a_checkpoint_of_the_absorbed_layer_round_trips_and_one_from_before_loads():
    """The absorbed flag travels with the weight it describes; a state saved before absorbing
    existed (no ``batch_norm_absorbed`` key) holds w and loads strictly as not absorbed."""
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(copy.deepcopy(model), batches, config()).train()
    qmodel(batches[0])
    state = qmodel.state_dict()
    assert bool(state["0.batch_norm_absorbed"])
    fresh = lambda: ModelQuantizer(config()).quantize_model(copy.deepcopy(model), calibrate=False, progress=False)
    loaded = fresh()
    loaded.load_state_dict(state)
    assert folded(loaded).absorbed
    x = batches[1]
    assert torch.equal(loaded.eval()(x), qmodel.eval()(x))
    raw = quantize(copy.deepcopy(model), batches, config(absorb_frozen_batch_norm=False))  # holds w
    old = {k: v for k, v in raw.state_dict().items() if k != "0.batch_norm_absorbed"}
    loaded = fresh()
    loaded.load_state_dict(old)
    assert not folded(loaded).absorbed
    assert torch.equal(loaded.eval()(x), raw.eval()(x))


def threshold_param(layer) -> torch.Tensor:
    return layer.weight_quant.tensor_quant.scaling_impl.value


def test_statistics_stop_after_the_configured_steps():
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    layer = folded(quantize(model, batches, config(freeze_batch_norm_steps=2))).train()
    means = [layer.bn.running_mean.clone()]
    for x in batches + batches:
        layer(torch.randn(16, 2, 5, 5))
        means.append(layer.bn.running_mean.clone())
    assert not torch.equal(means[0], means[1]) and not torch.equal(means[1], means[2])
    assert all(torch.equal(means[2], m) for m in means[3:])
    assert int(layer.batch_norm_steps) == 2 and bool(layer.batch_norm_frozen)


def test_freeze_batch_norm_now():
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(model, batches, config(freeze_batch_norm_steps=None)).train()
    assert qat.freeze_batch_norm(qmodel) == 1
    before = folded(qmodel).bn.running_var.clone()
    qmodel(batches[0])
    assert torch.equal(folded(qmodel).bn.running_var, before)


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_the_batch_norm_leaves_its_place_and_the_summary_says_so(mode):
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    quantizer = ModelQuantizer(config(mode))
    qmodel = quantizer.quantize_model(model, batches, progress=False)
    assert [p.batch_norm for p in quantizer.plans if p.name == "0"] == ["1"]
    assert "Conv2d + 1 (folded)" in quantizer.summary()
    assert sum(isinstance(m, nn.BatchNorm2d) for m in qmodel.modules()) == 1  # the folded layer's own
    assert isinstance(folded(qmodel).bn, nn.BatchNorm2d)


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_fold_batch_norm_false_keeps_it_a_float_layer(mode):
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    quantizer = ModelQuantizer(config(mode, fold_batch_norm=False))
    qmodel = quantizer.quantize_model(model, batches, progress=False)
    assert not any(isinstance(m, FoldedBatchNorm) for m in qmodel.modules())
    assert all(p.batch_norm is None for p in quantizer.plans)
    assert any(type(m) is nn.BatchNorm2d for m in qmodel.modules())


class SharedOutput(nn.Module):
    """The convolution's output feeds the batch norm and a skip connection: no fold."""

    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(2, 2, 3, padding=1)
        self.bn = nn.BatchNorm2d(2)

    def forward(self, x):
        y = self.conv(x)
        return self.bn(y) + y


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_a_layer_whose_output_feeds_more_than_the_batch_norm_is_not_folded(mode):
    model, batches = with_statistics(SharedOutput(), (4, 2, 5, 5))
    quantizer = ModelQuantizer(config(mode))
    quantizer.quantize_model(model, batches, progress=False)
    assert all(p.batch_norm is None for p in quantizer.plans)


def test_algorithms_on_the_quantized_model_are_refused_with_folding():
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    cfg = config()
    cfg.algo_config = [GPTQ()]
    with pytest.raises(ValueError, match=r"GPTQ .*fold_batch_norm=False.*MergeBatchNorm"):
        ModelQuantizer(cfg).quantize_model(model, batches, progress=False)
    assert type(model[0]) is nn.Conv2d and type(model[1]) is nn.BatchNorm2d  # untouched


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_state_dict_round_trip_keeps_steps_and_frozen_flag(mode):
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(model, batches, config(mode, freeze_batch_norm_steps=3)).train()
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    for x in batches + batches:
        optimizer.zero_grad()
        qmodel(x).square().mean().backward()
        optimizer.step()
    state = qmodel.state_dict()
    assert int(state["0.batch_norm_steps"]) == 3 and bool(state["0.batch_norm_frozen"])
    loaded = ModelQuantizer(config(mode, freeze_batch_norm_steps=3)).quantize_model(
        model, calibrate=False, progress=False
    )
    loaded.load_state_dict(state)
    for x in batches:
        assert torch.equal(loaded.eval()(x), qmodel.eval()(x))
        assert torch.equal(loaded.train()(x), qmodel.train()(x))


def test_load_float_weights_finds_the_folded_batch_norm():
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(model, batches, config())
    other, _ = with_statistics(conv2d_model(), MODELS["conv2d"][1], seed=5)
    qat.load_float_weights(qmodel, other.state_dict())
    assert torch.equal(folded(qmodel).bn.running_mean, other[1].running_mean)
    assert torch.equal(folded(qmodel).weight, other[0].weight)


def test_load_float_weights_into_an_absorbed_layer_holds_w_again():
    model, batches = with_statistics(conv2d_model(), MODELS["conv2d"][1])
    qmodel = quantize(copy.deepcopy(model), batches, config()).train()
    qmodel(batches[0])
    assert folded(qmodel).absorbed
    other, _ = with_statistics(conv2d_model(), MODELS["conv2d"][1], seed=5)
    qat.load_float_weights(qmodel, other.state_dict())
    assert not folded(qmodel).absorbed and torch.equal(folded(qmodel).weight, other[0].weight)
    reference = quantize(copy.deepcopy(model), batches, config(absorb_frozen_batch_norm=False))  # the same thresholds
    qat.load_float_weights(reference, other.state_dict())
    x = batches[1]
    assert torch.equal(qmodel.eval()(x), reference.eval()(x))


@pytest.mark.parametrize("mode", MODES, ids=["layerwise", "graph"])
def test_a_frozen_checkpoint_loads_into_the_model_rebuilt_from_its_config(mode):
    """``freeze`` merges the batch norm; the model rebuilt from the config (folded again) loads that
    state strictly, becomes the merged layer and computes what the frozen model computes."""
    model, batches = with_statistics(conv2d_model(), (16, 2, 5, 5))
    qmodel = quantize(copy.deepcopy(model), batches, config(mode))
    qmodel.train()
    for x in batches:
        qmodel(x)
    frozen = qat.freeze(qmodel)
    rebuilt = ModelQuantizer(config(mode)).quantize_model(copy.deepcopy(model), calibrate=False, progress=False)
    assert any(isinstance(m, FoldedBatchNorm) for m in rebuilt.modules())
    rebuilt.load_state_dict(frozen.state_dict())
    assert not any(isinstance(m, FoldedBatchNorm) for m in rebuilt.modules())
    x = torch.randn(8, 2, 5, 5)
    assert torch.equal(rebuilt.eval()(x), frozen(x))
