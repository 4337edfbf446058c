"""The whole journey on scikit-learn's real digits: a float CNN to an FPGA dataflow and an ONNX Runtime graph.

1. Train ``digits.ResidualCNN`` (conv, a residual block with batch norm, max pooling, a linear head).
2. PTQ in graph mode with the FINN preset: 4-bit weights and activations, power-of-two TQT
   thresholds (``_3SD`` init), an unsigned 8-bit input, every tensor between layers quantized.
3. QAT in a plain loop (one Adam for the run, learning rate cosine-decayed to 0), test accuracy
   after every epoch; then freeze.
4. Export QONNX, executed and compared with torch.
5. FINN's dataflow for the Pynq-Z1 (xc7z020clg400-1, 100 MHz): one partition of hardware layers
   taking UINT8 pixels (``integer_input=True``), executed in Python on the whole test set and
   compared with torch, folded for a target throughput, with FINN's resource and cycle estimates
   against the part.
6. QDQ for ONNX Runtime: the W4A4 FINN model rounds ties up, which QuantizeLinear cannot; what is
   exported is an XINT8 graph-mode PTQ of the same float model (the AMD NPU's scheme), verified.
7. A short report: accuracy at each stage, model size, the FPGA graph and its estimate, the files.

    make demo     # or: python examples/digits_qat_finn.py [--epochs 8] [--out demo_output] [--seed 0]

Every log line (FINN's and qonnx's included) goes to ``<out>/journey.log``; the console shows this
package's warnings and the report.
"""

from __future__ import annotations

import argparse
import logging
import time
import warnings
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

import torch

from quark.torch.examples import digits
from quark.torch.extensions.brevitas import presets
from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer, UnsupportedExportError
from quark.torch.extensions.brevitas.qat import freeze
from quark.torch.quantization.config.config import TQTSpec
from quark.torch.quantization.config.type import TQTThresholdInitMeth

PART, CLOCK_MHZ = "xc7z020clg400-1", 100.0
BITS = 4


class Timer:
    """Wall time of each stage, in order."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}

    @contextmanager
    def __call__(self, stage: str):
        print(f"[{len(self.seconds) + 1}] {stage} ...", flush=True)
        start = time.perf_counter()
        yield
        self.seconds[stage] = time.perf_counter() - start


@contextmanager
def logs_to(path: Path):
    """Every logger (and Python warnings) to ``path`` at INFO; this package's warnings also to the console."""
    root, quark_log = logging.getLogger(), logging.getLogger("quark")
    to_file = logging.FileHandler(path, mode="w")
    to_file.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    to_console = logging.StreamHandler()
    to_console.setLevel(logging.WARNING)
    to_console.setFormatter(logging.Formatter("  %(levelname)s %(name)s: %(message)s"))
    saved = root.level, quark_log.level
    root.addHandler(to_file)
    root.setLevel(logging.INFO)
    quark_log.addHandler(to_console)
    logging.captureWarnings(True)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("default")  # each distinct warning once, into the log file
            yield
    finally:
        logging.captureWarnings(False)
        quark_log.removeHandler(to_console)
        root.removeHandler(to_file)
        to_file.close()
        root.setLevel(saved[0])
        quark_log.setLevel(saved[1])


def fpga_parameters(partition) -> dict[str, Counter]:
    """The hardware layers' parameters: MVAU weights and everything else (thresholds, scales,
    biases), each as {FINN datatype: number of values}."""
    found: dict[str, Counter] = {"weights": Counter(), "other": Counter()}
    for node in partition.graph.node:
        for index, name in enumerate(node.input):
            value = partition.get_initializer(name)
            if value is not None:
                role = "weights" if node.op_type.startswith("MVAU") and index == 1 else "other"
                found[role][partition.get_tensor_datatype(name).name] += value.size
    return found


def describe_fpga_graph(result) -> dict:
    """Node types inside the dataflow partition and outside it (the host), from the written files."""
    from qonnx.core.modelwrapper import ModelWrapper

    parent = ModelWrapper(result.files["parent"])
    partition = ModelWrapper(result.files["partition"])
    return {
        "inside": dict(Counter(n.op_type for n in partition.graph.node)),
        "outside": dict(Counter(n.op_type for n in parent.graph.node)),
        "partitions": sum(n.op_type == "StreamingDataflowPartition" for n in parent.graph.node),
        "input": str(partition.get_tensor_datatype(partition.graph.input[0].name)),
        "parameters": fpga_parameters(partition),
    }


