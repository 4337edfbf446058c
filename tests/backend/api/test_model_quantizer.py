"""ModelQuantizer end to end: client code, data forms, model ownership, errors, training."""

from __future__ import annotations

import copy
import subprocess
import sys

import pytest
import torch
import torch.nn.functional as F
from _reference import quant as R
from _shared.configs import A8, INT8, W8, W8A8, WEIGHT_ONLY
from _shared.models import TokenModel, TwoInputs, loader, mlp
from _shared.numerics import exact
from _shared.quantize import quantize
from torch import nn

import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.qat import uncalibrated_quantizers
from quark.torch.quantization.config.config import Config, GPTQConfig, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType

torch.manual_seed(0)


def on_int8_grid(qt) -> bool:
    """A symmetric int8 QuantTensor's values are integers of [-128, 127] times its scale."""
    codes = qt.value / qt.scale
    integers = codes.round()
    return bool((codes - integers).abs().max() < 1e-3 and integers.min() >= -128 and integers.max() <= 127)


def recomputed(qmodel: nn.Module, x: torch.Tensor) -> torch.Tensor:
    """An MLP's output (layers '0' and '2', ReLU between) from what its quantizers say: each layer's
    quantized input and weight, and its float bias."""
    first, second = qmodel.get_submodule("0"), qmodel.get_submodule("2")
    h = torch.relu(F.linear(first.input_quant(x).value, first.quant_weight().value, first.bias))
    return F.linear(second.input_quant(h).value, second.quant_weight().value, second.bias)


def test_extension_client_code_runs_unchanged():
    """Script shape of AMD Quark's Brevitas extension, with a classification DataLoader."""
    model = mlp((12, 32, 4))
    config = brevitas_config.Config(
        global_quant_config=brevitas_config.QuantizationConfig(
            weight=brevitas_config.QuantizationSpec(), input_tensors=brevitas_config.QuantizationSpec()
        )
    )
    qmodel = brevitas_api.ModelQuantizer(config).quantize_model(model, loader())
    assert not qmodel.training
    x = torch.randn(5, 12)
    out, ref = qmodel(x), model(x)
    assert out.shape == ref.shape
    assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.99
    assert type(getattr(qmodel, "0")).__name__ == "QuantLinear"  # Preprocess returns an fx GraphModule
    # ... and quantization did something: the output is computed from int8 inputs and weights (the
    # float model meets the cosine above too)
    for name in ("0", "2"):
        layer = qmodel.get_submodule(name)
        assert on_int8_grid(layer.quant_weight()) and not torch.equal(layer.quant_weight().value, layer.weight)
    assert on_int8_grid(qmodel.get_submodule("0").input_quant(x))
    torch.testing.assert_close(out, recomputed(qmodel, x), atol=0, rtol=0)
    assert not torch.equal(out, ref)


def test_callers_model_is_not_modified():
    model = mlp((12, 32, 4))
    before = copy.deepcopy(model.state_dict())
    qmodel = quantize(W8A8, model, loader())
    assert qmodel is not model
    assert all(type(m) in (nn.Sequential, nn.Linear, nn.ReLU) for m in model.modules())
    for key, value in model.state_dict().items():
        torch.testing.assert_close(value, before[key], atol=0, rtol=0)


def test_inplace_modifies_and_returns_the_model():
    model = mlp((12, 32, 4))
    qmodel = quantize(W8A8, model, loader(), inplace=True)
    assert qmodel is model
    assert type(model[0]).__name__ == "QuantLinear"


def test_failed_config_leaves_model_untouched_even_inplace():
    model = mlp((12, 32, 4))
    before = copy.deepcopy(model)
    bad = Config(global_quant_config=QuantizationConfig(weight=W8), layer_quant_config={"missing": QuantizationConfig()})
    with pytest.raises(ValueError, match="'missing' matches no quantizable module"):
        quantize(bad, model, loader(), inplace=True)
    assert [type(m) for m in model.modules()] == [type(m) for m in before.modules()]


