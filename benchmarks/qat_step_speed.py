"""QAT training-step time: float vs this package (W8A8 per tensor, TQT) vs Brevitas' defaults.

A 6-conv CNN (batch 32, 3x32x32 inputs); weights and the inputs of every compute layer
quantized, 8 bits per tensor. Three variants are timed side by side, taking turns, in one run:

- float: the plain PyTorch network;
- quark TQT: ``ModelQuantizer`` with int8 power-of-two TQT thresholds on weights and inputs;
- brevitas layerwise: ``brevitas.graph.quantize.layerwise_quantize`` with its default quantizers.

Each step is forward + cross-entropy + backward + SGD update. Prints the median step time of
each variant and the ratios to float.

    .venv/bin/python benchmarks/qat_step_speed.py [--steps 60] [--threads 1]
"""

from __future__ import annotations

import argparse
import copy
import statistics
import time

import torch
from torch import nn

from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth


def cnn() -> nn.Module:
    chans = [3, 32, 32, 64, 64, 128, 128]
    layers: list[nn.Module] = []
    for i in range(6):
        layers += [nn.Conv2d(chans[i], chans[i + 1], 3, padding=1), nn.BatchNorm2d(chans[i + 1]), nn.ReLU()]
        if i % 2 == 1:
            layers.append(nn.MaxPool2d(2))
    return nn.Sequential(*layers, nn.Flatten(), nn.Linear(128 * 4 * 4, 10))


def quark_tqt(model: nn.Module, data: list[torch.Tensor]) -> nn.Module:
    spec = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
    config = Config(global_quant_config=QuantizationConfig(weight=spec, input_tensors=spec))
    return ModelQuantizer(config).quantize_model(model, data, progress=False)


def brevitas_layerwise(model: nn.Module, data: list[torch.Tensor]) -> nn.Module:
    from brevitas.graph.calibrate import calibration_mode
    from brevitas.graph.quantize import layerwise_quantize

    qmodel = layerwise_quantize(copy.deepcopy(model))
    with torch.no_grad(), calibration_mode(qmodel):
        for x in data:
            qmodel(x)
    return qmodel


def step_fn(model: nn.Module, x: torch.Tensor, y: torch.Tensor):
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
    model.train()

    def step() -> None:
        optimizer.zero_grad(set_to_none=True)
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()

    return step


def measure(steps: int, threads: int) -> dict:
    """Median step seconds per variant and its ratio to float, the variants taking turns."""
    torch.manual_seed(0)
    torch.set_num_threads(threads)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    data = [torch.randn(32, 3, 32, 32) for _ in range(4)]
    model = cnn()
    variants = {
        "float": step_fn(copy.deepcopy(model), x, y),
        "quark TQT W8A8": step_fn(quark_tqt(model, data), x, y),
        "brevitas layerwise W8A8": step_fn(brevitas_layerwise(model, data), x, y),
    }
    medians = step_times(variants, steps)
    return {
        "steps": steps,
        "threads": threads,
        "median_s": medians,
        "ratio_to_float": {name: med / medians["float"] for name, med in medians.items()},
    }


def step_times(variants: dict, steps: int, block: int = 5) -> dict[str, float]:
    """Median seconds of each variant's step: rounds in which every variant runs ``block``
    consecutive steps after an untimed one, so that machine noise hits every variant alike while
    each is timed as a training loop runs it, one model after itself. Interleaving single steps
    instead makes each step start on a heap shaped by another model's tensors: glibc hands memory
    back and pages it in again, and a graph-mode QAT step measured 2,300-10,000 page faults that
    way against 0-400 when repeated (``resource.getrusage``), which no training loop sees."""
    for _ in range(3):  # warm-up
        for step in variants.values():
            step()
    times: dict[str, list[float]] = {name: [] for name in variants}
    for _ in range(max(1, steps // block)):
        for name, step in variants.items():
            step()
            for _ in range(block):
                start = time.perf_counter()
                step()
                times[name].append(time.perf_counter() - start)
    return {name: statistics.median(values) for name, values in times.items()}


def main(steps: int, threads: int) -> None:
    result = measure(steps, threads)
    print(f"QAT step, 6-conv CNN, batch 32, 3x32x32, {steps} steps, {threads} thread(s); median ms and ratio to float")
    for name, med in result["median_s"].items():
        print(f"  {name:<26}{1e3 * med:8.2f} ms   x{result['ratio_to_float'][name]:.2f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    main(args.steps, args.threads)
