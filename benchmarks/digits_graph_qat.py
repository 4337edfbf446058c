"""Issue 9's done-when: a digits CNN with batch norm and a residual block, graph-mode QAT at W4A4
(and W2A2) with power-of-two TQT thresholds, handed to FINN as an integer dataflow.

1. Train the float network (scikit-learn's real digits).
2. Quantize it in graph mode with the FINN preset (``presets.finn``: int weights, unsigned
   activations after ReLU, a uint8 network input, power-of-two TQT thresholds, ties rounded up as
   FINN's MultiThreshold does); batch norm is kept as a float layer during QAT.
3. QAT in a plain loop, test accuracy after every epoch: one Adam for the run, its learning rate
   cosine-decayed to 0 (``--schedule cosine``), or constant (``constant``), or the loop before,
   a fresh Adam every epoch (``restart``: ``benchmarks/digits_qat_restart.py`` shows its cost).
4. Export QONNX (verified against torch), make the network input integer, run FINN's
   ConvertQONNXtoFINN and StreamlinePlus, and compare FINN's predictions with torch's on the whole
   test set; count the float nodes left between the first and last compute layer.

Below 4 bits, FINN's own low-bit recipe (Brevitas' bnn_pynq ResNet: 8-bit first and last layer)
is ``--wide-layers stem.0 head.2`` (their weights at ``--wide-bits``, 8) with ``--add-bits 8`` (the
residual addition's operands and sum); ``--init _LL_J`` initialises the thresholds by Settle et
al.'s search instead of 3 standard deviations. ``--sensitivity`` trains the W2A2 network with one
quantizer widened at a time (no FINN) to show which costs most.

    .venv/bin/python benchmarks/digits_graph_qat.py [--bits 4 2] [--epochs 8] [--seed 0] [--init _3SD]
        [--add-bits 8] [--wide-layers stem.0 head.2] [--sensitivity] [--schedule cosine] [--merge-bn]
"""

from __future__ import annotations

import argparse
import copy
import logging
import tempfile
import time
from pathlib import Path

import numpy as np
import onnx
import torch
from torch import nn

from quark.torch.examples import digits
from quark.torch.extensions.brevitas._backend.targets.finn import interface as finn_interface
from quark.torch.extensions.brevitas.algos import Preprocess
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer, finn_handoff
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import Config, TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth


def predictions_through_finn(qmodel: nn.Module, x: torch.Tensor, directory: Path) -> dict:
    """Export, integer input, FINN; FINN's and torch's predictions on ``x`` and the graph sizes."""
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas._backend.export.verify import execute_qonnx

    path = directory / "model.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    exported_nodes = len(onnx.load(str(path)).graph.node)
    integer = finn_interface.integer_input(path, directory / "model_int.onnx")
    x_int = torch.clamp(torch.floor(x / integer.scale + 0.5), 0, 255)
    start = time.perf_counter()
    handoff = finn_handoff(directory / "model_int.onnx", x_int)
    seconds = time.perf_counter() - start
    streamlined = ModelWrapper(handoff.path)
    finn_logits = execute_qonnx(streamlined, [x_int.numpy()])[0]
    with torch.no_grad():
        torch_logits = qmodel(x).numpy()
    return {
        "qonnx verified": report.passed,
        "input": integer.datatype,
        "nodes": (exported_nodes, len(streamlined.graph.node)),
        "ops": sorted({n.op_type for n in streamlined.graph.node}),
        "float ops": finn_interface.float_operations(streamlined),
        "max |finn - torch|": float(np.max(np.abs(finn_logits - torch_logits))),
        "identical predictions": int((finn_logits.argmax(1) == torch_logits.argmax(1)).sum()),
        "finn seconds": seconds,
    }


#: --sensitivity: label -> preset arguments that widen one quantizer of the W2A2 network
SENSITIVITY: dict[str, dict] = {
    "all 2-bit (uint8 network input)": {},
    "network input 2-bit too": {"input_bits": 2},
    "stem.0 weights 8-bit": {"layer_weight_bits": {"stem.0": 8}},
    "conv1 weights 8-bit": {"layer_weight_bits": {"conv1": 8}},
    "conv2 weights 8-bit": {"layer_weight_bits": {"conv2": 8}},
    "head.2 weights 8-bit": {"layer_weight_bits": {"head.2": 8}},
    "addition 8-bit": {"add_bits": 8},
    "stem.0 + head.2 weights and addition 8-bit": {
        "layer_weight_bits": {"stem.0": 8, "head.2": 8},
        "add_bits": 8,
    },
}


