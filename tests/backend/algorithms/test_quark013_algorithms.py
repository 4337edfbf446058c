"""AMD Quark 0.13's newer algorithm configs: QronosConfig and RotationConfig's online rotations run
on Brevitas; what no backend here runs (GPTAQConfig, AutoSmoothQuantConfig, SVDQuantConfig,
AutoRoundConfig, RotationConfig's offline R1 / R2 / R3 / training) is refused by name when used,
with the reason and what to use instead, before the model is touched."""

from __future__ import annotations

import copy
import math

import pytest
import torch
from _shared import models
from _shared.configs import U4G16, algo_config
from _shared.models import error, outputs
from _shared.quantize import quantize
from torch import nn

from quark.torch.extensions.brevitas import algos
from quark.torch.extensions.brevitas._backend.algorithms import gpxq
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import (
    AutoRoundConfig,
    AutoSmoothQuantConfig,
    Config,
    GPTAQConfig,
    OnlineRotationConfig,
    QronosConfig,
    QuantizationConfig,
    QuantizationSpec,
    RotationConfig,
    SVDQuantConfig,
)
from quark.torch.quantization.config.type import Dtype

W8 = QuantizationSpec(dtype=Dtype.int8)
BERT_LINEARS = ["attention.query", "attention.key", "attention.value", "attention.out", "intermediate", "output"]


def _online_r1(**kw) -> RotationConfig:
    entry = {"target_modules": [f"layers.layer_id.{n}" for n in BERT_LINEARS]}
    return RotationConfig(
        scaling_layers={"first_layer": [entry], "middle_layers": [entry]},
        model_decoder_layers="layers",
        online_r1_rotation=True,
        **kw,
    )


def test_qronos_config_maps_onto_brevitas_qronos():
    """QronosConfig on every Linear of each block, with Brevitas' block size and beta, is the
    extension's Qronos bit for bit (same alpha, same column order)."""
    model, data, test = models.bert(), models.token_batches(8), models.token_batches(4, seed=7)
    columns = {m.in_features for m in model.modules() if isinstance(m, nn.Linear)}
    assert columns == {32, 64}  # Brevitas' default: blocks of ceil(columns / 100) = 1 column
    quark = QronosConfig(
        inside_layer_modules=[f"{n}" for n in BERT_LINEARS], model_decoder_layers="layers", desc_act=False, alpha=1e-6, block_size=1
    )
    a = quantize(algo_config(U4G16, post=[quark]), model, data)
    b = quantize(algo_config(U4G16, post=[algos.Qronos(act_order=False, alpha=1e-6)]), model, data)
    assert torch.equal(outputs(a, test), outputs(b, test))


def test_qronos_config_passes_beta_and_block_size_and_beats_rtn(monkeypatch):
    seen = []
    original = gpxq._FrozenQronos.single_layer_update

    def spy(self, beta=None):
        seen.append((self.beta, self.blocksize))
        return original(self, beta)

    monkeypatch.setattr(gpxq._FrozenQronos, "single_layer_update", spy)
    model, data, test = models.bert(), models.token_batches(8), models.token_batches(4, seed=7)
    reference = outputs(model, test)
    config = QronosConfig(inside_layer_modules=["attention.*", "output"], model_decoder_layers="layers", beta=1e3, block_size=8)
    qronos = quantize(algo_config(U4G16, post=[config]), model, data)
    assert seen and set(seen) == {(1e3, 8)} and len(seen) == 2 * 5  # 2 blocks x 5 layers in scope
    assert error(qronos, reference, test) < 0.9 * error(quantize(algo_config(U4G16), model, data), reference, test)


def test_qronos_config_checks_as_quark():
    with pytest.raises(ValueError, match=r"desc_act=True with static_groups=False is not supported"):
        QronosConfig(inside_layer_modules=["x"], model_decoder_layers="m", static_groups=False)
    config = QronosConfig(inside_layer_modules=["nope"], model_decoder_layers="layers", desc_act=False)
    with pytest.raises(ValueError, match=r"QronosConfig\.inside_layer_modules \['nope'\] match no layer"):
        quantize(algo_config(U4G16, post=[config]), models.bert(), models.token_batches(2))
    assert Config.from_dict(Config(QuantizationConfig(weight=W8), algo_config=[config]).to_dict()).algo_config == [config]


def test_rotation_config_online_r1_rotates_the_target_modules_and_keeps_the_function():
    model, data = models.bert(), models.token_batches(4)
    reference = outputs(model, data)
    rotated = _online_r1().apply(copy.deepcopy(model))
    wrapped = sorted(n for n, m in rotated.named_modules() if type(m).__name__ == "RotatedModule")
    assert wrapped == sorted(f"layers.{i}.{n}" for i in range(2) for n in BERT_LINEARS)
    torch.testing.assert_close(outputs(rotated, data), reference, rtol=1e-4, atol=1e-4)
    # as HadamardRotation on the same layers
    same = algos.HadamardRotation(layers=wrapped).apply(copy.deepcopy(model))
    assert torch.equal(outputs(rotated, data), outputs(same, data))


