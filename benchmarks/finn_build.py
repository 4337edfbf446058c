"""The vision zoo through FINN: FINN's own builder with the package's published steps, and the package's
own export, side by side in one run.

For each network of :mod:`quark.torch.examples.vision_zoo` (random weights, 3x32x32): graph mode +
``presets.finn()`` (W4A4), calibrated on random images, exported once to QONNX with an integer input
(``ModelExporter.export_finn_dataflow``'s first half; its seconds are reported apart). Then, each in a
fresh process, alternating, ``--runs`` times each:

- **own**: ``targets.finn.dataflow.export_finn_dataflow`` on that file (the package's runner: its
  steps, each checked against torch on 4 inputs; the hardware graph executed on 8 inputs; the
  estimate; the directory's files);
- **finn**: FINN's ``build_dataflow_cfg`` on the same file with ``DataflowBuildConfig(steps=[the
  package's front end and partition step, FINN's step_specialize_layers,
  step_target_fps_parallelization, step_minimize_bit_width, step_transpose_decomposition,
  step_generate_estimate_reports])``, the same verification files; then FINN's parent graph
  executed on the 8 inputs (the batched executor, bit-exact to FINN's Python execution).

Both: Pynq-Z1 (xc7z020clg400-1), 100 MHz, folded for 1,000 fps. Printed per network: the median
seconds of each flow (and per step, from the package's records and FINN's ``time_per_step.json``),
their ratio, one partition and equality to torch in both. FINN's builder imports its Vivado simulator
(``finn.xsi``): here a stand-in module is put in ``sys.modules`` for it, and ``XILINX_VIVADO`` names no
Vivado (FINN's builder reads it to record the tool version); this script only, no Vivado step runs.

    .venv/bin/python benchmarks/finn_build.py [--networks resnet18 ...] [--runs 3] [--timeout 900]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

#: the networks of the zoo FINN 1.6.1 takes to one partition (MobileNetV3 and EfficientNet-B0 need
#: hardware for HardSwish / SiLU, refused node by node)
NETWORKS = (
    "resnet18",
    "resnet50",
    "mobilenet_v2",
    "squeezenet1_1",
    "shufflenet_v2_x0_5",
    "regnet_x_400mf",
    "densenet121",
    "resnet10t",
    "efficientnet_lite0",
    "mobilenetv4_conv_small",
)
UNSIGNED = ("ReLU", "ReLU6", "Sigmoid", "Hardsigmoid")
SAMPLES, TARGET_FPS = 8, 1000.0


def prepare(name: str, directory: Path) -> dict:
    """Quantize, export the QONNX file with an integer input, save the inputs and torch's outputs."""
    import numpy as np
    import torch

    from quark.torch.examples.vision_zoo import ZOO
    from quark.torch.extensions.brevitas._backend.targets.finn import interface
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    torch.set_num_threads(1)
    entry = ZOO[name]
    model = entry.build()
    present = {type(m).__name__ for m in model.modules()}
    generator = torch.Generator().manual_seed(1)
    calibration = [torch.rand(16, *entry.input_shape, generator=generator) for _ in range(4)]
    qmodel = ModelQuantizer(finn(unsigned=tuple(t for t in UNSIGNED if t in present))).quantize_model(
        model, calibration, progress=False, check_algorithms=False
    )
    x = torch.rand(SAMPLES, *entry.input_shape, generator=torch.Generator().manual_seed(2))
    start = time.perf_counter()
    float_path = directory / "model.qonnx.onnx"
    ModelExporter(float_path).export_qonnx_model(qmodel, x[:1])
    integer = interface.integer_input(float_path, directory / "model_integer_input.qonnx.onnx")
    seconds = time.perf_counter() - start
    with torch.no_grad():
        np.save(directory / "expected.npy", qmodel(x).numpy())
    np.save(directory / "input.npy", integer.integers(x.numpy()))
    np.save(directory / "check_input.npy", integer.integers(x[:4].numpy()))
    np.save(directory / "check_expected.npy", np.load(directory / "expected.npy")[:4])
    return {"export_seconds": seconds}


