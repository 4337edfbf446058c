"""Issue 18, item 2: accumulator-aware QAT (A2Q / A2Q+, ``A2QSpec``) on the digits CNN, accuracy
against accumulator width, and what FINN makes of the accumulators.

For every seed: scikit-learn's real 8x8 digits split as ``quark.torch.examples.digits.load(seed)``
(1,438 training, 359 held-out images); the digits CNN (two Conv-BN-ReLU, max pooling, two Linear)
trained in float for 30 epochs; then, from that one float model, each network below quantized with
the FINN preset at W4A4 (``presets.finn(4, 4)``: graph mode, uint8 network input, uint4 after ReLU,
power-of-two TQT thresholds initialised by 3 SD, ties rounded up), batch norm merged before
quantization (``MergeBatchNorm``), calibrated on the training split and trained by the same loop
(``digits.train``: Adam lr 1e-3, cosine decay to 0, the seed's shuffling) for the same epochs:

- ``unconstrained``: the preset's W4A4 (int4 weights per tensor, TQT thresholds);
- ``A2Q+ 32``: A2Q+ weights (int4 per output channel, learned float scales) with a 32-bit
  accumulator, which no layer of this network can reach: the quantizer without a binding bound;
- ``A2Q+ P`` / ``A2Q P`` for P in the widths: every layer promises a P-bit signed accumulator
  (``presets.finn(accumulator_bits=P)``; A2Q with ``zero_centered=False``); EP-init at the build.

Each trained network is then taken into FINN's dataflow (``ModelExporter.export_finn_dataflow``,
integer uint8 input, verified on all 359 held-out images against torch; for the A2Q networks the
export checks every MVAU's accumulator against its promise after MinimizeAccumulatorWidth). Printed
per run: held-out accuracy after calibration (PTQ) and after QAT, FINN's accDataType of the four
MVAUs (conv1, conv2, fc1, fc2), the MVAUs' LUTs (FINN's estimate), and for the A2Q networks the
LUTs of the same MVAUs with the unconstrained (data-type worst case) accumulator. FINN's estimates
are analytical (no Vivado), at ``--target-fps`` (SetFolding; 0: every layer PE = SIMD = 1).
Every seed is reported, not the best; the summary gives each network's mean and range.

    .venv/bin/python benchmarks/a2q_digits.py [--seeds 0 1 2] [--widths 16 14 12 10] [--epochs 8]
        [--target-fps 0] [--methods A2Q+ A2Q]
"""

from __future__ import annotations

import argparse
import copy
import logging
import statistics
import tempfile
import time
import warnings
from dataclasses import dataclass, field

import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.algorithms import MergeBatchNorm
from quark.torch.quantization.config.config import Config, TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

FLOAT_EPOCHS, LR = 30, 1e-3
#: method -> finn()'s zero_centered
METHODS = {"A2Q+": True, "A2Q": False}
#: which layers promise the accumulator width -> finn()'s layer_accumulator_bits. "hidden": the
#: first layer (conv1, uint8 pixels) and the last (fc2) unconstrained, as in Brevitas' published
#: A2Q / A2Q+ ResNet-18 on CIFAR-10 (brevitas_examples a2q: first and last layers without the bound)
SCOPES = {"all": {}, "hidden": {"0": None, "10": None}}


@dataclass
class Run:
    label: str
    seed: int
    ptq: float
    qat: float
    acc_types: list[str]
    luts: float  # MVAUs, FINN's estimate
    luts_unconstrained: float | None  # the same MVAUs with unconstrained accumulators (A2Q networks)
    verified: str
    seconds: float
    held: str = ""  # A2Q: layers within their promise
    notes: list[str] = field(default_factory=list)


def networks(widths: list[int], methods: list[str], scopes: list[str]) -> dict[str, dict]:
    """label -> presets.finn() arguments beside the shared W4A4 ones."""
    runs: dict[str, dict] = {"unconstrained": {}, "A2Q+ 32": {"accumulator_bits": 32}}
    for scope in scopes:
        for method in methods:
            for width in widths:
                runs[f"{method} {width}" + (f" {scope}" if len(scopes) > 1 or scope != "all" else "")] = {
                    "accumulator_bits": width,
                    "zero_centered": METHODS[method],
                    "layer_accumulator_bits": SCOPES[scope],
                }
    return runs


def build(kwargs: dict) -> Config:
    config = finn(4, 4, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD), **kwargs)
    config.pre_quant_opt_config = [MergeBatchNorm()]
    return config


