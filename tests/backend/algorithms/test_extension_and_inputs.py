"""The Brevitas extension's algorithms as its documentation uses them, every calibration data form,
and transformers' GPT-2 (Conv1D layers)."""

from __future__ import annotations

import copy

import pytest
import torch
from _shared import models
from _shared.models import image_loader
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

import quark.torch.extensions.brevitas.algos as brevitas_algos
import quark.torch.extensions.brevitas.api as brevitas_api
import quark.torch.extensions.brevitas.config as brevitas_config
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPTQConfig, SmoothQuantConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType


def extension_config(pre, post, bits: int = 4) -> brevitas_config.Config:
    spec = brevitas_config.QuantizationSpec(bit_width=bits, qscheme=brevitas_config.QSchemeType.per_channel)
    layer = brevitas_config.QuantizationConfig(weight=spec, input_tensors=brevitas_config.QuantizationSpec())
    return brevitas_config.Config(global_quant_config=layer, pre_quant_opt_config=pre, algo_config=post)


@torch.no_grad()
def logits(model, data) -> torch.Tensor:
    return torch.cat([model(x) for x, _ in data])


def test_extension_script_runs_unchanged():
    """The extension's documented flow: pre-processing, equalization, GPFQ, bias correction."""
    model = models.cnn()
    config = brevitas_config.Config(
        global_quant_config=brevitas_config.QuantizationConfig(
            weight=brevitas_config.QuantizationSpec(bit_width=8),
            input_tensors=brevitas_config.QuantizationSpec(bit_width=8),
        ),
        pre_quant_opt_config=[
            brevitas_algos.Preprocess(),
            brevitas_algos.ActivationEqualization(is_layerwise=True, alpha=0.5),
        ],
        algo_config=[
            brevitas_algos.GPFQ(act_order=True, percentage_of_processed_inputs=1.0),
            brevitas_algos.BiasCorrection(),
        ],
    )
    quantizer = brevitas_api.ModelQuantizer(config)
    quant_model = quantizer.quantize_model(model, image_loader())
    reference, out = logits(model, image_loader(7)), logits(quant_model, image_loader(7))
    assert torch.isfinite(out).all() and not quant_model.training
    assert float((out - reference).abs().max()) < 0.1 * float(reference.abs().max())
    assert not torch.equal(out, reference)  # quantized: the bound above alone a float model meets


@pytest.mark.parametrize(
    "algo",
    [
        brevitas_algos.GPTQ(act_order=True),
        brevitas_algos.GPFQ(),
        brevitas_algos.GPFQ(percentage_of_processed_inputs=0.5),
    ],
    ids=["GPTQ", "GPFQ", "GPFQ-half"],
)
def test_extension_gpxq_beats_round_to_nearest(algo):
    model = models.cnn()
    reference = logits(model, image_loader(7))
    rtn = ModelQuantizer(extension_config([], [])).quantize_model(model, image_loader(), progress=False)
    tuned = ModelQuantizer(extension_config([], [algo])).quantize_model(model, image_loader(), progress=False)
    assert float((logits(tuned, image_loader(7)) - reference).pow(2).mean()) < float(
        (logits(rtn, image_loader(7)) - reference).pow(2).mean()
    )


def test_gpfa2q_keeps_every_accumulator_in_range():
    """A2Q's guarantee: |sum w_int x_int| < 2^(P-1) for any integer input, i.e. the l1 norm of each
    output channel's integer weights times the largest input integer stays below the bound."""
    model = nn.Sequential(nn.Linear(64, 32)).eval()
    data = [(torch.randn(16, 64), torch.zeros(16)) for _ in range(4)]
    bits = 14
    quant = ModelQuantizer(
        extension_config([], [brevitas_algos.GPFA2Q(accumulator_bit_width=bits)], bits=8)
    ).quantize_model(model, data, progress=False)

    def extremes(weight) -> tuple[float, float]:
        """Largest and smallest accumulator value over all signed 8-bit inputs in [-128, 127]."""
        w = (weight.value / weight.scale).round()
        pos, neg = w.clamp(min=0), (-w).clamp(min=0)
        return float((127 * pos + 128 * neg).sum(1).max()), float(-(128 * pos + 127 * neg).sum(1).max())

    top, bottom = extremes(quant[0].quant_weight())
    assert top <= 2 ** (bits - 1) - 1 and bottom >= -(2 ** (bits - 1))
    plain = (
        ModelQuantizer(extension_config([], [], bits=8))
        .quantize_model(model, data, progress=False)[0]
        .quant_weight()
    )
    assert extremes(plain)[0] > 2 ** (bits - 1) - 1  # the bound binds