def own(directory: Path) -> dict:
    import numpy as np

    from quark.torch.extensions.brevitas._backend.targets.finn.dataflow import export_finn_dataflow
    from quark.torch.extensions.brevitas.finn_steps import FinnBuildConfig

    out = directory / "own"
    start = time.perf_counter()
    result = export_finn_dataflow(
        directory / "model_integer_input.qonnx.onnx",
        np.load(directory / "input.npy"),
        out,
        FinnBuildConfig(target_fps=TARGET_FPS),
        expected=np.load(directory / "expected.npy"),
    )
    seconds = time.perf_counter() - start
    v = result.verification
    return {
        "seconds": seconds,
        "steps": {s.name: s.seconds for s in result.steps},
        "equal": bool(v.passed and v.identical_predictions == v.samples),
        "max_abs_diff": v.max_abs_diff,
        "layers": len(result.estimate.layers),
        "partitions": 1,
    }


def finn_builder(directory: Path) -> dict:
    import types

    import numpy as np

    xsi = types.ModuleType("finn.xsi")  # FINN's Vivado simulator: no step here runs it
    xsi.SimEngine = type("SimEngine", (), {})
    sys.modules["finn.xsi"] = xsi
    os.environ.setdefault("XILINX_VIVADO", "/no/vivado")  # read only to name the tool version in FINN's report
    os.environ.setdefault("FINN_BUILD_DIR", str(directory / "finn_work"))
    os.makedirs(os.environ["FINN_BUILD_DIR"], exist_ok=True)
    from finn.builder.build_dataflow import build_dataflow_cfg
    from finn.builder.build_dataflow_config import DataflowBuildConfig
    from qonnx.core.modelwrapper import ModelWrapper

    from quark.torch.extensions.brevitas import finn_steps
    from quark.torch.extensions.brevitas._backend.targets.finn import execute

    out = directory / "finn"
    cfg = DataflowBuildConfig(
        output_dir=str(out),
        synth_clk_period_ns=10.0,
        fpga_part="xc7z020clg400-1",
        target_fps=int(TARGET_FPS),
        steps=[
            *finn_steps.FRONT_END,
            finn_steps.step_quark_create_dataflow_partition,
            "step_specialize_layers",
            "step_target_fps_parallelization",
            "step_minimize_bit_width",
            "step_transpose_decomposition",
            "step_generate_estimate_reports",
        ],
        generate_outputs=["estimate_reports"],
        save_intermediate_models=True,
        verify_input_npy=str(directory / "check_input.npy"),
        verify_expected_output_npy=str(directory / "check_expected.npy"),
    )
    start = time.perf_counter()
    status = build_dataflow_cfg(str(directory / "model_integer_input.qonnx.onnx"), cfg)
    seconds = time.perf_counter() - start
    sys.stdout = sys.__stdout__  # FINN's builder replaces the process's streams with its loggers
    sys.stderr = sys.__stderr__
    if status != 0:
        return {"seconds": seconds, "equal": False, "failed": (out / "build_dataflow.log").read_text()[-2000:]}
    parent = ModelWrapper(str(out / "intermediate_models" / "dataflow_parent.onnx"))
    produced = execute.execute(parent, [np.load(directory / "input.npy")]).outputs[0]
    expected = np.load(directory / "expected.npy")
    diff = float(np.max(np.abs(produced.reshape(expected.shape) - expected)))
    per_step = json.loads((out / "report" / "time_per_step.json").read_text())
    per_step.pop("total_build_time", None)
    layers = ModelWrapper(str(out / "intermediate_models" / "step_generate_estimate_reports.onnx")).graph.node
    return {
        "seconds": seconds,
        "steps": per_step,
        "equal": bool(diff <= 1e-5 * max(1.0, float(np.abs(expected).max()))),
        "max_abs_diff": diff,
        "layers": len(layers),
        "partitions": len(parent.get_nodes_by_op_type("StreamingDataflowPartition")),
    }


