"""QAT with TQT on the digits CNN: test accuracy after PTQ and after QAT, per bit width and
batch-norm strategy.

For each seed: train the float CNN, quantize weights and the inputs of every compute layer with
trained power-of-two thresholds (TQT) at W4A4 and W2A2, then fine-tune in a plain PyTorch loop.
Weights are signed, layer inputs unsigned (they are all non-negative). Batch norm is either kept
as a float layer during QAT or merged into the convolutions before quantization (Preprocess).

    .venv/bin/python benchmarks/digits_qat.py [--seeds 0 1 2] [--epochs 15]
"""

from __future__ import annotations

import argparse
import copy
import statistics

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, ScaleType, TQTThresholdInitMeth

BITS = {"W4A4": 4, "W2A2": 2}


SIGNED = {4: Dtype.int4, 2: Dtype.int2}
UNSIGNED = {4: Dtype.uint4, 2: Dtype.uint2}  # every layer input here is non-negative (image, ReLU)


def config(bits: int, init: TQTThresholdInitMeth, fold_bn: bool) -> Config:
    def tqt(dtype: Dtype) -> QuantizationSpec:
        return QuantizationSpec(dtype=dtype, symmetric=True, scale_type=ScaleType.pof2, qat_spec=TQTSpec(init))

    return Config(
        global_quant_config=QuantizationConfig(weight=tqt(SIGNED[bits]), input_tensors=tqt(UNSIGNED[bits])),
        pre_quant_opt_config=[Preprocess(equalize_iterations=0)] if fold_bn else [],
    )


STRATEGIES = {"BN kept, folded never": False, "BN merged before QAT": True}


def run(seeds: list[int], epochs: int, init: TQTThresholdInitMeth) -> None:
    rows: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
    for seed in seeds:
        model, data = digits.trained_cnn(seed)
        float_acc = digits.accuracy(model, data)
        calib = data.loader("train", batch_size=64)
        for label, bits in BITS.items():
            for strategy, make in STRATEGIES.items():
                qmodel = ModelQuantizer(config(bits, init, make)).quantize_model(copy.deepcopy(model), calib, progress=False)
                ptq = digits.accuracy(qmodel, data)
                digits.train(qmodel, data, epochs=epochs, lr=1e-3, seed=seed)
                qat = digits.accuracy(qmodel, data)
                rows.setdefault((label, strategy), []).append((float_acc, ptq, qat))
    print(f"digits CNN, TQT init {init.name}, {epochs} QAT epochs, seeds {seeds}")
    print(f"{'bits':<6}{'batch norm':<36}{'float %':>9}{'PTQ %':>9}{'QAT %':>9}{'QAT - float (per seed)':>28}")
    for (label, strategy), values in rows.items():
        deltas = ", ".join(f"{q - f:+.2f}" for f, _, q in values)
        med = [statistics.median(v[i] for v in values) for i in range(3)]
        print(f"{label:<6}{strategy:<36}{med[0]:>9.2f}{med[1]:>9.2f}{med[2]:>9.2f}{deltas:>28}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--epochs", type=int, default=15)
    parser.add_argument("--init", choices=["_3SD", "_LL_J"], default="_3SD")
    args = parser.parse_args()
    run(args.seeds, args.epochs, TQTThresholdInitMeth[args.init])
