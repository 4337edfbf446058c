"""One call: a QONNX file (or a quantized torch model) to a directory ready for FINN's
``build_dataflow`` with Vivado: the QONNX file, the dataflow parent and partition, the folding and
build configurations, the estimate report and the verification result.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

import numpy as np

from quark.torch.extensions.brevitas._backend.accumulator import Promise
from quark.torch.extensions.brevitas._backend.export.verify import FLOAT_RTOL, float_tolerance, max_diff
from quark.torch.extensions.brevitas._backend.targets.finn import accumulators as accumulator_checks
from quark.torch.extensions.brevitas._backend.targets.finn import execute
from quark.torch.extensions.brevitas._backend.targets.finn.errors import FinnError
from quark.torch.extensions.brevitas._backend.targets.finn.estimate import (
    FOLDING_ATTRIBUTES,
    MVAU_WWIDTH_MAX,
    Estimate,
    fold_and_estimate,
    plain,
)
from quark.torch.extensions.brevitas._backend.targets.finn.parts import FpgaPart, resolve
from quark.torch.extensions.brevitas._backend.targets.finn.pipeline import (
    as_array,
    dataflow_from_qonnx,
    require_finn,
    top_indices,
)
from quark.torch.extensions.brevitas._backend.targets.pipeline import StepCheck
from quark.torch.quantization.files import atomic_path, write_text

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class Verification:
    """The hardware-layer graph executed on every sample against a reference."""

    reference: str  # "torch" (expected outputs given) or "QONNX"
    samples: int
    max_abs_diff: float
    identical_predictions: int  # samples whose argmax (or top-k indices) equals the reference's
    allowed: float
    #: what executed the hardware-layer graph: the batched executor (``execute.BATCHED``, bit-exact to
    #: FINN's Python execution) or, for a graph it cannot compute exactly, FINN's Python execution
    engine: str

    @property
    def predictions_identical(self) -> bool:
        return self.identical_predictions == self.samples

    @property
    def passed(self) -> bool:
        return self.predictions_identical and self.max_abs_diff <= self.allowed


@dataclass(frozen=True)
class DataflowExport:
    """What :func:`export_finn_dataflow` wrote and found."""

    directory: str
    files: dict[str, str]  # role -> path
    steps: tuple[StepCheck, ...]
    outside: tuple[str, ...]
    float_layers: tuple[str, ...]
    estimate: Estimate
    verification: Verification

    @property
    def accumulators(self) -> tuple[accumulator_checks.AccumulatorCheck, ...]:
        """The accumulator-aware layers' accumulators in FINN, against their promise (``A2QSpec``)."""
        return self.estimate.accumulators

    def to_json(self) -> dict[str, Any]:
        """The result as JSON data (the command line's ``--json``)."""
        return {
            "directory": self.directory,
            "files": dict(self.files),
            "steps": [asdict(s) for s in self.steps],
            "outside_partition": list(self.outside),
            "float_layers": list(self.float_layers),
            "verification": {
                **asdict(self.verification),
                "predictions_identical": self.verification.predictions_identical,
                "passed": self.verification.passed,
            },
            "estimate": self.estimate.to_json(),
        }

    def __str__(self) -> str:
        v, e = self.verification, self.estimate
        lines = [
            f"FINN dataflow in {self.directory}: one partition of {len(e.layers)} hardware layers; "
            + f"outside: {', '.join(self.outside) or 'nothing'}",
            *("  " + s.describe() for s in self.steps),
            "  hardware layers computing on floats: " + (", ".join(self.float_layers) or "none"),
            (
                f"  verified on {v.samples} samples against {v.reference}: max |diff| {v.max_abs_diff:.3g} "
                f"(allowed {v.allowed:.3g}), identical predictions {v.identical_predictions}/{v.samples} "
                f"-> {'PASS' if v.passed else 'FAIL'}; executed by the {v.engine}"
            ),
            f"  {e.part.part} at {e.clock_mhz:g} MHz: " + e.verdict().replace("**", ""),
            *("  problem: " + p for p in e.problems),
        ]
        if self.accumulators:
            saved = sum(c.luts_saved for c in self.accumulators)
            held = sum(c.holds for c in self.accumulators)
            lines.append(
                f"  accumulators (A2QSpec): {held}/{len(self.accumulators)} within their promise after FINN's "
                f"MinimizeAccumulatorWidth; {saved:,.0f} LUTs saved against the unconstrained accumulators"
            )
            lines += ["    " + c.describe() for c in self.accumulators]
        return "\n".join(lines)