def test_rotation_config_r4_rotates_each_down_projection():
    """R4: in front of <model_decoder_layers>.<i>.<mlp>.down_proj (Quark's Llama layout)."""
    model = nn.Module()
    model.layers = nn.ModuleList()
    for _ in range(2):
        block = nn.Module()
        block.mlp = nn.Module()
        block.mlp.down_proj = nn.Linear(64, 32)
        model.layers.append(block)
    rotated = RotationConfig(scaling_layers={}, r1=False, r4=True, model_decoder_layers="layers").apply(model)
    wrapped = sorted(n for n, m in rotated.named_modules() if type(m).__name__ == "RotatedModule")
    assert wrapped == ["layers.0.mlp.down_proj", "layers.1.mlp.down_proj"]
    with pytest.raises(ValueError, match=r"RotationConfig names layers that are no torch\.nn\.Linear of the model: \['layers\.0\.ffn\.down_proj'"):
        RotationConfig(scaling_layers={}, r1=False, r4=True, model_decoder_layers="layers", mlp="ffn").apply(models.llama())


@pytest.mark.parametrize(
    "config, match",
    [
        (RotationConfig(scaling_layers={}), r"online_r1_rotation=False \(with r1=True\) is not supported; allowed: True"),
        (_online_r1(r2=True), r"RotationConfig\.r2=True is not supported; allowed: False \(R2, fused into v_proj"),
        (_online_r1(r3=True), r"RotationConfig\.r3=True is not supported; allowed: False \(R3 rotates the KV cache"),
        (_online_r1(rotation_size=16), r"RotationConfig\.rotation_size=16 is not supported; allowed: None"),
        (_online_r1(random_r1=True), r"RotationConfig\.random_r1=True is not supported"),
        (_online_r1(trainable=True), r"RotationConfig\.trainable=True is not supported"),
        (
            _online_r1(online_config=OnlineRotationConfig(shared_parallel=True, online_rotation_layers=["x"])),
            r"RotationConfig\.online_config=.* is not supported; allowed: None or OnlineRotationConfig\(online_rotation_layers=None\)",
        ),
    ],
)
def test_rotation_config_refuses_what_it_cannot_run_before_touching_the_model(config, match):
    with pytest.raises(ValueError, match=match):
        ModelQuantizer(Config(QuantizationConfig(weight=W8), pre_quant_opt_config=[config]))
    with pytest.raises(ValueError, match=match):
        config.apply(models.bert())


@pytest.mark.parametrize(
    "config, match",
    [
        (GPTAQConfig(), r"GPTAQConfig \(name='gptaq'\) is not supported: Brevitas 0\.13\.4 has no GPTAQ; use QronosConfig"),
        (AutoSmoothQuantConfig(), r"AutoSmoothQuantConfig \(name='autosmoothquant'\) is not supported: .*use SmoothQuantConfig"),
        (SVDQuantConfig(), r"SVDQuantConfig \(name='svdquant'\) is not supported: .*use SmoothQuantConfig with GPTQConfig"),
        (AutoRoundConfig(iters=200, lr=0.005), r"AutoRoundConfig \(name='autoround'\) is not supported: .*use GPTQConfig or QronosConfig"),
    ],
)
def test_configs_without_a_brevitas_algorithm_are_refused_by_name(config, match):
    with pytest.raises(NotImplementedError, match=match):
        ModelQuantizer(Config(QuantizationConfig(weight=W8), algo_config=[config]))
    with pytest.raises(NotImplementedError, match=match):
        config.apply(nn.Linear(2, 2), [torch.zeros(1, 2)])


def test_refused_configs_still_build_compare_and_serialise():
    for config in (GPTAQConfig(alpha=0.5), AutoSmoothQuantConfig(compute_scale_loss="MAE"), SVDQuantConfig(svd_rank=8)):
        full = Config(QuantizationConfig(weight=W8), algo_config=[config])
        assert Config.from_dict(full.to_dict()).algo_config == [config]
    assert AutoRoundConfig(iters=10).to_dict() == {"name": "autoround", "iters": 10}
    with pytest.raises(ValueError, match=r"GPTAQConfig\.desc_act=True with static_groups=False is not supported"):
        GPTAQConfig(static_groups=False)
    assert math.isclose(GPTAQConfig().alpha, 0.25)


def test_inside_layer_modules_name_rotated_layers_as_before_the_rotation():
    """RotationConfig then QronosConfig, as Quark writes them: the rotated layers (Brevitas wraps
    each in a RotatedModule, ``query`` -> ``query.layer``) are still named by their first names."""
    model, data = models.bert(), models.token_batches(4)
    qronos = QronosConfig(inside_layer_modules=["attention.query"], model_decoder_layers="layers", desc_act=False)
    quantized = quantize(algo_config(U4G16, pre=[_online_r1()], post=[qronos]), model, data)
    assert type(quantized.layers[0].attention.query).__name__ == "RotatedModule"
    rtn = quantize(algo_config(U4G16, pre=[_online_r1()]), model, data)
    weights = lambda m: m.layers[0].attention.query.layer.quant_weight().value
    assert not torch.equal(weights(quantized), weights(rtn))  # Qronos rounded the rotated query
    assert torch.equal(quantized.layers[0].attention.key.layer.quant_weight().value, rtn.layers[0].attention.key.layer.quant_weight().value)
