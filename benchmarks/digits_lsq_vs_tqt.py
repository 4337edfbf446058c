"""QAT on the digits CNN with AMD Quark's two trained quantizers: LSQ (``LSQObserver``, a trained
float scale initialised at 2 mean|x| / sqrt(qmax), gradient scaled as Quark does) against TQT
(``TQTSpec``, a trained power-of-two threshold initialised by ``_3SD``).

For each seed: train the float CNN, merge batch norm (Preprocess), quantize weights (signed) and the
inputs of every compute layer (unsigned: all non-negative) per tensor, calibrate, then fine-tune in
the plain PyTorch loop of ``quark.torch.examples.digits`` (Adam, the same learning rate for both).
Reports held-out test accuracy after PTQ and after QAT, every seed.

    .venv/bin/python benchmarks/digits_lsq_vs_tqt.py [--seeds 0 1 2] [--epochs 15] [--bits 4 2]
"""

from __future__ import annotations

import argparse
import copy
import time

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QSchemeType, ScaleType, TQTThresholdInitMeth
from quark.torch.quantization.observer import LSQObserver

SIGNED = {4: Dtype.int4, 2: Dtype.int2}
UNSIGNED = {4: Dtype.uint4, 2: Dtype.uint2}


def lsq(dtype: Dtype, static: bool) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=dtype, observer_cls=LSQObserver, qscheme=QSchemeType.per_tensor, symmetric=True, is_dynamic=False if static else None
    )


def tqt(dtype: Dtype, static: bool) -> QuantizationSpec:
    return QuantizationSpec(
        dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD)
    )


METHODS = {"LSQ": lsq, "TQT _3SD": tqt}


def config(method, bits: int) -> Config:
    return Config(
        global_quant_config=QuantizationConfig(weight=method(SIGNED[bits], False), input_tensors=method(UNSIGNED[bits], True)),
        pre_quant_opt_config=[Preprocess(equalize_iterations=0)],
    )


def run(seeds: list[int], epochs: int, bits: list[int]) -> None:
    print(f"digits CNN, batch norm merged, per-tensor weights and inputs, {epochs} QAT epochs (Adam, lr 1e-3), held-out test accuracy")
    print(f"{'bits':<6}{'method':<10}{'seed':>5}{'float %':>9}{'PTQ %':>9}{'QAT %':>9}{'QAT - float':>13}{'QAT s':>8}")
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        float_acc = digits.accuracy(model, data)
        calib = data.loader("train", batch_size=64)
        for b in bits:
            for name, method in METHODS.items():
                qmodel = ModelQuantizer(config(method, b)).quantize_model(copy.deepcopy(model), calib, progress=False)
                ptq = digits.accuracy(qmodel, data)
                start = time.perf_counter()
                digits.train(qmodel, data, epochs=epochs, lr=1e-3, seed=seed)
                seconds = time.perf_counter() - start
                qat = digits.accuracy(qmodel, data)
                print(
                    f"W{b}A{b}  {name:<10}{seed:>5}{float_acc:>9.2f}{ptq:>9.2f}{qat:>9.2f}{qat - float_acc:>+13.2f}{seconds:>8.1f}",
                    flush=True,
                )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 2], choices=[4, 2])
    args = parser.parse_args()
    run(args.seeds, args.epochs, args.bits)
