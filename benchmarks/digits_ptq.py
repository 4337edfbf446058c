"""PTQ accuracy on the digits CNN: float vs quantized test accuracy for several configs.

For each training seed, trains the CNN of ``quark.torch.examples.digits`` on the real
scikit-learn digits, quantizes it with every config below (calibration: the training split) and
measures test accuracy. Prints one row per config with the accuracy drop per seed and its median.

    .venv/bin/python benchmarks/digits_ptq.py [--seeds 0 1 2]
"""

from __future__ import annotations

import argparse
import statistics
import time

import quark.torch.extensions.brevitas.config as bcfg
from quark.torch.examples import digits
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, RoundType, ScaleType
from quark.torch.quantization.observer import (
    PerChannelMinMaxObserver,
    PerTensorMinMaxObserver,
    PerTensorMSEObserver,
    PerTensorPercentileObserver,
)


def spec(dtype, qscheme=QSchemeType.per_tensor, **kw):
    observer = kw.pop("observer", PerChannelMinMaxObserver if qscheme is QSchemeType.per_channel else PerTensorMinMaxObserver)
    ch_axis = 0 if qscheme is not QSchemeType.per_tensor else None
    return QuantizationSpec(dtype=dtype, qscheme=qscheme, observer_cls=observer, ch_axis=ch_axis,
                            symmetric=kw.pop("symmetric", True), round_method=RoundType.half_even, **kw)


def main_api(weight, inputs):
    return Config(global_quant_config=QuantizationConfig(weight=weight, input_tensors=inputs))


def extension(weight, inputs, preprocess=True):
    extra = {} if preprocess else {"pre_quant_opt_config": []}
    return bcfg.Config(global_quant_config=bcfg.QuantizationConfig(weight=weight, input_tensors=inputs), **extra)


CONFIGS = {
    "W8A8 per-tensor (main API)": main_api(spec(Dtype.int8), spec(Dtype.int8)),
    "W8A8 per-tensor (extension, Preprocess)": extension(bcfg.QuantizationSpec(), bcfg.QuantizationSpec()),
    "W8A8 per-tensor pof2 (main API)": main_api(spec(Dtype.int8, scale_type=ScaleType.pof2),
                                                spec(Dtype.int8, scale_type=ScaleType.pof2)),
    "W8A8 asym uint8 (main API)": main_api(spec(Dtype.int8), spec(Dtype.uint8, symmetric=False)),
    "W4 per-channel / A8 (main API)": main_api(spec(Dtype.int4, QSchemeType.per_channel), spec(Dtype.int8)),
    "W4 per-channel / A8 (extension, Preprocess)": extension(
        bcfg.QuantizationSpec(bit_width=4, qscheme=QSchemeType.per_channel), bcfg.QuantizationSpec()),
    "W4 per-channel / A8 MSE (main API)": main_api(spec(Dtype.int4, QSchemeType.per_channel),
                                                   spec(Dtype.int8, observer=PerTensorMSEObserver)),
    "W4 per-channel / A8 percentile (main API)": main_api(spec(Dtype.int4, QSchemeType.per_channel),
                                                          spec(Dtype.int8, observer=PerTensorPercentileObserver)),
    "W4 per-tensor / A4 (main API)": main_api(spec(Dtype.int4), spec(Dtype.int4)),
}


def run(seeds: list[int]) -> None:
    results: dict[str, list[float]] = {name: [] for name in CONFIGS}
    times: dict[str, list[float]] = {name: [] for name in CONFIGS}
    floats = []
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        float_acc = digits.accuracy(model, data)
        floats.append(float_acc)
        calib = data.loader("train", batch_size=64)
        for name, config in CONFIGS.items():
            start = time.perf_counter()
            qmodel = ModelQuantizer(config).quantize_model(model, calib, progress=False)
            times[name].append(time.perf_counter() - start)
            results[name].append(digits.accuracy(qmodel, data) - float_acc)
    print(f"digits CNN, {len(data.test)} test images, seeds {seeds}; float accuracy per seed: "
          + ", ".join(f"{a:.2f}%" for a in floats))
    width = max(map(len, CONFIGS))
    print(f"{'config':<{width}}  {'accuracy change per seed (points)':<36}  median   quantize s (median)")
    for name in CONFIGS:
        per_seed = ", ".join(f"{d:+.2f}" for d in results[name])
        print(f"{name:<{width}}  {per_seed:<36}  {statistics.median(results[name]):+.2f}   "
              f"{statistics.median(times[name]):.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run(parser.parse_args().seeds)