def test_model_with_two_inputs_takes_leading_batch_elements():
    """Batches (x, y, target) feed forward(x, y): the input quantizers' ranges are those of the
    calibration x and y (the formula: max |value| / 127.5), and the output is computed from them."""
    model = TwoInputs(8)
    batches = [(torch.randn(4, 6), torch.randn(4, 3), torch.zeros(4)) for _ in range(3)]
    qmodel = quantize(W8A8, model, batches)
    x, y = torch.randn(2, 6), torch.randn(2, 3)
    out = qmodel(x, y)
    assert out.shape == (2, 2)
    for layer, position in ((qmodel.a, 0), (qmodel.b, 1)):
        calibration = torch.cat([b[position] for b in batches])
        scale = R.qparams(*R.minmax(calibration), 8, True, True)[0]
        exact(layer.input_quant(calibration).scale, scale)
    h = torch.relu(
        F.linear(qmodel.a.input_quant(x).value, qmodel.a.quant_weight().value, qmodel.a.bias)
        + F.linear(qmodel.b.input_quant(y).value, qmodel.b.quant_weight().value, qmodel.b.bias)
    )
    head = qmodel.head
    torch.testing.assert_close(out, F.linear(head.input_quant(h).value, head.quant_weight().value, head.bias), atol=0, rtol=0)


def test_dict_batches_are_keyword_inputs_and_token_ids_stay_integer():
    model = TokenModel()
    batches = [
        {"input_ids": torch.randint(0, 50, (2, 7)), "attention_mask": torch.ones(2, 7), "labels": torch.zeros(2)}
        for _ in range(3)
    ]
    qmodel = quantize(W8A8, model, batches)  # 'labels' is not a forward argument: it is dropped
    ids = torch.randint(0, 50, (1, 7))
    torch.testing.assert_close(qmodel(ids), qmodel(input_ids=ids, attention_mask=None))


def test_token_id_tensor_batches_and_one_element_tuples():
    """Token id tensors reach the embedding as integers (the projection's input range is the
    embedding's rows), and one-element tuples of the same ids calibrate the same model."""
    model = TokenModel()
    ids = [torch.randint(0, 50, (2, 5)) for _ in range(2)]
    qmodel = quantize(W8A8, model, ids)
    probe = torch.randint(0, 50, (1, 5))
    out = qmodel(probe)
    assert out.shape == (1, 3)
    embedded = torch.cat([model.embed(b) for b in ids]).detach()
    exact(qmodel.proj.input_quant(embedded).scale, R.qparams(*R.minmax(embedded), 8, True, True)[0])
    h = F.linear(qmodel.proj.input_quant(qmodel.embed(probe)).value, qmodel.proj.quant_weight().value, qmodel.proj.bias)
    expected = F.linear(qmodel.out.input_quant(h.mean(dim=1)).value, qmodel.out.quant_weight().value, qmodel.out.bias)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    from_tuples = quantize(W8A8, model, [(b,) for b in ids])
    torch.testing.assert_close(from_tuples(probe), out, atol=0, rtol=0)


def test_num_calib_batches_caps_consumption():
    consumed = []

    def batches():
        for i in range(10):
            consumed.append(i)
            yield torch.randn(4, 12)

    quantize(W8A8, mlp((12, 32, 4)), batches(), num_calib_batches=3)
    assert consumed == [0, 1, 2]


def test_progress_bar_can_be_switched_off(capsys):
    quantize(W8A8, mlp((12, 32, 4)), loader())
    assert capsys.readouterr().err == ""
    brevitas_api.ModelQuantizer(W8A8).quantize_model(mlp((12, 32, 4)), loader(), progress=True)
    assert "calibration" in capsys.readouterr().err


def test_weight_only_needs_no_data_and_static_activations_wait_for_it():
    model = mlp((12, 32, 4))
    x = torch.randn(2, 12)
    out = quantize(WEIGHT_ONLY, model)(x)
    assert out.shape == (2, 4)
    # the float model with W8's weights from the formula (per output channel, symmetric int8)
    w0, w2 = (R.fake_quant(model[i].weight.detach(), 8, True, True, "per_channel", 0)[1] for i in (0, 2))
    expected = F.linear(torch.relu(F.linear(x, w0, model[0].bias)), w2, model[2].bias)
    torch.testing.assert_close(out, expected, atol=0, rtol=0)
    assert not torch.equal(out, model(x))
    # as AMD Quark's extension: the model comes back uncalibrated, with a warning saying how to calibrate
    with pytest.warns(brevitas_api.UncalibratedModelWarning, match=r"no calibration data, so 2 static activation"):
        qmodel = quantize(W8A8, mlp((12, 32, 4)))
    assert len(uncalibrated_quantizers(qmodel)) == 2