def test_gpfa2q_needs_integer_inputs():
    spec = brevitas_config.QuantizationSpec()
    config = brevitas_config.Config(
        brevitas_config.QuantizationConfig(weight=spec),
        pre_quant_opt_config=[],
        algo_config=[brevitas_algos.GPFA2Q()],
    )
    with pytest.raises(
        ValueError,
        match=r"GPFA2Q bounds the accumulator from the input's integer range: layers \['0'\] need a static integer input_tensors",
    ):
        ModelQuantizer(config).quantize_model(
            nn.Sequential(nn.Linear(4, 4)), [torch.randn(2, 4)], progress=False
        )


def test_activation_equalization_apply_keeps_the_float_function():
    model = models.cnn()
    reference = logits(model, image_loader(7))
    equalized = brevitas_algos.ActivationEqualization(alpha=0.5).apply(copy.deepcopy(model), image_loader())
    assert torch.allclose(logits(equalized, image_loader(7)), reference, rtol=1e-4, atol=1e-5)
    traced = brevitas_algos.Preprocess().apply(copy.deepcopy(model))
    graph = brevitas_algos.ActivationEqualization(is_layerwise=False).apply(traced, image_loader())
    assert torch.allclose(logits(graph, image_loader(7)), reference, rtol=1e-4, atol=1e-5)


def test_graph_equalization_needs_the_traced_model():
    with pytest.raises(
        ValueError,
        match=r"ActivationEqualization\(is_layerwise=False\) .*\(put Preprocess\(\) before it\), got Sequential",
    ):
        brevitas_algos.ActivationEqualization(is_layerwise=False).apply(models.cnn(), image_loader())


def test_bias_correction_removes_the_mean_output_shift():
    model = models.cnn()
    reference = logits(model, image_loader())
    plain = ModelQuantizer(extension_config([], [], bits=3)).quantize_model(model, image_loader(), progress=False)
    corrected = ModelQuantizer(
        extension_config([], [brevitas_algos.BiasCorrection()], bits=3)
    ).quantize_model(model, image_loader(), progress=False)
    shift = lambda m: float((logits(m, image_loader()) - reference).mean(0).abs().mean())
    assert shift(corrected) < 0.5 * shift(plain)


def test_calibrate_batch_norm_updates_the_statistics():
    torch.manual_seed(0)
    model = nn.Sequential(
        nn.Conv2d(3, 8, 3), nn.BatchNorm2d(8), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 36, 10)
    ).eval()
    before = model[1].running_mean.clone()
    quant = ModelQuantizer(extension_config([], [brevitas_algos.CalibrateBatchNorm()])).quantize_model(
        model, image_loader(), progress=False
    )
    assert not torch.equal(quant[1].running_mean, before)
    assert torch.equal(model[1].running_mean, before)  # the caller's model is untouched


def test_apply_on_a_quantized_model_with_a_raw_loader():
    quant = ModelQuantizer(extension_config([], [])).quantize_model(models.cnn(), image_loader(), progress=False)
    weight = quant[4].weight.clone()
    out = brevitas_algos.GPTQ().apply(quant, image_loader())
    assert out is quant and not torch.equal(quant[4].weight, weight)


# -- data forms ----------------------------------------------------------------------------------


def test_every_data_form_gives_the_same_gptq_result():
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 16)).eval()
    x = torch.randn(4, 8, 16)
    forms = {
        "tensors": list(x),
        "tuples": [(t, torch.zeros(8)) for t in x],
        "lists": [[t] for t in x],
        "dicts": [{"input": t} for t in x],
        "DataLoader": DataLoader(TensorDataset(x.reshape(-1, 16)), batch_size=8),
    }
    spec = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=8)
    config = Config(
        QuantizationConfig(weight=spec),
        algo_config=[GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)],
    )
    weights = {
        name: ModelQuantizer(config).quantize_model(model, data, progress=False)[0].weight
        for name, data in forms.items()
    }
    for name, weight in weights.items():
        assert torch.equal(weight, weights["tensors"]), name