def run(epochs: int, out: Path, seed: int, float_epochs: int, lr: float, target_fps: float) -> dict:
    timer = Timer()
    data = digits.load(seed)
    x_test, y_test = (torch.cat(t) for t in zip(*data.loader("test", batch_size=512)))
    accuracy: dict[str, float] = {}

    with timer("train the float ResidualCNN"):
        torch.manual_seed(seed)
        model = digits.train(digits.ResidualCNN(), data, epochs=float_epochs, seed=seed)
        accuracy["float"] = digits.accuracy(model, data)

    with timer(f"PTQ, graph mode, FINN preset W{BITS}A{BITS}, power-of-two TQT thresholds"):
        config = presets.finn(weight_bits=BITS, act_bits=BITS, qat_spec=TQTSpec(TQTThresholdInitMeth._3SD))
        qmodel = ModelQuantizer(config).quantize_model(model, data.loader("train"), progress=False)
        accuracy["PTQ"] = digits.accuracy(qmodel, data)

    def record(epoch: int, qmodel: torch.nn.Module) -> None:
        accuracy[f"QAT epoch {epoch}"] = digits.accuracy(qmodel, data)
        print(f"    epoch {epoch}: test accuracy {accuracy[f'QAT epoch {epoch}']:.2f} %", flush=True)

    with timer(f"QAT, {epochs} epoch(s), one Adam, learning rate cosine-decayed to 0"):
        digits.train(qmodel, data, epochs, lr, seed, schedule="cosine", on_epoch=record)
        freeze(qmodel)

    qonnx_path = out / f"digits_w{BITS}a{BITS}.qonnx.onnx"
    with timer("export QONNX (for FINN)"):
        qonnx = ModelExporter(qonnx_path).export_qonnx_model(qmodel, x_test)

    with timer(f"FINN dataflow for {PART} at {CLOCK_MHZ:g} MHz, target {target_fps:,.0f} fps"):
        dataflow = ModelExporter(out / "finn").export_finn_dataflow(
            qmodel, x_test, part=PART, clock_mhz=CLOCK_MHZ, target_fps=target_fps, integer_input=True
        )
        fpga = describe_fpga_graph(dataflow)

    qdq_path = out / "digits_xint8.qdq.onnx"
    with timer("QDQ for ONNX Runtime"):
        try:
            ModelExporter(out / f"digits_w{BITS}a{BITS}.qdq.onnx").export_onnx_model(qmodel, x_test)
            w4_qdq = "exported"
        except UnsupportedExportError as error:
            named = str(error).splitlines()[1:]  # one line per quantizer, with the reason
            w4_qdq = f"refused, {len(named)} quantizers named, e.g. {named[0].strip()}"
        xint8 = presets.xint8(graph=True)
        quantizer = ModelQuantizer(xint8)
        int8_model = quantizer.quantize_model(model, data.loader("train"), progress=False)
        accuracy["XINT8 PTQ (QDQ)"] = digits.accuracy(int8_model, data)
        qdq = ModelExporter(qdq_path).export_onnx_model(int8_model, x_test, plans=quantizer.plans)

    with torch.no_grad():
        torch_predictions = qmodel(x_test).argmax(1)
    return {
        "accuracy": accuracy,
        "seconds": timer.seconds,
        "test_images": len(y_test),
        "torch_vs_labels": int((torch_predictions == y_test).sum()),
        "float_bytes": sum(p.numel() * p.element_size() for p in model.parameters()),
        "float_parameters": sum(p.numel() for p in model.parameters()),
        "quantized_weights": sum(
            m.weight.numel() for m in model.modules() if isinstance(m, (torch.nn.Conv2d, torch.nn.Linear))
        ),
        "qonnx": qonnx,
        "dataflow": dataflow,
        "fpga": fpga,
        "w4_qdq": w4_qdq,
        "qdq": qdq,
        "files": {
            "QONNX (W4A4, for FINN)": qonnx_path,
            "FINN dataflow directory": Path(dataflow.directory),
            "QDQ (XINT8, ONNX Runtime / AMD NPU)": qdq_path,
            "log": out / "journey.log",
        },
    }


def counts(table: dict[str, int]) -> str:
    return ", ".join(f"{name} x{n:,}" for name, n in sorted(table.items()))