def test_dynamic_activations_need_no_data():
    dyn = QuantizationSpec(dtype=Dtype.int8, symmetric=False, is_dynamic=True)
    config = Config(global_quant_config=QuantizationConfig(weight=W8, input_tensors=dyn))
    model = mlp((12, 32, 4))
    x = torch.randn(2, 12)
    out = quantize(config, model)(x)
    assert out.shape == (2, 4)
    # each layer's input quantized from its own range at this call (asymmetric, the formula), weights per channel
    w0, w2 = (R.fake_quant(model[i].weight.detach(), 8, True, True, "per_channel", 0)[1] for i in (0, 2))
    h = torch.relu(F.linear(R.fake_quant(x, 8, True, False)[1], w0, model[0].bias))
    torch.testing.assert_close(out, F.linear(R.fake_quant(h, 8, True, False)[1], w2, model[2].bias), atol=0, rtol=0)


def test_empty_calibration_data_is_an_error():
    with pytest.raises(ValueError, match="calibration received no batch"):
        quantize(W8A8, mlp((12, 32, 4)), [])


def test_layer_never_called_during_calibration_is_named():
    class Unused(nn.Module):
        def __init__(self):
            super().__init__()
            self.used, self.unused = nn.Linear(4, 4), nn.Linear(4, 4)

        def forward(self, x):
            return self.used(x)

    with pytest.raises(ValueError, match="unused"):
        quantize(W8A8, Unused(), [torch.randn(2, 4)])


@pytest.mark.parametrize(
    "config, match",
    [
        (
            Config(global_quant_config=QuantizationConfig(weight=W8), algo_config=[GPTQConfig()]),
            r"GPTQConfig\.bit=4 disagrees with the weight spec \(bit width 8\) of module",
        ),
        (
            Config(
                global_quant_config=QuantizationConfig(
                    weight=QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=5)
                )
            ),
            "group_size=5 does not divide axis 1",
        ),
        (
            Config(global_quant_config=QuantizationConfig(weight=W8, bias=QuantizationSpec(dtype=Dtype.int8))),
            "bias with scale = input scale x weight scale needs input_tensors and weight",
        ),
        (
            Config(
                global_quant_config=QuantizationConfig(
                    weight=QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=3)
                )
            ),
            "ch_axis=3 is out of range",
        ),
        (
            Config(
                global_quant_config=QuantizationConfig(
                    input_tensors=QuantizationSpec(dtype=Dtype.mx, mx_element_dtype=Dtype.fp8_e4m3, is_dynamic=True)
                )
            ),
            r"input_tensors mx fp8_e4m3 blocks of 32 need the channel count to be a multiple of 32, got 12",
        ),
    ],
)
def test_impossible_configs_raise_clearly(config, match):
    with pytest.raises((ValueError, NotImplementedError), match=match):
        quantize(config, mlp((12, 32, 4)), loader())


def test_model_quantizer_rejects_other_config_types():
    with pytest.raises(TypeError, match="expected quark.torch.quantization.config.config.Config"):
        brevitas_api.ModelQuantizer({"weight": "int8"})


@pytest.mark.slow  # 60 training steps: ~4 s
def test_quantized_model_trains_in_a_plain_loop():
    torch.manual_seed(1)
    x = torch.randn(64, 12)
    y = (x[:, 0] > 0).long() + 2 * (x[:, 1] > 0).long()
    qmodel = quantize(W8A8, mlp((12, 32, 4)), [(x, y)])
    qmodel.train()
    optimizer = torch.optim.Adam(qmodel.parameters(), lr=1e-2)
    losses = []
    for _ in range(60):
        optimizer.zero_grad()
        loss = nn.functional.cross_entropy(qmodel(x), y)
        loss.backward()
        losses.append(loss.item())
        optimizer.step()
    assert qmodel[0].weight.grad is not None and qmodel[0].weight.grad.abs().sum() > 0
    scale = qmodel[0].input_quant.fused_activation_quant_proxy.tensor_quant.scaling_impl.value
    assert scale.grad is not None and torch.isfinite(scale.grad).all()
    assert losses[-1] < 0.5 * losses[0]