def export_finn_dataflow(
    qonnx_path: str | os.PathLike,
    inputs: Any,
    output_dir: str | os.PathLike,
    *,
    expected: Any = None,
    part: str = "xc7z020clg400-1",
    target_fps: float | None = None,
    clock_mhz: float = 100.0,
    top_k: int | None = None,
    check_samples: int = 4,
    rtol: float = FLOAT_RTOL,
    mvau_wwidth_max: int = MVAU_WWIDTH_MAX,
    folding: dict[str, dict[str, Any]] | None = None,
    accumulators: Mapping[str, Promise] | None = None,
) -> DataflowExport:
    """From a QONNX file to a directory ready for FINN's ``build_dataflow`` (with Vivado).

    Runs :func:`dataflow_from_qonnx` (each step checked on the first ``check_samples`` inputs),
    executes the hardware-layer graph on every input (:mod:`.execute`: batched, bit-exact to FINN's
    Python execution) and compares it with ``expected`` (the torch model's outputs; default: the
    QONNX graph's), then :func:`fold_and_estimate` for ``part`` (or sets ``folding``, node name ->
    PE / SIMD, instead of FINN's SetFolding: see :func:`~.estimate.fold_and_estimate`). Writes to
    ``output_dir``:

    - ``model.qonnx.onnx``: the QONNX file;
    - ``dataflow_parent.onnx`` / ``dataflow_partition.onnx``: FINN's parent graph (host-side layout
      nodes and one StreamingDataflowPartition) and the partition, specialized for ``part`` and folded;
    - ``folding_config.json``: the folding of every layer (FINN's ``folding_config_file`` format);
    - ``build_config.json``: the settings of FINN's ``DataflowBuildConfig`` for the rest of the build;
    - ``estimate.md`` / ``estimate.json``: per-layer and total resources, cycles, fps, latency against
      the part's capacity, and what keeps the design from the target or the part;
    - ``verification.json``: the step checks and the hardware graph against torch.

    ``accumulators`` (module -> ``accumulator.Promise``, what ``ModelExporter.export_finn_dataflow``
    reads from the model's ``A2QSpec`` layers): after FINN's MinimizeAccumulatorWidth, each such
    layer's MVAU / VVAU must have its accumulator within the promised width
    (:mod:`.accumulators`); the estimate files and the result report each one with the LUTs it
    saves.

    The verified graph is the hardware-layer graph before specialization: the specialized HLS/RTL
    layers run only in FINN's cppsim/rtlsim, which need Vivado; folding does not change what a
    layer computes.

    Raises:
        FinnError: a step failed or changed the outputs, nodes stayed outside the hardware, the
            hardware graph differs from ``expected``, or an accumulator-aware layer's accumulator is
            beyond its promise; names the step, node (and torch module), sample count or layer (with
            its promised and FINN's width).
        ValueError: unknown part, bad clock or target.
    """
    require_finn()
    from finn.util.config import extract_model_config_to_json
    from qonnx.custom_op.registry import getCustomOp

    samples = as_array(inputs, "inputs")
    if samples.ndim < 2:
        raise ValueError(f"inputs: expected a batch of samples (batch first), got shape {samples.shape}")
    fpga = resolve(part) if not isinstance(part, FpgaPart) else part  # fail before the long steps
    out = os.fspath(output_dir)
    os.makedirs(out, exist_ok=True)
    files = {"qonnx": os.path.join(out, "model.qonnx.onnx")}
    if os.path.abspath(qonnx_path) != os.path.abspath(files["qonnx"]):
        with atomic_path(files["qonnx"]) as temp:
            shutil.copyfile(os.fspath(qonnx_path), temp)
    logger.info("FINN front end: conversion, streamlining, hardware layers, one partition (each step checked)")
    dataflow = dataflow_from_qonnx(files["qonnx"], samples[:check_samples], out, top_k=top_k, rtol=rtol)
    logger.info("FINN hardware-layer graph: executing it on %d samples", len(samples))
    verification = _verify(dataflow.parent, samples, expected, top_k, rtol, files["qonnx"])
    logger.info(
        "FINN folding for %s on %s at %g MHz, then estimates",
        f"{target_fps:g} fps" if target_fps else "PE = SIMD = 1",
        fpga.part,
        clock_mhz,
    )
    folded, estimate = fold_and_estimate(
        dataflow.partition,
        fpga,
        target_fps=target_fps,
        clock_mhz=clock_mhz,
        mvau_wwidth_max=mvau_wwidth_max,
        folding=folding,
    )
    estimate = replace(estimate, accumulators=accumulator_checks.check(folded, accumulators or {}, fpga.part))
    files.update(
        {
            "partition": os.path.join(out, "dataflow_partition.onnx"),
            "parent": os.path.join(out, "dataflow_parent.onnx"),
            "folding_config": os.path.join(out, "folding_config.json"),
            "build_config": os.path.join(out, "build_config.json"),
            "estimate_md": os.path.join(out, "estimate.md"),
            "estimate_json": os.path.join(out, "estimate.json"),
            "verification": os.path.join(out, "verification.json"),
            "build_script": os.path.join(out, "build.py"),
            "readme": os.path.join(out, "README.md"),
        }
    )
    # every file is written beside its name and renamed when complete (quark.torch.quantization.files)
    with atomic_path(files["partition"]) as temp:
        folded.save(temp)
    getCustomOp(dataflow.parent.get_nodes_by_op_type("StreamingDataflowPartition")[0]).set_nodeattr(
        "model", files["partition"]
    )
    with atomic_path(files["parent"]) as temp:
        dataflow.parent.save(temp)
    with atomic_path(files["folding_config"]) as temp:
        extract_model_config_to_json(folded, temp, list(FOLDING_ATTRIBUTES))
    _write_json(files["build_config"], _build_config(fpga, clock_mhz, files["folding_config"]))
    write_text(files["estimate_md"], estimate.markdown())
    _write_json(files["estimate_json"], estimate.to_json())
    result = DataflowExport(
        out,
        files,
        tuple(dataflow.steps),
        tuple(dataflow.outside),
        tuple(dataflow.float_layers),
        estimate,
        verification,
    )
    write_text(files["build_script"], BUILD_SCRIPT)
    os.chmod(files["build_script"], 0o755)
    write_text(files["readme"], _readme(result))
    _write_json(
        files["verification"],
        {
            "steps": [asdict(s) for s in result.steps],
            "outside_partition": list(result.outside),
            "float_layers": list(result.float_layers),
            "hardware_graph": {
                **asdict(verification),
                "predictions_identical": verification.predictions_identical,
                "passed": verification.passed,
            },
        },
    )
    broken = accumulator_checks.problems(estimate.accumulators)
    if broken:
        raise FinnError(
            f"accumulators beyond their promise after FINN's MinimizeAccumulatorWidth; files are in {out}", broken
        )
    if not verification.passed:
        raise FinnError(
            f"the hardware-layer graph differs from {verification.reference} on {verification.samples} samples: max "
            f"|diff| {verification.max_abs_diff:.6g} (allowed {verification.allowed:.6g}), predictions "
            f"identical on {verification.identical_predictions} of {verification.samples}; files are in {out}"
        )
    logger.debug("%s", result)
    return result


