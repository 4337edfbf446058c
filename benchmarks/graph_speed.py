"""Graph mode speed: QAT step and calibration against float, at 1 and 2 threads, in one run.

The 6-conv CNN of ``qat_step_speed.py`` (batch 32, 3x32x32, batch norm, ReLU, max pooling).
Quantized with W8A8 power-of-two TQT thresholds (``_3SD``):

- graph mode (``QuantizationMode.fx_graph_mode``): the network input, every ReLU, every layer's
  weight quantized;
- layerwise (``eager_mode``): every layer's input and weight quantized.

Batch norm is folded into the conv during QAT (``TQTSpec``'s default, statistics frozen from the
start: no batch-norm op in the step); ``graph, bn float`` is graph mode with
``fold_batch_norm=False`` (the batch norms run as float layers, as before that default). The anchor,
``torch.ao fused``: PyTorch's own QAT on the same network (``prepare_qat_fx`` with the x86 default
QAT qconfig: ``FusedMovingAvgObsFakeQuantize``, conv + batch norm + ReLU fused with batch statistics).

QAT step: forward + cross-entropy + backward + SGD; the variants take turns in rounds of a few
consecutive steps each (``qat_step_speed.step_times``), so that machine noise hits each alike;
median time and ratio to float. Calibration: ``calibrate`` over the batches of a graph-mode model
built with ``calibrate=False``, per batch, against a float forward pass (eval, no_grad) per batch.
Goals (issue 23): QAT step <= 1.25x float in both modes and graph calibration <= 1.5x a float
forward pass, at 2 threads.

    .venv/bin/python benchmarks/graph_speed.py [--steps 40] [--batches 16] [--block 5]

On an idle machine run it as it is (OpenMP's defaults, what a user gets). When other processes
load the machine, set ``OMP_WAIT_POLICY=PASSIVE``: with OpenMP's default spinning, 2 threads
competing with them for 2 cores made the float step 4-6x slower than at 1 thread (measured),
which swamps every ratio; on an idle machine PASSIVE costs each parallel region a thread wake-up
instead: one quantizer forward and backward at 2 threads measured 4.4x slower with it on a
98K-element tensor, 1.5x on a 1M-element one.
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import sys
import time
from pathlib import Path

import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).parent))
from qat_step_speed import cnn, step_fn, step_times

from quark.torch.extensions.brevitas._backend.calibrate import calibrate
from quark.torch.extensions.brevitas._backend.data import CalibrationData
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import (
    Dtype,
    QuantizationMode,
    ScaleType,
    TQTThresholdInitMeth,
)


def config(mode: QuantizationMode, fold_batch_norm: bool = True) -> Config:
    tqt = TQTSpec(TQTThresholdInitMeth._3SD, fold_batch_norm=fold_batch_norm)
    spec = QuantizationSpec(dtype=Dtype.int8, scale_type=ScaleType.pof2, qat_spec=tqt)
    return Config(global_quant_config=QuantizationConfig(weight=spec, input_tensors=spec), quant_mode=mode)


def quantized(model: nn.Module, mode: QuantizationMode, data, fold_batch_norm: bool = True, **kw) -> nn.Module:
    return ModelQuantizer(config(mode, fold_batch_norm)).quantize_model(model, data, progress=False, **kw)


def torch_ao_fused(model: nn.Module, x: torch.Tensor) -> nn.Module:
    """PyTorch's own QAT (the anchor): fused observer + fake-quant modules, conv-bn-relu fused."""
    import warnings

    from torch.ao.quantization import get_default_qat_qconfig_mapping
    from torch.ao.quantization.quantize_fx import prepare_qat_fx

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # torch.ao's deprecation notices
        return prepare_qat_fx(model.train(), get_default_qat_qconfig_mapping("x86"), (x,))


def calibration_times(model: nn.Module, data: list[torch.Tensor], repeats: int = 3) -> tuple[float, float]:
    """(float forward, graph-mode calibration) seconds per batch, medians of ``repeats`` passes."""
    float_model = copy.deepcopy(model).eval()
    forward, calib = [], []
    for _ in range(repeats):
        start = time.perf_counter()
        with torch.no_grad():
            for x in data:
                float_model(x)
        forward.append((time.perf_counter() - start) / len(data))
        qmodel = quantized(copy.deepcopy(model), QuantizationMode.fx_graph_mode, None, calibrate=False)
        start = time.perf_counter()
        calibrate(qmodel, CalibrationData(data, progress=False))
        calib.append((time.perf_counter() - start) / len(data))
    return statistics.median(forward), statistics.median(calib)


def measure(steps: int, batches: int, threads: tuple[int, ...] = (1, 2), block: int = 5) -> dict:
    """Per thread count: QAT step medians (s) and ratios to float, graph-mode calibration per batch
    against a float forward pass."""
    logging.getLogger("quark").setLevel(logging.ERROR)  # the float batch norms are named at every quantize
    torch.manual_seed(0)
    x, y = torch.randn(32, 3, 32, 32), torch.randint(0, 10, (32,))
    data = [torch.randn(32, 3, 32, 32) for _ in range(batches)]
    model = cnn()
    result = {"steps": steps, "batches": batches, "threads": {}}
    for count in threads:
        torch.set_num_threads(count)
        variants = {
            "float": step_fn(copy.deepcopy(model), x, y),
            "graph (fx)": step_fn(quantized(copy.deepcopy(model), QuantizationMode.fx_graph_mode, data[:4]), x, y),
            "layerwise": step_fn(quantized(copy.deepcopy(model), QuantizationMode.eager_mode, data[:4]), x, y),
            "graph, bn float": step_fn(
                quantized(copy.deepcopy(model), QuantizationMode.fx_graph_mode, data[:4], fold_batch_norm=False), x, y
            ),
            "torch.ao fused": step_fn(torch_ao_fused(copy.deepcopy(model), x), x, y),
        }
        medians = step_times(variants, steps, block)
        forward, calib = calibration_times(model, data)
        result["threads"][count] = {
            "step_median_s": medians,
            "step_ratio_to_float": {name: med / medians["float"] for name, med in medians.items()},
            "calibration_s_per_batch": calib,
            "float_forward_s_per_batch": forward,
            "calibration_ratio_to_forward": calib / forward,
        }
    return result


def main(steps: int, batches: int, block: int = 5) -> None:
    result = measure(steps, batches, block=block)
    print(f"6-conv CNN, batch 32, 3x32x32, W8A8 pof2 TQT; QAT: {steps} steps, variants in turns; calibration: {batches} batches")
    for threads, row in result["threads"].items():
        print(f"{threads} thread(s), QAT step: median ms and ratio to float")
        for name, med in row["step_median_s"].items():
            print(f"  {name:<16}{1e3 * med:8.2f} ms   x{row['step_ratio_to_float'][name]:.2f}")
        print(
            f"{threads} thread(s), graph-mode calibration: {1e3 * row['calibration_s_per_batch']:.2f} ms per batch "
            f"vs float forward {1e3 * row['float_forward_s_per_batch']:.2f} ms   x{row['calibration_ratio_to_forward']:.2f}"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--batches", type=int, default=16)
    parser.add_argument("--block", type=int, default=5, help="consecutive steps per variant and turn (1: single steps interleaved)")
    args = parser.parse_args()
    main(args.steps, args.batches, args.block)