@pytest.mark.parametrize(
    "layer, shape, out_axis",
    [
        (nn.Conv1d(3, 6, 3), (2, 3, 10), 0),
        (nn.Conv2d(3, 6, 3), (2, 3, 8, 8), 0),
        (nn.Conv3d(3, 6, 3), (2, 3, 5, 5, 5), 0),
        (nn.ConvTranspose1d(3, 6, 3), (2, 3, 10), 1),
        (nn.ConvTranspose2d(3, 6, 3), (2, 3, 8, 8), 1),
        (nn.ConvTranspose3d(3, 6, 3), (2, 3, 4, 4, 4), 1),
    ],
)
def test_every_conv_flavour_quantizes_weights_inputs_outputs_bias(layer, shape, out_axis):
    bias = QuantizationSpec(dtype=Dtype.int32)  # no observer: scale = input scale x weight scale
    weight = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=out_axis)
    config = Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=A8, output_tensors=A8, bias=bias))
    model = nn.Sequential(layer)
    data = [torch.randn(shape) for _ in range(3)]
    qmodel = quantize(config, model, data)
    out, ref = qmodel(data[0]), model(data[0])
    assert out.shape == ref.shape
    assert (out - ref).abs().max() < 0.1 * ref.abs().max()
    assert all(qmodel[0].__getattr__(n).is_quant_enabled for n in ("input_quant", "weight_quant", "output_quant", "bias_quant"))
    # the weights are the formula's, per output channel; the output lies on the output quantizer's int8 grid
    w = layer.weight.detach()
    exact(qmodel[0].quant_weight().value, R.fake_quant(w, 8, True, True, "per_channel", out_axis)[1])
    codes = out / qmodel[0].output_quant.scale()
    assert (codes - codes.round()).abs().max() < 1e-3 and -128 <= codes.round().min() and codes.round().max() <= 127
    assert not torch.equal(out, ref)


@pytest.mark.parametrize(
    "layer, shape, axis",
    [(nn.Conv2d(3, 4, 3), (2, 3, 6, 6), 1), (nn.Linear(8, 4), (2, 8), 1), (nn.ConvTranspose2d(4, 3, 3), (2, 4, 6, 6), 0)],
)
def test_per_input_channel_weight_scales_with_quantized_input_are_rejected(layer, shape, axis):
    """Brevitas computes the output scale s_in * s_w per output channel; other axes crash it obscurely."""
    weight = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=axis)
    config = Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=A8))
    with pytest.raises(ValueError, match=rf"per_channel weight scales along axis {axis} cannot combine with a quantized input"):
        quantize(config, nn.Sequential(layer), [torch.randn(shape)])


def test_product_scaled_bias_needs_per_output_channel_weight_scales():
    weight = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16)
    config = Config(
        global_quant_config=QuantizationConfig(weight=weight, input_tensors=A8, bias=QuantizationSpec(dtype=Dtype.int32))
    )
    with pytest.raises(ValueError, match=r"'0' \(Conv2d\): a bias scaled by input scale x weight scale needs one weight scale per output channel, got .*; allowed: per_tensor, or per_channel with ch_axis=0"):
        quantize(config, nn.Sequential(nn.Conv2d(32, 6, 3)), [torch.randn(1, 32, 4, 4)])


def test_multihead_attention_is_quantized_as_one_layer():
    mha = nn.MultiheadAttention(16, 4, batch_first=True)

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = mha

        def forward(self, x):
            return self.attn(x, x, x, need_weights=False)[0]

    model = Block()
    data = [torch.randn(2, 5, 16) for _ in range(3)]
    quantizer = brevitas_api.ModelQuantizer(W8A8)
    qmodel = quantizer.quantize_model(model, data, progress=False)
    assert type(qmodel.attn).__name__ == "QuantMultiheadAttention"
    assert [p.name for p in quantizer.plans] == ["attn"]  # out_proj is not planned on its own
    out, ref = qmodel(data[0]), model(data[0])
    assert torch.nn.functional.cosine_similarity(out.flatten(), ref.flatten(), dim=0) > 0.99
    # ... and quantization did something (the float model meets the cosine too): both projections'
    # weights are W8's from the formula, their inputs on int8 grids, and the output moved
    attn = qmodel.attn
    for quantized, weight in ((attn.in_proj, mha.in_proj_weight), (attn.out_proj, mha.out_proj.weight)):
        exact(quantized.quant_weight().value, R.fake_quant(weight.detach(), 8, True, True, "per_channel", 0)[1])
    assert on_int8_grid(attn.in_proj.input_quant(data[0]))
    assert not torch.equal(out, ref)


