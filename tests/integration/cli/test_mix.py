"""A8/A16 mixing (issue 22): the metrics against their formulas, the search on a model with one
sensitive site, the mixed config reproducing the reported metric, the command line, and the errors."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
import yaml

from integration.cli.cli_models import outlier_mlp
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend import mixing as numerics
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.extensions.brevitas.cli import main
from quark.torch.extensions.brevitas.mixing import mix, widened
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype


def _data(seed: int, batches: int = 4) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(16, 1, 4, 4, generator=g) for _ in range(batches)]


def test_metrics_follow_their_formulas():
    g = np.random.default_rng(0)
    ref, cand = g.standard_normal((5, 3, 4)), g.standard_normal((5, 3, 4))
    a, b = ref.reshape(5, -1), cand.reshape(5, -1)
    cosine = np.mean(np.sum(a * b, 1) / (np.linalg.norm(a, axis=1) * np.linalg.norm(b, axis=1)))
    sqnr = 10 * np.log10(np.sum(ref**2) / np.sum((ref - cand) ** 2))
    assert numerics.cosine(torch.from_numpy(ref), torch.from_numpy(cand)) == pytest.approx(cosine, rel=1e-12)
    assert numerics.sqnr(torch.from_numpy(ref), torch.from_numpy(cand)) == pytest.approx(sqnr, rel=1e-12)
    assert numerics.sqnr(torch.ones(3), torch.ones(3)) == math.inf


@pytest.fixture(scope="module")
def searched():
    model = outlier_mlp()
    calib, evaluation = _data(0), _data(1)
    eight = ModelQuantizer(presets.a8w8()).quantize_model(model, calib, progress=False)
    sixteen = ModelQuantizer(presets.a16w8()).quantize_model(model, calib, progress=False)
    reference = numerics.outputs(model, evaluation, numerics.first_output)
    low = numerics.sqnr(reference, numerics.outputs(eight, evaluation, numerics.first_output))
    high = numerics.sqnr(reference, numerics.outputs(sixteen, evaluation, numerics.first_output))
    target = low + 0.3 * (high - low)  # measured: the second layer's input alone gives 0.49 of the way
    return model, calib, evaluation, target, mix(presets.a8w8(), model, calib, evaluation, metric="sqnr", target=target)


def test_mixing_promotes_the_sensitive_site_only(searched):
    _, _, _, target, result = searched
    assert result.met and result.metric_8bit < target <= result.metric_mixed
    assert result.sites[0].name == "3"  # the layer after the outlier unit is the most sensitive
    assert result.promoted == ["3"] and result.fraction_16bit == pytest.approx(1 / 3)
    assert [s.elements for s in sorted(result.sites, key=lambda s: s.name)] == [16, 32, 32]  # values per sample
    base, mixed = result.bytes_per_sample
    assert (base, mixed) == (80, 112) and "promoted 3" in str(result)


def test_the_mixed_config_is_a8w8_plus_one_16_bit_entry_and_reproduces_the_metric(searched):
    model, calib, evaluation, _, result = searched
    entry = result.config.layer_quant_config["3"]
    assert entry.input_tensors == widened(presets.a8w8().global_quant_config.input_tensors)
    assert entry.input_tensors.dtype is Dtype.uint16 and entry.weight is None
    again = ModelQuantizer(Config.from_dict(result.config.to_dict())).quantize_model(model, calib, progress=False)
    reference = numerics.outputs(model, evaluation, numerics.first_output)
    assert numerics.sqnr(reference, numerics.outputs(again, evaluation, numerics.first_output)) == result.metric_mixed


def test_a_target_near_the_16_bit_end_ranks_sites_by_demotion_losses():
    """auto: the target nearer the all-16-bit metric, each site's loss when it alone goes back to 8 bits."""
    model, calib, evaluation = outlier_mlp(), _data(0), _data(1)
    plain = mix(presets.a8w8(), model, calib, evaluation, metric="sqnr", target=-1e9)
    target = plain.metric_8bit + 0.95 * (plain.metric_16bit - plain.metric_8bit)
    result = mix(presets.a8w8(), model, calib, evaluation, metric="sqnr", target=target)
    assert result.ranking == "demotion" and result.met and "sensitivities by demotion" in str(result)
    narrow = ModelQuantizer(presets.a8w8()).quantize_model(model, calib, progress=False)
    wide = ModelQuantizer(presets.a16w8()).quantize_model(model, calib, progress=False)
    reference = numerics.outputs(model, calib, numerics.first_output)
    names = [s.name for s in result.sites]

    def sqnr(promoted):
        with numerics.Swap(narrow, wide, promoted):
            return numerics.sqnr(reference, numerics.outputs(narrow, calib, numerics.first_output))

    losses = {n: sqnr(names) - sqnr([m for m in names if m != n]) for n in names}
    assert {s.name: s.gain for s in result.sites} == pytest.approx(losses, rel=1e-9)
    assert [s.gain for s in result.sites] == sorted(losses.values(), reverse=True)
    forced = mix(presets.a8w8(), model, calib, evaluation, metric="sqnr", target=target, ranking="promotion")
    assert forced.ranking == "promotion" and forced.met