def relocate(result: DataflowExport, directory: str | os.PathLike) -> DataflowExport:
    """Move the directory ``result`` describes to ``directory`` (replacing a FINN directory written
    there before) and point the parent graph at the partition's new path; returns the moved result.

    The command line writes the directory beside its name and moves it there when complete, so that
    a failed export leaves nothing behind.
    """
    import onnx

    source, target = os.path.abspath(result.directory), os.path.abspath(os.fspath(directory))
    backup = None
    if os.path.exists(target):
        backup = f"{target}.{os.getpid()}.old"
        os.replace(target, backup)
    try:
        os.replace(source, target)
    except OSError:
        if backup:
            os.replace(backup, target)
        raise
    if backup:
        shutil.rmtree(backup, ignore_errors=True)
    files = {role: os.path.join(target, os.path.relpath(path, source)) for role, path in result.files.items()}
    parent = onnx.load(files["parent"])
    for node in parent.graph.node:
        for attribute in node.attribute:
            if node.op_type == "StreamingDataflowPartition" and attribute.name == "model":
                attribute.s = files["partition"].encode()
    with atomic_path(files["parent"]) as temp:
        onnx.save(parent, temp)
    return DataflowExport(target, files, result.steps, result.outside, result.float_layers, result.estimate, result.verification)