def test_summary_lists_every_layer_and_its_specs():
    config = Config(
        global_quant_config=QuantizationConfig(weight=W8, input_tensors=A8),
        layer_quant_config={"2": QuantizationConfig(weight=QuantizationSpec(dtype=Dtype.int4, scale_type=ScaleType.pof2))},
    )
    quantizer = brevitas_api.ModelQuantizer(config)
    quantizer.quantize_model(mlp((12, 32, 4)), loader(), progress=False)
    lines = quantizer.summary().splitlines()
    assert lines[0].split() == ["layer", "type", "input_tensors", "output_tensors", "weight", "bias"]
    assert lines[2].startswith("0 ") and "int8 sym per_channel" in lines[2]
    assert lines[3].startswith("2 ") and "int4 sym per_tensor pof2" in lines[3]


@pytest.mark.slow  # a fresh interpreter importing torch and Brevitas
def test_importing_the_api_prints_and_warns_nothing():
    result = subprocess.run(
        [sys.executable, "-W", "error", "-c", "import quark.torch.extensions.brevitas.api"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout == "" and result.stderr == ""


# -- the bug: the plan was resolved twice -------------------------------------------------------


class ConvBN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv = nn.Conv2d(1, 4, 3)
        self.bn = nn.BatchNorm2d(4)
        self.fc = nn.Linear(64, 2)

    def forward(self, x):
        return self.fc(torch.relu(self.bn(self.conv(x))).flatten(1))


@pytest.mark.parametrize("exclude", [["bn"], ["conv", "bn"]])
def test_exclude_naming_a_module_preprocess_merges_away(exclude):
    """Regression: Preprocess merged 'bn' into 'conv', then the second resolve failed with
    "exclude pattern 'bn' matches no module". The plan is resolved once, on the pre-processed
    model; exclude may name any module of the model the user passed."""
    config = Config(
        QuantizationConfig(weight=INT8, input_tensors=INT8), exclude=exclude, pre_quant_opt_config=[algos.Preprocess()]
    )
    quantizer = ModelQuantizer(config)
    qmodel = quantizer.quantize_model(ConvBN(), [torch.randn(2, 1, 6, 6)], progress=False)
    assert not any(isinstance(m, nn.BatchNorm2d) for m in qmodel.modules())
    assert [p.name for p in quantizer.plans] == [n for n in ("conv", "fc") if n not in exclude]


def test_exclude_matching_nothing_anywhere_is_still_an_error():
    config = Config(QuantizationConfig(weight=INT8), exclude=["bnn"], pre_quant_opt_config=[algos.Preprocess()])
    with pytest.raises(ValueError, match=r"exclude pattern 'bnn' matches no module; modules: conv, bn, fc"):
        ModelQuantizer(config).quantize_model(ConvBN(), progress=False)


def test_a_bad_spec_fails_before_preprocess_touches_an_inplace_model():
    model = ConvBN()
    before = copy.deepcopy(model.state_dict())
    bad = QuantizationSpec(dtype=Dtype.fp8_e4m3, symmetric=False)
    config = Config(
        QuantizationConfig(weight=INT8),
        layer_type_quant_config={"Linear": QuantizationConfig(weight=bad)},
        pre_quant_opt_config=[algos.Preprocess()],
    )
    with pytest.raises(ValueError, match=r"layer_type_quant_config\['Linear'\]\.weight: symmetric=False is not supported"):
        ModelQuantizer(config).quantize_model(model, inplace=True, progress=False)
    assert isinstance(model.bn, nn.BatchNorm2d)
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