def through_finn(qmodel: nn.Module, images: torch.Tensor, target_fps: float | None) -> dict:
    """FINN's dataflow of ``qmodel``: accumulator types of the MVAUs, their LUTs, the checks."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.custom_op.registry import getCustomOp

    with tempfile.TemporaryDirectory() as directory:
        result = ModelExporter(directory).export_finn_dataflow(qmodel, images, integer_input=True, target_fps=target_fps)
        partition = ModelWrapper(f"{directory}/dataflow_partition.onnx")
        acc_types = [
            getCustomOp(n).get_nodeattr("accDataType") for n in partition.graph.node if n.op_type.startswith("MVAU")
        ]
    mvaus = [layer for layer in result.estimate.layers if layer.op_type.startswith("MVAU")]
    checks = result.accumulators
    v = result.verification
    return {
        "acc_types": acc_types,
        "luts": sum(layer.resources["LUT"] for layer in mvaus),
        # the A2Q layers with the unconstrained accumulator, the others (none here) as they are
        "luts_unconstrained": (
            sum(layer.resources["LUT"] for layer in mvaus) + sum(c.luts_saved for c in checks) if checks else None
        ),
        "verified": f"{v.identical_predictions}/{v.samples}",
        "held": f"{sum(c.holds for c in checks)}/{len(checks)}" if checks else "",
        "checks": checks,
    }


def run_seed(seed: int, args: argparse.Namespace) -> tuple[float, list[Run]]:
    data = digits.load(seed)
    torch.manual_seed(seed)
    model = digits.train(digits.cnn(), data, epochs=FLOAT_EPOCHS, seed=seed)
    float_acc = digits.accuracy(model, data)
    images = torch.stack([x for x, _ in data.test])
    print(f"seed {seed}: float {float_acc:.2f} %", flush=True)
    runs = []
    for label, kwargs in networks(args.widths, args.methods, args.scopes).items():
        start = time.perf_counter()
        qmodel = ModelQuantizer(build(kwargs)).quantize_model(
            copy.deepcopy(model), data.loader("train"), progress=False
        )
        ptq = digits.accuracy(qmodel, data)
        digits.train(qmodel, data, epochs=args.epochs, lr=LR, seed=seed, schedule="cosine")
        qat = digits.accuracy(qmodel, data)
        hardware = through_finn(qmodel.eval(), images, args.target_fps or None)
        run = Run(
            label,
            seed,
            ptq,
            qat,
            hardware["acc_types"],
            hardware["luts"],
            hardware["luts_unconstrained"],
            hardware["verified"],
            time.perf_counter() - start,
            hardware["held"],
        )
        runs.append(run)
        unconstrained = f"{run.luts_unconstrained:7,.0f}" if run.luts_unconstrained is not None else "      -"
        print(
            f"  {label:<20} PTQ {ptq:6.2f}  QAT {qat:6.2f}  FINN acc {' '.join(f'{t:>6}' for t in run.acc_types)}"
            f"  within {run.held or '-':>3}  MVAU LUT {run.luts:6,.0f} (unconstrained acc {unconstrained})"
            f"  FINN = torch {run.verified}  {run.seconds:5.1f} s",
            flush=True,
        )
    return float_acc, runs


def summary(floats: dict[int, float], runs: list[Run], args: argparse.Namespace) -> None:
    seeds = sorted(floats)
    labels = list(dict.fromkeys(r.label for r in runs))
    by = {(r.label, r.seed): r for r in runs}
    baseline = {s: by[("unconstrained", s)].qat for s in seeds}
    print()
    print(
        f"Held-out accuracy (%) after {args.epochs} QAT epochs, per seed; float: "
        + ", ".join(f"{floats[s]:.2f}" for s in seeds)
        + f" (mean {statistics.mean(floats.values()):.2f})"
    )
    head = "| network | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | mean - unconstrained | FINN accumulators (conv1, conv2, fc1, fc2), seed " + str(seeds[0]) + " | MVAU LUTs | same, unconstrained acc | LUTs saved |"
    print(head)
    print("|---" * (head.count("|") - 1) + "|")
    for label in labels:
        accs = [by[(label, s)].qat for s in seeds]
        mean = statistics.mean(accs)
        delta = statistics.mean(by[(label, s)].qat - baseline[s] for s in seeds)
        first = by[(label, seeds[0])]
        luts = statistics.mean(by[(label, s)].luts for s in seeds)
        if first.luts_unconstrained is not None:
            wide = statistics.mean(by[(label, s)].luts_unconstrained for s in seeds)
            saved = f"{wide - luts:,.0f} ({100 * (wide - luts) / wide:.1f} %)"
            wide_text = f"{wide:,.0f}"
        else:
            wide_text, saved = "-", "-"
        print(
            f"| {label} | " + " | ".join(f"{a:.2f}" for a in accs) + f" | {mean:.2f} | {delta:+.2f} | "
            f"{', '.join(first.acc_types)} | {luts:,.0f} | {wide_text} | {saved} |"
        )
    held = [r for r in runs if r.held]
    print(
        f"\nFINN's accumulators within the promise: {sum(r.held.split('/')[0] == r.held.split('/')[1] for r in held)}"
        f" of {len(held)} A2Q runs (every MVAU checked after MinimizeAccumulatorWidth); FINN's hardware graph = torch "
        f"on all held-out images in {sum(r.verified.split('/')[0] == r.verified.split('/')[1] for r in runs)} of {len(runs)} runs"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--widths", type=int, nargs="+", default=[16, 14, 12, 10])
    parser.add_argument("--methods", nargs="+", choices=list(METHODS), default=list(METHODS))
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument(
        "--scopes", nargs="+", choices=list(SCOPES), default=list(SCOPES),
        help="which layers promise the width: all, or hidden (first and last layer unconstrained)",
    )
    parser.add_argument("--target-fps", type=float, default=0, help="FINN folding target (0: PE = SIMD = 1)")
    args = parser.parse_args()
    torch.set_num_threads(1)
    logging.getLogger("quark").setLevel(logging.ERROR)
    warnings.filterwarnings("ignore", category=UserWarning)  # qonnx's opset notes at every export
    start = time.perf_counter()
    print(
        f"digits CNN, FINN preset W4A4 (TQT _3SD thresholds, uint8 input), MergeBatchNorm, {args.epochs} QAT epochs "
        f"(Adam lr {LR}, cosine), 1 thread; FINN at "
        + (f"{args.target_fps:g} fps" if args.target_fps else "PE = SIMD = 1")
        + " on xc7z020 at 100 MHz",
        flush=True,
    )
    floats, runs = {}, []
    for seed in args.seeds:
        floats[seed], seed_runs = run_seed(seed, args)
        runs += seed_runs
    summary(floats, runs, args)
    print(f"\ntotal {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
