"""Issue 9's done-when: a digits CNN with batch norm and a residual block, graph-mode QAT at W4A4
(and W2A2) with power-of-two TQT thresholds, handed to FINN as an integer dataflow.

1. Train the float network (scikit-learn's real digits).
2. Quantize it in graph mode with the FINN preset (``presets.finn``: int weights, unsigned
   activations after ReLU, a uint8 network input, power-of-two TQT thresholds, ties rounded up as
   FINN's MultiThreshold does); batch norm is kept as a float layer during QAT.
3. QAT in a plain loop (Adam), test accuracy after every epoch.
4. Export QONNX (verified against torch), make the network input integer, run FINN's
   ConvertQONNXtoFINN and StreamlinePlus, and compare FINN's predictions with torch's on the whole
   test set; count the float nodes left between the first and last compute layer.

    .venv/bin/python benchmarks/digits_graph_qat.py [--bits 4 2] [--epochs 8] [--seed 0] [--add-bits 8]
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
from quark.torch.extensions.brevitas._backend.export import finn_target
from quark.torch.extensions.brevitas._backend.export.finn import finn_handoff
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
from quark.torch.extensions.brevitas.presets import finn
from quark.torch.quantization.config.config import QuantizationConfig, TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth


def predictions_through_finn(qmodel: nn.Module, x: torch.Tensor, directory: Path) -> dict:
    """Export, integer input, FINN; FINN's and torch's predictions on ``x`` and the graph sizes."""
    from qonnx.core.modelwrapper import ModelWrapper
    from qonnx.core.onnx_exec import execute_onnx

    path = directory / "model.onnx"
    report = ModelExporter(path).export_qonnx_model(qmodel, x)
    exported_nodes = len(onnx.load(str(path)).graph.node)
    integer = finn_target.integer_input(path, directory / "model_int.onnx")
    x_int = torch.clamp(torch.floor(x / integer.scale + 0.5), 0, 255)
    start = time.perf_counter()
    handoff = finn_handoff(directory / "model_int.onnx", x_int, streamline="StreamlinePlus")
    seconds = time.perf_counter() - start
    streamlined = ModelWrapper(handoff.path)
    finn_logits = execute_onnx(streamlined, {streamlined.graph.input[0].name: x_int.numpy()})[
        streamlined.graph.output[0].name
    ]
    with torch.no_grad():
        torch_logits = qmodel(x).numpy()
    return {
        "qonnx verified": report.passed,
        "input": integer.datatype,
        "nodes": (exported_nodes, len(streamlined.graph.node)),
        "ops": sorted({n.op_type for n in streamlined.graph.node}),
        "float ops": finn_target.float_operations(streamlined),
        "max |finn - torch|": float(np.max(np.abs(finn_logits - torch_logits))),
        "identical predictions": int((finn_logits.argmax(1) == torch_logits.argmax(1)).sum()),
        "finn seconds": seconds,
    }


def run(bits: list[int], epochs: int, seed: int, lr: float, add_bits: int | None) -> None:
    logging.getLogger("quark").setLevel(logging.ERROR)  # the float batch norms are named at every quantize
    torch.manual_seed(seed)
    data = digits.load(seed)
    model = digits.train(digits.ResidualCNN(), data, epochs=30, seed=seed)
    float_acc = digits.accuracy(model, data)
    x_test = torch.cat([x for x, _ in data.loader("test", batch_size=512)])
    print(f"digits ResidualCNN (batch norm kept), seed {seed}: float test accuracy {float_acc:.2f} % on {len(x_test)} images")
    for b in bits:
        config = finn(weight_bits=b, act_bits=b, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
        if add_bits is not None:  # the residual addition (its inputs and sum) at another width
            wider = finn(act_bits=add_bits, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD)).global_quant_config
            config.layer_type_quant_config["Add"] = QuantizationConfig(input_tensors=wider.input_tensors)
        qmodel = ModelQuantizer(config).quantize_model(
            copy.deepcopy(model), data.loader("train", batch_size=64), progress=False
        )
        accuracies = [digits.accuracy(qmodel, data)]
        for epoch in range(epochs):
            digits.train(qmodel, data, epochs=1, lr=lr, seed=seed + epoch)
            accuracies.append(digits.accuracy(qmodel, data))
        label = f"W{b}A{b}" + (f" (addition {add_bits} bits)" if add_bits else "")
        print(
            f"{label}: PTQ {accuracies[0]:.2f} %; QAT per epoch "
            + ", ".join(f"{a:.2f}" for a in accuracies[1:])
            + f" %; final - float {accuracies[-1] - float_acc:+.2f} points"
        )
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
            f"(FINN steps {result['finn seconds']:.0f} s)"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bits", type=int, nargs="+", default=[4, 2])
    parser.add_argument("--epochs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--lr", type=float, default=1e-3)
    parser.add_argument("--add-bits", type=int, default=None, help="bit width of the residual addition")
    args = parser.parse_args()
    torch.set_num_threads(1)
    run(args.bits, args.epochs, args.seed, args.lr, args.add_bits)