def _verify(parent, samples, expected, top_k, rtol, qonnx_path) -> Verification:
    """The hardware-layer graph on every sample against torch's outputs (or the QONNX graph's),
    executed on the whole batch by :func:`execute.execute` (bit-exact to FINN's Python execution,
    which it runs instead where it cannot compute a node exactly)."""
    execution = execute.execute(parent, [samples])
    produced = execution.outputs[0]
    if expected is None:
        from quark.torch.extensions.brevitas._backend.targets.finn.pipeline import prepare

        reference, name = prepare(qonnx_path, samples)[2][0], "QONNX"
    else:
        reference, name = as_array(expected, "expected"), "torch"
    if top_k is not None:
        labels = top_indices(reference, top_k)
        indices = produced.reshape(labels.shape)
        identical = int(np.all(indices == labels, axis=-1).sum())
        return Verification(name, len(samples), max_diff(indices, labels), identical, 0.0, execution.engine)
    reference = reference.reshape(produced.shape)
    identical = int((produced.argmax(-1) == reference.argmax(-1)).sum())
    return Verification(
        name,
        len(samples),
        max_diff(produced, reference),
        identical,
        float_tolerance([reference], rtol),
        execution.engine,
    )


def _build_config(fpga: FpgaPart, clock_mhz: float, folding_config: str) -> dict[str, Any]:
    """Settings of FINN's ``DataflowBuildConfig`` (``finn.builder.build_dataflow_config``) that
    continue from ``dataflow_partition.onnx``: it is specialized and folded, so the build starts
    at code generation."""
    return {
        "output_dir": "finn_build",
        "fpga_part": fpga.part,
        "board": fpga.boards[0],
        "shell_flow_type": "vitis_alveo" if fpga.part.startswith("xcu") else "vivado_zynq",
        "synth_clk_period_ns": 1e3 / clock_mhz,
        "folding_config_file": os.path.basename(folding_config),
        "steps": [
            "step_minimize_bit_width",
            "step_generate_estimate_reports",
            "step_hw_codegen",
            "step_hw_ipgen",
            "step_set_fifo_depths",
            "step_create_stitched_ip",
            "step_synthesize_bitfile",
            "step_make_driver",
            "step_deployment_package",
        ],
        "generate_outputs": [
            "estimate_reports",
            "stitched_ip",
            "bitfile",
            "pynq_driver",
            "deployment_package",
        ],
    }


#: ``build.py`` in the directory: FINN's build from the folded partition to a bitfile, with Vivado.
#: Standalone (no quark import): it runs where FINN and Vivado are installed.
BUILD_SCRIPT = '''#!/usr/bin/env python3
"""Build this FINN dataflow directory into a bitfile with Vivado (written by quark-brevitas).

    python build.py [--output-dir DIR] [--check]

It runs FINN's build_dataflow on dataflow_partition.onnx (specialized and folded) with the settings
of build_config.json (part, board, clock, folding_config.json and the steps from code generation
to the bitfile, the PYNQ driver and a deployment package). The same with FINN's command line:

    finn build build_config.json dataflow_partition.onnx

Needs finn-plus installed with its dependencies (pip install finn-plus; `finn deps update`), and
Vivado and Vitis HLS on PATH (source Vivado's settings64.sh). --check checks that and stops.
"""

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
TOOLS = ("vivado", "vitis_hls")


def missing() -> list[str]:
    problems = [f"{tool} is not on PATH (source Vivado's settings64.sh)" for tool in TOOLS if shutil.which(tool) is None]
    try:
        import finn.builder.build_dataflow  # noqa: F401
        import finn.builder.build_dataflow_config  # noqa: F401
    except ImportError as error:
        problems.append(f"FINN's builder does not import ({error}): pip install finn-plus with its dependencies")
    return problems


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--output-dir", help="where FINN writes the build (default: build_config.json's output_dir)")
    parser.add_argument("--check", action="store_true", help="check FINN and Vivado are there, build nothing")
    args = parser.parse_args(argv)
    config = json.loads((HERE / "build_config.json").read_text())
    problems = missing()
    if problems:
        print("build.py: cannot build here: " + "; ".join(problems), file=sys.stderr)
        return 2
    if args.check:
        print(f"build.py: FINN and Vivado found; `python build.py` builds {config['board']} ({config['fpga_part']})")
        return 0
    from finn.builder.build_dataflow import build_dataflow_cfg
    from finn.builder.build_dataflow_config import DataflowBuildConfig

    cfg = DataflowBuildConfig.construct_from(HERE / "build_config.json")
    if args.output_dir:
        cfg.output_dir = str(Path(args.output_dir).resolve())
    return build_dataflow_cfg(str(HERE / "dataflow_partition.onnx"), cfg)


if __name__ == "__main__":
    os.chdir(HERE)
    sys.exit(main())
'''


