"""The algorithms on tiny synthetic models: SmoothQuant keeps the float function, GPTQ / GPFQ / AWQ
beat round-to-nearest on the same quantizer, every error names what to change."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
from _shared import models
from _shared.configs import FROM_SPEC, U4G16, W4C, W4G16, W4T, algo_config
from _shared.models import ONE_LAYER, error, layer_data, outputs
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas._backend.algorithms import frozen, pairs
from quark.torch.extensions.brevitas._backend.algorithms.blocks import Block, find_blocks
from quark.torch.extensions.brevitas._backend.algorithms.smoothquant import smoothquant
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.algorithms import GPFQ, AWQConfig, GPTQConfig, SmoothQuantConfig
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType

# -- SmoothQuant: the float function is unchanged ---------------------------------------------------


@pytest.mark.parametrize("build", [models.bert, models.llama])
def test_smoothquant_keeps_the_float_function(build):
    model, data = build(), models.token_batches()
    reference = outputs(model, data)
    smoothed = smoothquant(SmoothQuantConfig(alpha=0.5), copy.deepcopy(model), data)
    assert torch.allclose(outputs(smoothed, data), reference, rtol=1e-4, atol=1e-4)
    assert any(not torch.equal(a, b) for a, b in zip(smoothed.parameters(), model.parameters()))


def test_discovery_pairs_a_llama_block_fully():
    model, data = models.llama(), models.token_batches()
    block = find_blocks(model, None, "test")[0]
    assert block.name == "layers.0"
    inputs = [
        ((model.embed(b["input_ids"]) * model.boost,), {"attention_mask": b["attention_mask"]}) for b in data
    ]
    found, unpaired = pairs.discover(block, inputs, SmoothQuantConfig())
    assert {(p.prev, p.layers) for p in found} == {
        ("input_layernorm", ("self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj")),
        ("self_attn.v_proj", ("self_attn.o_proj",)),
        ("post_attention_layernorm", ("gate_proj", "up_proj")),
        ("up_proj", ("down_proj",)),
    }
    assert unpaired == []


def test_post_norm_bert_pairs_only_v_to_out_and_warns_about_the_rest(caplog):
    model, data = models.bert(), models.token_batches()
    with caplog.at_level(logging.WARNING):
        smoothquant(SmoothQuantConfig(), copy.deepcopy(model), data)
    (message,) = [
        r.getMessage() for r in caplog.records if "no function-preserving scaling pair" in r.getMessage()
    ]
    assert "'layers.0.attention.query'" in message and "'layers.1.output'" in message
    assert "attention.out" not in message  # value -> out folds through the attention


def test_smoothquant_on_a_cnn_folds_through_relu():
    model, data = models.cnn(), models.image_batches()
    reference = outputs(model, data)
    smoothed = smoothquant(SmoothQuantConfig(alpha=0.5), copy.deepcopy(model), data)
    assert torch.allclose(outputs(smoothed, data), reference, rtol=1e-4, atol=1e-5)
    assert not torch.equal(smoothed[4].weight, model[4].weight)  # conv -> ReLU -> conv


def test_smoothquant_scaling_layers_as_quark_writes_them():
    model, data = models.llama(), models.token_batches()
    config = SmoothQuantConfig(
        alpha=0.5,
        model_decoder_layers="layers",
        scaling_layers=[
            {
                "prev_op": "input_layernorm",
                "layers": ["self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj"],
                "inp": "self_attn.q_proj",
            }
        ],
    )
    reference = outputs(model, data)
    smoothed = smoothquant(config, copy.deepcopy(model), data)
    assert torch.allclose(outputs(smoothed, data), reference, rtol=1e-4, atol=1e-4)
    assert torch.equal(smoothed.layers[0].down_proj.weight, model.layers[0].down_proj.weight)  # not listed


def test_smoothquant_reduces_w8a8_error_on_outlier_activations():
    model, data = models.llama(), models.token_batches(8)
    a8 = QuantizationSpec(dtype=Dtype.int8)
    w8 = QuantizationSpec(dtype=Dtype.int8, qscheme=QSchemeType.per_channel, ch_axis=0)
    reference = outputs(model, data)
    rtn = error(quantize(algo_config(w8, inputs=a8), model, data), reference, data)
    smooth = error(quantize(algo_config(w8, pre=[SmoothQuantConfig(alpha=0.5)], inputs=a8), model, data), reference, data)
    assert smooth < 0.7 * rtn


@pytest.mark.parametrize(
    "config, match",
    [
        (
            SmoothQuantConfig(
                scaling_layers=[{"prev_op": "norm", "layers": ["self_attn.q_proj"]}],
                model_decoder_layers="layers",
            ),
            r"SmoothQuantConfig\.scaling_layers: 'norm' is not a module of block 'layers\.0'",
        ),
        (
            SmoothQuantConfig(model_decoder_layers="model.layers"),
            r"SmoothQuantConfig\.model_decoder_layers='model\.layers' is not a ModuleList of the model; repeated blocks found: \['layers'\]",
        ),
        (
            SmoothQuantConfig(
                scaling_layers=[{"prev_op": "self_attn.v_proj", "layers": ["down_proj"]}],
                model_decoder_layers="layers",
            ),
            (
                r"self_attn\.v_proj has 32 output channels but down_proj takes 64; for grouped-query attention set "
                r"num_attention_heads and num_key_value_heads \(got -1, -1\)"
            ),
        ),
        (
            SmoothQuantConfig(
                scaling_layers=[{"prev_op": "self_attn.q_proj", "layers": ["gate_proj"]}],
                model_decoder_layers="layers",
            ),
            r"scaling_layers entry .*'self_attn\.q_proj'.* in block 'layers\.0': a scale folded there changes the float output",
        ),
        (
            SmoothQuantConfig(
                scaling_layers=[{"prev_op": "input_layernorm", "layers": ["self_attn"]}],
                model_decoder_layers="layers",
            ),
            r"\['self_attn'\] cannot take a per-channel scale",
        ),
        (
            SmoothQuantConfig(embedding_layers=["model.embed_tokens"]),
            r"SmoothQuantConfig\.embedding_layers \['model\.embed_tokens'\] are not modules of the model",
        ),
    ],
)
def test_smoothquant_errors(config, match):
    model = models.llama()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=match):
        quantize(algo_config(W4G16, pre=[config]), model, models.token_batches())
    assert all(
        torch.equal(before[k], v) for k, v in model.state_dict().items()
    )  # the caller's model is untouched


def test_grouped_query_v_to_o_pairs_with_the_head_counts():
    torch.manual_seed(0)
    block = nn.Module()
    block.v_proj, block.o_proj = nn.Linear(16, 8), nn.Linear(16, 16)  # 4 heads of 4, 2 key/value heads
    config = SmoothQuantConfig(
        scaling_layers=[{"prev_op": "v_proj", "layers": ["o_proj"]}],
        num_attention_heads=4,
        num_key_value_heads=2,
    )
    (pair,) = pairs.from_scaling_layers(config, Block("", block), "SmoothQuantConfig")
    assert pair.expand.tolist() == [0, 1, 2, 3, 0, 1, 2, 3, 4, 5, 6, 7, 4, 5, 6, 7]
    x = torch.randn(5, 16)
    v = block.v_proj(x)
    reference = block.o_proj(v[:, pair.expand])
    pairs.fold(block, pair, torch.rand(8) + 0.5)
    assert torch.allclose(block.o_proj(block.v_proj(x)[:, pair.expand]), reference, atol=1e-5)
    with pytest.raises(ValueError, match=r"set num_attention_heads and num_key_value_heads \(got -1, -1\)"):
        pairs.from_scaling_layers(
            SmoothQuantConfig(scaling_layers=config.scaling_layers), Block("", block), "SmoothQuantConfig"
        )


# -- GPTQ / AWQ beat round-to-nearest on the same quantizer ------------------------------------------


@pytest.mark.parametrize("layer", list(ONE_LAYER))
@pytest.mark.parametrize("weight", ["per_channel", "per_group", "per_tensor"])
@pytest.mark.parametrize("act_order", [False, True])
def test_gptq_beats_round_to_nearest(layer, weight, act_order):
    if weight == "per_group" and layer == "depthwise":
        pytest.skip("a depthwise kernel has one input channel: nothing to group")
    torch.manual_seed(0)
    model = ONE_LAYER[layer]().eval()
    data = layer_data(conv=layer != "linear")
    spec = {
        "per_channel": W4C,
        "per_group": W4G16
        if layer == "linear"
        else QuantizationSpec(dtype=Dtype.int4, qscheme=QSchemeType.per_group, ch_axis=1, group_size=8),
        "per_tensor": W4T,
    }[weight]
    reference = torch.cat([model(x) for x in data]).detach()
    rtn = error(quantize(algo_config(spec), model, data), reference, [(x,) for x in data])
    algo = GPTQConfig(**FROM_SPEC, desc_act=act_order, static_groups=act_order)
    gptq = quantize(algo_config(spec, post=[algo]), model, data)
    assert all(torch.isfinite(p).all() for p in gptq.parameters())
    assert error(gptq, reference, [(x,) for x in data]) < 0.8 * rtn


def test_gptq_dynamic_groups_track_the_updated_weights():
    model, data = ONE_LAYER["linear"]().eval(), layer_data()
    reference = torch.cat([model(x) for x in data]).detach()
    rtn = error(quantize(algo_config(W4G16), model, data), reference, [(x,) for x in data])
    for static in (False, True):
        gptq = quantize(algo_config(W4G16, post=[GPTQConfig(**FROM_SPEC, desc_act=False, static_groups=static)]), model, data)
        assert error(gptq, reference, [(x,) for x in data]) < 0.7 * rtn


@pytest.mark.parametrize("weight", [W4G16, U4G16, W4C, W4T])
@pytest.mark.parametrize("algo", ["gptq static", "gptq dynamic", "gptq act-order", "gpfq"])
def test_column_grid_rounds_as_brevitas_whole_weight_path(monkeypatch, weight, algo):
    """The per-column grid (the speed-up of GPTQ/GPFQ) gives the same weights as Brevitas'
    re-quantization of the whole weight for every column."""
    model, data = ONE_LAYER["linear"]().eval(), layer_data()
    post = {
        "gptq static": GPTQConfig(**FROM_SPEC, desc_act=False, static_groups=True),
        "gptq dynamic": GPTQConfig(**FROM_SPEC, desc_act=False, static_groups=False),
        "gptq act-order": GPTQConfig(**FROM_SPEC, desc_act=True, static_groups=True),
        "gpfq": GPFQ(act_order=True),
    }[algo]
    fast = quantize(algo_config(weight, post=[post]), model, data)[0].quant_weight().value
    monkeypatch.setattr(frozen.Grid, "applies", staticmethod(lambda layer: False))
    slow = quantize(algo_config(weight, post=[post]), model, data)[0].quant_weight().value
    rtn = quantize(algo_config(weight), model, data)[0].quant_weight().value
    assert not torch.equal(fast, rtn)  # the algorithm moved weights
    torch.testing.assert_close(fast, slow, rtol=0, atol=1e-6)


@pytest.mark.slow
@pytest.mark.parametrize("build", [models.bert, models.llama])
@pytest.mark.parametrize("algo", ["gptq", "awq", "gptq parallel"])
def test_algorithms_beat_round_to_nearest_on_transformer_blocks(build, algo):
    model, data, test = build(), models.token_batches(8), models.token_batches(4, seed=7)
    reference = outputs(model, test)
    post = {
        "gptq": GPTQConfig(**FROM_SPEC, desc_act=False),
        "gptq parallel": GPTQConfig(**FROM_SPEC, desc_act=False, true_sequential=False),
        "awq": AWQConfig(**FROM_SPEC),
    }[algo]
    for spec in (W4G16, U4G16):
        rtn = error(quantize(algo_config(spec), model, data), reference, test)
        assert error(quantize(algo_config(spec, post=[post]), model, data), reference, test) < 0.9 * rtn


@pytest.mark.slow
def test_awq_scale_search_alone_beats_round_to_nearest_on_llama():
    model, data, test = models.llama(), models.token_batches(8), models.token_batches(4, seed=7)
    reference = outputs(model, test)
    rtn = error(quantize(algo_config(W4C), model, data), reference, test)
    assert error(quantize(algo_config(W4C, post=[AWQConfig(**FROM_SPEC)]), model, data), reference, test) < 0.9 * rtn


def test_gptq_frozen_scales_survive_a_state_dict_round_trip():
    model, data = ONE_LAYER["linear"]().eval(), layer_data()
    config = Config(QuantizationConfig(weight=W4G16), algo_config=[GPTQConfig(**FROM_SPEC, desc_act=False)])
    first = ModelQuantizer(config).quantize_model(model, data, progress=False)
    second = ModelQuantizer(config).quantize_model(model, data[:1], progress=False)
    second.load_state_dict(first.state_dict())
    assert torch.equal(first[0].quant_weight().value, second[0].quant_weight().value)


@pytest.mark.parametrize(
    "algo, match",
    [
        (
            GPTQConfig(),
            r"GPTQConfig\.sym=False disagrees with the weight spec \(symmetric=True\) of modules 'layers\.0\.self_attn\.q_proj'.* and \d+ more; set them equal, or GPTQConfig\.sym=None",
        ),
        (
            GPTQConfig(bit=8, sym=True, group_size=16),
            r"GPTQConfig\.bit=8 disagrees with the weight spec \(bit width 4\)",
        ),
        (
            GPTQConfig(bit=4, sym=True, group_size=-1),
            r"GPTQConfig\.group_size=-1 disagrees with the weight spec \(per_group group_size=16\)",
        ),
        (
            AWQConfig(bit=4, sym=True, group_size=128),
            r"AWQConfig\.group_size=128 disagrees with the weight spec \(per_group group_size=16\)",
        ),
        (
            GPTQConfig(**FROM_SPEC, inside_layer_modules=["mlp.up_proj"], model_decoder_layers="layers"),
            r"GPTQConfig\.inside_layer_modules \['mlp\.up_proj'\] match no layer with a quantized weight under model_decoder_layers='layers'",
        ),
        (
            GPTQConfig(**FROM_SPEC, desc_act=True, static_groups=False),
            r"desc_act=True with static_groups=False on per_group weights",
        ),
        (
            GPTQConfig(**FROM_SPEC, model_decoder_layers="blocks"),
            r"GPTQConfig\.model_decoder_layers='blocks' is not a ModuleList",
        ),
    ],
)
def test_algorithm_errors_before_the_model_is_touched(algo, match):
    model = models.llama()
    before = copy.deepcopy(model.state_dict())
    with pytest.raises(ValueError, match=match):
        quantize(algo_config(W4G16, post=[algo]), model, models.token_batches())
    assert all(torch.equal(before[k], v) for k, v in model.state_dict().items())


def test_algorithms_need_data_before_anything_runs():
    with pytest.raises(
        ValueError, match=r"quantize_model: GPTQConfig needs calibration data; pass calib_loader"
    ):
        quantize(algo_config(W4G16, post=[GPTQConfig(**FROM_SPEC)]), models.llama(), None)


def test_gptq_inside_layer_modules_limits_the_layers():
    model, data = models.llama(), models.token_batches()
    plain = quantize(algo_config(W4G16), model, data)
    only = quantize(algo_config(W4G16, post=[
            GPTQConfig(
                **FROM_SPEC, desc_act=False, inside_layer_modules=["down_proj"], model_decoder_layers="layers"
            )
        ]), model, data)
    assert torch.equal(plain.layers[0].gate_proj.weight, only.layers[0].gate_proj.weight)
    assert not torch.equal(plain.layers[0].down_proj.weight, only.layers[0].down_proj.weight)
