"""QAT with batch norm kept: folded into the layers during training (``TQTSpec.fold_batch_norm``) or
kept as a float layer, in the loop users write.

The digits CNN (two Conv-BN-ReLU, two Linear; float-trained 30 epochs by ``digits.trained_cnn``),
main-API config: int4 weights and *signed* int4 layer inputs, power-of-two TQT thresholds
initialised by ``_3SD`` or ``_LL_J``, batch norm not merged before quantization, then one Adam
over every parameter at a constant lr 1e-3 for 6 epochs (``digits.train``: the same shuffling per
seed). Per run: held-out accuracy after PTQ and after every epoch, against the float model's.
Modes (``--modes``): ``kept`` (``fold_batch_norm=False``: batch norm a float layer in training
mode, the issue's baseline), ``fold`` (statistics never frozen), ``fold@N`` (frozen after N
training steps, then absorbed into the layer's weight and bias: ``TQTSpec``'s
``absorb_frozen_batch_norm``; ``fold@0``: frozen from the start, the default), ``fold@N-raw`` (the
same without absorbing: w, gamma and beta train through ``w * gamma / sqrt(var + eps)``, the default
before). The criterion (issue 18): every epoch within 3 points of float and the last within 1.

    .venv/bin/python benchmarks/qat_batch_norm.py [--seeds 0 1 2 3 4] [--inits _3SD _LL_J]
        [--modes kept fold fold@0 fold@0-raw] [--epochs 6] [--graph]
"""

from __future__ import annotations

import argparse
import copy
import time

import torch
from torch import nn

from quark.torch.examples import digits, mnist
from quark.torch.extensions.brevitas.api import ModelQuantizer
from quark.torch.quantization.config.config import Config, QuantizationConfig, QuantizationSpec, TQTSpec
from quark.torch.quantization.config.type import Dtype, QuantizationMode, ScaleType, TQTThresholdInitMeth

LR = 1e-3
WITHIN_EVERY_EPOCH, WITHIN_AT_END = 3.0, 1.0


def mode_spec(mode: str) -> dict:
    """``TQTSpec`` fields of a mode name: kept, fold, fold@N, fold@N-raw."""
    if mode == "kept":
        return {"fold_batch_norm": False}
    if mode == "fold":
        return {"fold_batch_norm": True, "freeze_batch_norm_steps": None}
    steps, raw = mode.removeprefix("fold@").removesuffix("-raw"), mode.endswith("-raw")
    if mode.startswith("fold@") and steps.isdigit():
        return {"fold_batch_norm": True, "freeze_batch_norm_steps": int(steps), "absorb_frozen_batch_norm": not raw}
    raise SystemExit(f"--modes: {mode!r} is not kept, fold, fold@N or fold@N-raw")


def config(init: str, mode: str, graph: bool) -> Config:
    tqt = TQTSpec(TQTThresholdInitMeth[init], **mode_spec(mode))
    spec = QuantizationSpec(dtype=Dtype.int4, symmetric=True, scale_type=ScaleType.pof2, qat_spec=tqt)
    return Config(
        global_quant_config=QuantizationConfig(weight=spec, input_tensors=spec),
        quant_mode=QuantizationMode.fx_graph_mode if graph else QuantizationMode.eager_mode,
    )


def mnist_cnn() -> nn.Module:
    """The digits CNN's shape for 28x28 MNIST: Conv-BN-ReLU-pool x2, two Linear layers."""
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1),
        nn.BatchNorm2d(16),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1),
        nn.BatchNorm2d(32),
        nn.ReLU(),
        nn.MaxPool2d(2),
        nn.Flatten(),
        nn.Linear(32 * 7 * 7, 64),
        nn.ReLU(),
        nn.Linear(64, 10),
    )


def trained(data_name: str, seed: int, epochs: int):
    """(float model, data): the 8x8 digits CNN (``digits.trained_cnn``), or :func:`mnist_cnn` trained
    the same way on MNIST-5k (4,000 / 1,000, ``examples.mnist``)."""
    if data_name == "digits":
        return digits.trained_cnn(seed, epochs=epochs)
    data = mnist.load(seed)
    torch.manual_seed(seed)
    return digits.train(mnist_cnn(), data, epochs=epochs, seed=seed), data


def run(model, data, init: str, mode: str, seed: int, epochs: int, graph: bool) -> list[float]:
    """Held-out accuracy after PTQ, then after each QAT epoch."""
    calib = data.loader("train", batch_size=64)
    qmodel = ModelQuantizer(config(init, mode, graph)).quantize_model(copy.deepcopy(model), calib, progress=False)
    acc = [digits.accuracy(qmodel, data)]
    digits.train(qmodel, data, epochs=epochs, lr=LR, seed=seed, on_epoch=lambda e, m: acc.append(digits.accuracy(m, data)))
    return acc


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--inits", nargs="+", default=["_3SD", "_LL_J"], choices=["_3SD", "_LL_J"])
    parser.add_argument("--modes", nargs="+", default=["kept", "fold", "fold@0", "fold@0-raw"])
    parser.add_argument("--epochs", type=int, default=6)
    parser.add_argument("--graph", action="store_true", help="graph mode (QuantizationMode.fx_graph_mode)")
    parser.add_argument("--data", choices=["digits", "mnist"], default="digits", help="8x8 digits or MNIST-5k")
    parser.add_argument("--float-epochs", type=int, default=30, help="epochs of the float training")
    args = parser.parse_args()
    torch.set_num_threads(1)
    for mode in args.modes:
        mode_spec(mode)  # a bad name fails before the long part
    images = {"digits": "359 8x8 digits", "mnist": "1,000 MNIST digits"}[args.data]
    print(
        f"{args.data} CNN, batch norm kept, W4A4 TQT pof2, signed int4 inputs, Adam lr {LR} constant, "
        f"{args.epochs} epochs, {'graph' if args.graph else 'layerwise'} mode, 1 thread; held-out accuracy (%) "
        f"on {images}; pass: every epoch within {WITHIN_EVERY_EPOCH:g} points of float, the last within "
        f"{WITHIN_AT_END:g}"
    )
    header = f"{'init':<6} {'mode':<9} {'seed':>4} {'float':>6} {'PTQ':>6} " + "".join(
        f"{f'ep{e + 1}':>6}" for e in range(args.epochs)
    )
    print(header + f" {'worst-fl':>8} {'end-fl':>7} pass  seconds")
    summary: dict[tuple[str, str], list[bool]] = {}
    for seed in args.seeds:
        model, data = trained(args.data, seed, args.float_epochs)
        float_acc = digits.accuracy(model, data)
        for init in args.inits:
            for mode in args.modes:
                start = time.perf_counter()
                acc = run(model, data, init, mode, seed, args.epochs, args.graph)
                seconds = time.perf_counter() - start
                worst, end = min(acc[1:]) - float_acc, acc[-1] - float_acc
                ok = worst >= -WITHIN_EVERY_EPOCH and end >= -WITHIN_AT_END
                summary.setdefault((init, mode), []).append(ok)
                print(
                    f"{init:<6} {mode:<9} {seed:>4} {float_acc:>6.2f} "
                    + "".join(f"{a:>6.2f}" for a in acc)
                    + f" {worst:>+8.2f} {end:>+7.2f} {'yes' if ok else 'NO':<4} {seconds:>7.1f}",
                    flush=True,
                )
    print("\npassing seeds per init and mode:")
    for (init, mode), oks in summary.items():
        print(f"  {init:<6} {mode:<9} {sum(oks)}/{len(oks)}")


if __name__ == "__main__":
    main()