def quantize_and_train(
    config: Config, model: nn.Module, data: digits.DigitsData, args: argparse.Namespace
) -> tuple[nn.Module, list[float]]:
    """PTQ (calibration) and QAT; the model and its test accuracy after PTQ and after every epoch."""
    qmodel = ModelQuantizer(config).quantize_model(
        copy.deepcopy(model), data.loader("train", batch_size=64), progress=False
    )
    accuracies = [digits.accuracy(qmodel, data)]
    record = lambda epoch, m: accuracies.append(digits.accuracy(m, data))
    if args.schedule == "restart":  # the loop before: a fresh Adam (moments reset) every epoch
        for epoch in range(args.epochs):
            digits.train(qmodel, data, epochs=1, lr=args.lr, seed=args.seed + epoch, on_epoch=record)
    else:
        schedule = {"cosine": "cosine", "constant": None}[args.schedule]
        digits.train(qmodel, data, args.epochs, args.lr, args.seed, schedule=schedule, on_epoch=record)
    return qmodel, accuracies


#: --schedule -> how the header names it
SCHEDULES = {
    "cosine": "one optimizer, cosine decay to 0",
    "constant": "one optimizer, constant",
    "restart": "a fresh optimizer every epoch, constant",
}


def per_epoch(accuracies: list[float], float_acc: float) -> str:
    return (
        f"PTQ {accuracies[0]:.2f} %; QAT per epoch "
        + ", ".join(f"{a:.2f}" for a in accuracies[1:])
        + f" %; final - float {accuracies[-1] - float_acc:+.2f} points"
    )


def run(args: argparse.Namespace) -> None:
    logging.getLogger("quark").setLevel(logging.ERROR)  # the float batch norms are named at every quantize
    seed, qat_spec = args.seed, TQTSpec(TQTThresholdInitMeth[args.init])
    torch.manual_seed(seed)
    data = digits.load(seed)
    model = digits.train(digits.ResidualCNN(), data, epochs=30, seed=seed)
    float_acc = digits.accuracy(model, data)
    x_test = torch.cat([x for x, _ in data.loader("test", batch_size=512)])
    batch_norm = "batch norm merged before QAT" if args.merge_bn else "batch norm kept"
    print(
        f"digits ResidualCNN ({batch_norm}), seed {seed}: float test accuracy {float_acc:.2f} % on {len(x_test)} "
        f"images; TQT init {args.init}, Adam lr {args.lr} ({SCHEDULES[args.schedule]}), {args.epochs} QAT epochs"
    )
    if args.sensitivity:
        for label, changes in SENSITIVITY.items():
            config = finn(weight_bits=2, act_bits=2, qat_spec=qat_spec, **changes)
            config.pre_quant_opt_config = [Preprocess(equalize_iterations=0)] if args.merge_bn else []
            _, accuracies = quantize_and_train(config, model, data, args)
            print(f"W2A2, {label}: {per_epoch(accuracies, float_acc)}", flush=True)
        return
    wide = dict.fromkeys(args.wide_layers, args.wide_bits)
    for b in args.bits:
        config = finn(
            weight_bits=b, act_bits=b, qat_spec=qat_spec, add_bits=args.add_bits, layer_weight_bits=wide
        )
        config.pre_quant_opt_config = [Preprocess(equalize_iterations=0)] if args.merge_bn else []
        qmodel, accuracies = quantize_and_train(config, model, data, args)
        extras = [f"{', '.join(wide)} weights {args.wide_bits}-bit"] if wide else []
        extras += [f"addition {args.add_bits}-bit"] if args.add_bits else []
        label = f"W{b}A{b}" + (f" ({'; '.join(extras)})" if extras else "")
        print(f"{label}: {per_epoch(accuracies, float_acc)}")
        with tempfile.TemporaryDirectory() as directory:
            result = predictions_through_finn(qmodel.eval(), x_test, Path(directory))
        print(
            f"  FINN: QONNX verified {result['qonnx verified']}, input {result['input']}, nodes "
            f"{result['nodes'][0]} exported -> {result['nodes'][1]} streamlined, ops {result['ops']}, "
            f"float ops between the first and last layer: {len(result['float ops'])} {result['float ops']}"
        )
        print(
            f"  FINN vs torch on the whole test set: identical predictions {result['identical predictions']}"
            f"/{len(x_test)}, max |logit diff| {result['max |finn - torch|']:.3g} "
            f"(FINN steps {result['finn seconds']:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 2])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument(
        "--schedule",
        choices=["cosine", "constant", "restart"],
        default="cosine",
        help="QAT loop: one Adam, lr cosine-decayed to 0 (cosine) or constant; restart: a fresh Adam every "
        "epoch at a constant lr (the loop before)",
    )
    parser.add_argument(
        "--merge-bn", action="store_true", help="merge batch norm into the convolutions before QAT (Preprocess)"
    )
    parser.add_argument(
        "--init", choices=["_3SD", "_LL_J"], default="_3SD", help="TQT threshold initialisation"
    )
    parser.add_argument("--add-bits", type=int, default=None, help="bit width of the residual addition")
    parser.add_argument("--wide-layers", nargs="*", default=[], help="layers whose weights get --wide-bits")
    parser.add_argument("--wide-bits", type=int, default=8)
    parser.add_argument(
        "--sensitivity", action="store_true", help="W2A2 with one quantizer widened at a time"
    )
    args = parser.parse_args()
    torch.set_num_threads(1)
    run(args)
