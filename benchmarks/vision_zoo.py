"""The vision zoo (torchvision / timm definitions, random weights, 3x32x32) to both targets.

For each network of :mod:`quark.torch.examples.vision_zoo`, in a fresh process each (a stage that
hangs or runs out of time is reported, not waited on):

- **FINN**: graph mode + ``presets.finn()`` (W4A4; the network's ReLU / ReLU6 / sigmoid outputs
  unsigned), calibrated on random images, then ``ModelExporter.export_finn_dataflow`` with an
  integer input: the QONNX export (verified), FINN's front end to one dataflow partition, the
  hardware graph executed on every sample against torch. Reported: hardware layers, nodes left
  outside, hardware layers computing on floats, verification, seconds per stage.
- **NPU**: graph mode + ``presets.xint8(graph=True)``, then ``export_onnx_model`` (QCDQ, IPU checks
  before and after, executed in ONNX Runtime without optimizations against torch), and the largest
  difference when ONNX Runtime runs it with its default optimizations (in output LSBs).

A failing stage prints the first line of its error (which names the node and the fix).

    .venv/bin/python benchmarks/vision_zoo.py [--networks resnet18 ...] [--targets finn npu]
        [--timeout 600] [--markdown] [--steps]
"""

from __future__ import annotations

import argparse
import json
import logging
import re
import subprocess
import sys
import tempfile
import time
import warnings
from collections import Counter
from pathlib import Path

import torch

UNSIGNED = ("ReLU", "ReLU6", "Sigmoid", "Hardsigmoid")  # activation types with non-negative outputs
TARGETS = ("finn", "npu")
CALIBRATION_BATCHES, BATCH = 4, 16
SAMPLES = 8  # inputs the exported graphs are executed on


def _images(shape: tuple[int, ...], batches: int, batch: int, seed: int) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.rand(batch, *shape, generator=generator) for _ in range(batches)]


def _finn(model, entry, directory: Path, times: dict) -> dict:
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import finn

    present = {type(m).__name__ for m in model.modules()}
    config = finn(unsigned=tuple(t for t in UNSIGNED if t in present))
    start = time.perf_counter()
    qmodel = ModelQuantizer(config).quantize_model(
        model, _images(entry.input_shape, CALIBRATION_BATCHES, BATCH, seed=1), progress=False
    )
    times["quantize"] = time.perf_counter() - start
    x = _images(entry.input_shape, 1, SAMPLES, seed=2)[0]
    start = time.perf_counter()
    result = ModelExporter(directory / "dataflow").export_finn_dataflow(qmodel, x, integer_input=True)
    times["dataflow"] = time.perf_counter() - start
    v = result.verification
    return {
        "hw_layers": len(result.estimate.layers),
        "outside": list(result.outside),
        "float_layers": list(result.float_layers),
        "passed": v.passed,
        "max_abs_diff": v.max_abs_diff,
        "identical": f"{v.identical_predictions}/{v.samples}",
        "steps": {s.name: round(s.seconds, 1) for s in result.steps},
    }


def _npu(model, entry, directory: Path, times: dict) -> dict:
    from quark.torch.extensions.brevitas.api import ModelExporter, ModelQuantizer
    from quark.torch.extensions.brevitas.presets import xint8

    quantizer = ModelQuantizer(xint8(graph=True))
    start = time.perf_counter()
    qmodel = quantizer.quantize_model(
        model, _images(entry.input_shape, CALIBRATION_BATCHES, BATCH, seed=1), progress=False
    )
    times["quantize"] = time.perf_counter() - start
    x = _images(entry.input_shape, 1, SAMPLES, seed=2)[0]
    start = time.perf_counter()
    report = ModelExporter(directory / "model.onnx").export_onnx_model(qmodel, x, plans=quantizer.plans)
    times["export"] = time.perf_counter() - start
    return {
        "passed": report.passed,
        "max_abs_diff": report.max_abs_diff,
        "max_lsb": report.max_diff_lsb,
        "target_checks": len(report.target_checks),
        "ort_default_lsb": report.optimized_runtime_diff,
    }


def one(name: str, target: str) -> dict:
    """Build ``name`` and take it to ``target``; the outcome as a JSON-able dict."""
    from quark.torch.examples import vision_zoo

    logging.getLogger("quark").setLevel(logging.ERROR)
    warnings.simplefilter("ignore")
    torch.set_num_threads(1)
    times: dict[str, float] = {}
    start = time.perf_counter()
    entry = vision_zoo.ZOO[name]
    model = entry.build(seed=0)
    times["build"] = time.perf_counter() - start
    with tempfile.TemporaryDirectory() as directory:
        try:
            outcome = {"finn": _finn, "npu": _npu}[target](model, entry, Path(directory), times)
        except Exception as error:  # noqa: BLE001 - the row reports it; the error names the node and fix
            outcome = {"passed": False, "error": f"{type(error).__name__}: {str(error).strip()}"}
    return {"network": name, "target": target, "seconds": {k: round(v, 1) for k, v in times.items()}, **outcome}