def test_token_id_dicts_with_masks_reach_the_blocks():
    model, data = models.llama(), models.token_batches()
    spec = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16)
    config = Config(
        QuantizationConfig(weight=spec),
        algo_config=[GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)],
    )
    quant = ModelQuantizer(config).quantize_model(model, data, num_calib_batches=2, progress=False)
    assert torch.isfinite(quant(**data[0])).all()
    # GPTQ saw the blocks' inputs: it moved weights of every block away from round-to-nearest
    rtn = ModelQuantizer(Config(QuantizationConfig(weight=spec))).quantize_model(model, data, progress=False)
    for block in range(len(model.layers)):
        down = f"layers.{block}.down_proj"
        assert not torch.equal(quant.get_submodule(down).quant_weight().value, rtn.get_submodule(down).quant_weight().value)


# -- GPT-2 (transformers' Conv1D) ------------------------------------------------------------------


def gpt2_data():
    return [
        {"input_ids": b["input_ids"], "attention_mask": b["attention_mask"]} for b in models.token_batches()
    ]


@torch.no_grad()
def hidden(model, data):
    return torch.cat([model(**b).last_hidden_state for b in data])


def test_gpt2_conv1d_layers_are_quantized_like_linear():
    model, data = models.gpt2(), gpt2_data()
    spec = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0)
    quantizer = ModelQuantizer(Config(QuantizationConfig(weight=spec)))
    quant = quantizer.quantize_model(model, data, progress=False)
    assert len(quantizer.plans) == 8 and all(
        p.module_type is nn.Linear for p in quantizer.plans
    )  # 2 blocks x 4 Conv1D
    assert type(model.h[0].attn.c_attn).__name__ == "Conv1D"  # the caller's model keeps its layers
    reference = hidden(model, data)
    assert float((hidden(quant, data) - reference).abs().max()) < 0.02 * float(reference.abs().max())
    assert not torch.equal(hidden(quant, data), reference)  # quantized: the bound above alone a float model meets


def test_gpt2_smoothquant_and_gptq():
    model, data = models.gpt2(), gpt2_data()
    reference = hidden(model, data)
    smoothed = SmoothQuantConfig(alpha=0.5).apply(copy.deepcopy(model), data)
    assert torch.allclose(hidden(smoothed, data), reference, rtol=1e-4, atol=1e-4)
    assert not torch.equal(smoothed.h[0].mlp.c_fc.weight, model.h[0].mlp.c_fc.weight)  # ln_2 -> c_fc folded
    spec = QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=16)
    rtn = ModelQuantizer(Config(QuantizationConfig(weight=spec))).quantize_model(model, data, progress=False)
    config = Config(
        QuantizationConfig(weight=spec),
        algo_config=[GPTQConfig(bit=None, sym=None, group_size=None, desc_act=False)],
    )
    gptq = ModelQuantizer(config).quantize_model(model, data, progress=False)
    error = lambda m: float((hidden(m, data) - reference).pow(2).mean())
    assert error(gptq) < error(rtn)


def test_one_block_model_returning_a_model_output_is_smoothed_as_one_block():
    """One decoder layer: the whole model is the block, and its output is a transformers
    ``ModelOutput`` (a dict), not a tensor: the pairs are checked on its tensors (this crashed with
    "'BaseModelOutputWithPastAndCrossAttentions' object has no attribute 'device'")."""
    model, data = models.gpt2(layers=1), gpt2_data()
    reference = hidden(model, data)
    smoothed = SmoothQuantConfig(alpha=0.5).apply(copy.deepcopy(model), data)
    assert torch.allclose(hidden(smoothed, data), reference, rtol=1e-4, atol=1e-4)
    assert not torch.equal(smoothed.h[0].mlp.c_fc.weight, model.h[0].mlp.c_fc.weight)


def test_a_block_without_float_outputs_is_named():
    class Labels(nn.Module):
        def __init__(self):
            super().__init__()
            self.norm, self.fc = nn.LayerNorm(8), nn.Linear(8, 4)

        def forward(self, x):
            return self.fc(self.norm(x)).argmax(-1)

    model = Labels()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(TypeError, match=r"block 'Labels' returned Tensor without a float tensor"):
        SmoothQuantConfig(alpha=0.5).apply(model, [torch.randn(4, 8)])
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())
