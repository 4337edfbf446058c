"""Configs written as AMD Quark 0.13 writes them (examples/quark013_configs.py) quantize a small CNN
unchanged, each layer getting the format its config names."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.api import ModelQuantizer

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "quark013_configs.py"
spec = importlib.util.spec_from_file_location("quark013_configs", EXAMPLE)
module = importlib.util.module_from_spec(spec)
spec.loader.exec_module(module)
CONFIGS = module.quark013_configs()

#: config name -> what the summary says the first Linear's weight and input got
EXPECTED_LINEAR = {
    "W8A8 int8, percentile inputs": ("int8 sym per_channel axis=0 float minmax", "uint8 asym per_tensor float percentile"),
    "W8A8 int8, power-of-two scales": ("int8 sym per_tensor pof2", "int8 sym per_tensor pof2"),
    "FP8 e4m3": ("fp8_e4m3", "fp8_e4m3"),
    "bfloat16": ("bfloat16 cast", "bfloat16 cast"),
    "Linear: W4 per group 32": ("int4 sym per_group axis=1 g=32", "uint8 asym per_tensor"),
    "Linear: OCP MXFP4": ("mx fp4 block 32 e8m0 even", "mx fp4 block 32 e8m0 even dynamic"),
    "Linear: OCP MXINT8": ("mx int8 block 32 e8m0 even", "mx int8 block 32 e8m0 even dynamic"),
    "Linear: MXFP8 QTensorConfig by hand": ("mx fp8_e4m3 block 32 e8m0 even", "mx fp8_e4m3 block 32 e8m0 even dynamic"),
    "Linear: MX6": ("mx6 block 16", "mx6 block 16"),
    "Linear: BFP16": ("bfp16 block 8", "bfp16 block 8"),
}


def test_every_config_is_checked():
    assert set(CONFIGS) == set(EXPECTED_LINEAR)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_quark013_config_quantizes_a_small_cnn(name):
    torch.manual_seed(0)
    model = digits.cnn().eval()
    calib = [torch.rand(8, 1, 8, 8) for _ in range(2)]
    quantizer = ModelQuantizer(CONFIGS[name])
    quantized = quantizer.quantize_model(model, calib, progress=False)
    linear = next(p for p in quantizer.plans if p.module_type is torch.nn.Linear)
    weight, inputs = EXPECTED_LINEAR[name]
    assert linear.specs["weight"].describe().startswith(weight)
    assert linear.specs["input_tensors"].describe().startswith(inputs)
    assert len(quantizer.plans) == 4  # two convolutions, two Linear layers
    out = quantized(calib[0])
    assert out.shape == (8, 10) and bool(torch.isfinite(out).all())
