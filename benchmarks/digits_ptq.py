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


def measure(seeds: list[int], configs: list[str] | None = None) -> dict:
    """Float test accuracy per seed; per config, the accuracy change (points) and quantize wall
    time (s) per seed, with their medians."""
    names = list(CONFIGS) if configs is None else configs
    results: dict[str, list[float]] = {name: [] for name in names}
    times: dict[str, list[float]] = {name: [] for name in names}
    floats = []
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        float_acc = digits.accuracy(model, data)
        floats.append(float_acc)
        calib = data.loader("train", batch_size=64)
        for name in names:
            start = time.perf_counter()
            qmodel = ModelQuantizer(CONFIGS[name]).quantize_model(model, calib, progress=False)
            times[name].append(time.perf_counter() - start)
            results[name].append(digits.accuracy(qmodel, data) - float_acc)
    return {
        "test_images": len(data.test),
        "seeds": seeds,
        "float_accuracy": floats,
        "configs": {
            name: {
                "accuracy_change": results[name],
                "accuracy_change_median": statistics.median(results[name]),
                "quantize_s": times[name],
                "quantize_s_median": statistics.median(times[name]),
            }
            for name in names
        },
    }


def bit_sweep(seeds: list[int], bits: list[int]) -> dict:
    """Test accuracy (mean over seeds) against bit width: weights per channel and inputs per tensor
    at the same width (W{b}A{b}), and weights alone at that width with 8-bit inputs (W{b}A8);
    the extension's config (int quantization, float scales, Preprocess)."""
    def config(w: int, a: int) -> bcfg.Config:
        return extension(bcfg.QuantizationSpec(bit_width=w, qscheme=QSchemeType.per_channel),
                         bcfg.QuantizationSpec(bit_width=a))

    series: dict[str, dict[int, list[float]]] = {"W{b}A{b}": {}, "W{b}A8": {}}
    floats = []
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        floats.append(digits.accuracy(model, data))
        calib = data.loader("train", batch_size=64)
        for b in bits:
            for name, cfg in (("W{b}A{b}", config(b, b)), ("W{b}A8", config(b, 8))):
                qmodel = ModelQuantizer(cfg).quantize_model(model, calib, progress=False)
                series[name].setdefault(b, []).append(digits.accuracy(qmodel, data))
    return {
        "seeds": seeds,
        "float_accuracy": statistics.mean(floats),
        "bits": bits,
        "accuracy": {name: [statistics.mean(per_bit[b]) for b in bits] for name, per_bit in series.items()},
    }


def run(seeds: list[int]) -> None:
    result = measure(seeds)
    print(f"digits CNN, {result['test_images']} test images, seeds {seeds}; float accuracy per seed: "
          + ", ".join(f"{a:.2f}%" for a in result["float_accuracy"]))
    width = max(map(len, CONFIGS))
    print(f"{'config':<{width}}  {'accuracy change per seed (points)':<36}  median   quantize s (median)")
    for name, row in result["configs"].items():
        per_seed = ", ".join(f"{d:+.2f}" for d in row["accuracy_change"])
        print(f"{name:<{width}}  {per_seed:<36}  {row['accuracy_change_median']:+.2f}   "
              f"{row['quantize_s_median']:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    run(parser.parse_args().seeds)