FLOWS = {"prepare": prepare, "own": own, "finn": finn_builder}


def _child(flow: str, name: str, directory: str) -> None:
    """Run one flow in this (fresh) process and print its result as JSON on the last line."""
    import logging

    logging.basicConfig(level=logging.ERROR)
    arguments = (name, Path(directory)) if flow == "prepare" else (Path(directory),)
    report(FLOWS[flow](*arguments))


def report(result: dict) -> None:
    """A child's result, as the last line of its output (what :func:`fresh_process` reads)."""
    print("\n" + json.dumps(result), file=sys.__stdout__, flush=True)


def fresh_process(script: str, arguments: list[str], timeout: float | None = None) -> dict:
    """``script --child *arguments`` in a fresh interpreter (nothing cached between runs): the JSON its
    last line reports, or ``{"failed": why}`` with ``seconds`` the timeout or NaN."""
    command = [sys.executable, script, "--child", *arguments]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"seconds": timeout, "equal": False, "failed": f"over {timeout:g} s"}
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode != 0 or not lines:
        return {"seconds": math.nan, "equal": False, "failed": done.stderr[-1500:]}
    return json.loads(lines[-1])


def _run(flow: str, name: str, directory: Path, timeout: float) -> dict:
    return fresh_process(__file__, [flow, name, str(directory)], timeout)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--networks", nargs="*", default=list(NETWORKS))
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--timeout", type=float, default=900.0, help="seconds a flow may take")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        _child(*args.child)
        return 0
    print(f"machine: {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f} at the start; one thread per run")
    print(f"{'network':<24}{'export':>8}{'own (median)':>14}{'FINN builder':>14}{'ratio':>7}  one partition, equal to torch")
    failures = 0
    for name in args.networks:
        with tempfile.TemporaryDirectory(prefix=f"finn_build_{name}_") as scratch:
            directory = Path(scratch)
            prepared = _run("prepare", name, directory, args.timeout)
            if "failed" in prepared:
                print(f"{name:<24} prepare failed: {prepared['failed'].strip().splitlines()[-1]}")
                failures += 1
                continue
            runs = {"own": [], "finn": []}
            for _ in range(args.runs):
                for flow, results in runs.items():
                    results.append(_run(flow, name, directory, args.timeout))
            medians = {flow: statistics.median(r["seconds"] for r in results) for flow, results in runs.items()}
            ok = {flow: all(r.get("equal") and r.get("partitions") == 1 for r in results) for flow, results in runs.items()}
            failures += not all(ok.values())
            each = {flow: ", ".join(f"{r['seconds']:.1f}" for r in results) for flow, results in runs.items()}
            print(
                f"{name:<24}{prepared['export_seconds']:>7.1f}s{medians['own']:>13.1f}s{medians['finn']:>13.1f}s"
                f"{medians['finn'] / medians['own']:>7.2f}  own: {'yes' if ok['own'] else 'NO'}, "
                f"FINN: {'yes' if ok['finn'] else 'NO'}; runs own {each['own']}, FINN {each['finn']}"
            )
            for flow, results in runs.items():
                failed = next((r["failed"] for r in results if "failed" in r), None)
                if failed:
                    print(f"    {flow} failed: {failed.strip().splitlines()[-1]}")
                    continue
                steps = results[0]["steps"]
                median_steps = {s: statistics.median(r["steps"].get(s, 0.0) for r in results) for s in steps}
                listed = ", ".join(f"{step.removeprefix('step_')} {v:.1f}" for step, v in median_steps.items())
                print(f"    {flow} per step (median s): {listed}")
    print(f"load average at the end: {os.getloadavg()[0]:.1f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