def run(name: str, target: str, timeout: float) -> dict:
    command = [sys.executable, __file__, "--one", name, target]
    start = time.perf_counter()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, check=False)
    except subprocess.TimeoutExpired:
        return {"network": name, "target": target, "passed": False, "error": f"did not finish in {timeout:.0f} s"}
    wall = round(time.perf_counter() - start, 1)
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    if done.returncode or not lines:
        return {"network": name, "target": target, "passed": False, "error": done.stderr.strip()[-300:], "wall_s": wall}
    return {**json.loads(lines[-1]), "wall_s": wall}


def _cell(row: dict) -> str:
    if "error" in row:  # its first line, and the first item under it where it lists them
        lines = [line.strip() for line in row["error"].splitlines() if line.strip()]
        refused = Counter(re.findall(r"\((\w+), module ", row["error"]))  # a FinnError's nodes, by op type
        by_type = f" (op types: {', '.join(f'{t} {n}' for t, n in refused.most_common())})" if refused else ""
        after = f" after {row['wall_s']:g} s" if "wall_s" in row else ""
        return f"FAIL{after}: " + " ".join(lines[:2] if lines[0].endswith(":") else lines[:1])[:300] + by_type
    seconds = " + ".join(f"{k} {v:g}" for k, v in row["seconds"].items())
    if row["target"] == "finn":
        return (
            f"{'PASS' if row['passed'] else 'FAIL'}: {row['hw_layers']} hw layers, "
            f"outside: {', '.join(row['outside']) or '-'}, float hw: {', '.join(row['float_layers']) or '-'}, "
            f"max diff {row['max_abs_diff']:.3g}, {row['identical']} identical ({seconds} s)"
        )
    ort, lsb = row["ort_default_lsb"], row["max_lsb"]
    return (
        f"{'PASS' if row['passed'] else 'FAIL'}: {row['target_checks']} IPU checks, max diff {row['max_abs_diff']:.3g}"
        f"{'' if lsb is None else f' ({lsb:g} LSB)'}, ORT defaults {'-' if ort is None else f'{ort:.3g}'} ({seconds} s)"
    )


def _steps(row: dict) -> str:
    """A FINN row's passes with their seconds; the rest of the dataflow export (the QONNX export and its
    verification, the preparation, the execution that checks each pass, folding and estimates) as
    ``other``."""
    steps = row.get("steps") or {}
    if not steps:
        return f"  {row['network']} {row['target']}: no pass timings"
    other = row["seconds"].get("dataflow", 0.0) - sum(steps.values())
    return f"  {row['network']} passes: " + ", ".join(f"{k} {v:g} s" for k, v in steps.items()) + f"; other {other:.1f} s"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--one", nargs=2, metavar=("NETWORK", "TARGET"), help=argparse.SUPPRESS)
    parser.add_argument("--networks", nargs="*")
    parser.add_argument("--targets", nargs="*", choices=TARGETS, default=list(TARGETS))
    parser.add_argument("--timeout", type=float, default=600.0, help="seconds per network and target")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--steps", action="store_true", help="each FINN pass's seconds, and the time before them")
    args = parser.parse_args()
    if args.one:
        print(json.dumps(one(*args.one)))
        return
    from quark.torch.examples import vision_zoo

    names = args.networks or list(vision_zoo.ZOO)
    if args.markdown:
        print("| network | " + " | ".join(args.targets) + " |\n|---|" + "---|" * len(args.targets))
    passed = dict.fromkeys(args.targets, 0)
    for name in names:
        cells, rows = [], []
        for target in args.targets:
            row = run(name, target, args.timeout)
            passed[target] += bool(row.get("passed"))
            cells.append(_cell(row))
            rows.append(row)
        if args.markdown:
            print(f"| {name} | " + " | ".join(cells) + " |", flush=True)
        else:
            print(name + "".join(f"\n  {t}: {c}" for t, c in zip(args.targets, cells)), flush=True)
        for row in rows if args.steps else ():
            print(_steps(row), flush=True)
    print(", ".join(f"{t}: {n}/{len(names)} passed" for t, n in passed.items()))


if __name__ == "__main__":
    main()