def test_a_target_no_mix_reaches_is_reported_not_met(caplog):
    result = mix(presets.a8w8(), outlier_mlp(), _data(0), _data(1), metric="sqnr", target=1e9)
    assert not result.met and len(result.promoted) == 3
    assert "below the target 1e+09" in caplog.text


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"metric": "l2"}, ValueError, r"mix\(metric='l2'\): allowed \['cosine', 'sqnr'\] or a callable"),
        ({"target": "high"}, TypeError, r"mix\(target='high'\): expected a number"),
        ({"sensitivity_batches": 0}, ValueError, r"mix\(sensitivity_batches=0\): expected a positive integer or None"),
        ({"ranking": "random"}, ValueError, r"mix\(ranking='random'\): allowed 'auto', 'promotion', 'demotion'"),
        (
            {"config": Config(QuantizationConfig(input_tensors=QuantizationSpec(dtype=Dtype.fp8_e4m3)))},
            ValueError,
            r"mix: input_tensors has dtype <Dtype.fp8_e4m3.*promotes 8-bit integer activation specs \(int8, uint8\)",
        ),
    ],
)
def test_mix_arguments_are_checked(kwargs, error, match):
    args = {"config": presets.a8w8(), "metric": "cosine", "target": 0.9} | kwargs
    with pytest.raises(error, match=match):
        mix(args.pop("config"), outlier_mlp(), _data(0), _data(1), **args)


def test_command_line_writes_the_mixed_config(tmp_path, capsys):
    for name, seed in (("calib", 0), ("eval", 1)):
        np.savez(tmp_path / f"{name}.npz", images=torch.cat(_data(seed)).numpy())
    presets.a8w8().save(tmp_path / "a8w8.yaml")
    args = ["mix", "--config", tmp_path / "a8w8.yaml", "--model", "integration.cli.cli_models:outlier_mlp", "--data", tmp_path / "calib.npz"]
    args += ["--eval-data", tmp_path / "eval.npz", "--metric", "sqnr", "--ranking", "promotion", "--batch-size", 16, "-q"]
    assert main([str(a) for a in [*args, "--target", 1e9, "-o", tmp_path / "none.yaml"]]) == 1  # not met
    assert main([str(a) for a in [*args, "--target", 0, "-o", tmp_path / "mixed.yaml"]]) == 0
    written = yaml.safe_load((tmp_path / "mixed.yaml").read_text())
    assert written["layer_quant_config"] == {}  # 8 bits already meet 0 dB: nothing promoted
    assert "sites at 16 bits: 0 of 3" in capsys.readouterr().out