def report(r: dict) -> str:
    """The printed summary of a :func:`run` result."""
    acc, e, v, fpga = r["accuracy"], r["dataflow"].estimate, r["dataflow"].verification, r["fpga"]
    qonnx, qdq = r["qonnx"], r["qdq"]
    weight_bytes = r["quantized_weights"] * BITS / 8
    shrink = r["float_bytes"] / weight_bytes
    estimated = [res for res in ("LUT", "BRAM_18K", "URAM", "DSP") if e.part.capacity[res] or e.totals[res]]
    use = ", ".join(
        f"{res} {e.totals[res]:,.0f} / {e.part.capacity[res]:,} ({100 * e.utilization[res]:.1f} %)"
        for res in estimated
    )
    target = "met" if e.meets_target else "MISSED"
    verdict = {True: "verified", False: "FAILED"}
    lines = ["", "=" * 78, "digits ResidualCNN: the journey", "=" * 78]
    lines += [f"accuracy on the {r['test_images']} held-out test images:"]
    lines += [f"  {stage:<18} {value:6.2f} %" for stage, value in acc.items()]
    lines += [
        "model size:",
        f"  float: {r['float_parameters']:,} parameters x 32 bits = {r['float_bytes']:,} bytes",
        f"  W{BITS}A{BITS}: {r['quantized_weights']:,} weights x {BITS} bits = {weight_bytes:,.0f} bytes "
        + f"({shrink:.1f}x smaller); biases and batch norm fold into FINN's thresholds",
        f"  on the FPGA: weights {counts(fpga['parameters']['weights'])}; thresholds, scales and biases "
        + f"{counts(fpga['parameters']['other'])} (FINN's step_minimize_bit_width narrows them next)",
        "exports:",
        f"  QONNX: {verdict[qonnx.passed]} against torch on {r['test_images']} images "
        + f"(max |diff| {qonnx.max_abs_diff:.3g})",
        f"  QDQ, XINT8: {verdict[qdq.passed]} in ONNX Runtime (max |diff| {qdq.max_abs_diff:.3g})",
        f"  W{BITS}A{BITS} to QDQ: {r['w4_qdq']}",
        f"FINN dataflow ({PART}, {e.clock_mhz:g} MHz):",
        f"  {fpga['partitions']} dataflow partition, input {fpga['input']}",
        f"  inside ({sum(fpga['inside'].values())} hardware layers): {counts(fpga['inside'])}",
        f"  outside (host): {counts(fpga['outside'])}",
        f"  layers computing on floats: {', '.join(r['dataflow'].float_layers) or 'none'}",
        f"  hardware layers vs torch on the whole test set: identical predictions {v.identical_predictions}/"
        + f"{v.samples}, max |logit diff| {v.max_abs_diff:.3g}",
        f"  estimate: {use}",
        f"  {e.max_cycles:,} cycles per frame (bottleneck {e.bottleneck}) -> {e.fps:,.0f} fps; latency "
        + f"{e.critical_path_cycles:,} cycles = {e.latency_ms:.3f} ms",
        f"  fits: {'yes' if e.fits else 'NO'}; target {e.target_fps:,.0f} fps {target}",
        *(f"  problem: {p}" for p in e.problems),
        "time per stage: "
        + ", ".join(f"{stage.split(',')[0]} {s:.1f} s" for stage, s in r["seconds"].items()),
        "files:",
        *(f"  {what}: {path}" for what, path in r["files"].items()),
        "  in the FINN directory: " + ", ".join(sorted(Path(p).name for p in r["dataflow"].files.values())),
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=8, help="QAT epochs (default 8)")
    parser.add_argument("--out", type=Path, default=Path("demo_output"), help="output directory")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--float-epochs", type=int, default=30, help="float training epochs (default 30)")
    parser.add_argument("--lr", type=float, default=1e-3, help="QAT peak learning rate (Adam, cosine decay)")
    parser.add_argument(
        "--target-fps", type=float, default=20_000, help="FINN folding target (default 20,000)"
    )
    args = parser.parse_args(argv)
    torch.set_num_threads(1)
    args.out.mkdir(parents=True, exist_ok=True)
    with logs_to(args.out / "journey.log"):
        result = run(args.epochs, args.out, args.seed, args.float_epochs, args.lr, args.target_fps)
    print(report(result))
    return result


if __name__ == "__main__":
    main()