def _readme(result: DataflowExport) -> str:
    """``README.md`` of the directory: what each file is, what was checked, how to go on."""
    e, v = result.estimate, result.verification
    return f"""# FINN dataflow directory

Written by quark-brevitas for {e.part.part} ({"/".join(e.part.boards)}) at {e.clock_mhz:g} MHz.

- Verified: the hardware-layer graph, executed by the {v.engine} on {v.samples} samples against {v.reference}:
  max |diff| {v.max_abs_diff:.3g}, identical predictions {v.identical_predictions}/{v.samples}
  ({"PASS" if v.passed else "FAIL"}).
- Estimated: {e.verdict().replace("**", "")}. Per layer: `estimate.md`.{_accumulator_line(e)}

## Files

| file | what |
|---|---|
| `model.qonnx.onnx` | the QONNX export of the quantized model (verified against torch) |
| `dataflow_parent.onnx` | FINN's parent graph: what stays on the host ({", ".join(result.outside) or "nothing"}) around one `StreamingDataflowPartition` |
| `dataflow_partition.onnx` | the partition: FINN's hardware layers, specialized for the part and folded; FINN's build starts here |
| `partitions/` | the partition as FINN's `CreateDataflowPartition` cut it, before specialization and folding (kept for reference) |
| `folding_config.json` | PE / SIMD / memory style of every layer (FINN's `folding_config_file`); edit it to trade speed for area |
| `build_config.json` | FINN's `DataflowBuildConfig`: part, board, clock, the folding file and the steps from code generation to a bitfile |
| `build.py` | runs that build (`python build.py`; `--check` checks FINN and Vivado are there) |
| `estimate.md`, `estimate.json` | FINN's per-layer cycles and LUT / BRAM / URAM / DSP estimates against the part, what meets the target |
| `verification.json` | each pipeline step's check and the hardware graph against {v.reference} |

## To a bitfile

With Vivado and Vitis HLS on PATH (source Vivado's `settings64.sh`) and finn-plus installed with
its dependencies:

```bash
python build.py                                   # or: finn build build_config.json dataflow_partition.onnx
```

FINN writes the stitched IP, the bitfile, the PYNQ driver and a deployment package under
`{_build_config(e.part, e.clock_mhz, "folding_config.json")["output_dir"]}/`
(`--output-dir` to choose). The specialized HLS / RTL layers are simulated only there (cppsim /
rtlsim need Vivado); what was verified here is the hardware-layer graph before specialization,
and folding does not change what a layer computes.
"""


def _accumulator_line(e: Estimate) -> str:
    if not e.accumulators:
        return ""
    held = sum(c.holds for c in e.accumulators)
    saved = sum(c.luts_saved for c in e.accumulators)
    return (
        f"\n- Accumulators (A2QSpec): {held} of {len(e.accumulators)} layers within their promised width after FINN's "
        f"MinimizeAccumulatorWidth; {saved:,.0f} LUTs saved against unconstrained accumulators (`estimate.md`)."
    )


def _write_json(path: str, data: Any) -> None:
    write_text(path, json.dumps(data, indent=2, default=plain))
